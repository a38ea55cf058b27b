"""The real-stack tier as several pytest processes side by side, one per shard (`make test-real`).

Why: the tier's time is mostly waiting (controllers, KEDA cooldowns, reactions through real Argo),
and its tests need stacks that take minutes to start: the Argo cluster (`argo_cluster`: control
plane, real node, Argo, Argo Events), the plain control plane (`real_cluster`) and a minimal
control plane with a real node (`real_node`, `control_plane`). One after the other, the tier took
42 minutes. Each shard is one pytest process with its own stack, in its own state dir, so the
tier's wall time is its longest shard's (plus the CPU they share).

A test's shard is decided from what it uses, so a new test lands in one without editing a list:

- the marker `real_shard("NAME")` when it has one: a module that would make its stack's shard the
  longest takes a stack of its own (`pytestmark = pytest.mark.real_shard("argo-demo")`);
- else the stack it asks for, directly or through other fixtures (pytest's fixture closure):
  `argo` (argo_cluster), `cluster` (real_cluster), `node` (real_node or control_plane), else `other`
  (tests that start stacks of their own, such as each monitoring profile's cluster, or need none).

Why processes rather than pytest-xdist: a shard is exactly the tests that share one session-scoped
stack, and a stack costs 3-5 GiB. xdist's `loadgroup` keeps a group on one worker, but a worker
that is given two groups starts both stacks and keeps them to its end, and its output is not one
line per test with the shard's name. A process per shard starts exactly one stack of each kind it
needs, and its lines are prefixed with the shard.

    python -m tests.support.real_shards [PYTEST_ARGS...]      # what `make test-real` runs
    python -m tests.support.real_shards --list                # the plan: shard -> tests

A shard marked `real_shard("NAME", after=("node", "other"))` starts only when those shards have ended
(those of them the selection has), and `real_shard("NAME", after_others=True)` when every other shard has.
Why: the fault module (tests/realstack/test_catchup_faults.py) drives bursts through a stack of its own;
with bursts of 150 Workloads beside five other shards on two cores the load reached 100 and other
shards' tests failed from it (CI run of `next`). Its short bursts (GPUAAS_FAULT_BURST=short) start when
the two shortest shards have ended, so a tier with them is not the sum of both; its full bursts start
after every other shard. The module is marked `fault_tier`, which `make test-real` still deselects
(`-m "not fault_tier"`): `make test-faults` runs it alone (docs/real-stack.md).

Each line a shard prints is printed whole, prefixed `[real:SHARD]`; the runner ends with one line
per shard (exit status, its pytest summary, wall seconds) and exits non-zero when any shard failed.
`GPUAAS_REAL_CLUSTER` / `GPUAAS_REAL_ARGO_CLUSTER` (a running cluster to reuse) put every shard that
would start that kind of stack into one process: they would otherwise share one cluster.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

SHARD_ENV = "GPUAAS_REAL_SHARD"
"""Set by the runner in each shard's process: tests/realstack/conftest.py deselects the other shards' tests."""
PLAN_ENV = "GPUAAS_REAL_SHARD_PLAN"
"""Set by the runner for its collection pass: the conftest writes {nodeid: shard} there."""
MARKER = "real_shard"
STACKS = (("argo", ("argo_cluster",)), ("cluster", ("real_cluster",)), ("node", ("real_node", "control_plane")))
"""Shard by stack, in order of precedence: the first whose fixtures a test uses."""
NO_STACK = "other"
REUSE = {"argo_cluster": "GPUAAS_REAL_ARGO_CLUSTER", "real_cluster": "GPUAAS_REAL_CLUSTER"}
CHECKOUT = Path(__file__).resolve().parents[2]
TIER = "tests/realstack"


def selection(pytest_args: list[str]) -> list[str]:
    """The arguments each pytest run gets: the tier's folder unless the arguments name tests of it (a module,
    `module::test`), which then replace it (else pytest would collect the folder and those tests both). A
    path outside the tier is refused: every shard would run it."""
    paths = [a for a in pytest_args if not a.startswith("-") and (CHECKOUT / a.split("::")[0]).exists()]
    outside = [a for a in paths if not (CHECKOUT / a.split("::")[0]).resolve().is_relative_to(CHECKOUT / TIER)]
    if outside:
        raise SystemExit(f"expected tests under {TIER}, found {' '.join(outside)}: run other tests with pytest")
    return pytest_args if paths else [TIER, *pytest_args]


def _interrupted(_number: int, _frame: object) -> None:
    raise KeyboardInterrupt


def stop_on_sigterm() -> None:
    """In a shard (or any pytest process of the tier): SIGTERM stops it as Ctrl-C does. pytest handles only
    SIGINT (KeyboardInterrupt, after which the session fixtures' teardown stops their clusters); a SIGTERM
    (a CI timeout, `kill`) would end the process at once and leave every cluster it started running: etcd,
    the API server and the node run in sessions of their own and outlive it."""
    signal.signal(signal.SIGTERM, _interrupted)


def shard_of(marker_args: Iterable[str] | None, fixtures: Iterable[str]) -> str:
    """The shard of one test: its `real_shard` marker's name, else the first stack it uses."""
    if marker_args:
        name = next(iter(marker_args))
        if not isinstance(name, str) or not name or any(c.isspace() for c in name):
            raise ValueError(f"expected pytest.mark.{MARKER}(NAME) with a one-word name, found {name!r}")
        return name
    used = set(fixtures)
    for shard, names in STACKS:
        if used.intersection(names):
            return shard
    return NO_STACK


def waits_for(marker_kwargs: dict | None) -> tuple[str, ...]:
    """The shards a test's `real_shard` marker says its shard starts after (`after=("node", "other")`)."""
    value = (marker_kwargs or {}).get("after", ())
    if isinstance(value, str) or not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"expected pytest.mark.{MARKER}(NAME, after=(SHARD, ...)), a tuple of shard names, "
                        f"found after={value!r}")
    return tuple(value)


