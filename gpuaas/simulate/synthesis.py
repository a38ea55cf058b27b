"""A seeded synthetic GPU activity history built on a real job trace (`gpuaas simulate --synthesize`).

The Microsoft ITP trace (ElasticFlow, ASPLOS '23; data/PROVENANCE.md) gives each job's arrival,
duration and GPU count, but no utilisation. This module gives every job a kind and a minute-by-
minute activity pattern, seeded, so the same seed gives the same history everywhere.

What each pattern follows (sources read for this project; docs/simulate.md lists them too):

- **Training jobs** (`PyTorchJob`): an idle start-up (container and data loading), busy stretches
  broken by evaluation/checkpoint dips and occasional long stalls, and an idle tail. Calibrated so
  that, as in Microsoft's Philly trace (Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU
  Clusters for DNN Training Workloads", USENIX ATC '19), a job's GPUs are idle (every GPU at 0 %
  for the minute) for about half of the time in jobs under 6 h and about a quarter in jobs over
  24 h, with most idle periods in the middle of a job; these figures come from affinode's
  per-minute analysis of the public Philly trace
  (https://affinode.io/case-studies/msft-philly-dataset/analysis/case-study.html: 49 % idle under
  6 h, 25 % over 24 h, 65 % of idle periods mid-job). The benchmark prints the generated shares
  next to these.
- **Notebooks** (`Notebook`, 1 GPU): short busy bursts (cells running) between long pauses during
  an active part of the session, then an idle tail until the session ends. NotebookOS (Carver et
  al., ASPLOS '26, arXiv 2503.20591) reports production notebook sessions that are long-running
  with intermittent, sporadic GPU use, not using their reserved GPUs for most of their lifetime.
- **Ray clusters** (`RayCluster`): a training-like job, then the cluster is kept, idle, until it is
  deleted. KubeRay deletes a RayJob's cluster when the job ends only if `shutdownAfterJobFinishes`
  is set (KubeRay API reference), and a standalone RayCluster is never deleted by a job ending.
- **Inference** (`Deployment`): activity follows the time of day (peak 14:00 UTC), from busy to
  idle at night for lightly used services. DynamoLLM (Stojkovic et al., arXiv 2408.00741) reports
  that production LLM inference load at Azure fluctuates over time; the daily sine and its
  amplitude are this model's assumption.
- Across the whole mix the result is a cluster whose GPUs are mostly held but often idle, as in
  Alibaba PAI's trace (Weng et al., "MLaaS in the Wild", NSDI '22), where affinode's analysis
  (https://affinode.io/case-studies/alibaba-gpu-v2020/case-study.html) finds a median lifetime
  GPU utilisation of 1.5 % per instance.

Assumptions that no source above fixes, chosen and stated here: the kind mix (`Mix`), the
segment length distributions (`TRAINING`, `NOTEBOOK`), the share of exempt inference services,
busy levels (0.35-0.95 per segment, +-0.03 per sample and GPU), idle samples (0, or below 3 %),
8 GPUs per pod, four namespaces per tenant (tenant = ITP cluster), jobs start when submitted
(queueing is not modelled), and exporter gaps (about one per workload-day, 1-5 minutes, no data).
"""

from __future__ import annotations

import csv
import gzip
import io
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpuaas.simulate.history import History, Pods, Workloads, allocate

BUNDLED_ITP = Path(__file__).resolve().parent / "data" / "itp-jobs-30d.csv.gz"
ITP_EPOCH = 1614816000.0
"""2021-03-04T00:00:00Z: the first day of the ITP trace (its submission times count from then)."""
GPUS_PER_POD = 8
NAMESPACES_PER_TENANT = 4


@dataclass(frozen=True)
class ItpJobs:
    cluster: np.ndarray
    submission: np.ndarray
    duration: np.ndarray
    gpus: np.ndarray


