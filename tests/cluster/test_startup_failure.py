"""A component that fails to start stops everything started before it and reports its last log lines."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from gpuaas.cluster import stack
from gpuaas.cluster.stack import Cluster, ClusterError
from gpuaas.cluster.state import ClusterState


def _etcd_then_a_failing_apiserver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, apiserver_says: str) -> None:
    """etcd starts and serves nothing (it stays up, so it must be stopped); the apiserver prints `apiserver_says`
    and dies at once. etcd's /health counts as answered; the apiserver's /readyz never does (it must be seen
    exiting)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    serving = fake / "etcd"
    serving.write_text("#!/bin/sh\nexec sleep 300\n")
    failing = fake / "kube-apiserver"
    failing.write_text(f"#!/bin/sh\necho '{apiserver_says}' >&2\nexit 1\n")
    for script in (serving, failing):
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(stack, "program", lambda component, name: fake / name)
    monkeypatch.setattr(stack.readiness, "http_ok",
                        lambda url, **_: lambda: None if url.endswith("/health") else f"GET {url}: refused")


def test_a_failing_component_stops_the_cluster_and_shows_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _etcd_then_a_failing_apiserver(tmp_path, monkeypatch, "E0101 flag provided but not defined: -bogus")

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


def _cluster_whose_kubectl_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   answers: list[tuple[int, str]]) -> tuple[Cluster, list[str], list[tuple]]:
    """A Cluster whose `kubectl` returns these (exit code, stderr) in turn; the calls and progress lines kept."""
    import subprocess

    calls: list[tuple] = []
    lines: list[str] = []
    cluster = Cluster(tmp_path / "state", progress=lines.append)
    monkeypatch.setattr(cluster, "_remaining", lambda cap: cap)

    def kubectl(*args: str, **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        code, stderr = answers.pop(0)
        return subprocess.CompletedProcess(list(args), code, "", stderr)
    monkeypatch.setattr(cluster, "kubectl", kubectl)
    return cluster, lines, calls


OPENAPI_TIMEOUT = ('error: error validating "STDIN": error validating data: Get "https://127.0.0.1:59153/openapi/v2?'
                   'timeout=32s": context deadline exceeded (Client.Timeout exceeded while awaiting headers)')
"""What kubectl said, seen with two clusters starting at once at load 15 (the API server building its OpenAPI)."""


def test_apply_tries_again_when_kubectl_timed_out_waiting_for_the_api_server(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, lines, calls = _cluster_whose_kubectl_answers(tmp_path, monkeypatch, [(1, OPENAPI_TIMEOUT), (0, "")])
    cluster.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}], "namespaces")
    assert len(calls) == 2 and calls[0] == calls[1]
    assert any("timed out waiting for the API server (1/3)" in line for line in lines)
    assert lines[-1].startswith("  applied 1 namespaces")


def test_apply_fails_at_once_on_a_refusal_and_after_three_timeouts(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    refused = 'Error from server (Invalid): error when creating "STDIN": Namespace "X" is invalid'
    cluster, _, calls = _cluster_whose_kubectl_answers(tmp_path, monkeypatch, [(1, refused)])
    with pytest.raises(ClusterError, match="is invalid"):
        cluster.apply([{"kind": "Namespace"}], "namespaces")
    assert len(calls) == 1
    cluster, _, calls = _cluster_whose_kubectl_answers(tmp_path, monkeypatch, [(1, OPENAPI_TIMEOUT)] * 3)
    with pytest.raises(ClusterError, match="context deadline exceeded"):
        cluster.apply([{"kind": "Namespace"}], "namespaces")
    assert len(calls) == 3


def test_a_state_dir_of_an_earlier_service_range_starts_from_an_empty_etcd(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its Services' ClusterIPs (immutable) are of the range earlier versions used: kept, `up` would fail applying
    the stack's Services; so the cluster starts from an empty etcd, the old one is kept beside it (a user's
    objects are theirs to copy out), and the line says why and where."""
    fake = tmp_path / "bin"
    fake.mkdir()
    for name, body in (("etcd", "exec sleep 300"), ("kube-apiserver", "exit 1")):
        (fake / name).write_text(f"#!/bin/sh\n{body}\n")
        (fake / name).chmod(0o755)
    monkeypatch.setattr(stack, "program", lambda component, name: fake / name)
    monkeypatch.setattr(stack.readiness, "http_ok",
                        lambda url, **_: lambda: None if url.endswith("/health") else f"GET {url}: refused")
    state_dir = tmp_path / "state"
    (state_dir / "etcd" / "member").mkdir(parents=True)
    (state_dir / "etcd" / "member" / "db").write_text("a user's objects")
    (state_dir / "state.json").write_text(json.dumps({"state_dir": str(state_dir), "phase": "stopped"}))
    lines: list[str] = []
    with pytest.raises(ClusterError):
        Cluster(state_dir, progress=lines.append).up(timeout_s=30)
    assert not (state_dir / "etcd" / "member" / "db").exists()
    kept = list(state_dir.glob("etcd.before-*"))
    assert [(k / "member" / "db").read_text() for k in kept] == ["a user's objects"]
    assert any(f"the old one is kept in {kept[0]}" in line for line in lines), lines
    assert any("range 10.96.0.0/16 (an earlier version); starting from an empty etcd in 10.97.0.0/16" in line
               for line in lines), lines
    state = ClusterState.load(state_dir)
    assert state is not None and state.service_range == "10.97.0.0/16"


def test_a_start_that_fails_on_a_full_disk_still_stops_what_it_started(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The failure path's state saves fail too (ENOSPC, as when the step image's archive filled the disk): the
    processes started are stopped from the records in memory, and the start's own error is what is raised.
    Before, the first save's OSError skipped the stop and left the components running."""
    import errno

    _etcd_then_a_failing_apiserver(tmp_path, monkeypatch, "E0101 no space left on device")
    save = ClusterState.save

    def full_disk_once_failed(self: ClusterState) -> None:
        if self.phase in ("failed", "stopped"):
            raise OSError(errno.ENOSPC, "No space left on device")
        save(self)
    monkeypatch.setattr(ClusterState, "save", full_disk_once_failed)

    cluster = Cluster(tmp_path / "state", progress=lambda line: None)
    with pytest.raises(ClusterError, match="kube-apiserver exited during start-up"):
        cluster.up(timeout_s=30)
    assert cluster.running() == []  # the state dir still lists etcd (saved while it started): it is not running
