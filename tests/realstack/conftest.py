"""Fixtures of the real-stack tier (every test here is marked `realstack`; none is ever skipped).

- `real_cluster`: the whole control plane from `gpuaas cluster up` (kube-apiserver, controller-manager,
  scheduler, KWOK GPU nodes, Kueue, KEDA, Prometheus), once per session in a temporary state dir and
  stopped at the end; `GPUAAS_REAL_CLUSTER=<state dir>` reuses a cluster you started with
  `gpuaas cluster up --state-dir DIR` (it is then left running). Binaries come from
  `gpuaas cluster build` (`make test` runs it first); a failure to build or start fails the tests.
- `argo_cluster`: `gpuaas cluster up --with events` (the control plane, the real node, Argo Workflows
  with its PostgreSQL archive and Argo Server, NATS and the Argo Events controller) in its own state
  dir under /var/tmp (PostgreSQL's `postgres` user must traverse it), once per session;
  `GPUAAS_REAL_ARGO_CLUSTER=<state dir>` reuses one started with `--with events`.
- `control_plane`, `step_image`, `real_node`: a minimal control plane and a real node (kubelet +
  containerd) that runs the step image's pods (docs/real-stack-pods.md). The images build once
  (cached under .stack-cache/images across runs).

Real nodes do not exclude each other (each runs in a mount namespace of its own, gpuaas.cluster.node),
so `make test-real` runs the tier as shards side by side, one pytest process per stack
(tests/support/real_shards.py); this conftest marks each test with its shard and, in a shard's
process, deselects the others'.
"""

from __future__ import annotations

import json
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
from tests.support import real_shards
from tests.support.real_cluster import RealCluster

REUSE_ENV = "GPUAAS_REAL_CLUSTER"
ARGO_REUSE_ENV = "GPUAAS_REAL_ARGO_CLUSTER"
HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    real_shards.stop_on_sigterm()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tier; in a shard's process keep only that shard's tests; run the README's Helm install first.

    Why the README's Helm install first: it installs the chart on the fresh Argo cluster (helm refuses objects
    another tool applied) and uninstalls it before the other Argo tests install the product with kubectl
    (tests/realstack/test_readme_install.py). Why the demo next: its story needs 11 of the 12 KWOK GPUs at
    once, so it runs before any other test on its cluster has taken some (tests/realstack/test_demo_real.py).
    Why test_least_privilege's Argo test last: it judges the audit log of the requests the other Argo tests
    made the product's pods send, so the Argo tests share one shard (one cluster) and it ends it."""
    slots = [index for index, item in enumerate(items) if HERE in Path(str(item.fspath)).resolve().parents]
    tier = [items[index] for index in slots]
    shards = _SHARDS
    for item in tier:
        item.add_marker(pytest.mark.realstack)
        marker = item.get_closest_marker(real_shards.MARKER)
        fixtures = getattr(item, "fixturenames", ())
        try:
            shards[item.nodeid] = real_shards.shard_of(marker.args if marker else None, fixtures)
            if real_shards.runs_after_others(marker.kwargs if marker else None):
                _AFTER_OTHERS.add(item.nodeid)
            if after := real_shards.waits_for(marker.kwargs if marker else None):
                _AFTER[item.nodeid] = after
        except (TypeError, ValueError) as error:
            raise pytest.UsageError(f"{item.nodeid}: {error}") from None

    def argo(item: pytest.Item) -> bool:
        return "argo_cluster" in getattr(item, "fixturenames", ())

    def name(item: pytest.Item) -> str:
        return Path(str(item.fspath)).name

    ordered = sorted(tier, key=lambda item: (not argo(item), "test_the_readme_helm_install" not in item.name,
                                             name(item) != "test_demo_real.py",
                                             argo(item) and name(item) == "test_least_privilege.py"))
    for index, item in zip(slots, ordered, strict=True):
        items[index] = item
    if selected := os.environ.get(real_shards.SHARD_ENV):
        names = set(selected.split("+"))  # a merged shard (a reused cluster) is "a+b"
        others = [item for item in items if item.nodeid in shards and shards[item.nodeid] not in names]
        if others:
            config.hook.pytest_deselected(items=others)
            dropped = {id(item) for item in others}
            items[:] = [item for item in items if id(item) not in dropped]


_SHARDS: dict[str, str] = {}
"""nodeid -> shard, for the tier's tests of this session."""
_AFTER_OTHERS: set[str] = set()
"""The tests whose shard starts when the other shards have ended (real_shard(..., after_others=True))."""
_AFTER: dict[str, tuple[str, ...]] = {}
"""The tests whose shard starts when the named shards have ended (real_shard(..., after=(...)))."""


def pytest_collection_finish(session: pytest.Session) -> None:
    """For the shard runner's collection pass: each selected test's shard and stacks, after -m/-k."""
    if plan := os.environ.get(real_shards.PLAN_ENV):
        Path(plan).write_text(json.dumps({
            item.nodeid: {"shard": _SHARDS[item.nodeid],
                          "stacks": real_shards.stacks_used(getattr(item, "fixturenames", ())),
                          "after_others": item.nodeid in _AFTER_OTHERS, "after": list(_AFTER.get(item.nodeid, ()))}
            for item in session.items if item.nodeid in _SHARDS}))


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


def events_cluster(reuse_env: str, prefix: str) -> Iterator[RealCluster]:
    """A `gpuaas cluster up --with events` cluster for a fixture: the one $reuse_env names (left running), else
    one started in a new state dir under /var/tmp (PostgreSQL's `postgres` user must traverse it) and
    stopped and removed when the fixture ends."""
    reused = os.environ.get(reuse_env)
    if reused:
        cluster = Cluster(Path(reused))
        status = cluster.status()
        if status["phase"] != "ready" or "events" not in status["parts"]:
            pytest.fail(f"expected the cluster in ${reuse_env}={reused} ready with the events part, found "
                        f"{status['phase']} with parts {status['parts']}; start it with "
                        f"`gpuaas cluster up --with events --state-dir {reused}` or unset {reuse_env}")
        yield RealCluster(cluster, Path(status["kubeconfig"]))
        return
    build_all(progress=print)
    state_dir = Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp"))
    cluster = Cluster(state_dir, progress=print)
    try:
        state = cluster.up(timeout_s=1500, parts={"events"})
    except ClusterError as error:
        shutil.rmtree(state_dir, ignore_errors=True)
        pytest.fail(f"the real stack with Argo did not start: {error}")
    try:
        yield RealCluster(cluster, Path(state.kubeconfig))
    finally:
        cluster.down(quiet=True)
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def argo_cluster() -> Iterator[RealCluster]:
    """Session scope, started by the first test that asks; stopped at the end of the session."""
    yield from events_cluster(ARGO_REUSE_ENV, "gpuaas-argo-cluster-")


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
    network = NodeNetwork.choose()  # the bridge is made now; node.stop() removes it
    try:
        credentials = NodeCredentials.issue(control_plane.pki / "ca.crt", control_plane.pki / "ca.key",
                                            control_plane.server, NODE_NAME, control_plane.workdir / "node-pki",
                                            node_ips=[network.node_ip])
    except BaseException:
        network.delete()
        raise
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
