"""The router against Argo Events itself: the same Sensors and events go to `routing` and to
stack/argo-events-oracle, a Go program that runs Argo Events v1.9.11's own code (the controller's
ValidateSensor, dependencies.Filter, the sensor's conditions translation, trigger parameters).
Every difference is a failure.

* generated cases (tests/routing/sensor_cases.py): thousands of random Sensors and events, biased
  toward the edges where Go and Python differ; GPUAAS_DIFFERENTIAL_CASES and
  GPUAAS_DIFFERENTIAL_SEED run more or others;
* the rendered Sensors of manifests/ on realistic Workload, Alertmanager, Node and calendar events;
* the three disagreements found by reading Argo Events' unit tests (issue 10, item 12).
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from routing.event import from_cloudevent
from routing.manifests import load_argo_events_objects
from tests.routing.builders import EVENT, SOURCE, sensor
from tests.routing.router_answers import disagreements, router_answer
from tests.routing.sensor_cases import CaseGenerator
from tests.support import argo_events as events
from tests.support.argo_events_oracle import ORACLE_MODULE, REPO, ask

CASES = int(os.environ.get("GPUAAS_DIFFERENTIAL_CASES", "3000"))
SEED = int(os.environ.get("GPUAAS_DIFFERENTIAL_SEED", "20261201"))
_BATCH = 1000


def _compare(cases: list[dict[str, Any]]) -> tuple[list[str], Counter[str]]:
    """Ask Argo Events and the router; return the disagreements (readable) and what was compared."""
    stats: Counter[str] = Counter()
    problems: list[str] = []
    for start in range(0, len(cases), _BATCH):
        batch = cases[start:start + _BATCH]
        for offset, (case, argo) in enumerate(zip(batch, ask(batch), strict=True)):
            ours = router_answer(case)
            found = disagreements(argo, ours)
            if found:
                problems.append(f"case {start + offset}: " + " | ".join(found[:3]) + "\n  case: "
                                + json.dumps(case, ensure_ascii=False)[:1500])
            _count(stats, argo)
    return problems, stats


def _count(stats: Counter[str], argo: dict[str, Any]) -> None:
    stats["sensors"] += 1
    stats["sensors rejected by the controller"] += bool(argo.get("invalid"))
    stats["triggers that never run"] += sum(bool(t.get("error")) for t in argo["triggers"])
    for event in argo["events"]:
        stats["events"] += 1
        for verdict in event["filters"]:
            stats["filter verdicts"] += 1
            stats["filter verdicts: pass"] += verdict["pass"]
            stats["filter verdicts: error"] += verdict["error"] is not None
            stats["filter verdicts: panic"] += bool(verdict.get("panic"))
            for stage in ("expr", "data", "time"):
                stats[f"filter errors: {stage}"] += bool(verdict["error"] and f"{stage} filter error" in verdict["error"])
        for firing in event["fired"]:
            stats["firings"] += 1
            stats[f"firings failing at {firing['stage']}" if firing.get("stage") else "firings with a resource"] += 1


def _report(title: str, stats: Counter[str], problems: list[str]) -> str:
    counts = ", ".join(f"{key}={value}" for key, value in sorted(stats.items()))
    return f"{title}: {counts}; disagreements={len(problems)}"


def test_generated_cases_agree_with_argo_events(record_property: Any) -> None:
    cases = CaseGenerator(SEED).cases(CASES)
    problems, stats = _compare(cases)
    summary = _report(f"{CASES} generated cases (seed {SEED})", stats, problems)
    record_property("differential", summary)
    print(summary)
    assert not problems, f"{len(problems)} of {CASES} cases disagree (seed {SEED}); first ones:\n" + \
        "\n".join(problems[:5])
    # the generator must keep reaching the interesting outcomes, or this test proves little
    # (floors at about half of what seed 20261201 reaches with 3000 cases)
    floors = {"sensors rejected by the controller": 0.1, "triggers that never run": 0.05, "filter verdicts: pass": 0.5,
              "filter errors: data": 0.4, "filter errors: expr": 0.3, "filter errors: time": 0.02,
              "firings with a resource": 0.15, "firings failing at resource-parameters": 0.08}
    for key, share in floors.items():
        assert stats[key] >= share * CASES, f"the generator reached {key} only {stats[key]} times: {summary}"


# ---------------------------------------------------------------------------------------------
# the rendered Sensors


def _argo_event(cloudevent: dict[str, Any], source_type: str) -> dict[str, Any]:
    """The event as the sensor receives it: context plus the data bytes the EventSource publishes."""
    event = from_cloudevent(cloudevent, source_type=source_type)
    return {"context": {"id": event.id, "source": event.source, "subject": event.subject,
                        "specversion": event.specversion, "type": event.type,
                        "datacontenttype": event.datacontenttype, "time": cloudevent["time"]},
            "data": None if event.data is None else base64.b64encode(event.data.encode()).decode()}


def _owned(body: dict[str, Any], owner: tuple[str, str] | None, annotations: dict[str, str]) -> dict[str, Any]:
    """A Workload with another owner kind (None keeps the batch Job) and extra annotations."""
    if owner is not None:
        body["metadata"]["ownerReferences"][0].update(apiVersion=owner[0], kind=owner[1])
    if annotations:
        body["metadata"]["annotations"] = dict(annotations)
    return body


def _lifecycle(sources: dict[tuple[str, str], str]) -> list[dict[str, Any]]:
    """Realistic events for every event the rendered EventSources publish."""
    out: list[dict[str, Any]] = []
    for (source, name), kind in sources.items():
        if kind == "resource" and "node" in (source + name):
            nodes = [events.gpu_node(gpus=8), events.gpu_node(gpus=None), events.gpu_node(gpus=4, ready=False)]
            for i, node in enumerate(nodes):
                ce = events.resource_event(source, name, "UPDATE" if i else "ADD", node, nodes[0], minute=i)
                ce["data"]["resource"], ce["data"]["group"], ce["data"]["version"] = "nodes", "", "v1"
                out.append(_argo_event(ce, kind))
        elif kind == "resource":
            # Owners and annotations the Sensors' may-need-a-step filter tells apart (steps.delivery.event_path_runs).
            for owner, annotations in ((None, {}), (("v1", "Pod"), {}), (("ray.io/v1", "RayJob"), {}),
                                       (None, {"gpuaas.io/release": "{}"}), (("batch/v1", "Job"), {"x.io/y": "z"})):
                previous = None
                for minute, stage in enumerate(events.STAGES):
                    for api_version in ("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"):
                        body = _owned(events.workload(stage=stage, api_version=api_version), owner, annotations)
                        for change in ("ADD", "UPDATE", "DELETE"):
                            old = previous if change == "UPDATE" else None
                            out.append(_argo_event(events.resource_event(source, name, change, body, old,
                                                                         minute=minute), kind))
                    previous = _owned(events.workload(stage=stage), owner, annotations)
        elif kind == "webhook":
            groups = [[events.idle_alert()], [events.idle_alert(status="resolved")],
                      [events.idle_alert(pod="a-0"), events.idle_alert(pod="b-0", status="resolved")],
                      [events.idle_alert(alertname="Other")], []]
            for minute, alerts in enumerate(groups):
                out.append(_argo_event(events.webhook_event(source, name, events.alertmanager_payload(alerts),
                                                            minute=minute), kind))
        elif kind == "calendar":
            out.extend(_argo_event(events.calendar_event(source, name, minute=m), kind) for m in (0, 30, 61))
    return out


def test_rendered_sensors_agree_with_argo_events() -> None:
    loaded = load_argo_events_objects(REPO / "manifests")
    sensors = [o for o in loaded.objects if o.get("kind") == "Sensor"]
    sources: dict[tuple[str, str], str] = {}
    for obj in loaded.objects:
        if obj.get("kind") == "EventSource":
            for kind, block in (obj.get("spec") or {}).items():
                if isinstance(block, dict) and kind not in ("template", "service"):
                    for name in block:
                        sources[(obj["metadata"]["name"], name)] = kind
    assert sensors and sources, "manifests/ has no rendered Sensors or EventSources; run `gpuaas render`"
    stream = _lifecycle(sources)
    cases = [{"sensor": s, "events": copy.deepcopy(stream)} for s in sensors]
    problems, stats = _compare(cases)
    assert not problems, "\n".join(problems[:5])
    assert stats["sensors rejected by the controller"] == 0, "the controller would refuse a rendered Sensor"
    assert stats["firings with a resource"] > 0 and stats["filter verdicts: pass"] > 0


# ---------------------------------------------------------------------------------------------
# the disagreements found in Argo Events' own unit tests (issue 10, item 12)


def _event(time: str, data: dict[str, Any] | None = None, subject: str = EVENT, event_id: str = "e1") -> dict[str, Any]:
    raw = json.dumps(data if data is not None else {"type": "UPDATE"}).encode()
    return {"context": {"id": event_id, "source": SOURCE, "subject": subject, "specversion": "1.0",
                        "type": "resource", "datacontenttype": "application/json", "time": time},
            "data": base64.b64encode(raw).decode()}


def _agree(case: dict[str, Any]) -> dict[str, Any]:
    (argo,) = ask([case])
    assert disagreements(argo, router_answer(case)) == []
    return argo


@pytest.mark.parametrize(("time", "fires"), [("2024-07-15T14:00:00Z", True), ("2024-07-15T12:00:00Z", False),
                                             ("2024-07-15T22:00:00Z", False)])
def test_time_filter_timezone_is_read_as_argo_events_reads_it(time: str, fires: bool) -> None:
    """filter_time_test.go TestFilterTimeWithTimezone: 09:00-17:00 in America/New_York."""
    case = {"sensor": sensor({"time": {"start": "09:00:00", "stop": "17:00:00", "timezone": "America/New_York"}}),
            "events": [_event(time)]}
    argo = _agree(case)
    assert bool(argo["events"][0]["fired"]) is fires


@pytest.mark.parametrize("time_filter", [{"start": "09:00:00", "stop": "09:00:00"},
                                         {"start": "09:00:00", "stop": "17:00:00", "timezone": "Mars/Olympus"},
                                         {"start": "9am", "stop": "17:00:00"}])
def test_time_filter_the_controller_rejects_never_fires(time_filter: dict[str, str]) -> None:
    """validate.go validateEventTimeFilter: the controller refuses the Sensor (routing fired before)."""
    argo = _agree({"sensor": sensor({"time": time_filter}), "events": [_event("2024-07-15T09:30:00Z")]})
    assert argo["invalid"] and argo["events"][0]["fired"] == []


def test_conditions_resolve_names_up_to_dash_and_underscore() -> None:
    """listener_test.go: `dep-1a` in conditions names the dependency `dep_1a`."""
    deps = [{"name": n, "eventSourceName": SOURCE, "eventName": e}
            for n, e in (("dep-1", EVENT), ("dep_1a", "b"), ("dep-3", "c"))]
    case = {"sensor": sensor(dependencies=deps, conditions="dep-1a && dep_3"),
            "events": [_event("2024-07-15T09:30:00Z", subject="b", event_id="1"),
                       _event("2024-07-15T09:30:01Z", subject="c", event_id="2")]}
    argo = _agree(case)
    assert argo["triggers"][0]["expression"] == "dep_1a&&dep-3"
    assert [f["dependencies"] for f in argo["events"][1]["fired"]] == [["dep-3", "dep_1a"]]


def test_oracle_runs_the_argo_events_version_the_stack_pins() -> None:
    def pinned(gomod: Path) -> str:
        match = re.search(r"github\.com/argoproj/argo-events (v\S+)", gomod.read_text())
        assert match, f"{gomod} does not require github.com/argoproj/argo-events"
        return match.group(1)

    assert pinned(ORACLE_MODULE / "go.mod") == pinned(REPO / "stack" / "argo-events" / "go.mod")
