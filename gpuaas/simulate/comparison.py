"""One run of `gpuaas simulate`: the given policy, the same policy with the idle window swept, and
the baselines, all scored on the same history by the same definitions."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpuaas.simulate import baselines
from gpuaas.simulate.alert_rule import Episodes, PodAlerts, RuleTimings
from gpuaas.simulate.costs import COSTS, kinds_of
from gpuaas.simulate.definitions import MATERIAL_SECONDS, IdleSamples
from gpuaas.simulate.demand import QueueModel
from gpuaas.simulate.history import History
from gpuaas.simulate.product import ProductTimings, format_duration
from gpuaas.simulate.replay import Replay
from gpuaas.simulate.scorecard import Bound, Releases, by_kind, by_tenant, judge_releases, summary
from gpuaas.simulate.signal_window import SignalWindow
from gpuaas.simulate.step_window import StepWindow
from steps.policy import Policy

DEFAULT_SWEEP = (300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0)
Progress = Callable[[str, float], None]


@dataclass
class PolicyRun:
    """One policy's outcome on the history."""

    name: str
    kind: str
    """given | sweep | baseline"""
    description: str
    releases: Releases
    total: dict[str, Any]
    tenants: dict[str, dict[str, Any]]
    dry_run_plans: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    deliveries: int = 0
    settings: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    bound: Bound | None = None
    kinds: dict[str, dict[str, Any]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "description": self.description, "settings": self.settings,
                "total": self.total, "tenants": self.tenants, "kinds": self.kinds, "dryRunPlans": self.dry_run_plans,
                "onIdleRuns": dict(sorted(self.outcomes.items())), "webhookDeliveries": self.deliveries,
                "seconds": round(self.seconds, 3)}


def with_window(policy: Policy, seconds: float) -> Policy:
    """The same policy with every tenant's and kind's idle window set to `seconds`."""
    return policy.with_window(seconds)


def shortest_window(policy: Policy) -> float:
    """The rule window `gpuaas render` derives from a policy: its shortest idle window (tenants and kinds)."""
    return min(policy.windows())


