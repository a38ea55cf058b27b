"""`gpuaas simulate` on 30 days of the synthetic ITP history (about 1,000 GPUs at one sample a minute).

Every figure comes from `gpuaas simulate` run as a user runs it (its JSON gives its own timings
and peak memory; each run is a process of its own), beside baselines measured in the same run on
the same machine, on the same samples (read from the trace the command writes):

- one policy: `gpuaas simulate --synthesize --windows "" --no-variants` (the rendered policy and the
  five baselines); the full comparison: the default command (the rendered policy, its two variants,
  six swept windows, five baselines), each on both calibrations (philly, pai: the same 46.9 M
  samples, other patterns and signals). Timings: making the history (synthesis), preparing it
  (per-sample reductions, idle stretches, window prefix sums, signal prefix sums), replaying (alert
  episodes, Alertmanager groups, every on-idle decision with the kinds' evidence, the cohort's
  queue, scoring).
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
        one, wall = simulate("--synthesize", "--windows", "", "--no-variants", "--write-trace", str(trace))
        history = one["history"]
        figures.update(samples=history["samples"], workloads=history["workloads"],
                       gpus_held_on_average=history["gpusHeldOnAverage"], days=history["days"])
        print(f"history: {history['samples'] / 1e6:.1f} M GPU samples, {history['workloads']:,} workloads, "
              f"{history['gpusHeldOnAverage']:,} GPUs held on average over {history['days']} days")
        fulls, ones = {}, {}
        for calibration in ("philly", "pai"):
            key = "" if calibration == "philly" else "pai_"
            args = ("--synthesize", "--calibration", calibration, "--windows", "", "--no-variants")
            one, wall = simulate(*args)
            ones[calibration] = one
            seconds = one["seconds"]
            figures.update({f"{key}synthesize_s": seconds["read"], f"{key}prepare_s": seconds["prepare"],
                            f"{key}replay_one_policy_s": seconds["replay"],
                            f"{key}one_policy_s": round(seconds["prepare"] + seconds["replay"], 2),
                            f"{key}one_policy_command_s": round(wall, 1),
                            f"{key}one_policy_command_cpu_s": CPU_SECONDS[" ".join(args)],
                            f"{key}one_policy_peak_mb": one["peakMemoryMB"]})
            print(f"{calibration}: one policy: {figures[key + 'one_policy_s']} s (prepare {seconds['prepare']} s + "
                  f"replay {seconds['replay']} s; the whole command with synthesis "
                  f"{figures[key + 'one_policy_command_s']} s, {figures[key + 'one_policy_command_cpu_s']} CPU s), "
                  f"peak {one['peakMemoryMB']} MB")
            args = ("--synthesize", "--calibration", calibration)
            full, wall = simulate(*args)
            fulls[calibration] = full
            seconds = full["seconds"]
            figures.update({f"{key}full_comparison_s": round(seconds["prepare"] + seconds["replay"], 2),
                            f"{key}full_comparison_command_s": round(wall, 1),
                            f"{key}full_comparison_command_cpu_s": CPU_SECONDS[" ".join(args)],
                            f"{key}full_comparison_peak_mb": full["peakMemoryMB"]})
            print(f"{calibration}: full comparison ({len(full['policies'])} policies): "
                  f"{figures[key + 'full_comparison_s']} s (command {figures[key + 'full_comparison_command_s']} s, "
                  f"{figures[key + 'full_comparison_command_cpu_s']} CPU s), peak {full['peakMemoryMB']} MB")
        from_trace, wall = simulate("--trace", str(trace), "--windows", "", "--no-variants")
        seconds = from_trace["seconds"]
        figures.update(trace_gz_mb=round((trace / "activity.csv.gz").stat().st_size / 1e6, 1),
                       trace_read_s=seconds["read"],
                       trace_one_policy_s=round(seconds["read"] + seconds["prepare"] + seconds["replay"], 2),
                       trace_one_policy_command_s=round(wall, 1),
                       trace_one_policy_command_cpu_s=CPU_SECONDS[f"--trace {trace} --windows  --no-variants"],
                       trace_one_policy_peak_mb=from_trace["peakMemoryMB"])
        same = from_trace["policies"][0]["total"] == ones["philly"]["policies"][0]["total"]
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
    for calibration, full in fulls.items():
        outcome = {}
        print(f"{calibration}:")
        for policy in full["policies"]:
            total = policy["total"]
            outcome[policy["name"].replace(" ", "_").replace(",", "").lower()] = {
                "reclaimed_share": total["reclaimedShare"], "reached_share_of_bound": total["reachedShareOfBound"],
                "wrong_gpu_share": total["wrongGpuShare"], "releases": total["releases"],
                "net_gpu_hours": total["netGpuHours"]}
            print(f"  {policy['name'][:32]:32s} reclaimed {total['reclaimedShare']:6.1%}  reached "
                  f"{total['reachedShareOfBound']:6.1%}  wrong GPUs {total['wrongGpuShare']:6.1%}  "
                  f"releases {total['releases']:6,}  net {total['netGpuHours']:10,.0f} GPU-h")
        figures[f"outcome_{calibration}"] = outcome
        figures[f"calibration_{calibration}"] = full["history"].get("calibration")
        print(f"calibration {calibration}: {figures[f'calibration_{calibration}']}")
    figures["given_policy_on_idle_runs"] = fulls["philly"]["policies"][0]["onIdleRuns"]
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
