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


# -- materiality, right/wrong reclaim, GPU weighting, work ahead, bound, costs (hand-computed) ----------
def judged(directory: Path, jobs: list[Job], releases_at: list[tuple[int, float]]):  # type: ignore[no-untyped-def]
    s = samples_of(directory, jobs)
    workload = np.array([w for w, _ in releases_at])
    when = np.array([at(m) for _, m in releases_at])
    return s, judge_releases(s, workload, when)


@pytest.mark.parametrize(("back", "wrong"), [(4, False), (5, True)])
def test_a_release_is_wrong_only_after_five_minutes_of_material_activity(trace_dir: Path, back: int, wrong: bool) -> None:
    # idle from minute 30; released at 60; 4 (or 5) busy minutes at 80 % come back at 90, then idle to 120
    _, r = judged(trace_dir, [Job("a", 120, [run((30, 0.8), (60, 0.0), (back, 0.8), (30 - back, 0.0))])], [(0, 60)])
    assert bool(r.wrong[0]) is wrong and bool(r.wrong_any[0]) is True
    # wrong: reclaimed until the activity came back (30 min); right: the idle minutes to the end (60 - back)
    assert r.reclaimed_gpu_hours[0] == pytest.approx(30 / 60 if wrong else (60 - back) / 60)
    assert r.activity_back[0] == (at(90) if wrong else at(120))
    assert r.busy_ahead_gpu_hours[0] == pytest.approx(back / 60)


def test_activity_between_the_threshold_and_ten_percent_is_not_material(trace_dir: Path) -> None:
    # after the release, an hour at 8 %: above the idle threshold (5 %), below the material level (10 %)
    s, r = judged(trace_dir, [Job("a", 150, [run((30, 0.8), (60, 0.0), (60, 0.08))])], [(0, 60)])
    assert bool(r.wrong[0]) is False and bool(r.wrong_any[0]) is True
    figures = summary(s, r)
    assert figures["wrongReleases"] == 0 and figures["wrongAnyActivity"] == 1
    assert figures["reclaimedGpuHours"] == pytest.approx(0.5)  # idle minutes 60-90; the 8 % hour is not idle


def test_reclaim_of_right_and_wrong_releases_and_gpu_weighted_wrong_share(trace_dir: Path) -> None:
    jobs = [Job("one-gpu", 240, [run((60, 0.8), (60, 0.0), (30, 0.8), (90, 0.0))]),
            Job("four-gpus", 240, [run((60, 0.8), (180, 0.0))] * 4)]
    s, r = judged(trace_dir, jobs, [(0, 90), (1, 120)])
    figures = summary(s, r)
    # one-gpu released at 90, busy again at 120: wrong, 0.5 GPU-h; four-gpus at 120: right, 2 h x 4 GPUs
    assert figures["wrongReclaimedGpuHours"] == pytest.approx(0.5)
    assert figures["rightReclaimedGpuHours"] == pytest.approx(8.0)
    assert figures["wrongReleaseShare"] == 0.5 and figures["wrongGpuShare"] == pytest.approx(0.2)
    assert figures["releasedGpus"] == 5 and figures["wrongGpus"] == 1
    assert figures["busyGpuHoursAhead"] == pytest.approx(0.5)  # the 30 busy minutes ahead of one-gpu


def test_the_bound_releases_once_in_the_last_idle_stretch_at_the_wait(trace_dir: Path) -> None:
    # busy 0-60, idle 60-120 (busy again), busy 120-150, idle 150-240: 2 GPUs
    s = samples_of(trace_dir, [Job("a", 240, [run((60, 0.8), (60, 0.0), (30, 0.8), (90, 0.0))] * 2)])
    everyone, start = np.array([True]), np.array([at(0)])
    last, every = s.bound(np.array([1800.0]), start, everyone)
    assert last[0] / 3600 == pytest.approx(2 * 60 / 60)           # released at 180: 60 minutes x 2 GPUs
    assert every[0] / 3600 == pytest.approx(2 * (30 + 60) / 60)    # also at 90 in the first stretch
    last, _ = s.bound(np.array([1800.0]), np.array([at(200)]), everyone)  # minimum runtime until 200
    assert last[0] / 3600 == pytest.approx(2 * 40 / 60)
    last, _ = s.bound(np.array([6000.0]), start, everyone)        # a 100-minute wait fits no stretch
    assert last[0] == 0.0
    assert s.bound(np.array([1800.0]), start, np.array([False]))[0][0] == 0.0  # out of scope (exempt)


def test_an_immaterial_blip_does_not_end_the_last_stretch_for_the_bound(trace_dir: Path) -> None:
    # busy 0-60, idle 60-120, 3 busy minutes, idle 123-180: the first stretch already counts as the last
    s = samples_of(trace_dir, [Job("a", 180, [run((60, 0.8), (60, 0.0), (3, 0.8), (57, 0.0))])])
    last, _ = s.bound(np.array([1800.0]), np.array([at(0)]), np.array([True]))
    assert last[0] / 60 == pytest.approx(30 + 57)  # from 90: the idle minutes to the end (the blip is not idle)


