"""Each kind's own evidence (steps.signals), hand-computed; the demand verdict (steps.demand); and how
the on-idle judgement uses them (which evidence decided, in the record).

Times are seconds; NOW = 100,000; windows 1,800 s (30 minutes)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from steps import demand as demand_model
from steps import signals
from steps.policy import IdleSettings
from steps.reactions.on_idle import IdleFacts, judge

NOW = 100_000.0
WINDOW = 1800.0


def iso(seconds: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def kernel(state: str = "idle", last: float = NOW - 3600, connections: int = 0) -> dict[str, object]:
    """A kernel as jupyter_server's kernel_model returns it."""
    return {"id": "k1", "name": "python3", "last_activity": iso(last), "execution_state": state,
            "connections": connections}


@pytest.mark.parametrize(("kernels", "status", "done", "says"), [
    ([kernel()], None, True, "every kernel idle (1), no client connected, last activity 60 min ago"),
    ([kernel(), kernel("busy")], None, False, "1 of 2 kernel(s) not idle (busy)"),
    ([kernel("starting")], None, False, "not idle (starting)"),
    ([kernel(connections=1)], None, False, "1 client(s) connected"),
    ([kernel()], {"last_activity": iso(NOW - 600), "connections": 0}, False, "last activity 10 min ago"),
    ([kernel(last=NOW - 1800)], None, True, "last activity 30 min ago"),   # exactly the window: done
    ([kernel(last=NOW - 1799)], None, False, "within the 1800s window"),
    ([], {"last_activity": iso(NOW - 7200), "connections": 0}, True, "every kernel idle (0)"),
    ([], None, None, "no kernel and no server activity"),
    (None, None, None, "no kernel list"),
])
def test_jupyter(kernels, status, done, says) -> None:  # type: ignore[no-untyped-def]
    evidence = signals.jupyter_evidence(kernels, status, NOW, WINDOW)
    assert evidence.done is done and says in evidence.reason, evidence.reason


def test_jupyter_unreachable_is_missing_evidence() -> None:
    evidence = signals.jupyter_evidence(None, None, NOW, WINDOW, error="GET http://nb... failed")
    assert evidence.done is None and "could not be read" in evidence.reason


@pytest.mark.parametrize(("jobs", "done", "says"), [
    ([{"submission_id": "a", "status": "RUNNING", "start_time": 1}], False, "1 Ray job(s) pending or running (a)"),
    ([{"submission_id": "a", "status": "PENDING"}], False, "pending or running"),
    ([{"status": "SUCCEEDED", "end_time": (NOW - 600) * 1000}], False, "ended 10 min ago, within"),
    ([{"status": "FAILED", "end_time": (NOW - 3600) * 1000}, {"status": "STOPPED", "end_time": (NOW - 7200) * 1000}],
     True, "the last ended 60 min ago"),
    ([], True, "none ever ran"),
    (None, None, "no job list"),
])
def test_ray_jobs(jobs, done, says) -> None:  # type: ignore[no-untyped-def]
    evidence = signals.ray_jobs_evidence(jobs, NOW, WINDOW)
    assert evidence.done is done and says in evidence.reason, evidence.reason


@pytest.mark.parametrize(("status", "done"), [
    ({}, False), ({"jobStatus": "RUNNING"}, False), ({"jobStatus": "SUCCEEDED", "endTime": iso(NOW - 600)}, False),
    ({"jobStatus": "SUCCEEDED", "endTime": iso(NOW - 3600)}, True), ({"jobStatus": "FAILED"}, True),
])
def test_rayjob_status(status, done) -> None:  # type: ignore[no-untyped-def]
    assert signals.rayjob_status_evidence(status, NOW, WINDOW).done is done


@pytest.mark.parametrize(("served", "in_flight", "done"), [
    (3.0, 0.0, False), (0.0, 2.0, False), (0.0, 0.0, True), (0.0, None, True), (None, 0.0, True), (None, None, None),
])
def test_requests(served, in_flight, done) -> None:  # type: ignore[no-untyped-def]
    assert signals.requests_evidence(served, in_flight, WINDOW, signals.REQUEST_COUNTERS).done is done


@pytest.mark.parametrize(("increase", "metric", "done", "says"), [
    (12.0, "train_steps_total", False, "advanced by 12"), (0.0, "train_steps_total", True, "did not advance"),
    (None, "train_steps_total", None, "export no train_steps_total"), (None, "", None, "no progress metric named"),
])
def test_progress(increase, metric, done, says) -> None:  # type: ignore[no-untyped-def]
    evidence = signals.progress_evidence(increase, metric, WINDOW)
    assert evidence.done is done and says in evidence.reason


