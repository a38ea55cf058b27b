"""`gpuaas cluster down` stops what `up` started, also from another process after a crash, and
never signals a process that merely reuses a recorded pid."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from gpuaas.cluster import processes
from gpuaas.cluster.stack import Cluster
from gpuaas.cluster.state import ClusterState, ProcessRecord

SLEEP = shutil.which("sleep") or "/bin/sleep"


def test_down_stops_recorded_processes_found_only_through_the_state_dir(tmp_path: Path) -> None:
    state = ClusterState(state_dir=str(tmp_path), phase="ready")
    for name in ("first", "second"):
        state.processes[name] = processes.start(name, [SLEEP, "300"], log=tmp_path / "logs" / f"{name}.log")
        time.sleep(0.01)
    state.save()
    pids = [r.pid for r in state.processes.values()]
    processes._children.clear()  # as after a crash: only the state dir knows the pids

    report = Cluster(tmp_path).status()
    assert [c["name"] for c in report["components"]] == ["first", "second"]
    assert all(c["running"] for c in report["components"])

    stopped = Cluster(tmp_path).down(quiet=True)

    assert stopped == ["second", "first"]  # last started, first stopped
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3]
    assert ClusterState.load(tmp_path).phase == "stopped"


def test_a_pid_now_running_another_program_is_left_alone(tmp_path: Path) -> None:
    stranger = subprocess.Popen([SLEEP, "300"])
    try:
        state = ClusterState(state_dir=str(tmp_path))
        # What was recorded for etcd; the pid now runs `sleep`.
        state.processes["etcd"] = ProcessRecord(name="etcd", pid=stranger.pid, argv=["/nonexistent/etcd"],
                                                log=str(tmp_path / "etcd.log"), state="ready")
        state.save()
        processes._children.clear()

        assert Cluster(tmp_path).down(quiet=True) == []
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()
