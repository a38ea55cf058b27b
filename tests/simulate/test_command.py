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
    (tmp_path / "thirty.yaml").write_text("idle: {window: 30m}\n")  # one window for every kind
    assert main(["simulate", "--trace", str(small_trace), "--output", "json", "--html", str(tmp_path / "report"),
                 "--windows", "10m,1h", "--policy", str(tmp_path / "thirty.yaml")]) == 0
    document = json.loads(capsys.readouterr().out)
    names = [p["name"] for p in document["policies"]]
    assert names == ["given policy", "given policy, on demand", "given policy, GPU activity only", "window 10m",
                     "window 1h", "no automation", "KEDA only", "KEDA only, cooldown 30m", "Kubeflow culler",
                     "Kubeflow culler 1h"]
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
    assert 0 < calibration["notebook_idle_share"] <= 1 and calibration["published"]["training_idle_share_under_6h"]
    assert "calibration" not in replayed["history"] and replayed["peakMemoryMB"] > 0


@pytest.mark.parametrize(("args", "says"), [
    (["--trace", "{tmp}/nowhere"], "expected a trace directory"),
    (["--trace", "{trace}", "--step", "soon"], "--step: expected a duration"),
    (["--trace", "{trace}", "--policy", "{tmp}/missing.yaml"], "cannot read it"),
    (["--prometheus", "http://127.0.0.1:9", "--since", "2h"], "unreachable"),
    (["--prometheus", "http://127.0.0.1:9", "--since", "last week"], "--since: expected RFC 3339"),
    (["--trace", "{trace}", "--windows", "10m,0s"], "--windows: expected idle windows of at least --step (1m), found 0s"),
    (["--trace", "{trace}", "--windows", "30s", "--step", "1m"], "--windows: expected idle windows of at least --step"),
    (["--synthesize", "--days", "0"], "--days: expected a number of days of at least 0.042 (an hour)"),
    (["--synthesize", "--days", "nan"], "--days: expected a number of days of at least 0.042 (an hour)"),
    (["--synthesize", "--days", "45"], "--days: expected at most 30 days (the ITP jobs given cover 30), found 45"),
    (["--synthesize", "--seed", "-5"], "--seed: expected a whole number >= 0, found -5"),
    (["--synthesize", "--itp", "{trace}/workloads.csv"], "--itp {trace}/workloads.csv: expected ITP job rows"),
    (["--synthesize", "--itp", "{tmp}/missing.tar.gz"], "--itp {tmp}/missing.tar.gz: expected"),
    (["--synthesize", "--itp", "{trace}/activity.csv"], "--itp {trace}/activity.csv: expected ITP job rows"),
    (["--trace", "{trace}", "--html", "{trace}/workloads.csv"], "--html {trace}/workloads.csv: expected a folder"),
    (["--synthesize", "--days", "0.1", "--write-trace", "{trace}/workloads.csv"],
     "--write-trace {trace}/workloads.csv: expected a folder"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, small_trace: Path, args: list[str], says: str) -> None:
    filled = [a.replace("{tmp}", str(tmp_path)).replace("{trace}", str(small_trace)) for a in args]
    result = subprocess.run([sys.executable, "-m", "gpuaas.cli", "simulate", *filled], capture_output=True, text=True,
                            check=False, cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    says = says.replace("{tmp}", str(tmp_path)).replace("{trace}", str(small_trace))
    assert says in last and "Traceback" not in result.stderr, result.stderr


def test_an_unreachable_prometheus_names_the_option_not_the_step(tmp_path: Path) -> None:
    """The command is not the on-idle step: nothing retries it and GPUAAS_PROMETHEUS_URL plays no part."""
    result = subprocess.run([sys.executable, "-m", "gpuaas.cli", "simulate", "--prometheus", "http://127.0.0.1:9",
                             "--since", "2h"], capture_output=True, text=True, check=False,
                            cwd=Path(__file__).resolve().parents[2])
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2 and "unreachable" in last and "--prometheus" in last, last
    assert "GPUAAS_PROMETHEUS_URL" not in last and "retried" not in last, last


def test_since_after_until_shows_the_times(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--prometheus", "http://127.0.0.1:9", "--since", "2026-03-02T00:00:00Z",
                 "--until", "2026-03-01T00:00:00Z"]) == 2
    err = capsys.readouterr().err
    assert "found --since 2026-03-02T00:00:00Z, --until 2026-03-01T00:00:00Z" in err, err


def test_a_window_swept_twice_is_replayed_once(small_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--trace", str(small_trace), "--windows", "10m,10m,600s", "--output", "json",
                 "--no-variants"]) == 0
    names = [p["name"] for p in json.loads(capsys.readouterr().out)["policies"]]
    assert names == ["given policy", "window 10m", "no automation", "KEDA only", "KEDA only, cooldown 30m",
                     "Kubeflow culler", "Kubeflow culler 1h"]


def test_a_step_finer_than_the_samples_is_pointed_out(small_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One sample a minute on a 20 s grid leaves two slots in three without data: nothing is idle for long,
    and the figures would be silently wrong."""
    assert main(["simulate", "--trace", str(small_trace), "--step", "20s", "--windows", "", "--output", "json"]) == 0
    captured = capsys.readouterr()
    warnings = json.loads(captured.out)["history"]["warnings"]
    assert any("33% of the held GPU slots" in note and "--step 1m" in note for note in warnings), warnings
    assert "--step 1m or coarser" in captured.err
    assert main(["simulate", "--trace", str(small_trace), "--windows", "", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["history"]["warnings"] == []
