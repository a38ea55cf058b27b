"""`gpuaas demo` stopped half-way leaves nothing behind (issue 18 item 2), and one demo at a time writes a folder.

Each test runs the demo as a user does (its own process, `python -m gpuaas.cli demo`, real Prometheus and
Alertmanager) with TMPDIR pointing at a folder of the test's, so everything the run starts carries that path
in its command line and every temporary folder lands in it. Then it stops the run the way the issue names:

- Ctrl-C as a terminal sends it: SIGINT to the whole process group (the demo in its own session);
- SIGTERM to the demo's process alone (its children are not told);
- a crash: a defect raised inside the story (the story patched to fail after Prometheus is up).

and looks: the exit code, exactly one line on stderr (no traceback), no process left whose command line
names the run's TMPDIR (read from /proc), TMPDIR empty, and the report folder byte for byte the previous
report (or absent when there was none), with no staging folder or lock beside it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuaas.report_folder import ReportFolder, ReportFolderError, _umask
from tests.support.processes import processes_naming
from tests.support.prometheus import require_monitoring

REPO = Path(__file__).resolve().parents[2]
CRASHING_DEMO = """
import sys
import engine.demo
story = engine.demo.Scenario._story
def crashing_story(self):
    self.backend.note("about to crash")
    raise ZeroDivisionError("a defect in the story")
engine.demo.Scenario._story = crashing_story
from gpuaas.cli import main
sys.exit(main(sys.argv[1:]))
"""


class DemoRun:
    """One `gpuaas demo` in its own session, its output read line by line."""

    def __init__(self, folder: Path, *extra: str, crash: bool = False) -> None:
        self.folder = folder
        self.tmp = folder / "tmp"
        self.tmp.mkdir(exist_ok=True)
        argv = [sys.executable, "-c", CRASHING_DEMO] if crash else [sys.executable, "-m", "gpuaas.cli"]
        self.process = subprocess.Popen(
            [*argv, "demo", "--output-dir", "demo-report", *extra], cwd=folder, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            env={**os.environ, "TMPDIR": str(self.tmp), "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)})
        self.lines: list[str] = []

    def wait_for_line(self, text: str, timeout: float = 120.0) -> None:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        for line in self.process.stdout:
            self.lines.append(line)
            if text in line:
                return
            assert time.monotonic() < deadline, f"no line with {text!r} in {timeout:.0f}s: {''.join(self.lines)}"
        raise AssertionError(f"the demo ended before printing {text!r}:\n{''.join(self.lines)}\n"
                             f"{self.process.stderr.read() if self.process.stderr else ''}")

    def children(self) -> list[str]:
        return processes_naming(str(self.tmp))

    def finish(self, timeout: float = 120.0) -> tuple[int, str, str]:
        out, err = self.process.communicate(timeout=timeout)
        return self.process.returncode, "".join(self.lines) + out, err


@pytest.fixture
def previous_report(tmp_path: Path) -> dict[str, bytes]:
    """A complete earlier report in demo-report/, with a file of the admin's in it."""
    report = tmp_path / "demo-report"
    report.mkdir()
    files = {"summary.json": b'{"runs": 14}\n', "index.html": b"<html>the previous report</html>\n",
             "runs.db": b"an earlier archive", "cluster-snapshot.json": b'{"objects": []}\n',
             "my-notes.txt": b"the admin's notes\n"}
    for name, body in files.items():
        (report / name).write_bytes(body)
    return files


def _contents(folder: Path) -> dict[str, bytes]:
    """The folder's files (name -> bytes); a subfolder as b"" (its own contents are checked apart)."""
    if not folder.is_dir():
        return {}
    return {path.name: b"" if path.is_dir() else path.read_bytes() for path in folder.iterdir()}


