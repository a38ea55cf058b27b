"""Knative-scaled servers are never fought: no ScaledObject, no replica patch, and the record says why.

KServe's Serverless mode (OpenShift AI 2.x's default) serves a model from a Deployment that a Knative
Revision controls (knative/serving pkg/reconciler/revision/resources/deploy.go: a controller
ownerReference to the Revision); Knative's autoscaler sets its replicas and scales it to zero itself. A
KEDA ScaledObject (another HPA) or a `spec.replicas` patch on it would fight Knative's autoscaler.
"""

from __future__ import annotations

from engine.apiserver import ApiServer
from steps.gateways import resources as R
from steps.model.owners import OwnerChain, owner_reference, resolve_owners
from steps.plan import Outcome
from steps.policy import Policy
from steps.reactions import on_admitted, release_workers
from steps.strategies import NONE, strategy_for
from tests.steps.objects import NS, Scene
from tests.steps.test_plans import request, state_of
from tests.support.apiserver import gateway_for

REVISION = "train-predictor-00001"


def test_the_owner_chain_stops_at_the_revision_and_says_knative_scales_it(api: ApiServer) -> None:
    scene = Scene.of("Deployment", knative=True)
    scene.seed(api.store)
    kube = gateway_for(api)
    chain = resolve_owners(kube, kube.get(R.WORKLOAD, scene.workload["metadata"]["name"], NS))
    assert chain.kinds() == ["Pod", "ReplicaSet", "Deployment"]
    assert chain.missing is None  # known and left alone, not "a kind the product does not know"
    assert chain.knative == f"Deployment train is controlled by Knative Revision {REVISION}"
    assert api.write_count == 0


def test_no_release_strategy_for_a_knative_server_and_the_reason_says_knative_scales_to_zero() -> None:
    scene = Scene.of("Deployment", knative=True)
    strategy = strategy_for(state_of(scene).workload, OwnerChain(owner_reference(scene.workload), tuple(scene.chain())),
                            None)
    assert strategy.name == NONE
    assert "Knative Revision" in strategy.why and "scales it to zero itself" in strategy.why


def test_release_workers_writes_nothing_and_records_why() -> None:
    scene = Scene.of("Deployment", knative=True)
    plan = release_workers.plan(request(scene), state_of(scene), Policy())
    assert plan.actions == () or list(plan.actions) == []
    assert plan.empty_outcome == Outcome.SKIPPED_BY_POLICY
    assert any("Knative" in reason and "neither makes a ScaledObject" in reason for reason in plan.reasons), plan.reasons


def test_on_admitted_makes_no_scaled_object_for_a_knative_server() -> None:
    scene = Scene.of("Deployment", knative=True)
    state = state_of(scene)
    assert state.keda_target() is None
    plan = on_admitted.plan(request(scene), state, Policy())
    assert not plan.actions and plan.empty_outcome == Outcome.NO_OP
    assert any("Knative scales it to zero itself; gpuaas makes no ScaledObject" in r for r in plan.reasons), plan.reasons
    # the same Deployment without Knative gets one: the difference is the Revision alone
    plain = Scene.of("Deployment")
    assert [a.action for a in on_admitted.plan(request(plain), state_of(plain), Policy()).actions] == \
        ["create-scaled-object"]


def test_an_inference_service_in_serverless_mode_is_left_to_knative() -> None:
    """The local engine's shape (the Workload owned by the InferenceService itself): its mode annotation,
    `Serverless` (renamed `Knative` in newer KServe), or its status, says Knative serves it."""
    for mode in ("Serverless", "Knative"):
        isvc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
                "metadata": {"name": "llm", "namespace": NS, "annotations": {"serving.kserve.io/deploymentMode": mode}}}
        assert OwnerChain(None, (isvc,)).knative == f"InferenceService llm runs in KServe's {mode} (Knative) mode"
    by_status = {"kind": "InferenceService", "metadata": {"name": "llm"}, "status": {"deploymentMode": "Serverless"}}
    assert OwnerChain(None, (by_status,)).knative
    raw = {"kind": "InferenceService", "metadata": {"name": "llm", "annotations": {
        "serving.kserve.io/deploymentMode": "RawDeployment"}}}
    assert OwnerChain(None, (raw,)).knative is None
