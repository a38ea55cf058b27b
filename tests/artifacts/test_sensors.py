"""The rendered Sensors, evaluated with Argo Events semantics (routing) on realistic events.

tests/routing covers the whole Workload lifecycle; here: the cases this folder's design decisions
are about (a Workload admitted in its very first status write, where oldBody has no status; the
re-list ADD; GPU Node heartbeats vs capacity changes; the calendar), and that every submitted
Workflow carries the parameters its template declares.
"""

from __future__ import annotations

import base64
import copy
import json
import uuid
from typing import Any

import pytest

from routing import Router
from tests.artifacts.conftest import MANIFESTS
from tests.support.argo_events import (
    alertmanager_payload,
    idle_alert,
    resource_event,
    webhook_event,
)
from tests.support.argo_events import workload as any_workload

JSON = dict[str, Any]
WORKLOADS = ("gpuaas-workloads", "workloads")
ALERTS = ("gpuaas-alertmanager", "idle")


def workload(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """A StatefulSet's Workload: the Sensors start runs for owners a step may write for (a job kind's
    transitions are the catch-up sweep's, tests/routing/test_catchup_partition.py)."""
    return any_workload(*args, **{"owner_kind": "StatefulSet", **kwargs})


@pytest.fixture()
def router() -> Router:
    return Router.from_manifests(MANIFESTS)


def _templates(result: Any) -> list[str]:
    return sorted(w["spec"]["workflowTemplateRef"]["name"] for w in result.workflows)


def _parameters(workflow: JSON) -> dict[str, str]:
    return {p["name"]: p["value"] for p in workflow["spec"]["arguments"]["parameters"]}


def test_first_status_write_that_admits_starts_on_admitted(router: Router) -> None:
    """Kueue can reserve quota and admit in the workload's first status write: oldBody has no status."""
    old = workload(stage="pending")
    old.pop("status", None)
    new = workload(stage="admitted")
    result = router.route(resource_event(*WORKLOADS, "UPDATE", new, old))
    assert _templates(result) == ["gpuaas-on-admitted"]
    given = _parameters(result.workflows[0])
    assert given["namespace"] == "team-a" and given["workload"] == new["metadata"]["name"]
    assert given["tenant"] == "team-a" and given["dry-run"] == "false"
    event = json.loads(given["event"])
    assert json.loads(base64.b64decode(event["data"]))["body"]["metadata"]["name"] == new["metadata"]["name"]
    assert result.workflows[0]["metadata"]["labels"]["gpuaas.io/reaction"] == "on-admitted"


@pytest.mark.parametrize("stage", ["admitted", "finished-succeeded"])
def test_relist_add_of_an_admitted_or_finished_workload_starts_nothing(router: Router, stage: str) -> None:
    result = router.route(resource_event(*WORKLOADS, "ADD", workload(stage=stage)))
    assert result.workflows == []


def test_finish_of_a_workload_whose_old_status_lacks_finished_starts_on_finished(router: Router) -> None:
    result = router.route(resource_event(*WORKLOADS, "UPDATE", workload(stage="finished-failed"),
                                         workload(stage="admitted")))
    assert _templates(result) == ["gpuaas-on-finished"]


def test_missing_admission_falls_back_to_an_empty_tenant(router: Router) -> None:
    new, old = workload(stage="finished-succeeded"), workload(stage="admitted")
    new["status"].pop("admission")
    result = router.route(resource_event(*WORKLOADS, "UPDATE", new, old))
    assert _templates(result) == ["gpuaas-on-finished"] and _parameters(result.workflows[0])["tenant"] == ""


def test_firing_group_passes_namespace_and_the_whole_event(router: Router) -> None:
    body = alertmanager_payload([idle_alert(pod="a-0"), idle_alert(pod="b-0")])
    result = router.route(webhook_event(*ALERTS, body))
    assert _templates(result) == ["gpuaas-on-idle"]
    given = _parameters(result.workflows[0])
    assert given["namespace"] == "team-a" and given["workload"] == ""
    assert json.loads(base64.b64decode(json.loads(given["event"])["data"]))["body"]["alerts"][1]["labels"]["pod"] == "b-0"


@pytest.mark.parametrize("body", [
    alertmanager_payload([idle_alert(status="resolved")]),
    alertmanager_payload([idle_alert(alertname="GPUWorkloadIdleTest")]),
])
def test_resolved_or_foreign_groups_start_nothing(router: Router, body: JSON) -> None:
    assert router.route(webhook_event(*ALERTS, body)).workflows == []


def _node(gpus: str | None = "8", heartbeat: str = "2026-12-01T09:00:00Z") -> JSON:
    allocatable = {"cpu": "96"} if gpus is None else {"cpu": "96", "nvidia.com/gpu": gpus}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu-node-1", "labels": {"nvidia.com/gpu.present": "true"}},
            "spec": {},
            "status": {"allocatable": allocatable,
                       "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}]}}


def _node_event(kind: str, body: JSON, old: JSON | None = None) -> JSON:
    event = resource_event("gpuaas-gpu-nodes", "gpu-nodes", kind, body, old)
    event["data"].update({"group": "", "version": "v1", "resource": "nodes"})
    return event


@pytest.mark.parametrize("kind", ["ADD", "DELETE"])
def test_gpu_node_added_or_deleted_starts_a_capacity_run(router: Router, kind: str) -> None:
    result = router.route(_node_event(kind, _node()))
    assert _templates(result) == ["gpuaas-provision-quota"]
    assert _parameters(result.workflows[0])["mode"] == "capacity"


def test_gpu_node_heartbeat_starts_nothing_and_capacity_change_does(router: Router) -> None:
    before = _node()
    assert router.route(_node_event("UPDATE", _node(heartbeat="2026-12-01T09:05:00Z"), before)).workflows == []
    result = router.route(_node_event("UPDATE", _node(gpus="6"), before))
    assert _templates(result) == ["gpuaas-provision-quota"]
    assert [t.trigger for t in result.triggered] == ["capacity-on-gpu-node-capacity-changed"]


@pytest.mark.parametrize(("old_gpus", "new_gpus", "trigger"), [
    (None, "8", "capacity-on-gpu-node-capacity-appeared"),
    ("8", None, "capacity-on-gpu-node-capacity-vanished"),
])
def test_device_plugin_starting_or_stopping_starts_one_capacity_run(router: Router, old_gpus: str | None,
                                                                    new_gpus: str | None, trigger: str) -> None:
    result = router.route(_node_event("UPDATE", _node(gpus=new_gpus), _node(gpus=old_gpus)))
    assert [t.trigger for t in result.triggered] == [trigger]


def test_calendar_tick_starts_one_capacity_run(router: Router) -> None:
    tick = {"specversion": "1.0", "id": uuid.uuid4().hex, "source": "gpuaas-capacity-clock",
            "subject": "capacity-reconcile", "type": "calendar", "time": "2026-12-01T09:10:00Z",
            "datacontenttype": "application/json",
            "data": {"eventTime": "2026-12-01 09:10:00 +0000 UTC", "metadata": {}}}
    result = router.route(tick)
    assert _templates(result) == ["gpuaas-provision-quota"]
    assert [t.trigger for t in result.triggered] == ["capacity-on-capacity-reconcile"]


def test_every_submitted_workflow_is_valid_and_fits_its_template(router: Router) -> None:
    import workflows
    from gpuaas.manifests.validation import schema_errors

    declared = {name: [p["name"] for p in t["spec"]["arguments"]["parameters"]]
                for name, t in workflows.rendered().items()}
    events = [
        resource_event(*WORKLOADS, "UPDATE", workload(stage="admitted"), workload(stage="quota-reserved")),
        resource_event(*WORKLOADS, "UPDATE", workload(stage="finished-succeeded"), workload(stage="admitted")),
        webhook_event(*ALERTS, alertmanager_payload([idle_alert()])),
        _node_event("ADD", _node()),
    ]
    seen = set()
    for event in events:
        for workflow in router.route(copy.deepcopy(event)).workflows:
            name = workflow["spec"]["workflowTemplateRef"]["name"]
            seen.add(name)
            # every parameter but the sweep's own (recorded-by, record: their defaults run the step)
            assert list(_parameters(workflow)) == [n for n in declared[name] if n not in ("recorded-by", "record")]
            assert schema_errors(workflow) == []
    assert seen == {"gpuaas-on-admitted", "gpuaas-on-finished", "gpuaas-on-idle", "gpuaas-provision-quota"}


def test_every_trigger_submits_a_template_at_least_once_with_retry_and_rate_limit() -> None:
    import sensors

    for sensor in sensors.all_sensors():
        for trigger in sensor["spec"]["triggers"]:
            argo = trigger["template"]["argoWorkflow"]
            assert trigger["atLeastOnce"] is True, sensor["metadata"]["name"]
            assert trigger["retryStrategy"]["steps"] >= 1 and trigger["rateLimit"]["requestsPerUnit"] >= 1
            assert argo["operation"] == "submit"
            workflow = argo["source"]["resource"]
            assert workflow["kind"] == "Workflow" and "templates" not in workflow["spec"]
            names = [p["name"] for p in workflow["spec"]["arguments"]["parameters"]]
            whole_event = [p for p in argo["parameters"]
                           if p["dest"] == f"spec.arguments.parameters.{names.index('event')}.value"]
            assert [set(p["src"]) for p in whole_event] == [{"dependencyName"}]   # no dataKey: the whole event


def test_event_sources_use_the_flat_shape_the_controller_reads() -> None:
    import sensors

    for source in sensors.all_event_sources():
        for block in (source["spec"].get("resource") or {}).values():
            assert {"group", "version", "resource"} <= set(block) and "groupVersionResource" not in block
        for block in (source["spec"].get("webhook") or {}).values():
            assert {"endpoint", "method", "port", "authSecret"} <= set(block) and "webhookContext" not in block


def test_the_on_idle_sensor_reads_the_workload_namespace_label_the_rule_writes() -> None:
    """The Sensor's `namespace` parameter is the label the product's idle rule puts the workload's namespace in
    (its `namespace` is the product's own: gpuaas/manifests/observability.py); sensors/ may not import steps/."""
    from gpuaas.manifests import observability as obs
    from sensors import on_idle
    from steps.reactions import idle_alerts

    assert on_idle.WORKLOAD_NAMESPACE_LABEL == idle_alerts.WORKLOAD_NAMESPACE_LABEL == obs.WORKLOAD_NAMESPACE_LABEL
    assert obs.idle_alert()["labels"][obs.WORKLOAD_NAMESPACE_LABEL] == "{{ $labels.namespace }}"
