"""Peak memory of a command and everything it starts, pods included: does `make test` fit the machine?

    .venv/bin/python benchmarks/suite_memory.py [--interval 2] -- make test

Why a cgroup and not the process tree: the clusters' processes run in sessions of their own,
containerd's shims leave the tree, and PostgreSQL runs as another user; every one of them stays in
the memory cgroup (v1) the command started in. The real nodes' pods are not: their kubelets move
them into cgroups of their own (`/<cgroupRoot>/kubepods/...`), so each sample adds the pods' cgroup
of every kubelet running in the command's cgroup. Resident memory is anonymous + shared memory
(tmpfs, /dev/shm) + mapped files (`total_rss + total_shmem + total_mapped_file` of memory.stat): the
page cache the kernel can drop is not counted. The machine's own figure (MemTotal - MemAvailable)
is printed beside it: on a shared machine it includes everyone else's work.

Prints a line per minute (elapsed, resident now, peak so far), then, last, one JSON line:
{"command", "exitCode", "seconds", "peakResidentGiB", "peakMachineUsedGiB", "machineTotalGiB"}.
Exits with the command's exit code. Needs root and cgroup v1's memory controller (this project's
machines have only v1).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

MEMORY = Path("/sys/fs/cgroup/memory")
RESIDENT_KEYS = ("total_rss", "total_shmem", "total_mapped_file")
GIB = 2**30


def _resident(group: Path) -> int:
    try:
        stat = dict(line.split() for line in (group / "memory.stat").read_text().splitlines())
    except OSError:
        return 0
    return sum(int(stat.get(key, 0)) for key in RESIDENT_KEYS)


def _kubelet_pod_groups(group: Path) -> set[Path]:
    """The pods' cgroups of the kubelets running in `group` (their KubeletConfiguration's cgroupRoot)."""
    found = set()
    try:
        pids = (group / "cgroup.procs").read_text().split()
    except OSError:
        return found
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not argv or not argv[0].endswith(b"/kubelet") or b"--config" not in argv:
            continue
        config = Path(argv[argv.index(b"--config") + 1].decode())
        try:
            root = re.search(r"^cgroupRoot: (\S+)$", config.read_text(), re.MULTILINE)
        except OSError:
            continue
        if root:
            found.add(MEMORY / root.group(1).strip("'\"/") / "kubepods")
    return found


def _machine_used() -> int:
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return (int(info["MemTotal"].split()[0]) - int(info["MemAvailable"].split()[0])) * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between samples (default 2)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --, e.g. -- make test")
    if not (MEMORY / "memory.stat").exists():
        print(f"expected cgroup v1's memory controller at {MEMORY}, found none", file=sys.stderr)
        return 2
    group = MEMORY / f"gpuaas-suite-memory-{os.getpid()}"
    group.mkdir()
    try:
        started = time.monotonic()
        home = next(line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
                    if ":memory:" in line)
        (group / "cgroup.procs").write_text(str(os.getpid()))  # the child is forked into it...
        try:
            child = subprocess.Popen(command)
        finally:
            (MEMORY / home.lstrip("/") / "cgroup.procs").write_text(str(os.getpid()))  # ...and this sampler leaves
        peak = peak_machine = 0
        last_line = started
        pods: set[Path] = set()
        while child.poll() is None:
            pods |= _kubelet_pod_groups(group)
            now = _resident(group) + sum(_resident(pod) for pod in pods if pod.exists())
            peak, peak_machine = max(peak, now), max(peak_machine, _machine_used())
            if time.monotonic() - last_line >= 60:
                print(f"[memory] {time.monotonic() - started:6.0f}s resident {now / GIB:5.1f} GiB, "
                      f"peak {peak / GIB:5.1f} GiB", file=sys.stderr, flush=True)
                last_line = time.monotonic()
            time.sleep(args.interval)
        total = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
        print(json.dumps({"command": " ".join(command), "exitCode": child.returncode,
                          "seconds": round(time.monotonic() - started), "peakResidentGiB": round(peak / GIB, 2),
                          "peakMachineUsedGiB": round(peak_machine / GIB, 2), "machineTotalGiB": round(total / GIB, 1)}))
        return child.returncode
    finally:
        for _ in range(50):  # the cgroup empties once every process the command left has ended
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.2)


if __name__ == "__main__":
    raise SystemExit(main())
