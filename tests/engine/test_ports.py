"""engine.ports: a port chosen for a server is outside the kernel's ephemeral range and reserved on this
machine, so clusters started side by side never choose the same one (seen: Kueue's "bind: address already in
use" when six real-tier shards started at once)."""

from __future__ import annotations

import multiprocessing
import os
import random
import socket
import time
from pathlib import Path

import pytest

from engine import ports


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(ports, "reservations", lambda: tmp_path / "reserved")
    return tmp_path / "reserved"


class Sequence(random.Random):
    """A "random" choice that returns the given ports in turn."""

    def __init__(self, *chosen: int) -> None:
        super().__init__(0)
        self.chosen = list(chosen)

    def choice(self, seq: object) -> int:  # type: ignore[override]
        return self.chosen.pop(0)


def _unbound_ports(count: int) -> list[int]:
    found = []
    candidates = list(ports._candidates(random.Random(1)))
    random.Random(2).shuffle(candidates)
    for port in candidates:
        if ports.bindable(port):
            found.append(port)
        if len(found) == count:
            return found
    raise AssertionError("expected free ports on loopback")


def test_a_port_is_below_the_ephemeral_range_and_reserved(folder: Path) -> None:
    low, _ = ports.ephemeral_range()
    port = ports.free_port()
    assert ports.LOWEST <= port < low
    assert (folder / str(port)).read_text().strip() == str(os.getpid())


def test_a_reserved_port_is_not_given_again(folder: Path) -> None:
    first, second = _unbound_ports(2)
    assert ports.free_port(rng=Sequence(first)) == first
    assert ports.free_port(rng=Sequence(first, second)) == second


def test_a_stale_reservation_is_taken_over(folder: Path) -> None:
    (port,) = _unbound_ports(1)
    assert ports.free_port(rng=Sequence(port)) == port
    old = time.time() - ports.RESERVE_S - 1
    os.utime(folder / str(port), (old, old))
    assert ports.free_port(rng=Sequence(port)) == port


def test_a_port_someone_listens_on_is_skipped(folder: Path) -> None:
    taken, free = _unbound_ports(2)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", taken))
        listener.listen()
        assert ports.free_port(rng=Sequence(taken, free)) == free


def test_the_ephemeral_range_is_read_from_the_kernel(tmp_path: Path) -> None:
    setting = tmp_path / "ip_local_port_range"
    setting.write_text("40000\t50000\n")
    assert ports.ephemeral_range(setting) == (40000, 50000)
    assert ports.ephemeral_range(tmp_path / "absent") == (32768, 60999)


def _choose(count: int, queue: multiprocessing.Queue) -> None:
    queue.put([ports.free_port() for _ in range(count)])


def test_processes_choosing_at_once_never_share_a_port(folder: Path) -> None:
    """Eight processes, 40 ports each, at once, from a narrow range: every port is chosen once."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    low = ports.LOWEST
    original = ports._candidates
    ports._candidates = lambda rng: range(low, low + 2000)  # inherited by the forked children
    try:
        workers = [context.Process(target=_choose, args=(40, queue)) for _ in range(8)]
        for worker in workers:
            worker.start()
        chosen = [port for _ in workers for port in queue.get(timeout=60)]
        for worker in workers:
            worker.join(10)
    finally:
        ports._candidates = original
    assert len(chosen) == 320
    assert len(set(chosen)) == 320
