"""The definitions the report counts by (printed with every result, and in docs/simulate.md).

- A workload is **idle** at a sample time when every GPU it holds has a sample at or below the
  threshold. A GPU without a sample makes the time *not* idle ("no data" is never idle).
- It is **busy** when some GPU it holds has a sample above the threshold.
- An **idle stretch** is a maximal run of idle samples. It **ends busy** when activity came back
  (a busy sample) after it and before the workload ended, else it **ends at finish**.
- **Idle GPU-hours**: the stretches' durations times the GPUs the workload held then (all
  stretches; and those ending at finish, which no policy can interrupt).
- **Reclaimed GPU-hours** of a release: its GPUs times the idle time from the release until the
  activity came back (or the workload ended): for a release inside a stretch with no gap in the
  data after it, from the release to the stretch's end.
- A **wrong release** is a release after which activity came back before the workload ended (the
  job wanted its GPUs back). **Release latency**: release time minus the start of its stretch.

A sample stands for its slot of the grid, clipped to the workload's lifetime: its duration is the
step, except at the workload's first and last slot. GPU-hours count the GPUs held in each slot: a
trace's workload holds all its GPUs all its life, while pods read from Prometheus may replace each
other (a rollout, a retried Job), each holding the workload's GPUs for a while.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuaas.simulate.history import History

DEFINITIONS: dict[str, str] = {
    "idle": "a workload is idle at a sample time when every GPU it holds has a sample at or below the "
            "threshold; a GPU without a sample makes it not idle (no data is never idle)",
    "busy": "some GPU it holds has a sample above the threshold",
    "idleStretch": "a maximal run of idle samples; it ends busy when activity came back before the workload "
                   "ended, else at finish",
    "idleGpuHours": "stretch durations x the GPUs the workload held then (all stretches; and those ending at finish)",
    "reclaimedGpuHours": "GPUs x idle time from the release until activity came back or the workload ended "
                         "(inside a stretch: release to the stretch's end)",
    "wrongRelease": "a release after which activity came back before the workload ended",
    "releaseLatency": "release time minus the start of its idle stretch (median, p90)",
    "reclaimedShare": "reclaimed GPU-hours / idle GPU-hours (all stretches)",
    "wrongReleaseShare": "wrong releases / releases",
}


@dataclass
class IdleSamples:
    """Row-level facts for one threshold per workload (rows as in `History.rows`) and the stretches."""

    history: History
    threshold: np.ndarray
    """Per workload."""
    idle: np.ndarray
    busy: np.ndarray
    row_begin: np.ndarray
    """Start of each row's time (its slot start, clipped to the workload's start)."""
    row_seconds: np.ndarray
    """Duration of each row (the step, clipped to the workload's lifetime)."""
    idle_before: np.ndarray
    """idle_before[r]: idle GPU-seconds (seconds x GPUs held) of the rows before r (prefix sum, global;
    len rows+1); differences within one workload are its idle GPU-seconds."""
    next_busy: np.ndarray
    """First busy row after r of the same workload, else the workload's end row (exclusive)."""
    stretch_of_row: np.ndarray
    """Index of the stretch a row belongs to, or -1."""
    stretch_workload: np.ndarray
    stretch_first: np.ndarray
    stretch_end: np.ndarray
    """Exclusive end row."""
    stretch_ends_busy: np.ndarray

    @property
    def stretch_begin_time(self) -> np.ndarray:
        return self.row_begin[self.stretch_first]

    @property
    def stretch_end_time(self) -> np.ndarray:
        last = self.stretch_end - 1
        return self.row_begin[last] + self.row_seconds[last]

    @property
    def stretch_seconds(self) -> np.ndarray:
        """A stretch's rows are consecutive slots of one workload: its end time minus its start."""
        return self.stretch_end_time - self.stretch_begin_time

    @property
    def stretch_gpu_hours(self) -> np.ndarray:
        return (self.idle_before[self.stretch_end] - self.idle_before[self.stretch_first]) / 3600.0

    def row_at(self, workload: np.ndarray, when: np.ndarray) -> np.ndarray:
        """The row of `workload` whose time contains `when` (clipped to its rows)."""
        history = self.history
        rows = history.rows
        local = np.floor((when - history.t0) / history.step + 1e-9).astype(np.int64) - history.first[workload]
        local = np.clip(local, 0, np.maximum(rows.count[workload] - 1, 0))
        return rows.start[workload] + local

    @classmethod
    def of(cls, history: History, threshold: np.ndarray | float) -> IdleSamples:
        rows = history.rows
        workloads = history.workloads
        thresholds = np.broadcast_to(np.asarray(threshold, dtype=np.float64), (len(workloads),)).copy()
        row_threshold = thresholds[rows.owner].astype(np.float32)
        with np.errstate(invalid="ignore"):
            idle = rows.all_sampled & (rows.highest <= row_threshold)
            busy = rows.any_sampled & (rows.highest > row_threshold)
        del row_threshold
        count = len(idle)
        owner = rows.owner
        # row times, built in place to keep the peak low (a month of 1,000 GPUs is ~12 M rows)
        slot_begin = np.arange(count, dtype=np.float64)
        slot_begin -= rows.start[owner]
        slot_begin += history.first[owner]
        slot_begin *= history.step
        slot_begin += history.t0
        row_begin = np.maximum(slot_begin, workloads.start[owner])
        slot_begin += history.step
        row_seconds = np.minimum(slot_begin, workloads.end[owner])
        del slot_begin
        row_seconds -= row_begin
        np.maximum(row_seconds, 0.0, out=row_seconds)
        idle_before = np.zeros(count + 1, dtype=np.float64)
        np.cumsum(np.where(idle, row_seconds * rows.held, 0.0), out=idle_before[1:])
        segment_end = ((rows.start + rows.count)[owner]).astype(np.int32)
        # next busy row strictly after r, within the workload (later workloads' rows are >= its end)
        never = np.iinfo(np.int32).max
        busy_at = np.where(busy, np.arange(count, dtype=np.int32), never)
        running = np.minimum.accumulate(busy_at[::-1])[::-1] if count else busy_at
        del busy_at
        next_busy = np.full(count, never, dtype=np.int32)
        next_busy[:-1] = running[1:]
        del running
        np.minimum(next_busy, segment_end, out=next_busy)
        # stretches: runs of idle rows that do not cross workloads
        first_row = np.zeros(count, dtype=bool)
        first_row[rows.start[rows.count > 0]] = True
        previous_idle = np.zeros(count, dtype=bool)
        previous_idle[1:] = idle[:-1]
        previous_idle &= ~first_row
        starts = np.flatnonzero(idle & ~previous_idle)
        del first_row, previous_idle
        last_row = np.zeros(count, dtype=bool)
        last_row[(rows.start + rows.count - 1)[rows.count > 0]] = True
        next_idle = np.zeros(count, dtype=bool)
        next_idle[:-1] = idle[1:]
        next_idle &= ~last_row
        ends = np.flatnonzero(idle & ~next_idle) + 1
        del last_row, next_idle
        stretch_of_row = np.full(count, -1, dtype=np.int32)
        if len(starts):
            marks = np.zeros(count, dtype=np.int32)
            marks[starts] = 1
            stretch_id = np.cumsum(marks, dtype=np.int32)
            del marks
            stretch_id -= 1
            stretch_of_row = np.where(idle, stretch_id, np.int32(-1))
            del stretch_id
        stretch_workload = owner[starts] if len(starts) else np.zeros(0, dtype=np.int64)
        ends_busy = next_busy[ends - 1] < segment_end[ends - 1] if len(ends) else np.zeros(0, dtype=bool)
        del segment_end
        return cls(history=history, threshold=thresholds, idle=idle, busy=busy, row_begin=row_begin,
                   row_seconds=row_seconds, idle_before=idle_before, next_busy=next_busy,
                   stretch_of_row=stretch_of_row, stretch_workload=stretch_workload, stretch_first=starts,
                   stretch_end=ends, stretch_ends_busy=ends_busy)
