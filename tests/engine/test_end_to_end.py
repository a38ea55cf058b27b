"""End to end on the rendered manifests: a cluster change or an alert POST goes through the event
source, the rendered Sensor, the rendered WorkflowTemplate and the step, changes the cluster and
lands in the run archive."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from engine import demo_cluster as cluster
from engine.archive import RunArchive
from engine.runtime import EngineOptions, LocalEngine
from engine.timeline import reaction_records
from steps.gateways import resources as R

POLICY = "idle:\n  mode: enforce\n  window: 5s\n  threshold: 0.05\n  minRuntime: 0s\n"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory):
    archive = tmp_path_factory.mktemp("engine") / "runs.db"
    options = EngineOptions(archive_path=archive, kueue_options={"excluded_resource_prefixes": ("cpu", "memory")})
    with LocalEngine(options) as running:
        running.apply(cluster.platform_objects(POLICY))
        running.settle(timeout=30)
        yield running


def wait_until(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def test_admission_runs_on_admitted_through_the_rendered_sensor_and_is_archived(engine: LocalEngine) -> None:
    research = cluster.TENANTS[0]
    serving = {"apiVersion": "apps/v1", "kind": "StatefulSet",
               "metadata": {"name": "e2e-serve", "namespace": research.namespace, "labels": cluster.queued(research)},
               "spec": {"replicas": 1, "serviceName": "e2e-serve", "selector": {"matchLabels": {"app": "e2e-serve"}},
                        "template": {"metadata": {"labels": {"app": "e2e-serve"}}, "spec": {"containers": [
                            {"name": "main", "image": "vllm", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}
    engine.apply([serving])

    def admitted_run():
        runs = engine.archive.find({"workflows.argoproj.io/workflow-template": "gpuaas-on-admitted"})
        return [r for r in runs if r["metadata"]["labels"].get("gpuaas.io/workload", "").startswith("statefulset-e2e-")]

    [run] = wait_until(admitted_run)
    workload = run["metadata"]["labels"]["gpuaas.io/workload"]
    assert run["metadata"]["labels"]["events.argoproj.io/sensor"] == "gpuaas-on-admitted"
    assert run["metadata"]["labels"]["gpuaas.io/tenant"] == "research"
    assert run["spec"]["workflowTemplateRef"] == {"name": "gpuaas-on-admitted"}
    assert run["status"]["phase"] == "Succeeded", run["status"].get("message")
    [record] = reaction_records(run)
    assert record["type"] == "io.gpuaas.reaction.on-admitted"
    assert record["data"]["workload"]["name"] == workload
    assert record["data"]["outcome"] == "applied", record["data"]["plan"]["reasons"]
    assert record["data"]["event"]["kind"] == "UPDATE"

    # the step changed the cluster: a ScaledObject for the StatefulSet, and an Event on the Workload
    scaled = [s for s in engine.gateway.list(R.SCALED_OBJECT, namespace=research.namespace)
              if s["spec"]["scaleTargetRef"]["name"] == "e2e-serve"]
    assert len(scaled) == 1
    events = engine.gateway.list(R.EVENT, namespace=research.namespace)
    assert any(e["involvedObject"]["name"] == workload and e["reason"] == "GPUaaSIdleHandlingPrepared"
               for e in events)
    # the archived Workflow is a valid Argo Workflow (Argo's own schema, unknown fields are errors)
    from gpuaas.manifests.validation import schema_errors

    assert schema_errors(run) == []
    # and the archive on disk is Argo's layout, readable by anyone
    assert RunArchive(engine.archive.path).get(run["metadata"]["uid"])["status"]["phase"] == "Succeeded"


def test_the_same_reaction_as_a_subprocess_step_is_idempotent(engine: LocalEngine) -> None:
    """`python -m steps ...` exactly as in a pod; re-running the admission reaction changes nothing."""
    from engine.executor import ExecutorSettings, WorkflowExecutor
    from engine.step_runner import SubprocessStepRunner

    [first] = [r for r in engine.archive.find({"workflows.argoproj.io/workflow-template": "gpuaas-on-admitted"})
               if r["metadata"]["labels"].get("gpuaas.io/workload", "").startswith("statefulset-e2e-")]
    executor = WorkflowExecutor(engine.executor.templates, SubprocessStepRunner(),
                                settings=ExecutorSettings(env=dict(engine.executor.settings.env)))
    again = executor.submit({"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                             "metadata": {"generateName": "gpuaas-on-admitted-"},
                             "spec": {"workflowTemplateRef": {"name": "gpuaas-on-admitted"},
                                      "arguments": {"parameters": [
                                          p for p in first["spec"]["arguments"]["parameters"]
                                          if p["name"] in ("namespace", "workload", "dry-run")]}}})
    executor.shutdown()
    assert again["status"]["phase"] == "Succeeded", again["status"].get("message")
    [record] = reaction_records(again)
    assert record["data"]["outcome"] == "no-op", record["data"]["plan"]["reasons"]
    pods = [n for n in again["status"]["nodes"].values() if n["type"] == "Pod"]
    assert all(n["outputs"]["exitCode"] == "0" for n in pods)


def post(url: str, body: dict, token: str | None) -> int:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_alert_post_needs_the_token_and_then_runs_on_idle(engine: LocalEngine) -> None:
    group = {"version": "4", "status": "firing", "receiver": "gpuaas", "groupKey": "{}:{}", "truncatedAlerts": 0,
             "groupLabels": {"alertname": "GPUWorkloadIdle"}, "commonLabels": {"alertname": "GPUWorkloadIdle"},
             "commonAnnotations": {}, "externalURL": "http://alertmanager",
             "alerts": [{"status": "firing", "labels": {"alertname": "GPUWorkloadIdle", "namespace": "team-vision",
                                                        "pod": "no-such-pod-0"},
                         "annotations": {}, "startsAt": "2026-01-01T00:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
                         "generatorURL": "", "fingerprint": "abc"}]}
    url = engine.webhook.url_for()
    before = len(engine.archive.find({"workflows.argoproj.io/workflow-template": "gpuaas-on-idle"}))

    assert post(url, group, token=None) == 401
    assert post(url, group, token="not-the-token") == 401
    engine.settle(timeout=10)
    assert len(engine.archive.find({"workflows.argoproj.io/workflow-template": "gpuaas-on-idle"})) == before

    assert post(url, group, token=engine.options.webhook_token) == 200
    runs = wait_until(lambda: engine.archive.find({"workflows.argoproj.io/workflow-template": "gpuaas-on-idle"})
                      [before:] or None)
    [run] = runs
    assert run["metadata"]["labels"]["events.argoproj.io/sensor"] == "gpuaas-on-idle"
    # the alert names a pod that does not exist: the fan-out step resolves nothing, so no child runs
    [fan_in] = [r for r in reaction_records(run) if r["data"]["reaction"] == "idle-alerts"]
    assert fan_in["data"]["outcome"] == "no-op"
    assert any("no-such-pod-0" in reason for reason in fan_in["data"]["plan"]["reasons"])
    skipped = [n for n in run["status"]["nodes"].values() if n["displayName"] == "on-idle"]
    assert [n["phase"] for n in skipped] == ["Skipped"]


def test_oversize_alert_body_is_refused(engine: LocalEngine) -> None:
    body = {"version": "4", "status": "firing", "alerts": [], "padding": "x" * (1024 * 1024)}
    assert post(engine.webhook.url_for(), body, token=engine.options.webhook_token) == 413


def test_snapshot_round_trip_and_local_resubmission(engine: LocalEngine, tmp_path: Path) -> None:
    snapshot = tmp_path / "cluster-snapshot.json"
    assert engine.snapshot(snapshot) > 0
    runs = engine.archive.find({"workflows.argoproj.io/workflow-template": "gpuaas-on-admitted"})
    assert runs, "the admission test runs first in this module"
    original = runs[-1]
    resubmission = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                    "metadata": {"generateName": original["metadata"]["generateName"],
                                 "labels": {"workflows.argoproj.io/resubmitted-from-workflow":
                                            original["metadata"]["name"]}},
                    "spec": {"workflowTemplateRef": original["spec"]["workflowTemplateRef"],
                             "arguments": original["spec"]["arguments"]}}
    with LocalEngine.from_snapshot(snapshot, archive_path=tmp_path / "rerun.db") as local:
        workload = original["metadata"]["labels"]["gpuaas.io/workload"]
        assert local.gateway.get(R.WORKLOAD, workload, namespace="team-research") is not None
        rerun = local.submit(resubmission)
    assert rerun["status"]["phase"] == "Succeeded", rerun["status"].get("message")
    assert rerun["metadata"]["name"] != original["metadata"]["name"]
    assert rerun["metadata"]["labels"]["workflows.argoproj.io/resubmitted-from-workflow"] == \
        original["metadata"]["name"]
    assert len(RunArchive(tmp_path / "rerun.db")) == 1
