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
     the marker. When the plan would write (a loan the Sensor cannot see), or the Workload has no
     admission to name its tenant (NO_ADMISSION), it submits a step run;
   - a transition the Sensor should have started a run for, older than `grace`: it was lost on
     the event path (or its run failed). The sweep submits a step run now, with an event that says
     so; the step's record says it came late and why.
3. every Workload whose idle warning (steps.warning, annotation gpuaas.io/idle-warning) is pending and past
   its `releaseAfter` is delivered once to gpuaas-on-idle (as by hand: namespace and workload), which
   releases it if it is still idle and cancels the warning otherwise (`due_warnings`): the release after
   the grace does not wait for Alertmanager's next re-send, and a warning whose alert resolved is not
   left pending. A warning the step left pending (the release waited) is delivered once more when it has
   lapsed (steps.warning.lapse_reason), so the step records that even when no alert is re-sent; a run that
   exists is found in the list of these runs, not by a create that fails every pass;
4. Every Workflow it creates has a name derived from the transition (`<template>-s-<hash>`; a warning's:
   `gpuaas-on-idle-w-<hash>`), so a
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
    CLAIMED,
    SWEEP_EVENT_TYPE,
    SWEEP_SOURCE,
    SWEEP_TEMPLATES,
    TRACKED,
    VIA_ADOPTED,
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
ATTEMPT_LABEL = "gpuaas.io/sweep-attempt"
"""On every run the sweep delivers to a step: which attempt for its transition it is (1, 2, ...)."""
TRANSITION_LABEL = "gpuaas.io/sweep-transition"
"""On every run the sweep creates: the transition's hash (the one in the run's name)."""
PHASE_LABEL = "workflows.argoproj.io/phase"
CRON_NAME = "gpuaas-sweep"
"""The CronWorkflow that runs the sweep: its creationTimestamp is when gpuaas was installed (D6: transitions
older than that are adopted, not answered)."""
DEFAULT_GRACE = "5m"
DEFAULT_MAX_PER_PASS = 500
DEFAULT_PAGE_SIZE = 500
MAX_ATTEMPTS = 6
"""A transition whose delivered runs failed this many times is left to an admin (an error in every pass)."""
RETRY_BACKOFF_SECONDS = (120.0, 240.0, 480.0, 960.0, 1920.0)
"""The wait after attempt n failed before attempt n+1 (the last value repeats): about an hour in all, longer
than an apiserver or controller outage the step's own retries (about 75 s) cannot ride out."""
THREADS = 8
"""Transitions decided, created and marked in parallel: each is a few API round trips."""
LISTED_IN_RECORD = 100
"""At most this many runs are listed one by one in the sweep's own record (the counts cover all)."""


@dataclass(frozen=True)
class SweepSettings:
    grace_seconds: float
    max_per_pass: int
    dry_run: bool
    page_size: int = DEFAULT_PAGE_SIZE
    installed_at: datetime | None = None
    """Set by hand (parameter `installed-at`); else read from the CronWorkflow."""

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
        page = (params.get("page-size") or str(DEFAULT_PAGE_SIZE)).strip()
        if not page.isdigit() or int(page) < 1:
            raise RejectedInput("page-size", "a whole number >= 1", repr(params.get("page-size")),
                                "Workloads read per list request")
        installed = None
        if (params.get("installed-at") or "").strip():
            from steps.model.workload import parse_time

            installed = parse_time(str(params["installed-at"]).strip())
            if installed is None:
                raise RejectedInput("installed-at", "an RFC 3339 time (2026-12-01T08:00:00Z) or empty",
                                    repr(params.get("installed-at")),
                                    "empty: the CronWorkflow gpuaas-sweep's creationTimestamp")
        return cls(grace, int(text), request.dry_run, int(page), installed)


@dataclass(frozen=True)
class Candidate:
    """One transition no reaction has handled yet."""

    reaction: str
    workload: JSON
    transition: Transition
    event_path: bool
    """The Sensor starts a run for it (so the sweep only catches it up after `grace`)."""
    attempt: int = 1
    """Which sweep run for this transition this is (2 and on: the earlier ones failed)."""
    earlier: str = ""
    """What happened to the earlier attempt (for the delivery's reason)."""
    adopt: bool = False
    """The transition predates the install: marked adopted, no run."""

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
    notes: list[str] = field(default_factory=list)

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


