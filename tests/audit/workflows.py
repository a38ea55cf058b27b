"""Workflow objects shaped exactly as Argo stores them (validated strictly against Argo's swagger
by the stand-in server), for the audit tests: reaction runs with retries, the on-idle fan-out, and
the broken history an audit must still show (no outputs, non-JSON record, unknown reaction,
failed and running workflows)."""

from __future__ import annotations

import json
import sqlite3
import uuid
import zlib
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE archived_workflows (uid TEXT PRIMARY KEY, name TEXT, namespace TEXT, phase TEXT,
  started_at TEXT, finished_at TEXT, workflow TEXT);
CREATE TABLE archived_workflows_labels (uid TEXT, key TEXT, value TEXT, PRIMARY KEY (uid, key));
"""


def record(reaction: str, outcome: str, *, tenant: str | None, namespace: str | None, workload: str | None,
           time: str, actions: list[dict[str, Any]] | None = None, errors: list[str] | None = None,
           metrics: dict[str, float] | None = None, reasons: list[str] | None = None,
           event: dict[str, Any] | None = None) -> str:
    """An audit record (ARCHITECTURE section 3) as the `record` output parameter holds it."""
    return json.dumps({
        "specversion": "1.0", "id": uuid.uuid4().hex, "source": "gpuaas/steps",
        "type": f"io.gpuaas.reaction.{reaction}", "subject": f"{namespace}/{workload}", "time": time,
        "datacontenttype": "application/json",
        "data": {
            "reaction": reaction, "dryRun": False, "event": event,
            "workload": {"namespace": namespace, "name": workload, "uid": str(uuid.uuid4())} if workload else None,
            "tenant": tenant, "cohort": "gpu-pool" if tenant else None,
            "observed": {"workload": {"status": "admitted", "gpusAdmitted": 4.0}},
            "plan": {"actions": [{k: a[k] for k in ("action", "target", "reason") if k in a} for a in actions or []],
                     "reasons": reasons or []},
            "actions": actions or [], "outcome": outcome, "errors": errors or [], "metrics": metrics or {},
            "timings": {"observeSeconds": 0.01, "planSeconds": 0.0, "applySeconds": 0.02, "totalSeconds": 0.03},
        },
    }, separators=(",", ":"))


def _node_id(name: str, key: str) -> str:
    return f"{name}-{zlib.crc32(key.encode())}"


def _outputs(outcome: str | None, record_text: str | None, extra: dict[str, str] | None = None) -> dict[str, Any]:
    parameters = []
    if outcome is not None:
        parameters.append({"name": "outcome", "value": outcome})
        parameters.append({"name": "plan", "value": "{}"})
    if record_text is not None:
        parameters.append({"name": "record", "value": record_text})
    parameters += [{"name": k, "value": v} for k, v in (extra or {}).items()]
    return {"parameters": parameters} if parameters else {}


class WorkflowBuilder:
    """Builds one Workflow: metadata, spec.arguments, and status.nodes with step pods under Retry
    nodes (as the templates' retryStrategy makes Argo do), plus the exit handler."""

    def __init__(self, name: str, template: str, reaction: str | None, started: str, finished: str | None,
                 phase: str, parameters: dict[str, str], tenant_label: str = "", workload_label: str = "",
                 message: str | None = None) -> None:
        self.name = name
        self.started, self.finished = started, finished
        labels = {"workflows.argoproj.io/workflow-template": template, "events.argoproj.io/sensor": template,
                  "gpuaas.io/tenant": tenant_label, "gpuaas.io/workload": workload_label,
                  "workflows.argoproj.io/phase": phase}
        if reaction is not None:
            labels["gpuaas.io/reaction"] = reaction
        if phase not in ("Running", "Pending"):
            labels["workflows.argoproj.io/completed"] = "true"
        self.workflow: dict[str, Any] = {
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "generateName": f"{template}-", "namespace": "gpuaas",
                         "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, name)), "labels": labels,
                         "creationTimestamp": started},
            "spec": {"workflowTemplateRef": {"name": template},
                     "arguments": {"parameters": [{"name": k, "value": v} for k, v in parameters.items()]}},
            "status": {"phase": phase, "startedAt": started, "nodes": {}},
        }
        if finished:
            self.workflow["status"]["finishedAt"] = finished
        if message:
            self.workflow["status"]["message"] = message
        self.root = name
        self._node(name, name, "Steps", "main", phase, display=name)
        self.groups = 0

    def _node(self, node_id: str, name: str, kind: str, template: str, phase: str, display: str,
              outputs: dict[str, Any] | None = None, message: str | None = None) -> dict[str, Any]:
        node: dict[str, Any] = {"id": node_id, "name": name, "displayName": display, "type": kind,
                                "templateName": template, "templateScope": f"local/{self.name}", "phase": phase,
                                "startedAt": self.started}
        if self.finished:
            node["finishedAt"] = self.finished
        if outputs:
            node["outputs"] = outputs
        if message:
            node["message"] = message
        self.workflow["status"]["nodes"][node_id] = node
        return node

    def _child(self, parent: str, child: str) -> None:
        self.workflow["status"]["nodes"][parent].setdefault("children", []).append(child)

    def step(self, template: str, attempts: list[tuple[str, str | None, str | None]], display: str | None = None,
             extra_outputs: dict[str, str] | None = None, exit_handler: bool = False) -> WorkflowBuilder:
        """One step group with one retried step; `attempts` = [(pod phase, outcome, record), ...]."""
        display = display or template
        if exit_handler:
            group_name, parent = f"{self.name}.onExit[0]", self.name + ".onExit"
            handler_id = _node_id(self.name, "onExit")
            self._node(handler_id, parent, "Steps", "exit-handler", attempts[-1][0], display=parent)
            group_parent = handler_id
        else:
            group_name = f"{self.name}[{self.groups}]"
            self.groups += 1
            group_parent = self.root
        group_id = _node_id(self.name, group_name)
        if group_id not in self.workflow["status"]["nodes"]:
            self._node(group_id, group_name, "StepGroup", "main", attempts[-1][0], display=group_name[len(self.name):])
            self._child(group_parent, group_id)
        retry_name = f"{group_name}.{display}"
        retry_id = _node_id(self.name, retry_name)
        final_phase, final_outcome, final_record = attempts[-1]
        self._node(retry_id, retry_name, "Retry", template, final_phase, display=display,
                   outputs=_outputs(final_outcome, final_record, extra_outputs))
        self._child(group_id, retry_id)
        for index, (phase, outcome, record_text) in enumerate(attempts):
            pod_id = _node_id(self.name, f"{retry_name}({index})")
            self._node(pod_id, f"{retry_name}({index})", "Pod", template, phase, display=f"{display}({index})",
                       outputs=_outputs(outcome, record_text, extra_outputs),
                       message="Error (exit code 75)" if phase == "Failed" else None)
            self._child(retry_id, pod_id)
        return self

    def build(self) -> dict[str, Any]:
        return self.workflow


