"""Fuzz: the `event` parameter and Alertmanager groups, as the steps parse them (issue 10 item 10).

Every input either parses or raises RejectedInput whose message is one line naming what was
expected and what was found; nothing else escapes (no RecursionError, UnicodeError, TypeError...).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given

from steps.events import parse_resource_event
from steps.plan import RejectedInput
from steps.reactions import idle_alerts
from tests.fuzz.inputs import alert_groups, process_recursion_limit, resource_events


def assert_clear(error: RejectedInput) -> None:
    message = str(error)
    assert "\n" not in message and "expected" in message and "found" in message, message
    message.encode("utf-8")  # printable and storable: no lone surrogates in the message


@given(resource_events())
def test_resource_event_parameter(raw: Any) -> None:
    try:
        with process_recursion_limit():
            event = parse_resource_event(raw)
    except RejectedInput as error:
        assert_clear(error)
        return
    if event is not None:
        assert event.kind in ("ADD", "UPDATE", "DELETE") and isinstance(event.body, dict)
        summary = event.summary()
        assert summary is None or summary.get("id") is None or isinstance(summary["id"], str)


@given(alert_groups())
def test_alert_group(raw: Any) -> None:
    try:
        with process_recursion_limit():
            body = idle_alerts.alertmanager_body(raw)
    except RejectedInput as error:
        assert_clear(error)
        return
    with process_recursion_limit():
        candidates, skipped, rejected = idle_alerts.candidate_alerts(body)
    for each in rejected:
        assert "\n" not in each.reason and "expected" in each.reason
        each.reason.encode("utf-8")
    assert len(candidates) + len(skipped) + len(rejected) == len(body["alerts"])
    for alert in candidates:
        assert alert.as_param().encode("utf-8")
