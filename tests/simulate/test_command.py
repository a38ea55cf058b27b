"""`gpuaas simulate` as a user runs it: table, --output json, --html, --synthesize, and clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuaas.cli import main
from tests.simulate.conftest import Job, run, trace


@pytest.fixture
def small_trace(tmp_path: Path) -> Path:
    return trace(tmp_path / "trace", [Job("a", 240, [run((70, 0.8), (110, 0.0), (60, 0.8))]),
                                      Job("nb", 300, [run((30, 0.5), (270, 0.0))], kind="Notebook", tenant="team-b",
                                          namespace="team-b")])


def test_table_names_every_policy_and_prints_the_definitions(small_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--trace", str(small_trace)]) == 0
    out = capsys.readouterr().out
    for name in ("given policy", "window 5m", "window 2h", "no automation", "KEDA only", "Kubeflow culler",
                 "Definitions:", "wrongRelease:", "tenant-a", "team-b"):
        assert name in out, name


def test_json_and_html(small_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--trace", str(small_trace), "--output", "json", "--html", str(tmp_path / "report"),
                 "--windows", "10m,1h"]) == 0
    document = json.loads(capsys.readouterr().out)
    names = [p["name"] for p in document["policies"]]
    assert names == ["given policy", "window 10m", "window 1h", "no automation", "KEDA only", "Kubeflow culler"]
    given = document["policies"][0]
    assert given["total"]["releases"] == 2 and given["total"]["wrongReleases"] == 1
    assert given["tenants"]["team-b"]["releases"] == 1 and given["onIdleRuns"]["release"] == 2
    assert document["product"]["rule"]["window"] == "30m" and document["history"]["workloads"] == 2
    assert [i["workload"] for i in document["interruptions"]] == ["a"]
    assert set(document["definitions"]) >= {"idle", "idleStretch", "wrongRelease", "releaseLatency"}
    for name in ("index.html", "tradeoff.png", "latency.png"):
        assert (tmp_path / "report" / name).stat().st_size > 1000
    assert "data:image/png;base64," in (tmp_path / "report" / "index.html").read_text()


def test_synthesize_writes_a_trace_that_replays_the_same(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--synthesize", "--days", "0.25", "--seed", "2", "--windows", "", "--output", "json"]
    assert main([*args, "--write-trace", str(tmp_path / "synthetic")]) == 0
    synthetic = json.loads(capsys.readouterr().out)
    assert main(["simulate", "--trace", str(tmp_path / "synthetic"), "--windows", "", "--output", "json"]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert [p["total"] for p in synthetic["policies"]] == [p["total"] for p in replayed["policies"]]
    calibration = synthetic["history"]["calibration"]
    assert 0 < calibration["notebook_idle_share"] <= 1 and calibration["published"]["philly_training_idle_share_under_6h"]
    assert "calibration" not in replayed["history"] and replayed["peakMemoryMB"] > 0


@pytest.mark.parametrize(("args", "says"), [
    (["--trace", "{tmp}/nowhere"], "expected a trace directory"),
    (["--trace", "{trace}", "--step", "soon"], "--step: expected a duration"),
    (["--trace", "{trace}", "--policy", "{tmp}/missing.yaml"], "cannot read it"),
    (["--prometheus", "http://127.0.0.1:9", "--since", "2h"], "unreachable"),
    (["--prometheus", "http://127.0.0.1:9", "--since", "last week"], "--since: expected RFC 3339"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, small_trace: Path, args: list[str], says: str) -> None:
    filled = [a.replace("{tmp}", str(tmp_path)).replace("{trace}", str(small_trace)) for a in args]
    result = subprocess.run([sys.executable, "-m", "gpuaas.cli", "simulate", *filled], capture_output=True, text=True,
                            check=False, cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert says in last and "Traceback" not in result.stderr, result.stderr