@dataclass(frozen=True)
class Attempt:
    """A run the sweep delivered for a transition, as its labels and status say."""

    attempt: int
    phase: str
    finished: datetime | None
    completed: bool


def sweep_history(workflows: list[JSON]) -> dict[tuple[str, str, str], list[Attempt]]:
    """(Workload uid, reaction, transition hash) -> the sweep's delivered runs for it (pure)."""
    from steps.model.workload import parse_time

    out: dict[tuple[str, str, str], list[Attempt]] = {}
    for wf in workflows:
        meta = wf.get("metadata") or {}
        labels = meta.get("labels") or {}
        text = str(labels.get(ATTEMPT_LABEL) or "")
        if not text.isdigit() or not labels.get(TRANSITION_LABEL):
            continue
        status = wf.get("status") or {}
        phase = str(status.get("phase") or labels.get(PHASE_LABEL) or "")
        key = (str(labels.get(UID_LABEL) or ""), str(labels.get(REACTION_LABEL) or ""), str(labels[TRANSITION_LABEL]))
        # Without a finish time (a run that never started), the back-off counts from its creation.
        finished = parse_time(str(status.get("finishedAt") or meta.get("creationTimestamp") or ""))
        out.setdefault(key, []).append(Attempt(int(text), phase, finished,
                                               labels.get(COMPLETED_LABEL) == "true"
                                               or phase in ("Succeeded", "Failed", "Error")))
    return out


def transition_hash(uid: str, key: str) -> str:
    return sweep_run_name("on-admitted", uid, key).rsplit("-", 1)[-1]


def backoff_seconds(failed_attempt: int) -> float:
    return RETRY_BACKOFF_SECONDS[min(failed_attempt, len(RETRY_BACKOFF_SECONDS)) - 1]


def candidates(workloads: list[JSON], workflows: list[JSON], now: datetime, grace_seconds: float,
               report: PassReport, *, history: dict[tuple[str, str, str], list[Attempt]] | None = None,
               installed_at: datetime | None = None) -> list[Candidate]:
    """The transitions to adopt, record or deliver now, oldest first (pure).

    `history`: the sweep's earlier delivered runs (sweep_history). A transition whose last delivered run
    ended without answering it (Failed, Error, or Succeeded and still unmarked) is delivered again as the
    next attempt once RETRY_BACKOFF_SECONDS have passed, at most MAX_ATTEMPTS times; waiting ones take no
    place of max-per-pass. `installed_at`: a transition older than the install is adopted (docs/catch-up.md)."""
    from steps.names import label_value

    by_uid, by_name = in_flight(workflows)
    history = history or {}
    found: list[Candidate] = []
    for workload in workloads:
        meta = workload.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            report.count("being deleted")
            continue
        uid = str(meta.get("uid") or "")
        for reaction in TRACKED:
            transition = transition_for(reaction, workload)
            if transition is None:
                continue
            report.count("transitions")
            marker = read_marker(workload, reaction)
            current = marker is not None and marker.transition == transition.key
            if current and marker.state != CLAIMED:
                report.count("handled")
                continue
            if (reaction, uid) in by_uid or (reaction, label_value(str(meta.get("name") or ""))) in by_name:
                report.count("run in flight")
                continue
            if current and not marker.claim_is_stale(now):
                report.count("claimed by a run (in progress)")
                continue
            attempts = sorted(history.get((uid, reaction, transition_hash(uid, transition.key)), []),
                              key=lambda a: a.attempt)
            # Adopted only when the sweep never delivered it: a CronWorkflow re-created after the transition
            # (a reinstall, a GitOps replace) moves the install time, and a
            # transition with a sweep run of its own was seen by this product (its retries go on).
            if installed_at is not None and transition.at is not None and transition.at < installed_at \
                    and not current and not attempts:
                found.append(Candidate(reaction, workload, transition, False, adopt=True))
                continue
            sensor = event_path_runs(reaction, workload)
            age = (now - transition.at).total_seconds() if transition.at else grace_seconds
            if sensor and age < grace_seconds:
                report.count("left to the event path (within the grace period)")
                continue
            if attempts:
                last = attempts[-1]
                if not last.completed:
                    report.count("run in flight")
                    continue
                if last.attempt >= MAX_ATTEMPTS:
                    report.count("gave up (attempts exhausted)")
                    report.errors.append(
                        f"{meta.get('namespace')}/{meta.get('name')} {reaction} ({transition.key}): {last.attempt} "
                        f"sweep runs ended without answering it (the last {last.phase}); not delivered again: "
                        "read their records (gpuaas audit --workload ...), then submit the reaction by hand")
                    continue
                wait = backoff_seconds(last.attempt)
                if last.finished is not None and (now - last.finished).total_seconds() < wait:
                    report.count("waiting to retry (back-off)")
                    continue
                earlier = (f"sweep attempt {last.attempt} ended {last.phase or 'without a phase'}"
                           f"{' at ' + _rfc3339(last.finished) if last.finished else ''} without answering it")
                found.append(Candidate(reaction, workload, transition, sensor, attempt=last.attempt + 1,
                                       earlier=earlier))
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


