"""Route tests over the Kueue Workload lifecycle and Alertmanager groups.

What the product promises (issue 3): `gpuaas-on-admitted` / `gpuaas-on-finished` start on the
TRANSITION only (not on every status write, not on churn, not on eviction, not on the re-list
after an event-source restart), `gpuaas-on-idle` on firing `GPUWorkloadIdle` groups only, one
workflow per Alertmanager POST. Each test routes a realistic event through the Sensors (the
hand-written fixture, and the rendered manifests/ once they exist) and checks which
WorkflowTemplates would run, with which parameters.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.routing.conftest import RENDERED_MANIFESTS, Stack, make_stack
from tests.support.argo_events import (
    alertmanager_payload,
    calendar_event,
    gpu_node,
    idle_alert,
    resource_event,
    webhook_event,
)
from tests.support.argo_events import workload as any_workload

ON_ADMITTED = "gpuaas-on-admitted"
ON_FINISHED = "gpuaas-on-finished"
ON_IDLE = "gpuaas-on-idle"
API_VERSIONS = ["kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"]


def workload(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """A StatefulSet's Workload: the Sensors start runs for owners a step may write for (a job kind's
    transitions are the catch-up sweep's, tests/routing/test_catchup_partition.py)."""
    return any_workload(*args, **{"owner_kind": "StatefulSet", **kwargs})


def templates(result: Any) -> list[str]:
    return sorted((wf.get("spec") or {}).get("workflowTemplateRef", {}).get("name", "?") for wf in result.workflows)


def parameters(workflow: dict[str, Any]) -> dict[str, str]:
    return {p["name"]: p.get("value") for p in workflow["spec"]["arguments"]["parameters"]}


def update(stack: Stack, old_stage: str, new_stage: str, api_version: str, **kw: Any) -> Any:
    old = workload(stage=old_stage, api_version=api_version, **kw)
    new = workload(stage=new_stage, api_version=api_version, **kw)
    return stack.router.route(resource_event(*stack.workloads, "UPDATE", new, old))


def delivered_text(workflow: dict[str, Any]) -> str:
    """All parameter values, with a whole-event parameter's base64 data decoded."""
    parts = []
    for value in parameters(workflow).values():
        parts.append(str(value))
        try:
            decoded = json.loads(value)
        except (TypeError, ValueError):
            continue
        if isinstance(decoded, dict) and isinstance(decoded.get("data"), str):
            parts.append(base64.b64decode(decoded["data"]).decode())
    return "\n".join(parts)


def explain(result: Any) -> str:
    return json.dumps([s.to_dict() for s in result.skipped if "not subscribed" not in s.reason], indent=1)


