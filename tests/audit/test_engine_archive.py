"""The audit over an archive the local engine wrote, and `gpuaas audit resubmit` re-running a run
on the engine restored from its cluster snapshot (the step re-checks the live state)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from engine import demo_cluster as cluster
from engine.runtime import EngineOptions, LocalEngine

POLICY = "idle:\n  mode: enforce\n  window: 5s\n  threshold: 0.05\n  minRuntime: 0s\n"
TEMPLATE_LABEL = "workflows.argoproj.io/workflow-template"


@pytest.fixture(scope="module")
def engine_history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """(archive, snapshot, workload): a notebook admitted for tenant research, its on-admitted run archived."""
    folder = tmp_path_factory.mktemp("engine-history")
    archive, snapshot = folder / "runs.db", folder / "cluster-snapshot.json"
    options = EngineOptions(archive_path=archive, kueue_options={"excluded_resource_prefixes": ("cpu", "memory")})
    with LocalEngine(options) as engine:
        engine.apply(cluster.platform_objects(POLICY))
        engine.settle(timeout=30)
        engine.apply(cluster.notebook(cluster.TENANTS[0], "nb-audit", 2))
        deadline = time.monotonic() + 30
        runs: list[dict] = []
        while time.monotonic() < deadline and not runs:
            runs = engine.archive.find({TEMPLATE_LABEL: "gpuaas-on-admitted"})
            time.sleep(0.05)
        assert runs, "the engine archived no on-admitted run"
        engine.settle(timeout=30)
        engine.snapshot(snapshot)
    return archive, snapshot, runs[0]["metadata"]["labels"]["gpuaas.io/workload"]


def archived_count(archive: Path) -> int:
    with sqlite3.connect(archive) as db:
        return int(db.execute("SELECT COUNT(*) FROM archived_workflows").fetchone()[0])


def test_lists_what_the_engine_archived(cli, engine_history):
    archive, _, workload = engine_history
    runs = cli.json("audit", "--archive", str(archive), "--reaction", "on-admitted", "--output", "json")
    [run] = [r for r in runs if r["workload"] == workload]
    assert (run["tenant"], run["namespace"], run["outcome"]) == ("research", "team-research", "applied")
    assert run["template"] == "gpuaas-on-admitted" and run["phase"] == "Succeeded"
    code, out, _ = cli("audit", "show", run["workflow"], "--archive", str(archive))
    assert code == 0 and "create-scaled-object" in out and "-> applied" in out


def test_local_resubmit_rechecks_live_state_and_appends_to_the_archive(cli, engine_history):
    archive, _, workload = engine_history
    [original] = [r for r in cli.json("audit", "--archive", str(archive), "--reaction", "on-admitted",
                                      "--output", "json") if r["workload"] == workload]
    before = archived_count(archive)
    code, out, err = cli("audit", "resubmit", original["workflow"], "--archive", str(archive))
    assert code == 0, err
    assert archived_count(archive) == before + 1
    runs = cli.json("audit", "--archive", str(archive), "--workload", workload, "--output", "json")
    [again] = [r for r in runs if r["resubmittedFrom"] == original["workflow"]]
    assert f"as {again['workflow']}" in out
    assert again["tenant"] == "research" and again["outcome"] in ("applied", "no-op")
    # The snapshot holds the ScaledObject the first run created: the re-run observed it instead of
    # creating another one (the first run's plan was create-scaled-object).
    shown = cli.json("audit", "show", again["workflow"], "--output", "json", "--archive", str(archive))
    [step] = [s for s in shown["steps"] if s["role"] == "reaction"]
    assert step["record"]["data"]["observed"]["scaledObjects"] == ["gpuaas-nb-audit"]
    assert "create-scaled-object" not in {a["action"] for a in step["record"]["data"]["actions"]}
    first = cli.json("audit", "show", original["workflow"], "--output", "json", "--archive", str(archive))
    [first_step] = [s for s in first["steps"] if s["role"] == "reaction"]
    assert [a["action"] for a in first_step["record"]["data"]["actions"] if not a.get("bookkeeping")] == [
        "create-scaled-object"]


def test_local_resubmit_without_a_snapshot_says_what_is_missing(cli, engine_history, tmp_path):
    archive, _, workload = engine_history
    code, _, err = cli("audit", "resubmit", "gpuaas-on-admitted-nope", "--archive", str(archive))
    assert code == 2 and "found no run" in err
    [run] = [r for r in cli.json("audit", "--archive", str(archive), "--workload", workload, "--output", "json")][:1]
    code, _, err = cli("audit", "resubmit", run["workflow"], "--archive", str(archive),
                       "--snapshot", str(tmp_path / "none.json"))
    assert code == 2 and "--snapshot: expected the cluster snapshot" in err
    code, _, err = cli("audit", "resubmit", run["workflow"], "--archive", str(archive), "-p", "colour=blue")
    assert code == 2 and "--parameter: colour: expected one of the run's parameters" in err
