"""The definitions the report counts by, each on a tiny trace with the answer worked out by hand.

Times are minutes after T0; every sample stands for its minute."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from gpuaas.simulate.definitions import IdleSamples
from gpuaas.simulate.scorecard import judge_releases, summary
from gpuaas.simulate.trace import read_trace
from tests.simulate.conftest import Job, at, run, trace


def samples_of(directory: Path, jobs: list[Job], threshold: float = 0.05) -> IdleSamples:
    return IdleSamples.of(read_trace(trace(directory, jobs)), threshold)


def stretches(s: IdleSamples) -> list[tuple[float, float, bool]]:
    """(start minute, end minute, ends busy) of every stretch."""
    to_minutes = (s.stretch_begin_time - at(0)) / 60.0, (s.stretch_end_time - at(0)) / 60.0
    return [(float(a), float(b), bool(busy)) for a, b, busy in zip(*to_minutes, s.stretch_ends_busy, strict=True)]


def test_a_pause_between_busy_stretches_ends_busy(trace_dir: Path) -> None:
    s = samples_of(trace_dir, [Job("a", 240, [run((70, 0.8), (110, 0.0), (60, 0.8))])])
    assert stretches(s) == [(70.0, 180.0, True)]
    figures = summary(s, judge_releases(s, np.zeros(0, np.int64), np.zeros(0)))
    assert figures["idleGpuHours"] == pytest.approx(110 / 60, abs=1e-3)
    assert figures["idleGpuHoursEndingAtFinish"] == 0.0


def test_every_gpu_must_be_idle_and_gpu_hours_count_every_gpu(trace_dir: Path) -> None:
    # GPU 1 works for the first hour: the workload is idle only from minute 60, until it finishes.
    s = samples_of(trace_dir, [Job("a", 120, [run((120, 0.0)), run((60, 0.7), (60, 0.0))])])
    assert stretches(s) == [(60.0, 120.0, False)]
    figures = summary(s, judge_releases(s, np.zeros(0, np.int64), np.zeros(0)))
    assert figures["idleGpuHours"] == pytest.approx(2.0)  # 1 hour x 2 GPUs
    assert figures["idleGpuHoursEndingAtFinish"] == pytest.approx(2.0)


def test_a_gpu_without_samples_is_never_idle(trace_dir: Path) -> None:
    s = samples_of(trace_dir, [Job("a", 60, [run((60, 0.0)), []])])
    assert stretches(s) == []


def test_missing_samples_break_a_stretch_and_activity_after_both_ends_them_busy(trace_dir: Path) -> None:
    s = samples_of(trace_dir, [Job("a", 90, [run((30, 0.0), (2, None), (28, 0.0), (30, 0.6))])])
    assert stretches(s) == [(0.0, 30.0, True), (32.0, 60.0, True)]
    assert summary(s, judge_releases(s, np.zeros(0, np.int64), np.zeros(0)))["idleGpuHours"] == pytest.approx(58 / 60,
                                                                                                               abs=1e-3)


def test_threshold_is_inclusive(trace_dir: Path) -> None:
    s = samples_of(trace_dir, [Job("a", 30, [run((10, 0.05), (10, 0.051), (10, 0.0))])])
    assert stretches(s) == [(0.0, 10.0, True), (20.0, 30.0, False)]


def test_release_reclaims_until_activity_comes_back_and_is_wrong(trace_dir: Path) -> None:
    s = samples_of(trace_dir, [Job("a", 240, [run((70, 0.8), (110, 0.0), (60, 0.8))])])
    releases = judge_releases(s, np.array([0]), np.array([at(105.5)]))
    assert releases.reclaimed_gpu_hours[0] == pytest.approx(74.5 / 60)
    assert bool(releases.wrong[0]) is True
    assert releases.latency[0] == pytest.approx(35.5 * 60)
    figures = summary(s, releases)
    assert figures["wrongReleaseShare"] == 1.0 and figures["reclaimedShare"] == pytest.approx(74.5 / 110, abs=1e-4)


def test_release_in_a_stretch_ending_at_finish_is_right_and_reclaims_the_idle_time_after_a_gap(trace_dir: Path) -> None:
    # idle 0-20, no data 20-25, idle 25-60: released at 10, nothing comes back before the end.
    s = samples_of(trace_dir, [Job("a", 60, [run((20, 0.0), (5, None), (35, 0.0))])])
    assert stretches(s) == [(0.0, 20.0, False), (25.0, 60.0, False)]
    releases = judge_releases(s, np.array([0, 0]), np.array([at(10), at(22)]))
    assert bool(releases.wrong.any()) is False
    assert releases.reclaimed_gpu_hours.tolist() == pytest.approx([45 / 60, 35 / 60])
    assert releases.latency[0] == pytest.approx(600.0)
    assert math.isnan(releases.latency[1])  # released while there was no data: outside any idle stretch
    assert summary(s, releases)["releasesOutsideIdleStretches"] == 1


def test_lifetimes_off_the_grid_are_clipped(tmp_path: Path) -> None:
    # A 90-second workload starting 30 s into a minute: two slots, 30 s and 60 s long.
    directory = tmp_path / "t"
    directory.mkdir()
    (directory / "workloads.csv").write_text(
        f"workload,namespace,tenant,kind,gpus,start,end\na,ns,t,Job,1,{at(0) + 30:.0f},{at(2):.0f}\n")
    (directory / "activity.csv").write_text(f"time,workload,gpu,activity\n{at(0) + 30:.0f},a,0,0\n{at(1):.0f},a,0,0\n")
    s = IdleSamples.of(read_trace(directory), 0.05)
    assert s.stretch_seconds.tolist() == [90.0]
