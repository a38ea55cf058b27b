"""sweep: the level-triggered half of the Workload reactions (CronWorkflow `gpuaas-sweep`).

The event path is edge-triggered: a Workload's transition (admitted, finished) reaches a Sensor as
one UPDATE, and an EventSource restart, a NATS outage, a Sensor whose trigger gave up or a long
apiserver outage can each lose it (docs/catch-up.md). The sweep reads the current state instead,
every period, and converges: every Workload transition that has a reaction gets exactly one.

One pass (`python -m steps sweep FILE`, as ServiceAccount gpuaas-sweep):

1. list every Workload, and the reaction runs in flight (label gpuaas.io/reaction on-admitted or
   on-finished, not yet `workflows.argoproj.io/completed`);
2. for each Workload and tracked reaction (steps.delivery.TRACKED) whose current transition has no
   marker and no run in flight:
   - a transition the Sensor starts no run for (steps.delivery.event_path_runs: a job kind's
     admission or finish, whose reaction writes nothing): the sweep observes it and plans the
     reaction with the reaction's own `observe` and `plan` (read-only; reads are cached for the
     pass), and when the plan writes nothing it RECORDS the run without a pod: a Workflow of the
     reaction's template with `recorded-by=sweep` and the audit record as parameter `record`, then
     the marker. When the plan would write (a loan the Sensor cannot see), it submits a step run;
   - a transition the Sensor should have started a run for, older than `grace`: it was lost on
     the event path (or its run failed). The sweep submits a step run now, with an event that says
     so; the step's record says it came late and why.
3. Every Workflow it creates has a name derived from the transition (`<template>-s-<hash>`), so a
   pass that dies between creating a run and marking it, and the next pass, cannot create two.

Settings (parameters of the template, from the CronWorkflow): `grace` (default 5m), `max-per-pass`
(default 500: a pass creates at most that many runs; the rest wait for the next pass, oldest
first), `dry-run` (list what it would do, create and mark nothing).
"""

from __future__ import annotations

import concurrent.futures
import copy
import json
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from steps.delivery import (
    SWEEP_EVENT_TYPE,
    SWEEP_SOURCE,
    SWEEP_TEMPLATES,
    TRACKED,
    VIA_SWEEP,
    Transition,
    event_path_runs,
    marker_text,
    marker_value,
    marker_write,
    read_marker,
    sweep_run_name,
    transition_for,
)
from steps.plan import JSON, Outcome, ReactionRequest, RejectedInput, StepReport

REACTION = "sweep"
TEMPLATES = SWEEP_TEMPLATES
REACTION_LABEL = "gpuaas.io/reaction"
UID_LABEL = "gpuaas.io/workload-uid"
WORKLOAD_LABEL = "gpuaas.io/workload"
RECORDED_BY_LABEL = "gpuaas.io/recorded-by"
TEMPLATE_LABEL = "workflows.argoproj.io/workflow-template"
COMPLETED_LABEL = "workflows.argoproj.io/completed"
DEFAULT_GRACE = "5m"
DEFAULT_MAX_PER_PASS = 500
THREADS = 8
"""Transitions decided, created and marked in parallel: each is a few API round trips."""
LISTED_IN_RECORD = 100
"""At most this many runs are listed one by one in the sweep's own record (the counts cover all)."""


@dataclass(frozen=True)
class SweepSettings:
    grace_seconds: float
    max_per_pass: int
    dry_run: bool

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> SweepSettings:
        from steps.policy import PolicyError, parse_duration

        request = ReactionRequest.from_params(REACTION, params)
        try:
            grace = parse_duration("grace", (params.get("grace") or DEFAULT_GRACE).strip())
        except PolicyError as error:
            raise RejectedInput("grace", "a duration (seconds, or 30s / 5m / 1h)", repr(params.get("grace")),
                                str(error)) from None
        text = (params.get("max-per-pass") or str(DEFAULT_MAX_PER_PASS)).strip()
        if not text.isdigit() or int(text) < 1:
            raise RejectedInput("max-per-pass", "a whole number >= 1", repr(params.get("max-per-pass")),
                                "the runs one pass may create; the rest wait for the next pass")
        return cls(grace, int(text), request.dry_run)


