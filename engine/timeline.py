"""What happened, in order: the demo's timeline (time, event, sensor, workflow, outcome).

Rows are added when an event triggers a workflow (outcome filled in when the workflow finishes)
and when the scenario acts on the cluster itself (a tenant submits, a job finishes, an admin
resubmits). Reading a finished Workflow's outcome follows ARCHITECTURE section 1: every reaction
node writes an `outcome` output parameter and a `record` (the audit CloudEvent).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

STARTED_BY = ("events", "sweep", "hand-submitted", "resubmitted")
"""What started a run, as the report's headline counts it."""
SENSOR_LABEL = "events.argoproj.io/sensor"
RESUBMITTED_LABEL = "workflows.argoproj.io/resubmitted-from-workflow"
UID_LABEL = "gpuaas.io/workload-uid"
"""Set on a reaction run by the Sensor's trigger and by the catch-up sweep (steps.reactions.sweep), not by the UI."""


def started_by(run: dict[str, Any]) -> str:
    """`events` (a Sensor submitted it: Argo Events labels it with the Sensor), `resubmitted` (Argo's resubmit, from
    the UI or `argo resubmit`, labels it with the run it repeats), `sweep` (the catch-up sweep created it: the
    Workload's uid label without a Sensor's), else `hand-submitted` (the UI's SUBMIT or `argo submit --from`: the
    admin's resume in the demo)."""
    labels = (run.get("metadata") or {}).get("labels") or {}
    if RESUBMITTED_LABEL in labels:
        return "resubmitted"
    if SENSOR_LABEL in labels:
        return "events"
    return "sweep" if labels.get(UID_LABEL) else "hand-submitted"


