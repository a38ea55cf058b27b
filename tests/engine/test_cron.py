"""The engine's CronWorkflows and API-created Workflows (engine/cron.py), and the sweep's runs in the timeline."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import Future
from typing import Any

import pytest

from engine.cron import CronRunner, period_minutes
from engine.timeline import Timeline, reaction_outcomes, reaction_records


def test_the_engine_runs_every_n_minutes_schedules_only() -> None:
    assert period_minutes("*/2 * * * *") == 2
    assert period_minutes("* * * * *") == 1
    with pytest.raises(ValueError, match="every N minutes"):
        period_minutes("0 3 * * *")


class _Executor:
    def __init__(self, hold: threading.Event) -> None:
        self.submitted: list[dict[str, Any]] = []
        self.hold = hold

    def submit_async(self, workflow: dict[str, Any]) -> Future:
        self.submitted.append(workflow)
        future: Future = Future()
        threading.Thread(target=lambda: (self.hold.wait(5), future.set_result({})), daemon=True).start()
        return future


def test_a_cron_tick_skips_while_the_last_run_still_runs() -> None:
    """concurrencyPolicy Forbid: ticks while a pass runs start nothing."""
    hold = threading.Event()
    executor = _Executor(hold)
    cron = {"metadata": {"name": "gpuaas-sweep", "namespace": "gpuaas"},
            "spec": {"schedules": ["* * * * *"], "workflowSpec": {"workflowTemplateRef": {"name": "gpuaas-sweep"}}}}
    runner = CronRunner([cron], executor, time_scale=60 / 0.05)   # a minute every 50 ms
    runner.start()
    time.sleep(0.4)
    assert len(executor.submitted) == 1                            # the first pass holds
    hold.set()
    time.sleep(0.3)
    runner.stop()
    assert len(executor.submitted) >= 2
    first = executor.submitted[0]
    assert first["metadata"]["labels"] == {"workflows.argoproj.io/cron-workflow": "gpuaas-sweep"}
    assert first["spec"] == {"workflowTemplateRef": {"name": "gpuaas-sweep"}}


def _swept(outcome: str = "no-op") -> dict[str, Any]:
    record = {"data": {"reaction": "on-admitted", "outcome": outcome, "workload": {"namespace": "a", "name": "w"}}}
    return {"metadata": {"name": "gpuaas-on-admitted-s-1", "labels": {"gpuaas.io/workload-uid": "u",
                                                                        "gpuaas.io/reaction": "on-admitted",
                                                                        "workflows.argoproj.io/workflow-template":
                                                                            "gpuaas-on-admitted"}},
            "spec": {"arguments": {"parameters": [{"name": "namespace", "value": "a"},
                                                  {"name": "workload", "value": "w"},
                                                  {"name": "recorded-by", "value": "sweep"},
                                                  {"name": "record", "value": json.dumps(record)}]}},
            "status": {"phase": "Succeeded", "nodes": {}}}


def test_the_timeline_reads_a_recorded_run_and_leaves_out_idle_passes() -> None:
    from datetime import UTC, datetime

    timeline = Timeline(lambda: datetime(2026, 1, 1, tzinfo=UTC))
    timeline.finished(_swept())
    [row] = timeline.rows
    assert (row.event, row.sensor, row.outcome) == ("on-admitted a/w", "(sweep: recorded)", "Succeeded: no-op")
    assert reaction_outcomes(_swept()) == ["no-op"] and reaction_records(_swept())[0]["data"]["reaction"] == "on-admitted"
    idle_pass = {"metadata": {"name": "gpuaas-sweep-x", "labels": {"workflows.argoproj.io/cron-workflow": "gpuaas-sweep"}},
                 "spec": {}, "status": {"phase": "Succeeded", "nodes": {"n": {"type": "Pod", "name": "gpuaas-sweep-x",
                 "outputs": {"parameters": [{"name": "record", "value": json.dumps(
                     {"data": {"reaction": "sweep", "outcome": "no-op", "metrics": {"delivered": 0.0}}})}]}}}}}
    timeline.finished(idle_pass)
    assert len(timeline.rows) == 1
