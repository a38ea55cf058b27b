"""The real tier's shard processes stop cleanly on SIGTERM (tests/support/real_shards.py).

A shard's session fixtures start clusters whose processes run in sessions of their own; only the
fixtures' teardown stops them. pytest runs that teardown on Ctrl-C (SIGINT) but not on SIGTERM, which a
CI timeout or `kill` sends, so both the shard processes and the runner turn SIGTERM into an interrupt.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import real_shards

CHECKOUT = Path(__file__).resolve().parents[1]

CONFTEST = """
import pytest
import pytest

from tests.support import real_shards

def pytest_configure(config):
    if {install!r}:
        real_shards.stop_on_sigterm()

@pytest.fixture(scope="session")
def stack():
    yield
    open({marker!r}, "w").write("torn down")
"""

TEST = """
import time
from pathlib import Path

def test_long(stack):
    Path({started!r}).write_text("running")
    time.sleep(120)
"""


def _pytest_killed_by_sigterm(tmp_path: Path, install: bool) -> tuple[int, bool]:
    marker, started = tmp_path / "teardown", tmp_path / "started"
    (tmp_path / "conftest.py").write_text(CONFTEST.format(install=install, marker=str(marker)))
    (tmp_path / "test_long.py").write_text(TEST.format(started=str(started)))
    env = {**os.environ, "PYTHONPATH": str(CHECKOUT)}
    process = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                               cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not started.exists():
        assert process.poll() is None, f"expected the test running, pytest ended:\n{process.stdout.read().decode()}"
        assert time.monotonic() < deadline, "expected the test to start within 60 s"
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=60)
    return process.returncode, marker.exists()


def test_a_sigterm_runs_the_session_fixtures_teardown(tmp_path: Path) -> None:
    returncode, torn_down = _pytest_killed_by_sigterm(tmp_path, install=True)
    assert torn_down, "expected the session fixture's teardown to run after SIGTERM (it stops the shard's clusters)"
    assert returncode != 0, "expected an interrupted run to fail"


def test_without_it_pytest_skips_the_teardown(tmp_path: Path) -> None:
    """The control: the reason the handler exists (a plain pytest ends at once on SIGTERM)."""
    returncode, torn_down = _pytest_killed_by_sigterm(tmp_path, install=False)
    assert returncode == -signal.SIGTERM
    assert not torn_down


def test_the_runner_stops_its_shards_with_an_interrupt(tmp_path: Path) -> None:
    """What the runner sends its running shards when it gets SIGTERM or SIGHUP: SIGINT (a shard that has
    ended is left alone)."""
    got = tmp_path / "got"
    child = ("import signal, sys, time\n"
             "def handler(number, frame):\n"
             f"    open({str(got)!r}, 'w').write(signal.Signals(number).name); sys.exit(0)\n"
             "for number in (signal.SIGINT, signal.SIGTERM):\n"
             "    signal.signal(number, handler)\n"
             "print('ready', flush=True)\n"
             "time.sleep(60)\n")
    running = real_shards.Shard("running", process=subprocess.Popen([sys.executable, "-c", child],
                                                                    stdout=subprocess.PIPE))
    ended = real_shards.Shard("ended", process=subprocess.Popen([sys.executable, "-c", "pass"]))
    ended.process.wait()
    assert running.process.stdout.readline().strip() == b"ready"
    real_shards.interrupt([running, ended])
    assert running.process.wait(timeout=30) == 0
    assert got.read_text() == "SIGINT"


def test_named_tests_of_the_tier_replace_the_tier_folder() -> None:
    """`python -m tests.support.real_shards tests/realstack/test_x.py` runs that module's shard only (the
    first sharded runs collected the whole folder and the module both: every shard started)."""
    assert real_shards.selection([]) == ["tests/realstack"]
    assert real_shards.selection(["-k", "retried"]) == ["tests/realstack", "-k", "retried"]
    module = "tests/realstack/test_argo_retries.py"
    assert real_shards.selection([module, "-x"]) == [module, "-x"]
    assert real_shards.selection([f"{module}::test_a_reaction_retried_twice_is_counted_once"]) == [
        f"{module}::test_a_reaction_retried_twice_is_counted_once"]


def test_a_path_outside_the_tier_is_refused() -> None:
    with pytest.raises(SystemExit, match="expected tests under tests/realstack, found tests/test_stops.py"):
        real_shards.selection(["tests/test_stops.py"])


def _timed_run(log: Path, shards: dict[str, real_shards.Shard],
               seconds: dict[str, float]) -> dict[tuple[str, ...], float]:
    """Run the shards through the runner, each a process that sleeps its `seconds`; {(start|end, shard): time}."""
    def command(shard: real_shards.Shard) -> list[str]:
        return [sys.executable, "-c", (f"import time; open({str(log)!r}, 'a').write('start {shard.name} %f\\n' % "
                                       f"time.time()); time.sleep({seconds[shard.name]}); open({str(log)!r}, 'a')"
                                       f".write('end {shard.name} %f\\n' % time.time())")]
    assert real_shards.run_shards(shards, command) == 0
    return {tuple(line.split()[:2]): float(line.split()[2]) for line in log.read_text().splitlines()}


def test_a_shard_marked_after_others_starts_when_the_others_have_ended(tmp_path: Path) -> None:
    """The fault module's shard (real_shard("faults", after_others=True)) waits for the rest: beside five shards
    its bursts took the load to 100 on two cores and failed other shards' tests."""
    shards = {"a": real_shards.Shard("a"), "faults": real_shards.Shard("faults", after_others=True),
              "b": real_shards.Shard("b")}
    events = _timed_run(tmp_path / "log", shards, {"a": 1.0, "b": 2.0, "faults": 0.1})
    assert events[("start", "faults")] >= max(events[("end", "a")], events[("end", "b")])
    assert events[("start", "b")] < events[("end", "a")]               # the others side by side


