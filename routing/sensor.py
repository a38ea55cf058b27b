"""A Sensor compiled for routing: dependencies with their filters, triggers with conditions,
parameters and the resource each trigger would create.

Compiling never fails on a bad Sensor: problems (an unknown dependency in `conditions`, an
unreadable trigger source, a path with an unsupported modifier) are kept and reported as the
reason when an event reaches them, which is when the real sensor would fail too.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import yaml

from routing.conditions import Conditions, ConditionsError, all_dependencies, parse_conditions
from routing.filters import DependencyFilters, compile_filters
from routing.parameters import TriggerParameter, compile_parameters
from routing.validation import validate_sensor

WORKFLOW_TRIGGER = "argoWorkflow"
K8S_TRIGGER = "k8s"
_TRIGGER_TYPES = ("argoWorkflow", "k8s", "http", "awsLambda", "custom", "kafka", "nats", "slack", "openWhisk",
                  "log", "azureEventHubs", "pulsar", "azureServiceBus", "email")


@dataclass
class Dependency:
    name: str
    event_source: str
    event_name: str
    filters: DependencyFilters | None
    transform: dict[str, Any] | None


@dataclass
class Trigger:
    name: str
    type: str
    conditions: Conditions | None
    conditions_error: str | None
    template: dict[str, Any]
    template_parameters: list[TriggerParameter]
    resource_parameters: list[TriggerParameter]
    operation: str
    resource: dict[str, Any] | None
    resource_error: str | None
    at_least_once: bool


@dataclass
class CompiledSensor:
    name: str
    namespace: str
    dependencies: list[Dependency]
    triggers: list[Trigger]
    problems: list[str] = field(default_factory=list)
    rejected: str | None = None  # the Sensor controller's validation error: no sensor pod, nothing fires

    def dependency(self, name: str) -> Dependency | None:
        return next((d for d in self.dependencies if d.name == name), None)


def compile_sensor(obj: dict[str, Any]) -> CompiledSensor:
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    declared = spec.get("dependencies") or []
    names = [str(d.get("name") or "") for d in declared]
    by_name: dict[str, Dependency] = {}
    problems: list[str] = []
    for d in declared:  # the sensor keeps dependencies in a map by name: the last declaration wins
        name = str(d.get("name") or "")
        if name in by_name:
            problems.append(f"dependency {name!r} is declared twice; the sensor uses the last declaration")
        by_name[name] = Dependency(
            name=name,
            event_source=str(d.get("eventSourceName") or ""),
            event_name=str(d.get("eventName") or ""),
            filters=compile_filters(d.get("filters"), d.get("filtersLogicalOperator")),
            transform=d.get("transform") or None,
        )
    triggers = [_compile_trigger(t, names) for t in spec.get("triggers") or []]
    return CompiledSensor(
        name=str(metadata.get("name", "")),
        namespace=str(metadata.get("namespace") or "default"),
        dependencies=list(by_name.values()),
        triggers=triggers,
        problems=problems,
        rejected=validate_sensor(obj),
    )


def _compile_trigger(spec: dict[str, Any], dependency_names: list[str]) -> Trigger:
    template = spec.get("template") or {}
    name = str(template.get("name") or "")
    conditions, conditions_error = None, None
    try:
        if template.get("conditions"):
            conditions = parse_conditions(str(template["conditions"]), dependency_names)
        elif dependency_names:
            conditions = all_dependencies(dependency_names)
        else:
            conditions_error = "the Sensor has no dependencies"
    except ConditionsError as exc:
        conditions_error = str(exc)
    kind = next((t for t in _TRIGGER_TYPES if t in template), "unknown")
    body = template.get(kind) if isinstance(template.get(kind), dict) else {}
    resource, resource_error = (None, None)
    if kind in (WORKFLOW_TRIGGER, K8S_TRIGGER):
        resource, resource_error = fetch_resource(body.get("source"))
    operation = str(body.get("operation") or ("submit" if kind == WORKFLOW_TRIGGER else "create"))
    return Trigger(
        name=name,
        type=kind,
        conditions=conditions,
        conditions_error=conditions_error,
        template=template,
        template_parameters=compile_parameters(spec.get("parameters")),
        resource_parameters=compile_parameters(body.get("parameters")),
        operation=operation,
        resource=resource,
        resource_error=resource_error,
        at_least_once=bool(spec.get("atLeastOnce")),
    )


_SOURCE_ORDER = ("s3", "inline", "file", "url", "git", "configmap", "resource")  # artifacts.GetArtifactReader


def fetch_resource(source: Any) -> tuple[dict[str, Any] | None, str | None]:
    """FetchKubernetesResource for the offline cases: `inline` (YAML) and `resource` (object). The
    first location set, in the sensor's order (s3, inline, file, url, git, configmap, resource), wins."""
    if not isinstance(source, dict):
        return None, "trigger has no source (expected source.resource or source.inline)"
    kind = next((k for k in _SOURCE_ORDER if source.get(k) is not None), None)
    if kind == "resource" and isinstance(source["resource"], dict):
        return copy.deepcopy(source["resource"]), None
    if kind in ("resource", "inline") and isinstance(source[kind], str):
        try:
            return _as_object(yaml.safe_load(source[kind])), None
        except (yaml.YAMLError, ValueError, TypeError) as exc:
            return None, f"source.{kind} is not a YAML object: {exc}"
    present = ", ".join(sorted(source)) or "nothing"
    return None, (f"source {present} is read from outside the Sensor at trigger time; gpuaas route only "
                  f"evaluates source.resource and source.inline")


def _as_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, found {type(value).__name__}")
    return json.loads(json.dumps(value))
