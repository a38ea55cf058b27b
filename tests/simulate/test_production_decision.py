"""The replay decides with the production code, and the production code stays light.

- the replay calls `steps.reactions.on_idle.judge` and `steps.gateways.metrics.first_idleness_failure`
  (the same objects, not copies);
- `idleness_failures` gives the same judgement on numpy arrays as the gateway's `why_not_idle`;
- what the replay says the step would read (coverage, data, highest activity) is what the
  gateway's own coverage arithmetic gives for the same samples;
- importing the steps a pod runs does not import numpy (the step image stays light).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpuaas.simulate import replay
from gpuaas.simulate.step_window import StepWindow
from gpuaas.simulate.trace import read_trace
from steps.gateways import metrics
from steps.gateways.metrics import ENGINE_ACTIVE, GpuActivity, GpuObservation, idleness_failures
from steps.reactions import on_idle
from tests.simulate.conftest import Job, at, trace


def test_the_replay_calls_the_production_judgement() -> None:
    assert replay.judge is on_idle.judge
    assert replay.first_idleness_failure is metrics.first_idleness_failure


def activity(maxima: list[float], coverage: float) -> GpuActivity:
    gpus = tuple(GpuObservation(uuid=f"G{i}", hostname="n", gpu=str(i), namespace="ns", pod="p", metric=ENGINE_ACTIVE,
                                label_spelling="plain", max_activity=m, samples=30, first_seen=0, last_seen=1)
                 for i, m in enumerate(maxima))
    return GpuActivity(namespace="ns", pods=("p",), window_seconds=1800, evaluated_at=0, gpus=gpus, coverage=coverage)


def test_array_judgement_equals_the_gateways_sentence_by_sentence() -> None:
    cases = list(itertools.product([[], [0.0], [0.0, 0.05], [0.0, 0.06], [0.9]], [0.5, 0.89, 0.9, 1.0]))
    observations = np.array([len(m) for m, _ in cases])
    coverage = np.array([c for _, c in cases])
    highest = np.array([max(m) if m else np.nan for m, _ in cases])
    no_data, short, busy = idleness_failures(observations, coverage, highest, 0.05, 0.9)
    confirmed = ~(no_data | short | busy)
    for index, (maxima, cover) in enumerate(cases):
        assert bool(confirmed[index]) == activity(maxima, cover).idle_confirmed(0.05, 0.9), (maxima, cover)


@pytest.mark.parametrize("seed", range(6))
def test_window_reading_equals_the_gateways_coverage(tmp_path: Path, seed: int) -> None:
    """Random gaps; at random moments the replay's reading equals metrics._coverage over the same samples."""
    rng = np.random.default_rng(seed)
    samples: list[float | None] = [None if rng.random() < 0.15 else float(rng.choice([0.0, 0.02, 0.5]))
                                   for _ in range(240)]
    history = read_trace(trace(tmp_path / "t", [Job("a", 240, [samples])]))
    window = StepWindow(history)
    present = [i for i, v in enumerate(samples) if v is not None]
    for _ in range(40):
        now = at(float(rng.uniform(5, 239)))
        length = float(rng.choice([300.0, 600.0, 1800.0, 3600.0]))
        reading = window.read(0, now, length)
        inside = [i for i in present if now - length < at(i) <= now]
        expected, _ = metrics._coverage([at(i) for i in inside], now - length, now, 180.0)
        assert reading.observations == len(inside)
        if inside:
            assert reading.coverage == pytest.approx(expected, abs=1e-9)
            assert reading.max_activity == pytest.approx(max(samples[i] for i in inside))  # type: ignore[type-var]


def test_step_import_path_stays_free_of_numpy() -> None:
    code = ("import sys, steps.entrypoint, steps.reactions.on_idle, steps.reactions.idle_alerts, "
            "steps.gateways.metrics, steps.policy; print(json.dumps(sorted(m for m in ('numpy', 'pandas', 'pyarrow', "
            "'gpuaas') if m in sys.modules)))")
    result = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True,
                            check=True, cwd=Path(__file__).resolve().parents[2])
    assert json.loads(result.stdout) == []


@pytest.mark.parametrize("seed", range(6))
def test_every_gpu_needs_its_own_samples_as_in_the_gateway(tmp_path: Path, seed: int) -> None:
    """GPUs that drop out on their own (one GPU's exporter series gone, the other idle): the replay's
    verdict is the gateway's, which judges coverage per GPU and wants evidence for every GPU held
    (`GpuActivity.why_not_idle` with `expected` and `held`, as the on-idle step calls it)."""
    rng = np.random.default_rng(100 + seed)
    gpus = []
    for _ in range(2):
        column: list[float | None] = []
        while len(column) < 240:
            gone = rng.random() < 0.2
            column += [None if gone else float(rng.choice([0.0, 0.0, 0.0, 0.02, 0.5]))] * int(rng.integers(1, 40))
        gpus.append(column[:240])
    history = read_trace(trace(tmp_path / "t", [Job("a", 240, gpus)]))
    window = StepWindow(history)
    agreed = idle_seen = 0
    for _ in range(60):
        now = at(float(rng.integers(31, 239)))
        length = float(rng.choice([600.0, 1800.0]))
        observations = []
        for index, column in enumerate(gpus):
            inside = [i for i, v in enumerate(column) if v is not None and now - length < at(i) <= now]
            if not inside:
                continue
            covered, _ = metrics._coverage([at(i) for i in inside], now - length, now, 180.0)
            observations.append(GpuObservation(
                uuid=f"G{index}", hostname="n", gpu=str(index), namespace="team-a", pod="a", metric=ENGINE_ACTIVE,
                label_spelling="plain", max_activity=max(column[i] for i in inside),  # type: ignore[type-var]
                samples=len(inside), first_seen=at(inside[0]), last_seen=at(inside[-1]), coverage=covered))
        production = GpuActivity(namespace="team-a", pods=("a",), window_seconds=length, evaluated_at=now,
                                 gpus=tuple(observations),
                                 coverage=min((o.coverage or 0.0 for o in observations), default=0.0))
        step_idle = production.why_not_idle(0.05, 0.9, expected={"a": 2}, held=2) is None
        reading = window.read(0, now, length)
        replay_idle = metrics.first_idleness_failure(reading.observations, reading.coverage, reading.max_activity,
                                                     0.05, 0.9) is None
        assert replay_idle == step_idle, (now, length)
        agreed += 1
        idle_seen += step_idle
    assert agreed == 60 and 0 < idle_seen < 60, idle_seen
