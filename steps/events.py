"""The `event` step parameter: what the Sensor delivered, in any of the shapes it arrives in.

Accepted shapes (ARCHITECTURE §1):
- a full CloudEvent in JSON structured mode (`specversion`, `id`, ..., `data` or `data_base64`),
  read with the `cloudevents` package (2.x core API: `cloudevents.core.formats.json.JSONFormat`);
- the Sensor's raw form with no dataKey/dataTemplate: `{"context": {...}, "data": <base64 text or object>}`;
- bare event data.

Event data kinds:
- Argo Events resource events: `{"type": "ADD|UPDATE|DELETE", "body": {...}, "oldBody": {...}, "group", "version", "resource"}`
  -> `ResourceEvent`;
- Alertmanager v4 webhook bodies (`{"version": "4", "alerts": [...]}`; one POST may carry many
  alerts), also inside the webhook EventSource wrapper `{"header": {...}, "body": ..., "metadata": {...}}`
  -> `AlertGroup`.

Bad input raises `steps.plan.RejectedInput` naming the field, what was expected and what was found.
The event is only a hint: reactions re-read the live objects and use the event for the record
(`summary()`) and to explain stale or out-of-order deliveries.

    unwrap(raw) -> (context: dict | None, data: object)
    parse_resource_event(raw) -> ResourceEvent | None      # None for an empty event (hand submission)
    parse_alert_group(raw) -> AlertGroup
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from steps.plan import RejectedInput

JSON = dict[str, Any]
RESOURCE_EVENT_TYPES = ("ADD", "UPDATE", "DELETE", "SWEEP")
"""Argo Events' resource event types, and SWEEP: a Workload the catch-up sweep found with a transition
no reaction handled (steps.reactions.sweep; its context source is `gpuaas-sweep`)."""


HINT = "pass the Sensor's event unchanged (no dataKey/dataTemplate) or leave it empty"


def _load_json(where: str, text: str | bytes) -> Any:
    from steps.json_text import load

    return load(where, text, HINT)


def _decode_data(where: str, data: Any) -> Any:
    """Sensor raw form: data is base64 of JSON text (Argo Events' []byte), JSON text, or an object."""
    if isinstance(data, (dict, list)) or data is None:
        return data
    if isinstance(data, (bytes, bytearray)):
        return _load_json(where, bytes(data))
    if isinstance(data, str):
        text = data.strip()
        if text[:1] in ("{", "["):
            return _load_json(where, text)
        try:
            decoded = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise RejectedInput(where, "an object, JSON text or base64 of JSON", repr(text[:60]),
                                "pass the Sensor's event unchanged") from None
        return _load_json(where, decoded)
    raise RejectedInput(where, "an object, JSON text or base64 of JSON", type(data).__name__)


def unwrap(raw: str | Mapping[str, Any] | None) -> tuple[JSON | None, Any]:
    """(CloudEvent context attributes or None, the event data) from any accepted shape."""
    from steps.json_text import check

    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None, None
    document = _load_json("event", raw) if isinstance(raw, str) else check("event", raw, HINT)
    if not isinstance(document, Mapping):
        raise RejectedInput("event", "a JSON object (a CloudEvent, {context, data}, or event data)",
                            type(document).__name__)
    if "specversion" in document:
        from cloudevents.core.formats.json import JSONFormat

        if not isinstance(document.get("id"), str) or not document["id"].strip():
            # The cloudevents package would invent a uuid: the record must not carry a made-up id.
            raise RejectedInput("event.id", "the CloudEvent id (a non-empty string)",
                                "none" if document.get("id") is None else repr(document.get("id"))[:60],
                                "a structured-mode CloudEvent carries the id its source gave it")
        try:
            event = JSONFormat().read(None, json.dumps(document))
        except Exception as error:  # noqa: BLE001 - the package raises several types; all mean bad input
            raise RejectedInput("event", "a valid CloudEvent (specversion, id, source, type)",
                                f"{type(error).__name__}: {error}") from None
        attributes = dict(event.get_attributes())
        if "time" not in document:
            attributes.pop("time", None)  # the package fills in "now"; the record must not invent it
        if attributes.get("time") is not None and not isinstance(attributes["time"], str):
            attributes["time"] = attributes["time"].isoformat().replace("+00:00", "Z")
        return attributes, _decode_data("event.data", event.get_data())
    if "context" in document and "data" in document:
        context = document.get("context")
        if not isinstance(context, Mapping):
            raise RejectedInput("event.context", "an object of CloudEvent attributes", type(context).__name__)
        _check_context(context)
        return dict(context), _decode_data("event.data", document.get("data"))
    return None, dict(document)


def _check_context(context: Mapping[str, Any]) -> None:
    """The Sensor's event context: a CloudEvent's attributes. `id` is what the record and duplicate
    detection rely on, so an event without one is not made up an id: it is rejected."""
    event_id = context.get("id")
    if not isinstance(event_id, str) or not event_id.strip():
        raise RejectedInput("event.context.id", "the CloudEvent id (a non-empty string) the EventSource set",
                            "none" if event_id is None else repr(event_id)[:60],
                            "pass the Sensor's event unchanged, or leave `event` empty when submitting by hand")
    for name in ("type", "source", "subject", "time"):
        if context.get(name) is not None and not isinstance(context.get(name), str):
            raise RejectedInput(f"event.context.{name}", "text", type(context.get(name)).__name__)


def summary(context: Mapping[str, Any] | None, kind: str | None = None) -> JSON | None:
    """The record's `event` section."""
    if context is None and kind is None:
        return None
    context = context or {}
    return {"id": context.get("id"), "type": context.get("type"), "source": context.get("source"),
            "subject": context.get("subject"), "time": context.get("time"), "kind": kind}


@dataclass(frozen=True)
class ResourceEvent:
    """An Argo Events resource event (a Kubernetes watch event, as the Sensor passes it)."""

    kind: str
    """ADD | UPDATE | DELETE | SWEEP."""
    body: JSON
    old_body: JSON | None = None
    context: JSON | None = None
    extra: JSON = field(default_factory=dict)
    """A SWEEP event's `transition` and `reason` (why the sweep delivered it)."""

    @property
    def uid(self) -> str | None:
        return (self.body.get("metadata") or {}).get("uid")

    @property
    def resource_version(self) -> str | None:
        return (self.body.get("metadata") or {}).get("resourceVersion")

    @property
    def namespace(self) -> str:
        return str((self.body.get("metadata") or {}).get("namespace") or "")

    @property
    def name(self) -> str:
        return str((self.body.get("metadata") or {}).get("name") or "")

    def summary(self) -> JSON | None:
        return summary(self.context, self.kind)


def parse_resource_event(raw: str | Mapping[str, Any] | None) -> ResourceEvent | None:
    """A resource event from any accepted shape; None for an empty parameter (hand submission)."""
    context, data = unwrap(raw)
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise RejectedInput("event.data", "an object {type, body, oldBody}", type(data).__name__)
    kind = data.get("type")
    if kind not in RESOURCE_EVENT_TYPES:
        raise RejectedInput("event.data.type", "ADD, UPDATE or DELETE (an Argo Events resource event) or SWEEP",
                            repr(kind),
                            "route Workload changes through the resource EventSource")
    body = data.get("body")
    if not isinstance(body, Mapping) or not isinstance(body.get("metadata"), Mapping):
        raise RejectedInput("event.data.body", "the Kubernetes object (with metadata)",
                            type(body).__name__ if not isinstance(body, Mapping) else "an object without metadata")
    old = data.get("oldBody")
    if old is not None and not isinstance(old, Mapping):
        raise RejectedInput("event.data.oldBody", "the previous object or null", type(old).__name__)
    extra = {k: data[k] for k in ("transition", "reason") if k in data} if kind == "SWEEP" else {}
    return ResourceEvent(str(kind), dict(body), dict(old) if old else None, context, extra)


@dataclass(frozen=True)
class Alert:
    status: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str] = field(default_factory=dict)
    starts_at: str | None = None
    fingerprint: str | None = None

    @property
    def name(self) -> str:
        return str(self.labels.get("alertname") or "")


