"""What the reactions observe, read over real HTTP: owner chains, tenants, release records."""

from __future__ import annotations

import pytest

from engine.apiserver import ApiServer
from steps.gateways import resources as R
from steps.model.owners import resolve_owners
from steps.model.state import _predictor_of, predictor_names
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


class _Reads:
    """The gateway, with every read it serves written down as (verb, plural, name)."""

    def __init__(self, kube: object) -> None:
        self.kube, self.calls = kube, []

    def get(self, resource: R.Resource, name: str, namespace: str | None = None) -> dict | None:
        self.calls.append(("get", resource.plural, name))
        return self.kube.get(resource, name, namespace)  # type: ignore[attr-defined]

    def list(self, resource: R.Resource, namespace: str | None = None, *args: object) -> list[dict]:
        self.calls.append(("list", resource.plural, None))
        return self.kube.list(resource, namespace, *args)  # type: ignore[attr-defined]


ISVC = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "llm", "namespace": NS, "uid": "uid-llm"}, "spec": {"predictor": {}}}


def _deployment(api: ApiServer, name: str, controller: dict) -> None:
    api.store.create(R.DEPLOYMENT, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {
        "name": name, "namespace": NS, "ownerReferences": [{**controller, "controller": True}]},
        "spec": {"replicas": 1}}, NS)


BY_ISVC = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "name": "llm", "uid": "uid-llm"}
BY_REVISION = {"apiVersion": "serving.knative.dev/v1", "kind": "Revision", "name": "llm-predictor-00001",
               "uid": "uid-rev"}


def test_the_predictor_names_are_kserves() -> None:
    """kserve pkg/constants PredictorServiceName (and DefaultPredictorServiceName up to v0.15), by hand."""
    assert predictor_names(ISVC) == ["llm-predictor", "llm-predictor-default"]
    named = {**ISVC, "spec": {"predictor": {"name": "blue"}}}
    assert predictor_names(named) == ["llm-blue-predictor", "llm-predictor", "llm-predictor-default"]
    assert predictor_names({"metadata": {}}) == []


@pytest.mark.parametrize(("spec", "made", "found", "asked"), [
    # the isvc's explainer is also its Deployment (and sorts first): only the predictor's name is asked for
    ({}, [("llm-explainer", BY_ISVC), ("llm-predictor", BY_ISVC)], "llm-predictor", ["llm-predictor"]),
    # a named predictor (KServe >= 0.20, canary rollouts): {isvc}-{name}-predictor
    ({"name": "blue"}, [("llm-blue-predictor", BY_ISVC)], "llm-blue-predictor", ["llm-blue-predictor"]),
    # an InferenceService KServe <= 0.15 kept on its old name
    ({}, [("llm-predictor-default", BY_ISVC)], "llm-predictor-default", ["llm-predictor", "llm-predictor-default"]),
    # Serverless: Knative's Deployment (named after the Revision) and, here, one of the name the Revision controls
    ({}, [("llm-predictor-00001-deployment", BY_REVISION), ("llm-predictor", BY_REVISION)], None,
     ["llm-predictor", "llm-predictor-default"]),
    ({}, [], None, ["llm-predictor", "llm-predictor-default"]),
], ids=["explainer-too", "named", "default-suffix", "serverless", "none"])
def test_the_predictor_is_read_by_the_names_kserve_gives_it_never_listed(
        api: ApiServer, spec: dict, made: list, found: str | None, asked: list[str]) -> None:
    for name, controller in made:
        _deployment(api, name, controller)
    reads = _Reads(gateway_for(api))
    predictor = _predictor_of(reads, {**ISVC, "spec": {"predictor": spec}})
    assert (predictor or {}).get("metadata", {}).get("name") == found
    assert reads.calls == [("get", "deployments", name) for name in asked]
    if predictor is not None:
        assert (predictor["apiVersion"], predictor["kind"]) == ("apps/v1", "Deployment")
