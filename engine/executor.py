"""The workflow executor: runs the rendered WorkflowTemplates as the Argo controller would.

A submitted Workflow (what a Sensor trigger or a hand submission creates: `spec.workflowTemplateRef`
plus `spec.arguments`) is resolved against its WorkflowTemplate, then executed: arguments and
parameters, `steps` groups with `withParam`/`withItems` fan-out and `when`, script and container
templates run through a StepRunner, `retryStrategy` (limit, retryPolicy, expression on
`lastRetry.exitCode`, backoff scaled to demo time), the `onExit` handler with `workflow.status` and
`workflow.failures`, and `synchronization.mutexes` at workflow and template level (names
substituted before the lock is taken). The result is the Workflow object as Argo fills it (labels,
status.phase/startedAt/finishedAt, nodes with outputs.parameters) and goes to the run archive.

Not implemented (rejected with a clear error when a template uses them): `dag`, `templateRef`,
`{{=expr}}` tags, artifacts, memoization. `activeDeadlineSeconds`, `podGC`, `ttlStrategy` and
workflow `metrics` are accepted and ignored (they matter only to a real cluster).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import json
import logging
import secrets
import string
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.archive import RunArchive
from engine.expressions import (
    UnresolvedTag,
    UnsupportedExpression,
    duration_seconds,
    evaluate,
    item_scope,
    item_string,
    substitute,
)
from engine.step_runner import StepRunner

DEFAULT_OUTPUTS_DIR = "/tmp/gpuaas/outputs"
TEMPLATE_LABEL = "workflows.argoproj.io/workflow-template"
PHASE_LABEL = "workflows.argoproj.io/phase"
COMPLETED_LABEL = "workflows.argoproj.io/completed"

Clock = Callable[[], datetime]
log = logging.getLogger(__name__)


class SubmissionRejected(ValueError):
    """Argo would refuse the submission (unknown template, missing or out-of-enum parameter)."""


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fnv32a(text: str) -> int:
    value = 0x811C9DC5
    for byte in text.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def node_id(workflow_name: str, node_name: str) -> str:
    """Argo's node id: the workflow name for the root, else `<workflow>-<fnv32a(node name)>`."""
    return workflow_name if node_name == workflow_name else f"{workflow_name}-{_fnv32a(node_name)}"


