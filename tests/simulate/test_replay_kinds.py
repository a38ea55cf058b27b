"""The replay with each kind's own evidence and with releasing on demand, every time worked out by hand
from the rendered timings (rule 30m, for 5m, group_wait 30s, a still-firing group re-sent every 65
minutes; see test_replay.py), with minRuntime 0 so that only the evidence decides."""

from __future__ import annotations

from pathlib import Path

from gpuaas.simulate.comparison import Simulator
from gpuaas.simulate.trace import read_trace
from steps.policy import IdleSettings, Policy, parse_policy
from tests.simulate.conftest import PRODUCT, T0, Job, at, run, trace

QUICK = Policy(idle=IdleSettings(min_runtime_seconds=0))


def replay(directory: Path, jobs: list[Job], chosen: Policy = QUICK, queue: dict | None = None):  # type: ignore[no-untyped-def]
    history = read_trace(trace(directory, jobs, queue))
    result = Simulator(history, chosen, PRODUCT).run_policy("case", "given", chosen, PRODUCT.rule)
    names = history.workloads.name
    released = {str(names[w]): (t - at(0)) / 60.0 for w, t in
                zip(result.releases.workload.tolist(), result.releases.time.tolist(), strict=True)}
    return released, result


def test_a_connected_notebook_is_kept_until_its_owner_leaves(trace_dir: Path) -> None:
    # GPU idle from the start; a client connected until minute 100. The alert fires at 35; at 35.5 the
    # client is there (kind-busy); the repeat at 100.5 finds no client and no activity since the start.
    job = Job("nb", 300, [run((300, 0.0))], kind="Notebook", signal="jupyter", client=[(0, 100)])
    released, result = replay(trace_dir, [job])
    assert released == {"nb": 100.5}
    assert dict(result.outcomes) == {"kind-busy": 1, "release": 1}


def test_a_notebook_whose_kernel_ran_lately_waits_for_a_whole_window(trace_dir: Path) -> None:
    # the owner leaves at 30 after a CPU-only cell at minutes 20-22 (kernel activity, idle GPU): at 35.5 the
    # last activity is 13.5 minutes old; the repeat at 100.5 is more than a window after it
    job = Job("nb", 300, [run((300, 0.0))], kind="Notebook", signal="jupyter", client=[(0, 30)], work=[(20, 22)])
    released, result = replay(trace_dir, [job])
    assert released == {"nb": 100.5}
    assert dict(result.outcomes) == {"kind-busy": 1, "release": 1}


def test_a_ray_job_running_on_idle_gpus_keeps_its_cluster(trace_dir: Path) -> None:
    # the job runs minutes 0-60 with the GPUs idle from 20 (CPU work); fires at 55: the job runs; the
    # repeat at 120.5 finds it ended an hour ago
    job = Job("ray", 300, [run((20, 0.8), (280, 0.0))], kind="RayCluster", signal="ray-jobs", work=[(0, 60)])
    released, result = replay(trace_dir, [job])
    assert released == {"ray": 120.5} and dict(result.outcomes) == {"kind-busy": 1, "release": 1}


def test_a_training_job_without_its_progress_metric_follows_without_signal(trace_dir: Path) -> None:
    job = Job("train", 300, [run((60, 0.8), (240, 0.0))], signal="")  # exports no progress counter
    keep = parse_policy("idle: {minRuntime: 0, kinds: {training: {withoutSignal: keep, progressMetric: steps_total}}}")
    released, result = replay(trace_dir, [job], keep)
    assert released == {} and set(result.outcomes) == {"no-evidence"}
    gpu = parse_policy("idle: {window: 30m, minRuntime: 0, kinds: {training: {progressMetric: steps_total}}}")
    released, _ = replay(trace_dir, [job], gpu)
    assert released == {"train": 95.5}  # idle from 60: fires at 95, GPU activity alone decides


def test_release_on_demand_waits_for_queued_work_and_hands_it_the_gpus(trace_dir: Path) -> None:
    # a holds the cohort's 8 GPUs 0-240, idle all along; b (8 GPUs) is submitted at minute 10 and admitted at
    # 240. With releaseOn demand, a goes at 35.5 because b would fit: b starts then, 204.5 minutes early,
    # and runs its 60 minutes on a's GPUs.
    a = Job("a", 240, [run((240, 0.0))] * 8)
    b = Job("b", 60, [run((60, 0.9))] * 8, start=240)
    queue = {"capacity": 8, "jobs": {"submitted": [T0, T0 + 600], "admitted": [T0, T0 + 240 * 60],
                                     "gpus": [8, 8], "duration": [240 * 60, 3600], "workload": ["a", "b"]}}
    demand = parse_policy("idle: {window: 30m, minRuntime: 0, releaseOn: demand}")
    released, result = replay(trace_dir, [a, b], demand, queue)
    assert released == {"a": 35.5}
    figures = result.total["queue"]
    assert figures["jobsStartedEarly"] == 1 and figures["queueHoursSaved"] == round(204.5 / 60, 3)
    assert figures["handedToQueuedGpuHours"] == 8.0
    # nobody queued: not released, however idle
    nobody = {"capacity": 8, "jobs": {"submitted": [T0, T0 + 240 * 60], "admitted": [T0, T0 + 240 * 60],
                                      "gpus": [8, 8], "duration": [240 * 60, 3600], "workload": ["a", "b"]}}
    released, result = replay(trace_dir, [a, b], demand, nobody)
    assert released == {} and "no-demand" in result.outcomes
    # releasing regardless of demand: released at 35.5 all the same, and it hands b nothing
    released, result = replay(trace_dir, [a, b], parse_policy("idle: {window: 30m, minRuntime: 0}"), nobody)
    assert released == {"a": 35.5} and result.total["queue"]["handedToQueuedGpuHours"] == 0.0
