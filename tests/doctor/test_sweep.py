"""The catch-up sweep's findings (`sweep`, `sweep.pass`): from hand-made facts (each deadline worked out by hand
from the schedule), and read from the local engine's Kubernetes API by the real gatherer and command.

The rendered schedule `*/2 * * * *` fires every 120 s, and every deadline has MARGIN_S (120 s) added:
never scheduled is judged after 2 x 120 + 120 = 360 s, late after 3 x 120 + 120 = 480 s."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine import apiserver
from gpuaas.cli import main
from gpuaas.doctor import checks
from gpuaas.doctor.checks.sweep import revalidate_fix
from gpuaas.doctor.clients import Kube
from gpuaas.doctor.facts import Facts, Sweep
from gpuaas.doctor.findings import Finding, Status
from gpuaas.doctor.gather import Gatherer, cron_workflow_fact, sweep_pass
from steps.gateways import resources as R
from tests.doctor.healthy import NS, broken, healthy, sweep_cron
from tests.doctor.healthy import sweep_pass as a_pass
from tests.support.apiserver import running_apiserver

REPO = Path(__file__).resolve().parents[2]
SPEC_ERROR = 'WorkflowTemplate Informer cannot find WorkflowTemplate of name "gpuaas-sweep" in namespace "gpuaas"'
"""argo-workflows v4.0.5 workflow/controller/informer/workflow_template_convert.go, for a template that is not there."""


def sweep_findings(change: Callable[[Facts], None]) -> tuple[dict[str, Finding], dict[str, Status], dict[str, str]]:
    """(the two sweep findings by id, every finding that is not ok, what was not checked)."""
    report = checks.run(broken(change))
    found = report.by_id()
    return {k: found[k] for k in ("sweep", "sweep.pass") if k in found}, report.not_ok(), report.not_checked


def _cron(**changes: Any) -> Callable[[Facts], None]:
    return lambda f: setattr(f.sweep, "cron", sweep_cron(**changes))


def _passes(*passes: Any) -> Callable[[Facts], None]:
    return lambda f: setattr(f.sweep, "passes", list(passes))


def test_a_sweep_scheduled_on_time_whose_last_pass_succeeded_is_ok() -> None:
    found, not_ok, _ = sweep_findings(lambda f: None)
    assert not_ok == {}
    assert found["sweep"].summary == ("CronWorkflow gpuaas-sweep is scheduled on time (*/2 * * * *); "
                                      "last scheduled 40s ago")
    assert found["sweep.pass"].summary == "the last sweep pass, gpuaas-sweep-1796558400, succeeded at 2026-12-06T12:00:07Z"


def test_a_missing_cron_workflow_blocks_with_how_to_install_it() -> None:
    found, not_ok, _ = sweep_findings(lambda f: setattr(f.sweep, "cron", None))
    assert not_ok == {"sweep": Status.BLOCKS}
    assert "CronWorkflow gpuaas-sweep is missing from gpuaas" in found["sweep"].summary
    assert "helm upgrade --install gpuaas charts/gpuaas -n gpuaas" in found["sweep"].fix
    assert "kubectl apply -k manifests/overlays/<yours>" in found["sweep"].fix and revalidate_fix(NS) in found["sweep"].fix


def test_no_cron_workflow_and_no_pass_leaves_the_pass_unjudged() -> None:
    def gone(f: Facts) -> None:
        f.sweep = Sweep()
    _, not_ok, not_checked = sweep_findings(gone)
    assert not_ok == {"sweep": Status.BLOCKS} and "missing" in not_checked["sweep.pass"]


def test_the_fix_for_a_rejected_cron_workflow_is_the_install_pages_command() -> None:
    """docs/install.md step 4 prints the same annotation: an admin who ran it once recognises it."""
    assert revalidate_fix(NS) in (REPO / "docs" / "install.md").read_text()
    assert revalidate_fix(NS) == ('kubectl -n gpuaas annotate cronworkflow gpuaas-sweep --overwrite '
                                  'gpuaas.io/revalidated-at="$(date -u +%Y-%m-%dT%H:%M:%SZ)"')


@pytest.mark.parametrize(("age_s", "revalidated_s", "status", "words"), [
    (359.0, None, Status.OK, "was created 5m59s ago: its first pass is due (judged after 6m)"),
    (361.0, None, Status.BLOCKS, "was never scheduled, 6m1s after it was created (its schedule fires at least every 2m)"),
    (86400.0, 86395.0, Status.BLOCKS, "was never scheduled, 23h59m55s after it was re-validated"),
    (86400.0, 300.0, Status.OK, "was re-validated 5m ago: its first pass is due"),
    (86400.0, 361.0, Status.BLOCKS, "never scheduled, 6m1s after it was re-validated"),
])
def test_never_scheduled(age_s: float, revalidated_s: float | None, status: Status, words: str) -> None:
    found, not_ok, _ = sweep_findings(lambda f: (_cron(age_s=age_s, revalidated_age_s=revalidated_s, last_scheduled_at="",
                                                       last_scheduled_age_s=None)(f), _passes()(f)))
    assert found["sweep"].status == status and words in found["sweep"].summary, found["sweep"]
    assert not_ok == ({} if status == Status.OK else {"sweep": status})
    if status == Status.BLOCKS:
        assert "Argo records no rejection" in found["sweep"].summary
        assert found["sweep"].fix.splitlines()[0] == revalidate_fix(NS)
        assert "within 4m, this prints a time" in found["sweep"].fix  # one interval + the margin


@pytest.mark.parametrize(("schedules", "last_s", "status"), [
    (("*/2 * * * *",), 479.0, Status.OK),
    (("*/2 * * * *",), 481.0, Status.BLOCKS),
    (("0 * * * *",), 3 * 3600.0 + 119.0, Status.OK),
    (("0 * * * *",), 3 * 3600.0 + 121.0, Status.BLOCKS),
    (("0 9 * * 1-5",), 4 * 86400.0, Status.OK),  # a long weekend is not late: the longest gap is 3 days
    (("0 9 * * 1-5",), 9 * 86400.0 + 121.0, Status.BLOCKS),
    (("0 * * * *", "*/2 * * * *"), 481.0, Status.BLOCKS),  # several: the shortest longest gap
])
def test_late(schedules: tuple[str, ...], last_s: float, status: Status) -> None:
    found, not_ok, _ = sweep_findings(lambda f: (
        _cron(schedules=schedules, last_scheduled_age_s=last_s, age_s=30 * 86400.0, revalidated_age_s=None)(f),
        _passes(a_pass(age_s=last_s))(f)))
    assert found["sweep"].status == status, found["sweep"]
    assert not_ok == ({} if status == Status.OK else {"sweep": status})
    if status == Status.BLOCKS:
        assert "the workflow-controller no longer schedules it" in found["sweep"].summary
        assert found["sweep"].fix.splitlines()[0] == revalidate_fix(NS)


def test_late_after_a_recent_revalidation_waits_for_the_next_pass() -> None:
    found, not_ok, _ = sweep_findings(lambda f: (_cron(last_scheduled_age_s=3600.0, revalidated_age_s=30.0)(f),
                                                 _passes(a_pass(age_s=3600.0))(f)))
    assert not_ok == {} and "last scheduled 1h ago" in found["sweep"].summary


@pytest.mark.parametrize(("scheduled", "status"), [(True, Status.OK), (False, Status.BLOCKS)])
def test_a_pass_the_cron_workflow_created_proves_it_is_scheduled(scheduled: bool, status: Status) -> None:
    """Should the controller fail to write lastScheduledTime, the passes it creates (label
    workflows.argoproj.io/cron-workflow) still prove it schedules; one submitted by hand proves nothing."""
    found, _, _ = sweep_findings(lambda f: (_cron(last_scheduled_age_s=None, revalidated_age_s=None)(f),
                                            _passes(a_pass(age_s=90.0, scheduled=scheduled))(f)))
    assert found["sweep"].status == status, found["sweep"]
    if scheduled:
        assert found["sweep"].summary.endswith("last scheduled 1m30s ago")
        assert "newest scheduled pass: gpuaas-sweep-1796558400, created 1m30s ago" in found["sweep"].details


def test_late_while_a_pass_still_runs_is_a_warning_about_that_pass() -> None:
    """concurrencyPolicy Forbid: the controller starts no pass while one is active, and lastScheduledTime stays."""
    running = a_pass("gpuaas-sweep-1796557800", age_s=640.0, phase="Running", finished_at="")
    found, not_ok, _ = sweep_findings(lambda f: (_cron(last_scheduled_age_s=640.0, active=(running.name,))(f),
                                                 _passes(running, a_pass(age_s=760.0))(f)))
    assert not_ok == {"sweep": Status.WARN}
    assert found["sweep"].summary == ("no sweep pass was scheduled for 10m40s (its schedule fires at least every 2m): "
                                      "pass gpuaas-sweep-1796557800 has been running for 10m40s, and "
                                      "concurrencyPolicy Forbid starts no other meanwhile")
    assert "argo -n gpuaas get gpuaas-sweep-1796557800" in found["sweep"].fix
    assert found["sweep.pass"].status == Status.OK  # the newest finished pass succeeded


@pytest.mark.parametrize(("change", "status", "words", "fix"), [
    (_cron(suspend=True), Status.WARN, "is suspended: no sweep pass runs",
     "kubectl -n gpuaas patch cronworkflow gpuaas-sweep --type=merge -p '{\"spec\":{\"suspend\":false}}'"),
    (_cron(phase="Stopped", stop_strategy="cronworkflow.failed >= 3"), Status.WARN,
     "is Stopped: its stopStrategy (cronworkflow.failed >= 3) held", '"cronworkflows.argoproj.io/completed":null'),
    (_cron(conditions={"SpecError": ("True", "", SPEC_ERROR)}), Status.BLOCKS,
     'condition SpecError: WorkflowTemplate Informer cannot find WorkflowTemplate of name "gpuaas-sweep"',
     revalidate_fix(NS)),
    (_cron(conditions={"SubmissionError": ("True", "", "Failed to submit Workflow: admission webhook denied")}),
     Status.BLOCKS, "could not create a sweep pass (condition SubmissionError: Failed to submit Workflow",
     "ServiceAccount gpuaas-sweep"),
    (_cron(schedules=("0 0 L * *",)), Status.WARN, "cannot interpret CronWorkflow gpuaas-sweep's schedule",
     "sweep.schedule"),
    (_cron(schedules=()), Status.WARN, "spec.schedules is empty", "sweep.schedule"),
])
def test_what_stops_the_sweep(change: Callable[[Facts], None], status: Status, words: str, fix: str) -> None:
    found, not_ok, _ = sweep_findings(change)
    assert not_ok == {"sweep": status}, found["sweep"]
    assert words in found["sweep"].summary and fix in found["sweep"].fix, found["sweep"]


def test_a_condition_that_is_false_is_not_an_error() -> None:
    _, not_ok, _ = sweep_findings(_cron(conditions={"SpecError": ("False", "", "")}))
    assert not_ok == {}


@pytest.mark.parametrize(("passes", "status", "words"), [
    ((a_pass(phase="Failed", message="child 'gpuaas-sweep-1796558400-1' failed"),), Status.WARN,
     "the last sweep pass, gpuaas-sweep-1796558400, ended Failed: child 'gpuaas-sweep-1796558400-1' failed"),
    ((a_pass(phase="Error", message=""),), Status.WARN, "ended Error: no message"),
    # the newest pass still runs: the newest finished one is judged
    ((a_pass("gpuaas-sweep-1796558520", age_s=5.0, phase="Running", finished_at=""),
      a_pass(age_s=125.0, phase="Failed", message="1 transition(s) could not be answered")), Status.WARN,
     "gpuaas-sweep-1796558400, ended Failed: 1 transition(s)"),
    ((a_pass("gpuaas-sweep-1796558520", age_s=5.0, phase="Running", finished_at=""), a_pass(age_s=125.0)), Status.OK,
     "the last sweep pass, gpuaas-sweep-1796558400, succeeded at 2026-12-06T12:00:07Z"),
    ((a_pass("gpuaas-sweep-x9k2", age_s=30.0, phase="Succeeded", finished_at="", scheduled=False),
      a_pass(age_s=125.0, phase="Failed")), Status.OK, "gpuaas-sweep-x9k2, succeeded (30s ago)"),
    ((), Status.OK, "no sweep pass has finished yet"),
    ((a_pass(age_s=5.0, phase="", finished_at=""),), Status.OK, "no sweep pass has finished yet"),
])
def test_the_last_pass(passes: tuple[Any, ...], status: Status, words: str) -> None:
    found, not_ok, _ = sweep_findings(_passes(*passes))
    assert found["sweep.pass"].status == status and words in found["sweep.pass"].summary, found["sweep.pass"]
    assert not_ok == ({} if status == Status.OK else {"sweep.pass": status})
    if status == Status.WARN:
        assert "gpuaas audit show gpuaas-sweep-1796558400 --argo-namespace gpuaas" in found["sweep.pass"].fix
        assert "argo -n gpuaas get gpuaas-sweep-1796558400" in found["sweep.pass"].fix


def test_without_argo_workflows_crd_or_read_the_sweep_is_not_checked() -> None:
    _, not_ok, not_checked = sweep_findings(lambda f: f.crds.pop("cronworkflows.argoproj.io"))
    assert not_ok == {"argo-workflows": Status.BLOCKS}
    assert "no CRD cronworkflows.argoproj.io" in not_checked["sweep"] and "sweep.pass" in not_checked
    _, not_ok, not_checked = sweep_findings(lambda f: f.unreadable.__setitem__("sweep", "HTTP 403 forbidden"))
    assert not_ok == {} and not_checked == {"sweep": "HTTP 403 forbidden", "sweep.pass": "HTTP 403 forbidden"}


# -- read from a Kubernetes API -----------------------------------------------------------------------------
def _stamp(seconds_ago: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds_ago))


def _cron_object(*, created_s: float, last_s: float | None, **spec: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"active": [{"kind": "Workflow", "name": "gpuaas-sweep-2"}],
                              "conditions": [{"type": "SubmissionError", "status": "False", "message": ""}]}
    if last_s is not None:
        status["lastScheduledTime"] = _stamp(last_s)
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "CronWorkflow",
            "metadata": {"name": "gpuaas-sweep", "namespace": NS, "creationTimestamp": _stamp(created_s),
                         "annotations": {"gpuaas.io/revalidated-at": _stamp(created_s).replace("Z", ".123Z")}},
            "spec": {"schedules": ["*/2 * * * *"], "concurrencyPolicy": "Forbid",
                     "workflowSpec": {"workflowTemplateRef": {"name": "gpuaas-sweep"}}, **spec},
            "status": status}


def _pass_object(name: str, created_s: float, phase: str, *, cron: bool = True) -> dict[str, Any]:
    labels = {"gpuaas.io/reaction": "sweep", **({"workflows.argoproj.io/cron-workflow": "gpuaas-sweep"} if cron else {})}
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": NS, "labels": labels, "creationTimestamp": _stamp(created_s)},
            "status": {"phase": phase, "message": "failed" if phase == "Failed" else "",
                       **({"finishedAt": _stamp(created_s - 7)} if phase in ("Succeeded", "Failed") else {})}}


def test_the_cron_workflow_and_a_pass_as_the_gatherer_reads_them() -> None:
    now = time.time()
    cron = cron_workflow_fact(_cron_object(created_s=3600, last_s=50), now)
    assert (cron.name, cron.schedules, cron.template, cron.active) == (
        "gpuaas-sweep", ("*/2 * * * *",), "gpuaas-sweep", ("gpuaas-sweep-2",))
    assert 3595 < cron.age_s < 3610 and cron.last_scheduled_age_s is not None and 45 < cron.last_scheduled_age_s < 60
    assert cron.conditions == {"SubmissionError": ("False", "", "")} and cron.revalidated_age_s is not None
    older = _cron_object(created_s=60, last_s=None)  # Argo before v3.6: one `schedule`
    older["spec"] = {"schedule": "0 * * * *", "suspend": True}
    older["metadata"]["annotations"] = {"gpuaas.io/revalidated-at": "yesterday"}
    fact = cron_workflow_fact(older, now)
    assert (fact.schedules, fact.suspend, fact.last_scheduled_age_s, fact.revalidated_age_s) == (
        ("0 * * * *",), True, None, None)
    by_hand = sweep_pass(_pass_object("gpuaas-sweep-abc", 30, "Succeeded", cron=False), now)
    assert (by_hand.name, by_hand.phase, by_hand.scheduled) == ("gpuaas-sweep-abc", "Succeeded", False)


@pytest.fixture
def engine_api() -> Any:
    with running_apiserver(set_env=False) as api:
        yield api


def _seed(api: Any, resource: Any, obj: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Create `obj` with its own creationTimestamp (the engine's API server stamps creation with its clock)."""
    monkeypatch.setattr(apiserver, "_now", lambda: obj["metadata"]["creationTimestamp"])
    api.store.create(resource, obj)
    monkeypatch.undo()


