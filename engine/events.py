"""Argo Events' event envelope: every event source emits a CloudEvent (JSON structured mode).

As `pkg/eventsources/eventing.go` builds it: `id` a random UUID in hex, `type` the event-source type
(`resource`, `webhook`, `calendar`), `source` the EventSource's name, `subject` the event name,
`time` the dispatch time, `datacontenttype: application/json`. This is also the input format of
`gpuaas route`, so whatever the engine routes can be replayed there.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

_FORMAT = JSONFormat()


def envelope(source_type: str, event_source: str, event_name: str, data: dict[str, Any],
             moment: datetime | None = None) -> dict[str, Any]:
    """A CloudEvent dict as Argo Events dispatches it to the bus."""
    attributes = {
        "id": uuid.uuid4().hex,
        "type": source_type,
        "source": event_source,
        "subject": event_name,
        "time": (moment or datetime.now(UTC)).astimezone(UTC),
        "datacontenttype": "application/json",
        "specversion": "1.0",
    }
    return json.loads(_FORMAT.write(CloudEvent(attributes, data)))


def describe(event: dict[str, Any]) -> str:
    """One human line for the demo's timeline: what happened to which object."""
    data = event.get("data") or {}
    if event.get("type") == "resource" and isinstance(data, dict):
        body = data.get("body") or {}
        metadata = body.get("metadata") or {}
        return f"{data.get('type')} {body.get('kind', data.get('resource'))} {metadata.get('namespace', '')}/" \
               f"{metadata.get('name', '')}".replace(" /", " ")
    if event.get("type") == "webhook" and isinstance(data, dict):
        body = data.get("body") or {}
        if isinstance(body, dict) and "alerts" in body:
            names = sorted({(a.get("labels") or {}).get("alertname", "?") for a in body.get("alerts") or []})
            pods = sorted({(a.get("labels") or {}).get("pod", "?") for a in body.get("alerts") or []})
            return f"alert {body.get('status')} {','.join(names)} ({', '.join(pods)})"
        return "webhook POST"
    return f"{event.get('type')} {event.get('subject')}"
