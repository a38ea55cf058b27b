"""Which transition a reaction handles, whether it was handled already, and how it reached the step.

Kubernetes' own controllers are level-triggered: they read the current state and converge, and
never depend on seeing every event once. gpuaas' event path (resource EventSource -> NATS
JetStream -> Sensor -> Workflow) is edge-triggered, and each link can drop or repeat an event
(docs/catch-up.md has the upstream evidence). So a reaction is keyed by the TRANSITION it answers,
read from the live Workload, and the Workload carries a record of what was handled:

    transition key   on-admitted  "admitted@<Admitted.lastTransitionTime>#<evictions>"
                     on-finished  "finished@<Finished.lastTransitionTime>"
                     on-idle      "idle@<the earliest startsAt of the workload's firing alerts>"
    marker           annotation gpuaas.io/handled-<reaction> on the Workload:
                     {"transition": KEY, "run": RUN, "at": RFC 3339, "via": "event|sweep|hand|adopted",
                      "state": "claimed|handled"}   (no state: handled, as written before claims)

`evictions` is the sum of `status.schedulingStats.evictions[].count` (Kueue v0.19
pkg/workload/evict: every eviction increments it), so a re-admission has a new key even when it
lands in the same second as the admission before it (lastTransitionTime has whole seconds).

The exactly-once rule, shared by every reaction that follows a transition (on-admitted,
on-finished, on-idle's release):

1. A delivery (a Sensor's event, the sweep's catch-up, a hand submission) names a transition;
   the step reads the live Workload and computes the CURRENT transition key. A delivery for
   another transition than the current one is stale or superseded: recorded, nothing done.
2. If the marker holds the current key, the transition was handled: a delivery from the event
   path or the sweep is a DUPLICATE, recorded as such (`delivery.duplicateOf`), nothing written.
   A hand submission re-applies on the live state (that is what an admin asks for) and leaves
   the marker as it is.
3. Otherwise the step plans and applies as usual, CLAIMING the transition before its first
   effect and marking it handled as its last write (also in policy dry-run: it is bookkeeping, not
   an effect on the tenant's workload). Both writes are conditional JSON patches of the
   annotation: a `test` of the value this run read (or, when there was none, the Workload's
   resourceVersion), so of two runs that read the same unmarked transition only one can write;
   the other's write fails, it reads again, finds the first one's claim or marker and records a
   duplicate. The templates' mutex usually keeps two runs of one Workload apart, but it is not
   relied on: Argo Workflows v4.0.5 does not rebuild the holder of a workflowTemplateRef run's
   mutex after a controller restart (workflow/sync/sync_manager.go Initialize looks the lock up
   in wf.Spec only; fixed in v4.0.6, upstream PR #16160), so two runs can overlap.
   A claim older than CLAIM_LEASE_SECONDS (longer than a run's activeDeadlineSeconds) belongs to
   a run that died between its claim and its marker: the next delivery takes it over; its plan
   finds the effects in place (every action is conditional on the live state) and only marks.

The sweep (`steps.reactions.sweep`, a CronWorkflow) is the level-triggered half: it finds
transitions with no marker and records or re-delivers them. `Delivery` is what the audit record
says about how a reaction reached the step: when, how late and why, and whether it was a duplicate.

Pure: no I/O.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from steps.model.workload import ADMITTED, EVICTED, FINISHED, SLICE_REPLACED, Workload, parse_time

JSON = dict[str, Any]
MARKER_PREFIX = "gpuaas.io/handled-"
TRACKED = ("on-admitted", "on-finished")
"""The reactions whose transitions the sweep tracks on every Workload (on-idle follows alerts)."""
SWEEP_SOURCE = "gpuaas-sweep"
"""The CloudEvent source of a delivery the sweep made (its synthesised event, `sweep_event`)."""
SWEEP_EVENT_TYPE = "SWEEP"
CLAIMED, HANDLED = "claimed", "handled"
CLAIM_LEASE_SECONDS = 1200.0
"""A claim this old belongs to a dead run: every reaction template's activeDeadlineSeconds is 900, so a
run that claimed a transition has ended (or been killed) by then."""
RESUBMITTED_LABEL = "workflows.argoproj.io/resubmitted-from-workflow"
"""Argo's label on a resubmitted copy of a run (v4.0.5 workflow/util FormulateResubmitWorkflow)."""
SWEEP_TEMPLATES = {"on-admitted": "gpuaas-on-admitted", "on-finished": "gpuaas-on-finished"}
"""The templates whose runs the sweep creates (records or delivers), by reaction."""
LATE_AFTER_SECONDS = 60.0
"""A delivery later than this after its transition is recorded as late, with the reason."""