class Simulator:
    """A history, the definitions' thresholds (the given policy's, per tenant), and cached work."""

    def __init__(self, history: History, policy: Policy, timings: ProductTimings, *,
                 reaction_delay: float = 0.0, progress: Progress | None = None) -> None:
        self.history = history
        self.policy = policy
        self.timings = timings
        self.reaction_delay = reaction_delay
        self.progress = progress
        tenants = history.workloads.tenant
        by_tenant_threshold = {t: policy.idle_for(t).threshold for t in set(tenants.tolist())}
        thresholds = np.asarray([by_tenant_threshold[t] for t in tenants.tolist()], dtype=np.float64)
        self.samples = IdleSamples.of(history, thresholds)
        self.window = StepWindow(history)
        self.signal_window = SignalWindow(history)
        self.kinds = kinds_of(self.samples)
        self._alerts: dict[RuleTimings, tuple[PodAlerts, Episodes]] = {}

    def _alert_episodes(self, rule: RuleTimings) -> tuple[PodAlerts, Episodes]:
        if rule not in self._alerts:
            alerts = PodAlerts(self.history, rule)
            self._alerts[rule] = (alerts, alerts.episodes())
        return self._alerts[rule]

    def policy_waits(self, policy: Policy) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(wait, earliest, scope, wait from the start) per workload for `policy`'s bound: its idle window for
        the workload's tenant and kind, admission + minimum runtime, every workload not exempt, and the
        window's covered share (minCoverage) for a quiet run that begins with the workload."""
        workloads = self.history.workloads
        kinds = kinds_of(self.samples)
        cache: dict[tuple[str, str], tuple[float, float, float]] = {}
        wait = np.empty(len(workloads))
        minimum = np.empty(len(workloads))
        coverage = np.empty(len(workloads))
        for w, (tenant, kind) in enumerate(zip(workloads.tenant.tolist(), kinds.tolist(), strict=True)):
            key = (str(tenant), str(kind))
            if key not in cache:
                settings = policy.idle_for(*key)
                cache[key] = (settings.window_seconds, settings.min_runtime_seconds, settings.min_coverage)
            wait[w], minimum[w], coverage[w] = cache[key]
        return wait, workloads.admitted_at + minimum, ~workloads.exempt, wait * coverage

    def lease_ends(self, workload: np.ndarray, when: np.ndarray) -> np.ndarray:
        """When each release's GPUs are wanted back: for a wrong release, when material activity comes back
        plus the time until someone resumes it (costs.KindCost.resume_seconds); else the workload's end."""
        samples = self.samples
        workload = np.asarray(workload, dtype=np.int64)
        when = np.asarray(when, dtype=np.float64)
        if len(workload) == 0:
            return np.zeros(0)
        row = samples.row_at(workload, when)
        wrong = samples.material_after(row, workload) >= MATERIAL_SECONDS
        back = samples.row_begin[np.minimum(samples.next_material[row], len(samples.row_begin) - 1)]
        resume = np.asarray([COSTS[k].resume_seconds for k in self.kinds[workload].tolist()])
        return np.where(wrong, back + resume, self.history.workloads.end[workload])

    def _lease_end(self, workload: int, when: float) -> float:
        return float(self.lease_ends(np.array([workload]), np.array([when]))[0])

    def queue_figures(self, workload: np.ndarray, when: np.ndarray) -> tuple[dict[str, Any], np.ndarray]:
        """What the releases (in time order) handed to queued work, and each one's wait to be admitted again
        (aligned with judge_releases' order); ({}, zeros) without a queue."""
        order = np.lexsort((workload, when))
        workload, when = np.asarray(workload)[order], np.asarray(when)[order]
        queue = self.history.queue
        if queue is None:
            return {}, np.zeros(len(workload))
        model = QueueModel(queue)
        ends = self.lease_ends(workload, when)
        gpus = self.history.workloads.gpus
        for w, t, end in zip(workload.tolist(), when.tolist(), ends.tolist(), strict=True):
            model.release(t, int(gpus[w]), end)
        model.advance(self.history.end)
        waits = np.asarray([model.readmission_wait(end) if end < self.history.workloads.end[w] else 0.0
                            for w, end in zip(workload.tolist(), ends.tolist(), strict=True)])
        figures = {"cohortGpus": int(queue.capacity), "handedToQueuedGpuHours": round(model.handed_gpu_seconds / 3600, 3),
                   "queueHoursSaved": round(model.saved_seconds / 3600, 3), "jobsStartedEarly": model.started_early,
                   "queuedJobs": int(np.sum(queue.admitted > queue.submitted)),
                   "queueHoursInHistory": round(float(np.sum(np.where(np.isfinite(queue.admitted),
                                                                      queue.admitted - queue.submitted, 0.0))) / 3600, 3)}
        return figures, waits

    def _scored(self, name: str, kind: str, description: str, workload: np.ndarray, when: np.ndarray,
                started: float, *, bound: tuple[np.ndarray, ...], **extra: Any) -> PolicyRun:
        queue, waits = self.queue_figures(np.asarray(workload, dtype=np.int64), np.asarray(when, dtype=np.float64))
        releases = judge_releases(self.samples, workload, when, queue_wait=waits)
        reach = Bound.of(self.samples, *bound)
        total = summary(self.samples, releases, reach)
        if queue:
            total["queue"] = queue
        run = PolicyRun(name=name, kind=kind, description=description, releases=releases,
                        total=total, tenants=by_tenant(self.samples, releases, reach), bound=reach,
                        kinds=by_kind(self.samples, releases, reach), **extra)
        run.seconds = time.perf_counter() - started
        return run

    def run_policy(self, name: str, kind: str, policy: Policy, rule: RuleTimings, *,
                   mode: str | None = None) -> PolicyRun:
        started = time.perf_counter()
        alerts, episodes = self._alert_episodes(rule)
        replay = Replay(self.history, self.window, alerts, episodes, policy, self.timings.notifications,
                        reaction_delay=self.reaction_delay, mode=mode, signal_window=self.signal_window,
                        lease_end=self._lease_end)
        report = (lambda share: self.progress(name, share)) if self.progress else None
        result = replay.run(report)
        settings = {"policy": {"default": policy.idle.to_dict(),
                               "tenants": {t: s.to_dict() for t, s in sorted(policy.tenants.items())}},
                    "rule": {"window": format_duration(rule.window_seconds), "for": format_duration(rule.for_seconds),
                             "threshold": rule.threshold},
                    "alertmanager": {"groupWait": format_duration(self.timings.notifications.group_wait),
                                     "groupInterval": format_duration(self.timings.notifications.group_interval),
                                     "repeatInterval": format_duration(self.timings.notifications.repeat_interval)}}
        if mode:
            settings["modeOverride"] = mode
        description = (f"idle.window {format_duration(policy.idle.window_seconds)}, rule window "
                       f"{format_duration(rule.window_seconds)} + for {format_duration(rule.for_seconds)}")
        return self._scored(name, kind, description, result.release_workload, result.release_time, started,
                            bound=self.policy_waits(policy), dry_run_plans=len(result.dry_run_workload),
                            outcomes=result.outcomes, deliveries=result.deliveries, settings=settings)

    def run_baselines(self) -> list[PolicyRun]:
        runs = []
        workloads = self.history.workloads
        everyone = np.ones(len(workloads), dtype=bool)
        started = time.perf_counter()
        runs.append(self._scored("no automation", "baseline", "nothing is released", np.zeros(0, np.int64),
                                 np.zeros(0), started, bound=self.policy_waits(self.policy)))
        for keda in (baselines.KedaTimings(), baselines.KedaTimings(cooldown_period=1800.0)):
            started = time.perf_counter()
            workload, when = baselines.keda_only(self.samples, keda)
            name = "KEDA only" if keda == baselines.KedaTimings() else \
                f"KEDA only, cooldown {format_duration(keda.cooldown_period)}"
            runs.append(self._scored(
                name, "baseline", f"scale to 0 after {keda.cooldown_period:g}s at or below the threshold (polling "
                f"{keda.polling_interval:g}s, initialCooldownPeriod {keda.initial_cooldown_period:g}s); no minimum "
                "runtime, no coverage check", workload, when, started,
                bound=(np.full(len(workloads), keda.cooldown_period), workloads.start.copy(), everyone),
                settings={"pollingInterval": keda.polling_interval, "cooldownPeriod": keda.cooldown_period,
                          "initialCooldownPeriod": keda.initial_cooldown_period}))
        notebooks = kinds_of(self.samples) == "notebook"
        for culler in (baselines.CullerTimings(), baselines.CullerTimings(cull_idle_seconds=3600.0)):
            started = time.perf_counter()
            workload, when = baselines.notebook_culler(self.samples, culler)
            default = culler == baselines.CullerTimings()
            name = "Kubeflow culler" if default else f"Kubeflow culler {format_duration(culler.cull_idle_seconds)}"
            runs.append(self._scored(
                name, "baseline", f"Notebooks stopped {culler.cull_idle_seconds / 3600:g}h after their last "
                "activity (" + ("notebook-controller default timings" if default else "CULL_IDLE_TIME "
                                f"{culler.cull_idle_seconds / 60:g}") + "; culling itself needs ENABLE_CULLING=true)",
                workload, when, started,
                bound=(np.full(len(workloads), culler.cull_idle_seconds), workloads.start.copy(), notebooks),
                settings={"cullIdleTime": culler.cull_idle_seconds, "idlenessCheckPeriod": culler.check_period}))
        return runs

    def compare(self, *, sweep: Sequence[float] = DEFAULT_SWEEP, mode: str | None = None,
                given_name: str = "given policy", variants: bool = True) -> list[PolicyRun]:
        """The given policy (with the rendered rule), its variants (every tenant releasing on demand; GPU
        activity only, without the kinds' own evidence), the window sweep (rule window following the
        policy, as `gpuaas render` derives it), then the baselines."""
        runs = [self.run_policy(given_name, "given", self.policy, self.timings.rule, mode=mode)]
        if variants:
            for label, changes in (("on demand", {"release_on": "demand"}), ("GPU activity only", {"signal": "none"})):
                policy = self.policy.with_everywhere(**changes)
                rule = replace(self.timings.rule, window_seconds=shortest_window(policy))
                runs.append(self.run_policy(f"{given_name}, {label}", "variant", policy, rule, mode=mode))
        for seconds in sweep:
            policy = with_window(self.policy, seconds)
            rule = replace(self.timings.rule, window_seconds=shortest_window(policy))
            runs.append(self.run_policy(f"window {format_duration(seconds)}", "sweep", policy, rule, mode=mode))
        runs.extend(self.run_baselines())
        return runs
