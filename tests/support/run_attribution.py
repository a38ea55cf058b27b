"""Who submitted a Workflow run, and with which event: the real tier's attribution of every run it counts.

    who = attribution(run)          # run: a Workflow as the API or the Argo Server serves it
    who.sensor, who.trigger         # labels the Sensor's argoWorkflow trigger adds ("" for a hand submission)
    who.event                       # the CloudEvent the Sensor passed as the `event` parameter, data decoded
    who.by_hand                     # no Sensor label and no event: `argo submit --from` by an admin
    problems = expect_sensor(run, "gpuaas-on-admitted", resource_condition("Admitted"))

Why: a run picked by its reaction label alone says nothing about how it came to be. A product whose Sensor
never fired, with the run submitted by hand (as the demo rightly does for the resume), would pass a count.
Argo Events v1.9.11's argoWorkflow trigger (pkg/sensors/triggers/argo-workflow/argo-workflow.go) labels what
it submits `events.argoproj.io/sensor` and `/trigger`; the product's Sensors pass the whole event without a
dataKey: `{"context": {...CloudEvent attributes}, "data": <base64 of the event data>}` (the resource
EventSource's data is `{type, body, oldBody, ...}`; the webhook EventSource's `{header, body, metadata}`).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

RENDERED_EVENTS = Path(__file__).resolve().parents[2] / "manifests" / "base" / "events"
SENSOR_LABEL = "events.argoproj.io/sensor"
TRIGGER_LABEL = "events.argoproj.io/trigger"
JSON = dict[str, Any]


def parameters(run: JSON) -> dict[str, str]:
    return {p["name"]: p.get("value") or "" for p in ((run.get("spec") or {}).get("arguments") or {})
            .get("parameters") or []}


@dataclass(frozen=True)
class Attribution:
    name: str
    sensor: str
    trigger: str
    event: JSON | None
    """{"context": {...}, "data": <decoded JSON>} or None when the run carries no event."""
    event_error: str = ""

    @property
    def by_hand(self) -> bool:
        return not self.sensor and not self.trigger and self.event is None and not self.event_error

    def describe(self) -> str:
        if self.by_hand:
            return f"{self.name}: by hand (no Sensor label, no event)"
        context = (self.event or {}).get("context") or {}
        return (f"{self.name}: Sensor {self.sensor or '-'} trigger {self.trigger or '-'}, event "
                f"{context.get('source', '?')}/{context.get('subject', '?')} {self.event_error}").rstrip()


def decode_event(text: str) -> tuple[JSON | None, str]:
    """The `event` parameter with its data decoded: (event, "") or (None, why not)."""
    if not text:
        return None, ""
    try:
        event = json.loads(text)
    except json.JSONDecodeError as error:
        return None, f"event parameter is not JSON: {error}"
    if not isinstance(event, dict) or not isinstance(event.get("context"), dict) or "data" not in event:
        return None, f"event parameter is not {{context, data}}: {text[:200]}"
    data = event["data"]
    if isinstance(data, str):
        try:
            data = json.loads(base64.b64decode(data, validate=True))
        except (binascii.Error, ValueError) as error:
            return None, f"event data is not base64 JSON: {error}"
    return {"context": event["context"], "data": data}, ""


def attribution(run: JSON) -> Attribution:
    labels = (run.get("metadata") or {}).get("labels") or {}
    event, error = decode_event(parameters(run).get("event", ""))
    return Attribution((run.get("metadata") or {}).get("name", "?"), labels.get(SENSOR_LABEL, ""),
                       labels.get(TRIGGER_LABEL, ""), event, error)


EventCheck = Callable[[JSON, JSON], str]
"""(decoded event, run) -> "" when the event is what the run should carry, else what is wrong."""


def resource_condition(condition: str) -> EventCheck:
    """A resource EventSource's Workload event for the run's own Workload, with `condition` True in its body."""
    def check(event: JSON, run: JSON) -> str:
        context, data = event["context"], event["data"]
        if context.get("type") != "resource" or context.get("source") != "gpuaas-workloads":
            return f"expected a resource event of EventSource gpuaas-workloads, found {context}"
        body = (data or {}).get("body") or {}
        wanted = parameters(run)
        where = ((body.get("metadata") or {}).get("namespace"), (body.get("metadata") or {}).get("name"))
        if body.get("kind") != "Workload" or where != (wanted.get("namespace"), wanted.get("workload")):
            return f"expected the event of Workload {wanted.get('namespace')}/{wanted.get('workload')}, found " \
                   f"{body.get('kind')} {where[0]}/{where[1]}"
        states = {c.get("type"): c.get("status") for c in (body.get("status") or {}).get("conditions") or []}
        if states.get(condition) != "True":
            return f"expected {condition}=True in the event's Workload, found conditions {states}"
        return ""
    return check


def alert_group(alertname: str, namespace: str, pod_prefix: str) -> EventCheck:
    """The webhook EventSource's event: an Alertmanager group firing `alertname` for pods of `pod_prefix`."""
    def check(event: JSON, _run: JSON) -> str:
        context, body = event["context"], ((event["data"] or {}).get("body") or {})
        if context.get("type") != "webhook" or context.get("source") != "gpuaas-alertmanager":
            return f"expected a webhook event of EventSource gpuaas-alertmanager, found {context}"
        alerts = body.get("alerts") or []
        found = [(a.get("labels") or {}) for a in alerts]
        if body.get("status") != "firing" or not found or not all(
                a.get("alertname") == alertname and a.get("workload_namespace") == namespace
                and str(a.get("pod", "")).startswith(pod_prefix) for a in found):
            return f"expected {alertname} firing for pods {namespace}/{pod_prefix}*, found {body.get('status')} {found}"
        return ""
    return check


