"""The workflow-controller's two other ways in: CronWorkflows, and Workflows created through the API.

On a cluster the workflow-controller runs a CronWorkflow's `workflowSpec` on its schedule, and runs
any Workflow someone creates with the Kubernetes API (the catch-up sweep, `gpuaas-sweep`, creates
the runs it records or delivers that way). The local engine does both here:

- `CronRunner` submits each rendered CronWorkflow's `workflowSpec` to the executor every period of
  the engine's clock (`time_scale` demo seconds per wall second), with `concurrencyPolicy: Forbid`
  (a pass still running skips the tick). Schedules of the form `*/N * * * *` and `* * * * *` only:
  every N minutes from the engine's start (Argo's cron aligns to the wall clock; the period is what
  the product relies on);
- `ApiWorkflowIntake` watches `workflows.argoproj.io` in the product's namespace on the engine's API
  server and runs every Workflow it finds there once, then writes back what Argo would for a
  finished run: the labels `workflows.argoproj.io/completed: "true"` and `.../phase`, and
  `status.phase` (the sweep reads those to tell a run in flight).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from typing import Any

from engine.executor import WorkflowExecutor
from engine.resource_watcher import ResourceWatcher, WatchedResource

log = logging.getLogger(__name__)

_EVERY = re.compile(r"^\*(?:/(\d+))?( \*){4}$")
COMPLETED_LABEL = "workflows.argoproj.io/completed"
PHASE_LABEL = "workflows.argoproj.io/phase"
CRON_LABEL = "workflows.argoproj.io/cron-workflow"


def period_minutes(schedule: str) -> int:
    """`*/N * * * *` -> N, `* * * * *` -> 1; anything else is an error naming what the engine runs."""
    match = _EVERY.match(schedule.strip())
    if not match:
        raise ValueError(f"CronWorkflow schedule {schedule!r}: the local engine runs `*/N * * * *` or `* * * * *` "
                         "only (every N minutes)")
    return int(match.group(1) or 1)


class CronRunner:
    """Runs the rendered CronWorkflows on the engine's clock (Forbid: no overlapping runs)."""

    def __init__(self, crons: list[dict[str, Any]], executor: WorkflowExecutor, time_scale: float = 1.0,
                 min_wall_seconds: float = 0.0) -> None:
        self.executor = executor
        self.time_scale = max(time_scale, 1e-6)
        self.min_wall_seconds = min_wall_seconds
        """A floor on the wall-clock period: a fast demo clock would otherwise run a pass every fraction of
        a second (the demo at 300x: every second, i.e. every 5 demo minutes)."""
        self.jobs = [(cron, period_minutes(s)) for cron in crons for s in (cron.get("spec") or {}).get("schedules") or []]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.runs = 0

    def start(self) -> None:
        for cron, minutes in self.jobs:
            thread = threading.Thread(target=self._loop, args=(cron, minutes), daemon=True,
                                      name=f"cron-{cron['metadata']['name']}")
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5)

    def _loop(self, cron: dict[str, Any], minutes: int) -> None:
        wall_period = max(minutes * 60.0 / self.time_scale, self.min_wall_seconds)
        running: Any = None
        while not self._stop.wait(wall_period):
            if running is not None and not running.done():
                continue  # concurrencyPolicy Forbid
            name = cron["metadata"]["name"]
            workflow = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                        "metadata": {"generateName": f"{name}-", "namespace": cron["metadata"].get("namespace"),
                                     "labels": {CRON_LABEL: name}},
                        "spec": dict(cron["spec"]["workflowSpec"])}
            try:
                running = self.executor.submit_async(workflow)
                self.runs += 1
            except Exception as error:  # noqa: BLE001 - a bad tick is logged, the next one tries again
                log.warning("CronWorkflow %s: not submitted: %s", name, error)


class ApiWorkflowIntake:
    """Runs the Workflows created through the engine's API server (each once), and marks them done there."""

    def __init__(self, kube_url: str, namespace: str, executor: WorkflowExecutor, gateway: Any) -> None:
        self.executor = executor
        self.gateway = gateway
        self.namespace = namespace
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        watched = WatchedResource(event_source="workflow-controller", event_name="workflows", group="argoproj.io",
                                  version="v1alpha1", resource="workflows", namespace=namespace,
                                  event_types=("ADD",))
        self.watcher = ResourceWatcher(kube_url, watched, self._accept)

    def start(self) -> None:
        self.watcher.start()
        self.watcher.ready.wait(10)

    def stop(self) -> None:
        self.watcher.stop(timeout=0.1)

    def _accept(self, event: dict[str, Any]) -> None:
        body = (event.get("data") or {}).get("body") or {}
        meta = body.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        labels = meta.get("labels") or {}
        if not uid or labels.get(COMPLETED_LABEL) == "true" or (body.get("status") or {}).get("phase"):
            return
        with self._lock:
            if uid in self._seen:
                return
            self._seen.add(uid)
        try:
            future = self.executor.submit_async(body)
        except Exception as error:  # noqa: BLE001 - the API accepted it; Argo would fail the Workflow
            log.warning("Workflow %s: not run: %s", meta.get("name"), error)
            self._finish(meta, "Error")
            return
        future.add_done_callback(self._done_callback(meta))

    def _done_callback(self, meta: dict[str, Any]) -> Callable[[Any], None]:
        def done(future: Any) -> None:
            try:
                phase = ((future.result() or {}).get("status") or {}).get("phase") or "Error"
            except Exception:  # noqa: BLE001
                phase = "Error"
            self._finish(meta, phase)
        return done

    def _finish(self, meta: dict[str, Any], phase: str) -> None:
        from steps.gateways.errors import KubernetesError
        from steps.gateways.resources import WORKFLOW

        try:
            self.gateway.merge_patch(WORKFLOW, meta["name"], {"metadata": {"labels": {
                COMPLETED_LABEL: "true", PHASE_LABEL: phase}}, "status": {"phase": phase}}, self.namespace)
        except KubernetesError as error:
            log.warning("Workflow %s: completion not written back: %s", meta.get("name"), error)
