"""`promtool test rules` over every alerting and recording rule, with the PRODUCTION window and `for`.

Each case is a small timeline of DCGM (and Kueue / kube-state-metrics) series; promtool evaluates
the real rule file every simulated minute and compares what fires. Timeline arithmetic for the
idle alert (window W = 30m, for F = 5m, Prometheus 2.x range windows include both ends):
the condition needs a sample at the window's start, so a GPU idle since t=0 is pending at 30m and
fires at 35m; a GPU busy until 10m is pending at 41m and fires at 46m.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine.monitoring import promtool_test_rules
from gpuaas.manifests import observability as obs
from tests.support.prometheus import require_monitoring

WINDOW, FOR = "30m", "5m"
ALERT = obs.idle_alert(WINDOW, FOR)


def gpu(metric: str, *, ns: str, pod: str, gpu_index: int, spelling: str = "plain", host: str = "node-a") -> str:
    labels = {"gpu": str(gpu_index), "UUID": f"GPU-{host}-{gpu_index}", "Hostname": host,
              "modelName": "NVIDIA A100-SXM4-80GB", "device": f"nvidia{gpu_index}"}
    if spelling == "plain":
        labels.update(namespace=ns, pod=pod, container="main")
    else:  # behind a ServiceMonitor: the exporter pod's own target labels win
        labels.update(exported_namespace=ns, exported_pod=pod, exported_container="main",
                      namespace="gpu-operator", pod="nvidia-dcgm-exporter-x7k2p", container="nvidia-dcgm-exporter")
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{metric}{{{body}}}"


def unassigned_gpu(gpu_index: int) -> str:
    """A GPU no pod holds, as seen behind a ServiceMonitor: only the exporter's target labels."""
    return (f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu_index}",UUID="GPU-node-a-{gpu_index}",Hostname="node-a",'
            f'namespace="gpu-operator",pod="nvidia-dcgm-exporter-x7k2p",container="nvidia-dcgm-exporter"}}')


def firing(ns: str, pod: str, value: str = "0%") -> dict[str, Any]:
    annotations = {k: v.replace("{{ $labels.namespace }}", ns).replace("{{ $labels.pod }}", pod)
                   .replace("{{ $value | humanizePercentage }}", value) for k, v in ALERT["annotations"].items()}
    # `namespace` is the product's (the rule's label), the workload's is in workload_namespace (templated)
    labels = {**ALERT["labels"], obs.WORKLOAD_NAMESPACE_LABEL: ns}
    return {"exp_labels": {"pod": pod, **labels}, "exp_annotations": annotations}


UTIL, ENGINE = "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"

