"""A component that fails to start stops everything started before it and reports its last log lines."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gpuaas.cluster import stack
from gpuaas.cluster.stack import Cluster, ClusterError
from gpuaas.cluster.state import ClusterState


def test_a_failing_component_stops_the_cluster_and_shows_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # etcd starts and serves nothing (it stays up, so it must be stopped); the apiserver dies at once.
    fake = tmp_path / "bin"
    fake.mkdir()
    serving = fake / "etcd"
    serving.write_text("#!/bin/sh\nexec sleep 300\n")
    failing = fake / "kube-apiserver"
    failing.write_text("#!/bin/sh\necho 'E0101 flag provided but not defined: -bogus' >&2\nexit 1\n")
    for script in (serving, failing):
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(stack, "program", lambda component, name: fake / name)
    # etcd's /health counts as answered; the apiserver's /readyz never does (it must be seen exiting).
    monkeypatch.setattr(stack.readiness, "http_ok",
                        lambda url, **_: lambda: None if url.endswith("/health") else f"GET {url}: refused")

    cluster = Cluster(tmp_path / "state", progress=lambda line: None)
    with pytest.raises(ClusterError) as failed:
        cluster.up(timeout_s=30)

    message = str(failed.value)
    assert "kube-apiserver exited during start-up" in message
    assert "flag provided but not defined: -bogus" in message
    assert cluster.running() == []
    state = ClusterState.load(tmp_path / "state")
    assert state is not None and state.phase == "failed"
    assert {name: record.state for name, record in state.processes.items()} == {
        "etcd": "stopped", "kube-apiserver": "stopped"}


def test_up_without_build_names_the_missing_program_in_one_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # `gpuaas cluster up --no-build` on a cache that lacks the programs: an error that says what to run, no traceback.
    from gpuaas.cli import main

    monkeypatch.setenv("GPUAAS_STACK_CACHE", str(tmp_path / "empty-cache"))
    code = main(["cluster", "up", "--no-build", "--state-dir", str(tmp_path / "state")])

    err = capsys.readouterr().err
    assert code == 1, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("gpuaas cluster up: expected etcd"), last
    assert "gpuaas cluster build" in last
    assert Cluster(tmp_path / "state").running() == []
