"""A seeded synthetic GPU activity history built on a real job trace (`gpuaas simulate --synthesize`).

The Microsoft ITP trace (ElasticFlow, ASPLOS '23; data/PROVENANCE.md) gives each job's arrival,
duration and GPU count, but no utilisation. This module admits the jobs into the cohort's GPUs
(Kueue's BestEffortFIFO, gpuaas.simulate.demand), gives every job a kind, a minute-by-minute activity
pattern and its kind's own signals, seeded, so the same seed gives the same history everywhere.
Two calibrations (`CALIBRATIONS`), each fixed from published figures before any policy was tuned:

- **philly** (the default): a training cluster as Microsoft's Philly trace shows it (Jeon et al.,
  "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads", USENIX ATC '19):
  a job's GPUs idle (every GPU at 0 % for the minute) for about half of the time in jobs under 6 h
  and about a quarter in jobs over 24 h, most idle periods in the middle of a job (affinode's
  per-minute analysis of the public trace, https://affinode.io/case-studies/msft-philly-dataset/
  analysis/case-study.html: 49 % idle under 6 h, 25 % over 24 h, 65 % of idle periods mid-job).
- **pai**: the low-utilisation end of the literature, Alibaba PAI's mixed training and inference
  cluster (Weng et al., "MLaaS in the Wild", NSDI '22; its v2020 trace's pai_sensor_table as
  affinode analysed it, https://affinode.io/case-studies/alibaba-gpu-v2020/case-study.html): a
  GPU instance's lifetime-average utilisation has a mean of 10.5 % and a median of 1.5 %, 34.5 % of
  instances average exactly 0 %, 75.4 % average below 10 % and 5 % at least 50 %.

What each pattern follows (the sources, for both calibrations; docs/simulate.md lists them too):

- **Training jobs** (`PyTorchJob`): an idle start-up (container and data loading), busy stretches
  broken by evaluation/checkpoint dips and occasional long stalls, and an idle tail; some hang
  (a deadlock: no progress until they are killed; with NCCL collectives waiting, the GPUs spin
  busy, otherwise they sit at 0 %); some export a training progress counter (steps), which advances
  only while they compute.
- **Notebooks** (`Notebook`, 1 GPU): short busy bursts (cells running) between long pauses during
  an active part of the session, then an idle tail until the session ends. NotebookOS (Carver et
  al., ASPLOS '26, arXiv 2503.20591) reports production notebook sessions that are long-running
  with intermittent, sporadic GPU use, not using their reserved GPUs for most of their lifetime.
  Signals (the Jupyter server's API): kernel activity while cells run (also CPU-only cells in the
  pauses), a client connected while the owner works (away in the middle of a long pause), and in
  the tail a browser tab left open for a while by some owners.
- **Ray clusters** (`RayCluster`): a training-like job, then the cluster is kept, idle, until it is
  deleted; some run a second job later (interactive use). KubeRay deletes a RayJob's cluster when
  the job ends only if `shutdownAfterJobFinishes` is set (KubeRay API reference), and a standalone
  RayCluster is never deleted by a job ending. Signal (Ray's job API): a job pending or running.
- **Inference** (`Deployment`): activity follows the time of day (peak 14:00 UTC), from busy to
  idle at night for lightly used services. DynamoLLM (Stojkovic et al., arXiv 2408.00741) reports
  that production LLM inference load at Azure fluctuates over time; the daily sine and its
  amplitude are this model's assumption. Signal (the serving runtime's request metrics): requests
  served in the minute.
- **Batch jobs** (`Job`): mostly busy after a short start-up, few dips; no signal of their own.
- In every kind: allocations never used (every sample exactly 0 %: a notebook opened and left, a
  job stuck before its first step, a server that never got traffic), partial use of a job's GPUs
  (only some of a multi-GPU job's GPUs ever work), and activity near the threshold (the idle
  samples of some workloads sit around a few percent, e.g. a data loader's copies or an agent).

Assumptions that no source above fixes, chosen and stated here (per calibration in `CALIBRATIONS`):
the kind mix (`Mix`), the segment length distributions, the shares of never-used, hung, partly
used and near-threshold workloads, of training jobs exporting progress and of Ray clusters running
a second job, the notebook signal behaviour, busy levels (per segment, +-0.03 per sample and GPU),
idle samples (0, or below 3 %), 8 GPUs per pod, four namespaces per tenant (tenant = ITP
cluster), one cohort whose capacity is the 85th percentile of the GPUs the trace's jobs would hold
if each started when submitted (so jobs queue at the busy hours), and exporter gaps (about one per
workload-day, 1-5 minutes, no data).
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpuaas.simulate.demand import Queue, admit
from gpuaas.simulate.history import CLIENT, WORK, History, Pods, Signals, Workloads, allocate

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

    single_gpu: tuple[float, float, float, float] = (0.25, 0.08, 0.05, 0.10)
    """(notebook, ray, inference, batch) shares of 1-GPU jobs; the rest train."""
    few_gpus: tuple[float, float, float] = (0.15, 0.05, 0.10)
    """(ray, inference, batch) shares of 2-8 GPU jobs."""
    many_gpus_ray: float = 0.10
    """ray share of jobs with more than 8 GPUs."""
    exempt_inference: float = 0.25
    """share of inference services annotated gpuaas.io/idle-policy: exempt."""


@dataclass(frozen=True)
class Segments:
    """Training segment lengths in minutes: lognormal by median and sigma, or exponential by mean."""

    startup_median: float = 20.0
    busy_mean: float = 40.0
    dip_median: float = 6.0
    stall_share: float = 0.10
    stall_median: float = 45.0
    tail_median: float = 12.0
    busy_level: tuple[float, float] = (0.35, 0.95)


@dataclass(frozen=True)
class NotebookPattern:
    burst_median: float = 3.0
    pause_mean: float = 25.0
    active: tuple[float, float] = (0.2, 0.7)
    """Share of the session that is active (the rest is the idle tail)."""
    busy_level: tuple[float, float] = (0.35, 0.95)
    cpu_cells: float = 0.05
    """Chance per paused minute of kernel activity without the GPU (a CPU-only cell)."""
    away_after: float = 45.0
    """A pause at least this long: the owner is away (no client) from its 15th minute to 5 minutes before it ends."""
    stale_tab: float = 0.25
    """Share of notebooks whose browser tab stays connected into the idle tail ..."""
    stale_tab_mean: float = 120.0
    """... for an exponential time of this mean (minutes)."""


@dataclass(frozen=True)
class ServingPattern:
    base: tuple[float, float] = (0.10, 0.50)
    amplitude: tuple[float, float] = (0.5, 1.2)
    """Relative to the base."""
    requests_above: float = 0.01
    """Load above which requests are served (below: none, the server waits)."""


@dataclass(frozen=True)
class Calibration:
    """One set of the assumptions above, with the published figures it is held to."""

    name: str
    title: str
    mix: Mix = Mix()
    training: Segments = Segments()
    notebook: NotebookPattern = NotebookPattern()
    serving: ServingPattern = ServingPattern()
    never_used: float = 0.02
    """Share of workloads whose GPUs are never used (every sample exactly 0)."""
    hung: float = 0.02
    """Share of training jobs that hang at 30-90 % of their life until they end (killed)."""
    hung_spinning: float = 0.5
    """Share of hung jobs whose GPUs spin busy (NCCL collectives waiting) instead of sitting at 0."""
    partial: float = 0.05
    """Share of multi-GPU workloads that only ever use 1/8 to 1/2 of their GPUs."""
    near_threshold: float = 0.05
    """Share of workloads whose idle samples sit near the threshold (3-7 %, +-2 %: below the material 10 %)."""
    progress_metric: float = 0.5
    """Share of training jobs exporting a progress counter."""
    ray_second_job: float = 0.3
    """Share of Ray clusters that run a second job after an idle gap."""
    batch_level: tuple[float, float] = (0.5, 0.95)
    """Busy level of batch jobs' segments."""
    capacity_quantile: float = 0.85
    """The cohort's GPUs: this quantile of what the jobs would hold if each started when submitted."""
    published: dict[str, object] = field(default_factory=dict)
    """The published figures this calibration is held to (`calibration` reports the generated ones beside)."""


