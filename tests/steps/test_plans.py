"""Every plan over the kind table x condition combinations x API versions, with no gateway (pure).

The state a reaction would observe is built directly from the scene (Workload + owner chain), so
these tests exercise exactly the decisions: what is written, to which object, and why not.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from steps.events import ResourceEvent
from steps.model.owners import OwnerChain, owner_reference
from steps.model.state import WorkloadState
from steps.model.tenancy import Tenant
from steps.model.workload import Workload
from steps.plan import Outcome, Plan, ReactionRequest
from steps.policy import Policy, parse_policy
from steps.reactions import on_admitted, on_finished, release_workers, resume_workers
from steps.strategies import (
    DEACTIVATE,
    NONE,
    PAUSE_KEDA,
    RELEASE_ANNOTATION,
    SCALE_TO_ZERO,
    SCALE_WORKERS,
    STOP_NOTEBOOK,
    read_release,
    strategy_for,
)
from tests.steps.objects import KINDS, NS, T0, VERSIONS, Scene

NOW = T0 + timedelta(hours=3)
EXPECTED_STRATEGY = {"RayCluster": DEACTIVATE, "RayJob": DEACTIVATE, "PyTorchJob": DEACTIVATE, "Job": DEACTIVATE,
                     "StatefulSet": SCALE_TO_ZERO, "Notebook": STOP_NOTEBOOK, "Deployment": SCALE_TO_ZERO,
                     "InferenceService": NONE, "Pod": NONE, "none": DEACTIVATE}


def state_of(scene: Scene, *, scaled_objects: list[dict] | None = None, event: ResourceEvent | None = None,
             now: datetime = NOW, cq: dict | None = None, leftovers: list[dict] | None = None) -> WorkloadState:
    state = WorkloadState(now=now, event=event, workload=Workload(scene.workload),
                          owners=OwnerChain(owner_reference(scene.workload), tuple(scene.chain())),
                          tenant_info=Tenant("team-a", "gpuaas", "team-a-queue", cq, "admission"),
                          prometheus_url="http://prometheus.test:9090")
    state.scaled_objects = list(scaled_objects or [])
    state.managed_scaled_objects = [so for so in state.scaled_objects
                                    if so["metadata"].get("labels", {}).get("gpuaas.io/managed-by") == "gpuaas"]
    state.leftovers = list(leftovers or [])
    record = read_release(scene.workload)
    if record:
        state.release, state.release_on = record, scene.workload
    return state


def request(scene: Scene, reaction: str = "x", **extra: str) -> ReactionRequest:
    return ReactionRequest(reaction, NS, scene.workload["metadata"]["name"], extra=extra)


def actions(plan: Plan) -> list[tuple[str, str]]:
    return [(a.action, a.resource.kind) for a in plan.actions]


# -- strategies ----------------------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_strategy_per_kind(kind: str, version: str) -> None:
    scene = Scene.of(kind, version=version)
    strategy = strategy_for(Workload(scene.workload), state_of(scene).owners, None)
    assert strategy.name == EXPECTED_STRATEGY[kind], strategy.why


@pytest.mark.parametrize("kind", ["Deployment", "InferenceService"])
def test_keda_managed_owners_are_paused(kind: str) -> None:
    scene = Scene.of(kind)
    so = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "so", "namespace": NS}}
    assert strategy_for(Workload(scene.workload), state_of(scene).owners, so).name == PAUSE_KEDA


@pytest.mark.parametrize("kind", ["RayCluster", "RayJob", "Job"])
def test_elastic_jobs_scale_worker_groups(kind: str) -> None:
    scene = Scene.of(kind, elastic=True)
    strategy = strategy_for(Workload(scene.workload), state_of(scene).owners, None)
    assert strategy.name == SCALE_WORKERS and strategy.target["kind"] == kind


def test_pytorchjob_is_never_scaled_even_if_marked_elastic() -> None:
    scene = Scene.of("PyTorchJob", elastic=True)
    assert strategy_for(Workload(scene.workload), state_of(scene).owners, None).name == DEACTIVATE


# -- release-workers -----------------------------------------------------------------------------
RELEASE_WRITES = {
    "RayCluster": [("deactivate-workload", "Workload")],
    "RayJob": [("deactivate-workload", "Workload")],
    "PyTorchJob": [("deactivate-workload", "Workload")],
    "Job": [("deactivate-workload", "Workload")],
    "StatefulSet": [("scale-to-zero", "StatefulSet"), ("record-release-on-workload", "Workload")],
    "Notebook": [("stop-notebook", "Notebook"), ("record-release-on-workload", "Workload")],
    "Deployment": [("scale-to-zero", "Deployment"), ("record-release-on-workload", "Workload")],
    "InferenceService": [],
    "Pod": [],
    "none": [("deactivate-workload", "Workload")],
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_release_plan_per_kind(kind: str, version: str) -> None:
    scene = Scene.of(kind, version=version, workers=3, gpus_per_pod=2)
    plan = release_workers.plan(request(scene), state_of(scene), Policy())
    assert actions(plan) == RELEASE_WRITES[kind]
    if plan.actions:
        first = plan.actions[0]
        patch = first.patch
        record = json.loads(patch["metadata"]["annotations"][RELEASE_ANNOTATION])
        assert record["strategy"] == EXPECTED_STRATEGY[kind] and record["tenant"] == "team-a"
        assert record["releasedAt"] == NOW.isoformat().replace("+00:00", "Z")
        assert plan.metrics["gpusReleased"] == float(Workload(scene.workload).gpus_admitted)
        if kind in ("StatefulSet", "Deployment"):
            assert patch["spec"] == {"replicas": 0} and record["previous"] == {"replicas": 3}
        if EXPECTED_STRATEGY[kind] == DEACTIVATE:
            assert patch["spec"] == {"active": False} and record["previous"] == {"active": True}
            assert first.resource.version == version
    else:
        assert plan.empty_outcome == Outcome.SKIPPED_BY_POLICY


def test_a_leader_worker_set_release_writes_the_set_alone() -> None:
    """Kueue deletes the Workload of each LeaderWorkerSet group at or beyond spec.replicas (v0.19.2
    pkg/controller/jobs/leaderworkerset/leaderworkerset_reconciler.go filterWorkloads): at 0 the
    Workload is gone, so the release record lives on the set only (seen on the real stack: the record's
    PATCH on the Workload got 404 and the step failed after releasing)."""
    scene = Scene.of("LeaderWorkerSet", workers=2)
    plan = release_workers.plan(request(scene), state_of(scene), Policy())
    assert actions(plan) == [("scale-to-zero", "LeaderWorkerSet")]
    patch = plan.actions[0].patch
    record = json.loads(patch["metadata"]["annotations"][RELEASE_ANNOTATION])
    assert patch["spec"] == {"replicas": 0} and record["previous"] == {"replicas": 2}


def test_elastic_raycluster_release_is_a_guarded_json_patch() -> None:
    scene = Scene.of("RayCluster", elastic=True, workers=3)
    plan = release_workers.plan(request(scene), state_of(scene), Policy())
    scale = plan.actions[0]
    assert scale.operation == "json-patch" and scale.resource.kind == "RayCluster"
    ops = scale.patch
    assert {"op": "test", "path": "/spec/workerGroupSpecs/0/groupName", "value": "gpu"} in ops
    assert {"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 0} in ops
    assert {"op": "replace", "path": "/spec/workerGroupSpecs/0/minReplicas", "value": 0} in ops
    record = json.loads(ops[-1]["value"][RELEASE_ANNOTATION])
    assert record["previous"] == {"workerGroups": {"gpu": {"replicas": 3, "minReplicas": 1}}}


def test_elastic_job_release_sets_parallelism_zero() -> None:
    scene = Scene.of("Job", elastic=True, workers=4)
    plan = release_workers.plan(request(scene), state_of(scene), Policy())
    assert plan.actions[0].patch["spec"] == {"parallelism": 0}


@pytest.mark.parametrize(("status", "why"), [
    ("pending", "holds no GPUs"), ("finished", "on-finished releases"), ("finished-unadmitted", "finished"),
    ("evicted", "deactivated"),
])
def test_release_is_a_no_op_without_gpus(status: str, why: str) -> None:
    scene = Scene.of("RayCluster", status=status)
    plan = release_workers.plan(request(scene), state_of(scene), Policy())
    assert not plan.actions and plan.empty_outcome == Outcome.NO_OP and why in " ".join(plan.reasons)


@pytest.mark.parametrize("where", ["workload", "owner"])
def test_exempt_workloads_are_skipped_by_policy(where: str) -> None:
    scene = Scene.of("StatefulSet", exempt_on=where)
    plan = release_workers.plan(request(scene), state_of(scene), Policy())
    assert not plan.actions and plan.empty_outcome == Outcome.SKIPPED_BY_POLICY
    assert "gpuaas.io/idle-policy: exempt" in plan.reasons[-1]


def test_tenant_in_dry_run_mode_plans_without_writing() -> None:
    scene = Scene.of("Job")
    policy = parse_policy("tenants: {team-a: {idle: {mode: dry-run}}}")
    plan = release_workers.plan(request(scene), state_of(scene), policy)
    assert plan.dry_run and plan.actions and "dry-run" in plan.reasons[-1]


def test_duplicate_release_is_a_no_op() -> None:
    scene = Scene.of("Job")
    first = release_workers.plan(request(scene), state_of(scene), Policy())
    scene.workload["metadata"].setdefault("annotations", {}).update(first.actions[0].patch["metadata"]["annotations"])
    scene.workload["spec"]["active"] = False
    again = release_workers.plan(request(scene), state_of(scene), Policy())
    assert not again.actions and "already released" in again.reasons[-1]


# -- resume-workers ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["RayCluster", "StatefulSet", "Notebook", "Deployment"])
def test_resume_restores_exactly_the_recorded_values(kind: str) -> None:
    scene = Scene.of(kind, workers=3)
    released = release_workers.plan(request(scene), state_of(scene), Policy())
    changed = released.actions[0]
    target = next((o for o in scene.chain() if o["kind"] == changed.resource.kind), scene.workload)
    _merge(target, changed.patch)
    state = state_of(scene, now=NOW + timedelta(hours=2))
    state.release, state.release_on = read_release(target), target
    plan = resume_workers.plan(request(scene), state, Policy())
    restore = plan.actions[0].patch
    assert restore["metadata"]["annotations"][RELEASE_ANNOTATION] is None
    if kind == "RayCluster":
        assert restore["spec"] == {"active": True}
    elif kind in ("StatefulSet", "Deployment"):
        assert restore["spec"] == {"replicas": 3}
    elif kind == "Notebook":
        assert restore["metadata"]["annotations"]["kubeflow-resource-stopped"] is None
    gpus = float(Workload(scene.workload).gpus_admitted)
    assert plan.metrics["gpuHoursReclaimed"] == pytest.approx(gpus * 2)


def test_resume_leaves_a_newer_decision_alone() -> None:
    scene = Scene.of("StatefulSet", workers=3)
    released = release_workers.plan(request(scene), state_of(scene), Policy())
    sts = scene.chain()[0]
    _merge(sts, released.actions[0].patch)
    sts["spec"]["replicas"] = 5  # someone scaled it up by hand since
    state = state_of(scene)
    state.release, state.release_on = read_release(sts), sts
    plan = resume_workers.plan(request(scene), state, Policy())
    assert "spec" not in plan.actions[0].patch and "left as is" in " ".join(plan.reasons)


def test_resume_without_record_is_a_no_op() -> None:
    scene = Scene.of("Job")
    plan = resume_workers.plan(request(scene), state_of(scene), Policy())
    assert not plan.actions and "nothing to resume" in plan.reasons[-1]


@pytest.mark.parametrize("kind", ["StatefulSet", "Notebook", "Deployment", "RayCluster"])
def test_resume_never_writes_a_kind_its_strategy_does_not_write(kind: str) -> None:
    """Issue 10 item 8: an interrupted resume restored the owner and cleared its record, but not the
    Workload's copy. The retry reads the copy from the Workload: it must only clear it, never turn
    `spec.replicas` (or worker groups, or annotations) into a write on the Workload."""
    scene = Scene.of(kind, workers=3, elastic=kind == "RayCluster")
    released = release_workers.plan(request(scene), state_of(scene), Policy())
    for action in released.actions:   # the release happened: owner changed, Workload has the copy
        target = scene.workload if action.resource.kind == "Workload" else next(
            o for o in scene.chain() if o["kind"] == action.resource.kind)
        if action.operation == "merge-patch":
            _merge(target, action.patch)
        else:
            target.setdefault("metadata", {}).setdefault("annotations", {})[RELEASE_ANNOTATION] = \
                scene.workload["metadata"]["annotations"].get(RELEASE_ANNOTATION) or "{}"
    record = read_release(scene.workload)
    assert record is not None and record["strategy"] != DEACTIVATE
    state = state_of(scene)             # the owner no longer carries the record: only the Workload does
    assert state.release_on is scene.workload
    plan = resume_workers.plan(request(scene), state, Policy())
    assert [(a.action, a.resource.kind) for a in plan.actions] == [("clear-release-on-workload", "Workload")]
    assert plan.actions[0].patch == {"metadata": {"annotations": {RELEASE_ANNOTATION: None}}}
    assert "no longer carries the release record" in " ".join(plan.reasons)
    # and the pure helper refuses the wrong kind outright
    from steps.strategies import resume_actions
    wrong, notes = resume_actions(record, scene.workload, "retry")
    assert wrong == [] and "never writes a Workload" in notes[0]


def _merge(obj: dict, patch: dict) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(obj.get(key), dict):
            _merge(obj[key], value)
        elif value is None:
            obj.pop(key, None)
        else:
            obj[key] = value


# -- on-admitted ---------------------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_on_admitted_per_kind(kind: str, version: str) -> None:
    scene = Scene.of(kind, version=version)
    plan = on_admitted.plan(request(scene), state_of(scene), Policy())
    assert plan.metrics["queueWaitSeconds"] == 60
    if kind in ("Deployment", "StatefulSet", "InferenceService"):
        assert actions(plan) == [("create-scaled-object", "ScaledObject")]
        so = plan.actions[0].body
        owner = scene.chain()[-1]
        assert so["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]
        assert so["metadata"]["labels"]["gpuaas.io/managed-by"] == "gpuaas"
        assert so["spec"]["idleReplicaCount"] == 0
        assert so["spec"]["minReplicaCount"] == so["spec"]["maxReplicaCount"] == scene.workers
        target = "train-predictor" if kind == "InferenceService" else "train"
        assert so["spec"]["scaleTargetRef"]["name"] == target
    else:
        assert not plan.actions
        assert any(r.startswith("release strategy: ") for r in plan.reasons)


def test_activity_query_covers_both_label_spellings_and_metrics() -> None:
    scene = Scene.of("Deployment")
    query = on_admitted.plan(request(scene), state_of(scene), Policy()).actions[0].body["spec"]["triggers"][0][
        "metadata"]["query"]
    for fragment in ('namespace="team-a",pod=~"train-[a-z0-9]+-[a-z0-9]+"',
                     'exported_namespace="team-a",exported_pod=~"train-[a-z0-9]+-[a-z0-9]+"',
                     "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL", "[1800s]"):
        assert fragment in query
    assert "vector(0)" not in query


@pytest.mark.parametrize(("status", "why"), [("pending", "not admitted"), ("quota-reserved", "not admitted"),
                                             ("finished", "finished"), ("evicted", "not admitted")])
def test_on_admitted_stale_or_out_of_order(status: str, why: str) -> None:
    scene = Scene.of("Deployment", status=status)
    plan = on_admitted.plan(request(scene), state_of(scene), Policy())
    assert not plan.actions and why in plan.reasons[-1]


def test_on_admitted_keeps_a_tenants_own_scaled_object() -> None:
    scene = Scene.of("Deployment")
    theirs = {"metadata": {"name": "mine", "namespace": NS}, "spec": {"scaleTargetRef": {"name": "train"}}}
    plan = on_admitted.plan(request(scene), state_of(scene, scaled_objects=[theirs]), Policy())
    assert not plan.actions and "tenant's own ScaledObject mine" in plan.reasons[-1]


def test_on_admitted_updates_ours_when_policy_changes() -> None:
    scene = Scene.of("Deployment")
    created = on_admitted.plan(request(scene), state_of(scene), Policy()).actions[0].body
    same = on_admitted.plan(request(scene), state_of(scene, scaled_objects=[created]), Policy())
    assert not same.actions and "already as wanted" in same.reasons[-1]
    faster = parse_policy("idle: {window: 10m, minRuntime: 5m}")
    changed = on_admitted.plan(request(scene), state_of(scene, scaled_objects=[created]), faster)
    assert actions(changed) == [("update-scaled-object", "ScaledObject")]
    assert changed.actions[0].patch["spec"]["cooldownPeriod"] == 600


def test_on_admitted_exempt_is_skipped() -> None:
    scene = Scene.of("Deployment", exempt_on="workload")
    plan = on_admitted.plan(request(scene), state_of(scene), Policy())
    assert not plan.actions and plan.empty_outcome == Outcome.SKIPPED_BY_POLICY
    assert plan.metrics["queueWaitSeconds"] == 60


def test_event_for_an_earlier_workload_with_the_same_name() -> None:
    """Resubmitted a day later: the event names the old uid; the live Workload is judged on its own."""
    old = Scene.of("Job", status="finished").workload
    old["metadata"]["uid"] = "uid-yesterday"
    scene = Scene.of("Job", status="pending")
    state = state_of(scene, event=ResourceEvent("UPDATE", old))
    plan = on_finished.plan(request(scene), state, Policy())
    assert not plan.actions
    assert "earlier Workload" in plan.reasons[0] and "not finished" in plan.reasons[-1]


# -- on-finished ---------------------------------------------------------------------------------
def test_on_finished_records_gpu_hours() -> None:
    scene = Scene.of("Job", status="finished", workers=3, gpus_per_pod=2)
    plan = on_finished.plan(request(scene), state_of(scene), Policy())
    assert plan.metrics["gpuHoursUsed"] == pytest.approx(6 * 2.0)
    assert not plan.actions and plan.empty_outcome == Outcome.NO_OP


def test_on_finished_before_admission_uses_zero_gpu_hours() -> None:
    scene = Scene.of("Job", status="finished-unadmitted")
    plan = on_finished.plan(request(scene), state_of(scene), Policy())
    assert plan.metrics["gpuHoursUsed"] == 0 and "no admission" in " ".join(plan.reasons)


@pytest.mark.parametrize("status", ["pending", "admitted", "quota-reserved"])
def test_on_finished_when_not_finished_now_is_a_no_op(status: str) -> None:
    scene = Scene.of("Job", status=status)
    plan = on_finished.plan(request(scene), state_of(scene), Policy())
    assert not plan.actions and "not finished" in plan.reasons[-1]


def _cq_with_loan(uid: str = "uid-wl", gpus: int = 2) -> dict[str, Any]:
    key = f"{NS}/job-train-1a2b3"
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": "team-a", "resourceVersion": "7", "annotations": {"gpuaas.io/lent-gpus": json.dumps(
                {key: {"flavor": "a100", "gpus": gpus, "uid": uid, "lentAt": "2026-01-01T12:00:00Z"}})}},
            "spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 10}]}]}]},
            "status": {"flavorsUsage": [{"name": "a100", "resources": [{"name": "nvidia.com/gpu", "total": 0}]}]}}


def test_on_finished_returns_lent_quota_conditionally() -> None:
    scene = Scene.of("Job", status="finished")
    plan = on_finished.plan(request(scene), state_of(scene, cq=_cq_with_loan()), Policy())
    assert actions(plan) == [("return-lent-quota", "ClusterQueue")]
    action = plan.actions[0]
    assert action.resource_version == "7" and action.patch["metadata"]["annotations"]["gpuaas.io/lent-gpus"] is None
    assert action.patch["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == 8
    assert plan.metrics["gpusReturned"] == 2


def test_on_finished_keeps_a_loan_of_an_earlier_workload() -> None:
    scene = Scene.of("Job", status="finished")
    plan = on_finished.plan(request(scene), state_of(scene, cq=_cq_with_loan(uid="uid-yesterday")), Policy())
    assert not plan.actions and "earlier Workload" in " ".join(plan.reasons)


def test_on_finished_scales_down_a_rayjobs_kept_cluster() -> None:
    scene = Scene.of("RayJob", status="finished", workers=2)
    cluster = next(o for _, o in scene.owners if o["kind"] == "RayCluster")
    plan = on_finished.plan(request(scene), state_of(scene, leftovers=[cluster]), Policy())
    assert actions(plan) == [("scale-worker-groups", "RayCluster")]


def test_on_finished_deletes_only_our_orphaned_scaled_objects() -> None:
    scene = Scene.of("Deployment", status="finished")
    ours = on_admitted.plan(request(scene), state_of(Scene.of("Deployment")), Policy()).actions[0].body
    theirs = {"metadata": {"name": "theirs", "namespace": NS, "labels": {}}, "spec": {}}
    state = state_of(scene, scaled_objects=[ours, theirs])
    kept = on_finished.plan(request(scene), state, Policy())
    assert not kept.actions and "stays" in " ".join(kept.reasons)   # owner lives on
    state.owners = OwnerChain(state.owners.reference, ())              # owner gone
    gone = on_finished.plan(request(scene), state, Policy())
    assert actions(gone) == [("delete-scaled-object", "ScaledObject")] and gone.actions[0].name == "gpuaas-train"


def test_on_finished_records_reclaimed_hours_of_a_release() -> None:
    scene = Scene.of("Job", status="finished", workers=2, gpus_per_pod=1)
    released = (T0 + timedelta(hours=1)).astimezone(UTC).isoformat().replace("+00:00", "Z")
    scene.workload["metadata"]["annotations"] = {RELEASE_ANNOTATION: json.dumps(
        {"strategy": DEACTIVATE, "gpus": 2, "releasedAt": released})}
    plan = on_finished.plan(request(scene), state_of(scene), Policy())
    # released at T0+1h, finished at T0+2h01m: 2 GPUs x 61 min
    assert plan.metrics["gpuHoursReclaimed"] == pytest.approx(2 * (7260 - 3600) / 3600, abs=1e-5)


# -- on-admitted: the ScaledObject only moves its target between the recorded size and 0 (issue 10 item 2)
def test_scaled_object_moves_the_target_only_between_its_recorded_size_and_zero() -> None:
    """KEDA's HPA holds min..max; with min = max = the recorded size it never resizes N->M (Kueue forbids
    resizing a managed StatefulSet), and idleReplicaCount 0 is KEDA's only other value (v2.20
    pkg/scaling/executor: inactive -> idleReplicaCount, active at idle -> minReplicaCount)."""
    scene = Scene.of("StatefulSet", workers=3)
    so = on_admitted.plan(request(scene), state_of(scene), Policy()).actions[0].body
    spec = so["spec"]
    assert (spec["idleReplicaCount"], spec["minReplicaCount"], spec["maxReplicaCount"]) == (0, 3, 3)


def test_scaled_object_waits_for_the_idle_window_and_the_minimum_runtime() -> None:
    scene = Scene.of("Deployment")
    longer_runtime = parse_policy("idle: {window: 10m, minRuntime: 2h}")
    spec = on_admitted.plan(request(scene), state_of(scene), longer_runtime).actions[0].body["spec"]
    assert (spec["initialCooldownPeriod"], spec["cooldownPeriod"]) == (7200, 7200)
    longer_window = parse_policy("idle: {window: 1h, minRuntime: 10m}")
    spec = on_admitted.plan(request(scene), state_of(scene), longer_window).actions[0].body["spec"]
    assert (spec["initialCooldownPeriod"], spec["cooldownPeriod"]) == (3600, 3600)


def test_the_prepared_event_says_when_keda_takes_the_target_to_zero() -> None:
    """The Event a tenant reads with kubectl must give the whole wait: KEDA scales to 0 once the query
    has been below the threshold for the window and then the cooldown has passed (cooldownPeriod
    counts from the last active poll), never sooner than initialCooldownPeriod after creation."""
    scene = Scene.of("Deployment")
    plan = on_admitted.plan(request(scene), state_of(scene), parse_policy("idle: {window: 10m, minRuntime: 2h}"))
    reason, message = plan.event
    assert reason == "GPUaaSIdleHandlingPrepared"
    assert "idle for 600s and then KEDA's cooldown of 7200s has passed" in message
    assert "never sooner than 7200s after it was made" in message


def test_activity_query_is_empty_until_the_pods_have_reported_for_a_whole_window() -> None:
    """A resumed or new server has not reported for a whole window (and the minimum runtime, 1h by
    default): the query is empty (KEDA holds) rather than idle at its first low sample; the pods it had
    before it went to 0 (their series stale now, their last samples still in the window) do not count
    either (tests/steps/test_activity_query.py evaluates it)."""
    scene = Scene.of("Deployment")
    query = on_admitted.plan(request(scene), state_of(scene), Policy()).actions[0].body["spec"]["triggers"][0][
        "metadata"]["query"]
    assert query.count("[3600s:10s]") == 8 and query.count(" and ") == 8 and " unless on () (" in query
    assert query.count(" offset 3600s)") == 4  # there A ago too, not only at every step since
    assert "[1800s]) and DCGM_FI_DEV_GPU_UTIL{namespace=" in query


def test_the_scaled_objects_query_judges_no_pod_younger_than_the_minimum_runtime() -> None:
    """KEDA's cooldowns count from the ScaledObject's creation or its last activity: for a server resumed
    long after it went to 0 both are over, so only the query can hold it for the tenant's minimum
    runtime. Activity over the idle window; the pods must have reported for max(window, minimum runtime)."""
    scene = Scene.of("Deployment")
    longer_runtime = parse_policy("idle: {window: 10m, minRuntime: 2h}")
    query = on_admitted.plan(request(scene), state_of(scene), longer_runtime).actions[0].body["spec"]["triggers"][0][
        "metadata"]["query"]
    assert query.count("[600s])") == 4 and query.count("[7200s:") == 8


def test_scaled_object_keeps_its_recorded_size_when_the_target_was_scaled() -> None:
    """A later admission (each Deployment pod has its own Workload) sees the target mid-change; the
    size recorded on gpuaas' ScaledObject stays what it scales back to."""
    scene = Scene.of("Deployment", workers=3)
    created = on_admitted.plan(request(scene), state_of(scene), Policy()).actions[0].body
    deployment = next(o for o in scene.chain() if o["kind"] == "Deployment")
    deployment["spec"]["replicas"] = 0
    again = on_admitted.plan(request(scene), state_of(scene, scaled_objects=[created]), Policy())
    assert not again.actions and "already as wanted" in again.reasons[-1]


