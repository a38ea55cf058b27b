"""A reaction run as an auditor reads it, parsed from one Argo Workflow object.

Argo keeps everything the audit needs inside the Workflow: labels say which reaction and tenant
the Sensor meant, `spec.arguments` say what it was asked, and every step node carries the audit
record (ARCHITECTURE section 3) as its `record` output parameter. This module turns that into a
`Run` with one `StepRecord` per step that ran, without dropping anything it cannot understand:
a missing, truncated or non-JSON record becomes a step whose outcome is "unknown" (or "failed"
when Argo says the node failed) with the reason spelled out, because an audit that silently
skips the odd run is worse than none.

Decisions worth knowing:
- Retries: Argo wraps each retried step in a `Retry` node whose children are the attempts; the
  step's record is the LAST attempt's, and `attempts` says how many there were.
- Fan-out (gpuaas-on-idle): the template's `idle-alerts` step splits an alert group and one
  `on-idle` child runs per alert, each with its own record. A run is ONE row; its `steps` list
  holds every record (the split, each child, the exit handler), and the run's outcome, tenant,
  namespace and workload come from the steps whose reaction is the run's own reaction (the
  children), not from the split.
- The exit handler (`record-outcome`) records a run whose step failed without recording; when the
  reaction steps recorded their own outcome its record is kept but does not decide the outcome.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

REACTION_LABEL = "gpuaas.io/reaction"
TENANT_LABEL = "gpuaas.io/tenant"
WORKLOAD_LABEL = "gpuaas.io/workload"
TEMPLATE_LABEL = "workflows.argoproj.io/workflow-template"
RESUBMITTED_FROM_LABEL = "workflows.argoproj.io/resubmitted-from-workflow"

KNOWN_REACTIONS = frozenset({
    "on-admitted", "on-finished", "on-idle", "idle-alerts", "release-workers", "resume-workers",
    "provision-quota", "record-outcome", "sweep",
})
OUTCOMES = ("applied", "no-op", "skipped-by-policy", "rejected-input", "failed")
UNKNOWN = "unknown"
# Which outcome speaks for a run with several step records: the most alarming first, then the
# one that changed something, so a fan-out with one failed child reads "failed".
OUTCOME_PRECEDENCE = ("failed", UNKNOWN, "rejected-input", "applied", "skipped-by-policy", "no-op")
FAILED_PHASES = frozenset({"Failed", "Error"})
EXIT_HANDLER_TEMPLATE = "record-outcome"
STEP_NODE_TYPES = frozenset({"Pod", "Container"})


@dataclass(frozen=True)
class StepRecord:
    """One step of a run (the last attempt of a retried step) and the audit record it wrote."""

    node: str
    display_name: str
    template: str
    role: str  # "reaction" | "exit-handler"
    phase: str
    started: str | None
    finished: str | None
    attempts: int
    outcome: str
    reason: str | None
    record: dict[str, Any] | None
    record_problem: str | None
    outputs: dict[str, str]

    @property
    def data(self) -> dict[str, Any]:
        data = (self.record or {}).get("data")
        return data if isinstance(data, dict) else {}

    @property
    def reaction(self) -> str:
        value = self.data.get("reaction")
        if isinstance(value, str) and value:
            return value
        return self.template or UNKNOWN

    @property
    def tenant(self) -> str:
        value = self.data.get("tenant")
        if isinstance(value, str) and value:
            return value
        hinted = self.outputs.get("tenant", "")
        return "" if hinted in ("", UNKNOWN) else hinted

    @property
    def workload_ref(self) -> tuple[str, str]:
        workload = self.data.get("workload")
        if isinstance(workload, dict):
            return str(workload.get("namespace") or ""), str(workload.get("name") or "")
        return "", ""

    @property
    def errors(self) -> list[str]:
        errors = self.data.get("errors")
        return [str(e) for e in errors] if isinstance(errors, list) else []

    @property
    def metrics(self) -> dict[str, float]:
        metrics = self.data.get("metrics")
        if not isinstance(metrics, dict):
            return {}
        return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}

    def to_dict(self) -> dict[str, Any]:
        namespace, workload = self.workload_ref
        return {
            "node": self.node, "name": self.display_name, "template": self.template, "role": self.role,
            "reaction": self.reaction, "tenant": self.tenant, "namespace": namespace, "workload": workload,
            "phase": self.phase, "outcome": self.outcome, "reason": self.reason, "attempts": self.attempts,
            "started": self.started, "finished": self.finished, "errors": self.errors, "metrics": self.metrics,
            "recordProblem": self.record_problem, "record": self.record,
        }


@dataclass(frozen=True)
class Run:
    """One workflow run: who it was for, what it decided, and how it ended."""

    workflow: str
    uid: str
    argo_namespace: str
    template: str
    reaction: str
    phase: str
    started: str | None
    finished: str | None
    outcome: str
    reason: str | None
    tenant: str
    namespace: str
    workload: str
    archived: bool
    labels: dict[str, str]
    parameters: dict[str, str]
    steps: tuple[StepRecord, ...]
    message: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def reaction_known(self) -> bool:
        return self.reaction in KNOWN_REACTIONS

    @property
    def primary_steps(self) -> tuple[StepRecord, ...]:
        """The steps that speak for the run (see module docstring)."""
        return _primary_steps(self.steps, self.reaction)

    @property
    def children(self) -> tuple[StepRecord, ...]:
        """Step records listed under the run in a table: every non-exit-handler step when there are several."""
        reaction_steps = tuple(s for s in self.steps if s.role == "reaction")
        return reaction_steps if len(reaction_steps) > 1 else ()

    @property
    def tenants(self) -> set[str]:
        return ({s.tenant for s in self.steps} | set(self.tenant.split(","))) - {""}

    @property
    def namespaces(self) -> set[str]:
        return ({s.workload_ref[0] for s in self.steps} | set(self.namespace.split(","))) - {""}

    @property
    def workloads(self) -> set[str]:
        return ({s.workload_ref[1] for s in self.steps} | set(self.workload.split(","))) - {""}

    @property
    def started_at(self) -> datetime | None:
        return parse_time(self.started)

    @property
    def duration_seconds(self) -> float | None:
        start, end = parse_time(self.started), parse_time(self.finished)
        return (end - start).total_seconds() if start and end else None

    def metric(self, name: str) -> float:
        """Sum of a record metric over the run's primary steps (e.g. gpuHoursReclaimed)."""
        return sum(s.metrics.get(name, 0.0) for s in self.primary_steps)

    def to_dict(self, full: bool = False) -> dict[str, Any]:
        result: dict[str, Any] = {
            "workflow": self.workflow, "uid": self.uid, "argoNamespace": self.argo_namespace,
            "template": self.template, "reaction": self.reaction, "reactionKnown": self.reaction_known,
            "tenant": self.tenant, "namespace": self.namespace, "workload": self.workload,
            "outcome": self.outcome, "reason": self.reason, "phase": self.phase,
            "started": self.started, "finished": self.finished, "durationSeconds": self.duration_seconds,
            "archived": self.archived, "resubmittedFrom": self.labels.get(RESUBMITTED_FROM_LABEL),
            "dryRun": self.parameters.get("dry-run") == "true",
            "metrics": {k: self.metric(k) for k in sorted({m for s in self.primary_steps for m in s.metrics})},
            "steps": [s.to_dict() if full else _step_summary(s) for s in self.steps],
        }
        if full:
            result["parameters"] = self.parameters
            result["labels"] = self.labels
            result["message"] = self.message
        return result


