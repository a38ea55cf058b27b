"""A GPU activity history on a regular time grid: what `gpuaas simulate` replays.

Everything is numpy, so 30 days of 1,000 GPUs at one sample a minute (43 M samples) take about
200 MB and every pass over them is vectorised:

- **workloads**: columnar arrays (`Workloads`): name, namespace, tenant, kind, GPUs, start, end, exempt.
- **the grid**: slot `k` starts at `t0 + k * step`. A workload occupies the slots its lifetime
  `[start, end)` overlaps: `first[w] .. first[w] + slots[w] - 1`. Its *rows* are those slots.
- **activity**: float32, one block per workload, time-major (`slots[w]` rows x `columns[w]` GPUs),
  concatenated. A value is the highest activity (0-1) sampled in that slot; `NaN` means the GPU is
  held but has no sample there ("no data": never idle); `-inf` means the column is not held then
  (a pod that started later or stopped earlier, from `--prometheus`).
- **pods**: each workload's columns are grouped by pod (contiguous column ranges), because the
  Prometheus alert is per pod.
- **signals** (optional): each workload kind's own evidence that its work is done (`Signals`): which
  source a workload exposes (a Jupyter server, Ray's job API, request metrics, a progress metric)
  and, per row, whether that source showed work in the slot and whether a client was connected.

`SampleRows` reduces the GPUs of every row once (`Rows.of(history)`): the highest activity of the
GPUs with a sample, whether every held GPU has one, whether any has one, and how many GPUs are held
(pods that replace each other, from `--prometheus`, hold the workload's GPUs in turn).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from gpuaas.simulate.demand import Queue

NOT_HELD = -np.inf
"""Activity value of a column (GPU) the workload does not hold in that slot."""


@dataclass
class Workloads:
    """The workloads of a history, one array element each (index = workload id)."""

    name: np.ndarray
    namespace: np.ndarray
    tenant: np.ndarray
    kind: np.ndarray
    gpus: np.ndarray
    """GPUs the workload holds (what a release frees)."""
    start: np.ndarray
    """When the history starts holding it, Unix seconds: its admission, or the history's start."""
    end: np.ndarray
    """When it finished (or the history's end), Unix seconds."""
    exempt: np.ndarray
    admitted: np.ndarray | None = None
    """Admission (minRuntime counts from here) when it precedes the history; default `start`."""

    @property
    def admitted_at(self) -> np.ndarray:
        return self.start if self.admitted is None else self.admitted

    def __len__(self) -> int:
        return len(self.name)

    @classmethod
    def build(cls, *, name: list[str], namespace: list[str], tenant: list[str], kind: list[str],
              gpus: list[int] | np.ndarray, start: list[float] | np.ndarray, end: list[float] | np.ndarray,
              exempt: list[bool] | np.ndarray | None = None,
              admitted: list[float] | np.ndarray | None = None) -> Workloads:
        count = len(name)
        return cls(name=np.asarray(name, dtype=object), namespace=np.asarray(namespace, dtype=object),
                   tenant=np.asarray(tenant, dtype=object), kind=np.asarray(kind, dtype=object),
                   gpus=np.asarray(gpus, dtype=np.int64), start=np.asarray(start, dtype=np.float64),
                   end=np.asarray(end, dtype=np.float64),
                   exempt=np.zeros(count, dtype=bool) if exempt is None else np.asarray(exempt, dtype=bool),
                   admitted=None if admitted is None else np.asarray(admitted, dtype=np.float64))


@dataclass
class Pods:
    """Pods, one element each: the workload they belong to and their column range in its block."""

    name: np.ndarray
    workload: np.ndarray
    first_column: np.ndarray
    columns: np.ndarray

    def __len__(self) -> int:
        return len(self.name)


WORK = np.uint8(1)
"""Signal flag: the kind's own source showed work in the slot (a kernel busy or talked to, a Ray job
pending or running, requests served or in flight, training progress)."""
CLIENT = np.uint8(2)
"""Signal flag: a client was connected in the slot (a notebook's kernel had a connection)."""
SOURCES = ("jupyter", "ray-jobs", "requests", "progress")
"""The kinds' own sources (steps.signals), as a history names them; "" is none."""


