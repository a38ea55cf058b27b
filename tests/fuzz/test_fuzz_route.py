"""Fuzz: `gpuaas route` event input, through the Sensors rendered into manifests/ (issue 10 item 10).

Each case is one line of `gpuaas route --events FILE`, read as the command reads it and routed by
the same Router: the only failures allowed are the command's own input errors (it then prints one
line and exits 2); a CloudEvent without an `id` is one of them (no invented id).
"""

from __future__ import annotations

import io
from pathlib import Path

from hypothesis import given, settings

from gpuaas.commands.route import _InputError, _read_lines
from routing import EventError, Router
from routing.event import _go_text
from tests.fuzz.inputs import process_recursion_limit, route_lines

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def test_route_event_input() -> None:
    router = Router.from_manifests(MANIFESTS)
    cases = 0

    @given(route_lines())
    def route(line: str) -> None:
        nonlocal cases
        cases += 1
        router.reset()  # each case on its own (no remembered ids or dependencies): reproducible
        try:
            with process_recursion_limit():  # as `gpuaas route` runs, not with Hypothesis' raised limit
                for _where, event in _read_lines("events.jsonl", io.StringIO(line + "\n")):
                    result = router.route(event)
                    assert isinstance(result.event["id"], str) and result.event["id"]
                    assert isinstance(event, dict) and _go_text(event["id"]) == result.event["id"]  # never invented
        except (EventError, _InputError) as error:
            message = str(error)
            assert message and "\n" not in message, message
            message.encode("utf-8")

    route()
    assert cases >= settings.default.max_examples, f"only {cases} cases ran"
