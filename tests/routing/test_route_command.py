"""`gpuaas route` as an admin runs it: files in, one JSON object per event out, clear errors."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from gpuaas.commands import route
from tests.routing.conftest import FIXTURE_MANIFESTS
from tests.support.argo_events import (
    alertmanager_payload,
    idle_alert,
    resource_event,
    webhook_event,
    workload,
)


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="gpuaas route")
    route.configure(parser)
    return route.run(parser.parse_args(list(argv)))


@pytest.fixture
def events_file(tmp_path: Path) -> Path:
    lines = [
        resource_event("gpuaas-workloads", "workloads", "ADD", workload(stage="pending")),
        resource_event("gpuaas-workloads", "workloads", "UPDATE", workload(stage="admitted"), workload(stage="pending")),
        webhook_event("gpuaas-alertmanager", "idle", alertmanager_payload([idle_alert()])),
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in lines) + "\n", encoding="utf-8")
    return path


def test_single_event_prints_one_json_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps(resource_event("gpuaas-workloads", "workloads", "UPDATE",
                                               workload(stage="admitted"), workload(stage="quota-reserved"))))
    assert run("--manifests", str(FIXTURE_MANIFESTS), str(event)) == 0
    out = json.loads(capsys.readouterr().out)
    assert [t["workflow"]["spec"]["workflowTemplateRef"]["name"] for t in out["triggered"]] == ["gpuaas-on-admitted"]
    assert {"sensor", "dependency", "reason"} <= set(out["skipped"][0])


def test_events_file_prints_one_line_per_event(events_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("--manifests", str(FIXTURE_MANIFESTS), "--events", str(events_file)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    fired = [[t["trigger"] for t in json.loads(line)["triggered"]] for line in lines]
    assert fired == [[], ["submit-on-admitted"], ["submit-on-idle"]]


def test_text_output_explains(events_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("--manifests", str(FIXTURE_MANIFESTS), "--events", str(events_file), "--output", "text") == 0
    text = capsys.readouterr().out
    assert "FIRES  gpuaas-on-admitted/submit-on-admitted -> submit WorkflowTemplate gpuaas-on-admitted" in text
    assert "workload = job-llm-finetune-7c9f2" in text
    assert 'skip   gpuaas-on-admitted/workload-admitted: data filter 1 (type): value "ADD" does not match ^UPDATE$' in text


def test_only_subscribed_leaves_out_other_sensors(events_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("--manifests", str(FIXTURE_MANIFESTS), "--events", str(events_file), "--only-subscribed") == 0
    for line in capsys.readouterr().out.splitlines():
        assert all("not subscribed" not in s["reason"] for s in json.loads(line)["skipped"])


def test_event_without_source_is_rejected_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "events.jsonl"
    bad.write_text(json.dumps({"subject": "workloads", "data": {}}) + "\n")
    assert run("--manifests", str(FIXTURE_MANIFESTS), "--events", str(bad)) == 2
    err = capsys.readouterr().err
    assert f"{bad}:1" in err and "'source'" in err and "EventSource name" in err


def test_not_json_is_rejected_with_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "events.jsonl"
    good = resource_event("gpuaas-workloads", "workloads", "ADD", workload())
    bad.write_text(json.dumps(good) + "\n{not json\n")
    assert run("--manifests", str(FIXTURE_MANIFESTS), "--events", str(bad)) == 2
    assert f"{bad}:2: not a JSON object" in capsys.readouterr().err


def test_manifests_without_sensors_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    event = tmp_path / "e.json"
    event.write_text("{}")
    assert run("--manifests", str(tmp_path), str(event)) == 2
    assert "no Sensor found" in capsys.readouterr().err


def test_unknown_event_name_is_warned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    event = tmp_path / "e.json"
    event.write_text(json.dumps(resource_event("gpuaas-workloads", "workload", "ADD", workload())))
    assert run("--manifests", str(FIXTURE_MANIFESTS), str(event)) == 0
    out = json.loads(capsys.readouterr().out)
    assert any("defines no event named 'workload'" in w for w in out["warnings"])


def test_kustomize_namespace_reaches_the_workflow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    event = tmp_path / "e.json"
    event.write_text(json.dumps(webhook_event("gpuaas-alertmanager", "idle", alertmanager_payload([idle_alert()]))))
    assert run("--manifests", str(FIXTURE_MANIFESTS), str(event)) == 0
    (triggered,) = json.loads(capsys.readouterr().out)["triggered"]
    assert triggered["workflow"]["metadata"]["namespace"] == "gpuaas"
