"""release-workers: release a Workload's GPU workers with its kind's strategy (steps.strategies).

Submitted by hand (`argo submit --from workflowtemplate/gpuaas-release-workers -p namespace=...
-p workload=...`) or by automation. The release record (annotation gpuaas.io/release) is written
in the same patch as the change, so resume-workers can undo exactly it.

plan (pure):
- no-op: Workload gone, finished, already released (record found on it or on the object the
  release changed), or holding no GPUs (pending, not admitted, deactivated by someone else);
- skipped-by-policy: exempt (gpuaas.io/idle-policy: exempt on the Workload or its owner), or the
  strategy is `none` (plain pods: stopping them would delete tenant pods);
- else the strategy's writes; dry-run when asked or when the tenant's policy mode is dry-run.
Nothing is ever deleted.
"""

from __future__ import annotations

from typing import Any

from steps.model.state import WorkloadState, observe_workload
from steps.plan import Action, Outcome, Plan, ReactionRequest, StepReport
from steps.policy import Policy, exempt_by
from steps.record import RELEASED
from steps.strategies import (
    NONE,
    RELEASE_ANNOTATION,
    mirror_release,
    release_action_name,
    release_actions,
    release_message,
    strategy_for,
)

REACTION = "release-workers"


def observe(context: Any, request: ReactionRequest) -> WorkloadState:
    return observe_workload(context, request)


def plan(request: ReactionRequest, state: WorkloadState, policy: Policy, *, by: str = REACTION,
         reason: str | None = None) -> Plan:
    wl = state.workload
    notes = state.event_notes()
    if wl is None:
        return Plan.nothing(*notes, f"Workload {request.namespace}/{request.workload} not found: nothing to release")
    if wl.is_finished:
        return Plan.nothing(*notes, f"Workload finished ({wl.finished_reason}): on-finished releases what is left")
    if state.release is not None:
        return _released_already(state, wl, notes)
    if not wl.active:
        return Plan.nothing(*notes, "Workload is deactivated (spec.active=false) by someone else: it holds no GPUs")
    if not wl.is_admitted and not wl.has_quota:
        return Plan.nothing(*notes, f"Workload is {wl.status()}: it holds no GPUs to release")
    exempt = exempt_by(state.workload_object, *state.owners.objects)
    if exempt:
        return Plan.nothing(*notes, f"{exempt} is annotated gpuaas.io/idle-policy: exempt",
                            outcome=Outcome.SKIPPED_BY_POLICY)
    strategy = strategy_for(wl, state.owners, state.scaled_objects[0] if state.scaled_objects else None)
    if strategy.name == NONE:
        return Plan.nothing(*notes, f"no safe release for this kind: {strategy.why}",
                            outcome=Outcome.SKIPPED_BY_POLICY)
    gpus = float(wl.gpus_admitted)
    why = reason or request.extra.get("reason") or "requested by hand (release-workers)"
    actions = release_actions(strategy, wl, tenant=state.tenant, gpus=gpus, now=state.now, reason=why, by=by,
                              run=state.run_id)
    idle = policy.idle_for(state.tenant)
    reasons = [*notes, f"strategy {strategy.name}: {strategy.why}", why]
    if idle.dry_run:
        reasons.append(f"tenant {state.tenant} policy mode is dry-run: plan only")
    message = release_message({"gpus": gpus, "strategy": strategy.name, "target": strategy.target_ref, "reason": why})
    return Plan(tuple(actions), tuple(reasons), Outcome.NO_OP, {"gpusReleased": gpus}, (RELEASED, message),
                idle.dry_run)


def _released_already(state: WorkloadState, wl: Any, notes: list[str]) -> Plan:
    """The Workload is released. Complete what an earlier attempt left undone (the Workload's copy of
    the record), and if that attempt belonged to THIS run (its answer was lost, Argo retried the
    step) record the release as this run's: the action, the Event (the release limit counts it)
    and the GPUs released. A release by another run is only "already released"."""
    record, on = state.release or {}, state.release_on or {}
    on_name = (on.get("metadata") or {}).get("name")
    where = f"{record.get('strategy')} on {on.get('kind')} {on_name}"
    actions = []
    reasons = list(notes)
    ours = bool(state.run_id) and record.get("run") == state.run_id
    if ours:
        from steps.gateways.resources import for_kind
        from steps.reactions import EARLIER_ATTEMPT_NOTE

        resource = for_kind(str(on.get("apiVersion") or ""), str(on.get("kind") or ""))
        if resource is not None:
            actions.append(Action(release_action_name(str(record.get("strategy")), on.get("kind")), resource,
                                  str(on_name), (on.get("metadata") or {}).get("namespace") or wl.namespace,
                                  EARLIER_ATTEMPT_NOTE.format(run=state.run_id), operation="already-applied"))
        reasons.append(f"released at {record.get('releasedAt')} ({where}) by an earlier attempt of this run "
                       f"(workflow {state.run_id}) whose answer was lost: recorded now")
    if on.get("kind") != "Workload" and RELEASE_ANNOTATION not in wl.annotations:
        # The change happened but the mirror on the Workload did not (a 409 or a crash in between).
        raw = (on.get("metadata") or {}).get("annotations", {}).get(RELEASE_ANNOTATION)
        actions.append(mirror_release(wl, raw, "complete an earlier release"))
        reasons.append(f"already released at {record.get('releasedAt')} on {on.get('kind')} {on_name}; "
                       "the Workload lacks the record")
    if not actions:
        return Plan.nothing(*notes, f"already released at {record.get('releasedAt')} ({where}); "
                                    "resume-workers undoes it")
    if not ours:
        return Plan(tuple(actions), tuple(reasons))
    gpus = float(record.get("gpus") or 0)
    return Plan(tuple(actions), tuple(reasons), Outcome.NO_OP, {"gpusReleased": gpus},
                (RELEASED, release_message(record)))


def step(context: Any) -> StepReport:
    from steps.reactions import run_planned

    return run_planned(context, observe=observe, plan=plan)
