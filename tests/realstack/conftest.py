"""Fixtures of the real-stack tier for pods: a real control plane and a real node (kubelet + containerd).

Session-scoped: the images build once (cached under .stack-cache/images across runs), the control
plane and the node start once per test session, and every pod a test creates runs on that node.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kubernetes import client, config

from gpuaas.cluster.images import BuiltImage, build_argoexec_image, build_pause_image, build_step_image
from gpuaas.cluster.node import Node, NodeCredentials, NodeNetwork
from tests.realstack.control_plane import ControlPlane

NODE_NAME = "gpuaas-node"


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    plane = ControlPlane()
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def step_image() -> BuiltImage:
    return build_step_image()


@dataclass
class RunningNode:
    node: Node
    api: client.CoreV1Api
    ready_seconds: float
    import_seconds: dict[str, float]


@pytest.fixture(scope="session")
def real_node(control_plane: ControlPlane, step_image: BuiltImage) -> Iterator[RunningNode]:
    pause, argoexec = build_pause_image(), build_argoexec_image()
    network = NodeNetwork.choose()
    credentials = NodeCredentials.issue(control_plane.pki / "ca.crt", control_plane.pki / "ca.key",
                                        control_plane.server, NODE_NAME, control_plane.workdir / "node-pki",
                                        node_ips=[network.node_ip])
    node = Node(credentials, network=network)
    try:
        node.start()
        ready = node.wait_ready()
        imported = node.import_images([pause.archive, argoexec.archive, step_image.archive])
        api = client.CoreV1Api(config.new_client_from_config(str(control_plane.admin_kubeconfig)))
        _wait_for_default_service_account(api)
        yield RunningNode(node, api, ready, imported)
    finally:
        node.stop()


def _wait_for_default_service_account(api: client.CoreV1Api, timeout: float = 60.0) -> None:
    """The controller-manager creates ServiceAccount `default` and ConfigMap `kube-root-ca.crt` per namespace."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            api.read_namespaced_service_account("default", "default")
            api.read_namespaced_config_map("kube-root-ca.crt", "default")
            return
        except client.ApiException:
            time.sleep(0.5)
    raise AssertionError("kube-controller-manager did not create ServiceAccount default/default in time")
