"""The replay with a warning before the release (idle.warnFor, steps.warning.grace: the step's own code), every time
worked out by hand from the rendered timings (tests/simulate/test_replay.py's docstring): a pod idle from minute m
fires at m + 35 and its group is delivered at m + 35.5. The catch-up sweep passes every 2 minutes from the history's
start and delivers a pending warning at its first pass at or after `releaseAfter`."""

from __future__ import annotations

from pathlib import Path

from tests.simulate.conftest import Job, policy, run
from tests.simulate.test_replay import busy_then_idle, replay


def test_warn_for_zero_releases_at_the_first_delivery_as_before(trace_dir: Path) -> None:
    released, result = replay(trace_dir, [busy_then_idle("a", 60)], policy(warn_seconds=0))
    assert released == {"a": [95.5]} and "warning-warn" not in result.outcomes


def test_warned_at_the_delivery_released_by_the_sweep_after_the_grace(trace_dir: Path) -> None:
    # idle from 60: delivered at 95.5 -> warned, releaseAfter 125.5; the sweep passes at 126 (every 2 min):
    # still idle, released at 126, long before Alertmanager's repeat (160.5).
    released, result = replay(trace_dir, [busy_then_idle("a", 60)], policy(warn_seconds=1800))
    assert released == {"a": [126.0]}
    assert result.outcomes["warning-warn"] == 1 and result.outcomes["warning-swept"] == 1
    assert result.outcomes["release"] == 2  # the judgement said release twice: warned once, released once


def test_busy_again_within_the_grace_is_not_released(trace_dir: Path) -> None:
    # idle 60-110, busy from 110: without a warning it is released at 95.5 (wrongly: it works again at 110).
    job = Job("a", 300, [run((60, 0.8), (50, 0.0), (190, 0.8))])
    released, _ = replay(trace_dir, [job], policy(warn_seconds=0))
    assert released == {"a": [95.5]}
    # warned at 95.5 (releaseAfter 125.5); at the sweep's pass at 126 the GPUs were busy in the window: cancelled.
    released, result = replay(trace_dir, [job], policy(warn_seconds=1800))
    assert released == {}
    assert result.outcomes["warning-warn"] == 1 and result.outcomes["warning-cancel"] == 1


def test_a_new_idle_stretch_after_a_cancel_is_warned_again(trace_dir: Path) -> None:
    # idle 60-110 (warned 95.5, cancelled at 126), busy 110-150, idle from 150: fires at 185, delivered 185.5
    # (a new group: the first one was deleted once its alert resolved): warned again, releaseAfter 215.5,
    # released by the sweep at 216.
    job = Job("a", 360, [run((60, 0.8), (50, 0.0), (40, 0.8), (210, 0.0))])
    released, result = replay(trace_dir, [job], policy(warn_seconds=1800))
    assert released == {"a": [216.0]}
    assert result.outcomes["warning-warn"] == 2 and result.outcomes["warning-cancel"] == 1


def test_activity_in_the_grace_cancels_even_when_older_than_the_window(trace_dir: Path) -> None:
    # idle 60-180 (delivered 95.5: warned, releaseAfter 215.5 with a 2 h grace; Alertmanager's re-send at 160.5 is
    # within the grace: wait), busy 180-182, idle from 182. The sweep's pass at 216 reads the GPUs since the warning
    # (120.5 min, not the 30 min window, which ends after the busy minutes): activity, cancelled. The new idle stretch
    # fires at 182 + 35 = 217, delivered 217.5 (a new group): warned again, releaseAfter 337.5, released by the sweep
    # at 338 (idle since 217.5). Before: released at 216 on the old warning, 34 min after the tenant's work.
    job = Job("a", 400, [run((60, 0.8), (120, 0.0), (2, 0.8), (218, 0.0))])
    released, result = replay(trace_dir, [job], policy(warn_seconds=7200))
    assert released == {"a": [338.0]}
    assert result.outcomes["warning-warn"] == 2 and result.outcomes["warning-cancel"] == 1
    assert result.outcomes["warning-swept"] == 2


def test_a_warning_the_release_waited_on_lapses_at_the_sweeps_second_delivery(trace_dir: Path) -> None:
    # idle from 60: warned at 95.5 (releaseAfter 125.5); the exporter stops at 110 (no samples after). The alert
    # holds until its window empties (140) and resolves: no re-send. The sweep at 126 reads the 30.5 min since the
    # warning: samples cover 14.5 of them, idleness not proven and no activity: pending. Past releaseAfter + 2 h
    # (245.5) the sweep delivers it again at its next pass, 246: lapsed (steps.warning.LAPSE_AFTER_DUE_SECONDS),
    # nothing released.
    job = Job("a", 400, [run((60, 0.8), (50, 0.0), (290, None))])
    released, result = replay(trace_dir, [job], policy(warn_seconds=1800))
    assert released == {}
    assert result.outcomes["warning-warn"] == 1 and result.outcomes["warning-swept"] == 2
    assert result.outcomes["warning-lapse"] == 1 and "warning-cancel" not in result.outcomes