def write_archive(path: Path, workflows: list[dict[str, Any]], broken_rows: list[tuple[str, str]] = ()) -> Path:
    """A run archive per ARCHITECTURE section 6, written with plain SQL (independent of the engine's
    writer); `broken_rows` adds (uid, name) rows whose workflow column is not JSON."""
    db = sqlite3.connect(path)
    db.executescript(SCHEMA)
    for workflow in workflows:
        metadata, status = workflow["metadata"], workflow.get("status") or {}
        db.execute("INSERT INTO archived_workflows VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (metadata["uid"], metadata["name"], metadata["namespace"], status.get("phase"),
                    status.get("startedAt"), status.get("finishedAt"), json.dumps(workflow)))
        db.executemany("INSERT INTO archived_workflows_labels VALUES (?, ?, ?)",
                       [(metadata["uid"], k, v) for k, v in (metadata.get("labels") or {}).items()])
    for uid, name in broken_rows:
        db.execute("INSERT INTO archived_workflows VALUES (?, ?, 'gpuaas', 'Succeeded', '2026-11-30T09:00:00Z', "
                   "'2026-11-30T09:00:01Z', ?)", (uid, name, '{"metadata": {"name": truncated'))
    db.commit()
    db.close()
    return path


def params(namespace: str = "", workload: str = "", tenant: str = "", dry_run: str = "false",
           event: str = "") -> dict[str, str]:
    return {"namespace": namespace, "workload": workload, "event": event, "dry-run": dry_run, "tenant": tenant}