# (case id, input series [(series, values)], [(eval_time, expected firing alerts)])
ALERT_CASES: list[tuple[str, list[tuple[str, str]], list[tuple[str, list[dict[str, Any]]]]]] = [
    ("idle-plain-two-gpus",
     [(gpu(UTIL, ns="team-a", pod="nb-0", gpu_index=0), "0x60"), (gpu(UTIL, ns="team-a", pod="nb-0", gpu_index=1), "0x60")],
     [("34m", []), ("35m", [firing("team-a", "nb-0")]), ("60m", [firing("team-a", "nb-0")])]),
    ("idle-exported-spelling-engine-active",
     [(gpu(ENGINE, ns="team-b", pod="train-worker-0", gpu_index=0, spelling="exported"), "0x60"),
      (gpu(UTIL, ns="team-b", pod="train-worker-0", gpu_index=0, spelling="exported"), "0x60")],
     [("34m", []), ("35m", [firing("team-b", "train-worker-0")])]),
    ("busy-plain", [(gpu(UTIL, ns="team-a", pod="nb-0", gpu_index=0), "60x60")], [("40m", []), ("60m", [])]),
    ("busy-exported", [(gpu(ENGINE, ns="team-b", pod="ray-w-0", gpu_index=2, spelling="exported"), "0.7x60")],
     [("40m", []), ("60m", [])]),
    ("partly-busy-one-of-two-gpus-idle",
     [(gpu(UTIL, ns="team-a", pod="ray-w-1", gpu_index=0), "0x60"), (gpu(UTIL, ns="team-a", pod="ray-w-1", gpu_index=1), "45x60")],
     [("40m", []), ("60m", [])]),
    ("partly-busy-mixed-spellings-same-pod",
     [(gpu(ENGINE, ns="team-a", pod="nb-2", gpu_index=0), "0x60"),
      (gpu(ENGINE, ns="team-a", pod="nb-2", gpu_index=1, spelling="exported"), "0.3x60")],
     [("60m", [])]),
    ("below-threshold-counts-as-idle", [(gpu(UTIL, ns="team-a", pod="nb-3", gpu_index=0), "4x60")],
     [("35m", [firing("team-a", "nb-3", "4%")])]),
    ("engine-active-wins-over-coarse-util",
     # GPU_UTIL says 30% (a kernel was resident), the engine was active 1% of the time.
     [(gpu(UTIL, ns="team-a", pod="nb-4", gpu_index=0), "30x60"), (gpu(ENGINE, ns="team-a", pod="nb-4", gpu_index=0), "0.01x60")],
     [("35m", [firing("team-a", "nb-4", "1%")])]),
    ("for-boundary-busy-until-10m",
     [(gpu(UTIL, ns="team-a", pod="nb-5", gpu_index=0), "80x10 0x50")],
     [("40m", []), ("45m", []), ("46m", [firing("team-a", "nb-5")])]),
    ("busy-again-resolves", [(gpu(UTIL, ns="team-a", pod="nb-6", gpu_index=0), "0x40 90x20")],
     [("35m", [firing("team-a", "nb-6")]), ("41m", [])]),
    ("pod-younger-than-window-does-not-fire",
     [(gpu(UTIL, ns="team-a", pod="nb-7", gpu_index=0), "_x20 0x40")],
     [("45m", []), ("54m", []), ("55m", [firing("team-a", "nb-7")])]),
    ("unassigned-gpu-behind-servicemonitor-is-not-a-workload", [(unassigned_gpu(5), "0x60")], [("60m", [])]),
    ("two-pods-only-the-idle-one-fires",
     [(gpu(UTIL, ns="team-a", pod="nb-8", gpu_index=0), "0x60"),
      (gpu(UTIL, ns="team-c", pod="infer-0", gpu_index=1, spelling="exported"), "70x60")],
     [("35m", [firing("team-a", "nb-8")])]),
]


def _run(series: list[tuple[str, str]], *, alerts: list[dict[str, Any]] | None = None,
         promql: list[dict[str, Any]] | None = None) -> None:
    require_monitoring()
    test: dict[str, Any] = {"interval": "1m",
                            "input_series": [{"series": s, "values": v} for s, v in series]}
    if alerts is not None:
        test["alert_rule_test"] = alerts
    if promql is not None:
        test["promql_expr_test"] = promql
    result = promtool_test_rules(obs.rule_groups(WINDOW, FOR), {"evaluation_interval": "1m", "tests": [test]})
    assert result.returncode == 0, f"promtool failed:\n{result.stdout}\n{result.stderr}"


@pytest.mark.parametrize(("series", "checks"), [(c[1], c[2]) for c in ALERT_CASES], ids=[c[0] for c in ALERT_CASES])
def test_idle_alert(series: list[tuple[str, str]], checks: list[tuple[str, list[dict[str, Any]]]]) -> None:
    _run(series, alerts=[{"eval_time": t, "alertname": obs.ALERT_NAME, "exp_alerts": exp} for t, exp in checks])


def test_a_wrong_expectation_fails() -> None:
    """The harness itself can fail: claiming a busy pod fires must be reported by promtool."""
    with pytest.raises(AssertionError, match="promtool failed"):
        _run([(gpu(UTIL, ns="team-a", pod="nb-0", gpu_index=0), "60x60")],
             alerts=[{"eval_time": "40m", "alertname": obs.ALERT_NAME, "exp_alerts": [firing("team-a", "nb-0")]}])


def test_gpu_activity_normalises_both_spellings_and_skips_unassigned() -> None:
    _run([(gpu(UTIL, ns="team-a", pod="nb-0", gpu_index=0), "40x10"),
          (gpu(ENGINE, ns="team-b", pod="train-0", gpu_index=1, spelling="exported"), "0.25x10"),
          (gpu(UTIL, ns="team-b", pod="train-0", gpu_index=1, spelling="exported"), "90x10"),
          (unassigned_gpu(5), "0x10")],
         promql=[{"eval_time": "5m", "expr": obs.GPU_ACTIVITY, "exp_samples": [
             {"labels": f'{obs.GPU_ACTIVITY}{{namespace="team-a",pod="nb-0",Hostname="node-a",gpu="0",UUID="GPU-node-a-0"}}',
              "value": 0.4},
             {"labels": f'{obs.GPU_ACTIVITY}{{namespace="team-b",pod="train-0",Hostname="node-a",gpu="1",UUID="GPU-node-a-1"}}',
              "value": 0.25},
         ]}])


