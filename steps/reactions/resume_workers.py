"""resume-workers: undo exactly the release recorded in gpuaas.io/release, then remove the record.

The record names the strategy, the object changed and its previous values (replicas, worker
groups, annotations, spec.active). Resume restores those values on that object, clears the record
there and on the Workload, and leaves alone any field someone changed since the release.
No record = nothing gpuaas released = no-op.
Metrics: gpuHoursReclaimed = GPUs released x hours since the release.
"""

from __future__ import annotations

from typing import Any

from steps.model.state import WorkloadState, observe_workload
from steps.model.workload import parse_time
from steps.plan import Plan, ReactionRequest, StepReport
from steps.policy import Policy
from steps.record import RESUMED
from steps.strategies import RELEASE_ANNOTATION, mirror_release, resume_actions

REACTION = "resume-workers"


def observe(context: Any, request: ReactionRequest) -> WorkloadState:
    return observe_workload(context, request)


def plan(request: ReactionRequest, state: WorkloadState, policy: Policy) -> Plan:
    wl = state.workload
    notes = state.event_notes()
    if wl is None:
        return Plan.nothing(*notes, f"Workload {request.namespace}/{request.workload} not found: nothing to resume")
    record, target = state.release, state.release_on
    if record is None or target is None:
        return Plan.nothing(*notes, "no release recorded by gpuaas (annotation gpuaas.io/release absent): "
                                    "nothing to resume")
    if record.get("strategy") == "unreadable":
        return Plan.nothing(*notes, f"the release record on {target.get('kind')} is not JSON; resume by hand "
                                    f"and remove the annotation {RELEASE_ANNOTATION}")
    why = request.extra.get("reason") or "requested (resume-workers)"
    actions, resume_notes = resume_actions(record, target, why)
    if target.get("kind") != "Workload" and RELEASE_ANNOTATION in wl.annotations:
        actions.append(mirror_release(wl, None, why))
    metrics: dict[str, float] = {}
    released_at = parse_time(record.get("releasedAt"))
    if released_at is not None:
        hours = max(0.0, (state.now - released_at).total_seconds()) / 3600.0
        metrics["gpuHoursReclaimed"] = round(float(record.get("gpus") or 0) * hours, 6)
    reasons = [*notes, (f"undo {record.get('strategy')} of {record.get('releasedAt')} on {target.get('kind')} "
                       f"{(target.get('metadata') or {}).get('name')}"), *resume_notes]
    return Plan(tuple(actions), tuple(reasons), metrics=metrics,
                event=(RESUMED, (f"gpuaas resumed the workers released at {record.get('releasedAt')} "
                                f"({record.get('strategy')})")))


def step(context: Any) -> StepReport:
    from steps.reactions import run_planned

    return run_planned(context, observe=observe, plan=plan, uses_policy=False)