def runs_after_others(marker_kwargs: dict | None) -> bool:
    """Whether a test's `real_shard` marker says its shard starts when the other shards have ended."""
    value = (marker_kwargs or {}).get("after_others", False)
    if not isinstance(value, bool):
        raise TypeError(f"expected pytest.mark.{MARKER}(NAME, after_others=True|False), "
                         f"found after_others={value!r}")
    return value


def stacks_used(fixtures: Iterable[str]) -> list[str]:
    """The session-scoped stack fixtures among a test's fixtures."""
    used = set(fixtures)
    return [name for _, names in STACKS for name in names if name in used]


@dataclass
class Shard:
    name: str
    tests: list[str] = field(default_factory=list)
    stacks: set[str] = field(default_factory=set)
    process: subprocess.Popen | None = None
    after_others: bool = False
    """Starts when every other shard has ended (module docstring)."""
    after: tuple[str, ...] = ()
    """Starts when these shards have ended (those the plan has)."""
    started: float = 0.0
    seconds: float = 0.0
    summary: str = ""


def plan(pytest_args: list[str]) -> dict[str, Shard]:
    """Collect the tier once (same arguments as the shards get) and group the selected tests by shard."""
    with tempfile.TemporaryDirectory(prefix="gpuaas-real-shards-") as folder:
        out = Path(folder) / "plan.json"
        done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                               *selection(pytest_args)], cwd=CHECKOUT, env={**os.environ, PLAN_ENV: str(out)},
                              capture_output=True, text=True, check=False)
        if done.returncode not in (0, 5) or not out.exists():
            raise SystemExit(f"expected `pytest --collect-only {TIER}` to list the real tier, it exited with "
                             f"{done.returncode}:\n{(done.stdout + done.stderr).strip()[-3000:]}")
        collected = json.loads(out.read_text())
    shards: dict[str, Shard] = {}
    for nodeid, entry in collected.items():
        shard = shards.setdefault(entry["shard"], Shard(entry["shard"]))
        shard.tests.append(nodeid)
        shard.stacks.update(entry["stacks"])
        shard.after_others = shard.after_others or bool(entry.get("after_others"))
        shard.after = tuple(sorted(set(shard.after) | set(entry.get("after") or ())))
    return _merge_reused(shards)


def _merge_reused(shards: dict[str, Shard]) -> dict[str, Shard]:
    """With a running cluster to reuse, every shard that would start that stack runs in one process."""
    for fixture, env in REUSE.items():
        if not os.environ.get(env):
            continue
        users = [s for s in shards.values() if fixture in s.stacks]
        if len(users) < 2:
            continue
        merged = Shard("+".join(s.name for s in users), after_others=any(s.after_others for s in users),
                       after=tuple(sorted({a for s in users for a in s.after} - {s.name for s in users})))
        for shard in users:
            merged.tests += shard.tests
            merged.stacks |= shard.stacks
            del shards[shard.name]
        shards[merged.name] = merged
        for other in shards.values():  # a wait for a merged shard is a wait for the merged one
            other.after = tuple(sorted({merged.name if a in {s.name for s in users} else a for a in other.after}
                                       - {other.name}))
    return shards


_print_lock = threading.Lock()


def _say(line: str) -> None:
    with _print_lock:
        sys.stdout.write(line if line.endswith("\n") else line + "\n")
        sys.stdout.flush()


def _relay(shard: Shard, prefix: str) -> None:
    """Copy a shard's output line by line, each whole, prefixed; keep its last pytest summary line."""
    assert shard.process is not None and shard.process.stdout is not None
    for raw in shard.process.stdout:
        line = raw.decode(errors="replace").rstrip("\n")
        stripped = line.strip("= ")
        if stripped and (" passed" in stripped or " failed" in stripped or " error" in stripped
                         or "no tests ran" in stripped) and " in " in stripped and line.startswith("="):
            shard.summary = stripped
        _say(f"{prefix}{line}")
    shard.process.wait()
    shard.seconds = time.monotonic() - shard.started  # its own end (run() waits for the shards in turn)


