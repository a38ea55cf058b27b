"""resume-workers: undo exactly the release recorded in gpuaas.io/release, then remove the record.

The record names the strategy, the object changed and its previous values (replicas, worker
groups, annotations, spec.active). Resume restores those values on that object, clears the record
there and on the Workload, and leaves alone any field someone changed since the release.
No record = nothing gpuaas released = no-op.
Metrics: gpuHoursReclaimed = GPUs released x hours since the release.

Optional parameter `target` ("Kind/name", e.g. `Deployment/llm`, `StatefulSet/nb`,
`ScaledObject/gpuaas-llm`): resume the object directly when its Workload is gone (a KEDA-paused
Deployment's pods, and with them their per-pod Workloads, no longer exist). For a Deployment or
InferenceService the ScaledObject scaling it is found and unpaused, and the Deployment is brought
back to the size recorded at the release (KEDA cannot: at 0 replicas its activity query is empty).

A serving workload gpuaas' own ScaledObject took to 0 when idle (idleReplicaCount 0, no release
record) comes back the same way: `target=Deployment/<name>` scales it to the size that ScaledObject
recorded (its minReplicaCount); KEDA then holds it there until it is idle for a whole window again.
"""

from __future__ import annotations

from typing import Any

from steps.gateways.errors import TransientError
from steps.model.state import WorkloadState, observe_workload
from steps.model.workload import parse_time
from steps.plan import Plan, ReactionRequest, RejectedInput, StepReport
from steps.policy import Policy
from steps.record import RESUMED
from steps.strategies import DEACTIVATE, RELEASE_ANNOTATION, mirror_release, resume_actions

REACTION = "resume-workers"
TARGET_KINDS = frozenset({"Deployment", "StatefulSet", "LeaderWorkerSet", "InferenceService", "ScaledObject", "Notebook",
                          "RayCluster", "RayJob", "Job"})
"""Kinds a release changes (or that a KEDA ScaledObject scales): what `target` may name."""


def observe(context: Any, request: ReactionRequest) -> WorkloadState:
    target = (request.extra.get("target") or "").strip()
    if request.workload or not target:
        state = observe_workload(context, request)
    else:
        state = observe_target(context, request, target)
    _wait_for_scale_down(state)
    _wait_for_terminating_pods(context, request, state)
    return state


def _wait_for_terminating_pods(context: Any, request: ReactionRequest, state: WorkloadState) -> None:
    """Pods of the released workload still terminating (the release stopped them; their grace period
    runs): resuming now lets the job's controller see them, and the Kubeflow training-operator then
    marks a PyTorchJob Failed (seen on the real stack, v1.9.3), losing the job. A transient failure
    (exit 75: the template retries with backoff) until they are gone."""
    from steps.gateways.resources import POD

    if state.release is None:
        return
    owners = {str((o.get("metadata") or {}).get("uid")) for o in state.owners.objects}
    target = state.release_on or {}
    owners.add(str((target.get("metadata") or {}).get("uid")))
    owners.discard("None")
    namespace = request.namespace or (target.get("metadata") or {}).get("namespace")
    if not owners or not namespace:
        return
    terminating = [p for p in context.kube.list(POD, namespace)
                   if (p.get("metadata") or {}).get("deletionTimestamp")
                   and any(str(r.get("uid")) in owners for r in (p.get("metadata") or {}).get("ownerReferences") or [])]
    if terminating:
        names = ", ".join(sorted(str(p["metadata"].get("name")) for p in terminating)[:5])
        raise TransientError(409, f"{len(terminating)} pod(s) the release stopped are still terminating ({names}); "
                                  "resuming now would let the job's controller count them: retry", "PodsTerminating")


def _wait_for_scale_down(state: WorkloadState) -> None:
    """A StatefulSet scaled to 0 by the release whose pods still terminate (`status.replicas` > 0):
    Kueue's StatefulSet webhook refuses the scale-up from 0 until they are gone ("scaling down is
    still in progress", pkg/controller/jobs/statefulset/statefulset_webhook.go), so this is a
    transient failure (exit 75: the template retries with backoff), not the webhook's 403."""
    target, record = state.release_on, state.release
    if target is None or record is None or target.get("kind") != "StatefulSet":
        return
    replicas = (target.get("spec") or {}).get("replicas")
    terminating = int((target.get("status") or {}).get("replicas") or 0)
    if replicas == 0 and terminating > 0:
        name = (target.get("metadata") or {}).get("name")
        raise TransientError(409, f"StatefulSet {name} is still scaling down ({terminating} pod(s) terminating); "
                                  "Kueue refuses a scale-up from 0 until they are gone: retry", "ScaleDownInProgress")