def test_after_others_takes_a_boolean() -> None:
    assert real_shards.runs_after_others({"after_others": True}) and not real_shards.runs_after_others(None)
    with pytest.raises(TypeError, match="after_others=True|False"):
        real_shards.runs_after_others({"after_others": "yes"})


def test_a_shard_marked_after_named_shards_starts_when_those_have_ended(tmp_path: Path) -> None:
    """The fault module's short bursts (real_shard("faults", after=("node", "other"))) start when the two short
    shards end, beside the long ones: the tier's wall time is then not the sum of the faults and the rest."""
    shards = {"long": real_shards.Shard("long"), "faults": real_shards.Shard("faults", after=("short", "absent")),
              "short": real_shards.Shard("short")}
    events = _timed_run(tmp_path / "log", shards, {"short": 0.5, "long": 3.0, "faults": 0.1})
    assert events[("end", "short")] <= events[("start", "faults")] < events[("end", "long")]


def test_after_takes_a_tuple_of_shard_names() -> None:
    assert real_shards.waits_for({"after": ("node", "other")}) == ("node", "other")
    assert real_shards.waits_for(None) == ()
    with pytest.raises(TypeError, match="a tuple of shard names, found after='node'"):
        real_shards.waits_for({"after": "node"})


def test_after_others_waits_for_every_shard_that_is_not_after_others_itself() -> None:
    shards = {"x": real_shards.Shard("x"), "f": real_shards.Shard("f", after=("x",)),
              "z": real_shards.Shard("z", after_others=True)}
    assert real_shards._prerequisites(shards) == {"x": set(), "f": {"x"}, "z": {"x", "f"}}


def test_a_cycle_of_waits_is_refused_in_one_line() -> None:
    shards = {"a": real_shards.Shard("a", after=("b",)), "b": real_shards.Shard("b", after=("a",)),
              "c": real_shards.Shard("c")}
    with pytest.raises(SystemExit, match="to form no cycle, found one among a after b, b after a"):
        real_shards._prerequisites(shards)


def test_a_wait_for_a_shard_the_selection_lacks_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    shards = {"f": real_shards.Shard("f", after=("nodes",))}
    assert real_shards._prerequisites(shards) == {"f": set()}
    assert "shard f waits for nodes, which this selection does not have" in capsys.readouterr().out