@pytest.mark.parametrize("api_version", API_VERSIONS)
class TestWorkloadLifecycle:
    def test_pending_workload_created_starts_nothing(self, stack: Stack, api_version: str) -> None:
        body = workload(stage="pending", api_version=api_version)
        result = stack.router.route(resource_event(*stack.workloads, "ADD", body))
        assert templates(result) == [], explain(result)

    def test_pending_status_write_starts_nothing(self, stack: Stack, api_version: str) -> None:
        result = update(stack, "pending", "pending", api_version)
        assert templates(result) == []

    def test_quota_reserved_without_admission_starts_nothing(self, stack: Stack, api_version: str) -> None:
        result = update(stack, "pending", "quota-reserved", api_version)
        assert templates(result) == [], explain(result)

    def test_admission_starts_on_admitted_with_the_workload(self, stack: Stack, api_version: str) -> None:
        result = update(stack, "pending", "admitted", api_version, name="job-a-1b2c3", namespace="team-b")
        assert templates(result) == [ON_ADMITTED], explain(result)
        workflow = result.workflows[0]
        params = parameters(workflow)
        assert (params["namespace"], params["workload"]) == ("team-b", "job-a-1b2c3")
        labels = workflow["metadata"]["labels"]
        assert labels["events.argoproj.io/sensor"] == result.triggered[0].sensor
        assert labels["events.argoproj.io/trigger"] == result.triggered[0].trigger
        assert workflow["kind"] == "Workflow" and workflow["metadata"].get("generateName")

    def test_admission_after_admission_checks_starts_on_admitted(self, stack: Stack, api_version: str) -> None:
        result = update(stack, "quota-reserved", "admitted", api_version)
        assert templates(result) == [ON_ADMITTED], explain(result)

    def test_status_churn_while_admitted_starts_nothing(self, stack: Stack, api_version: str) -> None:
        churn = [("admitted", "admitted"), ("admitted", "admitted-pods-ready"),
                 ("admitted-pods-ready", "admitted-pods-ready")]
        for old, new in churn:
            result = update(stack, old, new, api_version)
            assert templates(result) == [], f"{old} -> {new}: {templates(result)}"

    @pytest.mark.parametrize("outcome", ["finished-succeeded", "finished-failed"])
    def test_finish_starts_on_finished_only(self, stack: Stack, api_version: str, outcome: str) -> None:
        result = update(stack, "admitted-pods-ready", outcome, api_version)
        assert templates(result) == [ON_FINISHED], explain(result)
        params = parameters(result.workflows[0])
        assert params["workload"] == "job-llm-finetune-7c9f2" and params["namespace"] == "team-a"

    def test_a_workload_slice_replaced_by_a_scale_up_starts_nothing(self, stack: Stack, api_version: str) -> None:
        """An elastic job scaled up gets a new Workload slice; Kueue finishes the old slice with reason
        WorkloadSliceReplaced (seen on real Kueue v0.19.2 after resume-workers of an elastic Job). The
        job runs on: that is no completion, and on-finished must not start (it would return the
        slice's lent quota and record GPU-hours as if the job ended)."""
        old = workload(stage="admitted-pods-ready", api_version=api_version)
        new = workload(stage="admitted-pods-ready", api_version=api_version)
        new["status"]["conditions"].append({
            "type": "Finished", "status": "True", "reason": "WorkloadSliceReplaced",
            "message": "Replaced to accommodate a workload (UID: 0c1e) slice", "lastTransitionTime": "2026-12-01T10:00:00Z"})
        result = stack.router.route(resource_event(*stack.workloads, "UPDATE", new, old))
        assert templates(result) == [], explain(result)

    def test_status_write_after_finish_starts_nothing(self, stack: Stack, api_version: str) -> None:
        result = update(stack, "finished-succeeded", "finished-succeeded", api_version)
        assert templates(result) == []

    def test_eviction_starts_nothing(self, stack: Stack, api_version: str) -> None:
        result = update(stack, "admitted-pods-ready", "evicted-preempted", api_version)
        assert templates(result) == [], explain(result)

    def test_readmission_after_eviction_starts_on_admitted(self, stack: Stack, api_version: str) -> None:
        result = update(stack, "evicted-preempted", "readmitted", api_version)
        assert templates(result) == [ON_ADMITTED], explain(result)

    def test_deactivation_starts_nothing(self, stack: Stack, api_version: str) -> None:
        result = update(stack, "admitted-pods-ready", "deactivated", api_version)
        assert templates(result) == [], explain(result)

    @pytest.mark.parametrize("stage", ["admitted", "finished-succeeded", "pending"])
    def test_deletion_starts_nothing(self, stack: Stack, api_version: str, stage: str) -> None:
        body = workload(stage=stage, api_version=api_version)
        result = stack.router.route(resource_event(*stack.workloads, "DELETE", body))
        assert templates(result) == [], explain(result)

    @pytest.mark.parametrize("stage", ["admitted", "admitted-pods-ready", "finished-succeeded", "finished-failed"])
    def test_relist_after_restart_starts_nothing(self, stack: Stack, api_version: str, stage: str) -> None:
        """An EventSource restart LISTs and emits ADD for every existing Workload: not a transition."""
        body = workload(stage=stage, api_version=api_version)
        result = stack.router.route(resource_event(*stack.workloads, "ADD", body))
        assert templates(result) == [], explain(result)