@dataclass(frozen=True)
class Candidate:
    """One transition no reaction has handled yet."""

    reaction: str
    workload: JSON
    transition: Transition
    event_path: bool
    """The Sensor starts a run for it (so the sweep only catches it up after `grace`)."""

    @property
    def name(self) -> str:
        return str((self.workload.get("metadata") or {}).get("name"))

    @property
    def namespace(self) -> str:
        return str((self.workload.get("metadata") or {}).get("namespace"))

    @property
    def uid(self) -> str:
        return str((self.workload.get("metadata") or {}).get("uid") or "")


@dataclass
class PassReport:
    """What one pass saw and did (the sweep's own record)."""

    counts: dict[str, int] = field(default_factory=dict)
    runs: list[JSON] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def count(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n


# -- pure parts -----------------------------------------------------------------------------------
def in_flight(workflows: list[JSON]) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(reaction, Workload uid) and (reaction, Workload name label) of every run not yet completed."""
    by_uid: set[tuple[str, str]] = set()
    by_name: set[tuple[str, str]] = set()
    for wf in workflows:
        labels = (wf.get("metadata") or {}).get("labels") or {}
        if labels.get(COMPLETED_LABEL) == "true":
            continue
        reaction = labels.get(REACTION_LABEL, "")
        if labels.get(UID_LABEL):
            by_uid.add((reaction, labels[UID_LABEL]))
        if labels.get(WORKLOAD_LABEL):
            by_name.add((reaction, labels[WORKLOAD_LABEL]))
    return by_uid, by_name


def candidates(workloads: list[JSON], workflows: list[JSON], now: datetime, grace_seconds: float,
               report: PassReport) -> list[Candidate]:
    """The transitions to record or deliver now, oldest first (pure)."""
    from steps.names import label_value

    by_uid, by_name = in_flight(workflows)
    found: list[Candidate] = []
    for workload in workloads:
        meta = workload.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            report.count("being deleted")
            continue
        for reaction in TRACKED:
            transition = transition_for(reaction, workload)
            if transition is None:
                continue
            report.count("transitions")
            marker = read_marker(workload, reaction)
            if marker is not None and marker.transition == transition.key:
                report.count("handled")
                continue
            if (reaction, str(meta.get("uid") or "")) in by_uid or \
                    (reaction, label_value(str(meta.get("name") or ""))) in by_name:
                report.count("run in flight")
                continue
            sensor = event_path_runs(reaction, workload)
            age = (now - transition.at).total_seconds() if transition.at else grace_seconds
            if sensor and age < grace_seconds:
                report.count("left to the event path (within the grace period)")
                continue
            found.append(Candidate(reaction, workload, transition, sensor))
    order = {reaction: i for i, reaction in enumerate(TRACKED)}
    found.sort(key=lambda c: (c.transition.at or now, order[c.reaction]))
    return found


def run_name(candidate: Candidate, attempt: int = 1) -> str:
    """A name derived from the transition and the attempt: two passes can never create two runs for one
    attempt (steps.delivery.sweep_run_name)."""
    return sweep_run_name(candidate.reaction, candidate.uid, candidate.transition.key, attempt)


def sweep_event(candidate: Candidate, now: datetime, reason: str | None) -> JSON:
    """The event a sweep delivery carries: the Workload as the sweep read it (steps.events: SWEEP)."""
    data: JSON = {"type": SWEEP_EVENT_TYPE, "body": candidate.workload, "transition": candidate.transition.key}
    if reason:
        data["reason"] = reason
    return {"context": {"specversion": "1.0", "id": uuid.uuid4().hex, "source": SWEEP_SOURCE,
                        "subject": candidate.reaction, "type": "sweep", "time": _rfc3339(now),
                        "datacontenttype": "application/json"},
            "data": data}


def catch_up_reason(candidate: Candidate, age: float) -> str:
    if candidate.event_path:
        return (f"no reaction {age:.0f}s after the transition (the grace period is over): the event path lost it "
                "(an EventSource, EventBus or Sensor outage, a trigger that gave up while the apiserver was down) or "
                "its run failed; the sweep delivers it")
    return ("the Sensor starts no run for this owner kind, and the plan has a write to make (a loan on the "
            "ClusterQueue, which the Sensor cannot see): the sweep delivers it to a step")


def workflow_body(candidate: Candidate, namespace: str, event: JSON, *, record: JSON | None) -> JSON:
    """The run the sweep creates: the reaction's template, its parameters, labels to find it by."""
    from steps.names import label_value

    labels = {REACTION_LABEL: candidate.reaction, UID_LABEL: candidate.uid, TEMPLATE_LABEL: TEMPLATES[candidate.reaction],
              WORKLOAD_LABEL: label_value(candidate.name)}
    tenant = ((candidate.workload.get("status") or {}).get("admission") or {}).get("clusterQueue") or ""
    parameters = [("namespace", candidate.namespace), ("workload", candidate.name),
                  ("event", json.dumps(event, separators=(",", ":"))), ("dry-run", "false"), ("tenant", str(tenant))]
    if record is not None:
        labels[RECORDED_BY_LABEL] = "sweep"
        parameters += [("recorded-by", "sweep"), ("record", json.dumps(record, separators=(",", ":")))]
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": run_name(candidate), "namespace": namespace, "labels": labels},
            "spec": {"workflowTemplateRef": {"name": TEMPLATES[candidate.reaction]},
                     "arguments": {"parameters": [{"name": n, "value": v} for n, v in parameters]}}}


