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
- Activity is **material** when some GPU the workload holds is above MATERIAL_ACTIVITY (10 %) in a
  sample. A **wrong release** is one after which the workload would have been materially busy for
  at least MATERIAL_SECONDS (5 minutes, not necessarily in one piece) before it ended: the job
  wanted its GPUs back. Less than that (a stray kernel, a health probe, activity near the idle
  threshold) does not make a release wrong; `wrongAnyActivity` counts the releases after which any
  sample went above the policy's threshold, as the earlier, stricter definition did.
- **Release latency**: release time minus the start of its stretch.
- The **bound** for a wait W (docs/simulate.md): what a policy that must see W of idleness (and the
  minimum runtime) before acting, and releases each workload once and never wrongly, could reclaim:
  per workload, from the earliest moment W into an idle stretch after which the workload is never
  materially busy for 5 minutes again, to its end.

A sample stands for its slot of the grid, clipped to the workload's lifetime: its duration is the
step, except at the workload's first and last slot. GPU-hours count the GPUs held in each slot: a
trace's workload holds all its GPUs all its life, while pods read from Prometheus may replace each
other (a rollout, a retried Job), each holding the workload's GPUs for a while.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from gpuaas.simulate.history import History

DEFINITIONS: dict[str, str] = {
    "idle": "a workload is idle at a sample time when every GPU it holds has a sample at or below the "
            "threshold; a GPU without a sample makes it not idle (no data is never idle)",
    "busy": "some GPU it holds has a sample above the threshold",
    "idleStretch": "a maximal run of idle samples; it ends busy when activity came back before the workload "
                   "ended, else at finish",
    "idleGpuHours": "stretch durations x the GPUs the workload held then (all stretches; and those ending at finish)",
    "reclaimedGpuHours": "GPUs x idle time from the release until material activity came back (a wrong "
                         "release) or the workload ended (a right one)",
    "materialActivity": "a sample where some GPU the workload holds is above 10 % (MATERIAL_ACTIVITY)",
    "wrongRelease": "a release after which the workload would have been materially busy for at least 5 minutes "
                    "(MATERIAL_SECONDS, in total) before it ended",
    "wrongAnyActivity": "releases after which any sample went above the policy's idle threshold (the strict "
                        "definition: a stray kernel counts)",
    "ownerBackReleases": "releases after which the workload's own source (a kernel busy or a client connected, "
                         "a Ray job, requests, progress) showed work for at least 5 minutes before it ended: its "
                         "owner came back, whether or not the GPUs did (histories with signals only)",
    "wrongGpuShare": "GPUs of wrong releases / GPUs released (each release weighted by the GPUs it freed)",
    "busyGpuHoursAhead": "GPU-hours of material activity still ahead of the wrongly released jobs (the work "
                         "the releases interrupted)",
    "boundGpuHours": "per workload the policy can release (not exempt), the idle GPU-hours from the earliest "
                     "moment its wait (idle window, and minimum runtime since admission) is met inside a quiet run "
                     "(no sample above the threshold) after which it is never materially busy again, to its end: "
                     "one release, never wrong",
    "reachedShareOfBound": "reclaimed GPU-hours of right releases / the bound for the policy's wait",
    "releaseCost": "GPU-hours a wrong release costs: progress since the last checkpoint (lost), the restart, and "
                   "the wait to be admitted again (resume by hand, then the queue), times its GPUs",
    "netGpuHours": "reclaimed GPU-hours (right and wrong releases) minus the release costs",
    "releaseLatency": "release time minus the start of its idle stretch (median, p90)",
    "reclaimedShare": "reclaimed GPU-hours / idle GPU-hours (all stretches)",
    "wrongReleaseShare": "wrong releases / releases",
}

