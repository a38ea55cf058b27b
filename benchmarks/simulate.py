"""`gpuaas simulate` on 30 days of the synthetic ITP history (about 1,000 GPUs at one sample a minute).

Every figure comes from `gpuaas simulate` run as a user runs it (its JSON gives its own timings
and peak memory; each run is a process of its own), beside baselines measured in the same run on
the same machine, on the same samples (read from the trace the command writes):

- one policy: `gpuaas simulate --synthesize --windows ""` (the rendered policy and the three
  baselines); the full comparison: the same with the six swept windows. Timings: making the
  history (synthesis), preparing it (per-sample reductions, idle stretches, window prefix sums),
  replaying (alert episodes, Alertmanager groups, every on-idle decision, scoring).
- from a trace: `gpuaas simulate --trace DIR --windows ""` on the written activity.csv.gz.
- baselines: one vectorised numpy pass over every sample (`activity <= threshold`, the least any
  replay must do), and a per-sample Python loop evaluating the idle rule (running window counts),
  timed on 1 % of the samples and scaled: what looping in Python per sample would cost.
- outcome: reclaimed and wrong-release shares of each policy, and the synthetic history's
  calibration figures next to the published ones (Philly: idle 49 % of the time under 6 h, 25 %
  over 24 h).

Targets (issue 13): one policy <= 60 s, the full comparison <= 5 min, within 4 GB.
The last line is one JSON object. Run: `.venv/bin/python benchmarks/simulate.py`.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
THRESHOLD = 0.05
WINDOW_SLOTS = 30  # the rendered 30m window at one sample a minute


CPU_SECONDS: dict[str, float] = {}
"""CPU seconds (user + system) of each command: on a shared machine, wall time grows with the load,
CPU time much less."""


def simulate(*args: str) -> tuple[dict, float]:
    """Run `gpuaas simulate ... --output json` in a process of its own: (its JSON, wall seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "gpuaas.cli", "simulate", *args, "--output", "json"],
                            capture_output=True, text=True, check=False, cwd=ROOT)
    if result.returncode != 0:
        raise SystemExit(f"gpuaas simulate {' '.join(args)} failed:\n{result.stderr}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU_SECONDS[" ".join(args)] = round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1)
    return json.loads(result.stdout), time.perf_counter() - started


def samples_of(trace: Path) -> dict[str, np.ndarray]:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    types = {"time": pa.float64(), "workload": pa.dictionary(pa.int32(), pa.string()), "gpu": pa.int32(),
             "activity": pa.float32()}
    table = pacsv.read_csv(trace / "activity.csv.gz", convert_options=pacsv.ConvertOptions(
        column_types=types, include_columns=list(types)))
    workload = table.column("workload").combine_chunks().indices.to_numpy(zero_copy_only=False)
    return {"activity": table.column("activity").to_numpy(), "gpu": table.column("gpu").to_numpy(),
            "workload": workload}


def python_loop_estimate(samples: dict[str, np.ndarray], share: float = 0.01) -> float:
    """Seconds a per-sample Python loop would take to evaluate the idle rule over every sample: per
    (workload, GPU) series in file order, running counts of samples and busy samples over the window."""
    count = max(1, int(len(samples["activity"]) * share))
    activity = samples["activity"][:count].tolist()
    series = (samples["workload"][:count].astype(np.int64) * 64 + samples["gpu"][:count]).tolist()
    started = time.perf_counter()
    windows: dict[int, list[float]] = {}
    busy_in: dict[int, int] = {}
    idle_evaluations = 0
    for key, value in zip(series, activity, strict=True):
        window = windows.setdefault(key, [])
        window.append(value)
        busy_in[key] = busy_in.get(key, 0) + (value > THRESHOLD)
        if len(window) > WINDOW_SLOTS:
            busy_in[key] -= window.pop(0) > THRESHOLD
        idle_evaluations += busy_in[key] == 0
    return (time.perf_counter() - started) * len(samples["activity"]) / count


def main() -> int:
    figures: dict[str, object] = {"load_average_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="gpuaas-bench-simulate-") as tmp:
        trace = Path(tmp) / "trace"
        one, wall = simulate("--synthesize", "--windows", "", "--write-trace", str(trace))
        history = one["history"]
        figures.update(samples=history["samples"], workloads=history["workloads"],
                       gpus_held_on_average=history["gpusHeldOnAverage"], days=history["days"])
        print(f"history: {history['samples'] / 1e6:.1f} M GPU samples, {history['workloads']:,} workloads, "
              f"{history['gpusHeldOnAverage']:,} GPUs held on average over {history['days']} days")
        one, wall = simulate("--synthesize", "--windows", "")
        seconds = one["seconds"]
        figures.update(synthesize_s=seconds["read"], prepare_s=seconds["prepare"], replay_one_policy_s=seconds["replay"],
                       one_policy_s=round(seconds["prepare"] + seconds["replay"], 2),
                       one_policy_command_s=round(wall, 1), one_policy_command_cpu_s=CPU_SECONDS["--synthesize --windows "],
                       one_policy_peak_mb=one["peakMemoryMB"])
        print(f"one policy: {figures['one_policy_s']} s (prepare {seconds['prepare']} s + replay {seconds['replay']} s; "
              f"the whole command with synthesis {figures['one_policy_command_s']} s, "
              f"{figures['one_policy_command_cpu_s']} CPU s), peak {one['peakMemoryMB']} MB")
        full, wall = simulate("--synthesize")
        seconds = full["seconds"]
        figures.update(full_comparison_s=round(seconds["prepare"] + seconds["replay"], 2),
                       full_comparison_command_s=round(wall, 1), full_comparison_command_cpu_s=CPU_SECONDS["--synthesize"],
                       full_comparison_peak_mb=full["peakMemoryMB"])
        print(f"full comparison ({len(full['policies'])} policies): {figures['full_comparison_s']} s "
              f"(command {figures['full_comparison_command_s']} s, {figures['full_comparison_command_cpu_s']} CPU s), "
              f"peak {full['peakMemoryMB']} MB")
        from_trace, wall = simulate("--trace", str(trace), "--windows", "")
        seconds = from_trace["seconds"]
        figures.update(trace_gz_mb=round((trace / "activity.csv.gz").stat().st_size / 1e6, 1),
                       trace_read_s=seconds["read"],
                       trace_one_policy_s=round(seconds["read"] + seconds["prepare"] + seconds["replay"], 2),
                       trace_one_policy_command_s=round(wall, 1),
                       trace_one_policy_command_cpu_s=CPU_SECONDS[f"--trace {trace} --windows "],
                       trace_one_policy_peak_mb=from_trace["peakMemoryMB"])
        same = from_trace["policies"][0]["total"] == one["policies"][0]["total"]
        figures["trace_replays_the_same"] = same
        print(f"from the trace ({figures['trace_gz_mb']} MB gzip): read {seconds['read']} s, one policy in all "
              f"{figures['trace_one_policy_s']} s ({figures['trace_one_policy_command_cpu_s']} CPU s for the command), "
              f"peak {from_trace['peakMemoryMB']} MB; same outcome: {same}")
        samples = samples_of(trace)
    started = time.perf_counter()
    _ = samples["activity"] <= THRESHOLD
    figures["baseline_numpy_pass_s"] = round(time.perf_counter() - started, 3)
    figures["baseline_python_loop_estimate_s"] = round(python_loop_estimate(samples), 1)
    figures["ratio_python_loop_to_one_policy"] = round(figures["baseline_python_loop_estimate_s"]  # type: ignore[operator]
                                                       / figures["one_policy_s"], 1)
    figures["ratio_one_policy_to_numpy_pass"] = round(figures["one_policy_s"]  # type: ignore[operator]
                                                      / max(figures["baseline_numpy_pass_s"], 1e-9), 1)  # type: ignore[arg-type]
    print(f"baselines: one numpy pass {figures['baseline_numpy_pass_s']} s; a per-sample Python loop over the "
          f"idle rule ~{figures['baseline_python_loop_estimate_s']} s "
          f"({figures['ratio_python_loop_to_one_policy']}x the whole one-policy replay)")
    outcome = {}
    for policy in full["policies"]:
        total = policy["total"]
        outcome[policy["name"].replace(" ", "_").lower()] = {
            "reclaimed_share": total["reclaimedShare"], "wrong_release_share": total["wrongReleaseShare"],
            "releases": total["releases"], "latency_p50_min": None if total["latencySeconds"]["median"] is None
            else round(total["latencySeconds"]["median"] / 60, 1)}
        print(f"  {policy['name']:16s} reclaimed {total['reclaimedShare']:6.1%}  wrong {total['wrongReleaseShare']:6.1%}"
              f"  releases {total['releases']:6,}")
    figures["outcome"] = outcome
    figures["given_policy_on_idle_runs"] = full["policies"][0]["onIdleRuns"]
    figures["calibration"] = full["history"].get("calibration")
    print(f"calibration: {figures['calibration']}")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
