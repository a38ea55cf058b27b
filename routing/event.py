"""An event as a Sensor sees it: the CloudEvent context plus the data bytes.

Input is a CloudEvent in JSON structured mode, the way Argo Events' EventSources publish them:
`source` = EventSource name, `subject` = event name, `type` = EventSource type (`resource`,
`webhook`, `calendar`, ...), `data` = the event data (`{"type","body","oldBody",...}` for a
resource event, `{"header","body","metadata"}` for a webhook). `data_base64` is accepted too.

The data is serialised once, compactly, with Go's HTML escaping and in the layout the EventSource
marshals (`published_json`), because filters, keys and the whole-event parameter (`data`
base64-encoded) all read those bytes.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from routing.gjson import Document, go_json, go_json_text, valid_json
from routing.gotime import unix_nanos


class EventError(ValueError):
    """The input is not a usable CloudEvent; the message names the field and what to do."""


@dataclass
class ArgoEvent:
    """`v1alpha1.Event`: context fields plus data (text), with lazily parsed views."""

    id: str
    source: str
    specversion: str
    type: str
    datacontenttype: str
    subject: str
    time: datetime
    data: str | None
    time_nanos: int = 0  # nanoseconds beyond `time`'s microseconds (Go keeps them; filters compare them)
    _document: Document | None = field(default=None, repr=False)
    _context_document: Document | None = field(default=None, repr=False)
    _valid_json: bool | None = field(default=None, repr=False)

    @property
    def data_is_json(self) -> bool:
        """Whether the data is valid JSON (checked once; filters and keys all need it)."""
        if self._valid_json is None:
            self._valid_json = self.data is not None and valid_json(self.data)
        return self._valid_json

    @property
    def unix_nanos(self) -> int:
        """The event time in nanoseconds since the Unix epoch, as Go's time.Time holds it."""
        return unix_nanos(self.time, self.time_nanos)

    @property
    def document(self) -> Document:
        """The data parsed for gjson look-ups (only valid when `data` is JSON)."""
        if self._document is None:
            self._document = Document(self.data if self.data is not None else "null")
        return self._document

    @property
    def context_json(self) -> str:
        """`json.Marshal(event.Context)`: what `contextKey`/`contextTemplate` read."""
        return go_json(
            {
                "id": self.id,
                "source": self.source,
                "specversion": self.specversion,
                "type": self.type,
                "datacontenttype": self.datacontenttype,
                "subject": self.subject,
                "time": go_time(self.time),
            }
        )

    @property
    def context_document(self) -> Document:
        if self._context_document is None:
            self._context_document = Document(self.context_json)
        return self._context_document

    def whole_event_json(self) -> str:
        """`json.Marshal(event)`: context plus data as base64 (Go marshals []byte that way)."""
        data = None if self.data is None else base64.b64encode(self.data.encode("utf-8")).decode()
        return '{"context":' + self.context_json + ',"data":' + json.dumps(data) + "}"


