"""The first real loop (issue 9 part 3): Kueue admission -> Argo Events -> Argo Workflows -> the step acts.

Everything in the chain is the real program: Kueue admits a model server (a StatefulSet) onto a KWOK GPU node; the
product's resource EventSource `gpuaas-workloads` (a pod the real Argo Events controller made, on
the real node) sees the Workload's UPDATE and publishes it on the EventBus (NATS JetStream); the
product's Sensor `gpuaas-on-admitted` (a pod too) applies its filters and execs the argo CLI, which
submits `gpuaas-on-admitted` as ServiceAccount `gpuaas-sensors`; the workflow-controller runs the
step pod (argoexec around the step image) on the real node; the step observes the live Workload
and records its plan in the outputs Argo collects. A batch Job's transitions take the other path:
the catch-up sweep records them without a pod (docs/catch-up.md). The product objects are what the chart
builds for this stack's values (gpuaas.cluster.product).
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest
from kubernetes import client

from benchmarks.burst import server
from gpuaas.cluster.readiness import http_status
from tests.realstack.argo_product import (
    PRODUCT_NAMESPACE,
    admitted_workload_of_owner,
    finished_workflow,
    gpu_job,
    install,
    reaction_run,
    reaction_runs,
    sensor_run,
    workload_of,
)
from tests.realstack.test_kueue_admission import _condition
from tests.support.real_cluster import RealCluster, eventually
from tests.support.run_attribution import expect_sensor, expect_sweep, resource_condition

TENANT = "team-a"


@pytest.fixture(scope="module")
def product(argo_cluster: RealCluster) -> RealCluster:
    return install(argo_cluster)


def test_status_names_the_argo_server_and_the_webhook_event_source_which_wants_the_token(product: RealCluster) -> None:
    endpoints = product.cluster.status()["endpoints"]
    code, body = http_status(f"{endpoints['argo-server']}/api/v1/version", timeout=30)
    assert code == 200 and json.loads(body)["version"] == "v4.0.5+unknown", body[:200]
    webhook = endpoints["webhook/gpuaas/gpuaas-alertmanager/idle"]
    token = Path(endpoints["webhook-token-file"]).read_text().strip()
    payload = json.dumps({"version": "4", "status": "resolved", "alerts": []}).encode()
    answers = {}
    for name, headers in (("none", {}), ("wrong", {"Authorization": "Bearer wrong"}),
                          ("right", {"Authorization": f"Bearer {token}"})):
        request = urllib.request.Request(webhook, data=payload, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                answers[name] = answer.status
        except urllib.error.HTTPError as error:
            answers[name] = error.code
    assert answers == {"none": 401, "wrong": 401, "right": 200}


def _time(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_an_admitted_server_runs_gpuaas_on_admitted_through_real_argo_events_and_workflows(
        product: RealCluster) -> None:
    """A model server's admission, the event path: the Sensor's run, a step pod on the real node, a ScaledObject."""
    apps = client.AppsV1Api(product.admin)
    custom = client.CustomObjectsApi(product.admin)
    core = client.CoreV1Api(product.admin)
    name = f"serve-{int(time.time()) % 100000}"
    apps.create_namespaced_stateful_set(TENANT, server(TENANT, name))
    try:
        admitted = eventually(lambda: admitted_workload_of_owner(custom, TENANT, name), timeout_s=90,
                              what=f"StatefulSet {name} admitted")
        workload = admitted["metadata"]["name"]
        admitted_at = next(c["lastTransitionTime"] for c in admitted["status"]["conditions"] if c["type"] == "Admitted")
        submitted = sensor_run(custom, core, TENANT, workload)
        # The Sensor's parameters, as rendered: the tenant hint from status.admission, the event as delivered,
        # the Workload's uid as a label at creation (the sweep sees the run in flight before it starts).
        parameters = {p["name"]: p.get("value") for p in submitted["spec"]["arguments"]["parameters"]}
        assert parameters["tenant"] == TENANT
        assert submitted["metadata"]["labels"]["gpuaas.io/workload-uid"] == admitted["metadata"]["uid"]
        event = json.loads(parameters["event"])
        assert event["context"]["source"] == "gpuaas-workloads" and event["context"]["type"] == "resource"
        data = json.loads(base64.b64decode(event["data"]))
        assert data["type"] == "UPDATE" and data["body"]["metadata"]["name"] == workload
        assert submitted["spec"]["workflowTemplateRef"] == {"name": "gpuaas-on-admitted"}
        problems = expect_sensor(submitted, "gpuaas-on-admitted", resource_condition("Admitted"))
        assert not problems, problems

        workflow_name = submitted["metadata"]["name"]
        status = finished_workflow(custom, workflow_name)["status"]
        assert status["phase"] == "Succeeded", status.get("message")
        step = next(n for n in status["nodes"].values() if n.get("templateName") == "on-admitted" and n["type"] == "Pod")
        outputs = {p["name"]: p.get("value") for p in step["outputs"]["parameters"]}
        # A server: on-admitted makes its ScaledObject, and marks the admission handled on the Workload.
        assert outputs["outcome"] == "applied", outputs
        assert outputs["final"] == "true"
        record = json.loads(outputs["record"])["data"]
        assert record["delivery"]["via"] == "event" and record["delivery"]["marked"], record["delivery"]
        assert step["hostNodeName"] == "gpuaas-node"  # the real node: KWOK would "succeed" it without running it
        # No exit-handler pod: a run that succeeded recorded itself (record-outcome runs only on failure).
        assert not [n for n in status["nodes"].values() if n.get("templateName") == "record-outcome"
                    and n["type"] == "Pod"], status["nodes"]
        marker = json.loads(custom.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", TENANT, "workloads",
                                                                 workload)["metadata"]["annotations"][
            "gpuaas.io/handled-on-admitted"])
        assert marker["run"] == submitted["metadata"]["uid"], marker
        latency = _time(status["finishedAt"]) - _time(admitted_at)

        # The finished run reaches the archive (PostgreSQL) and the Argo Server serves it from there.
        argo_server = product.cluster.status()["endpoints"]["argo-server"]

        def archived() -> dict | None:
            code, body = http_status(f"{argo_server}/api/v1/archived-workflows?namespace={PRODUCT_NAMESPACE}", timeout=30)
            assert code == 200, body[:300]
            items = json.loads(body).get("items") or []
            return next((i for i in items if i["metadata"]["name"] == workflow_name), None)
        row = eventually(archived, timeout_s=60, what=f"Workflow {workflow_name} in the Argo Server's archive")
        assert row["status"]["phase"] == "Succeeded"
        print(f"Admitted {admitted_at} -> Workflow {workflow_name} created {submitted['metadata']['creationTimestamp']} "
              f"-> Succeeded {status['finishedAt']}: {latency:.0f}s (docs/real-stack.md quotes this)")
    finally:
        apps.delete_namespaced_stateful_set(name, TENANT)


def test_a_jobs_admission_and_finish_are_recorded_by_the_sweep_without_a_pod(product: RealCluster) -> None:
    """A batch Job: the Sensors start nothing (its reactions write nothing); the catch-up sweep records its
    admission and its finish, each a Workflow of the reaction's template with no pod, marked on the Workload."""
    batch = client.BatchV1Api(product.admin)
    custom = client.CustomObjectsApi(product.admin)
    created = batch.create_namespaced_job(TENANT, gpu_job(TENANT, generate_name="train-"))
    done = eventually(lambda: (w := workload_of(custom, TENANT, created.metadata.uid))
                      and _condition(w, "Finished") == "True" and w, timeout_s=180,
                      what=f"the Workload of Job {created.metadata.name} admitted and finished")
    workload = done["metadata"]["name"]
    for reaction in ("on-admitted", "on-finished"):
        run = eventually(lambda reaction=reaction: reaction_run(custom, reaction, TENANT, workload),
                         timeout_s=240, what=f"gpuaas-{reaction} for {workload} (the sweep's, every minute here)")
        run = finished_workflow(custom, run["metadata"]["name"])
        assert run["status"]["phase"] == "Succeeded", run["status"].get("message")
        assert run["metadata"]["labels"].get("gpuaas.io/recorded-by") == "sweep", run["metadata"]["labels"]
        problems = expect_sweep(run, reaction.removeprefix("on-"))
        assert not problems, problems
        assert not [n for n in run["status"]["nodes"].values() if n["type"] == "Pod"], run["status"]["nodes"]
        parameters = {p["name"]: p.get("value") for p in run["spec"]["arguments"]["parameters"]}
        record = json.loads(parameters["record"])["data"]
        assert record["outcome"] == "no-op" and record["delivery"]["via"] == "sweep", record
        assert len(reaction_runs(custom, reaction, TENANT, workload)) == 1
    annotations = custom.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", TENANT, "workloads",
                                                      workload)["metadata"]["annotations"]
    assert {"gpuaas.io/handled-on-admitted", "gpuaas.io/handled-on-finished"} <= set(annotations), annotations