MATERIAL_ACTIVITY = 0.10
"""Activity above this is material. Alibaba PAI's v2020 trace (Weng et al., NSDI '22) has 75.4 % of
its GPU instances averaging below 10 % GPU utilisation over their lifetime (and a median of 1.5 %:
affinode's analysis of pai_sensor_table); below 10 % is the range the literature calls barely
used, where a data loader's copies or a monitoring agent sit, not a job's work."""
MATERIAL_SECONDS = 300.0
"""How long (in total) a workload must be materially busy after a release for the release to be
wrong: 5 minutes, the shortest idle time that the systems an admin compares with treat as real
(SkyPilot autostop's default of 5 idle minutes, docs.skypilot.co reference/auto-stop; KEDA's default
cooldownPeriod of 300 s). Symmetrically, activity shorter than that is noise, not a job that wanted
its GPUs back."""


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
    material: np.ndarray
    """Rows with material activity (some GPU above MATERIAL_ACTIVITY)."""
    material_before: np.ndarray
    """material_before[r]: seconds of material rows before row r (prefix sum, global; len rows+1)."""
    material_gpu_before: np.ndarray
    """The same in GPU-seconds (seconds x GPUs held): the busy GPU-hours ahead of a release."""
    next_material: np.ndarray
    """First material row after r of the same workload, else the workload's end row (exclusive)."""

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

    @cached_property
    def owner_before(self) -> np.ndarray | None:
        """owner_before[r]: seconds before row r when the workload's own source showed work or a client
        (prefix sum, global; len rows+1), or None when the history has no signals."""
        signals = self.history.signals
        if signals is None:
            return None
        out = np.zeros(len(self.row_seconds) + 1, dtype=np.float64)
        np.cumsum(np.where(signals.flags > 0, self.row_seconds, 0.0), out=out[1:])
        return out

    def owner_after(self, row: np.ndarray, workload: np.ndarray) -> np.ndarray | None:
        """Seconds after `row` (until the workload's end) when its own source showed work or a client."""
        before = self.owner_before
        if before is None:
            return None
        return before[self.segment_end(workload)] - before[row + 1]

    def segment_end(self, workload: np.ndarray) -> np.ndarray:
        """The exclusive end row of each workload."""
        rows = self.history.rows
        return rows.start[workload] + rows.count[workload]

    def material_after(self, row: np.ndarray, workload: np.ndarray) -> np.ndarray:
        """Seconds of material activity in the rows after `row` until the workload's end."""
        return self.material_before[self.segment_end(workload)] - self.material_before[row + 1]

    def idle_gpu_seconds_from(self, workload: np.ndarray, when: np.ndarray, until_row: np.ndarray) -> np.ndarray:
        """Idle GPU-seconds of `workload` from `when` to the start of row `until_row` (exclusive)."""
        row = self.row_at(workload, when)
        rows = self.history.rows
        before = np.where(self.idle[row], np.clip(when - self.row_begin[row], 0.0, self.row_seconds[row])
                          * rows.held[row], 0.0)
        return np.maximum(self.idle_before[until_row] - self.idle_before[row] - before, 0.0)

    def quiet_runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Runs of rows with no GPU above the threshold (idle, or no data), per workload: (workload, first
        row, end row exclusive). A release needs a window without a busy sample, so no release can
        happen earlier in a run than its start plus the wait: the bound is computed on these runs (a gap
        in the data does not end them; only idle rows count as reclaimed)."""
        rows = self.history.rows
        quiet = ~self.busy
        count = len(quiet)
        boundary = np.zeros(count, dtype=bool)
        boundary[rows.start[rows.count > 0]] = True
        starts = np.flatnonzero(quiet & ~(np.r_[False, quiet[:-1]] & ~boundary))
        last = np.zeros(count, dtype=bool)
        last[(rows.start + rows.count - 1)[rows.count > 0]] = True
        ends = np.flatnonzero(quiet & ~(np.r_[quiet[1:], False] & ~last)) + 1
        return rows.owner[starts], starts, ends

    def bound(self, wait: np.ndarray, earliest: np.ndarray, scope: np.ndarray,
              start_wait: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(last-stretch bound, every-stretch bound) in GPU-seconds per workload, for a policy that waits
        `wait[w]` seconds without GPU activity and never acts before `earliest[w]` (admission + minimum
        runtime), on the workloads in `scope` (definitions: boundGpuHours).

        The last-stretch bound releases each workload once, at the earliest moment the wait is met in a
        quiet run (`quiet_runs`) after which the workload is never materially busy for MATERIAL_SECONDS
        again, and counts the idle GPU-seconds from then to its end. The every-stretch bound releases in
        every quiet run once the wait is met and gets the GPUs back automatically when work resumes (only
        possible with suspend and wake on demand). `start_wait[w]`: the wait in a quiet run that begins
        with the workload (default `wait`): with nothing sampled before its start, a window is covered
        enough once `minCoverage` of it is (the gateway's coverage rule), so the policy may act then."""
        workloads = self.history.workloads
        count = len(workloads)
        last = np.zeros(count)
        every = np.zeros(count)
        w, first, end = self.quiet_runs()
        if len(w) == 0:
            return last, every
        begin_time = self.row_begin[first]
        end_time = self.row_begin[end - 1] + self.row_seconds[end - 1]
        at_start = first == self.history.rows.start[w]
        waited = np.where(at_start, (wait if start_wait is None else start_wait)[w], wait[w])
        candidate = np.maximum(begin_time + waited, earliest[w])
        valid = scope[w] & (candidate < end_time) & np.isfinite(candidate)
        chosen = np.flatnonzero(valid)
        if len(chosen) == 0:
            return last, every
        inside = self.idle_gpu_seconds_from(w[chosen], candidate[chosen], end[chosen])
        np.add.at(every, w[chosen], inside)
        after = self.material_before[self.segment_end(w[chosen])] - self.material_before[end[chosen]]
        final = chosen[after < MATERIAL_SECONDS]
        if len(final):
            to_end = self.idle_gpu_seconds_from(w[final], candidate[final], self.segment_end(w[final]))
            np.maximum.at(last, w[final], to_end)
        return last, every

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
        next_busy = _next_flagged(busy, segment_end)
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
        # material activity (definitions: materialActivity): prefix sums of its seconds and GPU-seconds,
        # and the next material row after each row
        with np.errstate(invalid="ignore"):
            material = rows.any_sampled & (rows.highest > np.float32(MATERIAL_ACTIVITY))
        material_seconds = np.where(material, row_seconds, 0.0)
        material_before = np.zeros(count + 1, dtype=np.float64)
        np.cumsum(material_seconds, out=material_before[1:])
        material_seconds *= rows.held
        material_gpu_before = np.zeros(count + 1, dtype=np.float64)
        np.cumsum(material_seconds, out=material_gpu_before[1:])
        del material_seconds
        next_material = _next_flagged(material, segment_end)
        del segment_end
        return cls(history=history, threshold=thresholds, idle=idle, busy=busy, row_begin=row_begin,
                   row_seconds=row_seconds, idle_before=idle_before, next_busy=next_busy,
                   stretch_of_row=stretch_of_row, stretch_workload=stretch_workload, stretch_first=starts,
                   stretch_end=ends, stretch_ends_busy=ends_busy, material=material, material_before=material_before,
                   material_gpu_before=material_gpu_before, next_material=next_material)


def _next_flagged(flag: np.ndarray, segment_end: np.ndarray) -> np.ndarray:
    """For each row, the first flagged row strictly after it within its workload, else the workload's end
    row (`segment_end` per row; later workloads' rows are at or after it)."""
    count = len(flag)
    never = np.iinfo(np.int32).max
    at = np.where(flag, np.arange(count, dtype=np.int32), never)
    running = np.minimum.accumulate(at[::-1])[::-1] if count else at
    del at
    out = np.full(count, never, dtype=np.int32)
    out[:-1] = running[1:]
    np.minimum(out, segment_end, out=out)
    return out
