"""The baselines, on tiny traces with hand-computed release times (minutes after T0)."""

from __future__ import annotations

from pathlib import Path

from gpuaas.simulate import baselines
from gpuaas.simulate.definitions import IdleSamples
from gpuaas.simulate.scorecard import judge_releases
from gpuaas.simulate.trace import read_trace
from tests.simulate.conftest import Job, at, run, trace


def releases(directory: Path, jobs: list[Job], which) -> dict[str, float]:  # type: ignore[no-untyped-def]
    samples = IdleSamples.of(read_trace(trace(directory, jobs)), 0.05)
    workload, when = which(samples)
    names = samples.history.workloads.name
    return {str(names[w]): (t - at(0)) / 60.0 for w, t in zip(workload.tolist(), when.tolist(), strict=True)}


def test_keda_scales_to_zero_five_minutes_into_the_first_quiet_run(trace_dir: Path) -> None:
    jobs = [Job("a", 240, [run((70, 0.8), (110, 0.0), (60, 0.8))]),
            Job("startup", 60, [run((10, 0.0), (50, 0.9))]),            # no minimum runtime: gone at 5
            Job("short-dips", 60, [run((20, 0.9), (4, 0.0), (36, 0.9))]),  # 4 minutes is under the cooldown
            Job("no-data", 60, [run((30, 0.9), (10, None), (20, 0.9))])]  # no data reads as 0: released at 35
    assert releases(trace_dir, jobs, baselines.keda_only) == {"a": 75.0, "startup": 5.0, "no-data": 35.0}


def test_keda_releases_interrupt_and_one_outside_a_stretch(trace_dir: Path) -> None:
    jobs = [Job("no-data", 60, [run((30, 0.9), (10, None), (20, 0.9))])]
    samples = IdleSamples.of(read_trace(trace(trace_dir, jobs)), 0.05)
    judged = judge_releases(samples, *baselines.keda_only(samples))
    assert judged.wrong.tolist() == [True] and judged.reclaimed_gpu_hours.tolist() == [0.0]


def test_culler_stops_notebooks_a_day_after_their_last_activity(trace_dir: Path) -> None:
    jobs = [Job("nb", 1600, [run((60, 0.5), (1540, 0.0))], kind="Notebook"),
            Job("nb-short-idle", 1600, [run((60, 0.5), (1400, 0.0), (140, 0.5))], kind="Notebook"),
            Job("train", 1600, [run((60, 0.5), (1540, 0.0))], kind="PyTorchJob")]
    # last busy sample at minute 59: culled at the first check after 59 + 1440
    assert releases(trace_dir, jobs, baselines.notebook_culler) == {"nb": 1500.0}


def test_keda_default_initial_cooldown_scales_a_never_active_workload_at_its_first_poll(trace_dir: Path) -> None:
    """KEDA v2.20 scales a target whose triggers were never active at its first poll once
    `initialCooldownPeriod` (default 0) has passed, ignoring cooldownPeriod
    (pkg/scaling/executor/scale_scaledobjects.go, scaleToZeroOrIdle); the baseline assumes 300 s."""
    jobs = [Job("startup", 60, [run((10, 0.0), (50, 0.9))]), Job("active-first", 60, [run((10, 0.9), (50, 0.0))])]
    default = baselines.KedaTimings(initial_cooldown_period=0.0)
    assert releases(trace_dir, jobs, lambda s: baselines.keda_only(s, default)) == {"startup": 0.0, "active-first": 15.0}
    assert releases(trace_dir, jobs, baselines.keda_only) == {"startup": 5.0, "active-first": 15.0}


def test_culler_at_one_hour_stops_a_notebook_an_hour_after_its_last_activity(trace_dir: Path) -> None:
    """CULL_IDLE_TIME=60 (the realistic setting beside the 24 h default): last busy minute 59, culled at the
    first check after 59 + 60; a notebook busy again at minute 100 is not idle for an hour before 160."""
    jobs = [Job("nb", 300, [run((60, 0.5), (240, 0.0))], kind="Notebook"),
            Job("nb-back", 300, [run((60, 0.5), (40, 0.0), (10, 0.5), (190, 0.0))], kind="Notebook")]
    hourly = baselines.CullerTimings(cull_idle_seconds=3600.0)
    assert releases(trace_dir, jobs, lambda s: baselines.notebook_culler(s, hourly)) == {"nb": 120.0, "nb-back": 170.0}


def test_culler_reads_kernel_activity_when_the_history_has_the_notebooks_jupyter_signal(trace_dir: Path) -> None:
    """The culler reads /api/kernels (last activity, busy kernels), not the GPUs: CPU-only cells until minute
    101 keep an idle-GPU notebook until the first check after 101 + 60; the GPUs alone would have said idle
    since the start (culled at 61). Connections do not count for it."""
    hourly = baselines.CullerTimings(cull_idle_seconds=3600.0)
    jobs = [Job("nb", 300, [run((300, 0.0))], kind="Notebook", signal="jupyter", work=[(0, 102)], client=[(0, 300)])]
    assert releases(trace_dir, jobs, lambda s: baselines.notebook_culler(s, hourly)) == {"nb": 162.0}
