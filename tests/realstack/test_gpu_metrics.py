"""Prometheus on the real stack: GPU series for the pods KWOK runs, and Kueue's quota metrics.

The DCGM-like exporter is the stack's one stand-in on the metrics path (no GPUs here): it gives a
Running pod that requests `nvidia.com/gpu` as many GPUs of its node, with the utilization its
annotation says. Kueue's series come from the real Kueue's authenticated metrics endpoint.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path

from kubernetes import client

from tests.support.real_cluster import RealCluster, eventually

TENANTS = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "tenants"


def _query(real_cluster: RealCluster, promql: str) -> list[dict]:
    url = f"{real_cluster.endpoint('prometheus')}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)["data"]["result"]


def test_a_running_gpu_pod_has_dcgm_series_with_its_utilization(real_cluster: RealCluster) -> None:
    real_cluster.kubectl("apply", "--server-side", "--field-manager=gpuaas-tests", "-k", str(TENANTS))
    batch = client.BatchV1Api(real_cluster.admin)
    job = batch.create_namespaced_job("team-b", {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"generateName": "idle-", "labels": {"kueue.x-k8s.io/queue-name": "team-b"}},
        "spec": {"parallelism": 1, "completions": 1, "suspend": True, "template": {
            # Both: KWOK v0.8.0 waits the jitter-delay (default 5 s) whenever it is not longer than the delay.
            "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "600s",
                                         "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "600s",
                                         "gpuaas.io/emulated-gpu-utilization": "0"}},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "registry.invalid/train:1",
                "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}}]}}},
    })
    try:
        series = eventually(
            lambda: _query(real_cluster, f'DCGM_FI_DEV_GPU_UTIL{{namespace="team-b", pod=~"{job.metadata.name}-.*"}}'),
            timeout_s=90, what=f"DCGM series for the pod of Job {job.metadata.name}")
        assert len(series) == 2, series
        assert {s["metric"]["Hostname"] for s in series} <= {"gpu-node-1", "gpu-node-2", "gpu-node-3"}
        assert all(float(s["value"][1]) == 0.0 for s in series)
    finally:
        batch.delete_namespaced_job(job.metadata.name, "team-b", propagation_policy="Background")


def test_kueue_exports_cluster_queue_quota_to_prometheus(real_cluster: RealCluster) -> None:
    real_cluster.kubectl("apply", "--server-side", "--field-manager=gpuaas-tests", "-k", str(TENANTS))
    found = eventually(
        lambda: _query(real_cluster, 'kueue_cluster_queue_nominal_quota{cluster_queue="team-a",resource="nvidia.com/gpu"}'),
        timeout_s=90, what="Kueue's nominal GPU quota of team-a in Prometheus")
    assert float(found[0]["value"][1]) == 4.0
    assert found[0]["metric"]["flavor"] == "gpu-a100"
