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


@contextmanager
def stoppable() -> Iterator[None]:
    """Within the block, SIGINT, SIGTERM and SIGHUP raise Stopped in the main thread (once)."""
    def ignore_later(signum: int, frame: FrameType | None) -> None:
        pass  # a handler, not SIG_IGN: a process started during the cleanup gets the default disposition back

    def stop(signum: int, frame: FrameType | None) -> None:
        for number in SIGNALS:
            signal.signal(number, ignore_later)
        raise Stopped(signum)

    previous = {number: signal.signal(number, stop) for number in SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP until the block ends: for steps that must not stop half-way (a swap of
    two folders, the removal that follows it). A signal that came meanwhile is delivered at the end."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def show_tracebacks() -> bool:
    """Whether a defect should show its traceback (GPUAAS_TRACEBACK=1) instead of one line."""
    return os.environ.get(TRACEBACK_ENV, "") not in ("", "0")
