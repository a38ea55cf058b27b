"""When `GPUWorkloadIdle` fires and resolves for each pod, evaluated on the history's grid.

The rule (gpuaas/manifests/observability.py, `idle_alert_expr`), per pod:

    max by (namespace, pod) (max_over_time(gpuaas:gpu_activity:ratio[W])) <= T
    and on (namespace, pod) max by (namespace, pod) (gpuaas:gpu_activity:ratio offset W)

evaluated at every grid time (the evaluation interval is taken to be the step):

- the range `[W]` holds the samples of the slots in `[t - W, t]` (Prometheus 2.x includes both
  ends): at least one sample, none above T. Missing samples are absent, not idle.
- `offset W` needs a sample in the slot at `t - W` (a missing sample is a stale series: a failed
  scrape or a vanished series writes a staleness marker, so the 5-minute lookback finds nothing).
- pending from the first true evaluation; firing once `for` has elapsed (`t - activeAt >= for`);
  resolved at the first false evaluation. A pod's alert outlives its last sample by up to W (the
  range still holds idle samples), exactly as in Prometheus.

`Episode`s are computed for all pods at once (prefix sums over the concatenated pod rows);
`after_release` recomputes one pod's alert from the moment its samples stop (the release).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpuaas.simulate.history import History


@dataclass(frozen=True)
class RuleTimings:
    """The alert rule's window, `for` and threshold (from the rendered PrometheusRule)."""

    window_seconds: float
    for_seconds: float
    threshold: float

    def slots(self, step: float) -> tuple[int, int, int]:
        """(range slots before t, offset slots, for slots) on a grid of `step` seconds."""
        return (math.floor(self.window_seconds / step + 1e-9), math.ceil(self.window_seconds / step - 1e-9),
                math.ceil(self.for_seconds / step - 1e-9))


@dataclass
class Episodes:
    """Alert episodes of every pod, sorted by pod then time; slots are local to the pod's workload."""

    pod: np.ndarray
    pending: np.ndarray
    fire: np.ndarray
    resolve: np.ndarray
    """First slot where the alert no longer holds (exclusive end of firing)."""


