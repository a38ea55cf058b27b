"""What the on-idle step reads from Prometheus at a given time, computed from the history.

`steps.gateways.metrics.MetricsGateway.gpu_activity` reads the raw samples of every GPU of the
workload's pods over `(now - window, now]` and measures:

- whether there are samples at all (`observations`),
- the **coverage** of each GPU: the share of the window covered by that GPU's own samples, where
  the time between consecutive sample times (and from the window's edges to the first and last
  sample) counts only when it is at most the gap tolerance; the judgement reads the lowest, and
  a GPU the workload holds without any sample in the window has coverage 0 (the step wants
  evidence for every GPU it holds: `GpuActivity.why_not_idle` with `expected` and `held`),
- the highest activity of any GPU.

Those three numbers are then judged by `steps.gateways.metrics.idleness_failures` (production
code; the replay calls it). When every GPU of the workload is held over the whole window and each
row has a sample on all of them or on none (the usual case: an exporter gap silences a pod), every
GPU's coverage is the rows' coverage, computed in O(1) from prefix sums over the history's rows;
otherwise the window's block is read GPU by GPU. Sample times are the slot times, and the gap
tolerance is 3 x the step (the gateway uses 3 x the median interval between the window's sample
times, which is the step whenever at least half of those intervals are one step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpuaas.simulate.history import NOT_HELD, History


@dataclass(frozen=True)
class WindowReading:
    """What the gateway would have returned (the numbers the judgement needs)."""

    observations: int
    coverage: float
    max_activity: float


class StepWindow:
    """Answers "what would the on-idle step read for workload w at time t over a window of W seconds?"."""

    def __init__(self, history: History) -> None:
        self.history = history
        rows = history.rows
        self.rows = rows
        self.tolerance = 3.0 * history.step
        count = len(rows.owner)
        sampled = rows.any_sampled
        index = np.arange(count, dtype=np.int32)
        segment_start = rows.start[rows.owner].astype(np.int32)
        previous = np.maximum.accumulate(np.where(sampled, index, np.int32(-1))) if count else index
        previous[previous < segment_start] = -1
        self.previous_sampled = previous
        never = np.iinfo(np.int32).max
        later = np.where(sampled, index, np.int32(never))
        following = np.minimum.accumulate(later[::-1])[::-1] if count else later
        del later
        segment_end = segment_start + rows.count[rows.owner].astype(np.int32)
        self.next_sampled = np.minimum(following, segment_end)
        del following, segment_end
        # seconds between a sample and the one before it (same workload), counted when within tolerance;
        # rows of one workload are consecutive slots, so that is the row distance times the step
        before = np.full(count, -1, dtype=np.int32)
        before[1:] = previous[:-1]
        gap = (index - before).astype(np.float64)
        gap *= history.step
        counted = sampled & (before >= segment_start) & (gap <= self.tolerance)
        del before, segment_start, index
        self.covered_before = np.zeros(count + 1, dtype=np.float64)
        np.cumsum(np.where(counted, gap, 0.0), out=self.covered_before[1:])
        del gap, counted
        # tenant thresholds differ: the highest activity is read from the rows on demand
        self.highest = np.where(sampled, rows.highest, -1.0).astype(np.float32)
        self.sampled_before = np.zeros(count + 1, dtype=np.int32)
        np.cumsum(sampled, out=self.sampled_before[1:])
        # rows where some held GPUs have a sample and others not: there the GPUs' coverages differ
        self.mixed_before = np.zeros(count + 1, dtype=np.int32)
        np.cumsum(sampled & ~rows.all_sampled, out=self.mixed_before[1:])
        whole = rows.held == history.columns[rows.owner]
        has_rows = rows.count > 0
        self.fully_held = np.ones(len(rows.count), dtype=bool)
        if count:
            self.fully_held[has_rows] = np.logical_and.reduceat(whole, rows.start[has_rows])
        del whole
        self.owner_start = rows.start.tolist()
        self.owner_count = rows.count.tolist()
        self.owner_first = history.first.tolist()

    def read(self, workload: int, now: float, window_seconds: float) -> WindowReading:
        """The gateway's numbers for `workload` over `(now - window, now]`."""
        history = self.history
        begin, count = self.owner_start[workload], self.owner_count[workload]
        first = self.owner_first[workload]
        low_slot = math.floor((now - window_seconds - history.t0) / history.step + 1e-9) + 1
        high_slot = math.floor((now - history.t0) / history.step + 1e-9)
        low = max(low_slot - first, 0)
        high = min(high_slot - first, count - 1)
        if count == 0 or low > high:
            return WindowReading(0, 0.0, math.nan)
        if not self.fully_held[workload] or self.mixed_before[begin + high + 1] != self.mixed_before[begin + low]:
            return self._read_per_gpu(workload, low, high, now, window_seconds)
        first_row = int(self.next_sampled[begin + low])
        last_row = int(self.previous_sampled[begin + high])
        if first_row > begin + high or last_row < begin + low:
            return WindowReading(0, 0.0, math.nan)
        covered = float(self.covered_before[last_row + 1] - self.covered_before[first_row + 1])
        slot_zero = history.t0 + (first - begin) * history.step
        lead = slot_zero + first_row * history.step - (now - window_seconds)
        tail = now - (slot_zero + last_row * history.step)
        covered += lead if lead <= self.tolerance else 0.0
        covered += tail if tail <= self.tolerance else 0.0
        coverage = min(1.0, covered / window_seconds)
        # samples are stored as float32: read back the shortest decimal (0.05, not 0.0500000007), as
        # Prometheus would have answered it, so the threshold stays inclusive
        highest = float(str(self.highest[first_row:last_row + 1].max()))
        observations = int(self.sampled_before[last_row + 1] - self.sampled_before[first_row])
        return WindowReading(observations, coverage, highest)

    def _read_per_gpu(self, workload: int, low: int, high: int, now: float, window_seconds: float) -> WindowReading:
        """The gateway's numbers GPU by GPU, over the local rows `low .. high` of the workload: the GPUs
        it holds at `now` (the running pods' GPUs the step reads), each with its own coverage."""
        history = self.history
        block = history.block(workload)[low:high + 1]
        held = block[-1] != NOT_HELD
        part = block[:, held]
        if part.shape[1] == 0:
            return WindowReading(0, 0.0, math.nan)
        sampled = part >= 0
        observations = int(sampled.sum())
        if observations == 0:
            return WindowReading(0, 0.0, math.nan)
        start = now - window_seconds
        slot_zero = history.t0 + (self.owner_first[workload] + low) * history.step
        lowest = 1.0
        for column in range(part.shape[1]):
            rows = np.flatnonzero(sampled[:, column])
            if len(rows) == 0:
                lowest = 0.0
                break
            times = slot_zero + rows * history.step
            gaps = np.diff(times)
            covered = float(gaps[gaps <= self.tolerance].sum())
            lead, tail = float(times[0] - start), float(now - times[-1])
            covered += lead if lead <= self.tolerance else 0.0
            covered += tail if tail <= self.tolerance else 0.0
            lowest = min(lowest, min(1.0, covered / window_seconds))
        highest = float(str(part[sampled].max()))
        return WindowReading(observations, lowest, highest)
