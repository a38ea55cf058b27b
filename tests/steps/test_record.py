"""The audit record (ARCHITECTURE §3), the Kubernetes Event rule and the entry point's failure paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cloudevents.core.formats.json import JSONFormat

from steps.entrypoint import main
from steps.plan import ActionResult, Outcome, Plan, ReactionRequest, StepReport
from steps.reactions import available, load, module_name
from steps.record import FAILED, RELEASED, build_record, kubernetes_event, record_json

DATA_KEYS = {"reaction", "dryRun", "event", "workload", "tenant", "cohort", "observed", "plan", "actions", "outcome",
             "errors", "metrics", "timings"}


def report(outcome: Outcome, *results: ActionResult, dry_run: bool = False) -> StepReport:
    request = ReactionRequest("release-workers", "team-a", "job-x", dry_run=dry_run)
    return StepReport("release-workers", outcome, request, Plan.nothing("because"), list(results),
                      metrics={"gpusReleased": 2}, event=(RELEASED, "released 2 GPU(s)", "Normal"),
                      workload_object={"kind": "Workload"})


def test_record_is_a_structured_cloudevent_with_every_section() -> None:
    record = build_record(report(Outcome.APPLIED, ActionResult("scale", {"kind": "StatefulSet"}, "applied")))
    assert record["specversion"] == "1.0" and record["source"] == "gpuaas/steps"
    assert record["type"] == "io.gpuaas.reaction.release-workers" and record["subject"] == "team-a/job-x"
    assert record["time"].endswith("Z") and len(record["id"]) == 32
    assert set(record["data"]) == DATA_KEYS
    assert record["data"]["workload"] == {"namespace": "team-a", "name": "job-x", "uid": None}
    assert record["data"]["plan"] == {"actions": [], "reasons": ["because"]}
    parsed = JSONFormat().read(None, record_json(record))
    assert parsed.get_type() == record["type"] and parsed.get_data()["outcome"] == "applied"


@pytest.mark.parametrize(("outcome", "result", "expected"), [
    (Outcome.APPLIED, "applied", RELEASED),
    (Outcome.APPLIED, "dry-run", None),        # nothing changed: nothing to describe
    (Outcome.NO_OP, None, None),
    (Outcome.SKIPPED_BY_POLICY, None, None),
    (Outcome.REJECTED_INPUT, None, None),
    (Outcome.FAILED, "failed", FAILED),
])
def test_kubernetes_event_only_for_changes_and_failures(outcome: Outcome, result: str | None,
                                                        expected: str | None) -> None:
    results = [ActionResult("x", {}, result)] if result else []
    the_report = report(outcome, *results)
    the_report.errors = ["boom"] if outcome == Outcome.FAILED else []
    event = kubernetes_event(the_report)
    assert (event[0] if event else None) == expected
    if expected == FAILED:
        assert event[2] == "Warning" and "boom" in event[1]


def test_reaction_modules_are_found_by_name() -> None:
    assert module_name("on-idle") == "steps.reactions.on_idle"
    names = available()
    for reaction in ("on-admitted", "on-finished", "release-workers", "resume-workers", "record-outcome"):
        assert reaction in names
        assert load(reaction).REACTION == reaction


def _params(tmp_path: Path) -> Path:
    params = tmp_path / "params"
    params.write_text(json.dumps([{"name": "namespace", "value": "team-a"}, {"name": "workload", "value": "w"}]))
    return params


def test_a_bug_in_a_reaction_is_recorded_as_failed_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = load("release-workers")

    def broken(context: object) -> StepReport:
        raise RuntimeError("unexpected shape")

    monkeypatch.setattr(module, "step", broken)
    code = main(["release-workers", str(_params(tmp_path))], outputs_dir=str(tmp_path / "out"), environ={})
    record = json.loads((tmp_path / "out" / "record").read_text())
    assert code == 1 and (tmp_path / "out" / "outcome").read_text() == "failed"
    assert record["data"]["errors"] == ["RuntimeError: unexpected shape"]
    assert record["subject"] == "team-a/w"


def test_transient_marked_exceptions_exit_75(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Unavailable(Exception):
        transient = True

    def down(context: object) -> StepReport:
        raise Unavailable("prometheus down")

    monkeypatch.setattr(load("release-workers"), "step", down)
    code = main(["release-workers", str(_params(tmp_path))], outputs_dir=str(tmp_path / "out"), environ={})
    assert code == 75 and (tmp_path / "out" / "gpus-released").read_text() == "0"


def test_unwritable_outputs_exit_1(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = main(["no-such", str(_params(tmp_path))], outputs_dir=str(blocker / "out"), environ={})
    assert code == 1


def test_wrong_argv_is_rejected(tmp_path: Path) -> None:
    code = main(["on-admitted"], outputs_dir=str(tmp_path / "out"), environ={})
    record = json.loads((tmp_path / "out" / "record").read_text())
    assert code == 0 and "usage: python -m steps" in record["data"]["errors"][0]