@dataclass
class Signals:
    """The kinds' own evidence, per workload and per row (rows as in `History.rows`: workload-major,
    one per slot of the workload's lifetime)."""

    source: np.ndarray
    """Per workload: one of SOURCES, or "" when the workload exposes none (a batch Job, a training job
    without a progress metric, a history read from Prometheus)."""
    flags: np.ndarray
    """uint8 per row: WORK | CLIENT."""

    @classmethod
    def none(cls, history: History) -> Signals:
        return cls(source=np.full(len(history.workloads), "", dtype=object),
                   flags=np.zeros(int(history.slots.sum()), dtype=np.uint8))


@dataclass
class History:
    """Workloads, pods and their GPU activity on one grid (see the module docstring)."""

    t0: float
    step: float
    workloads: Workloads
    pods: Pods
    first: np.ndarray
    """First slot of each workload."""
    slots: np.ndarray
    """Number of slots (rows) of each workload."""
    columns: np.ndarray
    """Number of GPU columns of each workload's block."""
    offset: np.ndarray
    """Where each workload's block starts in `activity`."""
    activity: np.ndarray
    source: str = ""
    """Where the history came from, for the report."""
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """What makes the figures doubtful (printed with them): e.g. a grid finer than the samples."""
    signals: Signals | None = None
    """The kinds' own evidence, when the history has it (None: GPU activity only)."""
    submitted: np.ndarray | None = None
    """When each workload was submitted (queued before `start`), when the history knows it."""
    queue: Queue | None = None
    """The cohort's queue (every job submitted, admitted or not), when the history has it."""

    @property
    def samples(self) -> int:
        """GPU samples the history holds (held GPU x slot, with or without data)."""
        return int(np.count_nonzero(self.activity != NOT_HELD))

    @property
    def start(self) -> float:
        return float(self.workloads.start.min()) if len(self.workloads) else self.t0

    @property
    def end(self) -> float:
        return float(self.workloads.end.max()) if len(self.workloads) else self.t0

    def slot_time(self, slot: np.ndarray | int) -> np.ndarray | float:
        return self.t0 + np.asarray(slot) * self.step

    def block(self, w: int) -> np.ndarray:
        """Workload `w`'s activity as a (slots x columns) view."""
        begin = int(self.offset[w])
        return self.activity[begin:begin + int(self.slots[w] * self.columns[w])].reshape(
            int(self.slots[w]), int(self.columns[w]))

    @cached_property
    def rows(self) -> SampleRows:
        return SampleRows.of(self)

    @cached_property
    def pod_rows(self) -> SampleRows:
        """The same reductions per pod (pod-major: each pod's rows are contiguous)."""
        return SampleRows.of_pods(self)


