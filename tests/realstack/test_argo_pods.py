"""Argo's executor on the real node: outputs, exit codes, retries and exit handlers as on a cluster.

The workflow-controller (built from stack/argo-workflows) makes the pods; the kubelet runs them
with argoexec init/wait and the emissary around the step image's Python. The Workflow is shaped
like the product's reactions: script templates on the step image with the rendered reaction
step's env, resources and restricted securityContext, outputs read from files under
/tmp/gpuaas/outputs (`valueFrom.path`), a retry only on exit code 75, an exit handler that sees
`{{workflow.status}}`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from tests.realstack.argo import WorkflowController, grant_executor, install_crds
from tests.realstack.conftest import RunningNode
from tests.realstack.control_plane import ControlPlane

pytestmark = pytest.mark.realstack

STEP_IMAGE = "gpuaas.local/gpuaas-step:dev"
NAMESPACE = "default"
OUTPUTS = "/tmp/gpuaas/outputs"


RENDERED = Path(__file__).resolve().parents[2] / "manifests/base/workflows/gpuaas-on-admitted.yaml"


def _rendered_script() -> dict:
    """The reaction step's `script` as rendered (env, resources, restricted securityContext)."""
    template = yaml.safe_load(RENDERED.read_text())
    return next(t["script"] for t in template["spec"]["templates"] if "script" in t)


def _script(name: str, source: str, **extra: object) -> dict:
    """A script template shaped like the product's, with this test's Python as its source.

    The product's scripts all have a retryStrategy, so their env may name `{{retries}}`
    (GPUAAS_ATTEMPT); Argo refuses that variable in a template without one, so it is left out here."""
    rendered = _rendered_script()
    if "retryStrategy" not in extra:
        rendered["env"] = [e for e in rendered.get("env", []) if "{{retries}}" not in str(e.get("value", ""))]
    script = {**rendered, "image": STEP_IMAGE, "imagePullPolicy": "Never", "command": ["python"],
              "source": source}
    return {"name": name, **extra, "script": script}


def _writes(name: str, value: str) -> str:
    """Python that writes one output file, as the steps do (Argo reads it with valueFrom.path)."""
    return (f"import os\nos.makedirs('{OUTPUTS}', exist_ok=True)\n"
            f"open('{OUTPUTS}/{name}', 'w').write('{value}')\nprint('{value}')")


WORKFLOW = {
    "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
    "metadata": {"generateName": "pod-runtime-", "namespace": NAMESPACE},
    "spec": {
        "entrypoint": "reaction", "onExit": "record-outcome",
        # The rendered scripts mount the Prometheus CA volume; a Workflow must declare what they mount.
        "volumes": yaml.safe_load(RENDERED.read_text())["spec"].get("volumes", []),
        "templates": [
            {"name": "reaction", "steps": [
                [{"name": "flaky", "template": "flaky"}],
                [{"name": "consume", "template": "consume",
                  "arguments": {"parameters": [{"name": "outcome",
                                                "value": "{{steps.flaky.outputs.parameters.outcome}}"}]}}],
            ]},
            # First attempt exits 75 (transient, as steps.entrypoint does), the retry succeeds; the
            # output file is written in both, like the steps write their outputs in every case.
            _script("flaky", "\n".join([
                "import os, sys, steps.entrypoint",
                f"os.makedirs('{OUTPUTS}', exist_ok=True)",
                "attempt = int('{{retries}}')",
                f"open('{OUTPUTS}/outcome', 'w').write('applied' if attempt else 'failed')",
                "print('attempt', attempt)",
                "sys.exit(75 if attempt == 0 else 0)",
            ]), retryStrategy={"limit": "2", "retryPolicy": "Always",
                               "expression": "asInt(lastRetry.exitCode) == 75"},
                outputs={"parameters": [{"name": "outcome", "valueFrom": {"path": f"{OUTPUTS}/outcome"}}]}),
            _script("consume", _writes("seen", "{{inputs.parameters.outcome}}"),
                    inputs={"parameters": [{"name": "outcome"}]},
                    outputs={"parameters": [{"name": "seen", "valueFrom": {"path": f"{OUTPUTS}/seen"}}]}),
            _script("record-outcome", _writes("status", "workflow {{workflow.status}}"),
                    outputs={"parameters": [{"name": "status", "valueFrom": {"path": f"{OUTPUTS}/status"}}]}),
        ],
    },
}