def observe_target(context: Any, request: ReactionRequest, target: str) -> WorkloadState:
    """The object named by `target` (and the ScaledObject scaling it) carrying a release record."""
    from steps.events import parse_resource_event
    from steps.gateways import resources
    from steps.strategies import read_release

    kind, _, name = target.partition("/")
    candidates = [r for r in resources.ALL if r.kind.lower() == kind.strip().lower() and r.kind in TARGET_KINDS]
    if not name or not candidates:
        known = sorted(TARGET_KINDS)
        raise RejectedInput("target", f"Kind/name with Kind one of {', '.join(known)}", repr(target),
                            "e.g. target=Deployment/llm-server")
    kube = context.kube
    state = WorkloadState(now=context.now(), event=parse_resource_event(request.event), workload=None)
    obj = kube.get(candidates[0], name.strip(), request.namespace)
    if obj is None:
        state.extra["targetMissing"] = f"{candidates[0].kind} {request.namespace}/{name} not found"
        return state
    obj.setdefault("apiVersion", candidates[0].api_version)
    obj.setdefault("kind", candidates[0].kind)
    holders = [obj]
    if obj["kind"] in ("Deployment", "StatefulSet", "InferenceService"):
        for so in kube.list(resources.SCALED_OBJECT, request.namespace):
            ref = (so.get("spec") or {}).get("scaleTargetRef") or {}
            if ref.get("name") == name and ref.get("kind", "Deployment") == obj["kind"]:
                so.setdefault("apiVersion", resources.SCALED_OBJECT.api_version)
                so.setdefault("kind", "ScaledObject")
                holders.append(so)
    for holder in holders:
        record = read_release(holder)
        if record is not None:
            state.release, state.release_on = record, holder
            break
    from steps.model.state import MANAGED_BY, MANAGED_BY_VALUE, scale_target_of

    if state.release_on is not None and state.release_on.get("kind") == "ScaledObject":
        state.scale_target = obj if obj["kind"] in ("Deployment", "StatefulSet") else scale_target_of(
            kube, state.release_on)
    elif state.release is None:
        # No release record: a server gpuaas' own ScaledObject scaled to 0 when idle comes back too.
        ours = [h for h in holders if h.get("kind") == "ScaledObject"
                and ((h.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY) == MANAGED_BY_VALUE
                and (h.get("spec") or {}).get("idleReplicaCount") == 0]
        if ours:
            state.managed_scaled_objects = ours[:1]
            state.scale_target = obj if obj["kind"] != "ScaledObject" else scale_target_of(kube, ours[0])
    return state


def plan(request: ReactionRequest, state: WorkloadState, policy: Policy) -> Plan:
    wl = state.workload
    notes = state.event_notes()
    if "targetMissing" in state.extra:
        return Plan.nothing(*notes, f"{state.extra['targetMissing']}: nothing to resume")
    if wl is None and state.release is None and state.managed_scaled_objects and state.scale_target is not None:
        return wake(request, state)
    if wl is None and state.release is None:
        return Plan.nothing(*notes, f"Workload {request.namespace}/{request.workload} not found: nothing to resume")
    record, target = state.release, state.release_on
    if record is None or target is None:
        return Plan.nothing(*notes, "no release recorded by gpuaas (annotation gpuaas.io/release absent): "
                                    "nothing to resume")
    if record.get("strategy") == "unreadable":
        return Plan.nothing(*notes, f"the release record on {target.get('kind')} is not JSON; resume by hand "
                                    f"and remove the annotation {RELEASE_ANNOTATION}")
    why = request.extra.get("reason") or "requested (resume-workers)"
    if wl is not None and target.get("kind") == "Workload" and record.get("strategy") != DEACTIVATE:
        # Only the Workload's copy of the record is left: the object the release changed no longer
        # carries it (an earlier attempt of a resume restored it and was cut short, or someone
        # removed it). Restoring on the Workload would write the wrong kind (spec.replicas on a
        # Workload): finish the resume by clearing the copy.
        changed = record.get("target") or {}
        actions = [mirror_release(wl, None, why)]
        resume_notes = [(f"{changed.get('kind')} {changed.get('name')} no longer carries the release record "
                         "(restored by an earlier, interrupted resume, or removed by hand): only the Workload's "
                         "copy is cleared")]
    else:
        actions, resume_notes = resume_actions(record, target, why, scale_target=state.scale_target)
        if wl is not None and target.get("kind") != "Workload" and RELEASE_ANNOTATION in wl.annotations:
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


def wake(request: ReactionRequest, state: WorkloadState) -> Plan:
    """A target gpuaas' ScaledObject scaled to 0 when idle: back to the size it recorded (pure)."""
    from steps.strategies import restore_scale_target, scaled_size

    scaler, target = state.managed_scaled_objects[0], state.scale_target
    assert target is not None
    size = scaled_size(scaler)
    name = f"{target.get('kind')} {(target.get('metadata') or {}).get('name')}"
    why = request.extra.get("reason") or "requested (resume-workers)"
    actions, notes = restore_scale_target(target, size, why)
    reasons = [(f"ScaledObject {(scaler.get('metadata') or {}).get('name')} (gpuaas') scales {name} between {size} "
                "and 0 replicas; no release record: wake it to its recorded size"), *notes]
    if not actions:
        return Plan.nothing(*reasons)
    return Plan(tuple(actions), tuple(reasons),
                event=(RESUMED, f"gpuaas woke {name} to {size} replica(s) (scaled to 0 when idle)"))


def step(context: Any) -> StepReport:
    from steps.reactions import run_planned

    by_target = bool((context.params.get("target") or "").strip()) and not (context.params.get("workload") or "").strip()
    if by_target and not (context.params.get("namespace") or "").strip():
        raise RejectedInput("namespace", "the namespace of the target object", "an empty value",
                            "pass namespace=<ns> with target=<Kind>/<name>")
    return run_planned(context, observe=observe, plan=plan, uses_policy=False, require_workload=not by_target)