def load_itp(path: Path | None = None) -> ItpJobs:
    """The bundled 30-day extract, the original raw-traces.tar.gz, or a directory of clusterNN.csv."""
    path = Path(path) if path else BUNDLED_ITP
    rows: list[tuple[str, float, float, int]] = []

    expected = "expected ITP job rows (cluster, submission_time, duration, num_gpu), the original raw-traces.tar.gz " \
               "or a folder of its clusterNN.csv"

    def read(handle: io.TextIOBase, cluster: str | None) -> None:
        for line, row in enumerate(csv.DictReader(handle), start=2):
            try:
                rows.append((cluster or row["cluster"], float(row["submission_time"]), float(row["duration"]),
                             int(row["num_gpu"])))
            except (KeyError, ValueError, TypeError) as error:
                problem = f"no column {error}" if isinstance(error, KeyError) else str(error)
                raise ValueError(f"{path}: {expected}, found on line {line}: {problem}") from None

    if not path.exists():
        raise ValueError(f"{path}: {expected}, found no such file")
    if path.is_dir():
        for file in sorted(path.glob("cluster*.csv")):
            with file.open(newline="") as handle:
                read(handle, file.stem.removeprefix("cluster"))
    elif path.name.endswith(".tar.gz"):
        try:
            with tarfile.open(path) as archive:
                for member in sorted(archive.getmembers(), key=lambda m: m.name):
                    name = Path(member.name).name
                    if name.startswith("cluster") and name.endswith(".csv"):
                        handle = archive.extractfile(member)
                        if handle is not None:
                            read(io.TextIOWrapper(handle, newline=""),
                                 name.removeprefix("cluster").removesuffix(".csv"))
        except (tarfile.TarError, OSError) as error:
            raise ValueError(f"{path}: {expected}, found a file that is not a readable tar.gz archive "
                             f"({type(error).__name__})") from None
    else:
        opener = gzip.open if path.suffix == ".gz" else open
        try:
            with opener(path, "rt", newline="") as handle:  # type: ignore[operator]
                read(handle, None)
        except (OSError, UnicodeDecodeError, EOFError) as error:
            raise ValueError(f"{path}: {expected}, found a file that cannot be read ({error})") from None
    if not rows:
        raise ValueError(f"{path}: {expected}, found none")
    cluster, submission, duration, gpus = zip(*rows, strict=True)
    order = np.lexsort((np.asarray(cluster), np.asarray(submission)))
    return ItpJobs(np.asarray(cluster, dtype=object)[order], np.asarray(submission)[order],
                   np.asarray(duration)[order], np.asarray(gpus, dtype=np.int64)[order])


@dataclass(frozen=True)
class Mix:
    """Which kind a job becomes, by its GPU count (an assumption; see the module docstring)."""

    single_gpu: tuple[float, float, float] = (0.25, 0.08, 0.05)
    """(notebook, ray, inference) shares of 1-GPU jobs; the rest train."""
    few_gpus: tuple[float, float] = (0.15, 0.05)
    """(ray, inference) shares of 2-8 GPU jobs."""
    many_gpus_ray: float = 0.10
    """ray share of jobs with more than 8 GPUs."""
    exempt_inference: float = 0.25
    """share of inference services annotated gpuaas.io/idle-policy: exempt."""


@dataclass(frozen=True)
class Segments:
    """Lengths in minutes: lognormal by median and sigma, or exponential by mean."""

    startup_median: float = 20.0
    busy_mean: float = 40.0
    dip_median: float = 6.0
    stall_share: float = 0.10
    stall_median: float = 45.0
    tail_median: float = 12.0


TRAINING = Segments()
NOTEBOOK_BURST_MEDIAN = 3.0
NOTEBOOK_PAUSE_MEAN = 25.0
KINDS = ("PyTorchJob", "Notebook", "RayCluster", "Deployment")
PREFIX = {"PyTorchJob": "train", "Notebook": "nb", "RayCluster": "ray", "Deployment": "infer"}


def _lognormal(rng: np.random.Generator, median: float, sigma: float, size: int) -> np.ndarray:
    return rng.lognormal(np.log(median), sigma, size)


def assign_kinds(rng: np.random.Generator, gpus: np.ndarray, mix: Mix) -> np.ndarray:
    draw = rng.random(len(gpus))
    kind = np.full(len(gpus), "PyTorchJob", dtype=object)
    one = gpus == 1
    nb, ray, inf = mix.single_gpu
    kind[one & (draw < nb)] = "Notebook"
    kind[one & (draw >= nb) & (draw < nb + ray)] = "RayCluster"
    kind[one & (draw >= nb + ray) & (draw < nb + ray + inf)] = "Deployment"
    few = (gpus > 1) & (gpus <= 8)
    ray, inf = mix.few_gpus
    kind[few & (draw < ray)] = "RayCluster"
    kind[few & (draw >= ray) & (draw < ray + inf)] = "Deployment"
    kind[(gpus > 8) & (draw < mix.many_gpus_ray)] = "RayCluster"
    return kind


