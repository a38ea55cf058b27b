"""Every reaction step, as its WorkflowTemplate's ServiceAccount, over the kind table, on real Kueue.

For each kind whose controller runs in the stack (Job and elastic Job, RayCluster through KubeRay,
PyTorchJob through the training-operator, Deployment, StatefulSet, plain Pod; Notebook and
InferenceService have no controller here) a tenant of `manifests/examples` submits one workload to
its LocalQueue, and then, as Argo would run them, `python -m steps REACTION` as
`system:serviceaccount:gpuaas:<the template's account>` with a TokenRequest token:

    admitted by Kueue -> on-admitted (dry-run for a Deployment or StatefulSet: its ScaledObject and
    the pause-keda release are the KEDA tests' subject) -> release-workers (the kind's strategy) -> release-workers again
    (no-op) -> resume-workers -> admitted again -> its pods finish -> Finished -> on-finished

After each step the Workload, the owner and the quota are read back from the real components: the
ClusterQueue's `status.flavorsReservation` and Kueue's `kueue_cluster_queue_resource_reservation`
as Prometheus scraped it. A 403 anywhere (in the step's record or in kube-apiserver's audit log)
fails the test. The tenant is team-b (policy mode enforce; team-a's example policy is dry-run).

Each step's outcome and planned actions are exact, per kind (EXPECTED): "applied or no-op" would let a
step that wrote where it should have planned nothing (or planned nothing where it should have written) pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from steps.gateways import resources as R
from steps.strategies import RELEASE_ANNOTATION
from tests.support.real_cluster import RealCluster, eventually
from tests.support.real_steps import RealSteps, StepRun
from tests.support.real_workloads import KINDS, Kind, RealWorkloads, Submitted, condition, condition_reason

ROOT = Path(__file__).resolve().parents[2]
TENANTS = ROOT / "manifests" / "examples" / "tenants"
PRODUCT = [ROOT / "manifests" / "base" / name for name in ("namespace.yaml", "rbac.yaml", "policy.yaml")]
TENANT = "team-b"


@pytest.fixture(scope="module")
def tenant(real_cluster: RealCluster) -> RealWorkloads:
    """The product's ServiceAccounts, RBAC and policy, and the example tenants, applied server-side."""
    for path in PRODUCT:
        real_cluster.kubectl("apply", "--server-side", "--field-manager=gpuaas-tests", "-f", str(path))
    real_cluster.kubectl("apply", "--server-side", "--field-manager=gpuaas-tests", "-k", str(TENANTS))
    return RealWorkloads(real_cluster, TENANT)


@pytest.fixture
def submitted_workloads(tenant: RealWorkloads) -> Iterator[list[Submitted]]:
    """What a test submitted, deleted at its end (as the tenant would) so the next one has the quota."""
    made: list[Submitted] = []
    yield made
    for item in made:
        tenant.delete(item)
    eventually(lambda: tenant.reserved_gpus(TENANT) == 0, timeout_s=120,
               what=f"ClusterQueue {TENANT} to hold nothing once the test's workloads are deleted")


def _release_target(kind: Kind, submitted: Submitted, workload: dict) -> tuple[str, str]:
    """(kind, name) of the object a release of this kind changes."""
    if kind.strategy == "deactivate-workload":
        return "Workload", workload["metadata"]["name"]
    return kind.resource.kind, submitted.name


def _assert_released(tenant: RealWorkloads, kind: Kind, submitted: Submitted, workload_name: str) -> None:
    obj = tenant.object(submitted)
    assert obj is not None, f"the release deleted {kind.name} {submitted.name}"
    if kind.strategy == "deactivate-workload":
        workload = tenant.get_workload(workload_name)
        assert workload is not None, f"Workload {workload_name} was deleted by the release"
        assert workload["spec"].get("active") is False
        eventually(lambda: condition_reason(tenant.get_workload(workload_name) or {}, "Evicted") == "Deactivated",
                   timeout_s=60, what=f"Workload {workload_name} Evicted/Deactivated")
        eventually(lambda: condition(tenant.get_workload(workload_name) or {}, "QuotaReserved") == "False",
                   timeout_s=60, what=f"Workload {workload_name} without its reservation once the job stopped")
    elif kind.strategy == "scale-to-zero":
        assert obj["spec"]["replicas"] == 0
        assert RELEASE_ANNOTATION in obj["metadata"].get("annotations", {})
    elif kind.strategy == "scale-worker-groups":
        assert obj["spec"]["parallelism"] == 0
    eventually(lambda: not tenant.live_pods(submitted), timeout_s=90,
               what=f"the pods of {kind.name} {submitted.name} gone after the release")


