"""Free disk space, checked before the suite and shown after it.

Why: a CI run on a nearly full disk failed after 45 minutes with dozens of unrelated errors
(`No space left on device` from promtool, pytest's tmp_path, etcd), which read as product defects.
The real tier writes several GB while it runs (the node's containerd state and images under
`.stack-cache/`, etcd and PostgreSQL under /var/tmp, Prometheus TSDBs under /tmp), so the session
refuses to start with less than MINIMUM_FREE_GIB on any of those filesystems, saying where and how
much, and the summary prints what was free before and after so the figure can be tuned.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

MINIMUM_FREE_GIB = 8.0
"""Peak use of one `make test` measured on this project's CI machine, with margin (docs/real-stack.md)."""

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
    short = []
    for folder in watched_folders():
        free = free_gib(folder)
        _free_at_start[str(folder)] = free
        if free < MINIMUM_FREE_GIB:
            short.append(f"{folder}: {free:.1f} GiB free")
    if short and not session.config.option.collectonly:
        pytest.exit(f"expected at least {MINIMUM_FREE_GIB:.0f} GiB free on every filesystem the tests write to, found "
                    f"{'; '.join(short)}. The real tier needs it for containerd, etcd and Prometheus; free space "
                    "(old clones, /tmp, `go clean -cache`) and run again", returncode=3)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _free_at_start:
        return
    figures = ", ".join(f"{folder} {start:.1f} -> {free_gib(Path(folder)):.1f}"
                        for folder, start in _free_at_start.items())
    terminalreporter.write_line(f"disk free (GiB, start -> end): {figures}")
