"""Queued demand: who waits for GPUs in the cohort, and what a release hands to them.

A GPU freed while nobody waits reclaims nothing but power (issue 19). To score that, a history can
carry its cohort's queue (`Queue`): every job submitted to the cohort, when it was admitted (`inf`
when it never was within the history), its GPUs and duration, and the cohort's GPU capacity. The
synthetic histories build it with `admit` (Kueue's BestEffortFIFO into one cohort: in submission
order, every job that fits is admitted; one that does not fit does not block newer ones).

During a replay, `QueueModel` answers the on-idle step's question for `idle.releaseOn: demand`: does
queued work in the cohort fit into what this release frees (with what earlier releases freed and
nobody took yet)? And it keeps the books of every release (whatever the mode): when a release frees
GPUs, the waiting jobs that fit are started on them at once, in submission order, instead of at
their admission in the history. It reports:

- **GPU-hours handed to waiting work**: GPUs x the time a job ran on freed GPUs before its own
  admission in the history (from then on the history's capacity holds it anyway);
- **queue time saved**: its admission in the history minus the moment it started on freed GPUs;
- **the wait to be admitted again** of a wrongly released job: from the moment it wants its GPUs back
  until the jobs started on them (if any) leave enough of them.

First order, stated in docs/simulate.md: a job started early frees its own slot at its admission in
the history, which the model does not hand on (so the figures are a lower bound), and the history's
activity keeps the times it has. The node pool's size is fixed: "the node pool could shrink" is
not modelled here.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

NEVER = math.inf


@dataclass
class Queue:
    """Every job submitted to the cohort, admitted or not (arrays of one element per job)."""

    capacity: int
    submitted: np.ndarray
    admitted: np.ndarray
    """Admission time in the history, NEVER when it was still waiting at the history's end."""
    gpus: np.ndarray
    duration: np.ndarray
    workload: np.ndarray
    """Index of the job's workload in the history (-1 when never admitted)."""

    def __len__(self) -> int:
        return len(self.submitted)

    @property
    def wait(self) -> np.ndarray:
        return self.admitted - self.submitted


def admit(submitted: np.ndarray, duration: np.ndarray, gpus: np.ndarray, capacity: int,
          until: float = NEVER) -> np.ndarray:
    """Admission times under BestEffortFIFO into `capacity` GPUs (NEVER: not admitted before `until`).

    Jobs asking for more than the capacity are never admitted."""
    count = len(submitted)
    order = np.argsort(submitted, kind="stable")
    admitted = np.full(count, NEVER)
    waiting: list[int] = []  # job indices in submission order
    running: list[tuple[float, int]] = []  # (end, gpus)
    used = 0
    position = 0
    while position < count or running:
        next_arrival = float(submitted[order[position]]) if position < count else NEVER
        next_end = running[0][0] if running else NEVER
        now = min(next_arrival, next_end)
        if now >= until or now == NEVER:
            break
        changed = False
        while running and running[0][0] <= now:
            used -= heapq.heappop(running)[1]
            changed = True
        while position < count and float(submitted[order[position]]) <= now:
            waiting.append(int(order[position]))
            position += 1
            changed = True
        if waiting and changed:
            kept = []
            for job in waiting:
                need = int(gpus[job])
                if used + need <= capacity:
                    used += need
                    admitted[job] = now
                    heapq.heappush(running, (now + float(duration[job]), need))
                else:
                    kept.append(job)
            waiting = kept
    return admitted


