"""What a set of releases did to a history, per tenant and in total, by the definitions
(gpuaas.simulate.definitions): idle and reclaimed GPU-hours (right and wrong releases apart), the
bound for the policy's wait and the share of it reached, releases and wrong releases (by count, by
GPUs, by the busy GPU-hours still ahead), latency, and what wrong releases cost (gpuaas.simulate.costs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuaas.simulate.costs import release_costs
from gpuaas.simulate.definitions import MATERIAL_SECONDS, IdleSamples


@dataclass
class Releases:
    """Releases of one policy: which workload, when; with what each did (filled by `judge_releases`)."""

    workload: np.ndarray
    time: np.ndarray
    reclaimed_gpu_hours: np.ndarray = field(default_factory=lambda: np.zeros(0))
    wrong: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    """Material activity of MATERIAL_SECONDS or more came back before the workload ended."""
    latency: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Release time minus its stretch's start; NaN for a release outside an idle stretch."""
    stretch: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    activity_back: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """When material activity came back (a wrong release), else the workload's end."""
    wrong_any: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    """Any sample above the idle threshold came back (the strict definition)."""
    gpus: np.ndarray = field(default_factory=lambda: np.zeros(0))
    busy_ahead_gpu_hours: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Material GPU-hours the workload still had ahead of it after the release."""
    lost_gpu_hours: np.ndarray = field(default_factory=lambda: np.zeros(0))
    restart_gpu_hours: np.ndarray = field(default_factory=lambda: np.zeros(0))
    wait_gpu_hours: np.ndarray = field(default_factory=lambda: np.zeros(0))
    owner_back: np.ndarray | None = None
    """The workload's own source showed work for MATERIAL_SECONDS after the release (None: no signals)."""

    @classmethod
    def none(cls) -> Releases:
        return cls(np.zeros(0, dtype=np.int64), np.zeros(0))

    @property
    def cost_gpu_hours(self) -> np.ndarray:
        return self.lost_gpu_hours + self.restart_gpu_hours + self.wait_gpu_hours


@dataclass
class Bound:
    """What a policy could reach at its wait (IdleSamples.bound), GPU-seconds per workload."""

    last_stretch: np.ndarray
    every_stretch: np.ndarray

    @classmethod
    def of(cls, samples: IdleSamples, wait: np.ndarray, earliest: np.ndarray, scope: np.ndarray,
           start_wait: np.ndarray | None = None) -> Bound:
        return cls(*samples.bound(wait, earliest, scope, start_wait))

    @classmethod
    def zero(cls, samples: IdleSamples) -> Bound:
        count = len(samples.history.workloads)
        return cls(np.zeros(count), np.zeros(count))


def judge_releases(samples: IdleSamples, workload: np.ndarray, when: np.ndarray,
                   queue_wait: np.ndarray | None = None) -> Releases:
    """Releases with what each reclaimed, whether each was wrong, its latency, the work ahead of it
    and what it cost. `queue_wait`: seconds each release's job would wait in the queue when wanted
    again (aligned with the releases sorted by time, then workload), from the demand model."""
    workload = np.asarray(workload, dtype=np.int64)
    when = np.asarray(when, dtype=np.float64)
    order = np.lexsort((workload, when))
    workload, when = workload[order], when[order]
    if len(workload) == 0:
        none = Releases.none()
        none.owner_back = None if samples.history.signals is None else np.zeros(0, dtype=bool)
        return none
    history = samples.history
    row = samples.row_at(workload, when)
    segment_end = samples.segment_end(workload)
    wrong = samples.material_after(row, workload) >= MATERIAL_SECONDS
    wrong_any = samples.next_busy[row] < segment_end
    back = np.where(wrong, samples.next_material[row], segment_end)
    gpu_seconds = samples.idle_gpu_seconds_from(workload, when, back)
    stretch = samples.stretch_of_row[row]
    latency = np.full(len(when), np.nan)
    inside = stretch >= 0
    latency[inside] = when[inside] - samples.row_begin[samples.stretch_first[stretch[inside]]]
    back_time = np.where(wrong, samples.row_begin[np.minimum(back, len(samples.row_begin) - 1)],
                         history.workloads.end[workload])
    ahead = samples.material_gpu_before[segment_end] - samples.material_gpu_before[row + 1]
    costs = release_costs(samples, workload, row, wrong, None if queue_wait is None else np.asarray(queue_wait))
    owner_after = samples.owner_after(row, workload)
    return Releases(workload=workload, time=when, reclaimed_gpu_hours=gpu_seconds / 3600.0, wrong=wrong,
                    latency=latency, stretch=stretch, activity_back=back_time, wrong_any=wrong_any,
                    gpus=history.workloads.gpus[workload].astype(np.float64), busy_ahead_gpu_hours=ahead / 3600.0,
                    lost_gpu_hours=costs.lost / 3600.0, restart_gpu_hours=costs.restart / 3600.0,
                    wait_gpu_hours=costs.wait / 3600.0,
                    owner_back=None if owner_after is None else owner_after >= MATERIAL_SECONDS)


