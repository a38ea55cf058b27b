"""Runs the catch-up sweep recorded without a pod (docs/catch-up.md), as gpuaas audit reads them.

Argo's resubmit copies a Workflow's spec and labels (v4.0.5 workflow/util FormulateResubmitWorkflow):
a resubmitted copy of a recorded run carries the same `recorded-by=sweep` and `record` parameters,
and Argo skips its step again. Such a copy (label workflows.argoproj.io/resubmitted-from-workflow,
or a name that is not the one the sweep derives from the transition) is no second reaction: it is
listed as a duplicate of the run the sweep made.
"""

from __future__ import annotations

import json
from typing import Any

from gpuaas.audit.run import parse_workflow
from steps.delivery import RESUBMITTED_LABEL, sweep_run_name

UID = "0b5e7c1e-1111-4a4a-9c9c-000000000001"
KEY = "admitted@2026-01-01T12:01:00Z#0"


def recorded(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    record = {"data": {"reaction": "on-admitted", "outcome": "no-op",
                       "workload": {"namespace": "team-a", "name": "job-a", "uid": UID},
                       "delivery": {"via": "sweep", "transition": {"reaction": "on-admitted", "key": KEY},
                                    "marked": False, "duplicateOf": None},
                       "plan": {"actions": [], "reasons": ["recorded by the catch-up sweep without a step pod"]}}}
    params = {"namespace": "team-a", "workload": "job-a", "event": "{}", "dry-run": "false", "tenant": "",
              "recorded-by": "sweep", "record": json.dumps(record)}
    return {"metadata": {"name": name, "namespace": "gpuaas", "uid": f"uid-{name}",
                         "labels": {"gpuaas.io/reaction": "on-admitted", "gpuaas.io/recorded-by": "sweep",
                                    "workflows.argoproj.io/workflow-template": "gpuaas-on-admitted", **(labels or {})}},
            "spec": {"workflowTemplateRef": {"name": "gpuaas-on-admitted"},
                     "arguments": {"parameters": [{"name": k, "value": v} for k, v in params.items()]}},
            "status": {"phase": "Succeeded", "startedAt": "2026-01-01T12:03:00Z", "finishedAt": "2026-01-01T12:03:01Z"}}


def step_delivery(run: Any) -> dict[str, Any]:
    [step] = [s for s in run.steps if s.role == "reaction"]
    return step.record["data"]["delivery"]


def test_the_sweeps_own_recorded_run_is_the_transitions_reaction() -> None:
    run = parse_workflow(recorded(sweep_run_name("on-admitted", UID, KEY)))
    assert run.outcome == "no-op" and step_delivery(run)["duplicateOf"] is None


def test_a_resubmitted_copy_of_a_recorded_run_is_a_duplicate() -> None:
    original = sweep_run_name("on-admitted", UID, KEY)
    copy = parse_workflow(recorded(f"{original}-x7k2p", {RESUBMITTED_LABEL: original}))
    delivery = step_delivery(copy)
    assert delivery["duplicateOf"]["run"] == original and delivery["marked"] is False
    assert "resubmitted" in copy.steps[0].record["data"]["plan"]["reasons"][-1]


def test_a_recorded_run_whose_name_the_sweep_did_not_derive_is_a_duplicate() -> None:
    """Anyone who can submit can set recorded-by=sweep: such a run is not the sweep's record."""
    forged = parse_workflow(recorded("gpuaas-on-admitted-hand-1"))
    assert step_delivery(forged)["duplicateOf"] is not None
