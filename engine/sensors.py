"""The sensor runtime: the rendered Sensors, evaluated by `routing`, submitting Workflows.

Every event from the event sources goes through the very evaluator `gpuaas route` uses
(`routing.Router` over manifests/), so "why did my sensor (not) fire?" has one answer on a
laptop and on a cluster. For each trigger that fires, the Workflow the Sensor would create is
handed to the executor; the event counts as accepted once every such Workflow is accepted
(validated and queued), which is when the webhook answers 200.

Differences from a Sensor pod, on purpose: triggers submit in-process (no Argo Server round trip),
so `atLeastOnce`, trigger `retryStrategy` and `rateLimit` have nothing to act on; the Workflow gets
the labels the real trigger adds (`events.argoproj.io/sensor`, `events.argoproj.io/trigger`,
`events.argoproj.io/action-timestamp`).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.events import describe
from engine.executor import WorkflowExecutor
from engine.timeline import Timeline


@dataclass
class Dispatch:
    """What one event did: the workflows it started and the dependencies that did not match."""

    event: dict[str, Any]
    triggered: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    runs: list[concurrent.futures.Future[dict[str, Any]]] = field(default_factory=list)


def load_router(manifests: Path) -> Any:
    """`routing.Router` over the rendered Sensors (imported here: it is helper routing's)."""
    from routing import Router

    return Router.from_manifests(manifests, explain_unsubscribed=False)


def route_result(router: Any, event: dict[str, Any]) -> dict[str, Any]:
    """The router's answer as the dict `gpuaas route` prints."""
    result = router.route(event)
    if hasattr(result, "to_dict"):
        result = result.to_dict()
    return result


class SensorRuntime:
    """Routes events through the rendered Sensors and submits the triggered Workflows."""

    def __init__(self, router: Any, executor: WorkflowExecutor, timeline: Timeline | None = None,
                 clock: Callable[[], Any] | None = None) -> None:
        self.router = router
        self.executor = executor
        self.timeline = timeline
        self.clock = clock
        self.events_seen = 0
        self.workflows_submitted = 0
        self.dispatches: list[Dispatch] = []
        self._lock = threading.Lock()
        self.keep_dispatches = True

    def accept(self, event: dict[str, Any]) -> Dispatch:
        """Route one event and submit what it triggers; raises if a triggered Workflow is refused."""
        result = route_result(self.router, event)
        dispatch = Dispatch(event=event, skipped=list(result.get("skipped") or []))
        for trigger in result.get("triggered") or []:
            workflow = trigger["workflow"]
            labels = workflow.setdefault("metadata", {}).setdefault("labels", {})
            labels.setdefault("events.argoproj.io/sensor", trigger["sensor"])
            labels.setdefault("events.argoproj.io/trigger", trigger["trigger"])
            labels.setdefault("events.argoproj.io/action-timestamp", str(int(time.time() * 1000)))
            prepared = self.executor.prepare(workflow)
            if self.timeline is not None:
                self.timeline.triggered(describe(event), trigger["sensor"], prepared["metadata"]["name"],
                                        prepared["spec"]["workflowTemplateRef"]["name"])
            dispatch.triggered.append({"sensor": trigger["sensor"], "trigger": trigger["trigger"],
                                       "workflow": prepared["metadata"]["name"]})
            dispatch.runs.append(self.executor.run_prepared_async(prepared))
        with self._lock:
            self.events_seen += 1
            self.workflows_submitted += len(dispatch.runs)
            if self.keep_dispatches:
                self.dispatches.append(dispatch)
        return dispatch

    __call__ = accept
