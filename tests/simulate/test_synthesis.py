"""The synthetic ITP history: seeded, built on the real job trace, with the documented patterns."""

from __future__ import annotations

import csv
import io
import tarfile
from pathlib import Path

import numpy as np
import pytest

from gpuaas.simulate.definitions import IdleSamples
from gpuaas.simulate.history import History
from gpuaas.simulate.synthesis import BUNDLED_ITP, ITP_EPOCH, load_itp, synthesize


@pytest.fixture(scope="module")
def two_days() -> History:
    return synthesize(seed=7, days=2)


def test_bundled_extract_is_the_first_30_days_of_the_itp_trace() -> None:
    jobs = load_itp()
    assert len(jobs.gpus) == 41446 and jobs.submission.max() < 30 * 86400
    assert sorted(set(jobs.cluster.tolist())) == [f"{n:02d}" for n in range(1, 11)]
    assert {"LICENSE", "PROVENANCE.md"} <= {p.name for p in BUNDLED_ITP.parent.iterdir()}
    assert "MIT License" in (BUNDLED_ITP.parent / "LICENSE").read_text()


def test_the_original_archive_format_reads_the_same(tmp_path: Path) -> None:
    jobs = load_itp()
    archive = tmp_path / "raw-traces.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for cluster in ("01", "04"):
            body = io.StringIO()
            writer = csv.writer(body)
            writer.writerow(["job_id", "submission_time", "duration", "num_gpu"])
            chosen = jobs.cluster == cluster
            for i, (s, d, g) in enumerate(zip(jobs.submission[chosen], jobs.duration[chosen], jobs.gpus[chosen],
                                              strict=True)):
                writer.writerow([f"id-{i}", int(s), int(d), int(g)])
            data = body.getvalue().encode()
            info = tarfile.TarInfo(f"cluster{cluster}.csv")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    again = load_itp(archive)
    assert len(again.gpus) == int(np.isin(jobs.cluster, ["01", "04"]).sum())
    assert sorted(set(again.cluster.tolist())) == ["01", "04"]


def test_same_seed_same_history_other_seed_other_history() -> None:
    a, b, c = synthesize(seed=5, days=0.5), synthesize(seed=5, days=0.5), synthesize(seed=6, days=0.5)
    assert np.array_equal(a.activity, b.activity, equal_nan=True)
    assert a.workloads.kind.tolist() == b.workloads.kind.tolist()
    assert not np.array_equal(a.activity, c.activity, equal_nan=True)
    assert a.workloads.start.tolist() == c.workloads.start.tolist()  # the jobs are the trace's


def test_jobs_are_the_traces_with_their_gpus_and_lifetimes(two_days: History) -> None:
    jobs = load_itp()
    chosen = jobs.submission < 2 * 86400
    w = two_days.workloads
    queue = two_days.queue
    assert queue is not None and len(queue) == int(chosen.sum())
    admitted = np.isfinite(queue.admitted)
    assert len(w) == int(admitted.sum())  # a job still waiting at the end of the history is no workload
    assert np.array_equal(np.sort(w.gpus), np.sort(jobs.gpus[chosen][admitted]))
    assert w.start.min() >= ITP_EPOCH and w.end.max() <= ITP_EPOCH + 2 * 86400
    assert np.all(two_days.submitted <= w.start)  # admitted when the cohort had room
    assert np.array_equal(queue.admitted[queue.workload >= 0], w.start)
    assert set(w.kind.tolist()) == {"PyTorchJob", "Notebook", "RayCluster", "Deployment", "Job"}
    assert set(w.kind[w.gpus > 1].tolist()) <= {"PyTorchJob", "RayCluster", "Deployment", "Job"}  # notebooks: 1 GPU
    assert two_days.pods.columns.max() <= 8


def test_admission_is_best_effort_fifo_into_the_cohorts_gpus() -> None:
    """Hand-computed: capacity 8; a (6 GPUs, 0-100), b (4, from 10) waits for a, c (2, from 20) fits beside a
    and goes first (BestEffortFIFO: b does not block it), d (10) never fits."""
    from gpuaas.simulate.demand import NEVER, admit

    admitted = admit(np.array([0.0, 10.0, 20.0, 30.0]), np.array([100.0, 50.0, 50.0, 10.0]),
                     np.array([6, 4, 2, 10]), capacity=8)
    assert admitted.tolist() == [0.0, 100.0, 20.0, NEVER]
    # the cohort is the 85th percentile of what the jobs would hold if each started at once, in whole nodes
    from gpuaas.simulate.synthesis import cohort_capacity

    assert cohort_capacity(np.array([0.0, 0.0]), np.array([1000.0, 1000.0]), np.array([3, 9]), 0.85, 1000.0) == 16


