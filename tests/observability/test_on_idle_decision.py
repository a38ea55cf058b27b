"""on-idle's judgement, table-driven and pure: every way a workload is or is not released."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from steps.gateways.metrics import ENGINE_ACTIVE, GpuActivity, GpuObservation
from steps.reactions import on_idle
from steps.reactions.on_idle import IdlePolicy, IdleRequest, IdleState, decide

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
POLICY = IdlePolicy(window_seconds=1800, threshold=0.05, min_runtime_seconds=3600, max_releases_per_hour=2)
REQUEST = IdleRequest(namespace="team-a", workload="raycluster-demo-1a2b3", pod="demo-worker-0", alert=None)


def workload(*, admitted_minutes_ago: float | None = 120, finished: bool = False, active: bool = True,
             annotations: dict[str, str] | None = None, gpus: int = 4) -> dict[str, Any]:
    conditions = []
    if admitted_minutes_ago is not None:
        at = (NOW - timedelta(minutes=admitted_minutes_ago)).isoformat().replace("+00:00", "Z")
        conditions += [{"type": "QuotaReserved", "status": "True", "lastTransitionTime": at},
                       {"type": "Admitted", "status": "True", "lastTransitionTime": at}]
    if finished:
        conditions.append({"type": "Finished", "status": "True", "reason": "Succeeded"})
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "raycluster-demo-1a2b3", "namespace": "team-a", "annotations": annotations or {}},
            "spec": {"active": active},
            "status": {"conditions": conditions, "admission": {"clusterQueue": "tenant-a", "podSetAssignments": [
                {"name": "workers", "count": 2, "resourceUsage": {"nvidia.com/gpu": str(gpus)}}]}}}


def activity(*values: float, coverage: float = 1.0, coverages: tuple[float, ...] = ()) -> GpuActivity:
    """GPU i belongs to pod demo-worker-{i // 2}; `coverages` gives each GPU's own coverage."""
    gpus = tuple(GpuObservation(uuid=f"GPU-{i}", hostname="node-a", gpu=str(i), namespace="team-a",
                                pod=f"demo-worker-{i // 2}", metric=ENGINE_ACTIVE, label_spelling="plain",
                                max_activity=v, samples=60, first_seen=0, last_seen=1800,
                                coverage=coverages[i] if coverages else coverage)
                 for i, v in enumerate(values))
    return GpuActivity(namespace="team-a", pods=("demo-worker-0", "demo-worker-1"), window_seconds=1800,
                       evaluated_at=NOW.timestamp(), gpus=gpus, coverage=coverage, largest_gap_seconds=30)


PODS = {"demo-worker-0": 2, "demo-worker-1": 2}
IDLE = IdleState(now=NOW, workload=workload(), tenant="tenant-a", pods=("demo-worker-0", "demo-worker-1"),
                 activity=activity(0.0, 0.0, 0.01, 0.0),
                 owners=({"kind": "RayCluster", "metadata": {"name": "demo", "annotations": {}}},), pod_gpus=PODS)

CASES: list[tuple[str, IdleState, IdleRequest, IdlePolicy, str, str]] = [
    ("idle-releases", IDLE, REQUEST, POLICY, "release", "all 4 GPU(s) of 2 pod(s) stayed at or below 5%"),
    ("busy", replace(IDLE, activity=activity(0.0, 0.8, 0.0, 0.0)), REQUEST, POLICY, "no-op", "gpu1 reached 80%"),
    ("partly-busy-one-gpu", replace(IDLE, activity=activity(0.0, 0.0, 0.0, 0.3)), REQUEST, POLICY, "no-op", "reached 30%"),
    ("no-data", replace(IDLE, activity=activity()), REQUEST, POLICY, "no-op", "no DCGM samples"),
    ("holes-in-data", replace(IDLE, activity=activity(0.0, 0.0, coverage=0.5)), REQUEST, POLICY, "no-op", "cover 50%"),
    ("prometheus-down", replace(IDLE, activity=None, metrics_error="Prometheus at http://x is unreachable"),
     REQUEST, POLICY, "retry", "unreachable"),
    ("workload-gone", replace(IDLE, workload=None, resolution="pod team-a/demo-worker-0 no longer exists"),
     REQUEST, POLICY, "no-op", "no longer exists"),
    ("finished", replace(IDLE, workload=workload(finished=True)), REQUEST, POLICY, "no-op", "has finished"),
    ("already-deactivated", replace(IDLE, workload=workload(active=False)), REQUEST, POLICY, "no-op", "already released"),
    ("already-released-record", replace(IDLE, released_record={"releasedAt": "2026-12-01T11:00:00Z"}), REQUEST, POLICY,
     "no-op", "already released (at 2026-12-01T11:00:00Z)"),
    ("not-admitted", replace(IDLE, workload=workload(admitted_minutes_ago=None)), REQUEST, POLICY, "no-op", "not admitted"),
    ("exempt-workload", replace(IDLE, workload=workload(annotations={"gpuaas.io/idle-policy": "exempt"})), REQUEST, POLICY,
     "skipped-by-policy", "Workload raycluster-demo-1a2b3 is annotated gpuaas.io/idle-policy: exempt"),
    ("exempt-owner-label", replace(IDLE, owners=({"kind": "RayCluster", "metadata": {
        "name": "demo", "labels": {"gpuaas.io/idle-policy": "Exempt"}}},)), REQUEST, POLICY,
     "skipped-by-policy", "RayCluster demo is annotated"),
    ("exempt-top-owner", replace(IDLE, owners=({"kind": "StatefulSet", "metadata": {"name": "nb"}}, {
        "kind": "Notebook", "metadata": {"name": "nb", "annotations": {"gpuaas.io/idle-policy": "exempt"}}})),
     REQUEST, POLICY, "skipped-by-policy", "Notebook nb is annotated"),
    ("exempt-even-when-prometheus-down", replace(IDLE, workload=workload(annotations={"gpuaas.io/idle-policy": "exempt"}),
                                                 activity=None, metrics_error="down"),
     REQUEST, POLICY, "skipped-by-policy", "exempt"),
    ("too-young", replace(IDLE, workload=workload(admitted_minutes_ago=59)), REQUEST, POLICY,
     "skipped-by-policy", "has run 3540s since admission, less than the minimum runtime 3600s"),
    ("exactly-min-runtime", replace(IDLE, workload=workload(admitted_minutes_ago=60)), REQUEST, POLICY, "release", ""),
    ("no-pods", replace(IDLE, pods=()), REQUEST, POLICY, "no-op", "no running pods"),
    ("hourly-budget-used", replace(IDLE, releases_last_hour=2), REQUEST, POLICY,
     "skipped-by-policy", "tenant tenant-a already had 2 release(s) in the last hour (maximum 2)"),
    ("budget-zero-never-releases", IDLE, REQUEST, replace(POLICY, max_releases_per_hour=0), "skipped-by-policy", "maximum 0"),
    ("threshold-is-inclusive", replace(IDLE, workload=workload(gpus=2), activity=activity(0.05, 0.0),
                                       pod_gpus={"demo-worker-0": 2}), REQUEST, POLICY, "release", ""),
    # Issue 10 item 6: every GPU the workload holds needs its own samples covering the window.
    ("one-of-two-gpu-pods-has-no-samples", replace(IDLE, activity=activity(0.0, 0.0)), REQUEST, POLICY,
     "no-op", "pod team-a/demo-worker-1 holds 2 GPU(s); 0 of them have DCGM samples covering"),
    ("a-pod-with-fewer-gpus-seen-than-it-holds", replace(IDLE, activity=activity(0.0, 0.0, 0.0)), REQUEST, POLICY,
     "no-op", "pod team-a/demo-worker-1 holds 2 GPU(s); 1 of them have DCGM samples covering"),
    ("one-gpu-with-holes-among-full-ones", replace(IDLE, activity=activity(0.0, 0.0, 0.0, 0.0,
                                                                           coverages=(1.0, 1.0, 1.0, 0.4))),
     REQUEST, POLICY, "no-op", "node-a/gpu3 (pod team-a/demo-worker-1) cover 40%"),
    ("more-gpus-admitted-than-observed", replace(IDLE, activity=activity(0.0, 0.0, 0.0), pod_gpus={}), REQUEST,
     POLICY, "no-op", "holds 4 GPU(s) but DCGM samples cover 3"),
]


@pytest.mark.parametrize(("state", "request_", "policy", "verdict", "reason"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decision(state: IdleState, request_: IdleRequest, policy: IdlePolicy, verdict: str, reason: str) -> None:
    decision = decide(request_, state, policy)
    assert decision.verdict == verdict, decision
    assert reason in " ".join(decision.reasons)
    assert decision.dry_run is False


def test_release_carries_the_gpus_freed() -> None:
    assert decide(REQUEST, IDLE, POLICY).gpus == 4


@pytest.mark.parametrize(("request_", "policy", "why"), [
    (replace(REQUEST, dry_run=True), POLICY, "requested by the dry-run parameter"),
    (REQUEST, replace(POLICY, mode="dry-run"), "tenant tenant-a policy mode is dry-run"),
])
def test_dry_run_plans_the_release_without_applying(request_: IdleRequest, policy: IdlePolicy, why: str) -> None:
    decision = decide(request_, IDLE, policy)
    assert decision.verdict == "release" and decision.dry_run and why in " ".join(decision.reasons)


def test_state_reads_the_workload() -> None:
    assert IDLE.runtime_seconds == 7200 and IDLE.gpus == 4 and IDLE.exempt_by is None
    observed = IDLE.observed()
    assert observed["tenant"] == "tenant-a" and observed["activity"]["maxActivity"] == 0.01


@pytest.mark.parametrize(("params", "field"), [
    ({"workload": "w"}, "namespace"),
    ({"namespace": "team-a"}, "workload"),
    ({"namespace": "team-a", "workload": "w", "alert": "{nope"}, "alert"),
    ({"namespace": "team-a", "workload": "w", "alert": "[]"}, "alert"),
    ({"namespace": "team-a", "workload": "w", "alert": '{"labels": {"namespace": "team-b", "pod": "p"}}'},
     "alert.labels.namespace"),
    ({"namespace": "team-a", "workload": "w", "dry-run": "yes"}, "dry-run"),
    # The pod goes into the API path: JSON or a name longer than any URL an API server takes (414 from
    # the fuzz's API server) is rejected here, not sent.
    ({"namespace": "team-a", "workload": "w", "pod": '{"metadata": "x"}'}, "pod"),
    ({"namespace": "team-a", "pod": "p" * 254}, "pod"),
    ({"namespace": "team-a", "workload": "w", "alert": '{"labels": {"namespace": "team-a", "pod": "Train_0"}}'},
     "alert.labels.pod"),
])
def test_bad_parameters_name_the_field(params: dict[str, str], field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        on_idle.parse_request(params)


def test_request_from_alert_alone() -> None:
    request = on_idle.parse_request({"alert": '{"status": "firing", "labels": {"alertname": "GPUWorkloadIdle", '
                                              '"namespace": "team-a", "pod": "demo-worker-0"}}', "dry-run": "true"})
    assert (request.namespace, request.pod, request.workload, request.dry_run) == ("team-a", "demo-worker-0", "", True)
