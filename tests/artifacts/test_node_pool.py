"""The node-pool ScaledObject's PromQL, evaluated by `promtool test rules` (real Prometheus engine)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from gpuaas.manifests import node_pool
from tests.support.prometheus import require_monitoring


def _promtool(tmp_path: Path, series: list[dict], expected: list[dict]) -> subprocess.CompletedProcess:
    pool = node_pool.NodePool("cluster.x-k8s.io/v1beta1", "MachineDeployment", "gpu", "default", "http://x",
                              node_regex="gpu-.*")
    query = node_pool.scaled_object(pool)["spec"]["triggers"][0]["metadata"]["query"]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(
        {"groups": [{"name": "t", "rules": [{"record": "gpus_wanted", "expr": query}]}]}))
    (tmp_path / "test.yaml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yaml"], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series,
                   "promql_expr_test": [{"expr": "gpus_wanted", "eval_time": "2m", "exp_samples": expected}]}]}))
    return subprocess.run([require_monitoring().promtool, "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True,
                          check=False)


def _allocatable(node: str, gpus: int) -> dict:
    return {"series": f'kube_node_status_allocatable{{resource="nvidia_com_gpu",node="{node}"}}',
            "values": f"{gpus}x3"}


def _pending(queue: str, gpus: int) -> dict:
    return {"series": f'kueue_cluster_queue_resource_pending{{resource="nvidia.com/gpu",cluster_queue="{queue}"}}',
            "values": f"{gpus}x3"}


def test_wanted_gpus_are_the_pools_allocatable_plus_kueues_pending(tmp_path: Path) -> None:
    done = _promtool(tmp_path, [_allocatable("gpu-1", 8), _allocatable("gpu-2", 8), _allocatable("cpu-1", 8),
                                _pending("team-a", 4), _pending("team-b", 8)],
                     [{"labels": "gpus_wanted", "value": 28}])          # 16 (pool) + 12 pending; cpu-1 not in pool
    assert done.returncode == 0, done.stdout + done.stderr


def test_nothing_pending_holds_the_current_size(tmp_path: Path) -> None:
    done = _promtool(tmp_path, [_allocatable("gpu-1", 8)], [{"labels": "gpus_wanted", "value": 8}])
    assert done.returncode == 0, done.stdout + done.stderr


def test_missing_node_metrics_give_no_value_so_keda_holds_instead_of_scaling_to_zero(tmp_path: Path) -> None:
    done = _promtool(tmp_path, [_pending("team-a", 4)], [])
    assert done.returncode == 0, done.stdout + done.stderr
