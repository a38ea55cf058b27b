"""What other set-ups would have released on the same history (vectorised; no production code).

- **no automation**: nothing is ever released.
- **KEDA only** (a ScaledObject per workload, as a KEDA-only set-up would do it): KEDA polls every
  `pollingInterval` (30 s) and scales to 0 once the metric stayed at or below the activation
  threshold for `cooldownPeriod` (300 s) after it was last active. A target never active yet is
  scaled to 0 at the first poll after `initialCooldownPeriod`, whatever `cooldownPeriod` says
  (KEDA v2.20 `scaleToZeroOrIdle`, pkg/scaling/executor/scale_scaledobjects.go; kedacore/keda#5008).
  With KEDA's default of 0 that is every workload at its creation, before its pods report any GPU
  activity, so the baseline assumes `initialCooldownPeriod: 300` (`KedaTimings`): a workload idle
  from its start goes 300 s after it. No minimum runtime beyond that, no exemption, no budget, and
  no coverage check: with `ignoreNullValues` (default true) a query without data reads 0, so
  missing samples count as inactive.
- **Kubeflow notebook culler** (notebook-controller defaults `CULL_IDLE_TIME` 1440 min,
  `IDLENESS_CHECK_PERIOD` 1 min; culling runs only with `ENABLE_CULLING=true`, default false,
  kubeflow/notebooks components/notebook-controller/controllers/culling_controller.go): a Notebook is
  stopped at the first check more than `CULL_IDLE_TIME` after its last activity: the kernels' last
  activity, or now while one is busy (it reads `/api/kernels`, not the client connections, not the
  GPUs). From a history with the notebook's Jupyter signal, its kernel activity is that activity;
  without it, a busy GPU sample stands for it. It applies to Notebooks only.

All release the workload until its end, like a gpuaas release.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuaas.simulate.definitions import IdleSamples


@dataclass(frozen=True)
class KedaTimings:
    polling_interval: float = 30.0
    cooldown_period: float = 300.0
    initial_cooldown_period: float = 300.0
    """KEDA's default is 0 (a never-active workload is scaled to 0 at its first poll); see the module docstring."""


@dataclass(frozen=True)
class CullerTimings:
    cull_idle_seconds: float = 1440 * 60.0
    check_period: float = 60.0


def _quiet_runs(samples: IdleSamples, quiet: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs of quiet rows per workload: (workload, first row, end row exclusive)."""
    rows = samples.history.rows
    count = len(quiet)
    first_row = np.zeros(count, dtype=bool)
    first_row[rows.start[rows.count > 0]] = True
    last_row = np.zeros(count, dtype=bool)
    last_row[(rows.start + rows.count - 1)[rows.count > 0]] = True
    previous = np.zeros(count, dtype=bool)
    previous[1:] = quiet[:-1]
    previous &= ~first_row
    following = np.zeros(count, dtype=bool)
    following[:-1] = quiet[1:]
    following &= ~last_row
    starts = np.flatnonzero(quiet & ~previous)
    ends = np.flatnonzero(quiet & ~following) + 1
    return rows.owner[starts], starts, ends


def _first_per_workload(workload: np.ndarray, when: np.ndarray, eligible: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    workload, when = workload[eligible], when[eligible]
    if len(workload) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    order = np.lexsort((when, workload))
    workload, when = workload[order], when[order]
    first = np.ones(len(workload), dtype=bool)
    first[1:] = workload[1:] != workload[:-1]
    return workload[first], when[first]


def _ceil_to(values: np.ndarray, period: float) -> np.ndarray:
    return np.ceil(values / period - 1e-9) * period


def keda_only(samples: IdleSamples, timings: KedaTimings = KedaTimings()) -> tuple[np.ndarray, np.ndarray]:
    """(workload, release time) of a KEDA-only set-up."""
    workloads = samples.history.workloads
    quiet = ~samples.busy
    workload, first, end = _quiet_runs(samples, quiet)
    run_begin = samples.row_begin[first]
    last = end - 1
    run_end = samples.row_begin[last] + samples.row_seconds[last]
    # last active: the busy sample before the run (its poll saw it until this run's first sample); a run from the
    # workload's start was never active: initialCooldownPeriod after the ScaledObject's creation (the start)
    rows = samples.history.rows
    at_start = first == rows.start[workload]
    wait = np.where(at_start, timings.initial_cooldown_period, timings.cooldown_period)
    release = np.where(at_start & (timings.initial_cooldown_period <= 0), run_begin,
                       _ceil_to(run_begin + wait, timings.polling_interval))
    eligible = (release < run_end) & (release < workloads.end[workload])
    return _first_per_workload(workload, release, eligible)


def notebook_culler(samples: IdleSamples, timings: CullerTimings = CullerTimings()) -> tuple[np.ndarray, np.ndarray]:
    """(workload, release time) of the Kubeflow notebook culler (Notebooks only)."""
    history = samples.history
    workloads = history.workloads
    quiet = ~samples.busy
    signals = history.signals
    if signals is not None:
        from gpuaas.simulate.history import WORK

        jupyter = (signals.source == "jupyter")[history.rows.owner]
        quiet = np.where(jupyter, (signals.flags & WORK) == 0, quiet)
    workload, first, end = _quiet_runs(samples, quiet)
    is_notebook = np.asarray([str(kind).lower() == "notebook" for kind in workloads.kind[workload]], dtype=bool)
    rows = samples.history.rows
    at_start = first == rows.start[workload]
    previous_busy = np.maximum(first - 1, 0)
    last_activity = np.where(at_start, workloads.start[workload], samples.row_begin[previous_busy])
    last = end - 1
    run_end = samples.row_begin[last] + samples.row_seconds[last]
    release = _ceil_to(last_activity + timings.cull_idle_seconds + 1e-6, timings.check_period)
    eligible = is_notebook & (release < run_end) & (release < workloads.end[workload])
    return _first_per_workload(workload, release, eligible)