def _namespace_tenant(ns: str, tenant: str) -> tuple[str, str]:
    return (f'kube_namespace_labels{{namespace="{ns}",label_gpuaas_io_tenant="{tenant}",job="kube-state-metrics"}}', "1x10")


def test_utilization_per_project_and_per_tenant() -> None:
    # avg() is an incremental mean whose last bit depends on series order: compare rounded.
    _run([(gpu(UTIL, ns="team-a", pod="nb-0", gpu_index=0), "25x10"),
          (gpu(UTIL, ns="team-a", pod="nb-0", gpu_index=1), "75x10"),
          (gpu(UTIL, ns="team-a-dev", pod="nb-1", gpu_index=2, spelling="exported"), "100x10"),
          (gpu(UTIL, ns="team-a-dev", pod="nb-2", gpu_index=4), "0x10"),
          (gpu(UTIL, ns="team-b", pod="train-0", gpu_index=3, spelling="exported"), "10x10"),
          _namespace_tenant("team-a", "tenant-a"), _namespace_tenant("team-a-dev", "tenant-a"),
          _namespace_tenant("team-b", "tenant-b"), _namespace_tenant("no-gpus", "tenant-c")],
         promql=[
             {"eval_time": "5m", "expr": f"round({obs.NAMESPACE_UTILIZATION}, 0.0001)", "exp_samples": [
                 {"labels": '{namespace="team-a"}', "value": 0.5},
                 {"labels": '{namespace="team-a-dev"}', "value": 0.5},
                 {"labels": '{namespace="team-b"}', "value": 0.1}]},
             {"eval_time": "5m", "expr": f"round({obs.TENANT_UTILIZATION}, 0.0001)", "exp_samples": [
                 {"labels": '{tenant="tenant-a"}', "value": 0.5},
                 {"labels": '{tenant="tenant-b"}', "value": 0.1}]},
         ])


def test_allocation_and_quota_per_tenant_from_kueue() -> None:
    def cq(metric: str, queue: str, flavor: str, resource: str) -> str:
        return f'{metric}{{cluster_queue="{queue}",cohort="gpus",flavor="{flavor}",resource="{resource}"}}'

    _run([(cq("kueue_cluster_queue_resource_usage", "tenant-a", "a100", "nvidia.com/gpu"), "4x10"),
          (cq("kueue_cluster_queue_resource_usage", "tenant-a", "h100", "nvidia.com/gpu"), "2x10"),
          (cq("kueue_cluster_queue_resource_usage", "tenant-a", "a100", "cpu"), "64x10"),
          (cq("kueue_cluster_queue_resource_usage", "tenant-b", "a100", "nvidia.com/gpu"), "0x10"),
          (cq("kueue_cluster_queue_nominal_quota", "tenant-a", "a100", "nvidia.com/gpu"), "8x10"),
          (cq("kueue_cluster_queue_nominal_quota", "tenant-b", "a100", "nvidia.com/gpu"), "8x10")],
         promql=[
             {"eval_time": "5m", "expr": obs.TENANT_ALLOCATED, "exp_samples": [
                 {"labels": f'{obs.TENANT_ALLOCATED}{{tenant="tenant-a"}}', "value": 6},
                 {"labels": f'{obs.TENANT_ALLOCATED}{{tenant="tenant-b"}}', "value": 0}]},
             {"eval_time": "5m", "expr": obs.TENANT_QUOTA, "exp_samples": [
                 {"labels": f'{obs.TENANT_QUOTA}{{tenant="tenant-a"}}', "value": 8},
                 {"labels": f'{obs.TENANT_QUOTA}{{tenant="tenant-b"}}', "value": 8}]},
         ])


