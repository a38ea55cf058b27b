"""Small inline Sensors for the fidelity tests: one EventSource, one Sensor, one trigger."""

from __future__ import annotations

import copy
import uuid
from typing import Any

from routing import Router

SOURCE, EVENT = "demo-source", "demo-event"


def workflow_resource(parameter_names: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "demo-"},
        "spec": {"workflowTemplateRef": {"name": "demo-template"},
                 "arguments": {"parameters": [{"name": n} for n in parameter_names]}},
    }


def sensor(
    filters: dict[str, Any] | None = None,
    *,
    parameters: list[dict[str, Any]] | None = None,
    dependencies: list[dict[str, Any]] | None = None,
    conditions: str | None = None,
    filters_logical_operator: str | None = None,
    resource: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if dependencies is None:
        dep: dict[str, Any] = {"name": "dep", "eventSourceName": SOURCE, "eventName": EVENT}
        if filters is not None:
            dep["filters"] = filters
        if filters_logical_operator:
            dep["filtersLogicalOperator"] = filters_logical_operator
        dependencies = [dep]
    template: dict[str, Any] = {
        "name": "run",
        "argoWorkflow": {
            "operation": "submit",
            "source": {"resource": resource or workflow_resource(["p0", "p1", "p2"])},
            "parameters": parameters or [],
        },
    }
    if conditions:
        template["conditions"] = conditions
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Sensor",
        "metadata": {"name": "demo", "namespace": "gpuaas"},
        "spec": {"dependencies": dependencies, "triggers": [{"template": template}]},
    }


def event_source(kind: str = "resource", events: tuple[str, ...] = (EVENT,)) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "EventSource",
        "metadata": {"name": SOURCE, "namespace": "gpuaas"},
        "spec": {kind: {name: {} for name in events}},
    }


def router(*sensors: dict[str, Any], kind: str = "resource") -> Router:
    return Router([event_source(kind), *[copy.deepcopy(s) for s in sensors]], clock=lambda: 1_796_000_000.0)


def cloudevent(data: Any, *, subject: str = EVENT, source: str = SOURCE, type_: str = "resource",
               time: str = "2026-12-01T09:30:00Z", **extra: Any) -> dict[str, Any]:
    event = {"specversion": "1.0", "id": uuid.uuid4().hex, "source": source, "subject": subject, "type": type_,
             "time": time, "datacontenttype": "application/json", "data": data}
    event.update(extra)
    return event


def fires(sensor_obj: dict[str, Any], data: Any, **kw: Any) -> tuple[bool, str]:
    """(fired, reasons) for one event through a one-sensor router."""
    result = router(sensor_obj).route(cloudevent(data, **kw))
    reasons = "; ".join(s.reason for s in result.skipped)
    return bool(result.triggered), reasons


def params_of(result: Any) -> list[Any]:
    return [p.get("value") for p in result.workflows[0]["spec"]["arguments"]["parameters"]]
