"""Issue 10 item 5 on the real workflow-controller: the rendered retry and outcome counter.

The reaction script template is taken from manifests/ as rendered (retryStrategy, outputs with
`final`, env with GPUAAS_ATTEMPT={{retries}}, the gpuaas_reaction_outcomes counter with its `when`);
only image and source change: the source plays a step that fails transiently, using the product's
own `steps.entrypoint.final_attempt` to write `final`. Argo's controller then decides retries and
emits the template metrics; the test reads them from the controller's /metrics.

- a step that exits 75, 75, then 0 is one reaction: the counter shows one `applied`, no `failed`;
- an attempt whose pod is deleted (no exit code: `lastRetry.exitCode` is "-1") is retried.
"""

from __future__ import annotations

import re
import socket
import time
import urllib.request
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client, config

from tests.realstack.argo import WorkflowController, grant_executor, install_crds
from tests.realstack.conftest import RunningNode
from tests.realstack.control_plane import ControlPlane
from tests.realstack.test_argo_pods import RENDERED, STEP_IMAGE

pytestmark = pytest.mark.realstack

NAMESPACE = "retries"
OUTPUTS = "/tmp/gpuaas/outputs"
STEP = """
import os, sys, time
from steps.entrypoint import final_attempt
attempt = int(os.environ["GPUAAS_ATTEMPT"])
if attempt < {sleep_until}:
    time.sleep(600)  # the test deletes this pod: an attempt without an exit code
code = 75 if attempt < {fail_until} else 0
os.makedirs("{outputs}", exist_ok=True)
files = {{"outcome": "failed" if code else "applied", "plan": "{{}}", "record": "",
          "final": "true" if final_attempt(code, os.environ) else "false"}}
for name, value in files.items():
    open(os.path.join("{outputs}", name), "w").write(value)
print("attempt", attempt, "exit", code, "run", os.environ.get("GPUAAS_RUN_ID"))
sys.exit(code)
"""


def _rendered_reaction() -> dict:
    """The on-admitted reaction's script template exactly as rendered (retry, outputs, metrics, env)."""
    template = yaml.safe_load(RENDERED.read_text())
    return next(t for t in template["spec"]["templates"] if t["name"] == "on-admitted")


def _rendered_volumes() -> list:
    """The rendered template's volumes: its scripts mount them (the Prometheus CA), and Argo refuses a
    mount whose volume the Workflow does not declare."""
    return yaml.safe_load(RENDERED.read_text())["spec"].get("volumes", [])


def _workflow(name: str, fail_until: int, sleep_until: int = 0) -> dict:
    reaction = _rendered_reaction()
    script = {**reaction["script"], "image": STEP_IMAGE, "imagePullPolicy": "Never", "command": ["python"],
              "source": STEP.format(fail_until=fail_until, sleep_until=sleep_until, outputs=OUTPUTS)}
    step = {**{k: v for k, v in reaction.items() if k not in ("inputs", "synchronization")},
            "name": "reaction", "script": script}
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"entrypoint": "reaction", "templates": [step], "volumes": _rendered_volumes()}}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def controller(real_node: RunningNode, control_plane: ControlPlane) -> Iterator[tuple[WorkflowController, int]]:
    api_client = config.new_client_from_config(str(control_plane.admin_kubeconfig))
    core = client.CoreV1Api(api_client)
    try:
        core.create_namespace({"metadata": {"name": NAMESPACE}})
    except client.ApiException as error:
        if error.status != 409:
            raise
    deadline = time.monotonic() + 60
    while True:
        try:
            core.read_namespaced_service_account("default", NAMESPACE)
            break
        except client.ApiException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    install_crds(api_client)
    grant_executor(api_client, NAMESPACE)
    port = _free_port()
    core.create_namespaced_config_map(NAMESPACE, {"metadata": {"name": "workflow-controller-configmap"}, "data": {
        "metricsConfig": f"enabled: true\npath: /metrics\nport: {port}\nsecure: false\n"}})
    running = WorkflowController(control_plane.admin_kubeconfig, NAMESPACE,
                                 control_plane.workdir / "workflow-controller-retries.log")
    running.start(api_client)
    try:
        yield running, port
    finally:
        running.stop()