def rendered_triggers(sensor: str) -> set[str]:
    """The trigger names of the Sensor as rendered (manifests/base/events/sensor-NAME.yaml): Argo Events labels
    the Workflow it submits with the trigger template's name (argo-workflow.go, v1.9.11)."""
    path = RENDERED_EVENTS / f"sensor-{sensor}.yaml"
    if not path.is_file():
        raise AssertionError(f"expected the rendered Sensor {sensor} at {path}; run `gpuaas render`")
    sensor_object = yaml.safe_load(path.read_text())
    return {t["template"]["name"] for t in sensor_object["spec"].get("triggers") or []}


def expect_sensor(run: JSON, sensor: str, event_check: EventCheck) -> list[str]:
    """What is wrong with the claim "Sensor `sensor` submitted this run for the event `event_check` accepts"."""
    who = attribution(run)
    problems = []
    if who.sensor != sensor:
        problems.append(f"{who.name}: expected Sensor {sensor}'s label, found {who.sensor or 'none'} "
                        f"({who.describe()})")
    triggers = rendered_triggers(sensor)
    if who.trigger not in triggers:
        problems.append(f"{who.name}: expected {TRIGGER_LABEL} naming one of Sensor {sensor}'s rendered triggers "
                        f"{sorted(triggers)}, found {who.trigger or 'none'}")
    if who.event is None:
        problems.append(f"{who.name}: expected the Sensor's event, found {who.event_error or 'none'}")
    else:
        wrong = event_check(who.event, run)
        if wrong:
            problems.append(f"{who.name}: {wrong}")
    return problems


SWEEP_SOURCE = "gpuaas-sweep"
"""The CloudEvent source of the event the catch-up sweep hands a run (steps.delivery.SWEEP_SOURCE): no Sensor
label, the event's data is `{"type": "SWEEP", "body": <the Workload>, "transition": KEY}` (docs/catch-up.md)."""


def expect_sweep(run: JSON, transition: str) -> list[str]:
    """What is wrong with the claim "the catch-up sweep made this run, for its Workload's `transition` (`admitted`,
    `finished`)": the event's transition key (steps.delivery) names it."""
    who = attribution(run)
    problems = []
    if who.sensor or who.trigger:
        problems.append(f"{who.name}: expected the sweep's run, found {who.describe()}")
    if who.event is None:
        return [*problems, f"{who.name}: expected the sweep's event, found {who.event_error or 'none'}"]
    context, data = who.event["context"], who.event["data"] or {}
    if context.get("source") != SWEEP_SOURCE or data.get("type") != "SWEEP":
        problems.append(f"{who.name}: expected an event of source {SWEEP_SOURCE} type SWEEP, found {context} "
                        f"{data.get('type')}")
    body = data.get("body") or {}
    wanted = parameters(run)
    where = ((body.get("metadata") or {}).get("namespace"), (body.get("metadata") or {}).get("name"))
    if where != (wanted.get("namespace"), wanted.get("workload")):
        problems.append(f"{who.name}: expected Workload {wanted.get('namespace')}/{wanted.get('workload')} in the "
                        f"sweep's event, found {where[0]}/{where[1]}")
    if not str(data.get("transition", "")).startswith(f"{transition}@"):
        problems.append(f"{who.name}: expected the sweep's event for transition {transition}@..., found "
                        f"{data.get('transition')!r}")
    return problems


def expect_by_hand(run: JSON) -> list[str]:
    who = attribution(run)
    return [] if who.by_hand else [f"{who.name}: expected a hand submission, found {who.describe()}"]


FINISHED = ("Succeeded", "Failed", "Error")


def finished_run(custom: Any, reaction: str, workload: str, namespace: str = "gpuaas") -> JSON | None:
    """The product's finished run of `reaction` for this Workload (by its `workload` argument), or None."""
    for run in custom.list_namespaced_custom_object("argoproj.io", "v1alpha1", namespace, "workflows",
                                                    label_selector=f"gpuaas.io/reaction={reaction}")["items"]:
        if parameters(run).get("workload") == workload and (run.get("status") or {}).get("phase") in FINISHED:
            return run
    return None