class TestWorkloadEventDetails:
    def test_event_parameter_carries_the_event_for_the_step(self, stack: Stack) -> None:
        """The `event` parameter is what ARCHITECTURE §1 promises: the raw event (data base64 or
        object) or the bare data; either way it decodes to the Workload that was admitted."""
        event = resource_event(*stack.workloads, "UPDATE", workload(stage="admitted"), workload(stage="pending"))
        result = stack.router.route(event)
        value = parameters(result.workflows[0])["event"]
        decoded = json.loads(value)
        if "context" in decoded:
            assert decoded["context"]["id"] == event["id"]
            data = decoded["data"]
            data = json.loads(base64.b64decode(data)) if isinstance(data, str) else data
        else:
            data = decoded
        body = data.get("body", data)
        assert body["metadata"]["name"] == "job-llm-finetune-7c9f2"

    def test_two_workloads_admitted_start_two_runs(self, stack: Stack) -> None:
        names = []
        for name in ("job-a-11111", "job-b-22222"):
            old, new = workload(name, stage="pending"), workload(name, stage="admitted")
            result = stack.router.route(resource_event(*stack.workloads, "UPDATE", new, old))
            names += [parameters(wf)["workload"] for wf in result.workflows]
        assert names == ["job-a-11111", "job-b-22222"]

    def test_redelivered_event_id_is_dropped(self, stack: Stack) -> None:
        event = resource_event(*stack.workloads, "UPDATE", workload(stage="admitted"), workload(stage="pending"))
        assert templates(stack.router.route(event)) == [ON_ADMITTED]
        again = stack.router.route(event)
        assert templates(again) == []
        assert any("already processed" in s.reason for s in again.skipped)

    def test_same_event_id_after_a_minute_is_processed_again(self, stack: Stack) -> None:
        now = [1_796_000_000.0]
        stack.router.clock = lambda: now[0]
        event = resource_event(*stack.workloads, "UPDATE", workload(stage="admitted"), workload(stage="pending"))
        assert templates(stack.router.route(event)) == [ON_ADMITTED]
        now[0] += 61
        assert templates(stack.router.route(event)) == [ON_ADMITTED]

    def test_a_skipped_admission_says_which_filter_failed(self, stack: Stack) -> None:
        result = update(stack, "pending", "quota-reserved", "kueue.x-k8s.io/v1beta2")
        admitted = [s for s in result.skipped if "not subscribed" not in s.reason
                    and "admit" in (s.sensor + (s.dependency or "")).lower()]
        assert admitted, explain(result)
        assert any("Admitted" in s.reason or "filter" in s.reason for s in admitted), explain(result)


class TestAlertmanagerGroups:
    def route(self, stack: Stack, body: dict[str, Any]) -> Any:
        return stack.router.route(webhook_event(*stack.alerts, body))

    def test_firing_idle_group_starts_on_idle_once(self, stack: Stack) -> None:
        result = self.route(stack, alertmanager_payload([idle_alert()]))
        assert templates(result) == [ON_IDLE], explain(result)

    def test_resolved_group_starts_nothing(self, stack: Stack) -> None:
        result = self.route(stack, alertmanager_payload([idle_alert(status="resolved")]))
        assert templates(result) == [], explain(result)

    def test_group_for_another_alert_starts_nothing(self, stack: Stack) -> None:
        other = [idle_alert(alertname="KubePodCrashLooping"), idle_alert(alertname="KubePodCrashLooping", pod="x-1")]
        result = self.route(stack, alertmanager_payload(other))
        assert templates(result) == [], explain(result)

    def test_alertname_that_only_contains_the_idle_name_starts_nothing(self, stack: Stack) -> None:
        """Unanchored regexps would let `GPUWorkloadIdleWarning` through."""
        result = self.route(stack, alertmanager_payload([idle_alert(alertname="GPUWorkloadIdleWarning")]))
        assert templates(result) == [], explain(result)

    def test_webhook_with_several_alerts_is_one_run_carrying_all_alerts(self, stack: Stack) -> None:
        alerts = [idle_alert(pod=f"llm-finetune-7c9f2-{i}", gpu=str(i)) for i in range(3)]
        alerts.append(idle_alert(namespace="team-b", pod="notebook-0"))
        result = self.route(stack, alertmanager_payload(alerts))
        assert templates(result) == [ON_IDLE], explain(result)
        text = delivered_text(result.workflows[0])
        for alert in alerts:
            assert alert["labels"]["pod"] in text

    def test_repeated_post_starts_another_run(self, stack: Stack) -> None:
        """Alertmanager re-sends on repeat_interval with a new event id: not deduplicated."""
        body = alertmanager_payload([idle_alert()])
        first, second = self.route(stack, body), self.route(stack, body)
        assert templates(first) == templates(second) == [ON_IDLE]