@pytest.mark.parametrize("kind", ["Deployment", "InferenceService"])
def test_a_target_someone_else_autoscales_gets_no_scaled_object(kind: str) -> None:
    """KEDA's webhook refuses a ScaledObject whose target an HPA already scales (KServe's own HPA)."""
    scene = Scene.of(kind)
    state = state_of(scene)
    target = "train-predictor" if kind == "InferenceService" else "train"
    state.autoscalers = [{"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                          "metadata": {"name": target, "namespace": NS},
                          "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target}}}]
    plan = on_admitted.plan(request(scene), state, Policy())
    assert not plan.actions and plan.empty_outcome == Outcome.NO_OP
    assert f"HorizontalPodAutoscaler {target} already scales Deployment {target}" in plan.reasons[-1]


def test_pause_keda_records_the_size_and_resume_brings_it_back() -> None:
    """Removing paused-replicas alone leaves the target at 0 (KEDA's query is empty without pods):
    resume restores the recorded size on the scale target too (issue 10 item 3)."""
    scene = Scene.of("Deployment", workers=3)
    so = on_admitted.plan(request(scene), state_of(scene), Policy()).actions[0].body
    state = state_of(scene, scaled_objects=[so])
    released = release_workers.plan(request(scene), state, Policy())
    pause = next(a for a in released.actions if a.action == "pause-keda")
    _merge(so, pause.patch)
    record = read_release(so)
    assert record is not None and record["previous"]["replicas"] == 3
    deployment = next(o for o in scene.chain() if o["kind"] == "Deployment")
    deployment["spec"]["replicas"] = 0              # KEDA held it at paused-replicas 0
    from steps.strategies import resume_actions
    resumed, _ = resume_actions(record, so, "by hand", scale_target=deployment)
    assert [(a.action, a.resource.kind) for a in resumed] == [("unpause-keda", "ScaledObject"),
                                                             ("restore-replicas", "Deployment")]
    assert resumed[1].patch == {"spec": {"replicas": 3}}
    deployment["spec"]["replicas"] = 2              # someone sized it since: left as is
    resumed, notes = resume_actions(record, so, "by hand", scale_target=deployment)
    assert [a.action for a in resumed] == ["unpause-keda"] and "left as is" in notes[-1]


def test_an_older_scaled_object_at_zero_is_updated_to_its_recorded_size() -> None:
    """An object of the earlier design (min 0, max N) whose target KEDA took to 0: N is still known."""
    scene = Scene.of("Deployment", workers=3)
    older = on_admitted.plan(request(scene), state_of(scene), Policy()).actions[0].body
    older["spec"].update(minReplicaCount=0, maxReplicaCount=3)
    del older["spec"]["idleReplicaCount"]
    next(o for o in scene.chain() if o["kind"] == "Deployment")["spec"]["replicas"] = 0
    plan = on_admitted.plan(request(scene), state_of(scene, scaled_objects=[older]), Policy())
    assert actions(plan) == [("update-scaled-object", "ScaledObject")]
    spec = plan.actions[0].patch["spec"]
    assert (spec["idleReplicaCount"], spec["minReplicaCount"], spec["maxReplicaCount"]) == (0, 3, 3)


def test_on_admitted_names_the_platforms_keda_authentication() -> None:
    """OpenShift's thanos-querier wants a bearer token: with GPUAAS_KEDA_AUTHENTICATION (the overlay's ConfigMap
    gpuaas-prometheus) the trigger asks for bearer auth from that (Cluster)TriggerAuthentication; without it, none."""
    scene = Scene.of("Deployment")
    plain = on_admitted.plan(request(scene), state_of(scene), Policy()).actions[0].body["spec"]["triggers"][0]
    assert "authenticationRef" not in plain and "authModes" not in plain["metadata"]
    state = state_of(scene)
    state.keda_authentication = "ClusterTriggerAuthentication/gpuaas-prometheus"
    trigger = on_admitted.plan(request(scene), state, Policy()).actions[0].body["spec"]["triggers"][0]
    assert trigger["authenticationRef"] == {"name": "gpuaas-prometheus", "kind": "ClusterTriggerAuthentication"}
    assert trigger["metadata"]["authModes"] == "bearer"
    assert trigger["metadata"]["serverAddress"] == "http://prometheus.test:9090"