@dataclass(frozen=True)
class AlertGroup:
    """An Alertmanager v4 webhook body (many alerts per POST)."""

    status: str
    alerts: tuple[Alert, ...]
    group_labels: Mapping[str, str] = field(default_factory=dict)
    context: JSON | None = None

    def firing(self) -> list[Alert]:
        return [a for a in self.alerts if a.status == "firing"]


def parse_alert_group(raw: str | Mapping[str, Any] | None) -> AlertGroup:
    context, data = unwrap(raw)
    if data is None:
        raise RejectedInput("event", "an Alertmanager webhook body", "an empty event",
                            "this reaction is triggered by Alertmanager through the webhook EventSource")
    if isinstance(data, Mapping) and "body" in data and ("header" in data or "metadata" in data):
        data = _decode_data("event.data.body", data.get("body"))
    if not isinstance(data, Mapping):
        raise RejectedInput("event.data", "an Alertmanager v4 webhook body (object)", type(data).__name__)
    if str(data.get("version", "")) != "4":
        raise RejectedInput("event.data.version", '"4" (Alertmanager webhook format)', repr(data.get("version")))
    alerts_raw = data.get("alerts")
    if not isinstance(alerts_raw, list):
        raise RejectedInput("event.data.alerts", "a list of alerts", type(alerts_raw).__name__)
    alerts = []
    for index, item in enumerate(alerts_raw):
        if not isinstance(item, Mapping) or not isinstance(item.get("labels"), Mapping):
            raise RejectedInput(f"event.data.alerts[{index}].labels", "an object of labels",
                                type(item.get("labels") if isinstance(item, Mapping) else item).__name__)
        alerts.append(Alert(str(item.get("status") or ""), dict(item["labels"]), dict(item.get("annotations") or {}),
                            item.get("startsAt"), item.get("fingerprint")))
    return AlertGroup(str(data.get("status") or ""), tuple(alerts), dict(data.get("groupLabels") or {}), context)