KIND_NAMES = [name for name in KINDS if KINDS[name].strategy != "none"]

Expected = tuple[str, tuple[str, ...]]
"""(outcome, the plan's action names in order)."""
NOTHING: Expected = ("no-op", ("mark-handled",))
"""on-admitted and on-finished write nothing for these kinds but the marker that the transition was handled
(gpuaas.io/handled-<reaction> on the Workload, steps.delivery: a hand submission on an unmarked transition is
its reaction; bookkeeping, not an effect, so the outcome stays no-op)."""
DEACTIVATED = {"release-workers": ("applied", ("deactivate-workload",)),
               "resume-workers": ("applied", ("reactivate-workload",))}
EXPECTED: dict[str, dict[str, Expected]] = {
    # on-admitted: a kind KEDA does not scale gets no ScaledObject (the plan records its release strategy
    # only); a Deployment's or StatefulSet's gets one, planned in dry-run here (outcome applied: it would
    # write; dry-run writes no marker either). on-finished: nothing of gpuaas' is left on a finished Job or
    # PyTorchJob (no ScaledObject, no loan). Both mark the transition handled (NOTHING).
    "Job": {"on-admitted": NOTHING, **DEACTIVATED, "on-finished": NOTHING},
    "elastic Job": {"on-admitted": NOTHING,
                    "release-workers": ("applied", ("scale-workers", "record-release-on-workload")),
                    "resume-workers": ("applied", ("restore-parallelism", "clear-release-on-workload")),
                    "on-finished": NOTHING},
    "RayCluster": {"on-admitted": NOTHING, **DEACTIVATED},
    "RayJob": {"on-admitted": NOTHING, **DEACTIVATED},
    "PyTorchJob": {"on-admitted": NOTHING, **DEACTIVATED, "on-finished": NOTHING},
    "Deployment": {"on-admitted": ("applied", ("create-scaled-object",)),
                   "release-workers": ("applied", ("scale-to-zero", "record-release-on-workload")),
                   "resume-workers": ("applied", ("restore-replicas",))},
    "StatefulSet": {"on-admitted": ("applied", ("create-scaled-object",)),
                    "release-workers": ("applied", ("scale-to-zero", "record-release-on-workload")),
                    "resume-workers": ("applied", ("restore-replicas", "clear-release-on-workload"))},
}


def _check(kind_name: str, reaction: str, done: StepRun) -> None:
    """The step's outcome and planned actions are exactly what EXPECTED says for this kind."""
    outcome, actions = EXPECTED[kind_name][reaction]
    planned = tuple(a["action"] for a in done.plan.get("actions") or [])
    assert (done.outcome, planned) == (outcome, actions), (
        f"{kind_name} {reaction}: expected outcome {outcome} planning {list(actions)}, found {done.outcome} "
        f"planning {list(planned)}\n{done.describe()}")


