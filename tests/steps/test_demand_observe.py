"""The on-idle step reads the cohort's demand from the cluster (steps.reactions.on_idle.observe_demand),
against the local Kubernetes-API-compatible server, with the answer worked out by hand:

cohort gpuaas: ClusterQueue tenant-a (8 GPUs nominal, 8 in use) and tenant-b (8 nominal, 6 in use): 2 free.
team-a's 4-GPU Job is idle on node-1 (alone there); team-b has a pending Workload asking 6 GPUs (fits into
2 + 4), one asking 16 (never fits), one deactivated (not pending) and one in another cohort's queue."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from steps.gateways import resources as R
from steps.plan import ReactionRequest
from steps.policy import IdleSettings
from steps.reactions import StepContext
from steps.reactions.on_idle import observe_demand
from tests.observability.cluster_objects import Cluster
from tests.support.apiserver import gateway_for, running_apiserver


def cluster_queue(name: str, cohort: str, nominal: int, used: int) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"cohortName": cohort, "resourceGroups": [
        {"coveredResources": ["nvidia.com/gpu"], "flavors": [
            {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": nominal}]}]}]},
        "status": {"flavorsUsage": [{"name": "a100", "resources": [{"name": "nvidia.com/gpu", "total": used}]}]}}


@pytest.fixture
def world() -> Iterator[tuple[Cluster, Any, dict[str, Any]]]:
    with running_apiserver() as api:
        c = Cluster(api.store)
        for ns, tenant in (("team-a", "tenant-a"), ("team-b", "tenant-b"), ("team-x", "other")):
            c.namespace(ns, tenant)
            c.create(R.LOCAL_QUEUE, {"metadata": {"name": "default", "namespace": ns}, "spec": {"clusterQueue": tenant}})
        c.create(R.CLUSTER_QUEUE, cluster_queue("tenant-a", "gpuaas", 8, 8))
        c.create(R.CLUSTER_QUEUE, cluster_queue("tenant-b", "gpuaas", 8, 6))
        c.create(R.CLUSTER_QUEUE, cluster_queue("other", "elsewhere", 8, 0))
        c.create(R.NODE, {"metadata": {"name": "node-1"}})
        c.create(R.NODE, {"metadata": {"name": "node-2"}})
        job = c.create(R.JOB, {"metadata": {"name": "idle", "namespace": "team-a"}, "spec": {"parallelism": 1}})
        workload = c.workload("team-a", "job-idle-1a2b3", job, cluster_queue="tenant-a", gpus=4)
        pod = c.pod("team-a", "idle-0", job, gpus=4)
        api.store.patch(R.POD, "idle-0", {"spec": {"nodeName": "node-1"}}, "team-a")
        busy = c.create(R.JOB, {"metadata": {"name": "busy", "namespace": "team-b"}, "spec": {"parallelism": 1}})
        c.workload("team-b", "job-busy-4d5e6", busy, cluster_queue="tenant-b", gpus=6)
        other_pod = c.pod("team-b", "busy-0", busy, gpus=6)
        api.store.patch(R.POD, "busy-0", {"spec": {"nodeName": "node-2"}}, "team-b")
        for name, gpus, active, ns in (("fits", 6, True, "team-b"), ("too-big", 16, True, "team-b"),
                                       ("deactivated", 1, False, "team-b"), ("elsewhere", 1, True, "team-x")):
            c.workload(ns, f"job-{name}", None, gpus=gpus, admitted_minutes_ago=None, active=active)
        assert pod and other_pod
        yield c, gateway_for(api), workload


def demand(world: tuple[Cluster, Any, dict[str, Any]], settings: IdleSettings):  # type: ignore[no-untyped-def]
    from steps.model.state import observe_workload

    _, kube, workload = world
    context = StepContext("on-idle", {"namespace": "team-a", "workload": workload["metadata"]["name"]}, {}, kube=kube)
    ws = observe_workload(context, ReactionRequest.from_params("on-idle", context.params))
    return observe_demand(kube, ws, ws.workload_object, {"idle-0": 4}, settings)


def test_pending_work_in_the_cohort_that_fits_into_what_the_release_frees(world) -> None:  # type: ignore[no-untyped-def]
    verdict = demand(world, IdleSettings(release_on="demand"))
    assert verdict.helps
    assert verdict.details["freeGpus"] == 2 and verdict.details["releasing"] == 4
    assert [p["workload"] for p in verdict.details["pending"]] == ["team-b/job-fits", "team-b/job-too-big"]
    assert verdict.reason == ("1 pending Workload(s) in cohort gpuaas fit into the 6 GPU(s) free after the release "
                              "(first: team-b/job-fits, 6 GPU(s))")


def test_only_the_node_pool_can_make_it_help(world) -> None:  # type: ignore[no-untyped-def]
    cluster, kube, _ = world
    kube.delete(R.WORKLOAD, "job-fits", "team-b")
    assert not demand(world, IdleSettings(release_on="demand")).helps  # 16 GPUs do not fit into 6
    verdict = demand(world, IdleSettings(release_on="demand", node_pool_autoscaled=True))
    assert verdict.helps and verdict.details["emptiedNodes"] == ["node-1"]  # node-2 keeps team-b's pod
    assert cluster
