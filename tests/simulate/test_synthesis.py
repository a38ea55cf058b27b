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
    assert len(w) == int(chosen.sum())
    assert np.array_equal(np.sort(w.gpus), np.sort(jobs.gpus[chosen]))
    assert w.start.min() >= ITP_EPOCH and w.end.max() <= ITP_EPOCH + 2 * 86400
    assert set(w.kind.tolist()) == {"PyTorchJob", "Notebook", "RayCluster", "Deployment"}
    assert set(w.kind[w.gpus > 1].tolist()) <= {"PyTorchJob", "RayCluster", "Deployment"}  # notebooks have 1 GPU
    assert two_days.pods.columns.max() <= 8


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


def test_exporter_gaps_are_rare_and_never_idle(two_days: History) -> None:
    rows = two_days.rows
    missing = ~rows.any_sampled
    assert 0 < missing.mean() < 0.01
    assert not IdleSamples.of(two_days, 0.05).idle[missing].any()