def _finished(custom: client.CustomObjectsApi, name: str, controller: WorkflowController,
              timeout: float = 120.0, on_running: object = None) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        controller.require_alive()
        workflow = custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", NAMESPACE, "workflows", name)
        if workflow.get("status", {}).get("phase") in ("Succeeded", "Failed", "Error"):
            return workflow
        if callable(on_running):
            on_running(workflow)
        time.sleep(0.5)
    pods = client.CoreV1Api(custom.api_client).list_namespaced_pod(
        NAMESPACE, label_selector=f"workflows.argoproj.io/workflow={name}").items
    states = [(p.metadata.name, p.metadata.finalizers, p.metadata.deletion_timestamp, p.status.phase,
               [(c.name, c.state) for c in p.status.container_statuses or []]) for p in pods]
    raise AssertionError(f"workflow {name} not finished after {timeout:.0f}s: {workflow.get('status')}; pods {states}")


def _outcome_counts(port: int) -> dict[str, float]:
    """gpuaas_reaction_outcomes by outcome label, from the controller's Prometheus endpoint."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    counts: dict[str, float] = {}
    for line in text.splitlines():
        # Argo v4 exports a template's custom metrics with the prefix argo_workflows_.
        if line.startswith(("gpuaas_reaction_outcomes", "argo_workflows_gpuaas_reaction_outcomes")):
            outcome = re.search(r'outcome="([^"]*)"', line)
            if outcome:
                counts[outcome.group(1)] = counts.get(outcome.group(1), 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def _attempts(workflow: dict) -> list[tuple[str, str | None]]:
    """(phase, exit code) of each attempt: the Pod nodes under the Retry node, in order."""
    nodes = [n for n in (workflow.get("status") or {}).get("nodes", {}).values() if n.get("type") == "Pod"]
    return [(n["phase"], (n.get("outputs") or {}).get("exitCode")) for n in sorted(nodes, key=lambda n: n["name"])]


def test_a_reaction_retried_twice_is_counted_once(controller: tuple[WorkflowController, int],
                                                  control_plane: ControlPlane) -> None:
    running, port = controller
    custom = client.CustomObjectsApi(config.new_client_from_config(str(control_plane.admin_kubeconfig)))
    custom.create_namespaced_custom_object("argoproj.io", "v1alpha1", NAMESPACE, "workflows",
                                           _workflow("transient-twice", fail_until=2))
    workflow = _finished(custom, "transient-twice", running)
    assert workflow["status"]["phase"] == "Succeeded", workflow["status"].get("message")
    assert _attempts(workflow) == [("Failed", "75"), ("Failed", "75"), ("Succeeded", "0")]
    deadline = time.monotonic() + 30
    while (counts := _outcome_counts(port)).get("applied") != 1.0 and time.monotonic() < deadline:
        time.sleep(1)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert counts == {"applied": 1.0}, (counts, workflow["status"].get("conditions"),
                                        [ln for ln in text.splitlines() if "gpuaas" in ln or "custom" in ln][:20],
                                        len(text))


def test_an_attempt_whose_pod_was_deleted_is_retried(controller: tuple[WorkflowController, int],
                                                     control_plane: ControlPlane, real_node: RunningNode) -> None:
    running, _ = controller
    custom = client.CustomObjectsApi(config.new_client_from_config(str(control_plane.admin_kubeconfig)))
    custom.create_namespaced_custom_object("argoproj.io", "v1alpha1", NAMESPACE, "workflows",
                                           _workflow("pod-deleted", fail_until=0, sleep_until=1))
    deleted: list[str] = []

    def delete_the_first_attempt(workflow: dict) -> None:
        # Once the controller itself counts the attempt as Running (while it is Pending, a missing
        # pod is simply created again), delete its pod: the attempt ends without an exit code.
        attempts = _attempts(workflow)
        if deleted or not attempts or attempts[0][0] != "Running":
            return
        pods = real_node.api.list_namespaced_pod(NAMESPACE, label_selector="workflows.argoproj.io/workflow=pod-deleted")
        for pod in pods.items:
            if pod.status.phase == "Running":
                real_node.api.delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)
                deleted.append(pod.metadata.name)

    workflow = _finished(custom, "pod-deleted", running, on_running=delete_the_first_attempt)
    assert deleted, "the first attempt never ran"
    attempts = _attempts(workflow)
    assert workflow["status"]["phase"] == "Succeeded", (workflow["status"].get("message"), attempts)
    assert attempts[0][0] in ("Error", "Failed") and attempts[0][1] in (None, "-1") and attempts[-1] == ("Succeeded", "0")
