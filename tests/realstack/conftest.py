"""The real-stack tier: one real control plane (`gpuaas cluster up`) for the whole session.

Every test under tests/realstack is marked `realstack`. The cluster is started once per session in
a temporary state dir and stopped at the end; set `GPUAAS_REAL_CLUSTER=<state dir>` to reuse a
cluster you started with `gpuaas cluster up --state-dir DIR` (it is then left running).
Binaries come from `gpuaas cluster build` (`make test` runs it first); a missing one is built here,
and a failure to build or start fails the tests loudly, never skips them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuaas.cluster.binaries import build_all
from gpuaas.cluster.stack import Cluster, ClusterError
from tests.support.real_cluster import RealCluster

REUSE_ENV = "GPUAAS_REAL_CLUSTER"
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.realstack)


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
