"""Fixtures of the real-stack tier (every test here is marked `realstack`; none is ever skipped).

- `real_cluster`: the whole control plane from `gpuaas cluster up` (kube-apiserver, controller-manager,
  scheduler, KWOK GPU nodes, Kueue, KEDA, Prometheus), once per session in a temporary state dir and
  stopped at the end; `GPUAAS_REAL_CLUSTER=<state dir>` reuses a cluster you started with
  `gpuaas cluster up --state-dir DIR` (it is then left running). Binaries come from
  `gpuaas cluster build` (`make test` runs it first); a failure to build or start fails the tests.
- `argo_cluster`: `gpuaas cluster up --with events` (the control plane, the real node, Argo Workflows
  with its PostgreSQL archive and Argo Server, NATS and the Argo Events controller) in its own state
  dir under /var/tmp (PostgreSQL's `postgres` user must traverse it), once per session: the modules
  that use it run first, and it is stopped before the first test that needs `real_node` (the machine
  has one node lock); `GPUAAS_REAL_ARGO_CLUSTER=<state dir>` reuses one started with `--with events`.
- `control_plane`, `step_image`, `real_node`: a minimal control plane and a real node (kubelet +
  containerd) that runs the step image's pods (docs/real-stack-pods.md). The images build once
  (cached under .stack-cache/images across runs).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client, config

from gpuaas.cluster.binaries import build_all
from gpuaas.cluster.images import BuiltImage, build_argoexec_image, build_pause_image, build_step_image
from gpuaas.cluster.node import Node, NodeCredentials, NodeNetwork
from gpuaas.cluster.stack import Cluster, ClusterError
from tests.realstack.control_plane import ControlPlane
from tests.support.real_cluster import RealCluster

REUSE_ENV = "GPUAAS_REAL_CLUSTER"
ARGO_REUSE_ENV = "GPUAAS_REAL_ARGO_CLUSTER"
HERE = Path(__file__).resolve().parent
PROFILE_MODULES = ("test_monitoring_profiles.py",)
"""Modules that start their own `--with events --monitoring PROFILE` cluster (and so their own real node)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tier, and run the tests on the Argo cluster before all other real-stack tests.

    Why the order: starting the Argo cluster costs minutes, so it starts once for every module that uses
    it; its real node and a `real_node` cannot both run (one node lock per machine), so every Argo test
    must be done before the first `real_node` test takes the lock (see `release_argo_cluster`). The README's
    Helm install runs first of the Argo tests (helm installs only onto a cluster without the product and
    uninstalls after), then the demo's module: its story needs 11 of the 12 KWOK GPUs free;
    test_least_privilege's Argo test last: it judges the audit log of the requests the others made the
    product's pods send."""
    slots = []
    for index, item in enumerate(items):
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.realstack)
            slots.append(index)
    tier = [items[index] for index in slots]
    # The README's Helm install first: it installs the chart on the fresh Argo cluster (helm refuses objects
    # another tool applied) and uninstalls it. Then the demo: it needs 11 of the 12 KWOK GPUs at once
    # (tests/realstack/test_demo_real.py). The least-privilege judge of the event path last among the Argo
    # tests: it reads what every other Argo test made the product ask.
    # The monitoring profiles' modules next: each starts a cluster with a real node of its own, so they run
    # after the Argo cluster is released and before `real_node` takes the lock for the rest of the session.
    def argo(item: pytest.Item) -> bool:
        return "argo_cluster" in getattr(item, "fixturenames", ())

    def name(item: pytest.Item) -> str:
        return Path(str(item.fspath)).name

    ordered = sorted(tier, key=lambda item: (not argo(item), name(item) not in PROFILE_MODULES,
                                             "test_the_readme_helm_install" not in item.name,
                                             name(item) != "test_demo_real.py",
                                             argo(item) and name(item) == "test_least_privilege.py"))
    for index, item in zip(slots, ordered, strict=True):
        items[index] = item


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    reused = os.environ.get(REUSE_ENV)
    if reused:
        cluster = Cluster(Path(reused))
        status = cluster.status()
        if status["phase"] != "ready":
            pytest.fail(f"expected the cluster in ${REUSE_ENV}={reused} to be ready, found {status['phase']}; "
                        f"start it with `gpuaas cluster up --state-dir {reused}` or unset {REUSE_ENV}")
        yield RealCluster(cluster, Path(status["kubeconfig"]))
        return
    build_all(progress=print)
    cluster = Cluster(tmp_path_factory.mktemp("real-cluster"), progress=print)
    try:
        state = cluster.up(timeout_s=900)
    except ClusterError as error:
        pytest.fail(f"the real stack did not start: {error}")
    try:
        yield RealCluster(cluster, Path(state.kubeconfig))
    finally:
        cluster.down(quiet=True)


_ARGO_CLUSTERS: list[Cluster] = []
"""The Argo cluster this session started, while it runs (at most one)."""


def release_argo_cluster() -> None:
    """Stop the session's Argo cluster now: its real node holds the machine's one node lock
    (gpuaas.cluster.node.NODE_LOCK), which `real_node` needs. The Argo tests have all run by then
    (`pytest_collection_modifyitems`)."""
    while _ARGO_CLUSTERS:
        _ARGO_CLUSTERS.pop().down(quiet=True)


@pytest.fixture(scope="session")
def argo_cluster() -> Iterator[RealCluster]:
    """Session scope, started by the first test that asks; stopped by `release_argo_cluster` or at the end."""
    reused = os.environ.get(ARGO_REUSE_ENV)
    if reused:
        cluster = Cluster(Path(reused))
        status = cluster.status()
        if status["phase"] != "ready" or "events" not in status["parts"]:
            pytest.fail(f"expected the cluster in ${ARGO_REUSE_ENV}={reused} ready with the events part, found "
                        f"{status['phase']} with parts {status['parts']}; start it with "
                        f"`gpuaas cluster up --with events --state-dir {reused}` or unset {ARGO_REUSE_ENV}")
        yield RealCluster(cluster, Path(status["kubeconfig"]))
        return
    build_all(progress=print)
    state_dir = Path(tempfile.mkdtemp(prefix="gpuaas-argo-cluster-", dir="/var/tmp"))
    cluster = Cluster(state_dir, progress=print)
    try:
        state = cluster.up(timeout_s=1500, parts={"events"})
    except ClusterError as error:
        shutil.rmtree(state_dir, ignore_errors=True)
        pytest.fail(f"the real stack with Argo did not start: {error}")
    _ARGO_CLUSTERS.append(cluster)
    try:
        yield RealCluster(cluster, Path(state.kubeconfig))
    finally:
        release_argo_cluster()
        shutil.rmtree(state_dir, ignore_errors=True)


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
    release_argo_cluster()
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