class Mutexes:
    """Named mutexes shared by all workflows of one engine (Argo: `<namespace>/Mutex/<name>`)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self.holders: dict[str, str] = {}
        self.history: list[tuple[str, str, str]] = []  # (mutex, holder, "acquired"|"released")

    def lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def acquire(self, key: str, holder: str) -> None:
        owner = holder.split("/", 1)[0]
        with self._guard:
            current = self.holders.get(key, "")
        if current and current.split("/", 1)[0] == owner:
            raise SubmissionRejected(f"synchronization: mutex {key} is already held by workflow {owner}; taking it "
                                     "again at template level would wait forever (in Argo too)")
        self.lock(key).acquire()
        with self._guard:
            self.holders[key] = holder
            self.history.append((key, holder, "acquired"))

    @contextlib.contextmanager
    def holding(self, keys: list[str], holder: str) -> Iterator[None]:
        """Hold every mutex in `keys` (sorted, so two holders never wait on each other) for the block."""
        taken: list[str] = []
        try:
            for key in sorted(keys):
                self.acquire(key, holder)
                taken.append(key)
            yield
        finally:
            for key in reversed(taken):
                self.release(key, holder)

    def release(self, key: str, holder: str) -> None:
        with self._guard:
            self.holders.pop(key, None)
            self.history.append((key, holder, "released"))
        self.lock(key).release()


@dataclass
class NodeResult:
    phase: str
    outputs: dict[str, str] = field(default_factory=dict)
    exit_code: int | None = None
    message: str = ""


@dataclass
class ExecutorSettings:
    """How steps run here: the env every step gets and how fast demo time runs."""

    env: dict[str, str] = field(default_factory=dict)
    time_scale: float = 1.0  # demo seconds per wall second: backoff and suspend sleep 1/time_scale
    workdir: Path | None = None
    keep_workdirs: bool = False


class WorkflowExecutor:
    """Executes Workflows created from the rendered WorkflowTemplates; archives every finished run."""

    def __init__(self, templates: Mapping[str, dict[str, Any]], runner: StepRunner, *,
                 archive: RunArchive | None = None, settings: ExecutorSettings | None = None,
                 clock: Clock | None = None, mutexes: Mutexes | None = None, max_parallel: int = 16) -> None:
        self.templates = dict(templates)
        self.runner = runner
        self.archive = archive
        self.settings = settings or ExecutorSettings()
        self.clock = clock or (lambda: datetime.now(UTC))
        self.mutexes = mutexes or Mutexes()
        self.listeners: list[Callable[[dict[str, Any]], None]] = []
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_parallel,
                                                           thread_name_prefix="workflow")
        self._pending: set[concurrent.futures.Future[dict[str, Any]]] = set()
        self._pending_lock = threading.Lock()

    # -- submission -------------------------------------------------------------------------------

    def submit(self, workflow: dict[str, Any]) -> dict[str, Any]:
        """Run one Workflow to completion (synchronously) and return it as archived."""
        run = _WorkflowRun(self, self.prepare(workflow))
        return run.execute()

    def submit_async(self, workflow: dict[str, Any]) -> concurrent.futures.Future[dict[str, Any]]:
        """Accept a Workflow now (validated, named) and run it on the executor's pool."""
        return self.run_prepared_async(self.prepare(workflow))

    def run_prepared_async(self, prepared: dict[str, Any]) -> concurrent.futures.Future[dict[str, Any]]:
        """Run a Workflow that `prepare` already accepted (named, validated) on the pool."""
        future = self._pool.submit(lambda: _WorkflowRun(self, prepared).execute())
        with self._pending_lock:
            self._pending.add(future)
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: concurrent.futures.Future[dict[str, Any]]) -> None:
        with self._pending_lock:
            self._pending.discard(future)

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait until every accepted workflow has finished (True) or the timeout passed (False)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._pending_lock:
                pending = set(self._pending)
            if not pending:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            concurrent.futures.wait(pending, timeout=remaining)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)

    def prepare(self, workflow: dict[str, Any]) -> dict[str, Any]:
        """Validate and name a submitted Workflow as the Argo API server would on create."""
        workflow = copy.deepcopy(workflow)
        if workflow.get("kind", "Workflow") != "Workflow":
            raise SubmissionRejected(f"kind: expected Workflow, found {workflow.get('kind')!r}")
        spec = workflow.setdefault("spec", {})
        reference = spec.get("workflowTemplateRef") or {}
        template_name = reference.get("name")
        if not template_name:
            raise SubmissionRejected("spec.workflowTemplateRef.name: expected the name of a WorkflowTemplate, "
                                     "found none (the engine runs rendered templates only)")
        if reference.get("clusterScope"):
            raise SubmissionRejected("spec.workflowTemplateRef.clusterScope: ClusterWorkflowTemplates are "
                                     "not rendered by this project")
        template = self.templates.get(template_name)
        if template is None:
            raise SubmissionRejected(f"spec.workflowTemplateRef.name: WorkflowTemplate {template_name!r} not "
                                     f"found (rendered: {', '.join(sorted(self.templates))})")
        metadata = workflow.setdefault("metadata", {})
        metadata.setdefault("namespace", template["metadata"].get("namespace", "gpuaas"))
        if not metadata.get("name"):
            prefix = metadata.get("generateName") or f"{template_name}-"
            suffix = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(5))
            metadata["name"] = prefix + suffix
        if not (metadata.get("uid") and metadata.get("creationTimestamp")):
            # A Workflow created through the API server (engine.cron.ApiWorkflowIntake) keeps its identity.
            metadata["uid"] = str(uuid.uuid4())
            metadata["creationTimestamp"] = rfc3339(self.clock())
        labels = metadata.setdefault("labels", {})
        labels[TEMPLATE_LABEL] = template_name
        spec["arguments"] = {"parameters": self._resolve_arguments(template, spec)}
        return workflow

    @staticmethod
    def _resolve_arguments(template: dict[str, Any], spec: dict[str, Any]) -> list[dict[str, Any]]:
        """Template defaults overridden by the submitted arguments; enum and required checked."""
        declared = (template.get("spec", {}).get("arguments") or {}).get("parameters") or []
        given = {p.get("name"): p for p in (spec.get("arguments") or {}).get("parameters") or []}
        unknown = set(given) - {p.get("name") for p in declared}
        resolved: list[dict[str, Any]] = []
        for parameter in declared:
            merged = {**parameter, **{k: v for k, v in given.get(parameter["name"], {}).items() if k != "name"}}
            value = merged.get("value", merged.get("default"))
            if value is None:
                raise SubmissionRejected(f"spec.arguments.parameters.{parameter['name']}.value is required "
                                         f"by WorkflowTemplate {template['metadata']['name']}; give a value")
            value = value if isinstance(value, str) else json.dumps(value)
            enum = merged.get("enum")
            if enum and value not in [str(v) for v in enum]:
                raise SubmissionRejected(f"spec.arguments.parameters.{parameter['name']}: value {value!r} is "
                                         f"not in enum {enum}")
            merged["value"] = value
            resolved.append(merged)
        for name in sorted(n for n in unknown if n):
            value = given[name].get("value", "")
            resolved.append({"name": name, "value": value if isinstance(value, str) else json.dumps(value)})
        return resolved


