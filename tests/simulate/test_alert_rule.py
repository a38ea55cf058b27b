"""The replay's model of GPUWorkloadIdle against the real rule, evaluated by `promtool test rules`.

For each tiny trace, the model says at which minutes each pod's alert is firing; promtool gets the
same samples as DCGM series (a missing sample is a staleness marker, as a failed or empty scrape
writes one; a pod that ends gets one too) and the product's rule file with the production 30m
window and 5m `for`, and must agree at every minute, firing or not. Also: the alert after a release.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.monitoring import availability, promtool_test_rules
from gpuaas.manifests import observability as obs
from gpuaas.simulate.alert_rule import PodAlerts, RuleTimings
from gpuaas.simulate.trace import read_trace
from tests.simulate.conftest import T0, Job, run, trace

RULE = RuleTimings(1800.0, 300.0, 0.05)

CASES: list[tuple[str, list[Job], int]] = [
    ("pause-between-busy", [Job("a", 240, [run((70, 0.8), (110, 0.0), (60, 0.8))])], 280),
    ("idle-from-the-start-and-after-the-end", [Job("a", 90, [run((90, 0.0))])], 140),
    ("younger-pod-starts-later", [Job("a", 60, [run((60, 0.0))], start=20)], 130),
    ("gap-resolves-through-the-offset", [Job("a", 200, [run((60, 0.8), (31, 0.0), (4, None), (105, 0.0))])], 240),
    ("two-gpus-one-busy-for-a-while", [Job("a", 150, [run((150, 0.0)), run((50, 0.3), (100, 0.02))])], 190),
    ("two-pods-only-one-idle", [Job("a", 120, [run((120, 0.0)), run((120, 0.9))], pods=["a-0", "a-1"])], 160),
]


def model_firing(history: Any, alerts: PodAlerts, horizon: int) -> dict[str, set[int]]:
    """Pod name -> the minutes (after T0) at which the model says its alert is firing."""
    episodes = alerts.episodes()
    out: dict[str, set[int]] = {str(name): set() for name in history.pods.name}
    for pod, fire, resolve in zip(episodes.pod.tolist(), episodes.fire.tolist(), episodes.resolve.tolist(), strict=True):
        first = int(history.first[history.pods.workload[pod]]) + round((history.t0 - T0) / 60)
        out[str(history.pods.name[pod])].update(m for m in range(first + fire, first + resolve) if m < horizon)
    return out


def series_values(samples: list[float | None], start: int) -> str:
    """promtool notation from minute 0: nothing before the pod, `stale` for a missing sample and at the end."""
    cells = ["_"] * start + ["stale" if v is None else repr(v) for v in samples] + ["stale"]
    return " ".join(cells)


def promtool_case(jobs: list[Job], firing: dict[str, set[int]], horizon: int) -> dict[str, Any]:
    series = []
    for job in jobs:
        for gpu, samples in enumerate(job.gpus):
            pod = job.pods[gpu] if job.pods else job.name
            labels = (f'namespace="{job.namespace}",pod="{pod}",gpu="{gpu}",UUID="GPU-{job.name}-{gpu}",'
                      f'Hostname="node-a"')
            series.append({"series": f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}}",
                           "values": series_values(samples, job.start)})
    namespace = {(job.pods[g] if job.pods else job.name): job.namespace for job in jobs for g in range(len(job.gpus))}
    checks = []
    for minute in range(horizon):
        expected = [{"exp_labels": {"namespace": "gpuaas", obs.WORKLOAD_NAMESPACE_LABEL: namespace[pod], "pod": pod,
                                    "severity": "warning", "gpuaas_reaction": "on-idle"}}
                    for pod in sorted(firing) if minute in firing[pod]]
        checks.append({"eval_time": f"{minute}m", "alertname": obs.ALERT_NAME, "exp_alerts": expected})
    return {"interval": "1m", "input_series": series, "alert_rule_test": checks}


def _strip_annotations(rule_groups: dict[str, Any]) -> dict[str, Any]:
    """The product's rules without annotations (promtool then compares labels only)."""
    for group in rule_groups["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    return rule_groups


def _promtool_agrees(jobs: list[Job], firing: dict[str, set[int]], horizon: int) -> None:
    found = availability()
    assert found.promtool, f"promtool is needed (make setup installs it): {found.reason}"
    rules = _strip_annotations(obs.rule_groups("30m", "5m", 0.05))
    result = promtool_test_rules(rules, {"evaluation_interval": "1m",
                                         "tests": [promtool_case(jobs, firing, horizon)]})
    assert result.returncode == 0, f"promtool disagrees with the model:\n{result.stdout[-3000:]}\n{result.stderr}"


@pytest.mark.parametrize(("jobs", "horizon"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_model_matches_the_real_rule_minute_by_minute(tmp_path: Path, jobs: list[Job], horizon: int) -> None:
    history = read_trace(trace(tmp_path / "t", jobs))
    firing = model_firing(history, PodAlerts(history, RULE), horizon)
    assert any(firing.values()) or jobs[0].name == "never", "each case must fire at least once"
    _promtool_agrees(jobs, firing, horizon)


def test_a_wrong_model_is_caught(tmp_path: Path) -> None:
    """The comparison can fail: shifting the model's firing by one minute must be reported."""
    jobs = CASES[0][1]
    history = read_trace(trace(tmp_path / "t", jobs))
    firing = model_firing(history, PodAlerts(history, RULE), 280)
    shifted = {pod: {m + 1 for m in minutes} for pod, minutes in firing.items()}
    with pytest.raises(AssertionError, match="promtool disagrees"):
        _promtool_agrees(jobs, shifted, 280)


def test_after_a_release_the_alert_holds_until_the_offset_passes_the_last_sample(tmp_path: Path) -> None:
    # Idle from 60, firing from 95; released at 95.5 (samples stop from minute 96). The range keeps
    # idle samples and the offset finds minute k-30 <= 95 until k = 125: resolves at 126.
    history = read_trace(trace(tmp_path / "t", [Job("a", 300, [run((60, 0.8), (240, 0.0))])]))
    alerts = PodAlerts(history, RULE)
    assert alerts.after_release(0, 96, firing=True) == [(None, 126)]
    # A busy minute that would have come at 110 no longer ends the alert once released.
    history = read_trace(trace(tmp_path / "u", [Job("a", 300, [run((60, 0.8), (50, 0.0), (190, 0.9))])]))
    alerts = PodAlerts(history, RULE)
    natural = alerts.episodes()
    assert natural.resolve.tolist() == [110]
    assert alerts.after_release(0, 96, firing=True) == [(None, 126)]


def test_a_pending_alert_still_fires_after_its_workload_is_released(tmp_path: Path) -> None:
    # Pod 1 of a two-pod workload went idle later (pending from 100): released at 101 by pod 0's
    # alert, it keeps holding and fires at 105, then resolves at 131.
    job = Job("a", 300, [run((60, 0.8), (240, 0.0)), run((70, 0.8), (230, 0.0))], pods=["a-0", "a-1"])
    history = read_trace(trace(tmp_path / "t", [job]))
    alerts = PodAlerts(history, RULE)
    assert alerts.after_release(1, 101, firing=False) == [(105, 131)]
    assert np.array_equal(alerts.holds(1, 99, 102), np.array([False, True, True]))
