"""What the reactions observe, read over real HTTP: owner chains, tenants, release records."""

from __future__ import annotations

import pytest

from engine.apiserver import ApiServer
from steps.gateways import resources as R
from steps.model.owners import resolve_owners
from steps.model.tenancy import resolve_tenant
from tests.steps.objects import KINDS, NS, VERSIONS, Scene
from tests.support.apiserver import gateway_for

CHAINS = {"RayCluster": ["RayCluster"], "RayJob": ["RayJob"], "PyTorchJob": ["PyTorchJob"], "Job": ["Job"],
          "StatefulSet": ["StatefulSet"], "Notebook": ["StatefulSet", "Notebook"],
          "Deployment": ["Pod", "ReplicaSet", "Deployment"],
          "InferenceService": ["Pod", "ReplicaSet", "Deployment", "InferenceService"], "Pod": ["Pod"], "none": []}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_owner_chain_climbs_controllers(api: ApiServer, kind: str, version: str) -> None:
    scene = Scene.of(kind, version=version)
    scene.seed(api.store)
    kube = gateway_for(api)
    workload = kube.get(scene.workload_resource, scene.workload["metadata"]["name"], NS)
    chain = resolve_owners(kube, workload)
    assert chain.kinds() == CHAINS[kind]
    assert api.write_count == 0


def test_owner_gone_is_reported(api: ApiServer) -> None:
    scene = Scene.of("RayCluster")
    scene.seed(api.store)
    api.store.delete(R.RAY_CLUSTER, "train", NS)
    kube = gateway_for(api)
    chain = resolve_owners(kube, kube.get(R.WORKLOAD, scene.workload["metadata"]["name"], NS))
    assert chain.objects == () and chain.missing == f"RayCluster {NS}/train no longer exists"


@pytest.mark.parametrize("version", VERSIONS)
def test_tenant_from_admission_then_local_queue(api: ApiServer, version: str) -> None:
    admitted = Scene.of("Job", version=version)
    admitted.seed(api.store)
    kube = gateway_for(api)
    tenant = resolve_tenant(kube, admitted.workload)
    assert (tenant.cluster_queue, tenant.cohort, tenant.source) == ("team-a", "gpuaas", "admission")
    released = Scene.of("Job", version=version, status="evicted").workload   # deactivated: admission cleared
    tenant = resolve_tenant(kube, released)
    assert (tenant.cluster_queue, tenant.local_queue, tenant.source) == ("team-a", "team-a-queue", "local-queue")


def test_unknown_tenant(api: ApiServer) -> None:
    workload = Scene.of("Job", status="pending").workload
    workload["spec"]["queueName"] = "nowhere"
    tenant = resolve_tenant(gateway_for(api), workload)
    assert tenant.cluster_queue is None and tenant.source == "unknown"