def _alternating(rng: np.random.Generator, length: np.ndarray, first_off: np.ndarray,
                 on_draw, off_draw) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    """Busy flags and busy levels per row for owners of `length` rows: off, on, off, on, ...

    Returns (busy, level) concatenated in owner order."""
    count = len(length)
    owners: list[np.ndarray] = []
    starts: list[np.ndarray] = []
    sizes: list[np.ndarray] = []
    states: list[np.ndarray] = []
    levels: list[np.ndarray] = []
    position = np.zeros(count, dtype=np.int64)
    active = np.arange(count)
    off = np.maximum(np.round(first_off).astype(np.int64), 0)
    state_on = False
    while len(active):
        chunk = off if not state_on else np.maximum(np.round(on_draw(len(active))).astype(np.int64), 1)
        owners.append(active)
        starts.append(position[active])
        sizes.append(chunk)
        states.append(np.full(len(active), state_on))
        levels.append(rng.uniform(0.35, 0.95, len(active)) if state_on else np.zeros(len(active)))
        position[active] += chunk
        keep = position[active] < length[active]
        active = active[keep]
        state_on = not state_on
        if not state_on:
            off = np.maximum(np.round(off_draw(len(active))).astype(np.int64), 1)
    owner = np.concatenate(owners)
    start = np.concatenate(starts)
    size = np.concatenate(sizes)
    state = np.concatenate(states)
    level = np.concatenate(levels)
    size = np.minimum(size, length[owner] - start)
    keep = size > 0
    owner, start, size, state, level = owner[keep], start[keep], size[keep], state[keep], level[keep]
    order = np.lexsort((start, owner))
    return np.repeat(state[order], size[order]), np.repeat(level[order], size[order])