@pytest.fixture(scope="module")
def workflow_controller(real_node: RunningNode, control_plane: ControlPlane) -> Iterator[WorkflowController]:
    api_client = config.new_client_from_config(str(control_plane.admin_kubeconfig))
    install_crds(api_client)
    grant_executor(api_client, NAMESPACE)
    controller = WorkflowController(control_plane.admin_kubeconfig, NAMESPACE,
                                    control_plane.workdir / "workflow-controller.log")
    controller.start(api_client)
    try:
        yield controller
    finally:
        controller.stop()


def _wait_finished(custom: client.CustomObjectsApi, core: client.CoreV1Api, name: str,
                   controller: WorkflowController, timeout: float = 240.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        controller.require_alive()
        workflow = custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", NAMESPACE, "workflows", name)
        if workflow.get("status", {}).get("phase") in ("Succeeded", "Failed", "Error"):
            return workflow
        time.sleep(0.5)
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"workflows.argoproj.io/workflow={name}").items
    states = {p.metadata.name: (p.status.phase, p.status.conditions, p.status.container_statuses) for p in pods}
    raise AssertionError(f"workflow {name} not finished after {timeout:.0f}s: {workflow.get('status')}; "
                         f"pods: {states}")


def _node(workflow: dict, display_name: str) -> dict:
    return next(n for n in workflow["status"]["nodes"].values() if n["displayName"] == display_name)


def test_argo_pods_run_with_outputs_retries_and_exit_handler(workflow_controller: WorkflowController,
                                                             control_plane: ControlPlane,
                                                             real_node: RunningNode) -> None:
    custom = client.CustomObjectsApi(config.new_client_from_config(str(control_plane.admin_kubeconfig)))
    created = custom.create_namespaced_custom_object("argoproj.io", "v1alpha1", NAMESPACE, "workflows", WORKFLOW)
    workflow = _wait_finished(custom, real_node.api, created["metadata"]["name"], workflow_controller)
    nodes = workflow["status"]["nodes"].values()
    print(f"workflow {created['metadata']['name']}: created {created['metadata']['creationTimestamp']}, "
          f"finished {workflow['status']['finishedAt']}")  # docs/real-stack-pods.md quotes this span

    assert workflow["status"]["phase"] == "Succeeded", workflow["status"].get("message")
    attempts = sorted((n for n in nodes if n["displayName"].startswith("flaky(")), key=lambda n: n["displayName"])
    assert [(a["phase"], a.get("outputs", {}).get("exitCode")) for a in attempts] == [("Failed", "75"),
                                                                                    ("Succeeded", "0")]
    assert _node(workflow, "flaky")["outputs"]["parameters"][0]["value"] == "applied"
    assert _node(workflow, "consume")["outputs"]["parameters"] == [
        {"name": "seen", "value": "applied", "valueFrom": {"path": f"{OUTPUTS}/seen"}}]
    exit_handler = _node(workflow, workflow["metadata"]["name"] + ".onExit")
    assert exit_handler["phase"] == "Succeeded"
    assert exit_handler["outputs"]["parameters"][0]["value"] == "workflow Succeeded"
    # Every pod ran on the real node, with Argo's containers around the step image.
    pods = real_node.api.list_namespaced_pod(NAMESPACE, label_selector="workflows.argoproj.io/workflow="
                                                                       + created["metadata"]["name"]).items
    assert len(pods) == 4
    for pod in pods:
        assert pod.spec.node_name == "gpuaas-node"
        assert [c.name for c in pod.spec.init_containers] == ["init"]
        assert [c.name for c in pod.spec.containers] == ["wait", "main"]
        assert pod.spec.containers[1].command[0] == "/var/run/argo/argoexec"
