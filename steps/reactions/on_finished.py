"""on-finished: a Workload finished -> release what is left, return lent quota, record GPU-hours.

observe: the live Workload (Finished must be True NOW: a re-created Workload with the same name,
or a stale event, gives no-op), owners, tenant (its ClusterQueue carries the loans), gpuaas's
ScaledObjects, and objects that outlive the Workload (a RayJob with shutdownAfterJobFinishes unset
keeps its RayCluster and the GPU workers after the job finished).
plan (pure):
- delete ScaledObjects gpuaas created (label gpuaas.io/managed-by=gpuaas) for this Workload whose
  owner is gone or is no longer the live owner (never a tenant's own ScaledObject; the owner's own
  garbage collection removes the rest);
- scale to zero the worker groups of outliving RayClusters (release record kept on them);
- return the GPUs lent to this Workload (ClusterQueue annotation gpuaas.io/lent-gpus, helper
  quota's `return_loan_patch`), in one conditional merge patch;
- metrics: gpuHoursUsed = GPUs admitted x (finish - admission); gpuHoursReclaimed when a release
  recorded on the Workload ends with the finish.
"""

from __future__ import annotations

from typing import Any

from steps.model.state import WORKLOAD_LABEL_KEY, WorkloadState, observe_workload
from steps.model.workload import SLICE_REPLACED, parse_time
from steps.plan import Action, Outcome, Plan, ReactionRequest, StepReport
from steps.policy import Policy
from steps.record import RESOURCES_RELEASED
from steps.strategies import SCALE_WORKERS, ReleaseStrategy, read_release, release_actions

REACTION = "on-finished"


def observe(context: Any, request: ReactionRequest) -> WorkloadState:
    from steps.gateways.resources import RAY_CLUSTER

    state = observe_workload(context, request)
    _wait_for_kueue_to_release(state)
    direct = state.owners.direct
    if direct is not None and direct.get("kind") == "RayJob" \
            and (direct.get("spec") or {}).get("shutdownAfterJobFinishes") is not True:
        name = (direct.get("status") or {}).get("rayClusterName")
        cluster = context.kube.get(RAY_CLUSTER, name, request.namespace) if name else None
        if cluster is not None:
            state.leftovers.append(cluster)
    return state


KUEUE_STATUS_GRACE_S = 30.0
"""How long after a Workload's finish its loan's return may wait for Kueue's ClusterQueue status. Kueue drops the
Workload from its own books at once and writes the status within about a second (v0.19 `UpdatesBatchPeriod`);
past this, usage above the return is other work (a queued Workload admitted into the lent quota meanwhile), which
the in-use floor keeps, as before."""


def _wait_for_kueue_to_release(state: WorkloadState) -> None:
    """A transient error (exit 75: Argo retries) while Kueue may still count this finished Workload's GPUs on the
    ClusterQueue it borrowed quota for (steps.cluster_queue.return_waits_for_kueue), for KUEUE_STATUS_GRACE_S after
    the finish at most: Argo's retries (5, 10, 20, 40 s) outlast it, so the return always happens."""
    from steps.cluster_queue import read_loans, return_waits_for_kueue
    from steps.gateways.errors import TransientError

    wl, cq = state.workload, state.tenant_info.cluster_queue_object
    if wl is None or cq is None or wl.finished_at is None:
        return
    if (state.now - wl.finished_at).total_seconds() >= KUEUE_STATUS_GRACE_S:
        return  # long enough for Kueue's status (batched every second): usage above the return is other work
    loan = read_loans(cq).get(f"{wl.namespace}/{wl.name}")
    if loan is None or (loan.uid and wl.uid and loan.uid != wl.uid):
        return
    waiting = return_waits_for_kueue(cq, f"{wl.namespace}/{wl.name}", int(wl.gpus_admitted))
    if waiting:
        raise TransientError(409, waiting, "Conflict")


def _hours(seconds: float) -> float:
    return round(seconds / 3600.0, 6)


def plan(request: ReactionRequest, state: WorkloadState, policy: Policy) -> Plan:
    """plan_transition under steps.delivery's exactly-once rule (`planned_once`)."""
    from steps.delivery import planned_once

    return planned_once(plan_transition, request, state, policy)


