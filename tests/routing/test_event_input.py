"""`gpuaas route` event input that issue 10 (item 10) and its fuzzing found mishandled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from routing import EventError, Router
from routing.event import from_cloudevent

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
EVENT = {"specversion": "1.0", "id": "e-1", "source": "gpuaas-workloads", "subject": "workloads", "type": "resource",
         "data": {"type": "ADD", "body": {"kind": "Workload", "metadata": {"name": "w", "namespace": "team-a"}}}}


@pytest.mark.parametrize("bad_id", [None, "", "   ", 7, ["e-1"]])
def test_a_cloudevent_without_an_id_is_refused_not_given_one(bad_id: object) -> None:
    event = {k: v for k, v in EVENT.items() if k != "id"}
    if bad_id is not None:
        event["id"] = bad_id
    with pytest.raises(EventError, match="CloudEvent field 'id' is missing or empty"):
        from_cloudevent(event)


@pytest.mark.parametrize(("field", "value"), [("data_base64", True), ("time", 5), ("type", {"a": 1})])
def test_fields_of_the_wrong_type_are_input_errors(field: str, value: object) -> None:
    with pytest.raises(EventError, match=field):
        from_cloudevent({**EVENT, field: value})


def test_lone_surrogates_become_replacement_characters_as_in_go() -> None:
    event = json.loads(json.dumps({**EVENT, "data": {"type": {"\ud800": 1}, "body": {"metadata": {}}}}))
    result = Router.from_manifests(MANIFESTS).route(event)   # no TypeError from the JSON validator
    assert result.event["id"] == "e-1"
    assert "\ufffd" in from_cloudevent(event).data


@pytest.mark.parametrize("depth", [1000, 3000])
def test_event_data_nested_deeper_than_route_can_read_is_an_input_error(depth: int) -> None:
    """Found by the route fuzz at a process's recursion limit: data_base64 holding JSON nested 3,000
    deep was a RecursionError traceback from the JSON validator (Argo Events, in Go, reads it)."""
    import base64

    deep = "[" * depth + "]" * depth
    event = {k: v for k, v in EVENT.items() if k != "data"}
    event["data_base64"] = base64.b64encode(json.dumps({"type": "ADD", "body": json.loads("[]"), "x": None}).encode()
                                            .replace(b"null", deep.encode())).decode()
    with pytest.raises(EventError, match="nested"):
        Router.from_manifests(MANIFESTS).route(event)