def _check_nothing_left(run: DemoRun, code: int, err: str, expected_code: int, words: tuple[str, ...],
                        previous: dict[str, bytes]) -> None:
    assert code == expected_code, f"exit {code}, expected {expected_code}; stderr:\n{err}"
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuaas demo: "), err
    assert all(word in lines[0] for word in words), lines[0]
    time.sleep(0.5)  # the kernel reaps what the demo's exit left (nothing, if it stopped its children)
    assert run.children() == [], "processes the demo started are still running"
    # engine.ports' reservation folder is machine-wide by design (a port stays reserved 10 minutes after the
    # process that chose it, for every process of the user): not the demo's to remove.
    left = [p for p in run.tmp.iterdir() if not p.name.startswith("gpuaas-ports-")]
    assert left == [], f"temporary folders left: {left}"
    assert _contents(run.folder / "demo-report") == previous, "the report folder is not the previous report"
    beside = sorted(p.name for p in run.folder.iterdir() if p.name not in ("demo-report", "tmp"))
    assert beside == [], f"left beside the report: {beside}"


@pytest.mark.parametrize("how", ["ctrl-c to the process group", "sigterm to the demo alone"])
def test_a_stopped_demo_stops_what_it_started_and_keeps_the_previous_report(
        tmp_path: Path, previous_report: dict[str, bytes], how: str) -> None:
    require_monitoring()
    run = DemoRun(tmp_path)
    run.wait_for_line("research: opens notebook")  # mid-story: engine, exporter, Prometheus and Alertmanager up
    started = run.children()
    assert any("prometheus" in c for c in started) and any("alertmanager" in c for c in started), started
    if how.startswith("ctrl-c"):
        os.killpg(run.process.pid, signal.SIGINT)
        expected, words = 130, ("stopped by Ctrl-C (SIGINT)",)
    else:
        os.kill(run.process.pid, signal.SIGTERM)
        expected, words = 143, ("stopped by SIGTERM",)
    code, _, err = run.finish()
    _check_nothing_left(run, code, err, expected, (*words, "keeps the previous report"), previous_report)


def test_a_stopped_first_demo_writes_no_report_folder(tmp_path: Path) -> None:
    require_monitoring()
    run = DemoRun(tmp_path)
    run.wait_for_line("metrics: Prometheus")
    os.kill(run.process.pid, signal.SIGTERM)
    code, _, err = run.finish()
    _check_nothing_left(run, code, err, 143, ("no report was written",), {})
    assert not (tmp_path / "demo-report").exists()


def test_a_crash_in_the_story_is_one_line_and_stops_what_it_started(tmp_path: Path,
                                                                   previous_report: dict[str, bytes]) -> None:
    require_monitoring()
    run = DemoRun(tmp_path, crash=True)
    code, out, err = run.finish(timeout=180)
    assert "about to crash" in out, out  # it crashed mid-story, after the metrics were up
    _check_nothing_left(run, code, err, 70, ("ZeroDivisionError: a defect in the story", "GPUAAS_TRACEBACK=1",
                                             "keeps the previous report"), previous_report)