class _WorkflowRun:
    """One Workflow's execution: its nodes, its scope, its temp dir."""

    def __init__(self, executor: WorkflowExecutor, workflow: dict[str, Any]) -> None:
        self.executor = executor
        self.workflow = workflow
        self.name: str = workflow["metadata"]["name"]
        self.namespace: str = workflow["metadata"]["namespace"]
        self.template_object = executor.templates[workflow["spec"]["workflowTemplateRef"]["name"]]
        self.spec: dict[str, Any] = copy.deepcopy(self.template_object.get("spec") or {})
        self.templates = {t["name"]: t for t in self.spec.get("templates") or []}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.nodes_lock = threading.Lock()
        self.failures: list[dict[str, Any]] = []
        parameters = workflow["spec"]["arguments"]["parameters"]
        self.globals: dict[str, str] = {
            "workflow.name": self.name,
            "workflow.namespace": self.namespace,
            "workflow.uid": workflow["metadata"]["uid"],
            "workflow.creationTimestamp": workflow["metadata"]["creationTimestamp"],
            "workflow.serviceAccountName": self.spec.get("serviceAccountName", "default"),
            "workflow.parameters": json.dumps([{"name": p["name"], "value": p["value"]} for p in parameters]),
        }
        for parameter in parameters:
            self.globals[f"workflow.parameters.{parameter['name']}"] = parameter["value"]
        self.workdir: Path | None = None

    # -- top level --------------------------------------------------------------------------------

    def execute(self) -> dict[str, Any]:
        status: dict[str, Any] = {"phase": "Pending", "nodes": self.nodes,
                                  "storedWorkflowTemplateSpec": copy.deepcopy(self.spec)}
        self.workflow["status"] = status
        base = self.executor.settings.workdir
        tmp = tempfile.TemporaryDirectory(prefix=f"{self.name}-", dir=str(base) if base else None,
                                          ignore_cleanup_errors=True)
        self.workdir = Path(tmp.name)
        try:
            self._apply_workflow_metadata(self.workflow["metadata"])
            mutex_keys = self._mutex_keys(self.spec.get("synchronization"), self.globals)
            with self.executor.mutexes.holding(mutex_keys, self.name):  # Pending until the lock is ours
                self._run(status)
        except Exception as error:  # noqa: BLE001 - as the controller: whatever broke, the run is Error
            status["phase"] = "Error"
            status["message"] = f"{type(error).__name__}: {error}" if not isinstance(
                error, (UnresolvedTag, UnsupportedExpression, SubmissionRejected)) else str(error)
        finally:
            if not self.executor.settings.keep_workdirs:
                tmp.cleanup()
        status.setdefault("startedAt", rfc3339(self.executor.clock()))
        status["finishedAt"] = rfc3339(self.executor.clock())
        pods = [n for n in self.nodes.values() if n["type"] == "Pod"]
        status["progress"] = f"{sum(n['phase'] == 'Succeeded' for n in pods)}/{len(pods)}"
        labels = self.workflow["metadata"]["labels"]
        labels[PHASE_LABEL] = status["phase"]
        labels[COMPLETED_LABEL] = "true"
        if self.executor.archive is not None:
            self.executor.archive.store(self.workflow)
        for listener in list(self.executor.listeners):
            listener(self.workflow)
        return self.workflow

    def _run(self, status: dict[str, Any]) -> None:
        """Entrypoint, then the exit handler with `workflow.status` and `workflow.failures`."""
        status["phase"] = "Running"
        status["startedAt"] = rfc3339(self.executor.clock())
        self.workflow["metadata"]["labels"][PHASE_LABEL] = "Running"
        entrypoint = self.workflow["spec"].get("entrypoint") or self.spec.get("entrypoint")
        arguments = self.workflow["spec"]["arguments"]["parameters"]
        if not entrypoint or entrypoint not in self.templates:
            result = NodeResult("Error", message=f"spec.entrypoint: template {entrypoint!r} not found")
            self._root_node(entrypoint or "", result)
        else:
            # Argo passes spec.arguments to the entrypoint (and the exit handler) as their arguments
            result = self._run_template(entrypoint, arguments, self.name, self.name, parent=None, scope={})
        phase = result.phase if result.phase in ("Succeeded", "Failed", "Error") else "Failed"
        on_exit = self.workflow["spec"].get("onExit") or self.spec.get("onExit")
        if on_exit:
            exit_scope = {"workflow.status": phase,
                          "workflow.failures": json.dumps(self.failures, separators=(",", ":"))}
            exit_result = self._run_template(on_exit, arguments, f"{self.name}.onExit", f"{self.name}.onExit",
                                             parent=None, scope=exit_scope)
            if phase == "Succeeded" and exit_result.phase != "Succeeded":
                phase = exit_result.phase
        status["phase"] = phase
        if result.message and phase != "Succeeded":
            status["message"] = result.message

    def _apply_workflow_metadata(self, metadata: dict[str, Any]) -> None:
        """`spec.workflowMetadata` labels/annotations (substituted with workflow parameters)."""
        workflow_metadata = self.spec.get("workflowMetadata") or {}
        labels = metadata.setdefault("labels", {})
        for key, value in (workflow_metadata.get("labels") or {}).items():
            labels[key] = substitute(str(value), self.globals)
        variables = {key: value for key, value in self.globals.items()}
        for key, source in (workflow_metadata.get("labelsFrom") or {}).items():
            labels[key] = str(evaluate(source["expression"], variables))
        annotations = workflow_metadata.get("annotations") or {}
        if annotations:
            metadata.setdefault("annotations", {}).update(
                {key: substitute(str(value), self.globals) for key, value in annotations.items()})

    def _mutex_keys(self, synchronization: dict[str, Any] | None, scope: Mapping[str, str]) -> list[str]:
        if not synchronization:
            return []
        if "mutex" in synchronization or "semaphore" in synchronization:
            raise SubmissionRejected("synchronization.mutex/semaphore: removed in Argo 4; use mutexes: [...]")
        keys = []
        for mutex in synchronization.get("mutexes") or []:
            name = substitute(mutex.get("name", ""), scope)
            keys.append(f"{mutex.get('namespace') or self.namespace}/Mutex/{name}")
        return sorted(set(keys))

    # -- nodes ------------------------------------------------------------------------------------

    def _add_node(self, name: str, display: str, node_type: str, template: str, parent: str | None) -> dict:
        node = {"id": node_id(self.name, name), "name": name, "displayName": display, "type": node_type,
                "templateName": template, "templateScope": f"local/{self.name}", "phase": "Running",
                "startedAt": rfc3339(self.executor.clock())}
        with self.nodes_lock:
            self.nodes[node["id"]] = node
            if parent is not None:
                self.nodes[parent].setdefault("children", []).append(node["id"])
        return node

    def _finish_node(self, node: dict[str, Any], result: NodeResult) -> None:
        node["phase"] = result.phase
        node["finishedAt"] = rfc3339(self.executor.clock())
        if result.message:
            node["message"] = result.message
        if result.outputs or result.exit_code is not None:
            outputs: dict[str, Any] = {}
            if result.outputs:
                outputs["parameters"] = [{"name": k, "value": v} for k, v in result.outputs.items()]
            if result.exit_code is not None:
                outputs["exitCode"] = str(result.exit_code)
            node["outputs"] = outputs
        if result.phase in ("Failed", "Error") and node["type"] == "Pod":
            self.failures.append({"displayName": node["displayName"], "message": result.message,
                                  "templateName": node["templateName"], "phase": result.phase,
                                  "podName": node["id"], "finishedAt": node["finishedAt"]})  # as Argo reports

    def _root_node(self, template: str, result: NodeResult) -> None:
        node = self._add_node(self.name, self.name, "Steps", template, None)
        self._finish_node(node, result)

    # -- templates --------------------------------------------------------------------------------

    def _run_template(self, template_name: str, arguments: list[dict[str, Any]], node_name: str,
                      display: str, parent: str | None, scope: Mapping[str, str]) -> NodeResult:
        template = self.templates.get(template_name)
        if template is None:
            raise SubmissionRejected(f"template {template_name!r}: not found in WorkflowTemplate "
                                     f"{self.template_object['metadata']['name']}")
        local = {**self.globals, **scope}
        inputs = self._resolve_inputs(template, arguments, local)
        local.update({f"inputs.parameters.{p['name']}": p["value"] for p in inputs})
        local["inputs.parameters"] = json.dumps(inputs, separators=(",", ":"))
        mutex_keys = self._mutex_keys(template.get("synchronization"), local)
        with self.executor.mutexes.holding(mutex_keys, f"{self.name}/{node_name}"):
            retry = template.get("retryStrategy")
            if retry:
                return self._run_with_retries(template, inputs, local, node_name, display, parent, retry)
            return self._run_once(template, inputs, local, node_name, display, parent)

    @staticmethod
    def _resolve_inputs(template: dict[str, Any], arguments: list[dict[str, Any]],
                        scope: Mapping[str, str]) -> list[dict[str, Any]]:
        given = {a.get("name"): a for a in arguments}
        resolved = []
        for declared in (template.get("inputs") or {}).get("parameters") or []:
            name = declared["name"]
            value = given.get(name, {}).get("value", declared.get("value", declared.get("default")))
            if value is None:
                raise UnresolvedTag(f"template {template['name']}: input parameter {name!r} has no value "
                                    "(no argument and no default)")
            value = value if isinstance(value, str) else json.dumps(value)
            parameter = {k: v for k, v in declared.items() if k not in ("value", "valueFrom")}
            parameter["value"] = substitute(value, scope)
            resolved.append(parameter)
        return resolved

    def _run_with_retries(self, template: dict[str, Any], inputs: list[dict[str, Any]], scope: dict[str, str],
                          node_name: str, display: str, parent: str | None,
                          retry: dict[str, Any]) -> NodeResult:
        node = self._add_node(node_name, display, "Retry", template["name"], parent)
        limit = int(substitute(str(retry.get("limit", 0)), scope) or 0)
        expression = retry.get("expression")
        policy = retry.get("retryPolicy") or ("Always" if expression else "OnFailure")
        backoff = retry.get("backoff") or {}
        attempt = 0
        started = time.monotonic()
        while True:
            result = self._run_once(template, inputs, {**scope, "retries": str(attempt)}, f"{node_name}({attempt})",
                                    f"{display}({attempt})", node["id"])
            if result.phase == "Succeeded" or attempt >= limit:
                break
            if not self._should_retry(result, policy, expression, started):
                break
            delay = self._backoff_seconds(backoff, attempt)
            if delay > 0:
                time.sleep(delay / max(self.executor.settings.time_scale, 1e-9))
            attempt += 1
        self._finish_node(node, NodeResult(result.phase, dict(result.outputs), None, result.message))
        return result

    @staticmethod
    def _should_retry(result: NodeResult, policy: str, expression: str | None, started: float) -> bool:
        allowed = {"Always": result.phase in ("Failed", "Error"), "OnFailure": result.phase == "Failed",
                   "OnError": result.phase == "Error",
                   "OnTransientError": result.phase == "Error"}.get(policy)
        if allowed is None:
            raise UnsupportedExpression(f"retryStrategy.retryPolicy: expected Always, OnFailure, OnError or "
                                        f"OnTransientError, found {policy!r}")
        if not allowed:
            return False
        if not expression:
            return True
        # Argo's controller gives an attempt without an exit code (pod evicted or deleted) "-1".
        variables = {"lastRetry.exitCode": "-1" if result.exit_code is None else str(result.exit_code),
                     "lastRetry.status": result.phase, "lastRetry.message": result.message,
                     "lastRetry.duration": str(int(time.monotonic() - started))}
        return bool(evaluate(expression, variables))

    @staticmethod
    def _backoff_seconds(backoff: dict[str, Any], attempt: int) -> float:
        if not backoff:
            return 0.0
        delay = duration_seconds(backoff.get("duration")) * float(backoff.get("factor") or 1) ** attempt
        cap = backoff.get("maxDuration")
        return min(delay, duration_seconds(cap)) if cap else delay

    def _run_once(self, template: dict[str, Any], inputs: list[dict[str, Any]], scope: dict[str, str],
                  node_name: str, display: str, parent: str | None) -> NodeResult:
        for unsupported in ("dag", "resource", "data", "http", "plugin", "containerSet"):
            if unsupported in template:
                raise SubmissionRejected(f"template {template['name']}: `{unsupported}` templates are not "
                                         "supported by the local engine")
        if "steps" in template:
            node_type = "Steps"
        elif "suspend" in template:
            node_type = "Suspend"
        else:
            node_type = "Pod"
        if parent is None and node_name == self.name:
            node = self._add_node(node_name, display, node_type, template["name"], None)
        else:
            node = self._add_node(node_name, display, node_type, template["name"], parent)
        node["inputs"] = {"parameters": inputs} if inputs else {}
        try:
            if node_type == "Steps":
                result = self._run_steps(template, scope, node)
            elif node_type == "Suspend":
                seconds = duration_seconds(substitute(str(template["suspend"].get("duration", "0")), scope))
                time.sleep(seconds / max(self.executor.settings.time_scale, 1e-9))
                result = NodeResult("Succeeded")
            else:
                result = self._run_pod(template, scope, node)
        except (UnresolvedTag, UnsupportedExpression) as error:
            result = NodeResult("Error", message=str(error))
        self._finish_node(node, result)
        return result

    def _run_steps(self, template: dict[str, Any], scope: dict[str, str], node: dict[str, Any]) -> NodeResult:
        local = dict(scope)
        for index, group in enumerate(template["steps"]):
            group_name = f"{node['name']}[{index}]"
            group_node = self._add_node(group_name, f"[{index}]", "StepGroup", template["name"], node["id"])
            results = self._run_group(group, local, group_name, group_node["id"])
            failed = [(step, r) for step, r in results if r.phase in ("Failed", "Error")
                      and not (step.get("continueOn") or {}).get("failed")]
            self._finish_node(group_node, NodeResult("Failed" if failed else "Succeeded"))
            if failed:
                step, result = failed[0]
                return NodeResult(result.phase, message=f"child {step['name']!r} {result.phase.lower()}: "
                                  f"{result.message}".rstrip(": "))
        outputs = self._template_outputs_from_scope(template, local)
        return NodeResult("Succeeded", outputs=outputs)

    @staticmethod
    def _template_outputs_from_scope(template: dict[str, Any], scope: Mapping[str, str]) -> dict[str, str]:
        outputs = {}
        for parameter in (template.get("outputs") or {}).get("parameters") or []:
            source = (parameter.get("valueFrom") or {}).get("parameter")
            if source:
                outputs[parameter["name"]] = substitute(source, scope)
        return outputs

    def _run_group(self, group: list[dict[str, Any]], scope: dict[str, str], group_name: str,
                   group_id: str) -> list[tuple[dict[str, Any], NodeResult]]:
        """Run one parallel step group; afterwards publish `steps.<name>.*` into `scope`."""
        jobs: list[tuple[dict[str, Any], list[tuple[str, str, dict[str, str]]]]] = []
        for step in group:
            items = self._step_items(step, scope)
            if items == []:  # Argo marks a fan-out over nothing as skipped
                expansions = []
            elif items is None:
                expansions = [(f"{group_name}.{step['name']}", step["name"], {})]
            else:
                expansions = [(f"{group_name}.{step['name']}({i}:{item_label(item)})",
                               f"{step['name']}({i}:{item_label(item)})", item_scope(item))
                              for i, item in enumerate(items)]
            jobs.append((step, expansions))

        def run_one(step: dict[str, Any], name: str, display: str, extra: dict[str, str]) -> NodeResult:
            local = {**scope, **extra}
            when = step.get("when")
            if when:
                condition = substitute(when, local, strict_prefixes=("steps.", "inputs.", "item"))
                if not evaluate(condition, {}, bare_words_are_strings=True):
                    skipped = self._add_node(name, display, "Skipped", step.get("template", ""), group_id)
                    result = NodeResult("Skipped", message=f"when '{condition}' evaluated false")
                    self._finish_node(skipped, result)
                    return result
            arguments = substitute((step.get("arguments") or {}).get("parameters") or [], local,
                                   strict_prefixes=("steps.", "inputs.", "item", "workflow.parameters."))
            inherited = {k: v for k, v in scope.items() if k.startswith("workflow.") and k not in self.globals}
            return self._run_template(step["template"], arguments, name, display, group_id, inherited)

        futures: list[tuple[dict[str, Any], list[concurrent.futures.Future[NodeResult]]]] = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="step") as pool:
            for step, expansions in jobs:
                futures.append((step, [pool.submit(run_one, step, n, d, e) for n, d, e in expansions]))
            collected = [(step, [f.result() for f in fs]) for step, fs in futures]

        results: list[tuple[dict[str, Any], NodeResult]] = []
        for (step, step_results), (_, expansions) in zip(collected, jobs, strict=True):
            name = step["name"]
            if not expansions:
                skipped = self._add_node(f"{group_name}.{name}", name, "Skipped", step.get("template", ""), group_id)
                self._finish_node(skipped, NodeResult("Skipped", message="Skipped, empty params"))
                scope[f"steps.{name}.status"] = "Skipped"
                results.append((step, NodeResult("Skipped")))
                continue
            fanned_out = len(expansions) != 1 or bool(expansions[0][2])
            if fanned_out:
                self._publish_fan_out(scope, name, step_results)
                worst = next((r for r in step_results if r.phase in ("Failed", "Error")), None)
                results.append((step, worst or NodeResult("Succeeded")))
            else:
                result = step_results[0]
                for key, value in result.outputs.items():
                    scope[f"steps.{name}.outputs.parameters.{key}"] = value
                scope[f"steps.{name}.status"] = result.phase
                if result.exit_code is not None:
                    scope[f"steps.{name}.exitCode"] = str(result.exit_code)
                results.append((step, result))
        return results

    @staticmethod
    def _publish_fan_out(scope: dict[str, str], name: str, results: list[NodeResult]) -> None:
        """Argo aggregates a fanned-out step's output parameter as a JSON list of the children's values."""
        keys = sorted({key for r in results for key in r.outputs})
        for key in keys:
            scope[f"steps.{name}.outputs.parameters.{key}"] = json.dumps([r.outputs.get(key) for r in results])
        scope[f"steps.{name}.status"] = ("Failed" if any(r.phase in ("Failed", "Error") for r in results)
                                         else "Succeeded")

    @staticmethod
    def _step_items(step: dict[str, Any], scope: Mapping[str, str]) -> list[Any] | None:
        if "withItems" in step:
            return list(substitute(step["withItems"], scope))
        if "withParam" in step:
            text = substitute(step["withParam"], scope, strict_prefixes=("steps.", "inputs.", "workflow."))
            try:
                items = json.loads(text)
            except json.JSONDecodeError as error:
                raise UnsupportedExpression(f"withParam of step {step['name']!r}: expected a JSON list, "
                                            f"found {text[:200]!r} ({error})") from error
            if not isinstance(items, list):
                raise UnsupportedExpression(f"withParam of step {step['name']!r}: expected a JSON list, "
                                            f"found {type(items).__name__}")
            return items
        return None

    # -- pods -------------------------------------------------------------------------------------

    def _run_pod(self, template: dict[str, Any], scope: dict[str, str], node: dict[str, Any]) -> NodeResult:
        body = template.get("script") or template.get("container")
        if body is None:
            raise SubmissionRejected(f"template {template['name']}: expected script, container or steps")
        body = substitute(body, scope, strict_prefixes=("inputs.", "workflow.parameters."))
        assert self.workdir is not None
        pod_dir = self.workdir / node["id"]
        outputs_dir = pod_dir / "outputs"
        outputs_dir.mkdir(parents=True, exist_ok=True)
        env = {e["name"]: str(e.get("value", "")) for e in body.get("env") or [] if "value" in e}
        for variable in body.get("env") or []:
            field_path = ((variable.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if field_path == "metadata.namespace":
                env[variable["name"]] = self.namespace
        outputs_root = env.get("GPUAAS_OUTPUTS_DIR", DEFAULT_OUTPUTS_DIR).rstrip("/")
        env.update(self.executor.settings.env)
        env["GPUAAS_OUTPUTS_DIR"] = str(outputs_dir)
        argv = [str(a) for a in (body.get("command") or [])] + [str(a) for a in (body.get("args") or [])]
        if "source" in template.get("script", {}) or "source" in body:
            script_path = pod_dir / "script"
            script_path.write_text(body.get("source", ""))
            argv.append(str(script_path))
        process = self.executor.runner.run(argv, env, pod_dir)
        phase = "Succeeded" if process.exit_code == 0 else "Failed"
        message = "" if process.exit_code == 0 else f"Error (exit code {process.exit_code})"
        outputs: dict[str, str] = {}
        for parameter in (template.get("outputs") or {}).get("parameters") or []:
            value_from = parameter.get("valueFrom") or {}
            path = value_from.get("path")
            if not path:
                continue
            local_path = self._local_path(path, outputs_root, outputs_dir, pod_dir)
            if local_path.is_file():
                outputs[parameter["name"]] = local_path.read_text()
            elif "default" in value_from:
                outputs[parameter["name"]] = str(value_from["default"])
            elif phase == "Succeeded":
                phase = "Error"
                message = (f"failed to read output parameter {parameter['name']!r}: {path} does not exist "
                           "(the step must write it; see ARCHITECTURE section 1)")
        node.setdefault("hostNodeName", "gpuaas-local-engine")
        if process.log:
            log.debug("step %s output:\n%s", node["name"], process.log[-4000:])
        return NodeResult(phase, outputs=outputs, exit_code=process.exit_code, message=message)

    @staticmethod
    def _local_path(path: str, outputs_root: str, outputs_dir: Path, pod_dir: Path) -> Path:
        """Map a path inside the 'pod' to this run's temp dir (each pod has its own filesystem)."""
        if path == outputs_root or path.startswith(outputs_root + "/"):
            return outputs_dir / path[len(outputs_root):].lstrip("/")
        return pod_dir / "root" / path.lstrip("/")


def item_label(item: Any) -> str:
    """The label of a fan-out child's name as Argo v4.0.5 makes it (operator.go processItem,
    generateNodeName): fmt.Sprint of the item, whose values print as Item.String does; an object
    is its sorted `key:value` pairs joined by commas; every parenthesis removed."""
    if isinstance(item, dict):
        label = ",".join(sorted(f"{key}:{item_string(value)}" for key, value in item.items()))
    elif isinstance(item, list):
        label = "[" + " ".join(item_string(value) for value in item) + "]"
    else:
        label = item_string(item)
    return label.replace("(", "").replace(")", "")
