"""The router: which workflows would the Sensors submit for this event, and why not.

`Router` holds compiled Sensors (filters, conditions and parameters compiled once) and the
EventSources (to know which events exist and their types). `route(cloudevent)` evaluates one
event the way the sensor pods would, keeping the state a sensor keeps between events
(remembered dependencies for `&&` conditions, recently seen event ids), and returns a
`RouteResult` with what would be triggered (the full Workflow object, parameters applied,
labels as the argoWorkflow trigger adds them) and, for everything that did not fire, a reason.

Thread-safe: one lock guards the per-trigger state; routing is cheap (tens of microseconds).
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from routing.event import ArgoEvent, EventError, from_cloudevent
from routing.manifests import ManifestError, load_argo_events_objects
from routing.parameters import ParameterError, ParameterNotEvaluated, apply_parameters, compile_parameters
from routing.sensor import (
    K8S_TRIGGER,
    WORKFLOW_TRIGGER,
    CompiledSensor,
    Dependency,
    Trigger,
    compile_sensor,
    fetch_resource,
)

_NOT_EVENT_TYPES = {"template", "service", "eventBusName", "replicas", "replica", "triggers"}
_RECENT_IDS = 100_000
_DEDUP_SECONDS = 60.0  # jetstream trigger_conn.go purges remembered ids after one minute
_TOO_DEEP = ("event data: expected JSON nested less deeply than Python's recursion limit allows (a few hundred "
             "levels), found deeper nesting; Argo Events reads it, gpuaas route cannot evaluate this event")


@dataclass
class Triggered:
    sensor: str
    trigger: str
    workflow: dict[str, Any] | None
    dependencies: list[str]
    operation: str
    type: str = WORKFLOW_TRIGGER
    resource: dict[str, Any] | None = field(default=None, repr=False)  # parameters applied, before the
    # trigger adds its labels and namespace (what the sensor passes to Execute)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sensor": self.sensor, "trigger": self.trigger, "workflow": self.workflow,
                               "dependencies": self.dependencies}
        if self.type != WORKFLOW_TRIGGER or self.operation != "submit":
            out["type"] = self.type
            out["operation"] = self.operation
        return out


@dataclass
class Skipped:
    sensor: str
    dependency: str | None
    reason: str
    trigger: str | None = None
    stage: str | None = field(default=None, repr=False)  # where a firing trigger failed (TriggerFailure)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sensor": self.sensor, "dependency": self.dependency, "reason": self.reason}
        if self.trigger is not None:
            out["trigger"] = self.trigger
        return out


@dataclass
class RouteResult:
    event: dict[str, str]
    triggered: list[Triggered] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def workflows(self) -> list[dict[str, Any]]:
        return [t.workflow for t in self.triggered if t.workflow is not None]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "event": self.event,
            "triggered": [t.to_dict() for t in self.triggered],
            "skipped": [s.to_dict() for s in self.skipped],
        }
        if self.warnings:
            out["warnings"] = self.warnings
        return out


@dataclass
class EventSourceInfo:
    name: str
    namespace: str
    events: dict[str, str]  # event name -> type (resource, webhook, calendar, ...)


class Router:
    """Evaluate Argo Events Sensors on CloudEvents, with Argo Events' semantics."""

    def __init__(
        self,
        objects: list[dict[str, Any]],
        *,
        clock: Callable[[], float] = time.time,
        explain_unsubscribed: bool = True,
        warnings: list[str] | None = None,
    ) -> None:
        self.sensors: list[CompiledSensor] = []
        self.event_sources: dict[str, EventSourceInfo] = {}
        self.event_source_specs: dict[str, dict[str, Any]] = {}
        self.load_warnings: list[str] = list(warnings or [])
        for obj in objects:
            kind = obj.get("kind")
            try:
                if kind == "Sensor":
                    compiled = compile_sensor(obj)
                    self.sensors.append(compiled)
                    self.load_warnings.extend(f"Sensor {compiled.name}: {problem}" for problem in compiled.problems)
                    if compiled.rejected:
                        self.load_warnings.append(f"Sensor {compiled.name}: {_rejected_reason(compiled.rejected)}")
                elif kind == "EventSource":
                    info = _event_source_info(obj)
                    self.event_sources[info.name] = info
                    self.event_source_specs[info.name] = obj.get("spec") or {}
            except (TypeError, AttributeError, KeyError) as error:  # a field of the wrong shape
                name = (obj.get("metadata") or {}).get("name") if isinstance(obj.get("metadata"), dict) else None
                raise ManifestError(f"{kind} {name or '(no name)'}: expected a {kind} as Argo Events v1.9 defines "
                                    f"it, found a field of the wrong type ({type(error).__name__}: {error}); "
                                    "compare it with `gpuaas render`'s output") from None
        self.clock = clock
        self.explain_unsubscribed = explain_unsubscribed
        self._index: dict[tuple[str, str], list[tuple[CompiledSensor, Dependency]]] = {}
        for sensor in self.sensors:
            for dep in sensor.dependencies:
                self._index.setdefault((dep.event_source, dep.event_name), []).append((sensor, dep))
                if self.event_sources and dep.event_source not in self.event_sources:
                    self.load_warnings.append(
                        f"Sensor {sensor.name}: dependency {dep.name} waits for EventSource {dep.event_source!r}, "
                        f"which is not in the manifests"
                    )
                elif dep.event_source in self.event_sources and dep.event_name not in self.event_sources[dep.event_source].events:
                    self.load_warnings.append(
                        f"Sensor {sensor.name}: dependency {dep.name} waits for event {dep.event_name!r}, which "
                        f"EventSource {dep.event_source} does not define "
                        f"(it defines: {', '.join(self.event_sources[dep.event_source].events) or 'nothing'})"
                    )
        self._lock = threading.Lock()
        self._saved: dict[tuple[str, str, str], dict[str, ArgoEvent]] = {}
        # event ids each trigger connection processed in the last minute (trigger_conn.go recentMsgsByID)
        self._recent: dict[tuple[str, str, str], OrderedDict[str, float]] = {}

    @classmethod
    def from_manifests(cls, path: Path | str, **kwargs: Any) -> Router:
        """Load every rendered Sensor and EventSource under `path` (recursively)."""
        loaded = load_argo_events_objects(Path(path))
        return cls(loaded.objects, warnings=loaded.warnings, **kwargs)

    def reset(self) -> None:
        """Forget remembered dependencies and seen event ids (a sensor restart with a fresh bus)."""
        with self._lock:
            self._saved.clear()
            self._recent.clear()

    # -----------------------------------------------------------------------------------------

    def route(self, cloudevent: dict[str, Any]) -> RouteResult:
        """Route one CloudEvent (JSON structured mode, as a dict). Raises EventError on bad input."""
        source_info = self.event_sources.get(str(cloudevent.get("source"))) if isinstance(cloudevent, dict) else None
        source_type = source_info.events.get(str(cloudevent.get("subject")), "") if source_info else ""
        event = from_cloudevent(cloudevent, source_type=source_type)
        try:
            event.data_is_json  # noqa: B018 - the one pass over all the data: too deep fails here, before any state
        except RecursionError:
            raise EventError(_TOO_DEEP) from None
        result = RouteResult(event={"id": event.id, "source": event.source, "subject": event.subject,
                                    "type": event.type})
        info = self.event_sources.get(event.source)
        if info is not None:
            expected = info.events.get(event.subject)
            if expected is None:
                result.warnings.append(
                    f"EventSource {event.source} defines no event named {event.subject!r} "
                    f"(it defines: {', '.join(info.events) or 'nothing'}); no cluster would publish this event"
                )
            elif event.type and event.type != expected:
                result.warnings.append(
                    f"event type {event.type!r} differs from the EventSource's type {expected!r} "
                    f"(Argo Events publishes type={expected!r}; filters on context.type would see that)"
                )
            if not event.type and expected:
                event.type = expected
                result.event["type"] = expected
        elif self.event_sources:
            result.warnings.append(f"no EventSource named {event.source!r} in the manifests")

        matches = self._index.get((event.source, event.subject), [])
        with self._lock:
            now = self.clock()
            matched_sensors = {id(s) for s, _ in matches}
            if self.explain_unsubscribed:
                for sensor in self.sensors:
                    if id(sensor) in matched_sensors:
                        continue
                    for dep in sensor.dependencies:
                        result.skipped.append(Skipped(sensor.name, dep.name, (
                            f"not subscribed: waits for EventSource {dep.event_source!r} event {dep.event_name!r}, "
                            f"this event is {event.source!r}/{event.subject!r}")))
            by_sensor: dict[int, list[Dependency]] = {}
            for sensor, dep in matches:
                by_sensor.setdefault(id(sensor), []).append(dep)
            for sensor in self.sensors:
                deps = by_sensor.get(id(sensor))
                if not deps:
                    continue
                if sensor.rejected:
                    for dep in deps:
                        result.skipped.append(Skipped(sensor.name, dep.name, _rejected_reason(sensor.rejected)))
                    continue
                try:
                    self._route_sensor(sensor, deps, event, result, now)
                except RecursionError:
                    raise EventError(_TOO_DEEP) from None
        return result

    def _seen(self, key: tuple[str, str, str], event_id: str, now: float) -> bool:
        """Whether this trigger connection processed the id less than a minute ago."""
        recent = self._recent.setdefault(key, OrderedDict())
        while recent and (now - next(iter(recent.values())) > _DEDUP_SECONDS or len(recent) > _RECENT_IDS):
            recent.popitem(last=False)
        return event_id in recent

    def _route_sensor(self, sensor: CompiledSensor, deps: list[Dependency], event: ArgoEvent,
                      result: RouteResult, now: float) -> None:
        """One event through one Sensor: each trigger connection de-duplicates, filters its
        dependencies (in the order its expression names them) and fires or remembers."""
        verdicts: dict[str, bool] = {}
        by_name = {dep.name: dep for dep in deps}

        def passes(dep: Dependency) -> bool:
            if dep.name not in verdicts:
                verdicts[dep.name] = self._filter(sensor, dep, event, result)
            return verdicts[dep.name]

        used: set[str] = set()
        duplicate_for: list[str] = []
        for trigger in sensor.triggers:
            if trigger.conditions is None:
                result.skipped.append(Skipped(sensor.name, deps[0].name,
                                              f"trigger {trigger.name} never runs: {trigger.conditions_error}",
                                              trigger.name))
                continue
            trigger_deps = [by_name[name] for name in trigger.conditions.names if name in by_name]
            if not trigger_deps:
                continue
            key = (sensor.namespace, sensor.name, trigger.name)
            if self._seen(key, event.id, now):
                duplicate_for.append(trigger.name)
                continue
            for dep in trigger_deps:
                if not passes(dep):
                    continue
                used.add(dep.name)
                if not trigger.conditions.requires_and:
                    self._fire(sensor, trigger, {dep.name: event}, dep.name, result)
                    continue
                saved = self._saved.setdefault(key, {})
                present = set(saved) | {dep.name}
                if trigger.conditions.satisfied(present):
                    events = dict(saved)
                    events[dep.name] = event
                    self._saved[key] = {}
                    self._fire(sensor, trigger, events, dep.name, result)
                else:
                    saved[dep.name] = event
                    missing = trigger.conditions.missing(present)
                    result.skipped.append(Skipped(sensor.name, dep.name, (
                        f"passed its filters and is remembered; trigger {trigger.name} waits for conditions "
                        f"'{trigger.conditions.text}' (not yet received: {', '.join(missing)})"), trigger.name))
            self._recent[key][event.id] = now
        if duplicate_for:
            for dep in deps:
                result.skipped.append(Skipped(sensor.name, dep.name, (
                    f"event id {event.id} was already processed less than a minute ago by trigger(s) "
                    f"{', '.join(duplicate_for)}; the sensor drops re-deliveries of the same id (JetStream "
                    f"trigger connection de-duplication)")))
        for dep in deps:
            if dep.name not in used and verdicts.get(dep.name, True) and not duplicate_for:
                if dep.name not in verdicts:
                    passes(dep)
                if verdicts[dep.name]:
                    result.skipped.append(Skipped(sensor.name, dep.name,
                                                  "passed its filters, but no trigger's conditions reference "
                                                  "this dependency"))

    def _filter(self, sensor: CompiledSensor, dep: Dependency, event: ArgoEvent, result: RouteResult) -> bool:
        """The dependency's filter verdict; a failure is explained once per event."""
        if dep.transform:
            result.skipped.append(Skipped(sensor.name, dep.name, (
                f"dependency has a transform ({', '.join(sorted(dep.transform))}), which gpuaas route does "
                f"not evaluate; cannot tell whether its filters pass on the transformed event")))
            return False
        if dep.filters is None:
            return True
        verdict = dep.filters.evaluate(event)
        if not verdict.passed:
            result.skipped.append(Skipped(sensor.name, dep.name, verdict.reason))
        return verdict.passed

    def _fire(self, sensor: CompiledSensor, trigger: Trigger, events: dict[str, ArgoEvent], dep_name: str,
              result: RouteResult) -> None:
        try:
            resource = self.resolve_resource(trigger, events)
            obj = self._submission(sensor, trigger, resource)
        except TriggerFailure as exc:
            result.skipped.append(Skipped(sensor.name, dep_name, f"trigger {trigger.name} fails: {exc}", trigger.name,
                                          stage=exc.stage))
            return
        result.triggered.append(Triggered(
            sensor=sensor.name, trigger=trigger.name, workflow=obj, dependencies=sorted(events),
            operation=trigger.operation, type=trigger.type,
            resource=None if resource is None else json.loads(json.dumps(resource))))

    def build_resource(self, sensor: CompiledSensor, trigger: Trigger,
                       events: dict[str, ArgoEvent]) -> dict[str, Any] | None:
        """The object the trigger would submit/create, parameters applied. Raises ParameterError."""
        return self._submission(sensor, trigger, self.resolve_resource(trigger, events))

    def resolve_resource(self, trigger: Trigger, events: dict[str, ArgoEvent]) -> dict[str, Any] | None:
        """triggerOne up to Execute: template parameters, the trigger's resource, resource parameters.
        Raises TriggerFailure naming the stage that failed."""
        resource, resource_error = trigger.resource, trigger.resource_error
        resource_parameters = trigger.resource_parameters
        operation_type = trigger.type
        if trigger.template_parameters:
            try:
                template = apply_parameters(copy.deepcopy(trigger.template), trigger.template_parameters, events)
            except ParameterNotEvaluated as exc:
                raise TriggerFailure("not-evaluated", str(exc)) from None
            except ParameterError as exc:
                raise TriggerFailure("template-parameters", f"failed to apply template parameters: {exc}") from None
            _check_template_types(template, operation_type)
            body = template.get(operation_type) if isinstance(template.get(operation_type), dict) else {}
            if operation_type in (WORKFLOW_TRIGGER, K8S_TRIGGER):
                resource, resource_error = fetch_resource(body.get("source"))
                resource_parameters = compile_parameters(body.get("parameters"))
        if operation_type not in (WORKFLOW_TRIGGER, K8S_TRIGGER):
            return None
        if resource is None:
            raise TriggerFailure("fetch", f"cannot read the trigger resource: {resource_error}")
        try:
            obj = apply_parameters(json.loads(json.dumps(resource)), resource_parameters, events)
        except ParameterNotEvaluated as exc:
            raise TriggerFailure("not-evaluated", str(exc)) from None
        except ParameterError as exc:
            raise TriggerFailure("resource-parameters", str(exc)) from None
        if not isinstance(obj, dict):
            raise TriggerFailure("resource-parameters", "the trigger resource is not an object after applying "
                                                        "parameters")
        return obj

    def _submission(self, sensor: CompiledSensor, trigger: Trigger,
                    resource: dict[str, Any] | None) -> dict[str, Any] | None:
        """What Execute sends: the name checks, the trigger's labels, the Sensor's namespace."""
        if resource is None:
            return None
        obj = json.loads(json.dumps(resource))
        metadata = obj.setdefault("metadata", {})
        if trigger.type == WORKFLOW_TRIGGER and not metadata.get("name"):
            if trigger.operation != "submit":
                raise TriggerFailure("execute", f"failed to execute the workflow {trigger.operation} operation, "
                                                f"no name is given")
            if not metadata.get("generateName"):
                raise TriggerFailure("execute", "failed to trigger the workflow, neither name nor generateName is "
                                                "given")
        if (trigger.type == WORKFLOW_TRIGGER and trigger.operation == "submit") or (
            trigger.type == K8S_TRIGGER and trigger.operation == "create"
        ):  # both triggers label what they create (argo-workflow.go, standard-k8s.go)
            labels = metadata.get("labels") or {}
            labels.update({
                "events.argoproj.io/sensor": sensor.name,
                "events.argoproj.io/trigger": trigger.name,
                "events.argoproj.io/action-timestamp": str(int(self.clock() * 1000)),
            })
            metadata["labels"] = labels
        if not metadata.get("namespace"):
            metadata["namespace"] = sensor.namespace
        return obj


