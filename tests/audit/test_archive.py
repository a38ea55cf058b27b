"""`gpuaas audit` over a run archive (SQLite, ARCHITECTURE section 6): outputs, filters, show."""

from __future__ import annotations

import csv
import io
import sqlite3

from tests.audit.conftest import BROKEN_NAME, BROKEN_UID

ALL = {"gpuaas-on-admitted-a1b2c", "gpuaas-on-idle-x9y8z", "gpuaas-on-finished-q1w2e",
       "gpuaas-release-workers-c4r5t", "gpuaas-resume-workers-g7h8j", "gpuaas-on-preempted-m3n4b",
       "gpuaas-provision-quota-r6t7y", BROKEN_NAME}


def names(runs):
    return {r["workflow"] for r in runs}


def test_json_lists_every_run_including_broken_ones(cli, archive):
    runs = cli.json("audit", "--archive", str(archive), "--output", "json")
    assert names(runs) == ALL
    for run in runs:
        assert {"reaction", "tenant", "namespace", "workload", "outcome", "started", "finished", "workflow"} <= set(run)
    broken = next(r for r in runs if r["workflow"] == BROKEN_NAME)
    assert (broken["uid"], broken["outcome"], broken["phase"]) == (BROKEN_UID, "unknown", "Succeeded")
    assert "no readable Workflow JSON" in broken["reason"]
    idle = next(r for r in runs if r["workflow"] == "gpuaas-on-idle-x9y8z")
    assert [s["outcome"] for s in idle["steps"]] == ["applied", "applied", "failed"]
    assert idle["metrics"]["gpuHoursReclaimed"] == 2.5


def test_table_shows_fan_out_children_and_unknown_reactions(cli, archive):
    code, out, _ = cli("audit", "--archive", str(archive))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["STARTED", "REACTION", "TENANT", "NAMESPACE", "WORKLOAD", "OUTCOME", "WORKFLOW"]
    parent = next(i for i, line in enumerate(lines) if "gpuaas-on-idle-x9y8z" in line)
    assert "- idle-alerts" in lines[parent + 1]
    assert "- on-idle(0)" in lines[parent + 2] and "applied" in lines[parent + 2]
    assert "- on-idle(1)" in lines[parent + 3] and "failed" in lines[parent + 3]
    assert any("on-preempted" in line and "(unknown reaction)" in line for line in lines)
    assert "8 run(s); 2 failed, 3 unknown; times in UTC" in out


def test_csv_has_one_row_per_run(cli, archive):
    code, out, _ = cli("audit", "--archive", str(archive), "--output", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and {r["workflow"] for r in rows} == ALL
    crashed = next(r for r in rows if r["workflow"] == "gpuaas-release-workers-c4r5t")
    assert (crashed["outcome"], crashed["phase"]) == ("failed", "Failed")


def test_filters(cli, archive):
    base = ("audit", "--archive", str(archive), "--output", "json")
    # Tenant and workload come from the records: the on-idle run has no tenant label but a child for vision.
    assert names(cli.json(*base, "--tenant", "vision")) == {"gpuaas-on-idle-x9y8z", "gpuaas-on-finished-q1w2e"}
    assert names(cli.json(*base, "--workload", "inferenceservice-llm-1")) == {"gpuaas-on-idle-x9y8z"}
    assert names(cli.json(*base, "--namespace", "team-research")) == {
        "gpuaas-on-admitted-a1b2c", "gpuaas-release-workers-c4r5t", "gpuaas-resume-workers-g7h8j"}
    assert names(cli.json(*base, "--reaction", "on-idle")) == {"gpuaas-on-idle-x9y8z"}
    assert names(cli.json(*base, "--outcome", "failed")) == {"gpuaas-on-idle-x9y8z", "gpuaas-release-workers-c4r5t"}
    window = cli.json(*base, "--since", "2026-11-30T10:30:00Z", "--until", "2026-11-30T13:30:00Z")
    assert names(window) == {"gpuaas-on-finished-q1w2e", "gpuaas-release-workers-c4r5t", "gpuaas-resume-workers-g7h8j"}
    later = cli.json(*base, "--since", "2026-11-30T13:30:00Z")
    assert names(later) == {"gpuaas-on-preempted-m3n4b", "gpuaas-provision-quota-r6t7y"}


def test_reaction_filter_is_a_label_query(archive, monkeypatch):
    from gpuaas.audit.history import ArchiveHistory

    seen = []
    history = ArchiveHistory(archive)
    history._db.set_trace_callback(seen.append)
    runs = history.runs("gpuaas.io/reaction=on-finished")
    assert [r.workflow for r in runs] == ["gpuaas-on-finished-q1w2e"]
    assert any("archived_workflows_labels" in statement for statement in seen)


def test_show_prints_the_run_in_full(cli, archive):
    code, out, _ = cli("audit", "show", "gpuaas-on-admitted-a1b2c", "--archive", str(archive))
    assert code == 0
    for expected in ("outcome:    applied", "tenant:     research", "trigger:    sensor gpuaas-on-admitted",
                     '"kind": "UPDATE"', "queue wait 12s", "create-scaled-object ScaledObject team-research/gpuaas-nb-alice",
                     "before: null", 'after:  {"minReplicaCount": 0, "name": "gpuaas-nb-alice"}', "2 attempts",
                     "timings:", f"gpuaas audit resubmit gpuaas-on-admitted-a1b2c --archive {archive}",
                     "argo archive resubmit "):
        assert expected in out, expected


def test_show_by_uid_and_json(cli, archive, workflows):
    uid = workflows["gpuaas-on-idle-x9y8z"]["metadata"]["uid"]
    shown = cli.json("audit", "show", uid, "--output", "json", "--archive", str(archive))
    assert shown["workflow"] == "gpuaas-on-idle-x9y8z"
    failed = next(s for s in shown["steps"] if s["outcome"] == "failed")
    assert failed["record"]["data"]["actions"][0]["error"].startswith("patch InferenceService")
    assert shown["resubmit"][0].startswith("gpuaas audit resubmit gpuaas-on-idle-x9y8z")


def test_show_of_a_broken_run_explains_instead_of_crashing(cli, archive):
    code, out, _ = cli("audit", "show", "gpuaas-resume-workers-g7h8j", "--archive", str(archive))
    assert code == 0
    assert "record:     none (the `record` output is not JSON" in out


def test_bad_input_names_the_option(cli, tmp_path, archive):
    code, _, err = cli("audit", "--archive", str(tmp_path / "missing.db"))
    assert code == 2 and "--archive: expected a run archive" in err
    not_archive = tmp_path / "other.db"
    sqlite3.connect(not_archive).execute("CREATE TABLE t (x)").connection.commit()
    code, _, err = cli("audit", "--archive", str(not_archive))
    assert code == 2 and "expected table archived_workflows" in err
    code, _, err = cli("audit", "--archive", str(archive), "--since", "last tuesday")
    assert code == 2 and "--since: expected RFC 3339" in err
    code, _, err = cli("audit", "show", "no-such-run", "--archive", str(archive))
    assert code == 2 and "found no run 'no-such-run'" in err
    code, _, err = cli("audit")
    assert code == 2 and "no history source" in err


def test_audit_never_writes_the_archive(cli, archive):
    before = archive.read_bytes()
    cli("audit", "--archive", str(archive))
    cli("audit", "show", "gpuaas-on-idle-x9y8z", "--archive", str(archive))
    assert archive.read_bytes() == before
