"""Free disk space, checked before the suite and shown after it.

Why: a CI run on a nearly full disk failed after 45 minutes with dozens of unrelated errors
(`No space left on device` from promtool, pytest's tmp_path, etcd), which read as product defects.
The real tier writes several GB while it runs (the node's containerd state and images under
`.stack-cache/`, etcd and PostgreSQL under /var/tmp, Prometheus TSDBs under /tmp), so a session
that collected real-stack tests (marker `realstack`) refuses to run them with less than
MINIMUM_FREE_GIB on any of those filesystems, saying where and how much; a session without them
(a unit tier) needs only UNIT_MINIMUM_FREE_GIB. The summary prints what was free before and after
so the figures can be tuned.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

MINIMUM_FREE_GIB = 8.0
"""With real-stack tests: the real tier's use (containerd's images and state, etcd, PostgreSQL,
Prometheus TSDBs) with margin; not yet measured as a peak (the summary's before/after figures)."""
UNIT_MINIMUM_FREE_GIB = 1.0
"""Without them: pytest's tmp_path, promtool and the stand-ins write megabytes."""

CHECKOUT = Path(__file__).resolve().parents[2]
_free_at_start: dict[str, float] = {}


def watched_folders() -> list[Path]:
    """One folder per filesystem the suite writes to (the checkout, the temp folder, /var/tmp)."""
    folders: dict[int, Path] = {}
    for folder in (CHECKOUT, Path(tempfile.gettempdir()), Path("/var/tmp")):
        if folder.is_dir():
            folders.setdefault(os.stat(folder).st_dev, folder)
    return list(folders.values())


def free_gib(folder: Path) -> float:
    return shutil.disk_usage(folder).free / 2**30


def pytest_sessionstart(session: pytest.Session) -> None:
    for folder in watched_folders():
        _free_at_start[str(folder)] = free_gib(folder)


def pytest_collection_finish(session: pytest.Session) -> None:
    """After collection (tests/realstack's conftest marks its tests `realstack`), before any test runs."""
    if session.config.option.collectonly:
        return
    real = any(item.get_closest_marker("realstack") for item in session.items)
    minimum = MINIMUM_FREE_GIB if real else UNIT_MINIMUM_FREE_GIB
    short = [f"{folder}: {free:.1f} GiB free" for folder, free in _free_at_start.items() if free < minimum]
    if short:
        why = ("the real tier needs it for containerd, etcd and Prometheus" if real else
               "the tests' temporary files need it")
        pytest.exit(f"expected at least {minimum:g} GiB free on every filesystem the tests write to, found "
                    f"{'; '.join(short)}; {why}. Free space (old clones, /tmp, `go clean -cache`) and run again",
                    returncode=3)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _free_at_start:
        return
    figures = ", ".join(f"{folder} {start:.1f} -> {free_gib(Path(folder)):.1f}"
                        for folder, start in _free_at_start.items())
    terminalreporter.write_line(f"disk free (GiB, start -> end): {figures}")