@pytest.mark.parametrize("kind_name", KIND_NAMES)
def test_release_and_resume_as_the_templates_service_account(kind_name: str, real_cluster: RealCluster,
                                                              tenant: RealWorkloads, tmp_path: Path,
                                                              submitted_workloads: list[Submitted]) -> None:
    kind = KINDS[kind_name]
    steps = RealSteps(real_cluster, tmp_path)
    name = "rt-" + kind_name.lower().replace(" ", "-")
    submitted = tenant.submit(kind, name)
    submitted_workloads.append(submitted)

    workload = tenant.admitted(submitted)
    workload_name = workload["metadata"]["name"]
    tenant.wait_quota(TENANT, kind.gpus, f"{kind_name} admitted")
    eventually(lambda: len([p for p in tenant.live_pods(submitted) if p.status.phase == "Running"]) >= 1,
               timeout_s=90, what=f"the pods of {kind_name} running")

    admitted = steps.run("on-admitted", namespace=TENANT, workload=workload_name, event="",
                         dry_run="true" if kind.keda_scaled else "false")
    _check(kind_name, "on-admitted", admitted)
    assert all(a.get("result") == "dry-run" for a in admitted.actions) if kind.keda_scaled else \
        admitted.applied == ["mark-handled"], admitted.describe()
    assert admitted.account == "gpuaas-steps"

    released = steps.run("release-workers", namespace=TENANT, workload=workload_name)
    _check(kind_name, "release-workers", released)
    assert any(r.startswith(f"strategy {kind.strategy}:") for r in released.reasons), \
        f"expected strategy {kind.strategy}:\n{released.describe()}"
    target_kind, _ = _release_target(kind, submitted, workload)
    assert any((a.get("target") or {}).get("kind") == target_kind and a.get("result") == "applied"
               for a in released.actions), f"expected an applied write to the {target_kind}:\n{released.describe()}"
    _assert_released(tenant, kind, submitted, workload_name)
    tenant.wait_quota(TENANT, kind.gpus_after_release, f"{kind_name} released")

    again = steps.run("release-workers", namespace=TENANT, workload=workload_name)
    assert (again.outcome, again.plan.get("actions") or []) == ("no-op", []), again.describe()

    if kind.resource.kind == "Deployment":
        # one Workload per pod: at 0 replicas Kueue removes them, so a Deployment is resumed by name
        # (docs/reactions.md)
        resumed = steps.run("resume-workers", namespace=TENANT, workload="",
                            target=f"{kind.resource.kind}/{submitted.name}")
    else:
        resumed = steps.run("resume-workers", namespace=TENANT, workload=workload_name)
    _check(kind_name, "resume-workers", resumed)
    readmitted = tenant.admitted(submitted)
    tenant.wait_quota(TENANT, kind.gpus, f"{kind_name} resumed")
    restored = tenant.object(submitted) or {}
    assert RELEASE_ANNOTATION not in (restored["metadata"].get("annotations") or {})
    assert RELEASE_ANNOTATION not in (readmitted["metadata"].get("annotations") or {})

    if not kind.finishes:
        return
    eventually(lambda: len([p for p in tenant.live_pods(submitted) if p.status.phase == "Running"]) >= 1,
               timeout_s=90, what=f"the pods of {kind_name} running again")
    eventually(lambda: tenant.finish_pods(submitted) == 0 and not tenant.live_pods(submitted), timeout_s=120,
               what=f"every pod of {kind_name} completed")
    finished = eventually(lambda: (w := tenant.get_workload(readmitted["metadata"]["name"])) and
                          condition(w, "Finished") == "True" and w, timeout_s=120,
                          what=f"the Workload of {kind_name} Finished")
    assert condition_reason(finished, "Finished") == "Succeeded"
    tenant.wait_quota(TENANT, 0, f"{kind_name} finished")
    done = steps.run("on-finished", namespace=TENANT, workload=finished["metadata"]["name"], event="")
    _check(kind_name, "on-finished", done)


def test_a_plain_pod_is_never_released(real_cluster: RealCluster, tenant: RealWorkloads, tmp_path: Path,
                                       submitted_workloads: list[Submitted]) -> None:
    """Stopping a plain pod deletes it: release-workers skips it by policy and the quota stays held."""
    kind = KINDS["Pod"]
    steps = RealSteps(real_cluster, tmp_path)
    submitted = tenant.submit(kind, "rt-pod")
    submitted_workloads.append(submitted)
    workload = tenant.admitted(submitted)
    tenant.wait_quota(TENANT, kind.gpus, "a plain pod admitted")
    released = steps.run("release-workers", namespace=TENANT, workload=workload["metadata"]["name"])
    assert (released.outcome, released.plan.get("actions") or []) == ("skipped-by-policy", []), released.describe()
    assert tenant.object(submitted) is not None
    assert condition(tenant.get_workload(workload["metadata"]["name"]) or {}, "Admitted") == "True"
    tenant.wait_quota(TENANT, kind.gpus, "a plain pod after release-workers")


NOTEBOOK = Kind("Notebook", R.NOTEBOOK, lambda name, namespace, queue: {}, gpus=1, strategy="stop-notebook")
INFERENCE_SERVICE = Kind("InferenceService", R.INFERENCE_SERVICE, lambda name, namespace, queue: {}, gpus=1,
                         strategy="none")
"""Owners whose controller does not run here (the test creates their StatefulSet or Deployment)."""


def _controlled_by(owner: dict) -> dict:
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": False}


