"""Loopback ports for the servers this project starts, safe when several clusters start side by side.

Why not "bind port 0, read it, close": the kernel answers from its ephemeral range, the range every
outgoing connection also takes its local port from, and a cluster chooses each port some time before
its program binds it (the whole stack's ports are chosen as it starts). In that window the port can go
to another cluster's bind(0) or to any client's connection. Seen when the real tier's six shards
started their clusters at once: Kueue exited with "listen tcp 127.0.0.1:43531: bind: address already in
use" in a fresh-clone run.

So a port is chosen (1) below the ephemeral range (`net.ipv4.ip_local_port_range`), where no outgoing
connection takes it, and above the ports servers commonly use (the kubelet's 10250, NATS, Prometheus);
(2) free now; and (3) reserved on this machine for `RESERVE_S`: a file created exclusively per port in
a folder per user. A reservation older than that is stale (by then the program listens, so the port is
no longer free for anyone, or it was never started and the port may go again).
"""

from __future__ import annotations

import os
import random
import socket
import tempfile
import time
from pathlib import Path

LOWEST = 20000
"""Above the ports servers commonly listen on (kubelet 10250-10259, 15000s of proxies...)."""
RESERVE_S = 600.0
"""How long a chosen port stays reserved: more than a cluster takes from choosing its ports to binding them."""
ATTEMPTS = 200


def reservations() -> Path:
    return Path(tempfile.gettempdir()) / f"gpuaas-ports-{os.getuid()}"


def ephemeral_range(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int]:
    """The kernel's range for bind(0) and outgoing connections (Linux's default 32768-60999)."""
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def bindable(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on `port` now (SO_REUSEADDR, as the servers bind: TIME_WAIT is free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _reserve(folder: Path, port: int, now: float) -> bool:
    """Claim `port` for RESERVE_S; False when another process holds a live reservation on it."""
    marker = folder / str(port)
    for _ in range(2):
        try:
            descriptor = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                if now - marker.stat().st_mtime < RESERVE_S:
                    return False
                marker.unlink()  # stale: its program listens by now, or never started
            except FileNotFoundError:
                pass
            continue
        with os.fdopen(descriptor, "w") as out:
            out.write(f"{os.getpid()}\n")
        return True
    return False


def _candidates(rng: random.Random) -> range:
    low, high = ephemeral_range()
    if low - 1 - LOWEST >= 1000:
        return range(LOWEST, low)
    if 65535 - high >= 1000:
        return range(high + 1, 65536)
    return range(LOWEST, 65536)  # an unusual kernel setting: bindable() and the reservation still apply


def free_port(host: str = "127.0.0.1", rng: random.Random | None = None) -> int:
    """A port outside the ephemeral range, free now, and reserved for RESERVE_S on this machine."""
    rng = rng or random.SystemRandom()
    folder = reservations()
    folder.mkdir(mode=0o700, exist_ok=True)
    candidates = _candidates(rng)
    now = time.time()
    for _ in range(ATTEMPTS):
        port = rng.choice(candidates)
        if bindable(port, host) and _reserve(folder, port, now):
            return port
    raise OSError(f"expected a free port in {candidates.start}-{candidates.stop - 1} on {host} after {ATTEMPTS} "
                  f"tries, found none; check what listens there (ss -ltn) and {folder}")