def plan_transition(request: ReactionRequest, state: WorkloadState, policy: Policy) -> Plan:
    from steps.gateways.resources import CLUSTER_QUEUE, SCALED_OBJECT

    wl = state.workload
    notes = state.event_notes()
    if wl is None:
        return Plan.nothing(*notes, f"Workload {request.namespace}/{request.workload} not found: its owner's "
                                    "garbage collection removed what gpuaas created with it")
    if not wl.is_finished:
        return Plan.nothing(*notes, f"Workload is {wl.status()} now, not finished (stale, duplicated or "
                                    "out-of-order event, or a re-created Workload with the same name)")
    if wl.finished_reason == SLICE_REPLACED:
        return Plan.nothing(*notes, "Workload slice replaced by a scale-up (Finished/WorkloadSliceReplaced): the "
                                    "job runs on in its new slice; nothing ended, nothing to release")
    metrics: dict[str, float] = {}
    reasons = [*notes, f"Workload finished ({wl.finished_reason})"]
    admitted_at, finished_at, gpus = wl.admitted_at, wl.finished_at, float(wl.gpus_admitted)
    if admitted_at and finished_at and gpus:
        metrics["gpuHoursUsed"] = _hours(gpus * max(0.0, (finished_at - admitted_at).total_seconds()))
        reasons.append(f"{gpus:g} GPU(s) from {admitted_at.isoformat()} to {finished_at.isoformat()}")
    else:
        metrics["gpuHoursUsed"] = 0.0
        reasons.append("no admission recorded on the Workload (finished before admission, or admission cleared): "
                       "0 GPU-hours")
    release = read_release(wl.obj)
    if release and release.get("releasedAt") and finished_at:
        released_at = parse_time(release["releasedAt"])
        if released_at is not None:
            metrics["gpuHoursReclaimed"] = _hours(float(release.get("gpus") or 0)
                                                  * max(0.0, (finished_at - released_at).total_seconds()))
    actions: list[Action] = []
    owner_uids = {str((o.get("metadata") or {}).get("uid")) for o in state.owners.objects}
    for so in state.managed_scaled_objects:
        meta = so.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(WORKLOAD_LABEL_KEY) != wl.name:
            continue
        refs = meta.get("ownerReferences") or []
        if refs and all(str(r.get("uid")) in owner_uids for r in refs):
            reasons.append(f"ScaledObject {meta.get('name')} stays: its owner lives on and other pods use it")
            continue
        actions.append(Action("delete-scaled-object", SCALED_OBJECT, str(meta.get("name")), wl.namespace,
                              "gpuaas created it for this Workload and its owner is gone", operation="delete",
                              before={"spec": so.get("spec")}))
    for leftover in state.leftovers:
        if read_release(leftover) is not None:
            continue
        workers = sum(int(g.get("replicas") or 0)
                      for g in (leftover.get("spec") or {}).get("workerGroupSpecs") or [])
        if workers == 0:
            continue
        strategy = ReleaseStrategy(SCALE_WORKERS, leftover, "the RayJob finished but keeps its RayCluster")
        actions.extend(a for a in release_actions(strategy, wl, tenant=state.tenant, gpus=0.0, now=state.now,
                                                  reason=f"{leftover.get('kind')} outlives finished Workload "
                                                         f"{wl.name}", by=REACTION)
                       if a.resource.kind != "Workload")
    cq = state.tenant_info.cluster_queue_object
    if cq is not None:
        from steps.cluster_queue import declared_gpus, read_loans, return_loan_patch

        key = f"{wl.namespace}/{wl.name}"
        loan = read_loans(cq).get(key)
        if loan is not None and loan.uid and wl.uid and loan.uid != wl.uid:
            reasons.append(f"the loan for {key} belongs to an earlier Workload (uid {loan.uid}); kept")
        elif loan is not None:
            patch = return_loan_patch(cq, key)
            redeclared = declared_gpus(cq, loan.flavor)[1]
            if redeclared:
                reasons.append(f"{redeclared}: the loan's return leaves that quota plus the other loans")
            if patch is not None:
                rv = patch.get("metadata", {}).pop("resourceVersion", None)
                actions.append(Action("return-lent-quota", CLUSTER_QUEUE, state.tenant or "", None,
                                      f"return {loan.gpus} GPU(s) of flavor {loan.flavor} lent for {key}",
                                      patch=patch, resource_version=rv,
                                      before={"lent": {key: {"flavor": loan.flavor, "gpus": loan.gpus}}}))
                metrics["gpusReturned"] = float(loan.gpus)
    if not actions:
        return Plan((), (*reasons, "nothing left to release"), Outcome.NO_OP, metrics)
    summary = ", ".join(a.action for a in actions)
    return Plan(tuple(actions), tuple(reasons), Outcome.NO_OP, metrics,
                (RESOURCES_RELEASED, f"gpuaas released what Workload {wl.name} left: {summary}"))


def step(context: Any) -> StepReport:
    from steps.reactions import run_planned

    return run_planned(context, observe=observe, plan=plan, uses_policy=False)