def test_owners_without_their_controller_here(real_cluster: RealCluster, tenant: RealWorkloads, tmp_path: Path,
                                              submitted_workloads: list[Submitted]) -> None:
    """A Notebook and a raw-deployment InferenceService: their CRDs are installed, their controllers
    (Kubeflow's notebook controller, KServe) do not run here. The test creates what each controller
    would (the Notebook's StatefulSet, the InferenceService's predictor Deployment, owned by them), so
    Kueue admits the pods and the steps climb the real owner chain. What is judged is the product's
    own decision and write: the Notebook is stopped through `kubeflow-resource-stopped` (and resumed);
    an InferenceService without KEDA is never released. The quota effect of the Notebook's stop is
    the notebook controller's (StatefulSet to 0), which is not here: the StatefulSet row proves it."""
    steps = RealSteps(real_cluster, tmp_path)
    notebook = tenant.gateway.create(R.NOTEBOOK, {
        "apiVersion": "kubeflow.org/v1", "kind": "Notebook", "metadata": {"name": "rt-notebook"},
        "spec": {"template": {"spec": {"containers": [{"name": "rt-notebook", "image": "registry.invalid/jupyter:1"}]}}}},
        TENANT)
    submitted_workloads.append(Submitted(NOTEBOOK, TENANT, "rt-notebook", notebook["metadata"]["uid"]))
    stateful = KINDS["StatefulSet"].build("rt-notebook", TENANT, TENANT)
    stateful["metadata"]["ownerReferences"] = [_controlled_by(notebook)]
    created = tenant.gateway.create(R.STATEFUL_SET, stateful, TENANT)
    running = Submitted(KINDS["StatefulSet"], TENANT, "rt-notebook", created["metadata"]["uid"])
    workload = tenant.admitted(running)["metadata"]["name"]

    released = steps.run("release-workers", namespace=TENANT, workload=workload)
    planned = [a["action"] for a in released.plan.get("actions") or []]
    assert (released.outcome, planned) == ("applied", ["stop-notebook", "record-release-on-workload"]), \
        released.describe()
    assert any(r.startswith("strategy stop-notebook:") for r in released.reasons), released.describe()
    stopped = tenant.get(R.NOTEBOOK, "rt-notebook") or {}
    annotations = stopped["metadata"].get("annotations") or {}
    assert "kubeflow-resource-stopped" in annotations and RELEASE_ANNOTATION in annotations
    resumed = steps.run("resume-workers", namespace=TENANT, workload=workload)
    planned = [a["action"] for a in resumed.plan.get("actions") or []]
    assert (resumed.outcome, planned) == ("applied", ["resume-notebook", "clear-release-on-workload"]), \
        resumed.describe()
    annotations = (tenant.get(R.NOTEBOOK, "rt-notebook") or {})["metadata"].get("annotations") or {}
    assert "kubeflow-resource-stopped" not in annotations and RELEASE_ANNOTATION not in annotations

    isvc = tenant.gateway.create(R.INFERENCE_SERVICE, {
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "rt-isvc", "annotations": {"serving.kserve.io/deploymentMode": "RawDeployment"}},
        "spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"}, "storageUri": "pvc://models/x"}}}},
        TENANT)
    submitted_workloads.append(Submitted(INFERENCE_SERVICE, TENANT, "rt-isvc", isvc["metadata"]["uid"]))
    predictor = KINDS["Deployment"].build("rt-isvc-predictor", TENANT, TENANT)
    predictor["metadata"]["ownerReferences"] = [_controlled_by(isvc)]
    created = tenant.gateway.create(R.DEPLOYMENT, predictor, TENANT)
    serving = Submitted(KINDS["Deployment"], TENANT, "rt-isvc-predictor", created["metadata"]["uid"])
    workload = tenant.admitted(serving)["metadata"]["name"]
    prepared = steps.run("on-admitted", namespace=TENANT, workload=workload, event="", dry_run="true")
    # KServe's predictor Deployment is KEDA's target: its ScaledObject is planned (dry-run: would be written)
    planned = [(a["action"], a.get("result")) for a in prepared.actions]
    assert (prepared.outcome, planned) == ("applied", [("create-scaled-object", "dry-run")]), prepared.describe()
    skipped = steps.run("release-workers", namespace=TENANT, workload=workload)
    assert (skipped.outcome, skipped.plan.get("actions") or []) == ("skipped-by-policy", []), skipped.describe()