def test_reached_share_of_the_bound_counts_right_releases_only(trace_dir: Path) -> None:
    from gpuaas.simulate.scorecard import Bound

    s, r = judged(trace_dir, [Job("a", 240, [run((60, 0.8), (60, 0.0), (30, 0.8), (90, 0.0))])], [(0, 90)])
    bound = Bound.of(s, np.array([1800.0]), np.array([at(0)]), np.array([True]))
    assert summary(s, r, bound)["reachedShareOfBound"] == 0.0      # the only release was wrong
    s, r = judged(trace_dir, [Job("a", 240, [run((60, 0.8), (60, 0.0), (30, 0.8), (90, 0.0))])], [(0, 195)])
    figures = summary(s, r, Bound.of(s, np.array([1800.0]), np.array([at(0)]), np.array([True])))
    assert figures["boundGpuHours"] == pytest.approx(1.0) and figures["reachedShareOfBound"] == pytest.approx(0.75)


@pytest.mark.parametrize(("kind", "lost_minutes", "restart_minutes"),
                         [("PyTorchJob", 30, 10), ("Notebook", 90, 5), ("Deployment", 0, 10), ("Job", 30, 5)])
def test_a_wrong_release_costs_lost_progress_restart_and_the_wait(trace_dir: Path, kind: str, lost_minutes: int,
                                                                   restart_minutes: int) -> None:
    # 2 GPUs busy 0-90, idle 90-130, busy 130-160; released at 100: wrong, 30 idle minutes reclaimed
    job = Job("a", 160, [run((90, 0.8), (40, 0.0), (30, 0.8))] * 2, kind=kind)
    s, r = judged(trace_dir, [job], [(0, 100)])
    figures = summary(s, r)
    assert figures["reclaimedGpuHours"] == pytest.approx(2 * 30 / 60)
    cost = figures["costGpuHours"]
    # checkpoints every busy hour: 90 busy minutes lose 30; a notebook loses all 90; a server nothing
    assert cost["lostProgress"] == pytest.approx(2 * lost_minutes / 60, abs=1e-3)
    assert cost["restart"] == pytest.approx(2 * restart_minutes / 60, abs=1e-3)
    assert cost["waitToBeAdmitted"] == pytest.approx(2 * 30 / 60, abs=1e-3)  # 30 minutes until resumed by hand
    assert figures["netGpuHours"] == pytest.approx(1.0 - (2 * (lost_minutes + restart_minutes + 30) / 60), abs=2e-3)


def test_a_right_release_costs_nothing(trace_dir: Path) -> None:
    s, r = judged(trace_dir, [Job("a", 160, [run((90, 0.8), (70, 0.0))])], [(0, 100)])
    figures = summary(s, r)
    assert figures["costGpuHours"]["total"] == 0.0 and figures["netGpuHours"] == pytest.approx(1.0)


def test_a_gap_in_the_data_does_not_end_the_quiet_run_the_bound_waits_in(trace_dir: Path) -> None:
    # busy 0-60, idle 60-90, 3 minutes without data, idle 93-180: a policy tolerating the gap could release at
    # 120 (an hour without a busy sample); the bound counts the idle minutes from 120 to the end
    s = samples_of(trace_dir, [Job("a", 180, [run((60, 0.8), (30, 0.0), (3, None), (87, 0.0))])])
    last, _ = s.bound(np.array([3600.0]), np.array([at(0)]), np.array([True]))
    assert last[0] / 60 == pytest.approx(60)


def test_a_workload_idle_from_its_start_may_go_once_min_coverage_of_the_window_is_covered(trace_dir: Path) -> None:
    # idle from the start for 100 minutes: nothing was sampled before the start, so a 60-minute window is
    # covered enough (minCoverage 0.9) at minute 54, when the gateway would confirm it
    s = samples_of(trace_dir, [Job("a", 100, [run((100, 0.0))])])
    last, _ = s.bound(np.array([3600.0]), np.array([at(0)]), np.array([True]), start_wait=np.array([3240.0]))
    assert last[0] / 60 == pytest.approx(100 - 54)


@pytest.mark.parametrize(("client", "back"), [((100, 110), True), ((100, 104), False)])
def test_an_owner_coming_back_counts_even_when_the_gpus_do_not(trace_dir: Path, client: tuple[int, int],
                                                                back: bool) -> None:
    # a notebook whose GPU stays idle; released at 60; its owner reconnects at 100 for 10 (or 4) minutes
    job = Job("nb", 180, [run((180, 0.0))], kind="Notebook", signal="jupyter", client=[(0, 30), client])
    s, r = judged(trace_dir, [job], [(0, 60)])
    assert bool(r.wrong[0]) is False and bool(r.owner_back[0]) is back
    assert summary(s, r)["ownerBackReleases"] == int(back)
