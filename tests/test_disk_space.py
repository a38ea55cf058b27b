"""The suite's disk-space preflight (tests/support/disk_space.py): a nearly full disk stops the run at once."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.support import disk_space


def _session(collect_only: bool = False) -> SimpleNamespace:
    return SimpleNamespace(config=SimpleNamespace(option=SimpleNamespace(collectonly=collect_only)))


def test_a_nearly_full_disk_stops_the_session_naming_the_folder_and_what_is_free(monkeypatch):
    monkeypatch.setattr(disk_space, "free_gib", lambda folder: 1.5)
    monkeypatch.setattr(disk_space, "_free_at_start", {})
    with pytest.raises(pytest.exit.Exception) as stopped:
        disk_space.pytest_sessionstart(_session())
    assert stopped.value.returncode == 3
    assert "expected at least 8 GiB free" in stopped.value.msg
    assert f"{disk_space.CHECKOUT}: 1.5 GiB free" in stopped.value.msg


def test_enough_space_lets_the_session_start_and_the_summary_reports_it(monkeypatch):
    monkeypatch.setattr(disk_space, "free_gib", lambda folder: 40.0)
    monkeypatch.setattr(disk_space, "_free_at_start", {})
    disk_space.pytest_sessionstart(_session())
    lines: list[str] = []
    disk_space.pytest_terminal_summary(SimpleNamespace(write_line=lines.append))
    assert lines and lines[0].startswith("disk free (GiB, start -> end): ")
    assert f"{disk_space.CHECKOUT} 40.0 -> 40.0" in lines[0]


def test_one_folder_per_filesystem():
    devices = [Path(folder).stat().st_dev for folder in disk_space.watched_folders()]
    assert len(devices) == len(set(devices)) >= 1
