"""gpuaas.cluster.mount_namespace.MachineShare: what real nodes share on one machine, and who cleans it up.

The mount points of the kubelet's and containerd's compiled-in paths are created by the first node
and removed by the last one only: removing a directory detaches the mounts on it in every mount
namespace, so a node that removed it while another ran would take the other's bind mounts away. The
kubelet's kernel tunables are put back by the last node. Run on temporary paths (no root needed):
the locks and /proc/sys are redirected into tmp_path.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from gpuaas.cluster import mount_namespace
from gpuaas.cluster.mount_namespace import KUBELET_TUNABLES, RECORD, MachineShare, MountNamespace, reap


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(mount_namespace, "USERS_LOCK", tmp_path / "lock" / "nodes.lock")
    monkeypatch.setattr(mount_namespace, "JOIN_LOCK", tmp_path / "lock" / "nodes.join.lock")
    sysctl = tmp_path / "proc-sys"
    for name in KUBELET_TUNABLES:
        (sysctl / name).parent.mkdir(parents=True, exist_ok=True)
        (sysctl / name).write_text("7\n")  # the machine's own value, unlike every value the kubelet sets
    monkeypatch.setattr(mount_namespace, "SYSCTL_ROOT", sysctl)
    (tmp_path / "root" / "var").mkdir(parents=True)
    return tmp_path


def _paths(machine: Path) -> tuple[Path, ...]:
    return (machine / "root/var/lib/kubelet/device-plugins", machine / "root/var/log/containers")


def _kubelet_starts(machine: Path) -> None:
    for name, value in KUBELET_TUNABLES.items():
        (machine / "proc-sys" / name).write_text(value + "\n")


def test_the_first_node_creates_the_mount_points_and_the_last_one_removes_them(machine: Path) -> None:
    first, second = MachineShare(_paths(machine)), MachineShare(_paths(machine))
    first.join()
    assert all(path.is_dir() for path in _paths(machine))
    second.join()
    first.leave()  # the second node's bind mounts stand on them: kept
    assert all(path.is_dir() for path in _paths(machine))
    second.leave()
    assert not (machine / "root/var/lib").exists() and not (machine / "root/var/log").exists()
    assert (machine / "root/var").is_dir()  # there before: not ours to remove


def test_a_node_that_leaves_first_never_removes_what_another_node_uses(machine: Path) -> None:
    """The other order: the node that created the folders leaves while a later one still runs."""
    first, second = MachineShare(_paths(machine)), MachineShare(_paths(machine))
    first.join()
    second.join()
    second.leave()
    assert all(path.is_dir() for path in _paths(machine))
    first.leave()
    assert not any(path.exists() for path in _paths(machine))


def test_folders_that_existed_before_any_node_stay(machine: Path) -> None:
    existing = machine / "root/var/log/containers"
    existing.mkdir(parents=True)
    share = MachineShare(_paths(machine))
    share.join()
    share.leave()
    assert existing.is_dir()
    assert not (machine / "root/var/lib/kubelet").exists()


def test_the_last_node_puts_back_the_kernel_tunables_the_kubelet_changed(machine: Path) -> None:
    first, second = MachineShare(_paths(machine)), MachineShare(_paths(machine))
    first.join()
    _kubelet_starts(machine)
    second.join()  # not first: must not record the kubelet's values as the machine's
    first.leave()
    assert (machine / "proc-sys/kernel/panic").read_text().strip() == KUBELET_TUNABLES["kernel/panic"]
    second.leave()
    assert {(machine / "proc-sys" / name).read_text().strip() for name in KUBELET_TUNABLES} == {"7"}


def test_a_tunable_someone_else_changed_since_is_left_as_it_is(machine: Path) -> None:
    share = MachineShare(_paths(machine))
    share.join()
    _kubelet_starts(machine)
    (machine / "proc-sys/kernel/panic").write_text("30\n")  # an admin's own choice, after the kubelet's
    share.leave()
    assert (machine / "proc-sys/kernel/panic").read_text().strip() == "30"
    assert (machine / "proc-sys/vm/overcommit_memory").read_text().strip() == "7"


def test_a_node_killed_without_leaving_is_cleaned_up_after_by_the_next_last_one(machine: Path) -> None:
    """A killed node's shared lock goes with its process (here: its descriptor); the record stays."""
    killed = MachineShare(_paths(machine))
    killed.join()
    _kubelet_starts(machine)
    assert killed._users is not None
    os.close(killed._users)  # what the kernel does when the process dies
    killed._users = None
    later = MachineShare(_paths(machine))
    later.join()  # first again: keeps the machine's values the killed node recorded
    later.leave()
    assert not any(path.exists() for path in _paths(machine))
    assert {(machine / "proc-sys" / name).read_text().strip() for name in KUBELET_TUNABLES} == {"7"}