PHILLY = Calibration(
    name="philly", title="Philly-like training cluster (Jeon et al., ATC '19)",
    published={"training_idle_share_under_6h": 0.49, "training_idle_share_over_24h": 0.25,
               "source": "affinode's per-minute analysis of the Philly trace (Jeon et al., USENIX ATC '19): the "
                         "share of each training job's minutes with every GPU at 0 %, by job duration"})
PAI = Calibration(
    name="pai", title="PAI-like low-utilisation cluster (Weng et al., NSDI '22)",
    mix=Mix(single_gpu=(0.35, 0.05, 0.20, 0.12), few_gpus=(0.10, 0.15, 0.12), many_gpus_ray=0.10),
    training=Segments(startup_median=25.0, busy_mean=20.0, dip_median=8.0, stall_share=0.35, stall_median=60.0,
                      tail_median=20.0, busy_level=(0.10, 0.60)),
    notebook=NotebookPattern(burst_median=2.0, pause_mean=60.0, active=(0.1, 0.5), busy_level=(0.15, 0.60)),
    serving=ServingPattern(base=(0.01, 0.20), amplitude=(0.8, 1.5)),
    never_used=0.345, hung=0.05, partial=0.30, near_threshold=0.10,
    published={"instance_mean_utilisation": 0.105, "instance_median_utilisation": 0.015,
               "instances_at_zero": 0.345, "instances_below_10_percent": 0.754, "instances_at_or_above_50_percent": 0.05,
               "source": "affinode's analysis of pai_sensor_table, Alibaba PAI v2020 trace (Weng et al., NSDI '22): "
                         "lifetime-average GPU utilisation per instance"})