def _quantile(values: np.ndarray, q: float) -> float | None:
    values = values[~np.isnan(values)]
    return float(np.quantile(values, q)) if len(values) else None


def _share(part: float, whole: float) -> float:
    return round(part / whole, 4) if whole > 0 else 0.0


def summary(samples: IdleSamples, releases: Releases, bound: Bound | None = None,
            mask_workloads: np.ndarray | None = None) -> dict[str, Any]:
    """The figures of one policy over the workloads selected by `mask_workloads` (default all)."""
    workloads = samples.history.workloads
    selected = np.ones(len(workloads), dtype=bool) if mask_workloads is None else mask_workloads
    bound = bound or Bound.zero(samples)
    in_stretches = selected[samples.stretch_workload]
    gpu_hours = samples.stretch_gpu_hours
    idle = float(gpu_hours[in_stretches].sum())
    idle_at_finish = float(gpu_hours[in_stretches & ~samples.stretch_ends_busy].sum())
    chosen = selected[releases.workload] if len(releases.workload) else np.zeros(0, dtype=bool)
    count = int(chosen.sum())

    def total(values: np.ndarray, where: np.ndarray | None = None) -> float:
        mask = chosen if where is None else chosen & where
        return float(values[mask].sum()) if count else 0.0

    wrong_mask = releases.wrong if count else np.zeros(0, dtype=bool)
    wrong = int((wrong_mask & chosen).sum()) if count else 0
    reclaimed = total(releases.reclaimed_gpu_hours)
    right_reclaimed = total(releases.reclaimed_gpu_hours, ~wrong_mask) if count else 0.0
    gpus = total(releases.gpus)
    wrong_gpus = total(releases.gpus, wrong_mask) if count else 0.0
    latency = releases.latency[chosen] if count else np.zeros(0)
    outside = int(np.isnan(latency).sum())
    last_bound = float(bound.last_stretch[selected].sum()) / 3600.0
    every_bound = float(bound.every_stretch[selected].sum()) / 3600.0
    lost, restart, wait = (total(releases.lost_gpu_hours), total(releases.restart_gpu_hours),
                           total(releases.wait_gpu_hours))
    cost = lost + restart + wait
    return {
        "idleGpuHours": round(idle, 3),
        "idleGpuHoursEndingAtFinish": round(idle_at_finish, 3),
        "idleStretches": int(in_stretches.sum()),
        "reclaimedGpuHours": round(reclaimed, 3),
        "reclaimedShare": _share(reclaimed, idle),
        "rightReclaimedGpuHours": round(right_reclaimed, 3),
        "wrongReclaimedGpuHours": round(reclaimed - right_reclaimed, 3),
        "boundGpuHours": round(last_bound, 3),
        "boundShare": _share(last_bound, idle),
        "reachedShareOfBound": _share(right_reclaimed, last_bound),
        "boundEveryStretchGpuHours": round(every_bound, 3),
        "releases": count,
        "wrongReleases": wrong,
        "wrongReleaseShare": _share(wrong, count),
        "releasedGpus": round(gpus, 3),
        "wrongGpus": round(wrong_gpus, 3),
        "wrongGpuShare": _share(wrong_gpus, gpus),
        "wrongAnyActivity": int((releases.wrong_any & chosen).sum()) if count else 0,
        "ownerBackReleases": (int((releases.owner_back & chosen).sum()) if count else 0)
        if releases.owner_back is not None else None,
        "busyGpuHoursAhead": round(total(releases.busy_ahead_gpu_hours, wrong_mask) if count else 0.0, 3),
        "costGpuHours": {"lostProgress": round(lost, 3), "restart": round(restart, 3),
                         "waitToBeAdmitted": round(wait, 3), "total": round(cost, 3)},
        "netGpuHours": round(reclaimed - cost, 3),
        "releasesOutsideIdleStretches": outside,
        "latencySeconds": {"median": _quantile(latency, 0.5), "p90": _quantile(latency, 0.9)},
    }


def by_tenant(samples: IdleSamples, releases: Releases, bound: Bound | None = None) -> dict[str, dict[str, Any]]:
    tenants = samples.history.workloads.tenant
    return {str(name): summary(samples, releases, bound, tenants == name) for name in sorted(set(tenants.tolist()))}


def by_kind(samples: IdleSamples, releases: Releases, bound: Bound | None = None) -> dict[str, dict[str, Any]]:
    """The same figures per policy kind (steps.policy.KINDS) of the workloads."""
    from gpuaas.simulate.costs import kinds_of

    kinds = kinds_of(samples)
    return {str(name): summary(samples, releases, bound, kinds == name) for name in sorted(set(kinds.tolist()))}