@dataclass
class TimelineRow:
    time: str
    event: str
    sensor: str = ""
    workflow: str = ""
    template: str = ""
    outcome: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def _pod_nodes(workflow: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Pod nodes (last attempt of each retried step) of the main branch and of the exit handler
    (`<workflow>.onExit...`), in node order."""
    name = (workflow.get("metadata") or {}).get("name", "")
    nodes = (workflow.get("status") or {}).get("nodes", {})
    superseded = set()  # earlier attempts of a retried step: only the last attempt's outputs count
    for node in nodes.values():
        if node.get("type") == "Retry":
            superseded.update((node.get("children") or [])[:-1])
    main, exit_handler = [], []
    for node_id, node in nodes.items():
        if node.get("type") == "Pod" and node_id not in superseded:
            (exit_handler if node.get("name", "").startswith(f"{name}.onExit") else main).append(node)
    return main, exit_handler


def _outputs(nodes: list[dict[str, Any]], parameter: str) -> list[str]:
    values = []
    for node in nodes:
        for output in (node.get("outputs") or {}).get("parameters") or []:
            if output.get("name") == parameter and output.get("value"):
                values.append(output["value"])
    return values


def _swept(workflow: dict[str, Any]) -> dict[str, Any] | None:
    """The record of a run the catch-up sweep recorded without a pod (steps.delivery), else None."""
    from steps.delivery import recorded_run_record

    parameters = {p.get("name"): p.get("value") for p in
                  ((workflow.get("spec") or {}).get("arguments") or {}).get("parameters") or []}
    meta = workflow.get("metadata") or {}
    return recorded_run_record(parameters, name=str(meta.get("name") or ""), labels=meta.get("labels") or {})


def reaction_outcomes(workflow: dict[str, Any]) -> list[str]:
    """Each reaction node's `outcome` output (fan-out children give several).

    The exit handler (`record-outcome`) counts only when no reaction node recorded anything,
    which is the case it exists for: the reaction's own step failed before writing a record.
    A run the sweep recorded without a pod has its record as a parameter.
    """
    swept = _swept(workflow)
    if swept is not None:
        return [str(swept["data"].get("outcome", "?"))]
    main, exit_handler = _pod_nodes(workflow)
    return [v.strip() for v in (_outputs(main, "outcome") or _outputs(exit_handler, "outcome"))]


def reaction_records(workflow: dict[str, Any], *, include_exit_handler: bool = False) -> list[dict[str, Any]]:
    """The audit records (`record` output parameters) of the reaction nodes; see reaction_outcomes."""
    swept = _swept(workflow)
    if swept is not None:
        return [swept]
    main, exit_handler = _pod_nodes(workflow)
    texts = _outputs(main, "record")
    if include_exit_handler or not texts:
        texts += _outputs(exit_handler, "record")
    records = []
    for text in texts:
        try:
            records.append(json.loads(text))
        except json.JSONDecodeError:
            continue
    return records


def summarize_outcome(workflow: dict[str, Any]) -> str:
    """`Succeeded: applied`, or per reaction when several ran (`idle-alerts applied; on-idle applied`)."""
    phase = (workflow.get("status") or {}).get("phase", "?")
    by_reaction: dict[str, list[str]] = {}
    for record in reaction_records(workflow):
        data = record.get("data") or {}
        by_reaction.setdefault(str(data.get("reaction", "?")), []).append(str(data.get("outcome", "?")))
    if not by_reaction:
        outcomes = reaction_outcomes(workflow)
        return f"{phase}: {', '.join(outcomes)}" if outcomes else phase

    def words(outcomes: list[str]) -> str:
        counts = {o: outcomes.count(o) for o in dict.fromkeys(outcomes)}
        return ", ".join(f"{o} x{n}" if n > 1 else o for o, n in counts.items())

    if len(by_reaction) == 1:
        return f"{phase}: {words(next(iter(by_reaction.values())))}"
    return f"{phase}: " + "; ".join(f"{reaction} {words(outcomes)}" for reaction, outcomes in by_reaction.items())


def _workload_of(workflow: dict[str, Any]) -> str:
    parameters = {p.get("name"): p.get("value") for p in
                  ((workflow.get("spec") or {}).get("arguments") or {}).get("parameters") or []}
    return f"{parameters.get('namespace', '?')}/{parameters.get('workload', '?')}"


class Timeline:
    """Thread-safe list of rows; the executor's listener fills in outcomes."""

    def __init__(self, clock: Callable[[], datetime]) -> None:
        self.clock = clock
        self.rows: list[TimelineRow] = []
        self._by_workflow: dict[str, TimelineRow] = {}
        self._lock = threading.Lock()
        self.on_row: Callable[[TimelineRow], None] | None = None

    def _stamp(self) -> str:
        return self.clock().strftime("%H:%M:%S")

    def note(self, event: str, outcome: str = "") -> TimelineRow:
        row = TimelineRow(time=self._stamp(), event=event, outcome=outcome)
        with self._lock:
            self.rows.append(row)
        if self.on_row:
            self.on_row(row)
        return row

    def triggered(self, event: str, sensor: str, workflow: str, template: str) -> TimelineRow:
        row = TimelineRow(time=self._stamp(), event=event, sensor=sensor, workflow=workflow, template=template,
                          outcome="Running")
        with self._lock:
            self.rows.append(row)
            self._by_workflow[workflow] = row
        return row

    def finished(self, workflow: dict[str, Any]) -> None:
        labels = workflow["metadata"].get("labels") or {}
        with self._lock:
            row = self._by_workflow.get(workflow["metadata"]["name"])
        if row is None:
            template = labels.get("workflows.argoproj.io/workflow-template", "")
            event, sensor = "hand submission", "(by hand)"
            if labels.get("workflows.argoproj.io/cron-workflow"):
                records = reaction_records(workflow)
                delivered = sum(float(((r.get("data") or {}).get("metrics") or {}).get("delivered") or 0)
                                for r in records)
                if records and not delivered and all((r.get("data") or {}).get("outcome") != "failed"
                                                     for r in records):
                    # A pass that delivered nothing to a step: the runs it recorded have rows of their own,
                    # and the pass is in the archive.
                    return
                event, sensor = "catch-up sweep", f"(CronWorkflow {labels['workflows.argoproj.io/cron-workflow']})"
            elif labels.get(UID_LABEL) and _swept(workflow) is not None:
                event, sensor = f"{labels.get('gpuaas.io/reaction', '')} {_workload_of(workflow)}", "(sweep: recorded)"
            elif labels.get(UID_LABEL):
                event, sensor = f"{labels.get('gpuaas.io/reaction', '')} {_workload_of(workflow)}", "(sweep: delivered)"
            row = TimelineRow(time=self._stamp(), event=event, sensor=sensor, workflow=workflow["metadata"]["name"],
                              template=template)
            with self._lock:
                self.rows.append(row)
        row.outcome = summarize_outcome(workflow)
        if self.on_row:
            self.on_row(row)
