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

from routing.event import ArgoEvent, from_cloudevent
from routing.manifests import ManifestError, load_argo_events_objects
from routing.parameters import ParameterError, apply_parameters, compile_parameters
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


@dataclass
class Triggered:
    sensor: str
    trigger: str
    workflow: dict[str, Any] | None
    dependencies: list[str]
    operation: str
    type: str = WORKFLOW_TRIGGER

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
                    self.sensors.append(compile_sensor(obj))
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
        self._saved: dict[tuple[str, str], dict[str, ArgoEvent]] = {}
        self._recent: OrderedDict[str, float] = OrderedDict()

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
            while self._recent and (now - next(iter(self._recent.values())) > _DEDUP_SECONDS
                                    or len(self._recent) > _RECENT_IDS):
                self._recent.popitem(last=False)
            if event.id in self._recent:
                for sensor, dep in matches:
                    result.skipped.append(Skipped(sensor.name, dep.name, (
                        f"event id {event.id} was already processed less than a minute ago; the sensor drops "
                        f"re-deliveries of the same id (JetStream trigger connection de-duplication)")))
                return result
            self._recent[event.id] = now
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
                if deps:
                    self._route_sensor(sensor, deps, event, result)
        return result

    def _route_sensor(self, sensor: CompiledSensor, deps: list[Dependency], event: ArgoEvent,
                      result: RouteResult) -> None:
        passed: list[Dependency] = []
        for dep in deps:
            if dep.transform:
                result.skipped.append(Skipped(sensor.name, dep.name, (
                    f"dependency has a transform ({', '.join(sorted(dep.transform))}), which gpuaas route does "
                    f"not evaluate; cannot tell whether its filters pass on the transformed event")))
                continue
            if dep.filters is not None:
                verdict = dep.filters.evaluate(event)
                if not verdict.passed:
                    result.skipped.append(Skipped(sensor.name, dep.name, verdict.reason))
                    continue
            passed.append(dep)
        if not passed:
            return
        used: set[str] = set()
        for trigger in sensor.triggers:
            if trigger.conditions is None:
                result.skipped.append(Skipped(sensor.name, passed[0].name,
                                              f"trigger {trigger.name} never runs: {trigger.conditions_error}",
                                              trigger.name))
                continue
            relevant = [d for d in passed if d.name in trigger.conditions.names]
            used.update(d.name for d in relevant)
            if not trigger.conditions.requires_and:
                for dep in relevant:
                    self._fire(sensor, trigger, {dep.name: event}, dep.name, result)
                continue
            key = (sensor.name, trigger.name)
            for dep in relevant:
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
        for dep in passed:
            if dep.name not in used:
                result.skipped.append(Skipped(sensor.name, dep.name,
                                              "passed its filters, but no trigger's conditions reference this dependency"))

    def _fire(self, sensor: CompiledSensor, trigger: Trigger, events: dict[str, ArgoEvent], dep_name: str,
              result: RouteResult) -> None:
        try:
            obj = self.build_resource(sensor, trigger, events)
        except ParameterError as exc:
            result.skipped.append(Skipped(sensor.name, dep_name, f"trigger {trigger.name} fails: {exc}", trigger.name))
            return
        result.triggered.append(Triggered(
            sensor=sensor.name, trigger=trigger.name, workflow=obj, dependencies=sorted(events),
            operation=trigger.operation, type=trigger.type))

    def build_resource(self, sensor: CompiledSensor, trigger: Trigger,
                       events: dict[str, ArgoEvent]) -> dict[str, Any] | None:
        """The object the trigger would submit/create, parameters applied. Raises ParameterError."""
        resource, resource_error = trigger.resource, trigger.resource_error
        resource_parameters = trigger.resource_parameters
        if trigger.template_parameters:
            template = apply_parameters(copy.deepcopy(trigger.template), trigger.template_parameters, events)
            body = template.get(trigger.type) if isinstance(template.get(trigger.type), dict) else {}
            if trigger.type in (WORKFLOW_TRIGGER, K8S_TRIGGER):
                resource, resource_error = fetch_resource(body.get("source"))
                resource_parameters = compile_parameters(body.get("parameters"))
        if trigger.type not in (WORKFLOW_TRIGGER, K8S_TRIGGER):
            return None
        if resource is None:
            raise ParameterError(f"cannot read the trigger resource: {resource_error}")
        obj = apply_parameters(json.loads(json.dumps(resource)), resource_parameters, events)
        if not isinstance(obj, dict):
            raise ParameterError("the trigger resource is not an object after applying parameters")
        metadata = obj.setdefault("metadata", {})
        if trigger.type == WORKFLOW_TRIGGER and not metadata.get("name"):
            if trigger.operation != "submit":
                raise ParameterError(f"failed to execute the workflow {trigger.operation} operation, no name is given")
            if not metadata.get("generateName"):
                raise ParameterError("failed to trigger the workflow, neither name nor generateName is given")
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
