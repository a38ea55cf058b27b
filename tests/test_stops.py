"""gpuaas.stops: a signal inside `stoppable()` unwinds as Stopped, once; inside `signals_deferred()` it waits for the
block's end (a process started is recorded first), and the processes started meanwhile do not inherit a blocked
SIGTERM (a signal mask would be inherited: a component started so could only be killed)."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from gpuaas.stops import Stopped, signals_deferred, stoppable


def test_sigterm_unwinds_as_stopped_and_a_second_one_is_ignored_during_the_cleanup() -> None:
    cleaned = []
    with pytest.raises(Stopped) as stopped, stoppable():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        finally:
            os.kill(os.getpid(), signal.SIGINT)  # while cleaning up: noted, not raised
            cleaned.append("done")
    assert cleaned == ["done"] and stopped.value.signum == signal.SIGTERM and stopped.value.exit_code == 143
    assert str(stopped.value) == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # restored after the block


def test_a_deferred_stop_comes_after_the_block_and_children_keep_sigterm_unblocked() -> None:
    steps = []
    with pytest.raises(Stopped) as stopped, stoppable():
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("started")
            blocked = subprocess.run(["grep", "SigBlk", "/proc/self/status"], capture_output=True, text=True,
                                     check=True).stdout.split()[1]
            steps.append("recorded")
        steps.append("not reached")
    assert steps == ["started", "recorded"] and str(stopped.value) == "Ctrl-C (SIGINT)"
    assert int(blocked, 16) & (1 << (signal.SIGTERM - 1)) == 0, blocked


def test_outside_stoppable_deferral_changes_nothing() -> None:
    """The handlers are what they were before (not necessarily Python's default: a test run started as a
    background job of a non-interactive shell inherits SIGINT ignored, as the cold run of stop 27 did)."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with signals_deferred():
        pass
    assert {s: signal.getsignal(s) for s in before} == before
