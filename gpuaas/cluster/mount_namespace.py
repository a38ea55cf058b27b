"""A real node's private view of the machine paths its programs have compiled in, so nodes can run side by side.

Why: the kubelet and containerd use a few host paths whatever their configuration says, and two
nodes on one machine would take them from each other. Read from the pinned sources (and checked by
listing what a node leaves on the machine, docs/real-stack-pods.md):

| path | who | why it cannot be configured |
|---|---|---|
| `/var/lib/kubelet/device-plugins/` | kubelet | `k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1.KubeletSocket`, used by `pkg/kubelet/cm/devicemanager.NewManagerImpl`: the device manager's socket and its checkpoint `kubelet_internal_checkpoint`; at start it deletes everything else in the folder (a second kubelet took the first one's socket) |
| `/var/log/containers/` | kubelet | `pkg/kubelet/kuberuntime/legacy.go` `legacyContainerLogsDir`: a symlink per container; its container GC deletes the dangling ones |
| `/run/containerd/` | containerd 1.6, its shims | `runtime/v2/shim` `socketRoot`: each shim's socket `/run/containerd/s/<sha256>` |
| `/var/lib/cni/` | containerd's CNI library | libcni's result cache (`/var/lib/cni/results`) |

Each node's containerd (so its shims, runc and the CNI plugins) and kubelet run in a mount namespace
of their own, made private (`unshare --mount --propagation private`), in which each of those paths
is a bind mount of a folder in the node's work folder. Everything those programs mount (pods'
volumes, containers' root filesystems, network namespaces' bind mounts) then lives in that
namespace only: the machine's mount table never sees it, and it all goes when the namespace's last
process ends. A node killed before it could stop (SIGKILL, the OOM killer) leaves its programs running
in the namespace, which then stays; the namespace is recorded in its folder (`RECORD`: its inode number
and the identity of the node's folder bound in it, since the kernel reuses a gone namespace's number at
once), and the next node on that folder, or `gpuaas cluster down`, kills what is still in it first (`reap`).

What stays shared, and how (`MachineShare`): a bind mount needs its mount point to exist in the
machine's tree, so the first node creates the missing folders and the last one to stop removes
what the first created (a shared lock held by every running node says who is last; joining and
leaving are serialized by a second lock). A folder must not be removed while another node runs:
removing a directory detaches the mounts on it in every namespace. The kubelet also sets six kernel
tunables at start (`pkg/kubelet/cm/container_manager_linux.go` `setupKernelTunables`: vm.overcommit_memory=1,
vm.panic_on_oom=0, kernel.panic=10, kernel.panic_on_oops=1, kernel.keys.root_maxkeys, root_maxbytes):
the first node records the machine's values and the last one puts back each that still has the
kubelet's value.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from gpuaas.cluster.debian import debian_tool

PRIVATE_PATHS = (Path("/var/lib/kubelet/device-plugins"), Path("/var/log/containers"), Path("/run/containerd"),
                 Path("/var/lib/cni"))
"""Machine paths compiled into the node's programs; each node sees a folder of its own there (module docstring)."""
KUBELET_TUNABLES = {"vm/overcommit_memory": "1", "vm/panic_on_oom": "0", "kernel/panic": "10",
                    "kernel/panic_on_oops": "1", "kernel/keys/root_maxkeys": "1000000",
                    "kernel/keys/root_maxbytes": "25000000"}
"""What the kubelet writes under /proc/sys at start (k8s.io/component-helpers/node/util/sysctl, v0.36)."""
SYSCTL_ROOT = Path("/proc/sys")
USERS_LOCK = Path("/run/lock/gpuaas-nodes.lock")
"""Held shared by every running node: whoever can take it exclusively is the only (last) node."""
JOIN_LOCK = Path("/run/lock/gpuaas-nodes.join.lock")
"""Held exclusively while a node joins or leaves; its content records what the first node changed."""

class NamespaceError(RuntimeError):
    """The node's mount namespace could not be made or entered; the message says which command failed."""


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise NamespaceError(f"{what} failed (exit {done.returncode}): {' '.join(command)}: "
                             f"{(done.stdout + done.stderr).strip()[-600:]}")


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[int]:
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield descriptor
    finally:
        os.close(descriptor)


def _read_record(descriptor: int) -> dict:
    size = os.fstat(descriptor).st_size
    text = os.pread(descriptor, size, 0).decode(errors="replace") if size else ""
    try:
        record = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        record = {}
    return {"created": list(record.get("created", [])), "tunables": dict(record.get("tunables", {}))}