class TriggerFailure(ParameterError):
    """A firing trigger fails; `stage` says where (template-parameters, fetch, resource-parameters, execute)."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", dict: "object", list: "array"}.get(type(value), "value")


def _check_template_types(template: dict[str, Any], kind: str) -> None:
    """ApplyTemplateParameters decodes the rewritten template into Go's TriggerTemplate: a value of the
    wrong JSON type in a field the sensor reads is an error there, as here."""
    expected = {"name": str, "conditions": str}
    checks: list[tuple[str, Any, type]] = [(f"TriggerTemplate.{k}", template.get(k), t) for k, t in expected.items()]
    body = template.get(kind)
    if body is not None and not isinstance(body, dict):
        checks.append((f"TriggerTemplate.{kind}", body, dict))
    elif isinstance(body, dict):
        checks += [(f"{kind}.operation", body.get("operation"), str), (f"{kind}.source", body.get("source"), dict),
                   (f"{kind}.parameters", body.get("parameters"), list)]
        for parameter in body.get("parameters") or [] if isinstance(body.get("parameters"), list) else []:
            checks.append((f"{kind}.parameters", parameter, dict))
            if isinstance(parameter, dict):
                checks += [(f"{kind}.parameters.dest", parameter.get("dest"), str),
                           (f"{kind}.parameters.operation", parameter.get("operation"), str),
                           (f"{kind}.parameters.src", parameter.get("src"), dict)]
    for field_name, value, wanted in checks:
        if value is not None and not isinstance(value, wanted):
            go_type = {str: "string", dict: "struct", list: "slice"}[wanted]
            raise TriggerFailure("template-parameters", f"failed to apply template parameters: json: cannot "
                                 f"unmarshal {_json_kind(value)} into Go struct field {field_name} of type {go_type}")


def _rejected_reason(error: str) -> str:
    return (f"the Sensor controller rejects this Sensor ({error}): it deploys no sensor pod, so nothing in "
            f"this Sensor fires")


def _event_source_info(obj: dict[str, Any]) -> EventSourceInfo:
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    events: dict[str, str] = {}
    for kind, block in spec.items():
        if kind in _NOT_EVENT_TYPES or not isinstance(block, dict):
            continue
        for event_name in block:
            events[str(event_name)] = kind
    return EventSourceInfo(name=str(metadata.get("name", "")), namespace=str(metadata.get("namespace") or ""),
                           events=events)
