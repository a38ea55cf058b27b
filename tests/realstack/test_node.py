"""Pods on a real node: the kubelet (v1.36, cgroup v1) with containerd and runc runs the step image.

These are the claims the real-stack tier rests on: a pod scheduled to the node runs the step
image's code to completion, its exit code and output reach the API as on any cluster, and a pod
reaches the API server through its in-cluster configuration (service account token, the
`kubernetes` Service).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kubernetes import client

from tests.realstack.conftest import NODE_NAME, RunningNode

pytestmark = pytest.mark.realstack

STEP_IMAGE = "gpuaas.local/gpuaas-step:dev"


def _pod(name: str, command: list[str], *, service_account: bool = False) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE_NAME, "restartPolicy": "Never",
            "automountServiceAccountToken": service_account,
            "containers": [{"name": "main", "image": STEP_IMAGE, "imagePullPolicy": "Never", "command": command}],
        },
    }


def _run_to_completion(node: RunningNode, manifest: dict, timeout: float = 90.0) -> tuple[client.V1Pod, str]:
    """Create the pod, wait for a terminal phase, return it with its log (read through the API server)."""
    name = manifest["metadata"]["name"]
    node.api.create_namespaced_pod("default", manifest)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            pod = node.api.read_namespaced_pod(name, "default")
            if pod.status.phase in ("Succeeded", "Failed"):
                log = node.api.read_namespaced_pod_log(name, "default", container="main")
                return pod, log
            time.sleep(0.3)
        raise AssertionError(f"pod {name} still {pod.status.phase} after {timeout:.0f}s: {pod.status}")
    finally:
        node.api.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def _terminated(pod: client.V1Pod) -> client.V1ContainerStateTerminated:
    return pod.status.container_statuses[0].state.terminated


def test_node_registers_ready_with_the_kubelet_of_the_pinned_release(real_node: RunningNode) -> None:
    node = real_node.api.read_node(NODE_NAME)
    ready = next(c for c in node.status.conditions if c.type == "Ready")
    assert ready.status == "True", ready.message
    assert node.status.node_info.kubelet_version == "v1.36.3"
    assert node.status.node_info.container_runtime_version.startswith("containerd://1.6.")
    assert node.metadata.labels["gpuaas.io/pod-runtime"] == "kubelet"


def test_the_bridge_keeps_its_own_mac_address_as_pods_come_and_go(real_node: RunningNode) -> None:
    """A Linux bridge whose address was never set takes the lowest MAC of its ports, so it changes as
    pods' veths join and leave; the pods' ARP entries for the gateway and the ClusterIPs on the bridge
    then point at a MAC nobody answers until they are probed again. Seen on `cluster up --with
    events`: every pod's watch of the API server stalled at once ("http2: client connection lost")
    while workflow pods came and went, and the EventSource missed a Workload's admission. The node
    sets the bridge's address itself: the kernel's addr_assign_type 3 (NET_ADDR_SET), which the
    bridge keeps whatever ports it gets."""
    assert real_node.node.network is not None
    bridge = Path("/sys/class/net") / real_node.node.network.bridge
    assert (bridge / "addr_assign_type").read_text().strip() == "3"


def test_step_image_runs_python_m_steps_to_completion(real_node: RunningNode) -> None:
    pod, log = _run_to_completion(real_node, _pod("step-help", ["python", "-m", "steps", "--help"]))

    assert pod.status.phase == "Succeeded"
    assert _terminated(pod).exit_code == 0
    # The entry point's help, listing the reactions the image holds.
    assert log.startswith("usage: python -m steps <reaction> PARAMS_FILE")
    assert {"on-admitted", "on-idle", "release-workers", "record-outcome"} <= set(log.split())


def test_exit_codes_reach_the_pod_status(real_node: RunningNode) -> None:
    """75 is the steps' transient-failure code that the templates retry on; the kubelet must report it."""
    pod, log = _run_to_completion(real_node, _pod("step-exit-75", [
        "python", "-c", "import sys, steps.entrypoint; print('transient'); sys.exit(75)"]))

    assert pod.status.phase == "Failed"
    assert _terminated(pod).exit_code == 75
    assert log.strip() == "transient"


def test_step_image_runs_as_the_containerfile_user_with_its_environment(real_node: RunningNode) -> None:
    pod, log = _run_to_completion(real_node, _pod("step-identity", [
        "python", "-c", ("import os, sys; print(os.getuid(), os.getgid(), os.getcwd(), "
                         "os.environ['GPUAAS_OUTPUTS_DIR'], sys.version_info[:2] == (3, 11))")]))

    assert pod.status.phase == "Succeeded"
    assert log.split() == ["1001", "0", "/opt/app-root/src", "/tmp/gpuaas/outputs", "True"]


def test_pod_reaches_the_api_server_with_its_service_account(real_node: RunningNode,
                                                             control_plane) -> None:
    """In-cluster config: KUBERNETES_SERVICE_HOST is the Service's ClusterIP (the forwarder stand-in),
    the token is the projected service-account token, verified against the cluster CA."""
    rbac = client.RbacAuthorizationV1Api(real_node.api.api_client)
    rbac.create_namespaced_role("default", {
        "metadata": {"name": "read-pods"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]})
    rbac.create_namespaced_role_binding("default", {
        "metadata": {"name": "read-pods"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-pods"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}]})
    try:
        script = ("import os, kubernetes as k; k.config.load_incluster_config(); "
                  "pod = k.client.CoreV1Api().read_namespaced_pod('step-in-cluster', 'default'); "
                  "print(pod.spec.node_name, pod.spec.service_account_name)")
        pod, log = _run_to_completion(real_node, _pod("step-in-cluster", ["python", "-c", script],
                                                      service_account=True))
    finally:
        rbac.delete_namespaced_role_binding("read-pods", "default")
        rbac.delete_namespaced_role("read-pods", "default")

    assert pod.status.phase == "Succeeded", log
    assert log.split() == [NODE_NAME, "default"]