# -- demand ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("pending", "free", "releasing", "emptied", "autoscaled", "helps", "says"), [
    ((("a/j1", 8),), 4, 4, (), False, True, "1 pending Workload(s) in cohort c fit into the 8 GPU(s)"),
    ((("a/j1", 16),), 4, 4, (), False, False, "the smallest asking 16 GPU(s): more than the 8 free"),
    ((), 0, 4, (), False, False, "nothing is queued in cohort c (and the node pool is not autoscaled)"),
    ((), 0, 8, ("node-7",), True, True, "empties GPU node(s) node-7"),
    ((), 0, 8, ("node-7",), False, False, "nothing is queued"),
])
def test_demand_verdict(pending, free, releasing, emptied, autoscaled, helps, says) -> None:  # type: ignore[no-untyped-def]
    verdict = demand_model.verdict(demand_model.Demand("c", pending, free, emptied, autoscaled), releasing)
    assert verdict.helps is helps and says in verdict.reason, verdict.reason


# -- the judgement with the kind's evidence ------------------------------------------------------------------
IDLE = IdleFacts(target="ns/w", runtime_seconds=7200, pods=1, idle_summary="idle for 1800s", tenant="t", gpus=1,
                 kind="notebook")
NOTEBOOK = IdleSettings(min_runtime_seconds=0, kind="notebook")


def test_the_kinds_evidence_that_work_goes_on_wins_over_idle_gpus() -> None:
    facts = replace(IDLE, evidence=signals.jupyter_evidence([kernel(connections=1)], None, NOW, WINDOW))
    decision = judge(facts, NOTEBOOK)
    assert decision.verdict == "no-op" and decision.gate == "kind-busy"
    assert decision.reasons == ("jupyter: 1 client(s) connected to the kernels",)


def test_done_by_its_own_evidence_and_idle_gpus_is_released_and_says_so() -> None:
    facts = replace(IDLE, evidence=signals.jupyter_evidence([kernel()], None, NOW, WINDOW))
    decision = judge(facts, NOTEBOOK)
    assert decision.verdict == "release"
    assert decision.evidence.startswith("jupyter: every kernel idle") and "GPU activity as the guard" in decision.evidence
    assert decision.reasons[1] == f"evidence: {decision.evidence}"


def test_gpu_activity_guards_a_done_workload() -> None:
    facts = replace(IDLE, evidence=signals.jupyter_evidence([kernel()], None, NOW, WINDOW), not_idle="GPU busy")
    decision = judge(facts, NOTEBOOK)
    assert decision.verdict == "no-op" and decision.gate == "not-idle" and decision.evidence.startswith("jupyter:")


@pytest.mark.parametrize(("without", "verdict", "gate"), [("gpu", "release", "release"),
                                                          ("keep", "skipped-by-policy", "no-evidence")])
def test_missing_evidence_follows_without_signal(without: str, verdict: str, gate: str) -> None:
    facts = replace(IDLE, evidence=signals.jupyter_evidence(None, None, NOW, WINDOW, error="connection refused"))
    decision = judge(facts, replace(NOTEBOOK, without_signal=without))
    assert decision.verdict == verdict and decision.gate == gate
    if verdict == "release":
        assert decision.evidence.startswith("GPU activity alone (jupyter missing: the Jupyter server could not be read")


def test_signal_none_and_kinds_without_a_source_decide_on_gpu_activity() -> None:
    facts = replace(IDLE, evidence=signals.jupyter_evidence([kernel(connections=1)], None, NOW, WINDOW))
    assert judge(facts, replace(NOTEBOOK, signal="none")).evidence == "GPU activity (idle.signal: none)"
    batch = replace(IDLE, kind="batch")
    assert judge(batch, replace(NOTEBOOK, kind="batch")).evidence == "GPU activity (a batch workload has no source of its own)"


def test_release_on_demand_needs_someone_to_use_the_gpus() -> None:
    on_demand = replace(NOTEBOOK, release_on="demand")
    done = replace(IDLE, evidence=signals.jupyter_evidence([kernel()], None, NOW, WINDOW))
    nobody = demand_model.verdict(demand_model.Demand("c", (), 0), 1)
    decision = judge(replace(done, demand=nobody), on_demand)
    assert decision.verdict == "skipped-by-policy" and decision.gate == "no-demand"
    someone = demand_model.verdict(demand_model.Demand("c", (("a/j", 1),), 0), 1)
    decision = judge(replace(done, demand=someone), on_demand)
    assert decision.verdict == "release" and decision.reasons[2].startswith("demand: 1 pending Workload(s)")
    assert judge(done, on_demand).gate == "no-demand"  # not observed: never released on demand


def test_release_on_never_keeps_a_kind() -> None:
    facts = replace(IDLE, kind="serving", evidence=signals.requests_evidence(0.0, 0.0, WINDOW, ()))
    decision = judge(facts, replace(NOTEBOOK, kind="serving", release_on="never"))
    assert decision.verdict == "skipped-by-policy" and decision.gate == "release-off"
    assert decision.reasons == ("the policy does not release serving workloads (idle.releaseOn: never)",)
