"""The one way a gpuaas Sensor starts work: an `argoWorkflow` trigger submitting a Workflow that
references a WorkflowTemplate (`spec.workflowTemplateRef`), never an inline spec, so the template in
the cluster is the single definition and the UI's history groups runs by template.

Every trigger has `atLeastOnce: true` (without it `retryStrategy` does nothing: the trigger is
fire-and-forget), a bounded `retryStrategy` for API-server hiccups, and a `rateLimit` so a burst of
events (a re-list, an UPDATE storm) queues instead of flooding the controller; the rate limit blocks,
it does not drop.

Trigger parameters: every argument is first rendered with a safe default, then overwritten from the
event. `event` gets the WHOLE event (no dataKey: `{"context": ..., "data": <base64>}`), which the step
decodes; a missing optional field falls back to the `value` default instead of failing the trigger.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]

SERVICE_ACCOUNT = "gpuaas-sensors"
REACTION_LABEL = "gpuaas.io/reaction"
UID_LABEL = "gpuaas.io/workload-uid"
"""The Workload's uid on a run the Sensor submits (steps.reactions.sweep reads it: a run in flight)."""


@dataclass(frozen=True)
class FromEvent:
    """Set argument `name` from the event: `data_key` (a GJSON path) or, with None, the whole event."""

    name: str
    data_key: str | None = None
    default: str | None = ""


def workflow_trigger(name: str, template: str, reaction: str, dependency: str,
                     arguments: dict[str, str], from_event: list[FromEvent], *,
                     conditions: str | None = None, requests_per_second: int = 10,
                     labels: list[tuple[str, str]] | None = None) -> JSON:
    """An argoWorkflow trigger that submits `template` with `arguments`, some read from `dependency`;
    `labels`: (label, GJSON path) set on the Workflow from the event (an empty default when absent)."""
    names = list(arguments)
    parameters = []
    for source in from_event:
        src: JSON = {"dependencyName": dependency}
        if source.data_key is not None:
            src["dataKey"] = source.data_key
            if source.default is not None:
                src["value"] = source.default
        parameters.append({"src": src, "dest": f"spec.arguments.parameters.{names.index(source.name)}.value"})
    for label, path in labels or []:
        parameters.append({"src": {"dependencyName": dependency, "dataKey": path, "value": ""},
                           "dest": "metadata.labels." + label.replace(".", "\\.")})
    workflow = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": f"{template}-",
                     "labels": {REACTION_LABEL: reaction, **{label: "" for label, _ in labels or []}}},
        "spec": {
            "workflowTemplateRef": {"name": template},
            "arguments": {"parameters": [{"name": n, "value": v} for n, v in arguments.items()]},
        },
    }
    body: JSON = {"name": name}
    if conditions:
        body["conditions"] = conditions
    body["argoWorkflow"] = {"operation": "submit", "source": {"resource": workflow}, "parameters": parameters}
    return {
        "template": body,
        "atLeastOnce": True,
        "retryStrategy": {"steps": 5, "duration": "2s", "factor": 2, "jitter": 0.2},
        "rateLimit": {"unit": "Second", "requestsPerUnit": requests_per_second},
    }


def sensor(name: str, dependencies: list[JSON], triggers: list[JSON], description: str) -> JSON:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Sensor",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "gpuaas",
                                              "app.kubernetes.io/component": "sensor"},
                     "annotations": {"gpuaas.io/description": description}},
        "spec": {"template": {"serviceAccountName": SERVICE_ACCOUNT},
                 "dependencies": dependencies, "triggers": triggers},
    }