def _write_record(descriptor: int, record: dict) -> None:
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode(), 0)


def _tunable(name: str) -> str | None:
    try:
        return (SYSCTL_ROOT / name).read_text().strip()
    except OSError:
        return None


class MachineShare:
    """A node's share of the machine: the mount points of PRIVATE_PATHS and the kubelet's kernel tunables.

    `join()` before the node starts, `leave()` after it stopped (idempotent). A node killed without
    leaving releases its shared lock with its process; the next last node to leave cleans up for it.
    """

    def __init__(self, paths: tuple[Path, ...] = PRIVATE_PATHS) -> None:
        self.paths = paths
        self._users: int | None = None

    def join(self) -> None:
        if self._users is not None:
            return
        with _exclusive(JOIN_LOCK) as join:
            users = os.open(USERS_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                first = _try_exclusive(users)
                fcntl.flock(users, fcntl.LOCK_SH)  # no one else holds it exclusively: that needs JOIN_LOCK
            except BaseException:
                os.close(users)
                raise
            self._users = users
            record = _read_record(join)
            if first:  # the machine's own values, unless a node killed before it left recorded them already
                for name in KUBELET_TUNABLES:
                    if name not in record["tunables"] and (value := _tunable(name)) is not None:
                        record["tunables"][name] = value
            for path in self.paths:
                for folder in reversed((path, *path.parents)):
                    if not folder.exists():
                        folder.mkdir()
                        record["created"].append(str(folder))
            _write_record(join, record)

    def leave(self) -> None:
        if self._users is None:
            return
        with _exclusive(JOIN_LOCK) as join:
            os.close(self._users)
            self._users = None
            users = os.open(USERS_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if not _try_exclusive(users):
                    return  # another node runs: its mounts stand on these folders
                record = _read_record(join)
                for folder in sorted(record["created"], key=len, reverse=True):
                    with contextlib.suppress(OSError):  # not empty: someone else put something there
                        Path(folder).rmdir()
                for name, value in record["tunables"].items():
                    if _tunable(name) == KUBELET_TUNABLES.get(name) and value != KUBELET_TUNABLES.get(name):
                        with contextlib.suppress(OSError):
                            (SYSCTL_ROOT / name).write_text(value)
                _write_record(join, {"created": [], "tunables": {}})
            finally:
                os.close(users)


def _try_exclusive(descriptor: int) -> bool:
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


RECORD = "namespace.json"
"""In a namespace's folder while it runs: its inode and holder, for `reap` after a crash."""


Marker = tuple[str, int, int]
"""A namespace's own bind: (the path it is mounted at, the device and inode of the node's folder bound there)."""


def _processes_in(inode: int, marker: Marker | None) -> list[int]:
    """Every process whose mount namespace is `inode` and, with a `marker`, that sees the node's own folder bound
    at the marker's path; never the machine's own namespace (refused).

    Why the marker: the kernel reuses a namespace's inode number as soon as the namespace is gone, and pods and
    other nodes make mount namespaces all the time; the inode alone once named three processes of another
    namespace right after a node stopped (sharded CI run), and `reap` would have SIGKILLed them. The path is
    resolved in the process's own namespace through /proc/PID/root."""
    if inode == _namespace_id("self"):
        raise NamespaceError(f"expected a node's own mount namespace, found the machine's ({inode})")
    return [int(entry.name) for entry in Path("/proc").iterdir()
            if entry.name.isdigit() and _namespace_id(entry.name) == inode
            and (marker is None or _sees(entry.name, marker))]


def _sees(pid: str, marker: Marker) -> bool:
    path, device, inode = marker
    try:
        found = os.stat(f"/proc/{pid}/root{path}")
    except OSError:  # gone, or a zombie
        return False
    return (found.st_dev, found.st_ino) == (device, inode)


def _marker(folder: Path, paths: tuple[Path, ...]) -> Marker | None:
    """The first private path and the identity of the node's folder bound there (None: no path is bound)."""
    if not paths:
        return None
    found = os.stat(folder / paths[0].relative_to("/"))
    return (str(paths[0]), found.st_dev, found.st_ino)


def _kill_all(inode: int, marker: Marker | None, timeout: float,
              reap_child: Callable[[], object] = lambda: None) -> None:
    deadline = time.monotonic() + timeout
    while pids := _processes_in(inode, marker):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        reap_child()
        if time.monotonic() > deadline:
            raise NamespaceError(f"processes {pids} still in the node's mount namespace {inode} "
                                 f"{timeout:.0f}s after SIGKILL")
        time.sleep(0.1)


def reap(folder: Path, timeout: float = 15.0) -> list[int]:
    """Kill what a node that crashed left in the namespace recorded in `folder` (its kubelet, containerd,
    shims, pods, the holder); the pids killed. Nothing when no record is there or nothing runs in it."""
    record = folder / RECORD
    try:
        recorded = json.loads(record.read_text())
        inode, marker = recorded["inode"], recorded.get("marker")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []
    valid_marker = marker is None or (isinstance(marker, list) and len(marker) == 3 and isinstance(marker[0], str)
                                      and all(isinstance(n, int) for n in marker[1:]))
    if not isinstance(inode, int) or inode == _namespace_id("self") or not valid_marker:
        record.unlink(missing_ok=True)
        return []
    if marker is None:  # written before markers (or a namespace without binds): never kill on the inode alone
        record.unlink(missing_ok=True)
        return []
    own: Marker = (marker[0], marker[1], marker[2])
    left = _processes_in(inode, own)
    _kill_all(inode, own, timeout)
    record.unlink(missing_ok=True)
    return left


def _namespace_id(pid: int | str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/mnt").st_ino
    except OSError:
        return None


@dataclass
class MountNamespace:
    """A private mount namespace held open by a sleeping process, with PRIVATE_PATHS bound to `folder`'s.

    `command(argv)` is argv run inside it (`nsenter --mount=...`, which then execs argv: the pid is the
    program's own). `stop()` kills every process still inside and waits until none is: the namespace,
    with every mount in it, is then gone.
    """

    folder: Path
    paths: tuple[Path, ...] = PRIVATE_PATHS
    holder: subprocess.Popen | None = None
    inode: int | None = None
    marker: Marker | None = None
    """Set once the binds are made: what tells this namespace's processes from those of a later namespace given
    the same inode number (`_processes_in`)."""

    def source(self, path: Path) -> Path:
        """The node's own folder that stands at `path` inside the namespace."""
        return self.folder / path.relative_to("/")

    def start(self, timeout: float = 10.0) -> None:
        own = _namespace_id("self")
        self.holder = subprocess.Popen([debian_tool("unshare"), "--mount", "--propagation", "private", "--",
                                        "sleep", "infinity"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + timeout
        while (inode := _namespace_id(self.holder.pid)) in (None, own):
            if self.holder.poll() is not None:
                error = self.holder.stderr.read().decode(errors="replace").strip() if self.holder.stderr else ""
                raise NamespaceError(f"expected `unshare --mount` to hold a new mount namespace, it exited with "
                                     f"{self.holder.returncode}: {error or 'no message'}")
            if time.monotonic() > deadline:
                raise NamespaceError(f"`unshare --mount` (pid {self.holder.pid}) made no new mount namespace "
                                     f"within {timeout:.0f}s")
            time.sleep(0.02)
        self.inode = inode
        self.folder.mkdir(parents=True, exist_ok=True)
        for path in self.paths:
            self.source(path).mkdir(parents=True, exist_ok=True)
        self.marker = _marker(self.folder, self.paths)
        (self.folder / RECORD).write_text(json.dumps({"inode": inode, "holder": self.holder.pid,
                                                      "marker": self.marker}) + "\n")
        # unshare(1) calls unshare(2) and only then makes the new namespace's mounts private: on a machine whose
        # `/` is shared (systemd's default), a bind made before that would propagate to the machine. Idempotent.
        _run(self.command([debian_tool("mount"), "--make-rprivate", "/"]), "making the namespace's mounts private")
        for path in self.paths:
            source = self.source(path)
            source.mkdir(parents=True, exist_ok=True)
            _run(self.command([debian_tool("mount"), "--bind", str(source), str(path)]), f"binding {source} at {path}")

    def command(self, argv: list[str]) -> list[str]:
        assert self.holder is not None, "start the namespace first"
        return [debian_tool("nsenter"), f"--mount=/proc/{self.holder.pid}/ns/mnt", "--", *argv]

    def pids(self) -> list[int]:
        """Every process in the namespace (the holder included)."""
        return [] if self.inode is None else _processes_in(self.inode, self.marker)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGKILL whatever still runs inside (the node's daemons were stopped before), then wait for it."""
        if self.holder is None:
            return
        holder = self.holder
        try:
            if self.inode is not None:
                _kill_all(self.inode, self.marker, timeout, reap_child=holder.poll)  # the holder is our child
            holder.kill()  # our own child: also when start() failed before the namespace or its binds were made
            holder.wait(5)
            (self.folder / RECORD).unlink(missing_ok=True)  # kept when something could not be killed: `reap`
        finally:
            self.holder = None
