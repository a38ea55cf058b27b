"""on-idle's observe step against the real parts: the local API server (pods, owners, Workloads,
LocalQueues, Events) and a real Prometheus scraping the DCGM-like exporters of `gpu_stack`.

The pods below carry exactly the names the exporters attribute GPUs to (see conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from steps.gateways import resources as R
from steps.gateways.metrics import MetricsGateway
from steps.reactions.on_idle import IdlePolicy, IdleRequest, decide, observe
from tests.observability.cluster_objects import Cluster, ref
from tests.observability.conftest import WINDOW_S, GpuStack
from tests.support.apiserver import gateway_for, running_apiserver

POLICY = IdlePolicy(window_seconds=WINDOW_S, threshold=0.05, min_runtime_seconds=60, max_releases_per_hour=3)


@pytest.fixture
def world(gpu_stack: GpuStack) -> Iterator[tuple[Cluster, Any, MetricsGateway]]:
    gpu_stack.wait_for_history(WINDOW_S + 1)
    with running_apiserver() as api:
        c = Cluster(api.store)
        for ns, tenant in (("team-a", "tenant-a"), ("team-b", "tenant-b"), ("team-c", "tenant-a")):
            c.namespace(ns, tenant)
            c.create(R.LOCAL_QUEUE, {"metadata": {"name": "default", "namespace": ns}, "spec": {"clusterQueue": tenant}})
        # team-a: a Job whose single pod holds two idle GPUs; a Deployment pod that is busy.
        job = c.create(R.JOB, {"metadata": {"name": "finetune", "namespace": "team-a"}, "spec": {}})
        c.workload("team-a", "job-finetune-5c6d7", job, cluster_queue="tenant-a", gpus=2)
        c.pod("team-a", "nb-idle", job, gpus=2)
        _, _, busy = c.deployment_pod_workload("team-a", "chat")
        c.store.delete(R.POD, busy["metadata"]["name"], "team-a")
        rs = c.store.get(R.REPLICA_SET, "chat-7d9f8", "team-a")
        busy_pod = c.pod("team-a", "nb-busy", rs)
        c.workload("team-a", "pod-nb-busy-1f2e3", busy_pod, cluster_queue="tenant-a")
        # team-b: one RayCluster whose two worker pods are train-idle (idle) and train-partly (busy GPU).
        ray = c.create(R.RAY_CLUSTER, {"metadata": {"name": "train", "namespace": "team-b"}, "spec": {}})
        c.workload("team-b", "raycluster-train-8a9b0", ray, cluster_queue="tenant-b", gpus=3, count=2)
        c.pod("team-b", "train-idle", ray)
        c.pod("team-b", "train-partly", ray, gpus=2)
        # team-c: a notebook StatefulSet (exported spelling, GPU_UTIL only).
        sts = c.create(R.STATEFUL_SET, {"metadata": {"name": "infer", "namespace": "team-c"}, "spec": {"replicas": 1}})
        c.workload("team-c", "statefulset-infer-0a1b2", sts, controller=False, cluster_queue="tenant-a",
                   admitted_minutes_ago=0.5)
        c.pod("team-c", "infer-idle", sts)
        yield c, gateway_for(api), MetricsGateway(gpu_stack.monitoring.prometheus_url)


def run(world: tuple[Cluster, Any, MetricsGateway], ns: str, pod: str, workload: str = "",
        policy: IdlePolicy = POLICY) -> tuple[Any, Any]:
    _, kube, metrics = world
    request = IdleRequest(namespace=ns, workload=workload, pod=pod, alert=None)
    state, policy = observe(kube, metrics, request, lambda tenant: policy)
    return state, decide(request, state, policy)


def test_idle_job_is_released(world: tuple[Cluster, Any, MetricsGateway]) -> None:
    state, decision = run(world, "team-a", "nb-idle")
    assert state.resolution == "pod team-a/nb-idle -> Workload job-finetune-5c6d7"
    assert state.tenant == "tenant-a" and state.owner["kind"] == "Job" and state.pods == ("nb-idle",)
    assert len(state.activity.gpus) == 2
    assert decision.verdict == "release" and decision.gpus == 2


def test_busy_pod_is_not_released(world: tuple[Cluster, Any, MetricsGateway]) -> None:
    _, decision = run(world, "team-a", "nb-busy")
    assert decision.verdict == "no-op" and "reached 70%" in decision.reasons[0]


def test_workload_with_one_idle_and_one_busy_pod_is_not_released(world: tuple[Cluster, Any, MetricsGateway]) -> None:
    # The alert names the idle pod; the other pod of the same RayCluster is working.
    state, decision = run(world, "team-b", "train-idle")
    assert state.pods == ("train-idle", "train-partly") and len(state.activity.gpus) == 3
    assert decision.verdict == "no-op" and "reached 50%" in decision.reasons[0]


def test_young_workload_is_skipped_by_policy(world: tuple[Cluster, Any, MetricsGateway]) -> None:
    state, decision = run(world, "team-c", "infer-idle")
    assert state.activity.gpus[0].label_spelling == "exported"
    assert decision.verdict == "skipped-by-policy" and "minimum runtime" in decision.reasons[0]
    _, decision = run(world, "team-c", "infer-idle", policy=replace(POLICY, min_runtime_seconds=0))
    assert decision.verdict == "release"


def test_hourly_budget_counts_release_events_of_the_tenant(world: tuple[Cluster, Any, MetricsGateway]) -> None:
    c, _, _ = world
    recent = (datetime.now(UTC) - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    old = (datetime.now(UTC) - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    other = c.store.get(R.WORKLOAD, "statefulset-infer-0a1b2", "team-c")  # tenant-a, another namespace
    for name, stamp, count in (("a", recent, 2), ("b", old, 5)):
        c.create(R.EVENT, {"metadata": {"name": f"infer.{name}", "namespace": "team-c"},
                           "involvedObject": {**ref(other), "namespace": "team-c"}, "reason": "GPUaaSWorkersReleased",
                           "message": name, "type": "Normal", "count": count, "lastTimestamp": stamp})
    state, decision = run(world, "team-a", "nb-idle")
    assert state.releases_last_hour == 2
    _, decision = run(world, "team-a", "nb-idle", policy=replace(POLICY, max_releases_per_hour=2))
    assert decision.verdict == "skipped-by-policy" and "2 release(s) in the last hour" in decision.reasons[0]
    state, _ = run(world, "team-b", "train-idle")
    assert state.releases_last_hour == 0  # tenant-b is unaffected


def test_pod_gone_falls_back_to_the_workload_name(world: tuple[Cluster, Any, MetricsGateway]) -> None:
    state, decision = run(world, "team-a", "nb-idle-vanished", workload="job-finetune-5c6d7")
    assert "no longer exists" in state.resolution and "read by name" in state.resolution
    assert state.workload is not None
    state, decision = run(world, "team-a", "nb-idle-vanished", workload="job-gone")
    assert state.workload is None and decision.verdict == "no-op"


def test_prometheus_down_is_a_retry_only_when_metrics_matter(world: tuple[Cluster, Any, MetricsGateway]) -> None:
    _, kube, _ = world
    down = MetricsGateway("http://127.0.0.1:9", retries=0)
    request = IdleRequest(namespace="team-a", workload="", pod="nb-idle", alert=None)
    state, policy = observe(kube, down, request, lambda tenant: POLICY)
    assert "unreachable" in (state.metrics_error or "")
    assert decide(request, state, policy).verdict == "retry"
    request = IdleRequest(namespace="team-c", workload="", pod="infer-idle", alert=None)
    state, policy = observe(kube, down, request, lambda tenant: POLICY)
    assert decide(request, state, policy).verdict == "skipped-by-policy"