CALIBRATIONS = {c.name: c for c in (PHILLY, PAI)}
KINDS = ("PyTorchJob", "Notebook", "RayCluster", "Deployment", "Job")
PREFIX = {"PyTorchJob": "train", "Notebook": "nb", "RayCluster": "ray", "Deployment": "infer", "Job": "batch"}
SOURCE = {"Notebook": "jupyter", "RayCluster": "ray-jobs", "Deployment": "requests", "PyTorchJob": "progress", "Job": ""}


def _lognormal(rng: np.random.Generator, median: float, sigma: float, size: int) -> np.ndarray:
    return rng.lognormal(np.log(median), sigma, size)


def assign_kinds(rng: np.random.Generator, gpus: np.ndarray, mix: Mix) -> np.ndarray:
    draw = rng.random(len(gpus))
    kind = np.full(len(gpus), "PyTorchJob", dtype=object)
    one = gpus == 1
    edges = np.cumsum(mix.single_gpu)
    for label, low, high in zip(("Notebook", "RayCluster", "Deployment", "Job"), np.r_[0.0, edges[:-1]], edges,
                                strict=True):
        kind[one & (draw >= low) & (draw < high)] = label
    few = (gpus > 1) & (gpus <= 8)
    edges = np.cumsum(mix.few_gpus)
    for label, low, high in zip(("RayCluster", "Deployment", "Job"), np.r_[0.0, edges[:-1]], edges, strict=True):
        kind[few & (draw >= low) & (draw < high)] = label
    kind[(gpus > 8) & (draw < mix.many_gpus_ray)] = "RayCluster"
    return kind