def go_time(moment: datetime) -> str:
    """metav1.Time JSON: RFC 3339 in UTC, whole seconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    return parse_time_nanos(text)[0]


def parse_time_nanos(text: str) -> tuple[datetime, int]:
    """An RFC 3339 time and the nanoseconds beyond its microseconds (Python keeps six digits)."""
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    nanos = 0
    if "." in value:
        head, _, rest = value.partition(".")
        digits = ""
        while rest and rest[0] in "0123456789":
            digits, rest = digits + rest[0], rest[1:]
        nanos = int((digits[6:9] or "0").ljust(3, "0"))
        value = f"{head}.{digits[:6]}{rest}"
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment, nanos


def _go_sorted_json(value: Any) -> str:
    """Go marshals map[string]interface{} (an unstructured object, an http.Header) with sorted keys."""
    return go_json_text(json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True))


def published_json(source_type: str, data: Any) -> str:
    """The data serialised as the EventSource marshals it, so byte-level outputs (the whole-event
    parameter, raw objects from a dataKey) match the sensor's: ResourceEventData is
    {type, body, oldBody, group, version, resource, metadata(omitempty)} with the objects' keys
    sorted; WebhookEventData is {header (sorted), body (as posted), metadata(omitempty)};
    CalendarEventData is {eventTime, metadata(omitempty)}. Anything else is serialised as given."""
    if not isinstance(data, dict):
        return go_json(data)
    parts: list[tuple[str, str]]
    if source_type == "resource" and "type" in data and "body" in data:
        parts = [("type", go_json(data["type"])), ("body", _go_sorted_json(data["body"])),
                 ("oldBody", _go_sorted_json(data.get("oldBody"))), ("group", go_json(data.get("group", ""))),
                 ("version", go_json(data.get("version", ""))), ("resource", go_json(data.get("resource", "")))]
    elif source_type == "webhook" and "body" in data:
        parts = [("header", _go_sorted_json(data.get("header"))), ("body", go_json(data["body"]))]
    elif source_type == "calendar" and "eventTime" in data:
        parts = [("eventTime", go_json(data["eventTime"]))]
    else:
        return go_json(data)
    if data.get("metadata"):
        parts.append(("metadata", _go_sorted_json(data["metadata"])))
    return "{" + ",".join(f'"{key}":{text}' for key, text in parts) + "}"


def _brief(value: Any) -> str:
    text = ascii(value)
    return text if len(text) <= 60 else text[:57] + "..."


def from_cloudevent(event: dict[str, Any], now: datetime | None = None, source_type: str = "") -> ArgoEvent:
    """Build the sensor's view of a structured-mode CloudEvent. `source_type` (the EventSource's
    type, when known) lays out the data like that EventSource even if `type` is missing."""
    if not isinstance(event, dict):
        raise EventError(f"expected a CloudEvent JSON object, found {type(event).__name__}")
    for name in ("source", "subject"):
        if not isinstance(event.get(name), str) or not event.get(name):
            raise EventError(
                f"CloudEvent field {name!r} is missing or empty: expected the "
                f"{'EventSource name' if name == 'source' else 'event name inside the EventSource'} "
                f"(found {event.get(name)!r}); set it as the EventSource publishes it"
            )
    if not isinstance(event.get("id"), str) or not event["id"].strip():
        # Sensors drop a redelivered event by its id: an event without one is not given a made-up id.
        raise EventError(f"CloudEvent field 'id' is missing or empty: expected the id the EventSource gave the "
                         f"event (found {_brief(event.get('id'))}); route the event as it was published")
    for name in ("specversion", "type", "datacontenttype", "time"):
        if event.get(name) is not None and not isinstance(event.get(name), str):
            raise EventError(f"CloudEvent field {name!r} must be text, found {type(event.get(name)).__name__}")
    if "data_base64" in event and event["data_base64"] is not None:
        if not isinstance(event["data_base64"], str):
            raise EventError(f"CloudEvent field 'data_base64' must be base64 text, found "
                             f"{type(event['data_base64']).__name__}")
        try:
            data: str | None = base64.b64decode(event["data_base64"]).decode("utf-8")
        except (ValueError, UnicodeDecodeError) as exc:
            raise EventError(f"CloudEvent field 'data_base64' is not base64-encoded UTF-8 text: {exc}") from None
    elif "data" in event:
        raw = event["data"]
        if isinstance(raw, (bytes, bytearray)):
            data = bytes(raw).decode("utf-8")
        elif raw is None:
            data = None
        else:
            data = published_json(source_type or str(event.get("type") or ""), raw)
    else:
        data = None
    time_text = event.get("time")
    nanos = 0
    if time_text:
        try:
            moment, nanos = parse_time_nanos(str(time_text))
        except ValueError:
            raise EventError(f"CloudEvent field 'time' is not RFC 3339: found {time_text!r}") from None
    else:
        moment = now or datetime.now(UTC)
    return ArgoEvent(
        id=_go_text(event["id"]),
        source=_go_text(event["source"]),
        specversion=str(event.get("specversion") or "1.0"),
        type=_go_text(str(event.get("type") or "")),
        datacontenttype=str(event.get("datacontenttype") or "application/json"),
        subject=_go_text(event["subject"]),
        time=moment,
        data=None if data is None else _go_text(data),
        time_nanos=nanos,
    )


_SURROGATE = re.compile("[\ud800-\udfff]")


def _go_text(text: str) -> str:
    """Text as Go holds it: JSON's lone surrogate escapes (`"\\ud800"`), which Python keeps as
    unencodable characters, become U+FFFD, as encoding/json decodes them."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text
