"""The node-pool ScaledObject's PromQL, evaluated by `promtool test rules` (real Prometheus engine)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from gpuaas.manifests import node_pool
from tests.support.prometheus import require_monitoring


def _pool(**kwargs: object) -> node_pool.NodePool:
    return node_pool.NodePool("cluster.x-k8s.io/v1beta1", "MachineDeployment", "gpu", "default", "http://x",
                              **kwargs)  # type: ignore[arg-type]


def _promtool(tmp_path: Path, series: list[dict], expected: list[dict],
              pool: node_pool.NodePool | None = None) -> subprocess.CompletedProcess:
    query = node_pool.scaled_object(pool or _pool())["spec"]["triggers"][0]["metadata"]["query"]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(
        {"groups": [{"name": "t", "rules": [{"record": "gpus_wanted", "expr": query}]}]}))
    (tmp_path / "test.yaml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yaml"], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series,
                   "promql_expr_test": [{"expr": "gpus_wanted", "eval_time": "2m", "exp_samples": expected}]}]}))
    return subprocess.run([require_monitoring().promtool, "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True,
                          check=False)


def _node(node: str, gpus: int, pool: str | None) -> list[dict]:
    """kube-state-metrics' series for a node: its allocatable GPUs and (allowlisted) its pool label."""
    labels = f',label_gpuaas_io_node_pool="{pool}"' if pool else ""
    return [{"series": f'kube_node_status_allocatable{{resource="nvidia_com_gpu",node="{node}"}}', "values": f"{gpus}x3"},
            {"series": f'kube_node_labels{{node="{node}"{labels}}}', "values": "1x3"}]


def _pending(queue: str, gpus: int) -> dict:
    return {"series": f'kueue_cluster_queue_resource_pending{{resource="nvidia.com/gpu",cluster_queue="{queue}"}}',
            "values": f"{gpus}x3"}


def test_wanted_gpus_are_the_pools_allocatable_plus_kueues_pending(tmp_path: Path) -> None:
    done = _promtool(tmp_path, [*_node("gpu-1", 8, "gpu"), *_node("gpu-2", 8, "gpu"), *_node("other-1", 8, "other"),
                                *_node("plain-1", 8, None), _pending("team-a", 4), _pending("team-b", 8)],
                     [{"labels": "gpus_wanted", "value": 28}])   # 16 (the pool's 2 nodes) + 12 pending; others not
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_pool_with_no_nodes_wants_the_pending_gpus(tmp_path: Path) -> None:
    """Issue 10 item 4: with zero pool nodes the query was empty, so the pool never grew from 0."""
    done = _promtool(tmp_path, [*_node("other-1", 8, "other"), _pending("team-a", 12)],
                     [{"labels": "gpus_wanted", "value": 12}])
    assert done.returncode == 0, done.stdout + done.stderr


def test_only_the_pools_cluster_queues_pending_gpus_count(tmp_path: Path) -> None:
    """Kueue's pending metric has no flavor: the ClusterQueues whose GPUs this pool serves are named."""
    done = _promtool(tmp_path, [*_node("gpu-1", 8, "gpu"), _pending("team-a", 4), _pending("infra", 8)],
                     [{"labels": "gpus_wanted", "value": 12}], _pool(cluster_queues="team-.*"))
    assert done.returncode == 0, done.stdout + done.stderr


def test_nothing_pending_holds_the_current_size(tmp_path: Path) -> None:
    done = _promtool(tmp_path, [*_node("gpu-1", 8, "gpu")], [{"labels": "gpus_wanted", "value": 8}])
    assert done.returncode == 0, done.stdout + done.stderr


def test_keda_never_shrinks_the_pool_by_itself() -> None:
    """With no demand (or missing metrics reading 0) KEDA would take a min-0 target to 0 after its
    cooldown, bypassing the HPA's disabled scale-down; paused-scale-in stops that (KEDA v2.20
    scaleToZeroOrIdle returns on NeedToPauseScaleIn) and disables the HPA's scale-down."""
    (rendered,) = [o for o in node_pool.kubernetes() if o["kind"] == "ScaledObject"]
    assert rendered["metadata"]["annotations"]["autoscaling.keda.sh/paused-scale-in"] == "true"
    assert rendered["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"] == {
        "selectPolicy": "Disabled"}