def _training_rows(rng: np.random.Generator, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    seg = TRAINING

    def busy(n: int) -> np.ndarray:
        return rng.exponential(seg.busy_mean, n)

    def pause(n: int) -> np.ndarray:
        stall = rng.random(n) < seg.stall_share
        return np.where(stall, _lognormal(rng, seg.stall_median, 0.6, n), _lognormal(rng, seg.dip_median, 0.5, n))

    startup = np.minimum(_lognormal(rng, seg.startup_median, 0.6, len(length)), 0.4 * length)
    flags, level = _alternating(rng, length, startup, busy, pause)
    tail = np.minimum(np.round(_lognormal(rng, seg.tail_median, 0.6, len(length))).astype(np.int64), length // 3)
    ends = np.cumsum(length)
    local = np.arange(int(length.sum())) - np.repeat(ends - length, length)
    in_tail = local >= np.repeat(length - tail, length)
    return flags & ~in_tail, np.where(in_tail, 0.0, level)


def _notebook_rows(rng: np.random.Generator, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    active = np.maximum(np.round(length * rng.uniform(0.2, 0.7, len(length))).astype(np.int64), 1)

    def burst(n: int) -> np.ndarray:
        return _lognormal(rng, NOTEBOOK_BURST_MEDIAN, 0.7, n)

    def pause(n: int) -> np.ndarray:
        return rng.exponential(NOTEBOOK_PAUSE_MEAN, n)

    flags, level = _alternating(rng, length, rng.uniform(1, 10, len(length)), burst, pause)
    ends = np.cumsum(length)
    local = np.arange(int(length.sum())) - np.repeat(ends - length, length)
    tail = local >= np.repeat(active, length)
    return flags & ~tail, np.where(tail, 0.0, level)


def _ray_rows(rng: np.random.Generator, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    flags, level = _training_rows(rng, length)
    job = np.maximum(np.round(length * rng.uniform(0.3, 0.9, len(length))).astype(np.int64), 1)
    ends = np.cumsum(length)
    local = np.arange(int(length.sum())) - np.repeat(ends - length, length)
    kept = local >= np.repeat(job, length)
    return flags & ~kept, np.where(kept, 0.0, level)


def _inference_rows(rng: np.random.Generator, length: np.ndarray, row_time: np.ndarray) -> np.ndarray:
    base = rng.uniform(0.10, 0.50, len(length))
    amplitude = base * rng.uniform(0.5, 1.2, len(length))
    phase = 2 * np.pi * ((row_time % 86400.0) / 86400.0 - 8.0 / 24.0)
    value = np.repeat(base, length) + np.repeat(amplitude, length) * np.sin(phase)
    return np.clip(value + rng.normal(0.0, 0.02, len(value)), 0.0, 1.0)


def synthesize(jobs: ItpJobs | None = None, *, seed: int = 1, days: float = 30.0, start_day: float = 0.0,
               step: float = 60.0, mix: Mix = Mix(), progress=None) -> History:  # type: ignore[no-untyped-def]
    """A History for the ITP jobs submitted in [start_day, start_day + days), lifetimes clipped to that window."""
    jobs = jobs or load_itp()
    rng = np.random.default_rng(seed)
    begin, finish = start_day * 86400.0, (start_day + days) * 86400.0
    keep = (jobs.submission >= begin) & (jobs.submission < finish) & (jobs.duration > 0)
    cluster, submission = jobs.cluster[keep], jobs.submission[keep]
    duration, gpus = jobs.duration[keep], jobs.gpus[keep]
    count = len(gpus)
    kind = assign_kinds(rng, gpus, mix)
    tenant = np.asarray([f"itp-c{c}" for c in cluster.tolist()], dtype=object)
    project = rng.integers(0, NAMESPACES_PER_TENANT, count)
    namespace = np.asarray([f"c{c}-p{p}" for c, p in zip(cluster.tolist(), project.tolist(), strict=True)],
                           dtype=object)
    name = np.asarray([f"{PREFIX[k]}-c{c}-{i:06d}" for i, (k, c) in enumerate(zip(kind.tolist(), cluster.tolist(),
                                                                                    strict=True))], dtype=object)
    start = ITP_EPOCH + submission
    end = np.minimum(start + duration, ITP_EPOCH + finish)
    exempt = (kind == "Deployment") & (rng.random(count) < mix.exempt_inference)
    workloads = Workloads.build(name=name.tolist(), namespace=namespace.tolist(), tenant=tenant.tolist(),
                                kind=kind.tolist(), gpus=gpus, start=start, end=end, exempt=exempt)
    t0 = ITP_EPOCH + begin
    pods = _pods(workloads)
    history = allocate(t0, step, workloads, workloads.gpus, pods, source=f"synthetic ITP history (seed {seed})")
    kinds = ", ".join(f"{name} {int(n):,}" for name, n in zip(*np.unique(kind, return_counts=True), strict=True))
    history.notes.append(f"{count:,} ITP jobs submitted in days {start_day:g}-{start_day + days:g}; kinds: {kinds}")
    _fill(history, rng, kind, progress)
    return history


def _pods(workloads: Workloads) -> Pods:
    per = np.maximum(np.ceil(workloads.gpus / GPUS_PER_POD).astype(np.int64), 1)
    owner = np.repeat(np.arange(len(workloads), dtype=np.int64), per)
    index = np.arange(len(owner)) - np.repeat(np.cumsum(per) - per, per)
    first = index * GPUS_PER_POD
    width = np.minimum(workloads.gpus[owner] - first, GPUS_PER_POD)
    names = np.asarray([f"{workloads.name[w]}-{i}" for w, i in zip(owner.tolist(), index.tolist(), strict=True)],
                       dtype=object)
    return Pods(name=names, workload=owner, first_column=first, columns=width)


def _fill(history: History, rng: np.random.Generator, kind: np.ndarray, progress=None) -> None:  # type: ignore[no-untyped-def]
    """Row values per kind, then per-GPU samples into the activity blocks, then exporter gaps."""
    slots = history.slots
    row_start = np.concatenate([[0], np.cumsum(slots)[:-1]]) if len(slots) else np.zeros(0, np.int64)
    total = int(slots.sum())
    busy = np.zeros(total, dtype=bool)
    level = np.zeros(total, dtype=np.float32)
    for position, (label, maker) in enumerate((("PyTorchJob", _training_rows), ("Notebook", _notebook_rows),
                                               ("RayCluster", _ray_rows))):
        members = np.flatnonzero(kind == label)
        if len(members):
            flags, values = maker(rng, slots[members])
            rows = _rows_of(row_start, slots, members)
            busy[rows], level[rows] = flags, values
        if progress:
            progress((position + 1) / 5)
    members = np.flatnonzero(kind == "Deployment")
    if len(members):
        rows = _rows_of(row_start, slots, members)
        owner = np.repeat(members, slots[members])
        local = rows - row_start[owner]
        row_time = history.t0 + (history.first[owner] + local) * history.step
        value = _inference_rows(rng, slots[members], row_time)
        busy[rows], level[rows] = value > 0.05, value
    # exporter gaps: about one per workload-day, 1-5 minutes without data on every GPU
    gap = rng.random(total) < history.step / 86400.0
    gap_rows = np.flatnonzero(gap)
    lengths = np.minimum(rng.integers(1, 6, len(gap_rows)), 5)
    owner_rows = np.repeat(np.arange(len(slots)), slots)
    segment_end = (row_start + slots)[owner_rows[gap_rows]] if len(gap_rows) else gap_rows
    missing = np.zeros(total + 1, dtype=np.int64)
    np.add.at(missing, gap_rows, 1)
    np.add.at(missing, np.minimum(gap_rows + lengths, segment_end), -1)
    no_data = np.cumsum(missing[:-1]) > 0
    if progress:
        progress(0.8)
    inference_row = (kind == "Deployment")[owner_rows]
    del owner_rows
    _samples(history, rng, busy, level, inference_row, no_data)
    if progress:
        progress(1.0)


def _samples(history: History, rng: np.random.Generator, busy: np.ndarray, level: np.ndarray,
             inference: np.ndarray, no_data: np.ndarray, rows_per_chunk: int = 2_000_000) -> None:
    """Per-GPU samples from the row values, written into the activity blocks chunk by chunk
    (their layout is row-major per workload, so a run of rows is a run of samples).

    Busy rows: the segment's level + N(0, 0.03) per GPU, at least 0.10; idle rows: 0 (80 %) or
    below 3 %; inference: the diurnal value + N(0, 0.01); rows without data: NaN on every GPU."""
    columns = np.repeat(history.columns, history.slots)
    sample_start = np.zeros(len(columns) + 1, dtype=np.int64)
    np.cumsum(columns, out=sample_start[1:])
    for first in range(0, len(columns), rows_per_chunk):
        last = min(first + rows_per_chunk, len(columns))
        width = columns[first:last]
        size = int(sample_start[last] - sample_start[first])
        row_busy = np.repeat(busy[first:last], width)
        row_inference = np.repeat(inference[first:last], width)
        value = np.repeat(level[first:last], width).astype(np.float32)
        noise = rng.standard_normal(size, dtype=np.float32) * np.float32(0.03)
        idle_value = np.where(rng.random(size, dtype=np.float32) < 0.8, np.float32(0.0),
                              rng.random(size, dtype=np.float32) * np.float32(0.03))
        out = np.where(row_busy & ~row_inference, np.clip(value + noise, 0.10, 1.0), idle_value)
        out = np.where(row_inference, np.clip(value + noise * np.float32(0.3), 0.0, 1.0), out)
        out = np.round(out, 3).astype(np.float32)
        out[np.repeat(no_data[first:last], width)] = np.nan
        history.activity[sample_start[first]:sample_start[last]] = out


def _rows_of(row_start: np.ndarray, slots: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Row indices of `members` (in member order), as the row arrays of `_fill` are laid out."""
    counts = slots[members]
    base = np.repeat(row_start[members], counts)
    return base + (np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts))



PUBLISHED = {"philly_training_idle_share_under_6h": 0.49, "philly_training_idle_share_over_24h": 0.25,
             "source": "affinode's per-minute analysis of the Philly trace (Jeon et al., USENIX ATC '19)"}
"""The published figures the training pattern is calibrated to (see the module docstring)."""


def calibration(history: History, samples) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """The generated history's figures next to the published ones: each training job's idle share,
    averaged by duration (Philly: 49 % under 6 h, 25 % over 24 h), notebooks' idle share, and the
    share of held GPU-hours that sit in idle stretches. `samples` is an IdleSamples of the history."""
    rows = history.rows
    has_rows = rows.count > 0
    idle_rows = np.add.reduceat(samples.idle.astype(np.int64), rows.start[has_rows])
    share = idle_rows / rows.count[has_rows]
    workloads = history.workloads
    kind = workloads.kind[has_rows]
    hours = (workloads.end - workloads.start)[has_rows] / 3600.0
    training = kind == "PyTorchJob"
    out: dict[str, object] = {}
    for name, low, high in (("under_6h", 0, 6), ("6h_to_24h", 6, 24), ("over_24h", 24, 1e9)):
        chosen = training & (hours >= low) & (hours < high)
        out[f"training_idle_share_{name}"] = round(float(share[chosen].mean()), 3) if chosen.any() else None
    notebooks = kind == "Notebook"
    out["notebook_idle_share"] = round(float(share[notebooks].mean()), 3) if notebooks.any() else None
    held = float(((workloads.end - workloads.start) * workloads.gpus).sum()) / 3600.0
    out["idle_gpu_hours_share_of_held"] = round(float(samples.stretch_gpu_hours.sum()) / held, 3) if held else None
    out["published"] = PUBLISHED
    return out
