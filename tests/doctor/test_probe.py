"""The probe finds the gpuaas-on-idle run the way the product's Sensor actually submits it.

The real stack showed the defect this guards: the Sensor's Workflow references the template and carries only
the labels the Sensor and the template give it, not `workflows.argoproj.io/workflow-template` (only
`argo submit --from` sets that), so a probe listing by that label never saw its run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaas.doctor import probe

ROOT = Path(__file__).resolve().parents[2]
SENSOR = ROOT / "manifests/base/events/sensor-gpuaas-on-idle.yaml"
TEMPLATE = ROOT / "manifests/base/workflows/gpuaas-on-idle.yaml"


def _selector_labels() -> dict[str, str]:
    key, value = probe.ON_IDLE_SELECTOR.split("=")
    return {key: value}


def test_the_selector_is_a_label_both_the_sensor_and_the_template_put_on_the_run() -> None:
    sensor = yaml.safe_load(SENSOR.read_text())
    submitted = sensor["spec"]["triggers"][0]["template"]["argoWorkflow"]["source"]["resource"]
    template = yaml.safe_load(TEMPLATE.read_text())
    assert _selector_labels().items() <= submitted["metadata"]["labels"].items(), submitted["metadata"]
    assert _selector_labels().items() <= template["spec"]["workflowMetadata"]["labels"].items()
    assert submitted["spec"]["workflowTemplateRef"]["name"] == probe.ON_IDLE


class _Kube:
    """Answers a list as the apiserver does: only the items whose labels match the label selector."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.stored = items

    def items(self, path: str, *, label_selector: str = "", field_selector: str = "") -> list[dict[str, Any]]:
        wanted = dict(part.split("=") for part in label_selector.split(",") if part)
        return [w for w in self.stored if wanted.items() <= (w["metadata"].get("labels") or {}).items()]


class _Alertmanager:
    url = "http://alertmanager.test:9093"

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def post_json(self, path: str, body: Any) -> None:
        self.sent.append((path, body))


def test_the_run_the_sensor_submits_is_found_and_its_record_read(monkeypatch: pytest.MonkeyPatch) -> None:
    alertmanager = _Alertmanager()
    kube = _Kube([])

    def sensor_submits(_: float) -> None:
        """What the Sensor makes of the alert: its Workflow, unlabelled by Argo, finished."""
        labels = alertmanager.sent[0][1][0]["labels"]
        record = json.dumps({"data": {"outcome": "skipped", "plan": {"reasons": ["pod gone"]},
                                      "observed": {"alert": labels}}})
        kube.stored = [{"metadata": {"name": "gpuaas-on-idle-x1", "labels": {"gpuaas.io/reaction": "on-idle"}},
                        "spec": {"workflowTemplateRef": {"name": probe.ON_IDLE}, "arguments": {"parameters": [
                            {"name": "namespace", "value": labels["workload_namespace"]}]}},
                        "status": {"phase": "Succeeded", "nodes": {"n": {"displayName": "idle-alerts", "outputs": {
                            "parameters": [{"name": "record", "value": record}]}}}}}]

    monkeypatch.setattr(probe.time, "sleep", sensor_submits)
    result = probe.run(kube, alertmanager, "gpuaas", timeout_s=30, poll_s=0.01)  # type: ignore[arg-type]
    assert result.workflow == "gpuaas-on-idle-x1" and result.phase == "Succeeded", result
    assert not result.released
