"""Tiny traces written in the documented format, minute by minute, for hand-computed answers.

    T0 = 1_700_000_400 (a whole minute); times in the cases are minutes after T0.
    trace(tmp_path, [Job("a", minutes=240, gpus=[run((70, 0.8), (110, 0.0), (60, 0.8))])])
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpuaas.simulate.alert_rule import RuleTimings
from gpuaas.simulate.alertmanager import NotificationTimings
from gpuaas.simulate.product import ProductTimings
from steps.policy import IdleSettings, Policy

T0 = 1_700_000_400
MINUTE = 60.0
PRODUCT = ProductTimings(RuleTimings(1800.0, 300.0, 0.05), NotificationTimings(30.0, 300.0, 3600.0), "test")
"""The rendered defaults: window 30m, for 5m, threshold 0.05; group_wait 30s, group_interval 5m, repeat 1h."""


def run(*pieces: tuple[int, float | None]) -> list[float | None]:
    """Minute samples: run((70, 0.8), (110, 0.0)) = 70 minutes at 0.8 then 110 at 0.0 (None = no sample)."""
    return [value for count, value in pieces for _ in range(count)]


@dataclass
class Job:
    name: str
    minutes: int
    gpus: list[list[float | None]]
    start: int = 0
    """Minutes after T0."""
    namespace: str = "team-a"
    tenant: str = "tenant-a"
    kind: str = "PyTorchJob"
    exempt: bool = False
    pods: list[str] = field(default_factory=list)
    """Pod of each GPU (default: one pod named after the job)."""
    signal: str = ""
    """The kind's own source it exposes (jupyter, ray-jobs, requests, progress; "" none)."""
    work: list[tuple[int, int]] = field(default_factory=list)
    """Minutes [from, to) (after its start) when its source showed work."""
    client: list[tuple[int, int]] = field(default_factory=list)
    """Minutes [from, to) when a client was connected (notebooks)."""
    submitted: int | None = None
    """Minutes after T0 when it was submitted (default: its start)."""


def trace(directory: Path, jobs: Sequence[Job], queue: dict | None = None) -> Path:
    """The jobs as a trace directory; `queue` (optional) is written as queue.json."""
    directory.mkdir(parents=True, exist_ok=True)
    signals = any(job.signal or job.work or job.client for job in jobs)
    with (directory / "workloads.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["workload", "namespace", "tenant", "kind", "gpus", "start", "end", "exempt",
                         *(["signal"] if signals else [])])
        for job in jobs:
            start = T0 + job.start * 60
            writer.writerow([job.name, job.namespace, job.tenant, job.kind, len(job.gpus), start,
                             start + job.minutes * 60, "true" if job.exempt else "false",
                             *([job.signal] if signals else [])])
    if signals:
        with (directory / "signals.csv").open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["workload", "flag", "start", "end"])
            for job in jobs:
                for flag, spans in (("work", job.work), ("client", job.client)):
                    for first, last in spans:
                        writer.writerow([job.name, flag, T0 + (job.start + first) * 60, T0 + (job.start + last) * 60])
    if queue is not None:
        import json

        (directory / "queue.json").write_text(json.dumps(queue))
    with_pods = any(job.pods for job in jobs)
    with (directory / "activity.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["time", "workload", "gpu", "activity", *(["pod"] if with_pods else [])])
        for job in jobs:
            for gpu, samples in enumerate(job.gpus):
                assert len(samples) <= job.minutes, f"{job.name} gpu {gpu}: more samples than minutes"
                for minute, value in enumerate(samples):
                    if value is None:
                        continue
                    row = [T0 + (job.start + minute) * 60, job.name, gpu, value]
                    if with_pods:
                        row.append(job.pods[gpu] if job.pods else job.name)
                    writer.writerow(row)
    return directory


def policy(**idle: object) -> Policy:
    """The default policy with some idle settings changed (IdleSettings field names)."""
    return Policy(idle=IdleSettings(**idle))  # type: ignore[arg-type]


def at(minutes: float) -> float:
    return T0 + minutes * 60.0


@pytest.fixture
def trace_dir(tmp_path: Path) -> Path:
    return tmp_path / "trace"
