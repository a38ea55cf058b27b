"""The webhook intake answers as Argo Events' webhook EventSource: 401 without the token, 413 over
1 MB, 200 only once the event is accepted, and the event is `{header, body, metadata}` in a CloudEvent."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from engine.webhook import WebhookEndpoint, WebhookIntake

EVENT_SOURCE = {
    "apiVersion": "argoproj.io/v1alpha1", "kind": "EventSource", "metadata": {"name": "gpuaas-alertmanager"},
    "spec": {"webhook": {"idle-alerts": {"endpoint": "/alerts", "method": "POST", "port": "12000",
                                         "authSecret": {"name": "gpuaas-webhook", "key": "token"}}}},
}
ALERT_GROUP = {"version": "4", "status": "firing", "receiver": "gpuaas", "groupKey": "{}:{}",
               "alerts": [{"status": "firing", "labels": {"alertname": "GPUWorkloadIdle", "pod": "p-0",
                                                          "namespace": "team-a"}}]}


def post(url: str, body: bytes, token: str | None) -> int:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.fixture
def intake():
    accepted: list[dict] = []
    endpoints = WebhookEndpoint.from_event_source(EVENT_SOURCE)
    with WebhookIntake(endpoints, token="s3cret", sink=accepted.append) as server:
        yield server, accepted


def test_token_is_required_and_only_accepted_events_are_emitted(intake) -> None:
    server, accepted = intake
    body = json.dumps(ALERT_GROUP).encode()
    assert post(server.url_for("/alerts"), body, token=None) == 401
    assert post(server.url_for("/alerts"), body, token="wrong") == 401
    assert accepted == []
    assert post(server.url_for("/alerts"), body, token="s3cret") == 200

    [event] = accepted
    assert (event["type"], event["source"], event["subject"]) == ("webhook", "gpuaas-alertmanager", "idle-alerts")
    assert event["datacontenttype"] == "application/json" and len(event["id"]) == 32
    assert event["data"]["body"] == ALERT_GROUP
    assert event["data"]["header"]["Authorization"] == ["*****"]
    assert event["data"]["header"]["Content-Type"] == ["application/json"]


def test_body_over_one_megabyte_is_refused_with_413(intake) -> None:
    server, accepted = intake
    padding = "x" * (1024 * 1024)
    oversize = json.dumps({**ALERT_GROUP, "commonAnnotations": {"padding": padding}}).encode()
    assert post(server.url_for("/alerts"), oversize, token="s3cret") == 413
    assert accepted == []


def test_an_event_the_runtime_refuses_is_answered_503_so_alertmanager_retries() -> None:
    def refuse(event: dict) -> None:
        raise RuntimeError("bus unavailable")

    endpoints = WebhookEndpoint.from_event_source(EVENT_SOURCE)
    with WebhookIntake(endpoints, token="s3cret", sink=refuse) as server:
        assert post(server.url_for("/alerts"), json.dumps(ALERT_GROUP).encode(), token="s3cret") == 503
        assert post(server.url + "/elsewhere", b"{}", token="s3cret") == 404