def admitted_by(workload: JSON) -> str:
    """The ClusterQueue of the Workload's admission (status.admission), or "" when it has none."""
    return str(((workload.get("status") or {}).get("admission") or {}).get("clusterQueue") or "")


NO_ADMISSION = ("the Workload has no admission (it finished while evicted or deactivated): its tenant is read from "
                "its LocalQueue, which only the steps' ServiceAccount may read; the sweep delivers it to a step")
"""Why a job kind's transition goes to a step pod when its Workload has no status.admission. The sweep plans only
what its read-only grants cover: the tenant comes from the admission, and gpuaas-sweep may not read LocalQueues
(steps.model.tenancy reads one only without an admission). An Admitted Workload has one, and Kueue v0.19 keeps it
on a Workload that finishes (pkg/workload/finish Finish only adds the condition); it takes it back on an eviction
only once the job has no active pods (jobframework reconciler, "handle eviction"). So a job kind's Workload
finishes without one only when a job that was stopped still ends: an edge, worth a step pod rather than a grant
no real transition uses."""


def catch_up_reason(candidate: Candidate, age: float) -> str:
    if candidate.attempt > 1:
        return (f"attempt {candidate.attempt} of {MAX_ATTEMPTS}: {candidate.earlier}; the sweep delivers it again "
                f"{age:.0f}s after the transition")
    if candidate.event_path:
        return (f"no reaction {age:.0f}s after the transition (the grace period is over): the event path lost it "
                "(an EventSource, EventBus or Sensor outage, a trigger that gave up while the apiserver was down) or "
                "its run failed; the sweep delivers it")
    if not admitted_by(candidate.workload):
        return NO_ADMISSION
    return ("the Sensor starts no run for this owner kind, and the plan has a write to make (a loan on the "
            "ClusterQueue, which the Sensor cannot see): the sweep delivers it to a step")


def workflow_body(candidate: Candidate, namespace: str, event: JSON, *, record: JSON | None) -> JSON:
    """The run the sweep creates: the reaction's template, its parameters, labels to find it by."""
    from steps.names import label_value

    labels = {REACTION_LABEL: candidate.reaction, UID_LABEL: candidate.uid, TEMPLATE_LABEL: TEMPLATES[candidate.reaction],
              WORKLOAD_LABEL: label_value(candidate.name),
              TRANSITION_LABEL: transition_hash(candidate.uid, candidate.transition.key)}
    if record is None:
        labels[ATTEMPT_LABEL] = str(candidate.attempt)
    parameters = [("namespace", candidate.namespace), ("workload", candidate.name),
                  ("event", json.dumps(event, separators=(",", ":"))), ("dry-run", "false"),
                  ("tenant", admitted_by(candidate.workload))]
    if record is not None:
        labels[RECORDED_BY_LABEL] = "sweep"
        parameters += [("recorded-by", "sweep"), ("record", json.dumps(record, separators=(",", ":")))]
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": run_name(candidate, candidate.attempt), "namespace": namespace, "labels": labels},
            "spec": {"workflowTemplateRef": {"name": TEMPLATES[candidate.reaction]},
                     "arguments": {"parameters": [{"name": n, "value": v} for n, v in parameters]}}}


IDLE_TEMPLATE = "gpuaas-on-idle"
"""The template of the runs the sweep creates for idle warnings whose grace has passed (steps.warning)."""
DELIVERS_LABEL, DELIVERS_WARNING = "gpuaas.io/delivers", "idle-warning"
"""The label of those runs: a pass lists them to know which warnings it has delivered."""


