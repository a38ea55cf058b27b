"""What the on-idle step would read from each kind's own API, computed from a history's signals.

The step reads a Jupyter server, Ray's job API or Prometheus (steps.reactions.on_idle.read_evidence);
here the same answers are rebuilt from the history's signal flags (gpuaas.simulate.history.Signals)
at the decision's time, and judged by the same functions of steps.signals:

- **jupyter**: one kernel, `busy` when the slot holding `now` shows work, `last_activity` the end of
  the last slot with work (the session's start when none), `connections` 1 when a client is
  connected in that slot; `/api/status` says the same;
- **ray-jobs**: a `RUNNING` job when the slot holding `now` shows work, else the last run of work as a
  `SUCCEEDED` job ending with it (no job when none ever ran);
- **requests**: requests served = slots with work in the window, in flight = work in the slot of `now`;
- **progress**: the counter's increase = slots with work in the window.

A workload whose history has no such source (a batch job, a training job exporting no progress
counter, a history read from Prometheus) gives the function missing inputs, as an API that answers
nothing does.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np

from gpuaas.simulate.history import CLIENT, WORK, History, Signals
from steps import signals as kind_signals
from steps.policy import IdleSettings


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


class SignalWindow:
    """Answers "what would the kind's own API say for workload w at time t over a window of W seconds?"."""

    def __init__(self, history: History) -> None:
        self.history = history
        signals = history.signals if history.signals is not None else Signals.none(history)
        self.source = signals.source
        rows = history.rows
        count = len(rows.owner)
        work = (signals.flags & WORK) > 0
        self.work = work
        self.client = (signals.flags & CLIENT) > 0
        self.work_before = np.zeros(count + 1, dtype=np.int32)
        np.cumsum(work, out=self.work_before[1:])
        index = np.where(work, np.arange(count, dtype=np.int32), np.int32(-1))
        last = np.maximum.accumulate(index) if count else index
        segment_start = rows.start[rows.owner].astype(np.int32) if count else index
        last[last < segment_start] = -1
        self.last_work = last
        self.owner_start = rows.start.tolist()
        self.owner_count = rows.count.tolist()
        self.owner_first = history.first.tolist()

    def _rows(self, workload: int, now: float, window: float) -> tuple[int, int, int]:
        """(row holding `now`, first and last row of the window (now - window, now]) as global rows."""
        history = self.history
        begin, count, first = self.owner_start[workload], self.owner_count[workload], self.owner_first[workload]
        at = math.floor((now - history.t0) / history.step + 1e-9) - first
        low = math.floor((now - window - history.t0) / history.step + 1e-9) + 1 - first
        current = begin + min(max(at, 0), count - 1)
        return current, begin + max(low, 0), begin + min(at, count - 1)

    def _row_end(self, row: int, workload: int) -> float:
        history = self.history
        local = row - self.owner_start[workload]
        end = history.t0 + (self.owner_first[workload] + local + 1) * history.step
        return float(min(end, history.workloads.end[workload]))

    def evidence(self, workload: int, kind: str, settings: IdleSettings, now: float) -> kind_signals.Evidence | None:
        """The kind's evidence as the step would read it, or None when the policy reads none for the kind."""
        source = kind_signals.SIGNAL_OF_KIND.get(kind) if settings.signal != "none" else None
        if not source:
            return None
        window = settings.window_seconds
        own = str(self.source[workload])
        if source == "progress" and not settings.progress_metric:
            return kind_signals.progress_evidence(None, "", window)
        if own != source or self.owner_count[workload] == 0:
            missing = "the workload exposes no such source in the history"
            return {"jupyter": lambda: kind_signals.jupyter_evidence(None, None, now, window, error=missing),
                    "ray-jobs": lambda: kind_signals.ray_jobs_evidence(None, now, window, error=missing),
                    "requests": lambda: kind_signals.requests_evidence(None, None, window, kind_signals.REQUEST_COUNTERS),
                    "progress": lambda: kind_signals.progress_evidence(None, settings.progress_metric, window)}[source]()
        current, low, high = self._rows(workload, now, window)
        worked = int(self.work_before[high + 1] - self.work_before[low]) if high >= low else 0
        busy_now = bool(self.work[current])
        if source == "jupyter":
            last = int(self.last_work[current])
            last_time = self._row_end(last, workload) if last >= 0 else float(self.history.workloads.start[workload])
            connections = int(self.client[current])
            kernels = [{"id": "k", "execution_state": "busy" if busy_now else "idle", "last_activity": _iso(last_time),
                        "connections": connections}]
            return kind_signals.jupyter_evidence(kernels, {"last_activity": _iso(last_time), "connections": connections},
                                                 now, window)
        if source == "ray-jobs":
            last = int(self.last_work[current])
            if busy_now:
                jobs = [{"submission_id": "job", "status": "RUNNING"}]
            elif last >= 0:
                jobs = [{"submission_id": "job", "status": "SUCCEEDED", "end_time": self._row_end(last, workload) * 1000}]
            else:
                jobs = []
            return kind_signals.ray_jobs_evidence(jobs, now, window)
        if source == "requests":
            counters = (*kind_signals.REQUEST_COUNTERS, *((settings.request_metric,) if settings.request_metric else ()))
            return kind_signals.requests_evidence(float(worked), 1.0 if busy_now else 0.0, window,
                                                  (*counters, *kind_signals.REQUEST_GAUGES))
        return kind_signals.progress_evidence(float(worked), settings.progress_metric, window)