def test_requested_gpus_per_project_counts_running_pods_only() -> None:
    def req(ns: str, pod: str, container: str, n: str) -> tuple[str, str]:
        return ((f'kube_pod_container_resource_requests{{namespace="{ns}",pod="{pod}",container="{container}",'
                f'resource="nvidia_com_gpu",unit="integer"}}'), f"{n}x10")

    def phase(ns: str, pod: str, running: bool) -> list[tuple[str, str]]:
        return [(f'kube_pod_status_phase{{namespace="{ns}",pod="{pod}",phase="Running"}}', ("1" if running else "0") + "x10"),
                (f'kube_pod_status_phase{{namespace="{ns}",pod="{pod}",phase="Pending"}}', ("0" if running else "1") + "x10")]

    _run([req("team-a", "nb-0", "main", "2"), req("team-a", "nb-0", "sidecar", "0"), req("team-a", "pending-0", "main", "4"),
          req("team-b", "train-0", "main", "1"), *phase("team-a", "nb-0", True), *phase("team-a", "pending-0", False),
          *phase("team-b", "train-0", True)],
         promql=[{"eval_time": "5m", "expr": obs.NAMESPACE_REQUESTED, "exp_samples": [
             {"labels": f'{obs.NAMESPACE_REQUESTED}{{namespace="team-a"}}', "value": 2},
             {"labels": f'{obs.NAMESPACE_REQUESTED}{{namespace="team-b"}}', "value": 1}]}])


def test_queue_wait_p90_per_tenant() -> None:
    # 100 admissions per minute in tenant-a: 50 waited <=10s, 90 <=60s, all <=300s -> p90 = 60s.
    def bucket(le: str, per_minute: int) -> tuple[str, str]:
        return (f'kueue_admission_wait_time_seconds_bucket{{cluster_queue="tenant-a",le="{le}"}}', f"0+{per_minute}x20")

    _run([bucket("10", 50), bucket("60", 90), bucket("300", 100), bucket("+Inf", 100)],
         promql=[{"eval_time": "15m", "expr": obs.TENANT_QUEUE_WAIT_P90, "exp_samples": [
             {"labels": f'{obs.TENANT_QUEUE_WAIT_P90}{{tenant="tenant-a"}}', "value": 60}]}])


def test_borrowed_and_waiting_per_tenant_count_each_queue_once() -> None:
    """Kueue v0.19 labels its gauges with replica_role; a follower replica reports the same values."""
    def cq(metric: str, queue: str, flavor: str, role: str, instance: str = "10.0.0.1:8443") -> str:
        return (f'{metric}{{cluster_queue="{queue}",cohort="gpus",flavor="{flavor}",resource="nvidia.com/gpu",'
                f'replica_role="{role}",instance="{instance}"}}')

    series = []
    for role, instance in (("leader", "10.0.0.1:8443"), ("follower", "10.0.0.2:8443")):
        series += [(cq("kueue_cluster_queue_resource_usage", "tenant-a", "a100", role, instance), "6x10"),
                   (cq("kueue_cluster_queue_nominal_quota", "tenant-a", "a100", role, instance), "4x10"),
                   (cq("kueue_cluster_queue_resource_usage", "tenant-a", "h100", role, instance), "1x10"),
                   (cq("kueue_cluster_queue_nominal_quota", "tenant-a", "h100", role, instance), "2x10"),
                   (cq("kueue_cluster_queue_resource_usage", "tenant-b", "a100", role, instance), "1x10"),
                   (cq("kueue_cluster_queue_nominal_quota", "tenant-b", "a100", role, instance), "4x10"),
                   ((f'kueue_cluster_queue_resource_pending{{cluster_queue="tenant-b",resource="nvidia.com/gpu",'
                     f'replica_role="{role}",instance="{instance}"}}'), "3x10")]
    _run(series, promql=[
        # a100: 6 used of 4 -> 2 borrowed; h100: 1 of 2 -> none (unused quota on one flavor does not offset).
        {"eval_time": "5m", "expr": obs.TENANT_BORROWED, "exp_samples": [
            {"labels": f'{obs.TENANT_BORROWED}{{tenant="tenant-a"}}', "value": 2},
            {"labels": f'{obs.TENANT_BORROWED}{{tenant="tenant-b"}}', "value": 0}]},
        {"eval_time": "5m", "expr": obs.TENANT_ALLOCATED, "exp_samples": [
            {"labels": f'{obs.TENANT_ALLOCATED}{{tenant="tenant-a"}}', "value": 7},
            {"labels": f'{obs.TENANT_ALLOCATED}{{tenant="tenant-b"}}', "value": 1}]},
        {"eval_time": "5m", "expr": obs.TENANT_PENDING, "exp_samples": [
            {"labels": f'{obs.TENANT_PENDING}{{tenant="tenant-b"}}', "value": 3}]},
    ])