def _step_summary(step: StepRecord) -> dict[str, Any]:
    full = step.to_dict()
    return {k: full[k] for k in ("name", "role", "reaction", "tenant", "namespace", "workload", "outcome",
                                 "reason", "attempts", "started", "finished", "metrics")}


def parse_time(value: str | None) -> datetime | None:
    """RFC 3339 as Argo writes it ('2026-12-01T01:34:47Z'); None when absent or unreadable."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def _object(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else {} (archived history can hold anything)."""
    return value if isinstance(value, dict) else {}


def _parameters(items: Any) -> dict[str, str]:
    result: dict[str, str] = {}
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            value = item.get("value")
            result[item["name"]] = "" if value is None else str(value)
    return result


def _read_record(raw: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """The audit CloudEvent from a `record` output, or why it cannot be used."""
    if raw is None:
        return None, "the step has no `record` output"
    if not raw.strip():
        return None, "the `record` output is empty (the step wrote no record)"
    try:
        record = json.loads(raw)
    except ValueError as error:
        snippet = raw[:60] + ("..." if len(raw) > 60 else "")
        return None, f"the `record` output is not JSON ({error.msg} at char {error.pos}): {snippet!r}"
    if not isinstance(record, dict) or not isinstance(record.get("data"), dict):
        return None, "the `record` output is JSON but not an audit CloudEvent (no `data` object)"
    return record, None


def _step_from_node(node_id: str, node: dict[str, Any], attempts: int, outer: dict[str, Any]) -> StepRecord:
    outputs = _parameters(_object(node.get("outputs")).get("parameters")
                          or _object(outer.get("outputs")).get("parameters"))
    record, problem = _read_record(outputs.get("record"))
    phase = str(node.get("phase") or outer.get("phase") or "")
    template = str(node.get("templateName") or outer.get("templateName") or "")
    display = str(outer.get("displayName") or node.get("displayName") or node_id)
    name = str(node.get("name") or "")
    role = "exit-handler" if template == EXIT_HANDLER_TEMPLATE or ".onExit" in name else "reaction"
    reason: str | None = None
    data = _object((record or {}).get("data"))
    outcome = data.get("outcome") if isinstance(data.get("outcome"), str) else None
    if outcome is None:
        # Without a readable record nothing says what was done; the plain `outcome` output alone
        # is not evidence of a change, so only a failure is taken from it.
        said = outputs.get("outcome")
        node_message = node.get("message") or outer.get("message")
        if phase in FAILED_PHASES or said == "failed":
            outcome = "failed"
            reason = "; ".join(x for x in (node_message, problem) if x) or f"step {phase} without a record"
        else:
            outcome = UNKNOWN
            reason = problem if phase in ("Succeeded", "") else f"step is {phase}: {problem}"
            if said:
                reason += f"; its `outcome` output says {said!r}"
    elif outcome not in OUTCOMES:
        reason = f"outcome {outcome!r} is not one of {', '.join(OUTCOMES)}"
    errors = data.get("errors") if isinstance(data.get("errors"), list) else []
    if reason is None and outcome in ("failed", "rejected-input") and errors:
        reason = str(errors[0])
    if reason is None and outcome == "failed":
        reason = node.get("message") or outer.get("message")
    return StepRecord(
        node=node_id, display_name=display, template=template, role=role, phase=phase,
        started=node.get("startedAt") or outer.get("startedAt"),
        finished=node.get("finishedAt") or outer.get("finishedAt"),
        attempts=attempts, outcome=outcome, reason=reason, record=record,
        record_problem=problem if record is None else None, outputs=outputs,
    )


def _steps(nodes: dict[str, Any]) -> list[StepRecord]:
    parent_of: dict[str, str] = {}
    for node_id, node in nodes.items():
        for child in (node or {}).get("children") or []:
            parent_of.setdefault(child, node_id)
    steps: list[StepRecord] = []
    seen_retry: set[str] = set()
    for node_id, node in nodes.items():
        if not isinstance(node, dict) or node.get("type") not in STEP_NODE_TYPES:
            continue
        parent_id = parent_of.get(node_id)
        parent = nodes.get(parent_id) if parent_id else None
        if isinstance(parent, dict) and parent.get("type") == "Retry":
            if parent_id in seen_retry:
                continue
            seen_retry.add(parent_id)
            attempts = [c for c in parent.get("children") or [] if isinstance(nodes.get(c), dict)]
            last = attempts[-1] if attempts else node_id
            steps.append(_step_from_node(last, nodes[last], len(attempts) or 1, parent))
        else:
            steps.append(_step_from_node(node_id, node, 1, {}))
    # Retry nodes whose attempts never got a pod node still count as steps (Argo may fail them early).
    for node_id, node in nodes.items():
        if isinstance(node, dict) and node.get("type") == "Retry" and node_id not in seen_retry:
            steps.append(_step_from_node(node_id, node, len(node.get("children") or []), {}))
    steps.sort(key=lambda s: (s.role == "exit-handler", s.started or "", s.display_name))
    return steps


def _recorded_by_sweep(parameters: dict[str, str], status: dict[str, Any], name: str,
                       labels: dict[str, str]) -> StepRecord | None:
    """The step of a run the catch-up sweep recorded without a pod (parameters `recorded-by`, `record`;
    docs/catch-up.md): Argo skipped the reaction step, the sweep's record speaks for it. A resubmitted
    copy of it (or a run the sweep did not name) gets the record as a duplicate of the sweep's run."""
    from steps.delivery import recorded_run_record

    record = recorded_run_record(parameters, name=name, labels=labels)
    if record is None:
        return None
    data = _object(record.get("data"))
    outcome = data.get("outcome") if data.get("outcome") in OUTCOMES else UNKNOWN
    return StepRecord(node="", display_name="recorded by the sweep (no pod)", template=str(data.get("reaction") or ""),
                      role="reaction", phase=str(status.get("phase") or ""), started=status.get("startedAt"),
                      finished=status.get("finishedAt"), attempts=0, outcome=str(outcome),
                      reason=None if outcome in OUTCOMES else "the sweep's record has no known outcome",
                      record=record, record_problem=None, outputs={})


def _primary_steps(steps: tuple[StepRecord, ...] | list[StepRecord], reaction: str) -> tuple[StepRecord, ...]:
    reaction_steps = [s for s in steps if s.role == "reaction"]
    own = [s for s in reaction_steps if s.reaction == reaction]
    if own:
        return tuple(own)
    if reaction_steps:
        return tuple(reaction_steps)
    return tuple(s for s in steps if s.role == "exit-handler")


def _joined(values: list[str]) -> str:
    distinct = sorted({v for v in values if v})
    return ",".join(distinct)


def _rank(outcome: str) -> int:
    return OUTCOME_PRECEDENCE.index(outcome) if outcome in OUTCOME_PRECEDENCE else 1


def parse_workflow(workflow: dict[str, Any], archived: bool = False) -> Run:
    """A `Run` from a Workflow object as the Argo API or archive returns it (never raises on content)."""
    workflow = _object(workflow)
    metadata, spec, status = (_object(workflow.get(k)) for k in ("metadata", "spec", "status"))
    labels = {str(k): str(v) for k, v in _object(metadata.get("labels")).items()}
    parameters = _parameters(_object(spec.get("arguments")).get("parameters"))
    template = labels.get(TEMPLATE_LABEL) or str(_object(spec.get("workflowTemplateRef")).get("name") or "")
    nodes = _object(status.get("nodes"))
    steps = _steps(nodes)
    swept = _recorded_by_sweep(parameters, status, str(metadata.get("name") or ""), labels)
    if swept is not None:
        steps = [swept, *steps]

    reaction = labels.get(REACTION_LABEL) or ""
    if not reaction:
        recorded = [s.reaction for s in steps if s.role == "reaction" and s.record]
        reaction = recorded[-1] if recorded else (template.removeprefix("gpuaas-") if template else UNKNOWN)
    primary = _primary_steps(steps, reaction)
    phase = str(status.get("phase") or "")
    message = status.get("message")

    reason: str | None
    exit_errors = [e for s in steps if s.role == "exit-handler" for e in s.errors]
    if primary:
        worst = min(primary, key=lambda s: _rank(s.outcome))
        outcome, reason = worst.outcome, worst.reason
        if worst.record is None and worst.role == "reaction" and exit_errors:
            # The step died without a record; record-outcome saw what Argo reported.
            reason = f"{reason}; exit handler recorded: {exit_errors[0]}"
    elif phase in FAILED_PHASES:
        outcome, reason = "failed", message or f"workflow {phase} before any step recorded an outcome"
    elif phase in ("", "Pending", "Running"):
        outcome, reason = UNKNOWN, f"workflow is {phase or 'not started'}; no step has recorded yet"
    else:
        outcome, reason = UNKNOWN, "no step of this workflow wrote an outcome or record"
    if phase in FAILED_PHASES and outcome != "failed":
        reason = message or (exit_errors[0] if exit_errors else None) or \
            f"workflow {phase} although its steps recorded {outcome}"
        outcome = "failed"
    if reaction not in KNOWN_REACTIONS and reason is None:
        reason = f"unknown reaction {reaction!r}"

    tenant = _joined([s.tenant for s in primary]) or labels.get(TENANT_LABEL, "") or parameters.get("tenant", "")
    namespace = _joined([s.workload_ref[0] for s in primary]) or parameters.get("namespace", "")
    workload = _joined([s.workload_ref[1] for s in primary]) or labels.get(WORKLOAD_LABEL, "") \
        or parameters.get("workload", "")
    return Run(
        workflow=str(metadata.get("name") or metadata.get("generateName") or ""),
        uid=str(metadata.get("uid") or ""), argo_namespace=str(metadata.get("namespace") or ""),
        template=template, reaction=reaction, phase=phase,
        started=status.get("startedAt") or metadata.get("creationTimestamp"),
        finished=status.get("finishedAt"), outcome=outcome, reason=reason, tenant=tenant,
        namespace=namespace, workload=workload, archived=archived, labels=labels, parameters=parameters,
        steps=tuple(steps), message=message, raw=workflow,
    )


def unreadable_run(uid: str, name: str, namespace: str, phase: str, started: str | None,
                   finished: str | None, problem: str, archived: bool = True) -> Run:
    """A run whose Workflow JSON could not be read at all: kept, with what the archive row still says."""
    return Run(workflow=name, uid=uid, argo_namespace=namespace, template="", reaction=UNKNOWN, phase=phase,
               started=started, finished=finished, outcome="failed" if phase in FAILED_PHASES else UNKNOWN,
               reason=problem, tenant="", namespace="", workload="", archived=archived, labels={},
               parameters={}, steps=())