def due_warnings(workloads: list[JSON], now: datetime) -> list[tuple[JSON, Any]]:
    """(Workload, its warning) for every pending idle warning whose grace has passed (pure).

    The level-triggered half of "warn, then release": Alertmanager re-sends a still-firing alert every 65
    minutes as rendered, so without this a release would wait up to that long after its grace; and an alert
    that resolved (activity) is not sent again at all (send_resolved: false), so the warning would stay
    pending on the object. The sweep delivers each such Workload once to gpuaas-on-idle (submitted as by
    hand: namespace and workload, no alert); the step re-judges the live state and releases (linking the
    warning) or cancels it (activity, the opt-out)."""
    from steps.warning import read_warning

    due = []
    for workload in workloads:
        warning = read_warning(workload)
        if warning is not None and warning.pending and warning.due(now):
            due.append((workload, warning))
    return due


def warning_run_body(workload: JSON, warning: Any, namespace: str, now: datetime) -> JSON:
    """The gpuaas-on-idle run for one due warning: its name is the warning's (one run per warning, whichever
    pass creates it), with `-lapse` once the warning has lapsed (steps.warning.lapse_reason: a second and last
    delivery, for a warning the first one left pending)."""
    import hashlib

    from steps.model.workload import Workload
    from steps.names import label_value
    from steps.warning import lapse_reason

    meta = workload.get("metadata") or {}
    uid, name = str(meta.get("uid") or ""), str(meta.get("name"))
    digest = hashlib.sha256(f"{uid}/{warning.episode}/{warning.warned_at}".encode()).hexdigest()[:12]
    lapsed = lapse_reason(warning, now, uid=uid, admitted_at=Workload(workload).admitted_at) is not None
    tenant = ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue") or ""
    parameters = [("namespace", str(meta.get("namespace"))), ("workload", name), ("event", ""), ("dry-run", "false"),
                  ("tenant", str(tenant))]
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": f"{IDLE_TEMPLATE}-w-{digest}" + ("-lapse" if lapsed else ""), "namespace": namespace,
                         "labels": {REACTION_LABEL: "on-idle", UID_LABEL: uid, TEMPLATE_LABEL: IDLE_TEMPLATE,
                                    WORKLOAD_LABEL: label_value(name), DELIVERS_LABEL: DELIVERS_WARNING}},
            "spec": {"workflowTemplateRef": {"name": IDLE_TEMPLATE},
                     "arguments": {"parameters": [{"name": n, "value": v} for n, v in parameters]}}}


