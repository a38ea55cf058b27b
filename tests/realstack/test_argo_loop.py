"""The first real loop (issue 9 part 3): Kueue admission -> Argo Events -> Argo Workflows -> the step acts.

Everything in the chain is the real program: Kueue admits a batch Job onto a KWOK GPU node; the
product's resource EventSource `gpuaas-workloads` (a pod the real Argo Events controller made, on
the real node) sees the Workload's UPDATE and publishes it on the EventBus (NATS JetStream); the
product's Sensor `gpuaas-on-admitted` (a pod too) applies its filters and execs the argo CLI, which
submits `gpuaas-on-admitted` as ServiceAccount `gpuaas-sensors`; the workflow-controller runs the
step pod (argoexec around the step image) on the real node; the step observes the live Workload
and records its plan in the outputs Argo collects. The product objects are the rendered base with
this stack's EventBus and step image (gpuaas.cluster.product).
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest
from kubernetes import client

from gpuaas.cluster.readiness import http_status
from tests.realstack.argo_product import PRODUCT_NAMESPACE, gpu_job, install, logs, reaction_run, workload_of
from tests.realstack.test_kueue_admission import _condition
from tests.support.real_cluster import RealCluster, eventually
from tests.support.run_attribution import expect_sensor, finished_run, resource_condition

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


def test_an_admitted_job_runs_gpuaas_on_admitted_through_real_argo_events_and_workflows(product: RealCluster) -> None:
    batch = client.BatchV1Api(product.admin)
    custom = client.CustomObjectsApi(product.admin)
    core = client.CoreV1Api(product.admin)
    created = batch.create_namespaced_job(TENANT, gpu_job(TENANT, generate_name="train-"))
    uid = created.metadata.uid
    admitted = eventually(lambda: (w := workload_of(custom, TENANT, uid)) and _condition(w, "Admitted") == "True" and w,
                          timeout_s=90, what=f"the Workload of Job {created.metadata.name} admitted")
    name = admitted["metadata"]["name"]
    admitted_at = next(c["lastTransitionTime"] for c in admitted["status"]["conditions"] if c["type"] == "Admitted")

    try:
        submitted = eventually(lambda: reaction_run(custom, "on-admitted", TENANT, name), timeout_s=120, what=f"a gpuaas-on-admitted Workflow for Workload {name}")
    except AssertionError as error:
        raise AssertionError(f"{error}\nEventSource:\n{logs(core, 'eventsource-name=gpuaas-workloads')}\n"
                             f"Sensor:\n{logs(core, 'sensor-name=gpuaas-on-admitted')}") from None
    # The Sensor's parameters, as rendered: the tenant hint from status.admission, the event as delivered.
    parameters = {p["name"]: p.get("value") for p in submitted["spec"]["arguments"]["parameters"]}
    assert parameters["tenant"] == TENANT
    # The whole event, as Argo Events delivers it without a dataKey: CloudEvent context, data base64 JSON.
    event = json.loads(parameters["event"])
    assert event["context"]["source"] == "gpuaas-workloads" and event["context"]["type"] == "resource"
    data = json.loads(base64.b64decode(event["data"]))
    assert data["type"] == "UPDATE" and data["body"]["metadata"]["name"] == name
    assert submitted["spec"]["workflowTemplateRef"] == {"name": "gpuaas-on-admitted"}
    problems = expect_sensor(submitted, "gpuaas-on-admitted", resource_condition("Admitted"))
    assert not problems, problems

    workflow_name = submitted["metadata"]["name"]
    finished = eventually(lambda: (w := custom.get_namespaced_custom_object(
        "argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows", workflow_name)).get("status", {}).get("phase")
        in ("Succeeded", "Failed", "Error") and w, timeout_s=300, what=f"Workflow {workflow_name} finished")
    status = finished["status"]
    assert status["phase"] == "Succeeded", status.get("message")
    step = next(n for n in status["nodes"].values() if n.get("templateName") == "on-admitted" and n["type"] == "Pod")
    outputs = {p["name"]: p.get("value") for p in step["outputs"]["parameters"]}
    # A batch Job: on-admitted records the release strategy on-idle will use and writes nothing.
    assert outputs["outcome"] == "no-op", outputs
    assert outputs["final"] == "true"
    record = json.loads(outputs["record"])
    assert name in json.dumps(record), record
    assert step["hostNodeName"] == "gpuaas-node"  # the real node: KWOK would "succeed" it without running it
    latency = _time(status["finishedAt"]) - _time(admitted_at)

    # The finished run reaches the archive (PostgreSQL) and the Argo Server serves it from there.
    server = product.cluster.status()["endpoints"]["argo-server"]

    def archived() -> dict | None:
        code, body = http_status(f"{server}/api/v1/archived-workflows?namespace={PRODUCT_NAMESPACE}", timeout=30)
        assert code == 200, body[:300]
        items = json.loads(body).get("items") or []
        return next((i for i in items if i["metadata"]["name"] == workflow_name), None)
    row = eventually(archived, timeout_s=60, what=f"Workflow {workflow_name} in the Argo Server's archive")
    assert row["status"]["phase"] == "Succeeded"

    # KWOK completes the Job; Kueue marks the Workload Finished; the same chain runs gpuaas-on-finished.
    on_finished = eventually(lambda: finished_run(custom, "on-finished", name, PRODUCT_NAMESPACE), timeout_s=300,
                             what=f"gpuaas-on-finished for {name} finished")
    assert on_finished["status"]["phase"] == "Succeeded", on_finished["status"].get("message")
    problems = expect_sensor(on_finished, "gpuaas-on-finished", resource_condition("Finished"))
    assert not problems, problems
    step = next(n for n in on_finished["status"]["nodes"].values()
                if n.get("templateName") == "on-finished" and n["type"] == "Pod")
    assert {p["name"]: p.get("value") for p in step["outputs"]["parameters"]}["outcome"] == "no-op"
    print(f"Admitted {admitted_at} -> Workflow {workflow_name} created {submitted['metadata']['creationTimestamp']} "
          f"-> Succeeded {status['finishedAt']}: {latency:.0f}s (docs/real-stack.md quotes this)")