def lifetime_slots(t0: float, step: float, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first slot, number of slots) of the lifetimes [start, end): the slots they overlap."""
    first = np.floor((start - t0) / step + 1e-9).astype(np.int64)
    last = np.ceil((end - t0) / step - 1e-9).astype(np.int64)
    return first, np.maximum(last - first, 0)


MAX_SAMPLES = 300_000_000
"""The most GPU samples a history may hold: about 7x the synthetic 30 days at 1m (47 M), 1.2 GB as float32 before
the replay's own arrays; a --step of 1ms asked for 10 TiB and ended in numpy's MemoryError."""


def allocate(t0: float, step: float, workloads: Workloads, columns: np.ndarray,
             pods: Pods | None = None, source: str = "") -> History:
    """An empty history (every held GPU without data) for these workloads; readers fill `activity`."""
    first, slots = lifetime_slots(t0, step, workloads.start, workloads.end)
    columns = np.asarray(columns, dtype=np.int64)
    sizes = slots * columns
    offset = np.zeros(len(workloads), dtype=np.int64)
    if len(workloads):
        offset[1:] = np.cumsum(sizes)[:-1]
    total = int(sizes.sum())
    if total > MAX_SAMPLES:
        raise ValueError(f"expected at most {MAX_SAMPLES / 1e6:,.0f} M GPU samples (the replay holds several arrays "
                         f"of them in memory), found {total / 1e6:,.0f} M on a {step:g} s grid; pass a coarser --step "
                         "or a shorter history")
    activity = np.full(total, np.nan, dtype=np.float32)
    if pods is None:
        pods = Pods(name=workloads.name.copy(), workload=np.arange(len(workloads), dtype=np.int64),
                    first_column=np.zeros(len(workloads), dtype=np.int64), columns=columns.copy())
    return History(t0=float(t0), step=float(step), workloads=workloads, pods=pods, first=first, slots=slots,
                   columns=columns, offset=offset, activity=activity, source=source)


def grid_origin(starts: np.ndarray, step: float) -> float:
    """Slot 0: the earliest start, rounded down to a multiple of `step` (so grids of one step align)."""
    return float(np.floor(float(starts.min()) / step) * step) if len(starts) else 0.0


@dataclass
class SampleRows:
    """Per row (workload x slot, or pod x slot), the GPUs reduced; arrays of one element per row.

    `owner[r]` is the workload (or pod) of row r, `slot[r]` its grid slot; rows of one owner are
    contiguous and in time order, starting at `start[owner]`.
    """

    highest: np.ndarray
    """Highest activity among the held GPUs that have a sample (NaN when none has)."""
    all_sampled: np.ndarray
    """Every held GPU has a sample (and at least one GPU is held)."""
    any_sampled: np.ndarray
    held: np.ndarray
    """GPUs held in the row (int32): the idle GPU-seconds of an idle row are its seconds times this."""
    owner: np.ndarray
    start: np.ndarray
    """First row of each owner."""
    count: np.ndarray
    """Rows of each owner."""

    @staticmethod
    def _reduce(activity: np.ndarray, starts: np.ndarray, widths: np.ndarray) -> tuple[np.ndarray, ...]:
        if len(starts) == 0:
            empty = np.zeros(0, dtype=bool)
            return np.zeros(0, dtype=np.float32), empty, empty, np.zeros(0, dtype=np.int32)
        held = activity != NOT_HELD
        sampled = activity >= 0  # False for NaN and -inf
        if np.all(widths == 1) and len(starts) == len(activity):
            highest = np.where(sampled, activity, np.float32(np.nan))
            return highest, sampled & held, sampled, held.astype(np.int32)
        highest = np.fmax.reduceat(np.where(sampled, activity, np.float32(np.nan)), starts)
        n_sampled = np.add.reduceat(sampled, starts, dtype=np.int32)
        del sampled
        n_held = np.add.reduceat(held, starts, dtype=np.int32)
        return highest, (n_sampled == n_held) & (n_held > 0), n_sampled > 0, n_held

    @classmethod
    def of(cls, history: History) -> SampleRows:
        slots, columns = history.slots, history.columns
        rows = int(slots.sum())
        owner = np.repeat(np.arange(len(slots), dtype=np.int64), slots)
        start = np.zeros(len(slots), dtype=np.int64)
        if len(slots):
            start[1:] = np.cumsum(slots)[:-1]
        local = np.arange(rows, dtype=np.int64) - start[owner]
        row_starts = history.offset[owner] + local * columns[owner]
        highest, all_sampled, any_sampled, held = cls._reduce(history.activity, row_starts, columns[owner])
        return cls(highest=highest, all_sampled=all_sampled, any_sampled=any_sampled, held=held, owner=owner,
                   start=start, count=slots.copy())

    @classmethod
    def of_pods(cls, history: History) -> SampleRows:
        pods = history.pods
        whole = pods.columns == history.columns[pods.workload]
        if np.all(whole) and np.array_equal(pods.workload, np.arange(len(history.slots))):
            return history.rows
        rows = history.rows
        slots = history.slots[pods.workload]
        start = np.zeros(len(pods), dtype=np.int64)
        if len(pods):
            start[1:] = np.cumsum(slots)[:-1]
        total = int(slots.sum())
        owner = np.repeat(np.arange(len(pods), dtype=np.int64), slots)
        # a pod holding all its workload's GPUs has the workload's rows
        source = rows.start[pods.workload][owner] + (np.arange(total, dtype=np.int64) - start[owner])
        highest, all_sampled, any_sampled = rows.highest[source], rows.all_sampled[source], rows.any_sampled[source]
        held_count = rows.held[source]
        del source
        for pod in np.flatnonzero(~whole).tolist():
            block = history.block(int(pods.workload[pod]))
            first = int(pods.first_column[pod])
            part = block[:, first:first + int(pods.columns[pod])]
            sampled = part >= 0
            held = part != NOT_HELD
            span = slice(int(start[pod]), int(start[pod] + slots[pod]))
            with np.errstate(invalid="ignore"):
                highest[span] = np.fmax.reduce(np.where(sampled, part, np.nan), axis=1)
            all_sampled[span] = (sampled.sum(axis=1) == held.sum(axis=1)) & held.any(axis=1)
            any_sampled[span] = sampled.any(axis=1)
            held_count[span] = held.sum(axis=1)
        return cls(highest=highest, all_sampled=all_sampled, any_sampled=any_sampled, held=held_count, owner=owner,
                   start=start, count=slots.copy())
