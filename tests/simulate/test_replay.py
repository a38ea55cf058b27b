"""The replay, case by case, with every time worked out by hand from the rendered timings:
rule window 30m, for 5m, threshold 0.05; Alertmanager group_wait 30s, group_interval 5m,
repeat_interval 1h (a still-firing group is re-sent every 65 minutes); policy defaults: window
30m, minCoverage 0.9, minRuntime 1h, enforce, 10 releases per hour.

A pod idle from minute m (with data since m - 30 or earlier) is pending at m + 30 and fires at
m + 35; its group is flushed 30 s later (group_wait), so the on-idle step runs at m + 35.5.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpuaas.simulate.comparison import Simulator
from gpuaas.simulate.product import ProductTimings
from gpuaas.simulate.trace import read_trace
from steps.policy import IdleSettings, Policy
from tests.simulate.conftest import PRODUCT, Job, at, policy, run, trace


def replay(directory: Path, jobs: list[Job], chosen: Policy | None = None,
           product: ProductTimings = PRODUCT) -> tuple[dict[str, list[float]], object]:
    history = read_trace(trace(directory, jobs))
    simulator = Simulator(history, chosen or Policy(), product)
    result = simulator.run_policy("case", "given", chosen or Policy(), product.rule)
    names = history.workloads.name
    released: dict[str, list[float]] = {}
    for w, when in zip(result.releases.workload.tolist(), result.releases.time.tolist(), strict=True):
        released.setdefault(str(names[w]), []).append((when - at(0)) / 60.0)
    return released, result


def busy_then_idle(name: str, busy_minutes: int, minutes: int = 300, **job: object) -> Job:
    return Job(name, minutes, [run((busy_minutes, 0.8), (minutes - busy_minutes, 0.0))], **job)  # type: ignore[arg-type]


def test_released_when_the_alert_fires_and_the_step_confirms(trace_dir: Path) -> None:
    released, result = replay(trace_dir, [Job("a", 240, [run((70, 0.8), (110, 0.0), (60, 0.8))])])
    assert released == {"a": [105.5]}
    assert result.total["wrongReleases"] == 1 and result.deliveries == 1
    assert dict(result.outcomes) == {"release": 1}


def test_too_young_waits_for_alertmanagers_repeat_65_minutes_later(trace_dir: Path) -> None:
    # Fires at 35, flushed at 35.5: runtime 35.5 min < 1h. Nothing changes in the group, so the
    # next delivery is the repeat: the first flush more than 1h after 35.5 is 100.5.
    released, result = replay(trace_dir, [Job("a", 240, [run((240, 0.0))])])
    assert released == {"a": [100.5]}
    assert dict(result.outcomes) == {"too-young": 1, "release": 1}


def test_a_new_alert_in_the_namespace_resends_the_group_and_restarts_the_repeat(trace_dir: Path) -> None:
    # b fires at 55: the group (flushing at 35.5 + 5k) sends {a, b} at 55.5; both are too young,
    # and the repeat now counts from 55.5: both are released at 120.5, not a at 100.5.
    released, _ = replay(trace_dir, [Job("a", 240, [run((240, 0.0))]), busy_then_idle("b", 20, 240)])
    assert released == {"a": [120.5], "b": [120.5]}


def test_a_new_alert_after_an_hour_brings_the_release_forward(trace_dir: Path) -> None:
    # b fires at 75; the group sends {a, b} at 75.5, when a has run long enough: a goes at 75.5, not 100.5.
    released, _ = replay(trace_dir, [Job("a", 240, [run((240, 0.0))]), busy_then_idle("b", 40, 240)])
    assert released == {"a": [75.5], "b": [75.5]}


def test_a_tenant_window_longer_than_the_rule_waits_for_the_repeat(trace_dir: Path) -> None:
    # Rule 30m fires at 95 (idle since 60); the tenant's 1h window still holds the busy minutes 36-59
    # at 95.5: no-op. Next delivery 160.5, when the last hour was idle.
    chosen = Policy(tenants={"tenant-a": IdleSettings(window_seconds=3600)})
    released, result = replay(trace_dir, [busy_then_idle("a", 60)], chosen)
    assert released == {"a": [160.5]}
    assert dict(result.outcomes) == {"not-idle": 1, "release": 1}


def test_a_rule_window_from_the_shortest_policy_window_makes_the_tenant_window_exact(trace_dir: Path) -> None:
    chosen = Policy(idle=IdleSettings(window_seconds=3600))
    product = replace(PRODUCT, rule=replace(PRODUCT.rule, window_seconds=3600))
    released, _ = replay(trace_dir, [busy_then_idle("a", 60)], chosen, product)
    assert released == {"a": [125.5]}  # pending at 120, fires at 125


def test_hourly_budget_defers_the_second_release_of_the_tenant(trace_dir: Path) -> None:
    jobs = [busy_then_idle("a", 60, namespace="n1"), busy_then_idle("b", 60, namespace="n2")]
    released, result = replay(trace_dir, jobs, policy(max_releases_per_hour=1))
    assert released == {"a": [95.5], "b": [160.5]}  # b's next delivery is the repeat, 65 min later
    assert result.outcomes["hourly-budget"] == 1


def test_dry_run_plans_at_every_delivery_and_releases_nothing(trace_dir: Path) -> None:
    # Fires at 95, re-sent every 65 min while firing: 95.5, 160.5, 225.5, 290.5. The job ends at
    # 300; its alert resolves at 330 and the group is cleared silently.
    released, result = replay(trace_dir, [busy_then_idle("a", 60)], policy(mode="dry-run"))
    assert released == {}
    assert result.dry_run_plans == 4 and result.deliveries == 4


def test_exempt_is_never_released(trace_dir: Path) -> None:
    released, result = replay(trace_dir, [busy_then_idle("a", 60, exempt=True)])
    assert released == {} and set(result.outcomes) == {"exempt"}


def test_one_busy_gpu_keeps_the_workload(trace_dir: Path) -> None:
    released, result = replay(trace_dir, [Job("a", 240, [run((240, 0.0)), run((240, 0.3))])])
    assert released == {} and result.deliveries == 0


def test_an_idle_pod_alerts_but_the_step_checks_every_pod(trace_dir: Path) -> None:
    # p0 fires at 35 (too young at 35.5), then every 65 min the step sees p1 busy: not idle.
    job = Job("a", 240, [run((240, 0.0)), run((240, 0.6))], pods=["a-p0", "a-p1"])
    released, result = replay(trace_dir, [job])
    assert released == {}
    assert dict(result.outcomes) == {"too-young": 1, "not-idle": 3}  # 35.5; 100.5, 165.5, 230.5


def test_a_gap_in_the_data_lowers_coverage_and_makes_the_alert_resolve(trace_dir: Path) -> None:
    # Idle from 60, no samples 91-94. At 95.5 the step's window (65.5, 95.5] has a 5-minute hole
    # (samples at 90 and 95; tolerance 3 x 1 min): coverage 83% < 90%, no-op. From 121 the rule's
    # offset lands on the hole: resolved; the 125.5 flush clears the log and deletes the group.
    # Pending again at 125, fires at 130, a new group flushes at 130.5: released.
    samples = run((60, 0.8), (31, 0.0), (4, None), (145, 0.0))
    released, result = replay(trace_dir, [Job("a", 240, [samples])])
    assert released == {"a": [130.5]}
    assert dict(result.outcomes) == {"not-idle": 1, "release": 1}


def test_a_released_workloads_alert_lingers_and_keeps_the_group(trace_dir: Path) -> None:
    # a is released at 95.5; its samples stop, but its alert holds until 126 (the offset still
    # finds samples up to minute 95). b fires at 117 into that group, flushed on its 5-minute
    # cycle at 120.5 (a new group would have flushed at 117.5).
    released, result = replay(trace_dir, [busy_then_idle("a", 60), busy_then_idle("b", 82)])
    assert released == {"a": [95.5], "b": [120.5]}
    assert result.outcomes["released"] == 1


@pytest.mark.parametrize("mode", ["enforce", "dry-run"])
def test_mode_override(trace_dir: Path, mode: str) -> None:
    history = read_trace(trace(trace_dir, [busy_then_idle("a", 60)]))
    chosen = policy(mode="dry-run" if mode == "enforce" else "enforce")
    result = Simulator(history, chosen, PRODUCT).run_policy("x", "given", chosen, PRODUCT.rule, mode=mode)
    assert (len(result.releases.workload), result.dry_run_plans > 0) == ((1, False) if mode == "enforce" else (0, True))


def test_one_group_for_all_namespaces_when_the_route_groups_by_alertname_only(trace_dir: Path) -> None:
    # As test_a_new_alert_in_the_namespace_... but b runs in another namespace: grouped per namespace,
    # b starts its own group (a at 100.5, b at 55.5 too young, then 120.5); with one group for all, b's
    # alert joins a's group and restarts its repeat, as in the same-namespace case.
    jobs = [Job("a", 240, [run((240, 0.0))]), busy_then_idle("b", 20, 240, namespace="team-b")]
    per_namespace, _ = replay(trace_dir, jobs)
    assert per_namespace == {"a": [100.5], "b": [120.5]}
    one_group = replace(PRODUCT, notifications=replace(PRODUCT.notifications, group_by="all"))
    together, _ = replay(trace_dir.parent / "again", jobs, product=one_group)
    assert together == {"a": [120.5], "b": [120.5]}


def test_runtime_counts_from_an_admission_before_the_history(trace_dir: Path) -> None:
    # From --prometheus, a workload created before --since: minRuntime counts from its creation, so the
    # first delivery (35.5) releases it instead of finding it too young.
    history = read_trace(trace(trace_dir, [Job("a", 240, [run((240, 0.0))])]))
    history.workloads.admitted = history.workloads.start - 7200
    result = Simulator(history, Policy(), PRODUCT).run_policy("x", "given", Policy(), PRODUCT.rule)
    assert ((result.releases.time - at(0)) / 60).tolist() == [35.5]


def test_activity_exactly_at_the_threshold_is_idle_for_the_step_too(trace_dir: Path) -> None:
    released, _ = replay(trace_dir, [Job("a", 240, [run((60, 0.8), (180, 0.05))])])
    assert released == {"a": [95.5]}
