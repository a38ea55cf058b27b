"""The simulator and the on-idle step agree on each kind's evidence, and on the decision, for the same inputs.

One timeline per kind (minutes after the workload's start: when its own source showed work, when a
client was connected) is given to both sides:

- the simulator reads it from a trace's signals.csv (gpuaas.simulate.signal_window.SignalWindow);
- the step reads it the way it reads a cluster (steps.reactions.on_idle.read_evidence) from:
  - **requests, progress**: a real Prometheus (Debian 2.42) backfilled with the counters and gauges
    a vLLM server and a training job would have exported (vllm:request_success_total,
    vllm:num_requests_running, a steps counter), queried by MetricsGateway over real sockets;
  - **jupyter, ray-jobs**: stand-ins on a real socket (stdlib HTTP) answering `/api/kernels`,
    `/api/status` and `/api/jobs/` in jupyter_server's and Ray's job API's shapes (the field names
    the Kubeflow culler and KubeRay's dashboard client read), from the timeline at the asked time.
    Named as stand-ins: no Jupyter server or Ray head runs here.

At many moments each side's Evidence goes through `judge` with otherwise equal facts: same `done`,
same verdict and gate. Moments where the window's first minute holds a change of the timeline are
left out for the Prometheus sources: the replay reads on the one-minute grid, Prometheus' increase()
sees a change only between two samples inside the range (docs/simulate.md: times within one step).
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpuaas.simulate.signal_window import SignalWindow
from gpuaas.simulate.trace import read_trace
from steps.gateways.metrics import MetricsGateway
from steps.gateways.workload_apis import WorkloadApis
from steps.model.owners import OwnerChain
from steps.policy import IdleSettings
from steps.reactions.on_idle import IdleFacts, judge, read_evidence
from tests.simulate.conftest import T0, Job, run, trace
from tests.simulate.test_prometheus_input import serving

WINDOW = 3600.0
MINUTES = 400


def minutes(spans: list[tuple[int, int]]) -> set[int]:
    return {m for first, last in spans for m in range(first, last)}


WORK = [(0, 30), (95, 110), (200, 205), (260, 262)]
CLIENT = [(0, 120), (180, 230)]


def job(kind: str, signal: str) -> Job:
    return Job("w", MINUTES, [run((MINUTES, 0.0))], kind=kind, signal=signal, work=WORK,
               client=CLIENT if kind == "Notebook" else [], namespace="team-a")


class Context:
    """What read_evidence asks of a StepContext."""

    def __init__(self, metrics: Any = None) -> None:
        self.metrics = metrics
        self.workload_apis = WorkloadApis(timeout_seconds=5)


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


@contextmanager
def stand_in(answer: Any) -> Iterator[tuple[str, dict[str, float]]]:
    """A real HTTP server on loopback answering `answer(path, now)` as JSON; the test sets clock["now"]."""
    clock = {"now": 0.0}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(answer(self.path, clock["now"])).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", clock
    finally:
        server.shutdown()
        server.server_close()


def minute_of(now: float) -> int:
    return int((now - T0) // 60)


def last_work_end(now: float) -> float | None:
    """End of the last minute with work at or before the minute holding `now`."""
    done = [m for m in minutes(WORK) if m <= minute_of(now)]
    return T0 + (max(done) + 1) * 60 if done else None


def jupyter_answer(path: str, now: float) -> Any:
    """What jupyter_server answers (kernel_model; APIStatusHandler) for the timeline at `now`."""
    busy = minute_of(now) in minutes(WORK)
    last = last_work_end(now) or T0
    connections = 1 if minute_of(now) in minutes(CLIENT) else 0
    if path.startswith("/api/kernels"):
        assert "no_track_activity=1" in path  # our own read must not count as activity
        return [{"id": "6f1e", "name": "python3", "last_activity": iso(last),
                 "execution_state": "busy" if busy else "idle", "connections": connections}]
    return {"started": iso(T0), "last_activity": iso(last), "kernels": 1, "connections": connections}


def ray_answer(path: str, now: float) -> Any:
    """What Ray's job API answers (`GET /api/jobs/`, KubeRay's RayJobInfo fields) for the timeline at `now`."""
    assert path == "/api/jobs/"
    if minute_of(now) in minutes(WORK):
        return [{"job_id": "02000000", "submission_id": "raysubmit_1", "status": "RUNNING", "start_time": 1}]
    end = last_work_end(now)
    return [] if end is None else [{"job_id": "02000000", "submission_id": "raysubmit_1", "status": "SUCCEEDED",
                                    "start_time": 1, "end_time": int(end * 1000)}]


def moments(step: int = 7) -> list[float]:
    return [T0 + (m + 0.5) * 60 for m in range(61, MINUTES - 1, step)]


def agree(sim_evidence: Any, step_evidence: Any, settings: IdleSettings, kind: str) -> None:
    assert step_evidence.done == sim_evidence.done, (step_evidence, sim_evidence)
    facts = IdleFacts(target="team-a/w", runtime_seconds=7200, pods=1, idle_summary="idle", tenant="t", gpus=1,
                      kind=kind)
    ours, theirs = judge(replace(facts, evidence=sim_evidence), settings), judge(replace(facts, evidence=step_evidence),
                                                                                 settings)
    assert (ours.verdict, ours.gate) == (theirs.verdict, theirs.gate)


@pytest.mark.parametrize(("kind", "owner_kind", "source", "answer"), [
    ("notebook", "Notebook", "jupyter", jupyter_answer), ("ray", "RayCluster", "ray-jobs", ray_answer)])
def test_the_kinds_apis_give_the_simulators_evidence(tmp_path: Path, kind: str, owner_kind: str, source: str,
                                                     answer: Any) -> None:
    history = read_trace(trace(tmp_path / "t", [job(owner_kind, source)]))
    window = SignalWindow(history)
    outcomes = set()
    with stand_in(answer) as (url, clock):
        settings = IdleSettings(window_seconds=WINDOW, kind=kind, signal_url=url)
        owner = {"kind": owner_kind, "metadata": {"name": "w", "namespace": "team-a"}}
        for now in moments():
            clock["now"] = now
            ours = window.evidence(0, kind, settings, now)
            theirs = read_evidence(Context(), kind, settings, OwnerChain(objects=(owner,)), "team-a", ("w-0",),
                                   datetime.fromtimestamp(now, UTC))
            agree(ours, theirs, settings, kind)
            outcomes.add(ours.done)
    assert outcomes == {True, False}  # both answers were exercised


def openmetrics(counter: str, gauge: str | None, pod: str) -> str:
    """The counter (+3 per minute with work, the sample at a minute's start counting that minute) and the
    gauge (2 while working), one sample a minute, as the server's pods export them."""
    families: dict[str, list[str]] = defaultdict(list)
    labels = f'{{namespace="team-a",pod="{pod}"}}'
    total = 0
    for m in range(MINUTES):
        total += 3 if m in minutes(WORK) else 0
        families[counter].append(f"{counter}{labels} {total} {T0 + m * 60}")
        if gauge:
            families[gauge].append(f"{gauge}{labels} {2 if m in minutes(WORK) else 0} {T0 + m * 60}")
    lines = []
    for family, samples in sorted(families.items()):
        lines += [f"# TYPE {family} gauge", *samples]
    lines.append(f'kube_pod_owner{{namespace="team-a",pod="{pod}"}} 1 {T0}')
    return "\n".join(lines) + "\n# EOF\n"


def clear_of_edges(now: float) -> bool:
    """The window's first minute holds no change of the work timeline (module docstring)."""
    first = minute_of(now - WINDOW)
    work = minutes(WORK)
    return all((m in work) == (first in work) for m in (first - 1, first, first + 1))


@pytest.mark.parametrize(("kind", "source", "counter", "gauge"), [
    ("serving", "requests", "vllm:request_success_total", "vllm:num_requests_running"),
    ("training", "progress", "train_steps_total", None)])
def test_prometheus_gives_the_simulators_evidence(tmp_path: Path, kind: str, source: str, counter: str,
                                                  gauge: str | None) -> None:
    owner_kind = "Deployment" if kind == "serving" else "PyTorchJob"
    history = read_trace(trace(tmp_path / "t", [job(owner_kind, source)]))
    window = SignalWindow(history)
    settings = IdleSettings(window_seconds=WINDOW, kind=kind, progress_metric=counter if kind == "training" else "")
    checked, outcomes = 0, set()
    (tmp_path / "prometheus").mkdir()
    with serving(tmp_path / "prometheus", openmetrics(counter, gauge, "w-0")) as prometheus:
        context = Context(MetricsGateway(prometheus.url))
        for now in moments(step=5):
            if not clear_of_edges(now):
                continue
            ours = window.evidence(0, kind, settings, now)
            theirs = read_evidence(context, kind, settings, OwnerChain(), "team-a", ("w-0",),
                                   datetime.fromtimestamp(now, UTC))
            agree(ours, theirs, settings, kind)
            checked += 1
            outcomes.add(ours.done)
    assert checked >= 40 and outcomes == {True, False}
