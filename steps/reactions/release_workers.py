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
from steps.plan import Outcome, Plan, ReactionRequest, StepReport
from steps.policy import Policy, exempt_by
from steps.record import RELEASED
from steps.strategies import NONE, RELEASE_ANNOTATION, mirror_release, release_actions, strategy_for

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
        on = state.release_on or {}
        if on.get("kind") != "Workload" and RELEASE_ANNOTATION not in wl.annotations:
            # The change happened but the mirror on the Workload did not (a 409 or a crash in between).
            record = (on.get("metadata") or {}).get("annotations", {}).get(RELEASE_ANNOTATION)
            return Plan((mirror_release(wl, record, "complete an earlier release"),),
                        (*notes, (f"already released at {state.release.get('releasedAt')} on {on.get('kind')} "
                                 f"{(on.get('metadata') or {}).get('name')}; the Workload lacks the record")))
        return Plan.nothing(*notes, f"already released at {state.release.get('releasedAt')} "
                                    f"({state.release.get('strategy')} on {on.get('kind')} "
                                    f"{(on.get('metadata') or {}).get('name')}); resume-workers undoes it")
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
    actions = release_actions(strategy, wl, tenant=state.tenant, gpus=gpus, now=state.now, reason=why, by=by)
    idle = policy.idle_for(state.tenant)
    reasons = [*notes, f"strategy {strategy.name}: {strategy.why}", why]
    if idle.dry_run:
        reasons.append(f"tenant {state.tenant} policy mode is dry-run: plan only")
    target = strategy.target_ref or {}
    return Plan(tuple(actions), tuple(reasons), Outcome.NO_OP, {"gpusReleased": gpus},
                (RELEASED, (f"gpuaas released {gpus:g} GPU(s): {strategy.name} on {target.get('kind')} "
                           f"{target.get('name')} ({why})")), idle.dry_run)


def step(context: Any) -> StepReport:
    from steps.reactions import run_planned

    return run_planned(context, observe=observe, plan=plan)
