"""How a `gpuaas` command stops when told to: Ctrl-C, SIGTERM or SIGHUP, or a defect of its own.

Why one exception for every signal: Python turns Ctrl-C into KeyboardInterrupt, which unwinds every
`finally` and `with` of the run (Prometheus stopped, the engine's threads joined, temporary folders
removed), but SIGTERM and SIGHUP end the interpreter where it stands and orphan what it started.
Inside `stoppable()` all three raise `Stopped`, so every stop takes the same cleanup path.

`Stopped` is a BaseException like KeyboardInterrupt: an `except Exception` that keeps a run going
past a failed sample or a failed quota advice must not swallow a stop. A second signal while the
run cleans up is noted and ignored: the cleanup must finish, or it leaves what the issue is about.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import NoReturn

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
TRACEBACK_ENV = "GPUAAS_TRACEBACK"
"""Set to 1 to see the traceback of a defect instead of its one line (for a bug report)."""


class Stopped(BaseException):
    """The command was told to stop by a signal; `signum` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """128 + the signal number, as a shell reports a command a signal ended (130 for Ctrl-C)."""
        return 128 + self.signum

    def __str__(self) -> str:
        return "Ctrl-C (SIGINT)" if self.signum == signal.SIGINT else signal.Signals(self.signum).name


class _Deferral:
    """How many `signals_deferred` blocks are open, and the signal that came meanwhile."""

    depth = 0
    pending: int | None = None


def _ignore_later(signum: int, frame: FrameType | None) -> None:
    pass  # a handler, not SIG_IGN: a process started during the cleanup gets the default disposition back


def _raise(signum: int) -> NoReturn:
    for number in SIGNALS:
        signal.signal(number, _ignore_later)
    raise Stopped(signum)


@contextmanager
def stoppable() -> Iterator[None]:
    """Within the block, SIGINT, SIGTERM and SIGHUP raise Stopped in the main thread (once)."""
    def stop(signum: int, frame: FrameType | None) -> None:
        if _Deferral.depth:
            _Deferral.pending = _Deferral.pending or signum
            return
        _raise(signum)

    previous = {number: signal.signal(number, stop) for number in SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        _Deferral.pending = None


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Within `stoppable()`, a stop waits until the block ends: for steps that must not stop half-way (a process
    started but not yet recorded for `down`, a swap of two folders). The signal is raised as Stopped at the end.

    Not the signal mask (pthread_sigmask): a child process inherits it across exec, and a cluster component
    started with SIGTERM blocked could then only be killed."""
    _Deferral.depth += 1
    try:
        yield
    finally:
        _Deferral.depth -= 1
        if not _Deferral.depth and _Deferral.pending is not None:
            signum, _Deferral.pending = _Deferral.pending, None
            _raise(signum)


def show_tracebacks() -> bool:
    """Whether a defect should show its traceback (GPUAAS_TRACEBACK=1) instead of one line."""
    return os.environ.get(TRACEBACK_ENV, "") not in ("", "0")