def test_concurrent_routing_loses_and_duplicates_nothing(stack: Stack) -> None:
    """The engine routes from several threads: every admission fires exactly once."""
    from concurrent.futures import ThreadPoolExecutor

    events = [resource_event(*stack.workloads, "UPDATE", workload(f"job-w{i}-abcde", stage="admitted"),
                             workload(f"job-w{i}-abcde", stage="pending")) for i in range(400)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(stack.router.route, events))
    names = sorted(parameters(wf)["workload"] for r in results for wf in r.workflows)
    assert names == sorted(f"job-w{i}-abcde" for i in range(400))


class TestCapacityTracking:
    """`gpuaas-provision-quota` (capacity mode) on GPU Node changes and the reconcile clock.

    Only the rendered Sensors track capacity (the hand-written fixture models the Workload and
    Alertmanager sensors only), so these run against manifests/ alone; a rendered set without
    the node source or the calendar is a failure, never a skip."""

    @pytest.fixture
    def stack(self) -> Stack:
        return make_stack(RENDERED_MANIFESTS)

    @pytest.fixture
    def nodes(self, stack: Stack) -> tuple[str, str]:
        found = [(info.name, event_name) for info in stack.router.event_sources.values()
                 for event_name, kind in info.events.items()
                 if kind == "resource" and ((stack.router.event_source_specs[info.name].get(kind) or {})
                                            .get(event_name) or {}).get("resource") == "nodes"]
        assert found, "the rendered EventSources watch no Nodes: gpuaas-provision-quota would never see capacity change"
        return found[0]

    def node_event(self, stack: Stack, nodes: tuple[str, str], kind: str, body: dict, old: dict | None = None) -> Any:
        event = resource_event(*nodes, kind, body, old)
        event["data"]["group"], event["data"]["version"], event["data"]["resource"] = "", "v1", "nodes"
        return stack.router.route(event)

    def test_gpu_node_added_or_removed_provisions_capacity(self, stack: Stack, nodes: tuple[str, str]) -> None:
        for kind in ("ADD", "DELETE"):
            result = self.node_event(stack, nodes, kind, gpu_node())
            assert templates(result) == ["gpuaas-provision-quota"], explain(result)
            assert parameters(result.workflows[0]).get("mode") == "capacity"

    def test_node_heartbeat_provisions_nothing(self, stack: Stack, nodes: tuple[str, str]) -> None:
        result = self.node_event(stack, nodes, "UPDATE", gpu_node(heartbeat_minute=5), gpu_node())
        assert templates(result) == [], explain(result)

    def test_allocatable_gpus_changed_provisions_capacity(self, stack: Stack, nodes: tuple[str, str]) -> None:
        result = self.node_event(stack, nodes, "UPDATE", gpu_node(gpus=4), gpu_node(gpus=8))
        assert templates(result) == ["gpuaas-provision-quota"], explain(result)

    def test_device_plugin_registering_gpus_provisions_capacity(self, stack: Stack, nodes: tuple[str, str]) -> None:
        """A new node joins before the device plugin reports nvidia.com/gpu: its GPUs appear in an UPDATE."""
        result = self.node_event(stack, nodes, "UPDATE", gpu_node(gpus=8), gpu_node(gpus=None))
        assert templates(result) == ["gpuaas-provision-quota"], explain(result)

    def test_reconcile_clock_provisions_capacity(self, stack: Stack) -> None:
        clocks = [(info.name, name) for info in stack.router.event_sources.values()
                  for name, kind in info.events.items() if kind == "calendar"]
        assert clocks, "the rendered EventSources have no calendar: capacity would never be reconciled"
        result = stack.router.route(calendar_event(*clocks[0]))
        assert templates(result) == ["gpuaas-provision-quota"], explain(result)