def history() -> dict[str, dict[str, Any]]:
    """A day of history over three tenants, including every kind of broken run, by name."""
    runs: dict[str, dict[str, Any]] = {}

    def add(builder: WorkflowBuilder) -> None:
        runs[builder.name] = builder.build()

    t = "2026-11-30T08:00:00Z"
    admitted = WorkflowBuilder("gpuaas-on-admitted-a1b2c", "gpuaas-on-admitted", "on-admitted", t,
                               "2026-11-30T08:00:04Z", "Succeeded",
                               params("team-research", "statefulset-nb-alice-1", "research"), "research",
                               "statefulset-nb-alice-1")
    admitted.step("on-admitted", [
        ("Failed", "failed", record("on-admitted", "failed", tenant="research", namespace="team-research",
                                    workload="statefulset-nb-alice-1", time=t, errors=["503 from the API server"])),
        ("Succeeded", "applied", record(
            "on-admitted", "applied", tenant="research", namespace="team-research", workload="statefulset-nb-alice-1",
            time=t, reasons=["queue wait 12s"], metrics={"queueWaitSeconds": 12.0},
            event={"id": "e-1", "type": "resource", "source": "gpuaas-workloads", "subject": "workloads",
                   "time": t, "kind": "UPDATE"},
            actions=[{"action": "create-scaled-object",
                      "target": {"kind": "ScaledObject", "namespace": "team-research", "name": "gpuaas-nb-alice"},
                      "reason": "no ScaledObject scales the owner yet", "before": None,
                      "after": {"name": "gpuaas-nb-alice", "minReplicaCount": 0}, "result": "applied"}])),
    ])
    admitted.step("record-outcome", [("Succeeded", "no-op", record(
        "on-admitted", "no-op", tenant="research", namespace="team-research", workload="statefulset-nb-alice-1",
        time=t, reasons=["workflow status Succeeded: the reaction step recorded its own outcome"]))],
        exit_handler=True)
    add(admitted)

    t = "2026-11-30T10:00:00Z"
    idle = WorkflowBuilder("gpuaas-on-idle-x9y8z", "gpuaas-on-idle", "on-idle", t, "2026-11-30T10:00:09Z",
                           "Succeeded", params("team-vision"))
    idle.step("idle-alerts", [("Succeeded", "applied", record("idle-alerts", "applied", tenant=None, namespace=None,
                                                              workload=None, time=t, metrics={"items": 2}))])
    for index, (ns, workload, tenant, outcome, metrics, errors) in enumerate([
        ("team-vision", "raycluster-ray-vision-1", "vision", "applied",
         {"gpusReleased": 4, "gpuHoursFreedPerHour": 4.0, "gpuHoursReclaimed": 2.5}, []),
        ("team-serving", "inferenceservice-llm-1", "serving", "failed", {},
         ["patch InferenceService team-serving/llm: 409 Conflict after 5 attempts"]),
    ]):
        idle.groups = 1
        idle.step("on-idle", [("Succeeded" if outcome != "failed" else "Failed", outcome, record(
            "on-idle", outcome, tenant=tenant, namespace=ns, workload=workload, time=t, metrics=metrics,
            errors=errors,
            actions=[{"action": "release", "target": {"kind": "RayCluster", "namespace": ns, "name": workload},
                      "reason": "idle 30m", "before": {"spec.suspend": False}, "after": {"spec.suspend": True},
                      "result": "applied" if outcome == "applied" else "failed",
                      **({"error": errors[0]} if errors else {})}]))],
            display=f'on-idle({index}:{{"namespace":"{ns}","workload":"{workload}"}})',
            extra_outputs={"gpus-released": str(int(metrics.get("gpusReleased", 0))), "tenant": tenant})
    add(idle)

    t = "2026-11-30T11:00:00Z"
    finished = WorkflowBuilder("gpuaas-on-finished-q1w2e", "gpuaas-on-finished", "on-finished", t,
                               "2026-11-30T11:00:02Z", "Succeeded",
                               params("team-vision", "job-eval-1", "vision"), "vision", "job-eval-1")
    finished.step("on-finished", [("Succeeded", "no-op", record(
        "on-finished", "no-op", tenant="vision", namespace="team-vision", workload="job-eval-1", time=t,
        metrics={"gpuHoursUsed": 1.5}, reasons=["Workload finished (Succeeded)"]))])
    add(finished)

    t = "2026-11-30T12:00:00Z"
    crashed = WorkflowBuilder("gpuaas-release-workers-c4r5t", "gpuaas-release-workers", "release-workers", t,
                              "2026-11-30T12:00:30Z", "Failed", params("team-research", "pytorchjob-train-1"),
                              message="child 'gpuaas-release-workers-c4r5t-1' failed")
    crashed.step("release-workers", [("Failed", None, None)])  # pod died before writing any output
    crashed.step("record-outcome", [("Succeeded", "failed", record(
        "record-outcome", "failed", tenant=None, namespace="team-research", workload="pytorchjob-train-1", time=t,
        errors=["step release-workers: OOMKilled (exit code 137)"]))], exit_handler=True)
    add(crashed)

    t = "2026-11-30T13:00:00Z"
    garbled = WorkflowBuilder("gpuaas-resume-workers-g7h8j", "gpuaas-resume-workers", "resume-workers", t,
                              "2026-11-30T13:00:01Z", "Succeeded", params("team-research", "pytorchjob-train-1"))
    garbled.step("resume-workers", [("Succeeded", "applied", "resumed OK (not JSON)")])
    add(garbled)

    t = "2026-11-30T14:00:00Z"
    stranger = WorkflowBuilder("gpuaas-on-preempted-m3n4b", "gpuaas-on-preempted", "on-preempted", t,
                               "2026-11-30T14:00:01Z", "Succeeded", params("team-serving", "deployment-web-1"))
    stranger.step("on-preempted", [("Succeeded", "no-op", record(
        "on-preempted", "no-op", tenant="serving", namespace="team-serving", workload="deployment-web-1", time=t))])
    add(stranger)

    t = "2026-11-30T15:00:00Z"
    running = WorkflowBuilder("gpuaas-provision-quota-r6t7y", "gpuaas-provision-quota", "provision-quota", t, None,
                              "Running", params(tenant="research"))
    running.workflow["status"]["nodes"] = {}
    add(running)
    return runs