def test_leave_without_join_and_twice_does_nothing(machine: Path) -> None:
    share = MachineShare(_paths(machine))
    share.leave()
    share.join()
    share.leave()
    share.leave()
    assert not any(path.exists() for path in _paths(machine))



# -- a namespace left by a crashed node (real unshare/nsenter; root, as the real tier) ---------------------------
def _mounted(path: Path) -> bool:
    return any(line.split()[4] == str(path) for line in Path("/proc/self/mountinfo").read_text().splitlines())


def _inside(namespace: MountNamespace, argv: list[str]) -> subprocess.Popen:
    """argv started in the namespace, returned once it is in it (nsenter joins it just after it starts: a
    namespace stopped before that leaves nsenter failing with exit 1 instead of the program being killed)."""
    program = subprocess.Popen(namespace.command(argv), start_new_session=True)
    deadline = time.monotonic() + 10
    while program.pid not in namespace.pids():
        assert program.poll() is None and time.monotonic() < deadline, "expected the program in the namespace"
        time.sleep(0.01)
    return program


def _namespace_running_sleep(tmp_path: Path, folder: str) -> tuple[MountNamespace, Path, subprocess.Popen]:
    """A namespace whose folder is tmp_path/folder, binding one machine path, with `sleep 600` in it."""
    target = tmp_path / "machine-path"
    target.mkdir(exist_ok=True)
    namespace = MountNamespace(tmp_path / folder, paths=(target,))
    namespace.start()
    return namespace, target, _inside(namespace, ["sleep", "600"])


def test_a_node_killed_before_it_stopped_leaves_what_reap_kills(tmp_path: Path) -> None:
    """What `python -m gpuaas.cluster.node` leaves when SIGKILLed: the holder and its programs in the namespace
    (the namespace and its mounts stay while they run). The next node on that folder, or `cluster down`,
    reaps them from the record; the machine's mount table never had the namespace's binds."""
    namespace, target, program = _namespace_running_sleep(tmp_path, "host")
    try:
        assert (tmp_path / "host" / RECORD).exists()
        assert not _mounted(target), "expected the bind in the node's namespace only"
        left = set(namespace.pids())
        assert {namespace.holder.pid, program.pid} <= left
        # the node process is gone without stop(): only the record in its folder says where its namespace is
        namespace.holder = None
        assert set(reap(tmp_path / "host")) == left
        assert program.wait(10) == -9
        assert not (tmp_path / "host" / RECORD).exists()
        assert reap(tmp_path / "host") == [], "expected nothing left to reap"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(program.pid, 9)


def test_stop_kills_everything_inside_and_removes_the_record(tmp_path: Path) -> None:
    namespace, target, program = _namespace_running_sleep(tmp_path, "host")
    namespace.stop()
    assert program.wait(10) == -9
    assert not (tmp_path / "host" / RECORD).exists()
    assert not _mounted(target)


def test_reap_never_kills_a_namespace_that_only_has_the_recorded_inode_number(tmp_path: Path) -> None:
    """The kernel reuses a gone namespace's inode number at once (a sharded CI run saw three unidentified pids
    under a stopped node's number, inferred to be such a reuse). A record naming node B's folder and a namespace number
    now held by node A's namespace kills nothing of A: A's processes do not see B's folder at the bound path."""
    first, target, program = _namespace_running_sleep(tmp_path, "a")
    try:
        other = tmp_path / "b" / target.relative_to("/")
        other.mkdir(parents=True)
        stat = other.stat()
        (tmp_path / "b" / RECORD).write_text(json.dumps({"inode": first.inode, "holder": 1,
                                                          "marker": [str(target), stat.st_dev, stat.st_ino]}))
        assert reap(tmp_path / "b") == []
        (tmp_path / "b" / RECORD).write_text(json.dumps({"inode": first.inode, "holder": 1}))  # no marker: older
        assert reap(tmp_path / "b") == []
        assert program.poll() is None and first.holder is not None and first.holder.poll() is None
        assert program.pid in first.pids()
    finally:
        first.stop()
    assert program.wait(10) == -9
