"""What a set of releases did to a history, per tenant and in total, by the definitions
(gpuaas.simulate.definitions): idle and reclaimed GPU-hours, releases, wrong releases, latency."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuaas.simulate.definitions import IdleSamples


@dataclass
class Releases:
    """Releases of one policy: which workload, when; with what each did (filled by `judge_releases`)."""

    workload: np.ndarray
    time: np.ndarray
    reclaimed_gpu_hours: np.ndarray = field(default_factory=lambda: np.zeros(0))
    wrong: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    latency: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Release time minus its stretch's start; NaN for a release outside an idle stretch."""
    stretch: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    activity_back: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """When activity came back (the workload's end when it did not)."""

    @classmethod
    def none(cls) -> Releases:
        return cls(np.zeros(0, dtype=np.int64), np.zeros(0))


def judge_releases(samples: IdleSamples, workload: np.ndarray, when: np.ndarray) -> Releases:
    """Releases with their reclaimed GPU-hours, whether each was wrong, and their latency."""
    workload = np.asarray(workload, dtype=np.int64)
    when = np.asarray(when, dtype=np.float64)
    order = np.lexsort((workload, when))
    workload, when = workload[order], when[order]
    if len(workload) == 0:
        return Releases.none()
    history = samples.history
    rows = history.rows
    row = samples.row_at(workload, when)
    segment_end = rows.start[workload] + rows.count[workload]
    back = samples.next_busy[row]
    wrong = back < segment_end
    idle_here = samples.idle[row]
    before_release = np.where(idle_here, np.clip(when - samples.row_begin[row], 0.0, samples.row_seconds[row])
                              * rows.held[row], 0.0)
    gpu_seconds = samples.idle_before[back] - samples.idle_before[row] - before_release
    stretch = samples.stretch_of_row[row]
    latency = np.full(len(when), np.nan)
    inside = stretch >= 0
    latency[inside] = when[inside] - samples.row_begin[samples.stretch_first[stretch[inside]]]
    back_time = np.where(wrong, samples.row_begin[np.minimum(back, len(samples.row_begin) - 1)],
                         history.workloads.end[workload])
    return Releases(workload=workload, time=when, reclaimed_gpu_hours=np.maximum(gpu_seconds, 0.0) / 3600.0,
                    wrong=wrong, latency=latency, stretch=stretch, activity_back=back_time)


def _quantile(values: np.ndarray, q: float) -> float | None:
    values = values[~np.isnan(values)]
    return float(np.quantile(values, q)) if len(values) else None


def summary(samples: IdleSamples, releases: Releases, mask_workloads: np.ndarray | None = None) -> dict[str, Any]:
    """The figures of one policy over the workloads selected by `mask_workloads` (default all)."""
    workloads = samples.history.workloads
    selected = np.ones(len(workloads), dtype=bool) if mask_workloads is None else mask_workloads
    in_stretches = selected[samples.stretch_workload]
    gpu_hours = samples.stretch_gpu_hours
    idle = float(gpu_hours[in_stretches].sum())
    idle_at_finish = float(gpu_hours[in_stretches & ~samples.stretch_ends_busy].sum())
    chosen = selected[releases.workload] if len(releases.workload) else np.zeros(0, dtype=bool)
    count = int(chosen.sum())
    wrong = int(releases.wrong[chosen].sum()) if count else 0
    reclaimed = float(releases.reclaimed_gpu_hours[chosen].sum()) if count else 0.0
    latency = releases.latency[chosen] if count else np.zeros(0)
    outside = int(np.isnan(latency).sum())
    return {
        "idleGpuHours": round(idle, 3),
        "idleGpuHoursEndingAtFinish": round(idle_at_finish, 3),
        "idleStretches": int(in_stretches.sum()),
        "reclaimedGpuHours": round(reclaimed, 3),
        "reclaimedShare": round(reclaimed / idle, 4) if idle > 0 else 0.0,
        "releases": count,
        "wrongReleases": wrong,
        "wrongReleaseShare": round(wrong / count, 4) if count else 0.0,
        "releasesOutsideIdleStretches": outside,
        "latencySeconds": {"median": _quantile(latency, 0.5), "p90": _quantile(latency, 0.9)},
    }


def by_tenant(samples: IdleSamples, releases: Releases) -> dict[str, dict[str, Any]]:
    tenants = samples.history.workloads.tenant
    return {str(name): summary(samples, releases, tenants == name) for name in sorted(set(tenants.tolist()))}