VIA_EVENT, VIA_SWEEP, VIA_HAND, VIA_ADOPTED = "event", "sweep", "hand", "adopted"

NO_ADMISSION_ACTION_KINDS = ("Job", "JobSet", "RayCluster", "RayJob", "PyTorchJob", "TFJob", "MPIJob",
                             "XGBoostJob", "PaddleJob", "JAXJob", "TrainJob")
"""Owner kinds whose admission on-admitted never writes for (it only creates a ScaledObject for a
Deployment, StatefulSet or raw-deployment InferenceService, none of which a job kind leads to).
The Sensor skips these (sensors/on_admitted.py); the sweep records them without a step pod."""
NO_FINISH_ACTION_KINDS = tuple(k for k in NO_ADMISSION_ACTION_KINDS if k != "RayJob")
"""Owner kinds whose finish on-finished writes nothing for, unless the Workload carries gpuaas'
release record or a loan (a RayJob may keep its RayCluster: on-finished scales it down)."""
FINISH_ACTION_ANNOTATIONS = ("gpuaas.io/release", "gpuaas.io/lent-gpus")
"""Annotations on a Workload that make its finish worth a step pod (the GPU-hours reclaimed, a loan)."""


def marker_annotation(reaction: str) -> str:
    return f"{MARKER_PREFIX}{reaction}"


# -- transitions ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Transition:
    """One transition of one Workload that a reaction answers."""

    reaction: str
    key: str
    at: datetime | None

    def to_dict(self) -> JSON:
        return {"reaction": self.reaction, "key": self.key, "at": _rfc3339(self.at)}