def _alternating(rng: np.random.Generator, length: np.ndarray, first_off: np.ndarray,
                 on_draw, off_draw, levels: tuple[float, float] = (0.35, 0.95)  # type: ignore[no-untyped-def]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Busy flags and busy levels per row for owners of `length` rows: off, on, off, on, ...

    Returns (busy, level) concatenated in owner order."""
    count = len(length)
    owners: list[np.ndarray] = []
    starts: list[np.ndarray] = []
    sizes: list[np.ndarray] = []
    states: list[np.ndarray] = []
    chosen: list[np.ndarray] = []
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
        chosen.append(rng.uniform(*levels, len(active)) if state_on else np.zeros(len(active)))
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
    level = np.concatenate(chosen)
    size = np.minimum(size, length[owner] - start)
    keep = size > 0
    owner, start, size, state, level = owner[keep], start[keep], size[keep], state[keep], level[keep]
    order = np.lexsort((start, owner))
    return np.repeat(state[order], size[order]), np.repeat(level[order], size[order])


@dataclass
class Rows:
    """Per-row pattern of some workloads (concatenated in member order): busy, busy level, signal flags."""

    busy: np.ndarray
    level: np.ndarray
    flags: np.ndarray

    @classmethod
    def idle(cls, count: int) -> Rows:
        return cls(np.zeros(count, dtype=bool), np.zeros(count, dtype=np.float32), np.zeros(count, dtype=np.uint8))


def _local(length: np.ndarray) -> np.ndarray:
    """Each row's index within its owner (owners of `length` rows, concatenated)."""
    ends = np.cumsum(length)
    return np.arange(int(length.sum())) - np.repeat(ends - length, length)


def _training_rows(rng: np.random.Generator, length: np.ndarray, seg: Segments, hung: np.ndarray,
                   spinning: np.ndarray) -> Rows:
    def busy(n: int) -> np.ndarray:
        return rng.exponential(seg.busy_mean, n)

    def pause(n: int) -> np.ndarray:
        stall = rng.random(n) < seg.stall_share
        return np.where(stall, _lognormal(rng, seg.stall_median, 0.6, n), _lognormal(rng, seg.dip_median, 0.5, n))

    startup = np.minimum(_lognormal(rng, seg.startup_median, 0.6, len(length)), 0.4 * length)
    flags, level = _alternating(rng, length, startup, busy, pause, seg.busy_level)
    tail = np.minimum(np.round(_lognormal(rng, seg.tail_median, 0.6, len(length))).astype(np.int64), length // 3)
    local = _local(length)
    in_tail = local >= np.repeat(length - tail, length)
    busy_rows = flags & ~in_tail
    level = np.where(in_tail, 0.0, level)
    # a hang: from 30-90 % of its life to its end, no progress; spinning GPUs stay busy
    hang_at = np.where(hung, np.round(length * rng.uniform(0.3, 0.9, len(length))), np.iinfo(np.int64).max)
    hanging = local >= np.repeat(hang_at, length)
    spin = hanging & np.repeat(spinning, length)
    progress = busy_rows & ~hanging
    busy_rows = (busy_rows & ~hanging) | spin
    level = np.where(spin, 0.97, np.where(hanging, 0.0, level))
    return Rows(busy_rows, level.astype(np.float32), np.where(progress, WORK, np.uint8(0)).astype(np.uint8))


def _notebook_rows(rng: np.random.Generator, length: np.ndarray, pattern: NotebookPattern) -> Rows:
    active = np.maximum(np.round(length * rng.uniform(*pattern.active, len(length))).astype(np.int64), 1)

    def burst(n: int) -> np.ndarray:
        return _lognormal(rng, pattern.burst_median, 0.7, n)

    def pause(n: int) -> np.ndarray:
        return rng.exponential(pattern.pause_mean, n)

    flags, level = _alternating(rng, length, rng.uniform(1, 10, len(length)), burst, pause, pattern.busy_level)
    local = _local(length)
    tail = local >= np.repeat(active, length)
    busy = flags & ~tail
    # the owner is there during the active part (kernel activity in CPU-only cells too), away in the middle
    # of a long pause; some leave a tab open into the tail
    paused = ~flags & ~tail
    cpu = paused & (rng.random(len(busy)) < pattern.cpu_cells)
    run_start, run_length = _runs(paused, length)
    position = np.zeros(len(busy), dtype=np.int64)
    long_pause = run_length >= pattern.away_after
    away = np.zeros(len(busy), dtype=bool)
    for first, size in zip(run_start[long_pause].tolist(), run_length[long_pause].tolist(), strict=True):
        away[first + 15:first + size - 5] = True
    del position
    stale = rng.random(len(length)) < pattern.stale_tab
    stale_minutes = np.where(stale, rng.exponential(pattern.stale_tab_mean, len(length)), 0.0)
    stale_rows = tail & (local < np.repeat(active + np.round(stale_minutes).astype(np.int64), length))
    client = ((~tail & ~away) | stale_rows)
    work = busy | cpu
    flags_out = np.where(work, WORK, np.uint8(0)) | np.where(client, CLIENT, np.uint8(0))
    return Rows(busy, np.where(tail, 0.0, level).astype(np.float32), flags_out.astype(np.uint8))


def _runs(mask: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first row, length) of the runs of True in `mask`, not crossing owners."""
    boundary = np.zeros(len(mask), dtype=bool)
    boundary[np.cumsum(length)[:-1]] = True
    previous = np.r_[False, mask[:-1]] & ~boundary
    starts = np.flatnonzero(mask & ~previous)
    following = np.r_[mask[1:], False] & ~np.r_[boundary[1:], True]
    ends = np.flatnonzero(mask & ~following) + 1
    return starts, ends - starts


def _ray_rows(rng: np.random.Generator, length: np.ndarray, seg: Segments, second_job: float) -> Rows:
    none = np.zeros(len(length), dtype=bool)
    rows = _training_rows(rng, length, seg, none, none)
    job = np.maximum(np.round(length * rng.uniform(0.3, 0.9, len(length))).astype(np.int64), 1)
    local = _local(length)
    kept = local >= np.repeat(job, length)
    running = ~kept
    busy = rows.busy & running
    level = np.where(kept, 0.0, rows.level)
    # some clusters run a second job after an idle gap (interactive use)
    again = rng.random(len(length)) < second_job
    rest = np.maximum(length - job, 0)
    gap = np.round(rest * rng.uniform(0.2, 0.8, len(length))).astype(np.int64)
    second = np.maximum(np.round(_lognormal(rng, 30.0, 0.8, len(length))).astype(np.int64), 1)
    begin = job + gap
    in_second = np.repeat(again, length) & (local >= np.repeat(begin, length)) & \
        (local < np.repeat(begin + second, length))
    second_level = rng.uniform(*seg.busy_level, len(length))
    busy |= in_second
    level = np.where(in_second, np.repeat(second_level, length), level)
    work = running | in_second
    return Rows(busy, level.astype(np.float32), np.where(work, WORK, np.uint8(0)).astype(np.uint8))


def _batch_rows(rng: np.random.Generator, length: np.ndarray, batch_level: tuple[float, float]) -> Rows:
    def busy(n: int) -> np.ndarray:
        return rng.exponential(120.0, n)

    def pause(n: int) -> np.ndarray:
        return _lognormal(rng, 3.0, 0.5, n)

    startup = np.minimum(_lognormal(rng, 5.0, 0.6, len(length)), 0.3 * length)
    flags, level = _alternating(rng, length, startup, busy, pause, batch_level)
    tail = np.minimum(np.round(_lognormal(rng, 5.0, 0.6, len(length))).astype(np.int64), length // 3)
    in_tail = _local(length) >= np.repeat(length - tail, length)
    return Rows(flags & ~in_tail, np.where(in_tail, 0.0, level).astype(np.float32),
                np.zeros(int(length.sum()), dtype=np.uint8))


def _inference_rows(rng: np.random.Generator, length: np.ndarray, row_time: np.ndarray,
                    pattern: ServingPattern) -> Rows:
    base = rng.uniform(*pattern.base, len(length))
    amplitude = base * rng.uniform(*pattern.amplitude, len(length))
    phase = 2 * np.pi * ((row_time % 86400.0) / 86400.0 - 8.0 / 24.0)
    load = np.repeat(base, length) + np.repeat(amplitude, length) * np.sin(phase)
    value = np.clip(load + rng.normal(0.0, 0.02, len(load)), 0.0, 1.0)
    requests = load > pattern.requests_above
    return Rows(value > 0.05, value.astype(np.float32), np.where(requests, WORK, np.uint8(0)).astype(np.uint8))


def synthesize(jobs: ItpJobs | None = None, *, seed: int = 1, days: float = 30.0, start_day: float = 0.0,
               step: float = 60.0, calibration: Calibration = PHILLY, progress=None) -> History:  # type: ignore[no-untyped-def]
    """A History for the ITP jobs submitted in [start_day, start_day + days), admitted into the cohort's GPUs,
    lifetimes clipped to that window; `calibration` picks the assumptions (CALIBRATIONS)."""
    jobs = jobs or load_itp()
    rng = np.random.default_rng(seed)
    begin, finish = start_day * 86400.0, (start_day + days) * 86400.0
    keep = (jobs.submission >= begin) & (jobs.submission < finish) & (jobs.duration > 0)
    cluster, submission = jobs.cluster[keep], jobs.submission[keep]
    duration, gpus = jobs.duration[keep], jobs.gpus[keep]
    capacity = cohort_capacity(submission, duration, gpus, calibration.capacity_quantile, finish)
    admitted = admit(submission, duration, gpus, capacity, until=finish)
    kind = assign_kinds(rng, gpus, calibration.mix)
    exempt = (kind == "Deployment") & (rng.random(len(gpus)) < calibration.mix.exempt_inference)
    project = rng.integers(0, NAMESPACES_PER_TENANT, len(gpus))
    ran = np.flatnonzero(np.isfinite(admitted))
    workload_of_job = np.full(len(gpus), -1, dtype=np.int64)
    workload_of_job[ran] = np.arange(len(ran))
    tenant = np.asarray([f"itp-c{c}" for c in cluster[ran].tolist()], dtype=object)
    namespace = np.asarray([f"c{c}-p{p}" for c, p in zip(cluster[ran].tolist(), project[ran].tolist(), strict=True)],
                           dtype=object)
    name = np.asarray([f"{PREFIX[k]}-c{c}-{i:06d}" for i, k, c in zip(ran.tolist(), kind[ran].tolist(),
                                                                       cluster[ran].tolist(), strict=True)], dtype=object)
    start = ITP_EPOCH + admitted[ran]
    end = np.minimum(start + duration[ran], ITP_EPOCH + finish)
    workloads = Workloads.build(name=name.tolist(), namespace=namespace.tolist(), tenant=tenant.tolist(),
                                kind=kind[ran].tolist(), gpus=gpus[ran], start=start, end=end, exempt=exempt[ran])
    t0 = ITP_EPOCH + begin
    pods = _pods(workloads)
    history = allocate(t0, step, workloads, workloads.gpus, pods,
                       source=f"synthetic ITP history, {calibration.name} calibration (seed {seed})")
    history.submitted = ITP_EPOCH + submission[ran]
    history.queue = Queue(capacity=capacity, submitted=ITP_EPOCH + submission, admitted=ITP_EPOCH + admitted,
                          gpus=gpus.copy(), duration=duration.copy(), workload=workload_of_job)
    kinds = ", ".join(f"{name} {int(n):,}" for name, n in zip(*np.unique(kind[ran], return_counts=True), strict=True))
    waited = admitted[ran] > submission[ran]
    history.notes.append(f"{len(gpus):,} ITP jobs submitted in days {start_day:g}-{start_day + days:g}, {len(ran):,} "
                         f"admitted into the cohort's {capacity:,} GPUs ({int(waited.sum()):,} after waiting); "
                         f"kinds: {kinds}; calibration {calibration.name}: {calibration.title}")
    _fill(history, rng, workloads.kind, calibration, progress)
    return history


def cohort_capacity(submission: np.ndarray, duration: np.ndarray, gpus: np.ndarray, quantile: float,
                    finish: float) -> int:
    """GPUs of the cohort: `quantile` of what the jobs would hold over time if each started when submitted,
    rounded up to whole 8-GPU nodes (and at least the largest job)."""
    if len(gpus) == 0:
        return GPUS_PER_POD
    end = np.minimum(submission + duration, finish)
    times = np.concatenate([submission, end])
    change = np.concatenate([gpus, -gpus])
    order = np.argsort(times, kind="stable")
    held = np.cumsum(change[order])
    grid = np.arange(float(submission.min()), finish, 600.0)
    at = np.searchsorted(times[order], grid, side="right") - 1
    level = np.where(at >= 0, held[np.maximum(at, 0)], 0)
    wanted = float(np.quantile(level, quantile)) if len(level) else float(gpus.max())
    return int(max(math.ceil(wanted / GPUS_PER_POD) * GPUS_PER_POD, int(gpus.max())))


def _pods(workloads: Workloads) -> Pods:
    per = np.maximum(np.ceil(workloads.gpus / GPUS_PER_POD).astype(np.int64), 1)
    owner = np.repeat(np.arange(len(workloads), dtype=np.int64), per)
    index = np.arange(len(owner)) - np.repeat(np.cumsum(per) - per, per)
    first = index * GPUS_PER_POD
    width = np.minimum(workloads.gpus[owner] - first, GPUS_PER_POD)
    names = np.asarray([f"{workloads.name[w]}-{i}" for w, i in zip(owner.tolist(), index.tolist(), strict=True)],
                       dtype=object)
    return Pods(name=names, workload=owner, first_column=first, columns=width)


def _fill(history: History, rng: np.random.Generator, kind: np.ndarray, calibration: Calibration,
          progress=None) -> None:  # type: ignore[no-untyped-def]
    """Row patterns per kind, per-workload quirks, then per-GPU samples into the activity blocks, the
    kinds' signals, and exporter gaps."""
    slots = history.slots
    count = len(slots)
    row_start = np.concatenate([[0], np.cumsum(slots)[:-1]]) if count else np.zeros(0, np.int64)
    total = int(slots.sum())
    busy = np.zeros(total, dtype=bool)
    level = np.zeros(total, dtype=np.float32)
    flags = np.zeros(total, dtype=np.uint8)
    inference = kind == "Deployment"
    training = kind == "PyTorchJob"
    hung = training & (rng.random(count) < calibration.hung)
    spinning = hung & (rng.random(count) < calibration.hung_spinning)
    makers = (
        ("PyTorchJob", lambda n: _training_rows(rng, n, calibration.training, hung[training], spinning[training])),
        ("Notebook", lambda n: _notebook_rows(rng, n, calibration.notebook)),
        ("RayCluster", lambda n: _ray_rows(rng, n, calibration.training, calibration.ray_second_job)),
        ("Job", lambda n: _batch_rows(rng, n, calibration.batch_level)),
    )
    for position, (label, maker) in enumerate(makers):
        members = np.flatnonzero(kind == label)
        if len(members):
            made = maker(slots[members])
            rows = _rows_of(row_start, slots, members)
            busy[rows], level[rows], flags[rows] = made.busy, made.level, made.flags
        if progress:
            progress((position + 1) / 7)
    members = np.flatnonzero(inference)
    if len(members):
        rows = _rows_of(row_start, slots, members)
        owner = np.repeat(members, slots[members])
        row_time = history.t0 + (history.first[owner] + rows - row_start[owner]) * history.step
        made = _inference_rows(rng, slots[members], row_time, calibration.serving)
        busy[rows], level[rows], flags[rows] = made.busy, made.level, made.flags
    # per-workload quirks: never used, partly used, idle near the threshold
    never = rng.random(count) < calibration.never_used
    never_rows = np.repeat(never, slots)
    busy[never_rows] = False
    level[never_rows] = 0.0
    flags[never_rows] = 0
    notebooks_never = np.flatnonzero(never & (kind == "Notebook"))
    for w in notebooks_never.tolist():  # opened, looked at for a few minutes, left
        flags[row_start[w]:row_start[w] + min(int(slots[w]), 10)] = CLIENT
    columns = history.columns
    used = np.where((columns > 1) & ~never & (rng.random(count) < calibration.partial),
                    np.maximum(np.round(columns * rng.uniform(0.125, 0.5, count)), 1), columns).astype(np.int64)
    noisy = ~never & (rng.random(count) < calibration.near_threshold)
    noise_level = np.where(noisy, rng.uniform(0.03, 0.07, count), 0.0).astype(np.float32)
    sources = np.asarray([SOURCE[k] for k in kind.tolist()], dtype=object)
    sources[training & (rng.random(count) >= calibration.progress_metric)] = ""
    history.signals = Signals(source=sources, flags=flags)
    if progress:
        progress(5 / 7)
    # exporter gaps: about one per workload-day, 1-5 minutes without data on every GPU
    gap = rng.random(total) < history.step / 86400.0
    gap_rows = np.flatnonzero(gap)
    lengths = np.minimum(rng.integers(1, 6, len(gap_rows)), 5)
    owner_rows = np.repeat(np.arange(count), slots)
    segment_end = (row_start + slots)[owner_rows[gap_rows]] if len(gap_rows) else gap_rows
    missing = np.zeros(total + 1, dtype=np.int64)
    np.add.at(missing, gap_rows, 1)
    np.add.at(missing, np.minimum(gap_rows + lengths, segment_end), -1)
    no_data = np.cumsum(missing[:-1]) > 0
    if progress:
        progress(6 / 7)
    _samples(history, rng, busy, level, inference[owner_rows], no_data, owner_rows, used, noise_level, never)
    if progress:
        progress(1.0)


def _samples(history: History, rng: np.random.Generator, busy: np.ndarray, level: np.ndarray,
             inference: np.ndarray, no_data: np.ndarray, owner_rows: np.ndarray, used: np.ndarray,
             noise_level: np.ndarray, never: np.ndarray, rows_per_chunk: int = 2_000_000) -> None:
    """Per-GPU samples from the row values, written into the activity blocks chunk by chunk
    (their layout is row-major per workload, so a run of rows is a run of samples).

    Busy rows: the segment's level + N(0, 0.03) per GPU, at least 0.10, on the GPUs the workload uses;
    idle rows and unused GPUs: 0 (80 %) or below 3 %, or the workload's near-threshold level +-2 %, or
    exactly 0 for an allocation never used; inference: the diurnal value + N(0, 0.01); rows without
    data: NaN on every GPU."""
    columns = np.repeat(history.columns, history.slots)
    sample_start = np.zeros(len(columns) + 1, dtype=np.int64)
    np.cumsum(columns, out=sample_start[1:])
    for first in range(0, len(columns), rows_per_chunk):
        last = min(first + rows_per_chunk, len(columns))
        width = columns[first:last]
        size = int(sample_start[last] - sample_start[first])
        owner = np.repeat(owner_rows[first:last], width)
        column = np.arange(size, dtype=np.int64) - np.repeat(sample_start[first:last] - sample_start[first], width)
        working = column < used[owner]
        row_busy = np.repeat(busy[first:last], width) & working
        row_inference = np.repeat(inference[first:last], width)
        value = np.repeat(level[first:last], width).astype(np.float32)
        noise = rng.standard_normal(size, dtype=np.float32) * np.float32(0.03)
        idle_value = np.where(rng.random(size, dtype=np.float32) < 0.8, np.float32(0.0),
                              rng.random(size, dtype=np.float32) * np.float32(0.03))
        near = noise_level[owner]
        idle_value = np.where(near > 0, np.clip(near + (rng.random(size, dtype=np.float32) - np.float32(0.5))
                                                * np.float32(0.04), 0.0, 1.0), idle_value)
        idle_value = np.where(never[owner], np.float32(0.0), idle_value)
        out = np.where(row_busy & ~row_inference, np.clip(value + noise, 0.10, 1.0), idle_value)
        out = np.where(row_inference & working, np.clip(value + noise * np.float32(0.3), 0.0, 1.0), out)
        out = np.where(row_inference & never[owner], np.float32(0.0), out)
        out = np.round(out, 3).astype(np.float32)
        out[np.repeat(no_data[first:last], width)] = np.nan
        history.activity[sample_start[first]:sample_start[last]] = out


def _rows_of(row_start: np.ndarray, slots: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Row indices of `members` (in member order), as the row arrays of `_fill` are laid out."""
    counts = slots[members]
    base = np.repeat(row_start[members], counts)
    return base + (np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts))



def utilisation(history: History) -> np.ndarray:
    """Each workload's lifetime-average GPU activity (0-1) over its sampled GPU slots (NaN: none), as
    PAI's pai_sensor_table reports gpu_wrk_util per instance."""
    activity = history.activity
    sizes = history.slots * history.columns
    has = sizes > 0
    sampled = activity >= 0
    values = np.where(sampled, activity, np.float32(0.0)).astype(np.float64)
    out = np.full(len(sizes), np.nan)
    if has.any():
        starts = history.offset[has]
        sums = np.add.reduceat(values, starts)
        counts = np.add.reduceat(sampled.astype(np.int64), starts)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[has] = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return out


def calibration(history: History, samples, name: str = "philly") -> dict[str, object]:  # type: ignore[no-untyped-def]
    """The generated history's figures next to the published ones of its calibration: each training
    job's idle share by duration (Philly), each workload's lifetime-average utilisation (PAI), notebooks'
    idle share, the share of held GPU-hours in idle stretches, and the queue. `samples` is an
    IdleSamples of the history."""
    rows = history.rows
    has_rows = rows.count > 0
    idle_rows = np.add.reduceat(samples.idle.astype(np.int64), rows.start[has_rows])
    share = idle_rows / rows.count[has_rows]
    workloads = history.workloads
    kind = workloads.kind[has_rows]
    hours = (workloads.end - workloads.start)[has_rows] / 3600.0
    training = kind == "PyTorchJob"
    out: dict[str, object] = {"calibration": name}
    for label, low, high in (("under_6h", 0, 6), ("6h_to_24h", 6, 24), ("over_24h", 24, 1e9)):
        chosen = training & (hours >= low) & (hours < high)
        out[f"training_idle_share_{label}"] = round(float(share[chosen].mean()), 3) if chosen.any() else None
    notebooks = kind == "Notebook"
    out["notebook_idle_share"] = round(float(share[notebooks].mean()), 3) if notebooks.any() else None
    used = utilisation(history)
    used = used[~np.isnan(used)]
    if len(used):
        out.update(instance_mean_utilisation=round(float(used.mean()), 4),
                   instance_median_utilisation=round(float(np.median(used)), 4),
                   instances_at_zero=round(float((used == 0).mean()), 4),
                   instances_below_10_percent=round(float((used < 0.10).mean()), 4),
                   instances_at_or_above_50_percent=round(float((used >= 0.50).mean()), 4))
    held = float(((workloads.end - workloads.start) * workloads.gpus).sum()) / 3600.0
    out["idle_gpu_hours_share_of_held"] = round(float(samples.stretch_gpu_hours.sum()) / held, 3) if held else None
    queue = getattr(history, "queue", None)
    if queue is not None and len(queue):
        waited = np.isfinite(queue.admitted)
        wait = (queue.admitted - queue.submitted)[waited] / 3600.0
        out["queue"] = {"cohortGpus": int(queue.capacity), "jobs": len(queue),
                        "waited": round(float((wait > 0).mean()), 3) if len(wait) else 0.0,
                        "waitHoursP50": round(float(np.quantile(wait, 0.5)), 2) if len(wait) else 0.0,
                        "waitHoursP90": round(float(np.quantile(wait, 0.9)), 2) if len(wait) else 0.0,
                        "neverAdmitted": int((~waited).sum())}
    out["published"] = CALIBRATIONS[name].published if name in CALIBRATIONS else {}
    return out