def _idle_share(history: History, kind: str) -> float:
    samples = IdleSamples.of(history, 0.05)
    rows = history.rows
    chosen = history.workloads.kind[rows.owner] == kind
    return float(samples.idle[chosen].mean())


def test_patterns(two_days: History) -> None:
    assert _idle_share(two_days, "Notebook") > 0.8       # NotebookOS: sessions mostly hold idle GPUs
    assert 0.2 < _idle_share(two_days, "PyTorchJob") < 0.5  # Philly: about a quarter to a half idle
    assert _idle_share(two_days, "RayCluster") > _idle_share(two_days, "PyTorchJob")  # kept clusters
    rows = two_days.rows
    inference = two_days.workloads.kind[rows.owner] == "Deployment"
    hour = ((two_days.t0 + (two_days.first[rows.owner] + np.arange(len(rows.owner)) - rows.start[rows.owner])
             * two_days.step) % 86400) // 3600
    afternoon = np.nanmean(rows.highest[inference & (hour == 14)])
    night = np.nanmean(rows.highest[inference & (hour == 2)])
    assert afternoon > night + 0.1                       # diurnal inference


def test_the_additions_each_show(two_days: History) -> None:
    """Never-used allocations (every sample exactly 0), partial use of multi-GPU jobs, near-threshold idle
    samples, and each kind's own signal source."""
    from gpuaas.simulate.synthesis import PAI, synthesize, utilisation

    pai = synthesize(seed=7, days=2, calibration=PAI)
    used = utilisation(pai)
    assert 0.25 < float(np.mean(used == 0)) < 0.45  # PAI: 34.5 % of instances average exactly 0
    signals = two_days.signals
    assert signals is not None
    kinds = two_days.workloads.kind
    assert set(signals.source[kinds == "Notebook"].tolist()) == {"jupyter"}
    assert set(signals.source[kinds == "RayCluster"].tolist()) == {"ray-jobs"}
    assert set(signals.source[kinds == "Deployment"].tolist()) == {"requests"}
    assert set(signals.source[kinds == "PyTorchJob"].tolist()) == {"progress", ""}
    assert set(signals.source[kinds == "Job"].tolist()) == {""}
    # partial use: some multi-GPU workloads have a GPU that is never above 10 % while another is
    blocks = [pai.block(w) for w in np.flatnonzero(pai.workloads.gpus > 1)[:400]]
    assert any((np.nanmax(b, axis=0) > 0.1).any() and (np.nanmax(b, axis=0) <= 0.03).any() for b in blocks)
    # near the threshold: some workloads whose samples never reach 10 % sit mostly above 3 %
    quiet = [pai.block(w) for w in range(400) if np.nanmax(pai.block(w)) < 0.1 and np.nanmax(pai.block(w)) > 0.04]
    assert any(np.nanmean(b) > 0.03 for b in quiet)


def test_signals_follow_the_patterns(two_days: History) -> None:
    """A Ray job runs while the cluster's GPUs work; a server serves requests while its GPUs are busy;
    a notebook's kernel is busy while its GPU is."""
    from gpuaas.simulate.history import WORK

    signals = two_days.signals
    rows = two_days.rows
    kind = two_days.workloads.kind[rows.owner]
    work = (signals.flags & WORK) > 0
    busy = rows.highest > 0.1
    for label in ("RayCluster", "Notebook"):
        chosen = (kind == label) & rows.any_sampled
        assert work[chosen & busy].mean() > 0.99, label
    serving = (kind == "Deployment") & rows.any_sampled
    assert work[serving & busy].mean() > 0.95
    kept = (kind == "RayCluster") & ~work
    assert kept.any() and not busy[kept].any()  # no Ray job: the kept cluster sits idle


def test_exporter_gaps_are_rare_and_never_idle(two_days: History) -> None:
    rows = two_days.rows
    missing = ~rows.any_sampled
    assert 0 < missing.mean() < 0.01
    assert not IdleSamples.of(two_days, 0.05).idle[missing].any()
