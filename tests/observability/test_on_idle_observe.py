"""on-idle as a step, against the real parts: the local API server (pods, owners, Workloads,
LocalQueues, ClusterQueues, Events) and a real Prometheus scraping the DCGM-like exporters of
`gpu_stack`. The pods carry exactly the names the exporters attribute GPUs to (conftest.py).

`observe` is exercised through `observe_step` (what run_planned calls) and the whole step through
`steps.entrypoint.main` (outputs, record, exit code), with the policy and clock given in the context.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from steps.gateways import resources as R
from steps.gateways.metrics import MetricsGateway
from steps.plan import ReactionRequest
from steps.policy import IdleSettings, Policy
from steps.reactions import StepContext
from steps.reactions.on_idle import decide, observe_step, plan_step
from tests.observability.cluster_objects import Cluster, ref
from tests.observability.conftest import WINDOW_S, GpuStack
from tests.support.apiserver import gateway_for, running_apiserver

SETTINGS = IdleSettings(window_seconds=WINDOW_S, threshold=0.05, min_runtime_seconds=60, max_releases_per_hour=3)


@dataclass
class World:
    cluster: Cluster
    api: Any
    kube: Any
    metrics: MetricsGateway


@pytest.fixture
def world(gpu_stack: GpuStack) -> Iterator[World]:
    gpu_stack.wait_for_history(WINDOW_S + 1)
    with running_apiserver() as api:
        c = Cluster(api.store)
        for ns, tenant in (("team-a", "tenant-a"), ("team-b", "tenant-b"), ("team-c", "tenant-a")):
            c.namespace(ns, tenant)
            c.create(R.LOCAL_QUEUE, {"metadata": {"name": "default", "namespace": ns}, "spec": {"clusterQueue": tenant}})
        for tenant in ("tenant-a", "tenant-b"):
            c.create(R.CLUSTER_QUEUE, {"metadata": {"name": tenant}, "spec": {"cohortName": "gpuaas"}})
        # team-a: a Job whose single pod holds two idle GPUs; a Deployment pod that is busy.
        job = c.create(R.JOB, {"metadata": {"name": "finetune", "namespace": "team-a"}, "spec": {"parallelism": 1}})
        c.workload("team-a", "job-finetune-5c6d7", job, cluster_queue="tenant-a", gpus=2)
        c.pod("team-a", "nb-idle", job, gpus=2)
        deploy = c.create(R.DEPLOYMENT, {"metadata": {"name": "chat", "namespace": "team-a"}, "spec": {"replicas": 1}})
        rs = c.create(R.REPLICA_SET, {"metadata": {"name": "chat-7d9f8", "namespace": "team-a",
                                                   "ownerReferences": [ref(deploy)]}, "spec": {"replicas": 1}})
        busy_pod = c.pod("team-a", "nb-busy", rs)
        c.workload("team-a", "pod-nb-busy-1f2e3", busy_pod, cluster_queue="tenant-a")
        # team-b: one RayCluster whose two worker pods are train-idle (idle) and train-partly (a busy GPU).
        ray = c.create(R.RAY_CLUSTER, {"metadata": {"name": "train", "namespace": "team-b"}, "spec": {
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "minReplicas": 0, "maxReplicas": 2}]}})
        c.workload("team-b", "raycluster-train-8a9b0", ray, cluster_queue="tenant-b", gpus=3, count=1)
        c.pod("team-b", "train-idle", ray)
        c.pod("team-b", "train-partly", ray, gpus=2)
        # team-c: a notebook StatefulSet admitted 30 s ago (exported spelling, GPU_UTIL only).
        sts = c.create(R.STATEFUL_SET, {"metadata": {"name": "infer", "namespace": "team-c"}, "spec": {"replicas": 1}})
        c.workload("team-c", "statefulset-infer-0a1b2", sts, controller=False, cluster_queue="tenant-a",
                   admitted_minutes_ago=0.5, annotations={"kueue.x-k8s.io/job-owner-gvk": "apps/v1, Kind=StatefulSet",
                                                          "kueue.x-k8s.io/job-owner-name": "infer"})
        c.pod("team-c", "infer-idle", sts)
        yield World(c, api, gateway_for(api), MetricsGateway(gpu_stack.monitoring.prometheus_url))


def params(ns: str, pod: str, workload: str = "", dry_run: str = "false") -> dict[str, str]:
    alert = {"status": "firing", "labels": {"alertname": "GPUWorkloadIdle", "namespace": ns, "pod": pod},
             "startsAt": "2026-12-01T00:00:00Z", "fingerprint": f"fp-{pod}"}
    return {"namespace": ns, "workload": workload, "pod": pod, "alert": json.dumps(alert), "dry-run": dry_run,
            "event": "", "tenant": ""}


def context(world: World, p: dict[str, str], settings: IdleSettings = SETTINGS, metrics: Any = None) -> StepContext:
    return StepContext("on-idle", p, {}, kube=world.kube, metrics=metrics or world.metrics,
                       policy=Policy(idle=settings))


def judge(world: World, ns: str, pod: str, workload: str = "", settings: IdleSettings = SETTINGS) -> tuple[Any, Any]:
    ctx = context(world, params(ns, pod, workload), settings)
    state = observe_step(ctx, ReactionRequest.from_params("on-idle", ctx.params))
    return state, decide(state.request, state.idle, settings)


def test_idle_job_is_judged_idle(world: World) -> None:
    state, decision = judge(world, "team-a", "nb-idle")
    assert state.idle.resolution == "pod team-a/nb-idle -> Workload job-finetune-5c6d7"
    assert state.tenant == "tenant-a" and state.idle.owner["kind"] == "Job" and state.idle.pods == ("nb-idle",)
    assert len(state.idle.activity.gpus) == 2
    assert decision.verdict == "release" and decision.gpus == 2


def test_busy_pod_is_not_released(world: World) -> None:
    _, decision = judge(world, "team-a", "nb-busy")
    assert decision.verdict == "no-op" and "reached 70%" in decision.reasons[0]


class KindsMetricsUnreachable:
    """GPU activity from the real Prometheus; the kinds' own metrics (requests, progress) from a closed port:
    Prometheus failing between the two reads of one run, a fault a test cannot otherwise cause."""

    def __init__(self, real: MetricsGateway) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.real, self.dead = real, MetricsGateway(f"http://127.0.0.1:{port}", timeout_seconds=2, retries=0)

    def gpu_activity(self, *args: Any, **kwargs: Any) -> Any:
        return self.real.gpu_activity(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.dead, name)


def test_prometheus_failing_for_the_servers_request_metrics_is_a_retry(world: World) -> None:
    ctx = context(world, params("team-c", "infer-idle"), replace(SETTINGS, min_runtime_seconds=0),
                  metrics=KindsMetricsUnreachable(world.metrics))
    state = observe_step(ctx, ReactionRequest.from_params("on-idle", ctx.params))
    decision = decide(state.request, state.idle, replace(SETTINGS, min_runtime_seconds=0, kind="serving"))
    assert state.idle.kind == "serving" and state.idle.evidence is None
    assert decision.verdict == "retry" and "unreachable" in decision.reasons[0]


def test_workload_with_one_idle_and_one_busy_pod_is_not_released(world: World) -> None:
    # The alert names the idle pod; the other pod of the same RayCluster is working.
    state, decision = judge(world, "team-b", "train-idle")
    assert state.idle.pods == ("train-idle", "train-partly") and len(state.idle.activity.gpus) == 3
    assert decision.verdict == "no-op" and "reached 50%" in decision.reasons[0]


def test_young_workload_is_skipped_by_policy(world: World) -> None:
    state, decision = judge(world, "team-c", "infer-idle")
    assert state.idle.activity.gpus[0].label_spelling == "exported"
    assert decision.verdict == "skipped-by-policy" and "minimum runtime" in decision.reasons[0]
    _, decision = judge(world, "team-c", "infer-idle", settings=replace(SETTINGS, min_runtime_seconds=0))
    assert decision.verdict == "release"


def test_hourly_budget_counts_release_events_of_the_tenant(world: World) -> None:
    c = world.cluster
    recent = (datetime.now(UTC) - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    old = (datetime.now(UTC) - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    other = c.store.get(R.WORKLOAD, "statefulset-infer-0a1b2", "team-c")  # tenant-a, another namespace
    for name, stamp, count in (("a", recent, 2), ("b", old, 5)):
        c.create(R.EVENT, {"metadata": {"name": f"infer.{name}", "namespace": "team-c"},
                           "involvedObject": {**ref(other), "namespace": "team-c"}, "reason": "GPUaaSWorkersReleased",
                           "message": name, "type": "Normal", "count": count, "lastTimestamp": stamp})
    state, _ = judge(world, "team-a", "nb-idle")
    assert state.idle.releases_last_hour == 2
    _, decision = judge(world, "team-a", "nb-idle", settings=replace(SETTINGS, max_releases_per_hour=2))
    assert decision.verdict == "skipped-by-policy" and "2 release(s) in the last hour" in decision.reasons[0]
    state, _ = judge(world, "team-b", "train-idle")
    assert state.idle.releases_last_hour == 0  # tenant-b is unaffected


def test_pod_gone_falls_back_to_the_workload_name(world: World) -> None:
    state, _ = judge(world, "team-a", "nb-idle-vanished", workload="job-finetune-5c6d7")
    assert "no longer exists" in state.idle.resolution and "read by name" in state.idle.resolution
    assert state.idle.workload is not None
    state, decision = judge(world, "team-a", "nb-idle-vanished", workload="job-gone")
    assert state.idle.workload is None and decision.verdict == "no-op"


def test_prometheus_down_is_transient_only_when_metrics_matter(world: World) -> None:
    from steps.gateways.metrics import MetricsUnavailable

    down = MetricsGateway("http://127.0.0.1:9", retries=0)
    ctx = context(world, params("team-a", "nb-idle"), metrics=down)
    request = ReactionRequest.from_params("on-idle", ctx.params)
    state = observe_step(ctx, request)
    assert "unreachable" in (state.idle.metrics_error or "")
    with pytest.raises(MetricsUnavailable):
        plan_step(request, state, ctx.policy)
    ctx = context(world, params("team-c", "infer-idle"), metrics=down)
    request = ReactionRequest.from_params("on-idle", ctx.params)
    assert plan_step(request, observe_step(ctx, request), ctx.policy).empty_outcome.value == "skipped-by-policy"


# -- the whole step through the entry point ---------------------------------------------------------------
def run_step(world: World, tmp_path: Path, p: dict[str, str], settings: IdleSettings = SETTINGS,
             metrics: Any = None) -> tuple[int, dict[str, str], dict[str, Any]]:
    from steps.entrypoint import main

    params_file = tmp_path / "params.json"
    params_file.write_text(json.dumps([{"name": k, "value": v} for k, v in p.items()]))
    out = tmp_path / "outputs"
    code = main(["on-idle", str(params_file)], outputs_dir=str(out), environ={"GPUAAS_KUBE_URL": world.api.url},
                context_overrides={"metrics": metrics or world.metrics, "policy": Policy(idle=settings)})
    outputs = {f.name: f.read_text() for f in out.iterdir()}
    return code, outputs, json.loads(outputs["record"])


def test_step_releases_the_idle_job_once(world: World, tmp_path: Path) -> None:
    code, outputs, record = run_step(world, tmp_path, params("team-a", "nb-idle"))
    assert code == 0 and outputs["outcome"] == "applied", record["data"]["errors"]
    workload = world.cluster.store.get(R.WORKLOAD, "job-finetune-5c6d7", "team-a")
    assert workload["spec"]["active"] is False  # Job: deactivate-workload
    assert json.loads(workload["metadata"]["annotations"]["gpuaas.io/release"])["by"] == "on-idle"
    data = record["data"]
    assert data["metrics"]["gpusReleased"] == 2 and data["metrics"]["gpuHoursFreedPerHour"] == 2
    assert outputs["gpus-released"] == "2" and outputs["tenant"] == "tenant-a"
    assert data["observed"]["idle"]["activity"]["maxActivity"] == 0.0
    assert data["event"]["subject"] == "team-a/nb-idle"
    events = [e for e in world.cluster.store.list(R.EVENT, "team-a") if e.get("reason") == "GPUaaSWorkersReleased"]
    assert len(events) == 1
    # The alert is re-sent (group_interval): the second run changes nothing.
    writes = world.api.write_count
    code, outputs, record = run_step(world, tmp_path, params("team-a", "nb-idle"))
    assert code == 0 and outputs["outcome"] == "no-op" and "already released" in " ".join(record["data"]["plan"]["reasons"])
    assert world.api.write_count == writes
    assert outputs["gpus-released"] == "0"


def test_step_dry_run_by_policy_writes_nothing(world: World, tmp_path: Path) -> None:
    writes = world.api.write_count
    code, outputs, record = run_step(world, tmp_path, params("team-a", "nb-idle"), replace(SETTINGS, mode="dry-run"))
    assert code == 0 and [a["result"] for a in record["data"]["actions"]] == ["dry-run"] * len(record["data"]["actions"])
    assert record["data"]["actions"] and world.api.write_count == writes
    assert outputs["gpus-released"] == "0" and record["data"]["metrics"]["gpusReleasedIfEnforced"] == 2


def test_step_busy_is_no_op_and_prometheus_down_exits_75(world: World, tmp_path: Path) -> None:
    code, outputs, record = run_step(world, tmp_path, params("team-a", "nb-busy"))
    assert code == 0 and outputs["outcome"] == "no-op"
    code, outputs, record = run_step(world, tmp_path, params("team-a", "nb-idle"),
                                     metrics=MetricsGateway("http://127.0.0.1:9", retries=0))
    assert code == 75 and outputs["outcome"] == "failed" and "unreachable" in record["data"]["errors"][0]


def test_step_rejects_a_bad_alert_without_writes(world: World, tmp_path: Path) -> None:
    writes = world.api.write_count
    code, outputs, record = run_step(world, tmp_path, {**params("team-a", "nb-idle"), "alert": "{broken"})
    assert code == 0 and outputs["outcome"] == "rejected-input" and record["data"]["errors"][0].startswith("alert:")
    assert world.api.write_count == writes


def test_step_release_whose_answer_was_lost_counts_against_the_hourly_limit(world: World, tmp_path: Path) -> None:
    """Issue 10 item 7: the deactivation is committed but the API hangs up before answering. The
    record says applied, the GPUaaSWorkersReleased Event is written once, and the tenant's next
    release in the hour is measured against it."""
    from steps.reactions.on_idle import releases_in_last_hour

    world.api.faults.commit_then_fail(1, status=0, method="PATCH", path="/workloads/")
    code, outputs, record = run_step(world, tmp_path, params("team-a", "nb-idle"))
    assert code == 0 and outputs["outcome"] == "applied", record["data"]
    assert record["data"]["actions"][0]["result"] == "applied" and "answer was lost" in record["data"]["actions"][0]["note"]
    assert outputs["gpus-released"] == "2"
    events = [e for e in world.cluster.store.list(R.EVENT, "team-a") if e.get("reason") == "GPUaaSWorkersReleased"]
    assert [e["count"] for e in events] == [1]
    assert releases_in_last_hour(world.kube, "tenant-a", datetime.now(UTC)) == 1


def test_a_gpu_pod_without_samples_blocks_the_release(world: World) -> None:
    """Issue 10 item 6: the RayCluster's other GPU pod has no DCGM series at all (exporter down on its
    node, or a new pod): the idle pod's samples alone are no evidence for the workload's GPUs."""
    c = world.cluster
    c.store.delete(R.POD, "train-partly", "team-b")
    ray = c.store.get(R.RAY_CLUSTER, "train", "team-b")
    c.pod("team-b", "train-silent", ray, gpus=2)
    state, decision = judge(world, "team-b", "train-idle")
    assert state.idle.pods == ("train-idle", "train-silent")
    assert [g.pod for g in state.idle.activity.gpus] == ["train-idle"]
    assert decision.verdict == "no-op", decision
    assert "pod team-b/train-silent holds 2 GPU(s); 0 of them have DCGM samples" in decision.reasons[0]
    assert state.idle.observed()["podGpus"] == {"train-idle": 1, "train-silent": 2}