def test_a_second_demo_on_the_same_folder_is_refused_while_the_first_completes(tmp_path: Path,
                                                                               previous_report: dict) -> None:
    """The first demo runs to its end (it used to die on `attempt to write a readonly database` when a second
    one deleted its archive); the second is refused in one line before it starts anything."""
    require_monitoring()
    first = DemoRun(tmp_path, "--speed", "1000")
    first.wait_for_line("metrics: Prometheus")
    second = subprocess.run([sys.executable, "-m", "gpuaas.cli", "demo", "--output-dir", "demo-report"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60, check=False,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert second.returncode == 2 and second.stdout == "", second
    (line,) = second.stderr.strip().splitlines()
    assert line.startswith("gpuaas demo: --output-dir demo-report: ") and "another --output-dir" in line, line
    assert f"pid {first.process.pid}" in line, line
    code, out, err = first.finish(timeout=300)
    assert code == 0, f"the first demo failed:\n{out[-3000:]}\n{err[-3000:]}"
    report = tmp_path / "demo-report"
    summary = json.loads((report / "summary.json").read_text())
    assert summary["runs"] > 0 and (report / "index.html").read_text().startswith("<!doctype html>")
    assert (report / "my-notes.txt").read_bytes() == previous_report["my-notes.txt"]  # the admin's file kept
    assert (report / "runs.db").read_bytes() != previous_report["runs.db"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo-report", "tmp"]


# -- the report folder itself ---------------------------------------------------------------------------


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(("given", "words"), [
    ("", "found the current folder"),
    (".", "found the current folder"),
    ("..", "found the current folder or one that holds it"),
    ("home", "found 2 entries that are no demo report (.bashrc, notes.txt)"),
    ("a-file", "found a file"),
])
def test_a_folder_that_is_no_report_is_refused_before_anything_runs(in_tmp: Path, given: str, words: str) -> None:
    (in_tmp / "home").mkdir()
    (in_tmp / "home" / ".bashrc").write_text("")
    (in_tmp / "home" / "notes.txt").write_text("")
    (in_tmp / "a-file").write_text("")
    with pytest.raises(ReportFolderError, match="expected") as refused:
        ReportFolder(Path(given)).check()
    assert words in str(refused.value)


def test_an_unfinished_run_removes_its_folder_and_leaves_the_old_report(in_tmp: Path) -> None:
    (in_tmp / "demo-report").mkdir()
    (in_tmp / "demo-report" / "summary.json").write_text("old")

    class Defect(Exception):
        pass

    with pytest.raises(Defect), ReportFolder(Path("demo-report")) as folder:
        assert folder.staging is not None
        (folder.staging / "summary.json").write_text("half new")
        raise Defect
    assert _contents(in_tmp / "demo-report") == {"summary.json": b"old"}
    assert sorted(p.name for p in in_tmp.iterdir()) == ["demo-report"]


def test_a_complete_run_replaces_the_demo_files_and_keeps_the_admins(in_tmp: Path) -> None:
    old = in_tmp / "demo-report"
    (old / "audit").mkdir(parents=True)
    (old / "audit" / "index.html").write_text("an audit report the admin wrote here")
    (old / "runs.db").write_text("old archive")
    (old / "cluster-snapshot.json").write_text("old snapshot")  # the real demo writes none: it must go
    with ReportFolder(Path("demo-report")) as folder:
        assert folder.staging is not None
        (folder.staging / "runs.db").write_text("new archive")
        (folder.staging / "runs.json").write_text("[]")
        folder.commit()
    assert _contents(old) == {"runs.db": b"new archive", "runs.json": b"[]", "audit": b""}
    assert (old / "audit" / "index.html").read_text() == "an audit report the admin wrote here"
    assert sorted(p.name for p in in_tmp.iterdir()) == ["demo-report"]
    assert old.stat().st_mode & 0o777 == 0o777 & ~_umask()  # as mkdir makes it, not mkdtemp's 0700


def test_a_killed_runs_folder_beside_the_report_is_removed_by_the_next_run(in_tmp: Path) -> None:
    """SIGKILL cannot be cleaned up after; the next demo on the folder (holding the lock) removes what it left."""
    (in_tmp / ".demo-report.new-abc123").mkdir()
    (in_tmp / ".demo-report.new-abc123" / "runs.db").write_text("half a run")
    (in_tmp / ".other-report.new-xyz").mkdir()  # another folder's: not this lock's to judge
    with ReportFolder(Path("demo-report")) as folder:
        folder.commit()
    assert sorted(p.name for p in in_tmp.iterdir()) == [".other-report.new-xyz", "demo-report"]


def test_the_lock_refuses_a_second_writer_and_is_gone_after(in_tmp: Path) -> None:
    with ReportFolder(Path("demo-report")), pytest.raises(ReportFolderError, match=f"pid {os.getpid()}"), \
            ReportFolder(Path("demo-report")):
        pass
    with ReportFolder(Path("demo-report")) as folder:  # free again
        folder.commit()
    assert sorted(p.name for p in in_tmp.iterdir()) == ["demo-report"]