@dataclass
class QueueModel:
    """The cohort's queue during one replay (module docstring). Times only move forward.

    The pool of freed GPUs changes at known moments (a release adds its GPUs until its lease ends; a
    job started on them takes its GPUs until it no longer needs them), kept as a heap of future
    changes and a log of all of them (for the waits computed after the replay)."""

    queue: Queue
    saved_seconds: float = 0.0
    handed_gpu_seconds: float = 0.0
    started_early: int = 0

    def __post_init__(self) -> None:
        queue = self.queue
        self.order = np.argsort(queue.submitted, kind="stable")
        self.position = 0
        self.waiting_jobs: list[int] = []
        self.taken = np.zeros(len(queue), dtype=bool)
        self.changes: list[tuple[float, int, int]] = []
        """Future pool changes: (time, sequence, GPUs)."""
        self.log: list[tuple[float, int]] = []
        self.pool = 0
        self.sequence = 0
        self.now = -math.inf
        self._levels: tuple[np.ndarray, np.ndarray] | None = None
        # the history's own use of the cohort over time (a step function), for its free GPUs
        ran = np.isfinite(queue.admitted)
        times = np.concatenate([queue.admitted[ran], queue.admitted[ran] + queue.duration[ran]])
        change = np.concatenate([queue.gpus[ran], -queue.gpus[ran]])
        order = np.argsort(times, kind="stable")
        self.use_times = times[order]
        self.use_level = np.cumsum(change[order])

    def _history_free(self, at: float) -> int:
        """GPUs of the cohort the history itself left unused at `at`."""
        index = int(np.searchsorted(self.use_times, at, side="right")) - 1
        return int(self.queue.capacity - (self.use_level[index] if index >= 0 else 0))

    def _change(self, at: float, gpus: int, later: float) -> None:
        """The pool gains `gpus` at `at` and loses them again at `later`."""
        self.pool += gpus
        self.log += [(at, gpus), (later, -gpus)]
        self.sequence += 1
        heapq.heappush(self.changes, (later, self.sequence, -gpus))
        self._levels = None

    def _waiting_at(self, at: float) -> list[int]:
        queue = self.queue
        while self.position < len(self.order) and float(queue.submitted[self.order[self.position]]) <= at:
            self.waiting_jobs.append(int(self.order[self.position]))
            self.position += 1
        self.waiting_jobs = [job for job in self.waiting_jobs if not self.taken[job] and queue.admitted[job] > at]
        return self.waiting_jobs

    def _hand(self, at: float) -> None:
        """Start the waiting jobs that fit into the freed GPUs (with what the history left unused) at `at`,
        in submission order."""
        if self.pool <= 0:
            return
        free = self.pool + max(self._history_free(at), 0)
        queue = self.queue
        for job in self._waiting_at(at):
            need = int(queue.gpus[job])
            if need > free or need > self.pool + max(self._history_free(at), 0):
                continue
            own = float(queue.admitted[job])
            # Kueue admits it into the freed quota for as long as it runs: it does not know when the
            # released job will want its GPUs back (then that job waits: readmission_wait)
            end = min(own, at + float(queue.duration[job]))
            self.taken[job] = True
            self._change(at, -need, end)
            self.saved_seconds += (own - at) if math.isfinite(own) else 0.0
            self.handed_gpu_seconds += need * (end - at)
            self.started_early += 1
            free -= need
            if free <= 0 or self.pool <= 0:
                break

    def advance(self, to: float) -> None:
        """Apply the pool's changes up to `to`; when GPUs come back, hand them to waiting jobs."""
        while self.changes and self.changes[0][0] <= to:
            at, _, gpus = heapq.heappop(self.changes)
            self.pool += gpus
            if gpus > 0:
                self._hand(at)
        self.now = max(self.now, to)

    def waiting(self, at: float) -> tuple[list[tuple[int, int]], int]:
        """([(job, GPUs) waiting in the cohort at `at`], GPUs of the cohort unused: what the history left and
        what earlier releases freed that nobody took): what the on-idle step observes for `idle.releaseOn:
        demand` (steps.demand.verdict judges it)."""
        self.advance(at)
        waiting = self._waiting_at(at)
        free = max(self._history_free(at), 0) + max(self.pool, 0)
        return [(job, int(self.queue.gpus[job])) for job in waiting], free

    def release(self, at: float, gpus: int, until: float) -> None:
        """A release at `at` frees `gpus` GPUs until `until`; waiting jobs that fit start on them."""
        self.advance(at)
        self._change(at, gpus, until)
        self._hand(at)

    def readmission_wait(self, at: float) -> float:
        """Seconds a wrongly released job, whose lease ended at `at` (it wants its GPUs back), waits until
        the jobs started on freed GPUs no longer hold more than the remaining leases: 0 when none did.
        Asked once the replay is over (the log then holds every change)."""
        if self._levels is None:
            if not self.log:
                return 0.0
            times, deltas = zip(*sorted(self.log), strict=True)
            self._levels = (np.asarray(times), np.cumsum(deltas))
        times, levels = self._levels
        index = int(np.searchsorted(times, at, side="right")) - 1
        if index < 0 or levels[index] >= 0:
            return 0.0
        later = np.flatnonzero(levels[index + 1:] >= 0)
        return float(times[index + 1 + later[0]] - at) if len(later) else 0.0
