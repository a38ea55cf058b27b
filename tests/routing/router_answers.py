"""The router's answer to a differential case, in the shape of the Argo Events oracle's, and the
list of places where the two disagree.

Compared, for every case: whether the controller accepts the Sensor (and its exact message);
each trigger's dependency expression, its dependencies and whether it ever runs; for every event,
each subscribed dependency's filter verdict (pass or not, and which filter groups returned an
error: the error class); and every firing: trigger, the dependency that completed it, all its
dependencies, and the resource after parameters, or the stage at which the trigger fails.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from routing import Router
from routing.event import from_cloudevent
from routing.filters import compile_filters
from tests.routing.sensor_cases import cloudevent

CLOCK = 1_796_000_000.0
_STAGE = re.compile(r"(?:^|\(| / |\[)(expr|data|time) filter errors?\b")


def argo_error_stages(error: str | None) -> list[str]:
    """Which filter groups an error from dependencies.Filter came from (its messages name them)."""
    if error is None:
        return []
    stages = sorted(set(_STAGE.findall(error)))
    return stages or ["other"]


def router_answer(case: dict[str, Any]) -> dict[str, Any]:
    """Route the case's events through a fresh Router and record what it decided."""
    sensor_obj = copy.deepcopy(case["sensor"])
    router = Router([sensor_obj], clock=lambda: CLOCK)
    (sensor,) = router.sensors
    answer: dict[str, Any] = {"invalid": sensor.rejected or "", "triggers": [], "events": []}
    for trigger in sensor.triggers:
        conditions = trigger.conditions
        answer["triggers"].append({
            "name": trigger.name,
            "expression": conditions.expression if conditions else None,
            "dependencies": list(conditions.names) if conditions else [],
            "requiresAnd": conditions.requires_and if conditions else False,
            "error": trigger.conditions_error or "",
        })
    declared = sensor_obj["spec"].get("dependencies") or []
    for event in case["events"]:
        routed_event = cloudevent(event)
        argo_event = from_cloudevent(routed_event)
        filters = []
        for dep in declared:
            if dep.get("eventSourceName") == argo_event.source and dep.get("eventName") == argo_event.subject:
                compiled = compile_filters(dep.get("filters"), dep.get("filtersLogicalOperator"))
                verdict = compiled.evaluate(argo_event) if compiled is not None else None
                filters.append({"dependency": dep.get("name"),
                                "pass": True if verdict is None else verdict.passed,
                                "errors": [] if verdict is None else sorted(set(verdict.errors)),
                                "reason": "" if verdict is None else verdict.reason})
        result = router.route(routed_event)
        fired = [{"trigger": t.trigger, "dependency": None, "dependencies": t.dependencies,
                  "resource": t.resource, "stage": ""} for t in result.triggered]
        fired += [{"trigger": s.trigger, "dependency": s.dependency, "dependencies": None, "resource": None,
                   "stage": s.stage, "reason": s.reason} for s in result.skipped if s.stage]
        answer["events"].append({"filters": filters, "fired": fired,
                                 "skipped": [s.reason for s in result.skipped]})
    return answer


def _same_json(a: Any, b: Any) -> bool:
    """JSON equality with numbers compared by value (Go's unstructured objects hold int64 or float64)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def disagreements(argo: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    """Every difference between Argo Events' answer and the router's, as readable lines."""
    if argo.get("panic") or argo.get("decodeError"):
        return [f"the oracle could not answer: {argo.get('panic') or argo.get('decodeError')}"]
    found: list[str] = []
    if (argo.get("invalid") or "") != ours["invalid"]:
        found.append(f"controller validation: argo {argo.get('invalid')!r}, route {ours['invalid']!r}")
    for theirs, mine in zip(argo["triggers"], ours["triggers"], strict=True):
        name = theirs["name"]
        if bool(theirs.get("error")) != bool(mine["error"]):
            found.append(f"trigger {name}: argo {'never runs: ' + theirs['error'] if theirs.get('error') else 'runs'}"
                         f", route {'never runs: ' + mine['error'] if mine['error'] else 'runs'}")
        elif not theirs.get("error"):
            if theirs["expression"] != mine["expression"]:
                found.append(f"trigger {name}: expression argo {theirs['expression']!r}, route {mine['expression']!r}")
            if theirs["dependencies"] != mine["dependencies"] or theirs["requiresAnd"] != mine["requiresAnd"]:
                found.append(f"trigger {name}: dependencies argo {theirs['dependencies']} "
                             f"(requiresAnd {theirs['requiresAnd']}), route {mine['dependencies']} "
                             f"(requiresAnd {mine['requiresAnd']})")
    for index, (theirs, mine) in enumerate(zip(argo["events"], ours["events"], strict=True)):
        for their_filter, my_filter in zip(theirs["filters"], mine["filters"], strict=True):
            argo_stages = ["panic"] if their_filter.get("panic") else argo_error_stages(their_filter["error"])
            if their_filter["pass"] != my_filter["pass"] or argo_stages != my_filter["errors"]:
                found.append(
                    f"event {index} dependency {their_filter['dependency']}: argo pass={their_filter['pass']} "
                    f"error={their_filter['error']!r}; route pass={my_filter['pass']} errors={my_filter['errors']} "
                    f"reason={my_filter['reason']!r}")
        if len(theirs["filters"]) != len(mine["filters"]):
            found.append(f"event {index}: argo filtered {len(theirs['filters'])} dependencies, "
                         f"route {len(mine['filters'])}")
        found.extend(_firing_differences(index, theirs["fired"], mine["fired"]))
    return found


def _firing_differences(index: int, theirs: list[dict[str, Any]], mine: list[dict[str, Any]]) -> list[str]:
    found: list[str] = []
    remaining = list(mine)
    for firing in theirs:
        match = next((candidate for candidate in remaining if _same_firing(firing, candidate)), None)
        if match is None:
            found.append(f"event {index}: argo fires {_describe(firing)}; route has no such firing "
                         f"(route: {[_describe(m) for m in mine]})")
        else:
            remaining.remove(match)
    found.extend(f"event {index}: route fires {_describe(m)}; argo does not" for m in remaining)
    return found


def _same_firing(firing: dict[str, Any], candidate: dict[str, Any]) -> bool:
    if candidate["trigger"] != firing["trigger"]:
        return False
    if firing.get("stage"):  # Argo's trigger fails before Execute: route must fail at the same stage
        return candidate["stage"] == firing["stage"] and candidate["dependency"] == firing["dependency"]
    if candidate["stage"] == "execute":  # route stops at Execute's name checks: Argo's resource has no name
        resource = firing.get("resource") or {}
        return candidate["dependency"] == firing["dependency"] and not (resource.get("metadata") or {}).get("name")
    return not candidate["stage"] and candidate["dependencies"] == firing["dependencies"] \
        and _same_json(candidate["resource"], firing.get("resource"))


def _describe(firing: dict[str, Any]) -> str:
    if firing.get("stage"):
        return (f"{firing['trigger']} by {firing.get('dependency')} failing at {firing['stage']}: "
                f"{firing.get('error') or firing.get('reason')}")
    return f"{firing['trigger']} with {firing.get('dependencies')} -> {firing.get('resource')}"