def interrupt(shards: Iterable[Shard]) -> None:
    """SIGTERM or SIGHUP to the runner alone stops every shard as Ctrl-C does: SIGINT, which pytest turns
    into KeyboardInterrupt and so runs the fixtures' teardown (each shard's clusters stopped); a SIGTERM
    would end a shard at once and leave its clusters running."""
    for shard in shards:
        if shard.process and shard.process.poll() is None:
            shard.process.send_signal(signal.SIGINT)


def run(pytest_args: list[str]) -> int:
    shards = plan(pytest_args)
    if not shards:
        _say("[real] no real-stack tests selected")
        return 5
    return run_shards(shards, lambda shard: [sys.executable, "-m", "pytest", "-v", *selection(pytest_args)])


def _prerequisites(shards: dict[str, Shard]) -> dict[str, set[str]]:
    """Each shard's shards to wait for: for `after_others`, every shard not itself `after_others`; else its `after`,
    those of them the plan has (a selection of the fault module alone starts it at once; a line says so). A cycle
    of waits is refused: nothing would ever start."""
    needs: dict[str, set[str]] = {}
    for name, shard in shards.items():
        if shard.after_others:
            needs[name] = {n for n, s in shards.items() if not s.after_others}
            continue
        needs[name] = {a for a in shard.after if a in shards and a != name}
        if absent := sorted(set(shard.after) - set(shards)):
            _say(f"[real] shard {name} waits for {', '.join(absent)}, which this selection does not have: "
                 "it does not wait for them")
    done: set[str] = set()
    while len(done) < len(needs):
        ready = {n for n, need in needs.items() if n not in done and need <= done}
        if not ready:
            stuck = sorted(set(needs) - done)
            raise SystemExit("expected the real_shard waits (after=, after_others=) to form no cycle, found one among "
                             + ", ".join(f"{n} after {', '.join(sorted(needs[n]))}" for n in stuck))
        done |= ready
    return needs


def run_shards(shards: dict[str, Shard], command: Callable[[Shard], list[str]]) -> int:
    """Start the shards side by side (each that waits for others when those have ended), relay their output,
    wait for them; one line per shard at the end. `command(shard)`: the process a shard runs."""
    width = max(len(name) for name in shards)
    needs = _prerequisites(shards)
    waiting = [f"{name} after {', '.join(sorted(need))}" for name, need in needs.items() if need]
    _say("[real] " + ", ".join(f"{s.name}: {len(s.tests)} tests" for s in shards.values())
         + f" ({sum(1 for n in needs.values() if not n)} side by side"
         + (f"; {'; '.join(waiting)} have ended)" if waiting else ")"))
    relays: list[threading.Thread] = []
    stopping = threading.Event()

    def stop(_number: int, _frame: object) -> None:
        stopping.set()
        interrupt(shards.values())

    previous = {number: signal.signal(number, stop) for number in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return _run_scheduled(shards, command, width, needs, stopping, relays)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _run_scheduled(shards: dict[str, Shard], command: Callable[[Shard], list[str]], width: int,
                   needs: dict[str, set[str]], stopping: threading.Event, relays: list[threading.Thread]) -> int:
    def start(shard: Shard) -> None:
        # the pytest summary of a shard names its shard (a log read later shows whose 30 slowest these are)
        shard.started = time.monotonic()
        shard.process = subprocess.Popen(command(shard), cwd=CHECKOUT, env={**os.environ, SHARD_ENV: shard.name},
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        relay = threading.Thread(target=_relay, args=(shard, f"[real:{shard.name}]".ljust(width + 8)), daemon=True)
        relay.start()
        relays.append(relay)

    def ended(name: str) -> bool:
        process = shards[name].process
        return process is not None and process.poll() is not None

    pending = dict(needs)
    while True:
        try:
            if not stopping.is_set():
                for name in [n for n, need in pending.items() if all(ended(x) for x in need)]:
                    start(shards[name])
                    del pending[name]
            running = [s for s in shards.values() if s.process is not None and s.process.poll() is None]
            if not running and (not pending or stopping.is_set()):
                break
            time.sleep(0.2)
        except KeyboardInterrupt:  # Ctrl-C reaches the shards too (one process group): wait for their teardown
            stopping.set()
    for relay in relays:
        relay.join(timeout=10)
    for shard in shards.values():
        if shard.process is not None:
            shard.seconds = shard.seconds or time.monotonic() - shard.started  # a relay that had not ended
    failed = [s for s in shards.values() if s.process is None or s.process.returncode != 0]
    for shard in sorted(shards.values(), key=lambda s: -s.seconds):
        status = f"exit {shard.process.returncode}" if shard.process is not None else "not started (interrupted)"
        _say(f"[real] shard {shard.name}: {status}, {shard.summary or 'no summary'}; {shard.seconds:.0f}s wall")
    if failed:
        _say(f"[real] {len(failed)} of {len(shards)} shards failed: {', '.join(s.name for s in failed)}")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--list"]:
        for shard in plan(args[1:]).values():
            print(f"{shard.name} ({', '.join(sorted(shard.stacks)) or 'no stack'}): {len(shard.tests)} tests"
                  + (" (after the others)" if shard.after_others else "")
                  + (f" (after {', '.join(shard.after)})" if shard.after else ""))
            for test in shard.tests:
                print(f"  {test}")
        return 0
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
