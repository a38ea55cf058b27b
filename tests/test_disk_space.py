"""The suite's disk-space preflight (tests/support/disk_space.py): a nearly full disk stops the run at once."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.support import disk_space


class _Item:
    def __init__(self, *markers: str) -> None:
        self.markers = set(markers)

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.markers else None


def _session(*items: _Item, collect_only: bool = False) -> SimpleNamespace:
    return SimpleNamespace(config=SimpleNamespace(option=SimpleNamespace(collectonly=collect_only)), items=list(items))


def _start(monkeypatch: pytest.MonkeyPatch, free: float, session: SimpleNamespace) -> None:
    monkeypatch.setattr(disk_space, "free_gib", lambda folder: free)
    monkeypatch.setattr(disk_space, "_free_at_start", {})
    disk_space.pytest_sessionstart(session)
    disk_space.pytest_collection_finish(session)


def test_a_nearly_full_disk_stops_a_session_with_real_stack_tests_naming_the_folder_and_what_is_free(monkeypatch):
    with pytest.raises(pytest.exit.Exception) as stopped:
        _start(monkeypatch, 1.5, _session(_Item(), _Item("realstack")))
    assert stopped.value.returncode == 3
    assert "expected at least 8 GiB free" in stopped.value.msg
    assert f"{disk_space.CHECKOUT}: 1.5 GiB free" in stopped.value.msg


def test_a_session_without_real_stack_tests_needs_only_a_little_space(monkeypatch):
    """A user running a unit tier on a laptop with a few GiB free is not told to free 8 GiB."""
    _start(monkeypatch, 1.5, _session(_Item(), _Item("prometheus")))
    with pytest.raises(pytest.exit.Exception) as stopped:
        _start(monkeypatch, 0.5, _session(_Item()))
    assert "expected at least 1 GiB free" in stopped.value.msg


def test_collecting_only_is_never_stopped(monkeypatch):
    _start(monkeypatch, 0.1, _session(_Item("realstack"), collect_only=True))


def test_enough_space_lets_the_session_start_and_the_summary_reports_it(monkeypatch):
    _start(monkeypatch, 40.0, _session(_Item("realstack")))
    lines: list[str] = []
    disk_space.pytest_terminal_summary(SimpleNamespace(write_line=lines.append))
    assert lines and lines[0].startswith("disk free (GiB, start -> end): ")
    assert f"{disk_space.CHECKOUT} 40.0 -> 40.0" in lines[0]


def test_one_folder_per_filesystem():
    devices = [Path(folder).stat().st_dev for folder in disk_space.watched_folders()]
    assert len(devices) == len(set(devices)) >= 1