class PodAlerts:
    """The rule over the history's pods: all episodes, and one pod's alert after a release."""

    def __init__(self, history: History, rule: RuleTimings) -> None:
        self.history = history
        self.rule = rule
        self.range_slots, self.offset_slots, self.for_slots = rule.slots(history.step)
        rows = history.pod_rows
        self.rows = rows
        with np.errstate(invalid="ignore"):
            self.sampled = rows.any_sampled
            self.bad = rows.any_sampled & (rows.highest > np.float32(rule.threshold))

    def episodes(self, batch_rows: int = 4_000_000) -> Episodes:
        """Every pod's alert episodes, without releases (pods in batches, to bound memory)."""
        rows = self.rows
        pods = len(rows.count)
        parts: list[Episodes] = []
        first = 0
        while first < pods:
            last = first + 1
            budget = int(rows.count[first]) + self.offset_slots + 1
            while last < pods and budget + int(rows.count[last]) + self.offset_slots + 1 <= batch_rows:
                budget += int(rows.count[last]) + self.offset_slots + 1
                last += 1
            parts.append(self._episodes_of(first, last))
            first = last
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            return Episodes(empty, empty, empty, empty)
        return Episodes(*(np.concatenate([getattr(p, name) for p in parts])
                          for name in ("pod", "pending", "fire", "resolve")))

    def _episodes_of(self, first_pod: int, last_pod: int) -> Episodes:
        """Episodes of pods `first_pod .. last_pod - 1` (their rows are contiguous)."""
        rows = self.rows
        count = rows.count[first_pod:last_pod]
        pad = self.offset_slots + 1
        ext_count = count + pad
        ext_start = np.zeros(len(count), dtype=np.int64)
        ext_start[1:] = np.cumsum(ext_count)[:-1]
        total = int(ext_count.sum())
        row_begin, row_end = int(rows.start[first_pod]), int(rows.start[last_pod - 1] + count[-1])
        owner_rows = rows.owner[row_begin:row_end] - first_pod
        ext_pos = ext_start[owner_rows] + (np.arange(row_begin, row_end, dtype=np.int64)
                                           - rows.start[first_pod:last_pod][owner_rows])
        sampled = np.zeros(total, dtype=bool)
        sampled[ext_pos] = self.sampled[row_begin:row_end]
        bad = np.zeros(total, dtype=bool)
        bad[ext_pos] = self.bad[row_begin:row_end]
        del ext_pos, owner_rows
        owner = np.repeat(np.arange(len(count), dtype=np.int64), ext_count)
        local = np.arange(total, dtype=np.int64) - ext_start[owner]
        upto = np.arange(1, total + 1, dtype=np.int64)
        low = ext_start[owner] + np.maximum(local - self.range_slots, 0)
        cumulative = np.zeros(total + 1, dtype=np.int64)
        np.cumsum(sampled, out=cumulative[1:])
        holds = (cumulative[upto] - cumulative[low]) > 0
        np.cumsum(bad, out=cumulative[1:])
        holds &= (cumulative[upto] - cumulative[low]) == 0
        del cumulative, low, upto, bad
        back = local - self.offset_slots
        has_back = back >= 0
        offset_ok = np.zeros(total, dtype=bool)
        offset_ok[has_back] = sampled[(ext_start[owner] + back)[has_back]]
        holds &= offset_ok
        del back, has_back, offset_ok, sampled
        found = self._runs(holds, owner, local)
        found.pod += first_pod
        return found

    def _runs(self, holds: np.ndarray, owner: np.ndarray, local: np.ndarray) -> Episodes:
        """Runs of evaluations where the rule holds -> (pending, fire, resolve) for those that last `for`.

        A run never crosses pods: a pod's first `offset_slots` evaluations and its last padded one are False."""
        previous = np.zeros_like(holds)
        previous[1:] = holds[:-1]
        following = np.zeros_like(holds)
        following[:-1] = holds[1:]
        starts = np.flatnonzero(holds & ~previous)
        ends = np.flatnonzero(holds & ~following) + 1
        pending = local[starts]
        resolve = local[ends - 1] + 1
        fire = pending + self.for_slots
        keep = fire < resolve
        return Episodes(pod=owner[starts][keep], pending=pending[keep], fire=fire[keep], resolve=resolve[keep])

    def holds(self, pod: int, low: int, high: int, cut: int | None = None) -> np.ndarray:
        """Whether the rule holds for `pod` at local evaluation slots `low .. high - 1`, with the
        samples from slot `cut` on removed (a release at that slot); `cut=None` keeps them all."""
        rows = self.rows
        begin, count = int(rows.start[pod]), int(rows.count[pod])
        kept = count if cut is None else max(0, min(cut, count))
        # only the samples the evaluations can see: from the oldest range/offset slot to the last evaluation
        first = max(0, min(low - max(self.range_slots, self.offset_slots), kept))
        last = max(first, min(high, kept))
        sampled = self.sampled[begin + first:begin + last]
        bad = self.bad[begin + first:begin + last]
        sampled_before = np.zeros(len(sampled) + 1, dtype=np.int64)
        np.cumsum(sampled, out=sampled_before[1:])
        bad_before = np.zeros(len(bad) + 1, dtype=np.int64)
        np.cumsum(bad, out=bad_before[1:])
        ks = np.arange(low, high, dtype=np.int64)
        top = np.minimum(np.maximum(ks + 1, first), last) - first
        bottom = np.minimum(np.minimum(np.maximum(ks - self.range_slots, first), last) - first, top)
        in_range = sampled_before[top] - sampled_before[bottom]
        bad_in_range = bad_before[top] - bad_before[bottom]
        back = ks - self.offset_slots
        offset_ok = np.zeros(len(ks), dtype=bool)
        valid = (back >= first) & (back < last)
        offset_ok[valid] = sampled[back[valid] - first]
        return (in_range > 0) & (bad_in_range == 0) & offset_ok

    def after_release(self, pod: int, cut: int, firing: bool) -> list[tuple[int | None, int]]:
        """The pod's alert episodes once its samples stop at local slot `cut` (the release), as
        (fire slot, or None for the episode that is already firing; resolve slot).

        Evaluations before `cut` are unchanged. From `cut` on, the range holds only older samples
        (so a busy sample that would have come no longer ends the alert), and once the offset
        clause looks at `cut` or later it finds nothing: no alert outlives `cut + offset`.
        """
        horizon = cut + self.offset_slots + 1
        after = self.holds(pod, cut, horizon, cut)
        out: list[tuple[int | None, int]] = []
        lead = self.holds(pod, max(cut - 1 - self.for_slots, 0), cut) if cut > 0 else np.zeros(0, dtype=bool)
        held_before = bool(lead[-1]) if len(lead) else False
        stop = int(np.flatnonzero(~after)[0]) if np.any(~after) else len(after)
        if held_before:
            resolve = cut + stop
            if firing:
                out.append((None, resolve))
            else:
                run = len(lead) - (int(np.flatnonzero(~lead)[-1]) + 1 if np.any(~lead) else 0)
                pending = cut - run
                if pending + self.for_slots < resolve:
                    out.append((pending + self.for_slots, resolve))
        previous = held_before
        for index, value in enumerate(after.tolist()):
            if value and not previous:
                end = index + int(np.flatnonzero(~after[index:])[0])
                pending = cut + index
                if pending + self.for_slots < cut + end:
                    out.append((pending + self.for_slots, cut + end))
            previous = value
        return out
