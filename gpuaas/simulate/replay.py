"""Replay a history through the product: the idle alert, Alertmanager, and the on-idle decision.

The pipeline, as deployed (docs/observability.md):

1. `GPUWorkloadIdle` fires per pod (`alert_rule`: window, `for`, threshold of the rendered rule).
2. Alertmanager groups firing alerts as the idle route's group_by says (rendered: `(alertname,
   namespace)`) and sends a group to the webhook (`alertmanager.AlertGroup`: group_wait,
   group_interval, repeat_interval, as v0.25 does).
3. Each delivery runs idle-alerts, which fans out one on-idle step per Workload with a firing
   alert; the on-idle step reads Prometheus over the tenant's window (`step_window`) and decides
   with **the production judgement**, `steps.reactions.on_idle.judge`, fed with the facts the step
   would have observed; idleness is judged by `steps.gateways.metrics.first_idleness_failure`.
4. A release (not in dry-run) makes the workload released until its end: its samples stop, so its
   alerts resolve within one window, and it counts towards the tenant's releases in the last hour.

Time only jumps between events (alerts firing or resolving, group flushes, step runs), so a month
of history is a few hundred thousand events, not 43 M samples; the per-sample work (alert
episodes, window readings) is vectorised in the modules this one calls.
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import numpy as np

from gpuaas.simulate.alert_rule import Episodes, PodAlerts
from gpuaas.simulate.alertmanager import AlertGroup, NotificationTimings
from gpuaas.simulate.demand import QueueModel
from gpuaas.simulate.history import History
from gpuaas.simulate.signal_window import SignalWindow
from gpuaas.simulate.step_window import StepWindow
from steps import demand as demand_model
from steps.gateways.metrics import first_idleness_failure
from steps.policy import IdleSettings, Policy, kind_of
from steps.reactions.on_idle import IdleFacts, judge
from steps.warning import LAPSE_AFTER_DUE_SECONDS, IdleWarning, grace, judged_seconds

FIRE, RESOLVE, FLUSH, STEP, SWEEP = 0, 1, 2, 3, 4
"""Event kinds; at equal times alerts change before a flush reads them, and a flush before its steps."""
SWEEP_PERIOD = 120.0
"""The catch-up sweep's schedule (workflows/sweep.py: every 2 minutes): it delivers each idle warning whose grace
is over to on-idle (steps.reactions.sweep.due_warnings) at its first pass after `releaseAfter`, and a warning still
pending once more at its first pass after it lapsed (`releaseAfter` + steps.warning.LAPSE_AFTER_DUE_SECONDS)."""

NOT_IDLE_REASONS = {
    "no-data": "no DCGM samples in the window: idleness not confirmed",
    "short-coverage": "samples cover less of the window than idle.minCoverage: idleness not confirmed",
    "busy": "a GPU went above the threshold in the window",
}


@dataclass
class ReplayResult:
    """What the product would have done: releases, dry-run plans, and how every on-idle run ended."""

    release_workload: np.ndarray
    release_time: np.ndarray
    dry_run_workload: np.ndarray
    dry_run_time: np.ndarray
    outcomes: Counter[str] = field(default_factory=Counter)
    """On-idle runs by the rule that decided them (`IdleDecision.gate`)."""
    deliveries: int = 0
    """Webhook deliveries (each is one gpuaas-on-idle workflow)."""


class Replay:
    """One replay of `history` under `policy` (see the module docstring)."""

    def __init__(self, history: History, window: StepWindow, alerts: PodAlerts, episodes: Episodes,
                 policy: Policy, notifications: NotificationTimings, *, reaction_delay: float = 0.0,
                 mode: str | None = None, signal_window: SignalWindow | None = None,
                 lease_end: Callable[[int, float], float] | None = None) -> None:
        self.history = history
        self.window = window
        self.signal_window = signal_window or SignalWindow(history)
        self.lease_end = lease_end
        """When a release's GPUs would be wanted back (the queue model's lease): its end, or when a wrong
        release's job wants them again."""
        self.cohort = QueueModel(history.queue) if history.queue is not None else None
        self.alerts = alerts
        self.episodes = episodes
        self.policy = policy
        self.timings = notifications
        self.delay = reaction_delay
        self.mode = mode
        workloads = history.workloads
        self.pod_workload = history.pods.workload
        if notifications.group_by == "pod":
            self.pod_group = [f"{ns}/{pod}" for ns, pod in zip(workloads.namespace[self.pod_workload].tolist(),
                                                               history.pods.name.tolist(), strict=True)]
        elif notifications.group_by == "all":
            self.pod_group = [""] * len(self.pod_workload)
        else:
            self.pod_group = [str(ns) for ns in workloads.namespace[self.pod_workload].tolist()]
        self.pods_of: dict[int, list[int]] = {}
        for pod, owner in enumerate(self.pod_workload.tolist()):
            self.pods_of.setdefault(owner, []).append(pod)
        self.version = [0] * len(self.pod_workload)
        self.name = workloads.name.tolist()
        self.tenant = [str(t) for t in workloads.tenant.tolist()]
        kinds: dict[str, str] = {}
        self.kind = [kinds.setdefault(str(k), kind_of(str(k))) for k in workloads.kind.tolist()]
        self.start = workloads.start.tolist()
        self.admitted = workloads.admitted_at.tolist()
        self.end = workloads.end.tolist()
        self.gpus = workloads.gpus.tolist()
        self.exempt_by = [f"Workload {n}" if e else None for n, e in zip(self.name, workloads.exempt.tolist(),
                                                                           strict=True)]
        self.target = [f"{ns}/{n}" for ns, n in zip(workloads.namespace.tolist(), self.name, strict=True)]
        self.pod_count = [len(self.pods_of.get(w, [])) for w in range(len(workloads))]
        self.released_at: dict[int, float] = {}
        self.warnings: dict[int, IdleWarning] = {}
        """The annotation gpuaas.io/idle-warning each workload would carry (steps.warning), by workload."""
        self.fired_at: dict[int, float] = {}
        """When each pod's current alert episode fired (its startsAt): a workload's episode is the earliest."""
        self.releases_by_tenant: dict[str, list[float]] = {}
        self.settings: dict[tuple[str, str], IdleSettings] = {}
        self.groups: dict[str, AlertGroup] = {}
        self.queue: list[tuple[float, int, int, int, object]] = []
        self.sequence = 0
        self.result = ReplayResult(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64), np.zeros(0))
        self._releases: list[tuple[int, float]] = []
        self._dry_runs: list[tuple[int, float]] = []

    # -- events ------------------------------------------------------------------------------------
    def _push(self, when: float, kind: int, payload: object) -> None:
        self.sequence += 1
        heapq.heappush(self.queue, (when, kind, self.sequence, 0, payload))

    def _slot_time(self, pod: int, slot: int) -> float:
        return float(self.history.t0 + (self.history.first[self.pod_workload[pod]] + slot) * self.history.step)

    def run(self, progress: Callable[[float], None] | None = None) -> ReplayResult:
        episodes = self.episodes
        for pod, fire, resolve in zip(episodes.pod.tolist(), episodes.fire.tolist(), episodes.resolve.tolist(),
                                      strict=True):
            self._push(self._slot_time(pod, fire), FIRE, (pod, 0))
            self._push(self._slot_time(pod, resolve), RESOLVE, (pod, 0))
        span = max(self.history.end - self.history.t0, 1.0)
        handled = 0
        while self.queue:
            when, kind, _, _, payload = heapq.heappop(self.queue)
            if kind == FIRE:
                self._fire(when, *payload)  # type: ignore[misc]
            elif kind == RESOLVE:
                self._resolve(*payload)  # type: ignore[misc]
            elif kind == FLUSH:
                self._flush(when, *payload)  # type: ignore[misc]
            elif kind == SWEEP:
                self._sweep(when, *payload)  # type: ignore[misc]
            else:
                self._steps(when, payload)  # type: ignore[arg-type]
            handled += 1
            if progress is not None and handled % 20000 == 0:
                progress(min(1.0, (when - self.history.t0) / span))
        if progress is not None:
            progress(1.0)
        if self._releases:
            workload, times = zip(*self._releases, strict=True)
            self.result.release_workload = np.asarray(workload, dtype=np.int64)
            self.result.release_time = np.asarray(times, dtype=np.float64)
        if self._dry_runs:
            workload, times = zip(*self._dry_runs, strict=True)
            self.result.dry_run_workload = np.asarray(workload, dtype=np.int64)
            self.result.dry_run_time = np.asarray(times, dtype=np.float64)
        return self.result

    def _group(self, pod: int) -> AlertGroup:
        key = self.pod_group[pod]
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = AlertGroup(key, self.timings)
        return group

    def _fire(self, when: float, pod: int, version: int) -> None:
        if version != self.version[pod]:
            return
        group = self._group(pod)
        if pod not in group.firing:
            self.fired_at[pod] = when
        flush_at = group.fire(pod, when)
        if flush_at is not None:
            self._push(flush_at, FLUSH, (group.key, group.generation))

    def _resolve(self, pod: int, version: int) -> None:
        if version != self.version[pod]:
            return
        self._group(pod).resolve(pod)

    def _flush(self, when: float, key: str, generation: int) -> None:
        group = self.groups[key]
        if generation != group.generation:
            return
        delivered, next_flush = group.flush(when)
        if delivered:
            self.result.deliveries += 1
            workloads = sorted({int(self.pod_workload[pod]) for pod in delivered})
            self._push(when + self.delay, STEP, workloads)
        if next_flush is not None:
            self._push(next_flush, FLUSH, (group.key, group.generation))

    # -- the on-idle step ------------------------------------------------------------------------
    def _settings(self, tenant: str, kind: str) -> IdleSettings:
        settings = self.settings.get((tenant, kind))
        if settings is None:
            settings = self.policy.idle_for(tenant, kind)
            if self.mode is not None:
                settings = replace(settings, mode=self.mode)
            self.settings[(tenant, kind)] = settings
        return settings

    def facts(self, workload: int, now: float, episode: str = "") -> tuple[IdleFacts, IdleSettings]:
        """What the on-idle step would observe for `workload` at `now` for a delivery of `episode` (see
        IdleState.facts; with a pending warning it acts on, over the span since the warning, as the step reads it:
        steps.warning.judged_seconds)."""
        tenant = self.tenant[workload]
        kind = self.kind[workload]
        settings = self._settings(tenant, kind)
        warning = self.warnings.get(workload)
        if warning is not None:
            span = judged_seconds(settings.window_seconds, warning, episode, datetime.fromtimestamp(now, UTC),
                                  admitted_at=datetime.fromtimestamp(self.admitted[workload], UTC))
            if span != settings.window_seconds:
                settings = replace(settings, window_seconds=span)
        start, end = self.start[workload], self.end[workload]
        released = self.released_at.get(workload)
        alive = start <= now < end
        not_idle = evidence = demand = None
        busy = False
        if alive and released is None:
            reading = self.window.read(workload, now, settings.window_seconds)
            failed = first_idleness_failure(reading.observations, reading.coverage, reading.max_activity,
                                            settings.threshold, settings.min_coverage)
            not_idle = None if failed is None else NOT_IDLE_REASONS[failed]
            busy = reading.max_activity is not None and reading.max_activity > settings.threshold
            evidence = self.signal_window.evidence(workload, kind, settings, now)
            if settings.release_on == "demand" and self.cohort is not None:
                waiting, free = self.cohort.waiting(now)
                demand = demand_model.verdict(demand_model.Demand(
                    cohort="cohort", pending=tuple((f"job {j}", g) for j, g in waiting), free_gpus=free),
                    self.gpus[workload])
        times = self.releases_by_tenant.get(tenant)
        last_hour = len(times) - bisect.bisect_left(times, now - 3600.0) if times else 0
        released_at = None if released is None else datetime.fromtimestamp(released, UTC).isoformat()
        return IdleFacts(
            target=self.target[workload], finished=now >= end, released=released is not None,
            released_at=released_at, admitted=now >= start, exempt_by=self.exempt_by[workload],
            runtime_seconds=max(0.0, now - self.admitted[workload]), pods=self.pod_count[workload] if alive else 0,
            not_idle=not_idle, busy=busy, idle_summary=f"idle for {settings.window_seconds:g}s", releases_last_hour=last_hour,
            tenant=tenant, gpus=self.gpus[workload], kind=kind, evidence=evidence, demand=demand,
        ), settings

    def _episode(self, workload: int) -> str:
        """The workload's idle episode as the step keys it (steps.delivery.idle_episode): the earliest startsAt
        of its pods' firing alerts."""
        firing = [self.fired_at[p] for p in self.pods_of.get(workload, []) if p in self._group(p).firing
                  and p in self.fired_at]
        if not firing:
            return ""
        return "idle@" + datetime.fromtimestamp(min(firing), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _steps(self, now: float, workloads: list[int], *, by_hand: bool = False) -> None:
        """One on-idle step per workload; `by_hand`: the sweep's delivery (no alert, so no episode)."""
        for workload in workloads:
            episode = "" if by_hand else self._episode(workload)
            facts, settings = self.facts(workload, now, episode)
            decision = judge(facts, settings)
            self.result.outcomes[decision.gate] += 1
            if settings.warn_seconds > 0 or workload in self.warnings:
                # the grace period, with the step's own code (steps.warning.grace)
                period = grace(decision.verdict, decision.gate, decision.reasons, settings.warn_seconds,
                               self.warnings.get(workload), episode, datetime.fromtimestamp(now, UTC), "replay",
                               activity=bool(decision.details.get("activity", True)),
                               admitted_at=datetime.fromtimestamp(self.admitted[workload], UTC))
                if period.step in ("warn", "cancel", "wait", "lapse"):
                    self.result.outcomes[f"warning-{period.step}"] += 1
                if period.step == "warn" and not decision.dry_run:
                    self.warnings[workload] = period.warning  # type: ignore[assignment]
                    due, t0 = now + settings.warn_seconds, self.history.t0
                    given = (workload, period.warning.warned_at)  # type: ignore[union-attr]
                    self._push(t0 + np.ceil((due - t0) / SWEEP_PERIOD) * SWEEP_PERIOD, SWEEP, given)
                    lapse = due + LAPSE_AFTER_DUE_SECONDS
                    self._push(t0 + (np.floor((lapse - t0) / SWEEP_PERIOD) + 1) * SWEEP_PERIOD, SWEEP, given)
                elif period.step in ("cancel", "release", "lapse") and (period.warning or period.superseded):
                    self.warnings[workload] = period.warning or period.superseded  # type: ignore[assignment]
                if period.step in ("warn", "wait"):
                    continue
            if not decision.releases:
                continue
            if decision.dry_run:
                self._dry_runs.append((workload, now))
                continue
            self._release(workload, now, facts.tenant or "")

    def _sweep(self, now: float, workload: int, warned_at: str) -> None:
        """A sweep pass for the warning given at `warned_at`: if it is still the workload's, pending and due, it is
        delivered to the step (the second pass: the warning the first left pending, lapsed by now)."""
        warning = self.warnings.get(workload)
        if warning is not None and warning.warned_at == warned_at and warning.pending and \
                warning.due(datetime.fromtimestamp(now, UTC)):
            self.result.outcomes["warning-swept"] += 1
            self._steps(now, [workload], by_hand=True)

    def _release(self, workload: int, now: float, tenant: str) -> None:
        self.released_at[workload] = now
        self._releases.append((workload, now))
        if self.cohort is not None:
            until = self.lease_end(workload, now) if self.lease_end is not None else self.end[workload]
            self.cohort.release(now, self.gpus[workload], until)
        self.releases_by_tenant.setdefault(tenant, []).append(now)
        history = self.history
        cut = int(np.ceil((now - history.t0) / history.step - 1e-9)) - int(history.first[workload])
        for pod in self.pods_of[workload]:
            self.version[pod] += 1
            version = self.version[pod]
            group = self._group(pod)
            firing = pod in group.firing
            episodes = self.alerts.after_release(pod, cut, firing)
            for fire, resolve in episodes:
                if fire is not None:
                    self._push(max(self._slot_time(pod, fire), now), FIRE, (pod, version))
                self._push(max(self._slot_time(pod, resolve), now), RESOLVE, (pod, version))
            if firing and not any(fire is None for fire, _ in episodes):
                group.resolve(pod)
