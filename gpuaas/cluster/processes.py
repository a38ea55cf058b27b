"""Starting, finding and stopping the cluster's processes by pid.

Why detached sessions and recorded argv: the processes must outlive `gpuaas cluster up`, and a later
`down` (perhaps after the machine's pids were reused) must stop exactly what was started, never a
stranger: a pid is only signalled when its /proc cmdline still starts with the recorded program.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import time
from pathlib import Path

from gpuaas.cluster.state import ProcessRecord

_children: dict[int, subprocess.Popen[bytes]] = {}
"""Processes this Python process started: their exit status is known exactly (no /proc guessing)."""


def start(name: str, argv: list[str], *, log: Path, env: dict[str, str] | None = None, cwd: Path | None = None,
          endpoint: str = "", user: str | None = None, stop_signal: int = signal.SIGTERM,
          stop_seconds: float = 10.0) -> ProcessRecord:
    """Start `argv` in its own session with stdout and stderr appended to `log`.

    `user` runs it as that system user (its primary group, no supplementary groups): PostgreSQL
    refuses to run as root.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    identity: dict[str, object] = {}
    if user is not None:
        entry = pwd.getpwnam(user)
        identity = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
    with open(log, "ab") as out:  # the child keeps its own descriptor
        out.write(f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(argv)}\n".encode())
        out.flush()
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True,
                                 **identity)  # type: ignore[call-overload]
    _children[child.pid] = child
    return ProcessRecord(name=name, pid=child.pid, argv=argv, log=str(log), endpoint=endpoint,
                         started_at=time.time(), stop_signal=int(stop_signal), stop_seconds=stop_seconds,
                         env=dict(env or {}), user=user)


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def alive(record: ProcessRecord) -> bool:
    """The recorded process still runs (same pid AND same program; a zombie counts as gone)."""
    if record.pid in _children:
        return _children[record.pid].poll() is None
    cmdline = _cmdline(record.pid)
    if not cmdline or cmdline[0] != record.argv[0]:
        return False
    try:
        status = Path(f"/proc/{record.pid}/stat").read_text()
    except OSError:
        return False
    return status.rsplit(")", 1)[-1].split()[0] != "Z"


def stop(record: ProcessRecord, timeout_s: float | None = None) -> bool:
    """The record's stop signal (SIGTERM), then SIGKILL after its `stop_seconds`; True when it was running."""
    if not alive(record):
        return False
    timeout_s = record.stop_seconds if timeout_s is None else timeout_s
    try:
        os.kill(record.pid, record.stop_signal)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _reap(record.pid)
        if not alive(record):
            return True
        time.sleep(0.05)
    try:
        os.kill(record.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for _ in range(100):
        _reap(record.pid)
        if not alive(record):
            break
        time.sleep(0.05)
    return True


def _reap(pid: int) -> None:
    """Collect our own child's exit status so it does not linger as a zombie."""
    if pid in _children:
        _children[pid].poll()
        return
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def rss_bytes(record: ProcessRecord) -> int | None:
    """Resident memory of the process (VmRSS), or None when it is not running."""
    if not alive(record):
        return None
    try:
        for line in Path(f"/proc/{record.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def log_tail(path: str | Path, lines: int = 20) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