def _rfc3339(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


# -- reads cached for a pass ----------------------------------------------------------------------------
class CachedReads:
    """A read-through cache over the Kubernetes gateway for one pass: a namespace's ScaledObjects and a tenant's
    ClusterQueue are read once for every Workload that asks (no LocalQueue: a Workload without an admission, the
    only one whose tenant needs it, goes to a step, NO_ADMISSION). Writes go through."""

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
def installed_at(kube: Any, namespace: str, report: PassReport) -> datetime | None:
    """When gpuaas was installed: the CronWorkflow gpuaas-sweep's creationTimestamp (kept by `kubectl apply`
    of an upgrade; a CronWorkflow deleted and created again moves it). None when it cannot be read (a pass
    submitted by hand in a cluster without the CronWorkflow): then nothing is adopted."""
    from steps.gateways.errors import KubernetesError
    from steps.gateways.resources import CRON_WORKFLOW
    from steps.model.workload import parse_time

    try:
        cron = kube.get(CRON_WORKFLOW, CRON_NAME, namespace)
    except KubernetesError as error:
        report.count("install time unknown (nothing adopted)")
        report.notes.append(f"CronWorkflow {CRON_NAME} could not be read ({error}): nothing adopted this pass")
        return None
    if cron is None:
        report.count("install time unknown (nothing adopted)")
        report.notes.append(f"no CronWorkflow {CRON_NAME} in {namespace}: nothing adopted this pass")
        return None
    return parse_time(str((cron.get("metadata") or {}).get("creationTimestamp") or ""))


def step(context: Any) -> StepReport:
    from steps.gateways.errors import Conflict, KubernetesError
    from steps.gateways.resources import WORKFLOW, WORKLOAD

    started = time.perf_counter()
    settings = SweepSettings.from_params(context.params)
    request = ReactionRequest.from_params(REACTION, {k: v for k, v in context.params.items()
                                                     if k in ("dry-run", "event", "tenant")})
    now = context.now()
    kube = context.kube
    report = PassReport()
    t = time.perf_counter()
    selector = f"{REACTION_LABEL} in ({','.join(TEMPLATES)}),{COMPLETED_LABEL}!=true"
    workflows = kube.list(WORKFLOW, context.namespace, label_selector=selector)
    history = sweep_history([wf for page in kube.list_pages(WORKFLOW, context.namespace,
                                                            label_selector=f"{ATTEMPT_LABEL},{TRANSITION_LABEL}",
                                                            limit=settings.page_size) for wf in page])
    install = settings.installed_at or installed_at(kube, context.namespace, report)
    try:
        delivered = {str((wf.get("metadata") or {}).get("name")) for wf in kube.list(
            WORKFLOW, context.namespace, label_selector=f"{DELIVERS_LABEL}={DELIVERS_WARNING}")}
    except KubernetesError as error:
        delivered = set()
        report.notes.append(f"the idle warnings' runs were not listed ({error}): a run that exists meets a Conflict")
    # The Workloads one page at a time (D5: a cluster of 10,000 Workloads is not held in a 512Mi pod at
    # once); only the transitions to act on are kept, the oldest `max-per-pass` of them.
    found: list[Candidate] = []
    warnings: list[tuple[JSON, Any]] = []
    workloads = 0
    try:
        for page in kube.list_pages(WORKLOAD, limit=settings.page_size):
            workloads += len(page)
            for workload in page:
                (workload.get("metadata") or {}).pop("managedFields", None)
            warnings.extend(due_warnings(page, now)[:max(0, settings.max_per_pass - len(warnings))])
            found = _oldest([*found, *candidates(page, workflows, now, settings.grace_seconds, report,
                                                 history=history, installed_at=install)], settings.max_per_pass,
                            report)
    except KubernetesError as error:
        report.errors.append(f"listing Workloads stopped after {workloads} ({error}); the next pass lists again")
    report.count("workloads", workloads)
    observe_s = time.perf_counter() - t
    reads = CachedReads(kube)
    for candidate in found:
        reads.prime(WORKLOAD, candidate.workload)
    actions: list[JSON] = []
    results: list[JSON] = []
    lock = threading.Lock()
    timing = {"plan": 0.0, "apply": 0.0}

    def listed(entry: JSON, result: str, after: JSON | None) -> None:
        if len(actions) < LISTED_IN_RECORD:
            actions.append(entry)
            results.append({**entry, "before": None, "after": after, "result": result})

    def handle(candidate: Candidate) -> None:
        t = time.perf_counter()
        where = f"{candidate.namespace}/{candidate.name}"
        if candidate.adopt:
            entry = {"action": "adopt", "target": {"kind": "Workload", "namespace": candidate.namespace,
                                                   "name": candidate.name},
                     "reason": f"{candidate.reaction} for {where} ({candidate.transition.key}): the transition predates "
                               f"the install ({_rfc3339(install) if install else '?'}); marked adopted, no run"}
            if settings.dry_run:
                with lock:
                    report.count("would adopt")
                    listed(entry, "dry-run", None)
                return
            error = mark_recorded(kube, candidate, "", now, via=VIA_ADOPTED)
            with lock:
                timing["apply"] += time.perf_counter() - t
                if error:
                    report.count("not adopted (API error)")
                    report.errors.append(f"adopt {where} {candidate.reaction}: {error}")
                else:
                    report.count("adopted (before install)")
                    listed(entry, "applied", {"marker": VIA_ADOPTED})
            return
        try:
            record, reason = _decide(context, reads, candidate, now)
        except (KubernetesError, RejectedInput) as error:
            with lock:
                report.count("not decided (read failed)")
                report.errors.append(f"{where} {candidate.reaction}: {error}")
            return
        planned = time.perf_counter() - t
        kind = "record" if record is not None else "deliver"
        event = sweep_event(candidate, now, reason)
        body = workflow_body(candidate, context.namespace, event, record=record)
        entry = {"action": "record-run" if record is not None else "deliver-run",
                 "target": {"kind": "Workflow", "namespace": context.namespace, "name": body["metadata"]["name"]},
                 "reason": (f"{candidate.reaction} for {where} ({candidate.transition.key}): "
                            + ("nothing to write; recorded without a step pod" if record is not None else str(reason)))}
        if settings.dry_run:
            with lock:
                timing["plan"] += planned
                report.count(f"would {kind}")
                listed(entry, "dry-run", None)
            return
        counted, errors, run = _create_and_mark(kube, body, candidate, record, now, context.namespace)
        with lock:
            timing["plan"] += planned
            timing["apply"] += time.perf_counter() - t - planned
            report.count(counted)
            if candidate.attempt > 1 and run is not None:
                report.count("retried (an earlier sweep run failed)")
            report.errors.extend(errors)
            if run is not None:
                listed(entry, "applied", {"run": run})

    def warned(item: tuple[JSON, Any]) -> None:
        workload, warning = item
        meta = workload.get("metadata") or {}
        body = warning_run_body(workload, warning, context.namespace, now)
        if body["metadata"]["name"] in delivered:
            with lock:
                report.count("idle warning run existed (an earlier pass)")
            return
        entry = {"action": "deliver-idle-warning",
                 "target": {"kind": "Workflow", "namespace": context.namespace, "name": body["metadata"]["name"]},
                 "reason": (f"on-idle for {meta.get('namespace')}/{meta.get('name')}: the idle warning's grace is "
                            f"over ({warning.describe()}); the step releases it if still idle, else cancels it")}
        if settings.dry_run:
            with lock:
                report.count("would deliver idle warning")
                listed(entry, "dry-run", None)
            return
        try:
            created = kube.create(WORKFLOW, body, context.namespace)
            counted, run = "idle warning delivered", str((created.get("metadata") or {}).get("uid") or "")
        except Conflict:
            counted, run = "idle warning run existed (an earlier pass)", ""
        except KubernetesError as error:
            with lock:
                report.count("idle warning not delivered (API error)")
                report.errors.append(f"create {body['metadata']['name']}: {error}")
            return
        with lock:
            report.count(counted)
            if run:
                listed(entry, "applied", {"run": run})

    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(handle, found))
        list(pool.map(warned, warnings))
    plan_s, apply_s = timing["plan"], timing["apply"]
    made = sum(report.counts.get(k, 0) for k in ("recorded without a pod", "delivered to a step",
                                                 "adopted (before install)", "idle warning delivered"))
    reasons = [f"{key}: {value}" for key, value in sorted(report.counts.items())] + report.notes
    if len(found) > LISTED_IN_RECORD:
        reasons.append(f"the first {LISTED_IN_RECORD} runs are listed; the counts cover all")
    # D2: a pass with errors is a failed pass, whatever else it did: an admin must see it (gpuaas audit
    # hides only sweep passes that did nothing and had no error).
    outcome = Outcome.FAILED if report.errors else (Outcome.APPLIED if made else Outcome.NO_OP)
    return StepReport(
        reaction=REACTION, outcome=outcome, request=request, errors=report.errors[:50],
        plan={"actions": actions, "reasons": reasons}, results=results,
        observed={"counts": dict(report.counts), "graceSeconds": settings.grace_seconds,
                  "maxPerPass": settings.max_per_pass, "candidates": len(found),
                  "installedAt": _rfc3339(install) if install else None},
        metrics={"recorded": float(report.counts.get("recorded without a pod", 0)),
                 "delivered": float(report.counts.get("delivered to a step", 0)),
                 "adopted": float(report.counts.get("adopted (before install)", 0)),
                 "idleWarningsDelivered": float(report.counts.get("idle warning delivered", 0))},
        timings={"observeSeconds": observe_s, "planSeconds": plan_s, "applySeconds": apply_s,
                 "totalSeconds": time.perf_counter() - started})


def _oldest(found: list[Candidate], limit: int, report: PassReport) -> list[Candidate]:
    """The `limit` oldest transitions; the rest are counted and wait for the next pass."""
    if len(found) <= limit:
        return found
    order = {reaction: i for i, reaction in enumerate(TRACKED)}
    found.sort(key=lambda c: (c.transition.at.timestamp() if c.transition.at else 0.0, order[c.reaction]))
    report.count("left for the next pass (max-per-pass)", len(found) - limit)
    return found[:limit]


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
    if candidate.event_path or not admitted_by(candidate.workload):
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