def evictions(obj: Mapping[str, Any]) -> int:
    """How many times Kueue evicted this Workload (status.schedulingStats.evictions[].count summed)."""
    stats = ((obj.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []
    total = 0
    for item in stats if isinstance(stats, list) else []:
        count = item.get("count") if isinstance(item, Mapping) else None
        if isinstance(count, int) and count > 0:
            total += count
    return total


def _raw_condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for raw in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(raw, Mapping) and raw.get("type") == kind:
            return raw
    return None


def admitted_transition(obj: Mapping[str, Any]) -> Transition | None:
    """The current admission: Admitted=True (also on a finished Workload: Kueue only adds Finished), unless it
    is being evicted. Real Kueue v0.19 sets Evicted=True and counts the eviction in schedulingStats while
    Admitted stays True with its old time until the eviction is done; counted as an admission, the key's new
    eviction count made it a transition of its own (a released Ray cluster got a third on-admitted)."""
    cond = _raw_condition(obj, ADMITTED)
    if cond is None or cond.get("status") != "True" or not cond.get("lastTransitionTime"):
        return None
    evicted = _raw_condition(obj, EVICTED)
    if evicted is not None and evicted.get("status") == "True":
        return None
    stamp = str(cond["lastTransitionTime"])
    return Transition("on-admitted", f"admitted@{stamp}#{evictions(obj)}", parse_time(stamp))


def finished_transition(obj: Mapping[str, Any]) -> Transition | None:
    """The finish: Finished=True, except an elastic job's replaced slice (the job runs on)."""
    cond = _raw_condition(obj, FINISHED)
    if cond is None or cond.get("status") != "True" or cond.get("reason") == SLICE_REPLACED \
            or not cond.get("lastTransitionTime"):
        return None
    stamp = str(cond["lastTransitionTime"])
    return Transition("on-finished", f"finished@{stamp}", parse_time(stamp))


def transition_for(reaction: str, obj: Mapping[str, Any] | None) -> Transition | None:
    if obj is None:
        return None
    if reaction == "on-admitted":
        return admitted_transition(obj)
    if reaction == "on-finished":
        return finished_transition(obj)
    return None


def idle_episode(starts_at: list[str]) -> str | None:
    """An idle episode's key: the earliest `startsAt` of the workload's firing alerts.

    Alertmanager re-sends the same startsAt on every group_interval/repeat_interval, and keeps the earliest
    one when it merges a re-sent alert into the one it holds (alertmanager types.Alert.Merge), so re-sends
    and an Alertmanager restart are one episode. A new episode (the alert resolved, then fired again; a
    resumed workload's new pods) has a later one.

    Known gap: a Prometheus restart within one idle stretch starts a second episode. Prometheus sends
    StartsAt = the alert's FiredAt (rules/manager.go), set on the first evaluation that fires in this
    process (rules/alerting.go); on restart RestoreForState restores only ActiveAt from ALERTS_FOR_STATE,
    and not even that when the rule's `for` (5m as rendered) is shorter than --rules.alert.for-grace-period
    (10m by default). The alert is pending again for 5m and fires with a new startsAt, by which time
    Alertmanager's copy has ended (Prometheus sends EndsAt about four resend delays ahead). Effect: in
    enforce mode none (the first episode's release removed the pods, no alert fires again); a dry-run
    tenant gets a second would-release record for the same idle stretch. Keying the episode on anything
    Prometheus keeps across restarts would need the activity history itself (a query over the restart's
    gap), which a repeat check cannot afford on every re-send."""
    times = sorted((parse_time(s), s) for s in starts_at if parse_time(s) is not None)
    return f"idle@{times[0][1]}" if times else None


# -- the marker -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Marker:
    """What the Workload says was handled for one reaction."""

    reaction: str
    transition: str
    run: str = ""
    at: str = ""
    via: str = ""
    state: str = HANDLED
    """claimed: a run is acting on the transition now (or died doing so); handled: it was answered."""
    raw: str = ""
    """The annotation's exact text (what a conditional write tests)."""

    def to_dict(self) -> JSON:
        return {"transition": self.transition, "run": self.run, "at": self.at, "via": self.via, "state": self.state}

    def describe(self) -> str:
        who = f"run {self.run}" if self.run else ("the sweep's adoption at install" if self.via == VIA_ADOPTED
                                                  else "an earlier run")
        return f"{who} at {self.at or 'an unknown time'} (via {self.via or 'unknown'})"

    def claim_age(self, now: datetime) -> float | None:
        at = parse_time(self.at) if self.at else None
        return None if at is None else (now - at).total_seconds()

    def claim_is_stale(self, now: datetime) -> bool:
        """A claim no live run can hold any more (or one without a readable time)."""
        if self.state != CLAIMED:
            return False
        age = self.claim_age(now)
        return age is None or age > CLAIM_LEASE_SECONDS


def annotation_json(obj: Mapping[str, Any] | None, annotation: str) -> Mapping[str, Any] | None:
    """The JSON object gpuaas keeps in one annotation of `obj` (a marker, an idle warning), or None when it is
    absent or not a JSON object (what to make of an unreadable one is the reader's rule)."""
    text = (((obj or {}).get("metadata") or {}).get("annotations") or {}).get(annotation)
    if not text:
        return None
    try:
        raw = json.loads(text)
    except ValueError:
        return None
    return raw if isinstance(raw, Mapping) else None


def read_marker(obj: Mapping[str, Any] | None, reaction: str) -> Marker | None:
    """The marker for `reaction` on a Workload, or None (absent or unreadable: unreadable reads as
    not handled, so the worst case is a repeated, idempotent reaction, never a lost one)."""
    raw = annotation_json(obj, marker_annotation(reaction))
    if raw is None or not isinstance(raw.get("transition"), str):
        return None
    state = CLAIMED if raw.get("state") == CLAIMED else HANDLED
    return Marker(reaction, raw["transition"], str(raw.get("run") or ""), str(raw.get("at") or ""),
                  str(raw.get("via") or ""), state, marker_text(obj, reaction) or "")


def marker_text(obj: Mapping[str, Any] | None, reaction: str) -> str | None:
    """The marker annotation's exact text as read (None: absent)."""
    text = (((obj or {}).get("metadata") or {}).get("annotations") or {}).get(marker_annotation(reaction))
    return None if text is None else str(text)


def marker_value(reaction: str, key: str, run: str, now: datetime, via: str, *, state: str = HANDLED) -> str:
    """The marker annotation's text (`reaction` names the annotation, not a field)."""
    del reaction
    return json.dumps({"transition": key, "run": run, "at": _rfc3339(now), "via": via, "state": state},
                      separators=(",", ":"))


def marker_patch(reaction: str, key: str, run: str, now: datetime, via: str) -> JSON:
    """An unconditional merge patch of the marker (tests and hand tools; reactions use `marker_write`)."""
    return {"metadata": {"annotations": {marker_annotation(reaction): marker_value(reaction, key, run, now, via)}}}


def annotation_path(name: str) -> str:
    """The JSON pointer of annotation `name` (RFC 6901: "~" and "/" escaped), for a JSON patch."""
    return "/metadata/annotations/" + name.replace("~", "~0").replace("/", "~1")


def marker_write(workload: Mapping[str, Any], reaction: str, value: str, expected: str | None
                 ) -> tuple[list[JSON], str | None]:
    """A conditional write of the marker: (JSON patch operations, resourceVersion to hold or None).

    `expected` is the annotation's text as this run read it (None: it had none). With a value there,
    the patch `test`s it and replaces it, so it fails (422) when another run wrote meanwhile; without,
    the patch holds the Workload's resourceVersion (409 when anything changed: read again, decide
    again). Either failure is a Conflict to the reaction (steps.reactions.apply_actions)."""
    meta = workload.get("metadata") or {}
    path = annotation_path(marker_annotation(reaction))
    if expected is not None:
        return [{"op": "test", "path": path, "value": expected}, {"op": "replace", "path": path, "value": value}], None
    if meta.get("annotations") is None:
        return [{"op": "add", "path": "/metadata/annotations", "value": {marker_annotation(reaction): value}}], \
            str(meta.get("resourceVersion") or "") or None
    return [{"op": "add", "path": path, "value": value}], str(meta.get("resourceVersion") or "") or None


# -- how the reaction reached the step ----------------------------------------------------------------
@dataclass(frozen=True)
class Delivery:
    """The record's `delivery` section (ARCHITECTURE §3)."""

    via: str
    """event | sweep | hand"""
    transition: Transition | None
    """The transition the live Workload is in now (what this run handles), or None."""
    delivered: str | None = None
    """The transition key the delivery named (from the event's Workload), when it named one."""
    late_seconds: float | None = None
    why_late: str | None = None
    duplicate_of: Marker | None = None
    superseded: bool = False
    """The delivery named another transition than the current one (stale, or re-admitted since)."""
    marked: bool = False
    """This run writes the marker (it is the transition's reaction)."""
    took_over: Marker | None = None
    """A stale claim of a run that died before marking; this run answers the transition instead."""

    @property
    def late(self) -> bool:
        return self.why_late is not None and self.late_seconds is not None and self.late_seconds > LATE_AFTER_SECONDS

    def to_dict(self) -> JSON:
        out: JSON = {"via": self.via, "transition": self.transition.to_dict() if self.transition else None,
                     "delivered": self.delivered, "lateSeconds": _round(self.late_seconds), "late": self.late,
                     "duplicateOf": self.duplicate_of.to_dict() if self.duplicate_of else None,
                     "superseded": self.superseded, "marked": self.marked}
        if self.took_over is not None:
            out["tookOver"] = self.took_over.to_dict()
        if self.why_late:
            out["whyLate"] = self.why_late
        return out

    def reasons(self) -> list[str]:
        """Sentences for the plan's reasons."""
        out = []
        if self.duplicate_of is not None and self.transition is not None:
            if self.via == VIA_HAND:
                out.append(f"re-applied by hand on the live state: {self.transition.key} was handled by "
                           f"{self.duplicate_of.describe()}; that record stays the transition's reaction")
            elif self.duplicate_of.state == CLAIMED:
                out.append(f"duplicate delivery: {self.transition.key} is being handled by "
                           f"{self.duplicate_of.describe()} (claimed; in progress): nothing done here")
            else:
                out.append(f"duplicate delivery: {self.transition.key} was already handled by "
                           f"{self.duplicate_of.describe()}; nothing changed")
        if self.took_over is not None and self.transition is not None:
            out.append(f"took over {self.transition.key} from {self.took_over.describe()}: its claim is older than "
                       f"{CLAIM_LEASE_SECONDS:.0f}s (the run died between its claim and its marker)")
        if self.superseded:
            now = self.transition.key if self.transition else "none (the Workload is not in that state now)"
            out.append(f"the delivery is for {self.delivered}, the Workload's current transition is {now}: "
                       "stale or superseded, nothing done (the current one is handled by its own delivery or "
                       "the sweep)")
        if self.late and self.why_late:
            out.append(f"late by {self.late_seconds:.0f}s: {self.why_late}")
        return out


def delivery_via(context: Mapping[str, Any] | None, event_present: bool) -> str:
    if not event_present:
        return VIA_HAND
    return VIA_SWEEP if (context or {}).get("source") == SWEEP_SOURCE else VIA_EVENT


def judge_delivery(reaction: str, *, via: str, live: Mapping[str, Any] | None, delivered_body: Mapping[str, Any] | None,
                   now: datetime, run: str, sweep_reason: str | None = None) -> Delivery:
    """Pure: what this delivery means for the live Workload (module docstring, rules 1-3)."""
    current = transition_for(reaction, live)
    named = transition_for(reaction, delivered_body) if delivered_body is not None else None
    late = (now - current.at).total_seconds() if current is not None and current.at is not None \
        and via != VIA_HAND else None
    why = None
    if via == VIA_SWEEP:
        why = sweep_reason  # None: a transition the sweep records by design (no Sensor runs for it), not late
    elif via == VIA_EVENT:
        why = ("the event reached the step this long after the transition: a backlog on the event path, a Sensor "
               "that was down (JetStream kept the event) or a workflow-controller that was")
    if current is None:
        return Delivery(via, None, named.key if named else None, None, None, superseded=named is not None)
    if via != VIA_HAND and named is not None and (named.key != current.key or _uid(delivered_body) != _uid(live)):
        # Another transition, or the same one of an earlier Workload of this name (deleted and made again).
        return Delivery(via, current, named.key if _uid(delivered_body) == _uid(live)
                        else f"{named.key} of an earlier Workload (uid {_uid(delivered_body)})", late, why,
                        superseded=True)
    marker = read_marker(live, reaction)
    if marker is not None and marker.transition == current.key:
        if run and marker.run == run:
            # A retry of this same run (Argo retried the step): its own claim or marker, the effects are in place.
            return Delivery(via, current, named.key if named else None, late, why, marked=True)
        if marker.claim_is_stale(now) and via != VIA_HAND:
            return Delivery(via, current, named.key if named else None, late, why, marked=True, took_over=marker)
        return Delivery(via, current, named.key if named else None, late, why, duplicate_of=marker)
    return Delivery(via, current, named.key if named else None, late, why, marked=True)


def _uid(obj: Mapping[str, Any] | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("uid") or "")


def _rfc3339(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.isoformat().replace("+00:00", "Z")


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


# -- the event path's partition (what a Sensor starts a run for) ---------------------------------------
def owner_kinds(obj: Mapping[str, Any]) -> list[str]:
    return [str(ref.get("kind")) for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
            if isinstance(ref, Mapping)]


def event_path_runs(reaction: str, obj: Mapping[str, Any]) -> bool:
    """Whether the rendered Sensor starts a run for this Workload's transition (its filter, in Python).

    The Sensor sees only the Workload, so it starts a run where a write may be needed: an owner not
    all of whose kinds are job kinds (a Deployment's pod, a StatefulSet, an unknown or missing owner:
    the conservative answer), and for a finish also a Workload that carries a release record or a
    loan. Every other transition is recorded by the sweep without a step pod. `tests/sensors` checks
    that the rendered filter (through `gpuaas route`) and this function agree."""
    kinds = owner_kinds(obj)
    if reaction == "on-admitted":
        return not kinds or any(k not in NO_ADMISSION_ACTION_KINDS for k in kinds)
    if reaction == "on-finished":
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        return (not kinds or any(k not in NO_FINISH_ACTION_KINDS for k in kinds)
                or any(key in annotations for key in FINISH_ACTION_ANNOTATIONS))
    return True


def workload_status_summary(obj: Mapping[str, Any]) -> JSON:
    wl = Workload(obj)
    return {"status": wl.status(), "admittedAt": _rfc3339(wl.admitted_at), "finishedAt": _rfc3339(wl.finished_at),
            "evictions": evictions(obj), "owners": owner_kinds(obj)}


# -- plans (steps.reactions.on_admitted / on_finished / on_idle) ----------------------------------------
def guard(delivery: Delivery | None, notes: list[str]) -> Any:
    """The plan for a delivery that must change nothing (a duplicate or a superseded one), else None."""
    from steps.plan import Plan

    if delivery is None:
        return None
    if delivery.superseded or (delivery.duplicate_of is not None and delivery.via != VIA_HAND):
        return Plan.nothing(*notes, *delivery.reasons())
    return None


def planned_once(plan_transition: Any, request: Any, state: Any, policy: Any) -> Any:
    """A Workload reaction's plan for this delivery: nothing for a duplicate or superseded delivery; else
    `plan_transition(request, state, policy)`, then the marker that the transition was handled."""
    stop = guard(state.delivery, state.event_notes())
    if stop is not None:
        return stop
    return with_marker(plan_transition(request, state, policy), state.delivery, state.workload_object,
                       run=state.run_id, now=state.now, dry_run_requested=request.dry_run)


def with_marker(plan: Any, delivery: Delivery | None, workload: Mapping[str, Any] | None, *, run: str,
                now: datetime, dry_run_requested: bool) -> Any:
    """`plan` with the delivery's reasons and, when this run is the transition's reaction, its claim and
    marker (bookkeeping: written in policy dry-run too, never with dry-run=true)."""
    from dataclasses import replace

    if delivery is None:
        return plan
    reasons = (*delivery.reasons(), *plan.reasons)
    actions = tuple(plan.actions)
    if delivery.marked and delivery.transition is not None and workload is not None and not dry_run_requested:
        transition = delivery.transition
        actions = claimed_and_marked(plan, workload, transition.reaction, transition.key, run=run or "hand", now=now,
                                     via=delivery.via, what=transition.key)
    return replace(plan, actions=actions, reasons=reasons)


def claimed_and_marked(plan: Any, workload: Mapping[str, Any], reaction: str, key: str, *, run: str, now: datetime,
                       via: str, what: str) -> tuple[Any, ...]:
    """The plan's actions between a claim and the marker (module docstring, rule 3).

    A plan that writes an effect gets `claim` first (conditional on the marker this run read) and
    `mark-handled` last (conditional on its own claim); a plan with nothing to write (or only
    dry-run effects) gets only `mark-handled`, conditional on what it read: one write either way
    decides which run answers the transition."""
    from steps.gateways.resources import WORKLOAD, WORKLOAD_V1BETA1
    from steps.plan import Action

    meta = workload.get("metadata") or {}
    resource = WORKLOAD_V1BETA1 if str(workload.get("apiVersion", "")).endswith("/v1beta1") else WORKLOAD
    name, namespace = str(meta.get("name")), str(meta.get("namespace"))
    annotation = marker_annotation(reaction)
    read = marker_text(workload, reaction)
    handled = marker_value(reaction, key, run, now, via)
    writes = any(not a.bookkeeping and a.operation not in ("none", "already-applied") for a in plan.actions) \
        and not plan.dry_run
    out: tuple[Any, ...] = ()
    expected = read
    if writes:
        claim = marker_value(reaction, key, run, now, via, state=CLAIMED)
        operations, _ = marker_write(workload, reaction, claim, read)
        # The claim also holds the resourceVersion this run read: nothing changed between the observation and
        # the claim, so the plan's own conditional writes on this Workload go on from the claim's version
        # (steps.reactions.apply_actions) instead of conflicting with the claim.
        out += (Action("claim", resource, name, namespace,
                       f"claim {what} for this run before acting (annotation {annotation}, conditional on what this "
                       "run read: a second run for it fails here and records a duplicate)",
                       operation="json-patch", patch=operations,
                       resource_version=str(meta.get("resourceVersion") or "") or None, bookkeeping=True),)
        expected = claim
    out += tuple(plan.actions)
    operations, version = marker_write(workload, reaction, handled, expected)
    out += (Action("mark-handled", resource, name, namespace,
                   f"record on the Workload that {what} was handled by this run (annotation {annotation})",
                   operation="json-patch", patch=operations, resource_version=version if not writes else None,
                   bookkeeping=True),)
    return out


def sweep_run_name(reaction: str, workload_uid: str, key: str, attempt: int = 1) -> str:
    """The name of the run the sweep creates for one transition (`<template>-s-<hash>`, `-<n>` from the
    second attempt on): two passes can never create two runs for one attempt, and a reader can tell the
    sweep's run from a copy of it."""
    digest = hashlib.sha256(f"{workload_uid}/{key}".encode()).hexdigest()[:12]
    base = f"{SWEEP_TEMPLATES[reaction]}-s-{digest}"
    return base if attempt <= 1 else f"{base}-{attempt}"


def sweep_run_attempt(name: str, reaction: str, workload_uid: str, key: str) -> int | None:
    """The attempt number a run name stands for, or None when the sweep would not give it that name."""
    base = sweep_run_name(reaction, workload_uid, key)
    if name == base:
        return 1
    found = re.fullmatch(re.escape(base) + r"-(\d+)", name)
    return int(found.group(1)) if found else None


def recorded_run_record(parameters: Mapping[str, Any], *, name: str | None = None,
                        labels: Mapping[str, str] | None = None) -> JSON | None:
    """The audit record of a run the sweep recorded without a pod (workflow parameters `recorded-by` =
    sweep and `record`), for the readers of run history (gpuaas audit, the engine's timeline, the
    benchmarks' tally); None for every other run, or when the parameter is not a record.

    With the run's `name` and `labels`, a run that is not the sweep's own is returned as a DUPLICATE
    (`delivery.duplicateOf`, not marked, outcome no-op): Argo's resubmit copies the parameters (and
    skips the step again), and anyone who can submit can set them, so only the run whose name the sweep
    derives from the record's transition (`sweep_run_name`), and that is no resubmitted copy, is the
    transition's reaction."""
    if str(parameters.get("recorded-by") or "") != VIA_SWEEP:
        return None
    try:
        record = json.loads(str(parameters.get("record") or ""))
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("data"), dict):
        return None
    if name is None:
        return record
    problem, original = recorded_run_problem(name, labels or {}, record)
    return record if problem is None else as_duplicate(record, original, problem)


def recorded_run_problem(name: str, labels: Mapping[str, str], record: Mapping[str, Any]) -> tuple[str | None, str]:
    """(why a recorded run is not the transition's reaction, or None; the run that is)."""
    data = record.get("data") or {}
    reaction = str(data.get("reaction") or "")
    uid = str((data.get("workload") or {}).get("uid") or "")
    key = str(((data.get("delivery") or {}).get("transition") or {}).get("key") or "")
    expected = sweep_run_name(reaction, uid, key) if reaction in SWEEP_TEMPLATES and uid and key else ""
    source = str(labels.get(RESUBMITTED_LABEL) or "")
    if source:
        return (f"a resubmitted copy of {source} (Argo copied recorded-by=sweep and skipped the step again): "
                f"{source} is the transition's reaction; this run changed nothing"), source
    if not expected:
        return "recorded-by=sweep, but the record names no transition: not the sweep's record", ""
    if sweep_run_attempt(name, reaction, uid, key) is None:
        return (f"recorded-by=sweep, but the sweep names its run for {key} {expected}, not {name}: a copy or a "
                "hand submission, not the transition's reaction"), expected
    return None, name


def as_duplicate(record: Mapping[str, Any], original: str, why: str) -> JSON:
    """A copy of a recorded run's record that says it duplicates `original` and changed nothing."""
    out = copy.deepcopy(dict(record))
    data = out.setdefault("data", {})
    delivery = data.get("delivery") if isinstance(data.get("delivery"), dict) else {}
    transition = delivery.get("transition") if isinstance(delivery.get("transition"), dict) else {}
    key = transition.get("key")
    delivery.update({"duplicateOf": {"transition": key, "run": original, "at": "", "via": VIA_SWEEP,
                                     "state": HANDLED},
                     "marked": False})
    data["delivery"] = delivery
    data["outcome"] = "no-op"
    plan = data.get("plan") if isinstance(data.get("plan"), dict) else {}
    plan["reasons"] = [*(plan.get("reasons") or []), why]
    data["plan"] = plan
    return out
