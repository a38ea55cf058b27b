"""Several real nodes on one machine at once (gpuaas.cluster.node, gpuaas.cluster.mount_namespace).

What used to make them exclude each other, each checked with two more nodes started at the same
moment beside the session's node (three kubelets on the machine):

- the kubelet's device-plugin socket, compiled in as /var/lib/kubelet/device-plugins/kubelet.sock
  and emptied at every kubelet's start: each node's kubelet keeps its own, in its own folder, seen
  at that path only inside the node's mount namespace;
- the mounts a node makes (pods' volumes, containers' root filesystems, network namespaces): none in
  the machine's mount table, whatever runs;
- the same ClusterIP on every node's bridge (every cluster names its Services the same): a pod on
  each node reaches the program its own node forwards that address to;
- stopping a node leaves nothing (its processes, namespace, cgroups, bridge, folder) and does not
  disturb the other: its pods still run, its socket is still there.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from gpuaas.cluster.images import BuiltImage, build_pause_image
from gpuaas.cluster.node import CGROUP_V1_ROOT, ForwardedService, Node, NodeCredentials, NodeNetwork
from tests.realstack.conftest import RunningNode
from tests.realstack.control_plane import ControlPlane

pytestmark = pytest.mark.realstack

STEP_IMAGE = "gpuaas.local/gpuaas-step:dev"
SHARED_CLUSTER_IP = "10.97.0.177"
"""One Service address both nodes forward, each to a program of its own (as each cluster's NATS is 10.97.0.42)."""
SHARED_PORT = 8080
SOCKET = Path("/var/lib/kubelet/device-plugins/kubelet.sock")


class _Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = self.server.answer.encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@dataclass
class SideNode:
    name: str
    node: Node
    answer: str
    server: http.server.ThreadingHTTPServer


def _program(answer: str) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    server.answer = answer  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _start(control_plane: ControlPlane, name: str, answer: str) -> SideNode:
    server = _program(answer)
    network = NodeNetwork.choose()  # the bridge is made now; the node's stop() removes it
    try:
        credentials = NodeCredentials.issue(control_plane.pki / "ca.crt", control_plane.pki / "ca.key",
                                            control_plane.server, name, control_plane.workdir / f"{name}-pki",
                                            node_ips=[network.node_ip])
    except BaseException:
        network.delete()
        server.shutdown()
        raise
    forward = ForwardedService(SHARED_CLUSTER_IP, SHARED_PORT, f"127.0.0.1:{server.server_address[1]}")
    return SideNode(name, Node(credentials, network=network, forwards=[forward]), answer, server)


@pytest.fixture(scope="module")
def side_nodes(real_node: RunningNode, control_plane: ControlPlane, step_image: BuiltImage) -> Iterator[list[SideNode]]:
    """Two nodes beside the session's node, started at the same moment (the bridge and /24 are picked
    under a lock; the machine's mount points are made by whichever joins first)."""
    nodes: list[SideNode] = []
    errors: list[BaseException] = []

    def start(name: str, answer: str) -> None:
        try:
            side = _start(control_plane, name, answer)  # its /24 and bridge: picked while the other picks
            nodes.append(side)
            side.node.start()
            side.node.wait_ready()
            side.node.import_images([build_pause_image().archive, step_image.archive])
        except Exception as error:  # noqa: BLE001 (each thread's failure is reported below, with the other's)
            errors.append(error)
    try:
        threads = [threading.Thread(target=start, args=(f"side-{letter}", letter)) for letter in ("a", "b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        nodes.sort(key=lambda side: side.name)
        assert not errors, f"expected both nodes Ready beside the session's node, found: {errors}"
        yield nodes
    finally:
        for side in nodes:
            side.node.stop()
            side.server.shutdown()


def _pod(name: str, node: str, script: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "restartPolicy": "Never", "automountServiceAccountToken": False,
                     "containers": [{"name": "main", "image": STEP_IMAGE, "imagePullPolicy": "Never",
                                     "command": ["python", "-c", script]}]}}


def _run(api: client.CoreV1Api, manifest: dict, timeout: float = 120.0) -> tuple[str, str]:
    name = manifest["metadata"]["name"]
    api.create_namespaced_pod("default", manifest)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            pod = api.read_namespaced_pod(name, "default")
            if pod.status.phase in ("Succeeded", "Failed"):
                return pod.status.phase, api.read_namespaced_pod_log(name, "default", container="main")
            time.sleep(0.5)
        raise AssertionError(f"pod {name} still {pod.status.phase} after {timeout:.0f}s: {pod.status}")
    finally:
        api.delete_namespaced_pod(name, "default", grace_period_seconds=0)


FETCH = (f"import urllib.request; print(urllib.request.urlopen('http://{SHARED_CLUSTER_IP}:{SHARED_PORT}/', "
         "timeout=20).read().decode())")


def _mounted_under(folder: Path) -> list[str]:
    """Mount points under `folder` in the machine's (this process's) mount table."""
    prefix = str(folder.resolve())
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [point for point in points if point == prefix or point.startswith(prefix + "/")]


def test_each_node_keeps_its_own_device_plugin_socket(side_nodes: list[SideNode], real_node: RunningNode) -> None:
    for side in side_nodes:
        namespace = side.node.namespace
        assert namespace is not None
        own = namespace.source(SOCKET.parent) / SOCKET.name
        assert own.is_socket(), f"expected {side.name}'s kubelet socket at {own} (its {SOCKET})"
    session = real_node.node.namespace
    assert session is not None and (session.source(SOCKET.parent) / SOCKET.name).is_socket(), \
        "the session's node lost its socket when two more kubelets started"


def test_a_pod_on_each_node_reaches_what_its_own_node_forwards_the_shared_cluster_ip_to(
        side_nodes: list[SideNode], real_node: RunningNode) -> None:
    for side in side_nodes:
        phase, log = _run(real_node.api, _pod(f"fetch-{side.name}", side.name, FETCH))
        assert (phase, log.strip()) == ("Succeeded", side.answer), f"pod on {side.name}: {phase} {log!r}"


def test_no_mount_of_any_node_is_in_the_machines_mount_table_while_pods_run(
        side_nodes: list[SideNode], real_node: RunningNode) -> None:
    name = "hold-" + side_nodes[0].name
    real_node.api.create_namespaced_pod("default", _pod(name, side_nodes[0].name, "import time; time.sleep(300)"))
    try:
        deadline = time.monotonic() + 120
        while real_node.api.read_namespaced_pod(name, "default").status.phase != "Running":
            assert time.monotonic() < deadline, f"pod {name} not Running within 120s"
            time.sleep(0.5)
        for node in [side.node for side in side_nodes] + [real_node.node]:
            assert _mounted_under(node.workdir) == [], f"{node.credentials.node_name} mounted in the machine's table"
        inside = Path(f"/proc/{side_nodes[0].node.kubelet.daemon.process.pid}/mountinfo").read_text()
        assert str(side_nodes[0].node.workdir) in inside  # they are there, in the node's own namespace
    finally:
        real_node.api.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def test_stopping_one_node_leaves_nothing_of_it_and_the_other_runs_on(side_nodes: list[SideNode],
                                                                       real_node: RunningNode) -> None:
    gone, staying = side_nodes
    node = gone.node
    assert node.namespace is not None and node.network is not None
    namespace, bridge, workdir, cgroup = node.namespace, node.network.bridge, node.workdir, node.cgroup_root
    node.stop()
    assert namespace.pids() == [], "processes left in the stopped node's mount namespace"
    assert not Path("/sys/class/net", bridge).exists(), f"bridge {bridge} left behind"
    assert not workdir.exists(), f"{workdir} left behind"
    left = [str(group) for group in CGROUP_V1_ROOT.glob(f"*/{cgroup}")]
    assert left == [], f"cgroups left behind: {left}"
    assert staying.node.namespace is not None
    assert (staying.node.namespace.source(SOCKET.parent) / SOCKET.name).is_socket()
    phase, log = _run(real_node.api, _pod("fetch-after", staying.name, FETCH))
    assert (phase, log.strip()) == ("Succeeded", staying.answer)
    session = real_node.node.namespace
    assert session is not None and (session.source(SOCKET.parent) / SOCKET.name).is_socket()
