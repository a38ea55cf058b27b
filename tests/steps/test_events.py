"""Event parsing: every shape the Sensor delivers, and precise errors for bad input (pure)."""

from __future__ import annotations

import base64
import json

import pytest

from steps.events import parse_alert_group, parse_resource_event, unwrap
from steps.plan import RejectedInput
from tests.steps.objects import Scene

BODY = Scene.of("Job").workload
DATA = {"type": "UPDATE", "body": BODY, "oldBody": {**BODY, "status": {}}, "group": "kueue.x-k8s.io",
        "version": "v1beta2", "resource": "workloads"}
CONTEXT = {"id": "ev-1", "source": "workloads", "specversion": "1.0", "type": "resource",
           "subject": "kueue-workloads", "time": "2026-01-01T12:01:00Z", "datacontenttype": "application/json"}


def b64(value: object) -> str:
    return base64.b64encode(json.dumps(value).encode()).decode()


@pytest.mark.parametrize("shape", ["cloudevent", "cloudevent-base64", "sensor-base64", "sensor-object",
                                   "sensor-text", "bare", "bare-dict"])
def test_resource_event_shapes(shape: str) -> None:
    raw: object = {
        "cloudevent": json.dumps({**CONTEXT, "data": DATA}),
        "cloudevent-base64": json.dumps({**CONTEXT, "data_base64": b64(DATA)}),
        "sensor-base64": json.dumps({"context": CONTEXT, "data": b64(DATA)}),
        "sensor-object": json.dumps({"context": CONTEXT, "data": DATA}),
        "sensor-text": json.dumps({"context": CONTEXT, "data": json.dumps(DATA)}),
        "bare": json.dumps(DATA),
        "bare-dict": DATA,
    }[shape]
    event = parse_resource_event(raw)  # type: ignore[arg-type]
    assert event is not None
    assert (event.kind, event.name, event.namespace, event.uid) == ("UPDATE", BODY["metadata"]["name"], "team-a",
                                                                    "uid-wl")
    assert event.old_body is not None
    summary = event.summary()
    assert summary["kind"] == "UPDATE"
    if shape.startswith(("cloudevent", "sensor")):
        assert summary["id"] == "ev-1" and summary["time"] == "2026-01-01T12:01:00Z"
    else:
        assert summary["id"] is None


def test_empty_event_is_a_hand_submission() -> None:
    assert parse_resource_event("") is None
    assert parse_resource_event("   ") is None
    assert unwrap(None) == (None, None)


@pytest.mark.parametrize(("raw", "field", "found"), [
    ("{not json", "event", "invalid JSON"),
    ("[1, 2]", "event", "list"),
    (json.dumps({"context": "x", "data": {}}), "event.context", "str"),
    (json.dumps({"context": CONTEXT, "data": "!!!not-base64!!!"}), "event.data", "'!!!not-base64!!!'"),
    (json.dumps({"type": "PATCH", "body": BODY}), "event.data.type", "'PATCH'"),
    (json.dumps({"type": "ADD", "body": "x"}), "event.data.body", "str"),
    (json.dumps({"type": "ADD", "body": {"spec": {}}}), "event.data.body", "without metadata"),
    (json.dumps({"type": "UPDATE", "body": BODY, "oldBody": [1]}), "event.data.oldBody", "list"),
    (json.dumps({"specversion": "1.0", "data": DATA}), "event.id", "none"),      # no invented id (issue 10)
    (json.dumps({"context": {"type": "resource"}, "data": DATA}), "event.context.id", "none"),
    (json.dumps({"specversion": "1.0", "id": "1", "type": "t", "data": DATA}), "event", "CloudEvent"),
])
def test_bad_resource_events_name_the_field(raw: str, field: str, found: str) -> None:
    with pytest.raises(RejectedInput) as caught:
        parse_resource_event(raw)
    error = caught.value
    assert error.field == field
    assert found in str(error)
    assert "expected" in str(error)


ALERTS = {"version": "4", "status": "firing", "groupLabels": {"alertname": "GPUWorkloadIdle"},
          "alerts": [{"status": "firing", "labels": {"alertname": "GPUWorkloadIdle", "namespace": "team-a",
                                                     "pod": f"p-{i}"}, "startsAt": "2026-01-01T12:00:00Z"}
                     for i in range(3)] + [{"status": "resolved", "labels": {"alertname": "GPUWorkloadIdle"}}]}


@pytest.mark.parametrize("wrapper", ["bare", "webhook", "webhook-text", "sensor-webhook-base64"])
def test_alertmanager_many_alerts_per_post(wrapper: str) -> None:
    webhook = {"header": {"Content-Type": ["application/json"]}, "body": ALERTS, "metadata": {}}
    raw = {
        "bare": json.dumps(ALERTS),
        "webhook": json.dumps(webhook),
        "webhook-text": json.dumps({**webhook, "body": json.dumps(ALERTS)}),
        "sensor-webhook-base64": json.dumps({"context": CONTEXT, "data": b64(webhook)}),
    }[wrapper]
    group = parse_alert_group(raw)
    assert len(group.alerts) == 4 and [a.labels["pod"] for a in group.firing()] == ["p-0", "p-1", "p-2"]
    assert group.firing()[0].name == "GPUWorkloadIdle"


@pytest.mark.parametrize(("body", "field"), [
    ({**ALERTS, "version": "3"}, "event.data.version"),
    ({**ALERTS, "alerts": {}}, "event.data.alerts"),
    ({**ALERTS, "alerts": [{"status": "firing"}]}, "event.data.alerts[0].labels"),
])
def test_bad_alert_groups(body: dict, field: str) -> None:
    with pytest.raises(RejectedInput) as caught:
        parse_alert_group(json.dumps(body))
    assert caught.value.field == field


def test_empty_alert_group_is_rejected() -> None:
    with pytest.raises(RejectedInput, match="an empty event"):
        parse_alert_group("")
