"""Parsing a Workflow into a run: retries, the on-idle fan-out, and broken history shown honestly."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpuaas.audit.filters import FilterError, RunFilter, parse_moment
from gpuaas.audit.run import parse_workflow


def test_retried_step_reads_the_last_attempt(workflows):
    run = parse_workflow(workflows["gpuaas-on-admitted-a1b2c"])
    (step,) = run.primary_steps
    assert step.attempts == 2
    assert (run.outcome, run.tenant, run.namespace, run.workload) == (
        "applied", "research", "team-research", "statefulset-nb-alice-1")
    assert step.data["actions"][0]["after"] == {"name": "gpuaas-nb-alice", "minReplicaCount": 0}
    # The exit handler's record is kept but does not speak for the run.
    assert [s.role for s in run.steps] == ["reaction", "exit-handler"]


def test_fan_out_is_one_run_with_a_record_per_alert(workflows):
    run = parse_workflow(workflows["gpuaas-on-idle-x9y8z"])
    assert [s.reaction for s in run.children] == ["idle-alerts", "on-idle", "on-idle"]
    assert [s.outcome for s in run.primary_steps] == ["applied", "failed"]
    assert run.outcome == "failed"  # one child failed: the run must not read "applied"
    assert "409 Conflict" in run.reason
    assert run.tenants == {"vision", "serving"}
    assert run.workloads == {"raycluster-ray-vision-1", "inferenceservice-llm-1"}
    assert run.metric("gpuHoursReclaimed") == 2.5


@pytest.mark.parametrize(("name", "outcome", "reason"), [
    ("gpuaas-release-workers-c4r5t", "failed", "exit handler recorded: step release-workers: OOMKilled"),
    ("gpuaas-resume-workers-g7h8j", "unknown", "not JSON"),
    ("gpuaas-on-preempted-m3n4b", "no-op", "unknown reaction 'on-preempted'"),
    ("gpuaas-provision-quota-r6t7y", "unknown", "Running"),
])
def test_broken_history_is_shown_with_its_reason(workflows, name, outcome, reason):
    run = parse_workflow(workflows[name])
    assert run.workflow == name
    assert run.outcome == outcome
    assert reason in (run.reason or "")


def test_a_failed_workflow_is_failed_even_if_its_steps_say_otherwise(workflows):
    workflow = workflows["gpuaas-on-finished-q1w2e"]
    workflow["status"]["phase"] = "Error"
    workflow["status"]["message"] = "exceeded activeDeadlineSeconds"
    run = parse_workflow(workflow)
    assert (run.outcome, run.reason) == ("failed", "exceeded activeDeadlineSeconds")


@pytest.mark.parametrize("workflow", [
    {"metadata": "nope", "status": {"nodes": {"x": None}}},
    {"metadata": {"name": "w", "labels": ["a"]}, "spec": {"arguments": "x", "workflowTemplateRef": 3},
     "status": {"phase": "Succeeded", "nodes": {"p": {"type": "Pod", "outputs": "x", "children": []}}}},
    {"metadata": {"name": "w"}, "status": {"phase": "Succeeded", "nodes": {"p": {
        "type": "Pod", "phase": "Succeeded", "outputs": {"parameters": [{"name": "record", "value": "[1, 2]"}]}}}}},
])
def test_garbage_is_a_run_not_an_exception(workflow):
    run = parse_workflow(workflow)
    assert run.outcome == "unknown"
    assert run.reason


def test_relative_and_absolute_times():
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    assert parse_moment("--since", "24h", now) == datetime(2026, 11, 30, 12, tzinfo=UTC)
    assert parse_moment("--since", "7d", now) == datetime(2026, 11, 24, 12, tzinfo=UTC)
    assert parse_moment("--until", "2026-11-30T10:30:00Z") == datetime(2026, 11, 30, 10, 30, tzinfo=UTC)
    with pytest.raises(FilterError, match="--since: expected RFC 3339"):
        parse_moment("--since", "yesterday")


def test_only_the_reaction_is_pushed_down():
    assert RunFilter(reaction="on-idle", tenant="vision", workload="w").label_selector() == "gpuaas.io/reaction=on-idle"
    assert RunFilter(tenant="vision").label_selector() is None
    with pytest.raises(FilterError, match="--reaction"):
        RunFilter(reaction="on idle,x").label_selector()


@pytest.mark.parametrize(("selector", "expected"), [
    ("gpuaas.io/reaction=on-idle", True), ("gpuaas.io/reaction==on-idle", True),
    ("gpuaas.io/reaction!=on-idle", False), ("gpuaas.io/reaction in (on-idle, on-admitted)", True),
    ("gpuaas.io/reaction notin (on-idle)", False), ("gpuaas.io/tenant", True), ("!gpuaas.io/tenant", False),
    ("gpuaas.io/reaction=on-idle,gpuaas.io/tenant=vision", False), ("missing in (a,b)", False),
    ("missing notin (a)", True),
])
def test_the_stand_in_applies_label_selectors_like_kubernetes(selector, expected):
    from tests.support.argo_server import selector_matches

    assert selector_matches(selector, {"gpuaas.io/reaction": "on-idle", "gpuaas.io/tenant": ""}) is expected