def _rfc3339(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


# -- reads cached for a pass ----------------------------------------------------------------------------
class CachedReads:
    """A read-through cache over the Kubernetes gateway for one pass: a namespace's ScaledObjects, a
    tenant's LocalQueue and ClusterQueue are read once for every Workload that asks. Writes go through."""

    def __init__(self, kube: Any) -> None:
        self._kube = kube
        self._gets: dict[tuple[str, str, str | None], JSON | None] = {}
        self._lists: dict[tuple[str, str | None, str | None], list[JSON]] = {}
        self._lock = threading.Lock()

    def prime(self, resource: Any, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        self._gets[(str(resource), str(meta.get("name")), meta.get("namespace"))] = obj

    def get(self, resource: Any, name: str, namespace: str | None = None, subresource: str | None = None) -> Any:
        if subresource:
            return self._kube.get(resource, name, namespace, subresource=subresource)
        key = (str(resource), name, namespace)
        with self._lock:
            known = key in self._gets
        if not known:  # two threads may both read it once: harmless
            found = self._kube.get(resource, name, namespace)
            with self._lock:
                self._gets.setdefault(key, found)
        with self._lock:
            return copy.deepcopy(self._gets[key])

    def list(self, resource: Any, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> list[JSON]:
        key = (str(resource), namespace, f"{label_selector}|{field_selector}")
        with self._lock:
            known = key in self._lists
        if not known:
            found = self._kube.list(resource, namespace, label_selector, field_selector)
            with self._lock:
                self._lists.setdefault(key, found)
        with self._lock:
            return copy.deepcopy(self._lists[key])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kube, name)


# -- the step ---------------------------------------------------------------------------------------------
def step(context: Any) -> StepReport:
    from steps.gateways.errors import KubernetesError
    from steps.gateways.resources import WORKFLOW, WORKLOAD

    started = time.perf_counter()
    settings = SweepSettings.from_params(context.params)
    request = ReactionRequest.from_params(REACTION, {k: v for k, v in context.params.items()
                                                     if k in ("dry-run", "event", "tenant")})
    now = context.now()
    kube = context.kube
    report = PassReport()
    t = time.perf_counter()
    workloads = kube.list(WORKLOAD)
    selector = f"{REACTION_LABEL} in ({','.join(TEMPLATES)}),{COMPLETED_LABEL}!=true"
    workflows = kube.list(WORKFLOW, context.namespace, label_selector=selector)
    report.count("workloads", len(workloads))
    found = candidates(workloads, workflows, now, settings.grace_seconds, report)
    observe_s = time.perf_counter() - t
    reads = CachedReads(kube)
    for workload in workloads:
        reads.prime(WORKLOAD, workload)
    actions: list[JSON] = []
    results: list[JSON] = []
    lock = threading.Lock()
    timing = {"plan": 0.0, "apply": 0.0}

    def handle(candidate: Candidate) -> None:
        t = time.perf_counter()
        try:
            record, reason = _decide(context, reads, candidate, now)
        except (KubernetesError, RejectedInput) as error:
            with lock:
                report.count("not decided (read failed)")
                report.errors.append(f"{candidate.namespace}/{candidate.name} {candidate.reaction}: {error}")
            return
        planned = time.perf_counter() - t
        kind = "record" if record is not None else "deliver"
        body = workflow_body(candidate, context.namespace, sweep_event(candidate, now, reason), record=record)
        entry = {"action": "record-run" if record is not None else "deliver-run",
                 "target": {"kind": "Workflow", "namespace": context.namespace, "name": body["metadata"]["name"]},
                 "reason": (f"{candidate.reaction} for {candidate.namespace}/{candidate.name} "
                            f"({candidate.transition.key}): "
                            + ("nothing to write; recorded without a step pod" if record is not None else str(reason)))}
        if settings.dry_run:
            with lock:
                timing["plan"] += planned
                report.count(f"would {kind}")
                if len(actions) < LISTED_IN_RECORD:
                    actions.append(entry)
                    results.append({**entry, "before": None, "after": None, "result": "dry-run"})
            return
        counted, errors, run = _create_and_mark(kube, body, candidate, record, now, context.namespace)
        with lock:
            timing["plan"] += planned
            timing["apply"] += time.perf_counter() - t - planned
            report.count(counted)
            report.errors.extend(errors)
            if run is not None and len(actions) < LISTED_IN_RECORD:
                actions.append(entry)
                results.append({**entry, "before": None, "after": {"run": run}, "result": "applied"})

    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(handle, found[: settings.max_per_pass]))
    plan_s, apply_s = timing["plan"], timing["apply"]
    if len(found) > settings.max_per_pass:
        report.count("left for the next pass (max-per-pass)", len(found) - settings.max_per_pass)
    made = sum(report.counts.get(k, 0) for k in ("recorded without a pod", "delivered to a step"))
    reasons = [f"{key}: {value}" for key, value in sorted(report.counts.items())]
    if len(found) > LISTED_IN_RECORD:
        reasons.append(f"the first {LISTED_IN_RECORD} runs are listed; the counts cover all")
    outcome = Outcome.APPLIED if made else Outcome.NO_OP
    if report.errors and not made:
        outcome = Outcome.FAILED if report.counts.get("not created (API error)") else outcome
    return StepReport(
        reaction=REACTION, outcome=outcome, request=request, errors=report.errors[:50],
        plan={"actions": actions, "reasons": reasons}, results=results,
        observed={"counts": dict(report.counts), "graceSeconds": settings.grace_seconds,
                  "maxPerPass": settings.max_per_pass, "candidates": len(found)},
        metrics={"recorded": float(report.counts.get("recorded without a pod", 0)),
                 "delivered": float(report.counts.get("delivered to a step", 0))},
        timings={"observeSeconds": observe_s, "planSeconds": plan_s, "applySeconds": apply_s,
                 "totalSeconds": time.perf_counter() - started})


def _create_and_mark(kube: Any, body: JSON, candidate: Candidate, record: JSON | None, now: datetime,
                     namespace: str) -> tuple[str, list[str], str | None]:
    """Create the run (its name is the transition's); for a recorded run, then the marker. Returns (what to
    count, errors, the run's uid or None when nothing was created)."""
    from steps.gateways.errors import Conflict, KubernetesError
    from steps.gateways.resources import WORKFLOW

    errors: list[str] = []
    try:
        created = kube.create(WORKFLOW, body, namespace)
        run = str((created.get("metadata") or {}).get("uid") or body["metadata"]["name"])
        counted = "recorded without a pod" if record is not None else "delivered to a step"
    except Conflict:
        existing = kube.get(WORKFLOW, body["metadata"]["name"], namespace) or {}
        run = str((existing.get("metadata") or {}).get("uid") or body["metadata"]["name"])
        counted = "run existed (an earlier pass)"
        phase = (existing.get("status") or {}).get("phase")
        if record is None and phase in ("Failed", "Error"):
            errors.append(f"the sweep's run {body['metadata']['name']} for {candidate.namespace}/{candidate.name} "
                          f"({candidate.transition.key}) ended {phase}; not delivered again: resubmit it, or submit "
                          "the reaction by hand")
    except KubernetesError as error:
        return "not created (API error)", [f"create {body['metadata']['name']}: {error}"], None
    if record is not None:
        error = mark_recorded(kube, candidate, run, now)
        if error:
            errors.append(f"marker on {candidate.namespace}/{candidate.name}: {error} (the next pass finds the run "
                          "and marks it)")
    return counted, errors, run


def mark_recorded(kube: Any, candidate: Candidate, run: str, now: datetime, *, via: str = VIA_SWEEP) -> str | None:
    """Mark the candidate's transition handled, conditional on the marker the pass read (steps.delivery
    `marker_write`): a run that claimed or answered it meanwhile wins. On a conflict the Workload is read
    once more and, if the transition is still unmarked, written again. Returns an error, or None."""
    from steps.gateways.errors import Conflict, KubernetesError, PermanentError
    from steps.gateways.resources import WORKLOAD

    workload = candidate.workload
    for _ in range(2):
        value = marker_value(candidate.reaction, candidate.transition.key, run, now, via)
        operations, version = marker_write(workload, candidate.reaction, value,
                                           marker_text(workload, candidate.reaction))
        if version:
            operations = [{"op": "test", "path": "/metadata/resourceVersion", "value": version}, *operations]
        try:
            kube.json_patch(WORKLOAD, candidate.name, operations, candidate.namespace)
            return None
        except (Conflict, PermanentError) as error:
            if isinstance(error, PermanentError) and error.status != 422:
                return str(error)
            try:
                workload = kube.get(WORKLOAD, candidate.name, candidate.namespace)
            except KubernetesError as again:
                return str(again)
            marker = read_marker(workload, candidate.reaction)
            if workload is None or transition_for(candidate.reaction, workload) != candidate.transition:
                return None  # deleted or moved on: nothing to mark
            if marker is not None and marker.transition == candidate.transition.key and not marker.claim_is_stale(now):
                return None  # another run claimed or answered it: that run's record is the reaction
        except KubernetesError as error:
            return str(error)
    return "the Workload kept changing while the sweep marked it"


def _decide(context: Any, reads: CachedReads, candidate: Candidate, now: datetime) -> tuple[JSON | None, str | None]:
    """(the audit record of a run that needs no pod, None) or (None, why a step must run it)."""
    age = (now - candidate.transition.at).total_seconds() if candidate.transition.at else 0.0
    if candidate.event_path:
        return None, catch_up_reason(candidate, age)
    from steps.reactions import StepContext, _fill_from_state, load
    from steps.record import build_record

    module = load(candidate.reaction)
    event = sweep_event(candidate, now, None)
    params = {"namespace": candidate.namespace, "workload": candidate.name,
              "event": json.dumps(event, separators=(",", ":")), "dry-run": "false", "tenant": ""}
    inner = StepContext(candidate.reaction, params, context.environ, kube=reads,
                        policy=context.policy if candidate.reaction == "on-admitted" else None, now=now)
    request = ReactionRequest.from_params(candidate.reaction, params)
    state = module.observe(inner, request)
    report = StepReport(reaction=candidate.reaction, outcome=Outcome.NO_OP, request=request, timings={})
    _fill_from_state(report, state)
    done = ("recorded by the catch-up sweep without a step pod: the plan writes nothing; the sweep marks the "
            "transition handled on the Workload")
    try:
        if candidate.reaction == "on-admitted":
            plan = module.plan(request, state, inner.policy)
        else:
            from steps.policy import Policy

            plan = module.plan(request, state, Policy())
    except RejectedInput as error:
        # The policy ConfigMap is broken: the step would record rejected-input for this job kind, and write nothing.
        report.outcome, report.errors = Outcome.REJECTED_INPUT, [str(error)]
        report.plan = {"actions": [], "reasons": [done]}
        return build_record(report, now=now), None
    effects = [a for a in plan.actions if not a.bookkeeping]
    if effects:
        return None, catch_up_reason(candidate, age)
    report.outcome = plan.empty_outcome
    report.plan = plan.to_dict()
    report.plan["actions"] = []
    report.plan["reasons"] = [*report.plan["reasons"], done]
    report.metrics = dict(plan.metrics)
    return build_record(report, now=now), None