def test_the_gatherer_reads_the_cron_workflow_by_name_and_the_passes_by_label(
        engine_api: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _seed(engine_api, R.CRON_WORKFLOW, _cron_object(created_s=3600, last_s=50), monkeypatch)
    for name, age, phase in (("gpuaas-sweep-1", 170, "Succeeded"), ("gpuaas-sweep-2", 50, "Running")):
        _seed(engine_api, R.WORKFLOW, _pass_object(name, age, phase), monkeypatch)
    engine_api.store.create(R.WORKFLOW, {"metadata": {"name": "gpuaas-on-idle-x", "namespace": NS,
                                                      "labels": {"gpuaas.io/reaction": "on-idle"}}})
    gatherer = Gatherer(Kube.connect(url=engine_api.url), NS)
    gatherer.read_crds()
    gatherer.read_sweep()
    sweep = gatherer.facts.sweep
    assert sweep.cron is not None and sweep.cron.last_scheduled_age_s is not None
    assert [(p.name, p.phase) for p in sweep.passes] == [("gpuaas-sweep-2", "Running"), ("gpuaas-sweep-1", "Succeeded")]
    assert "sweep" not in gatherer.facts.unreadable


def test_the_command_reports_the_sweep_in_json(engine_api: Any, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """On the engine's API no controller schedules anything: a CronWorkflow created 10 minutes ago and never
    scheduled is the dead sweep the doctor exists to see; its failed last pass is a warning beside it."""
    _seed(engine_api, R.CRON_WORKFLOW, _cron_object(created_s=600, last_s=None), monkeypatch)
    _seed(engine_api, R.WORKFLOW, _pass_object("gpuaas-sweep-1", 900, "Failed", cron=False), monkeypatch)
    main(["doctor", "--kube-url", engine_api.url, "--output", "json"])
    report = json.loads(capsys.readouterr().out)
    found = {f["check"]: f for f in report["findings"]}
    assert found["sweep"]["status"] == "blocks" and "was never scheduled, 10m" in found["sweep"]["summary"]
    assert found["sweep"]["fix"].splitlines()[0] == revalidate_fix(NS)
    assert found["sweep.pass"]["status"] == "warn" and "gpuaas-sweep-1, ended Failed" in found["sweep.pass"]["summary"]
    assert "sweep" not in report["unreadable"] and "sweep" not in report["notChecked"]


def test_healthy_facts_have_a_healthy_sweep() -> None:
    """The fixture every other test breaks one thing of."""
    assert healthy().sweep.cron == sweep_cron()
