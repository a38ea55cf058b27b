"""`gpuaas simulate` on 30 days of the synthetic ITP history (about 1,000 GPUs at one sample a minute).

Figures, each beside a baseline measured in the same run on the same machine:

- speed: synthesizing the history; preparing it (per-sample reductions, idle stretches, window
  prefix sums); replaying ONE policy (the rendered one: alert episodes, Alertmanager groups, every
  on-idle decision, scoring); the FULL comparison (that policy, six swept windows, three
  baselines). Baselines: one vectorised numpy pass over every sample (`activity <= threshold`,
  the least any replay must do); and, for the alert rule alone, a per-sample Python loop (each GPU
  sample, then running window counts), timed on 1 % of the samples and scaled, against the
  vectorised alert episodes.
- memory: the process's peak resident set (synthesis included).
- outcome: reclaimed share and wrong-release share of the rendered policy and of each baseline
  (definitions in docs/simulate.md), and the synthetic history's calibration figures next to the
  published ones they follow (Philly: jobs idle 49 % of the time under 6 h, 25 % over 24 h).
- with `--trace-io`: writing the history as a trace (activity.csv.gz), then `gpuaas simulate --trace`
  on it in a process of its own (reading, one policy, the baselines): time and peak memory, and the
  same outcome as the in-memory replay.

Targets (issue 13): one policy <= 60 s, the full comparison <= 5 min, within 4 GB.
The last line is one JSON object. Run: `.venv/bin/python benchmarks/simulate.py [--trace-io]`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np

from gpuaas.simulate.alert_rule import PodAlerts
from gpuaas.simulate.comparison import DEFAULT_SWEEP, Simulator
from gpuaas.simulate.definitions import IdleSamples
from gpuaas.simulate.product import load_policy, load_timings
from gpuaas.simulate.synthesis import synthesize


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def python_loop_alert_estimate(history, rule, share: float = 0.01) -> float:  # type: ignore[no-untyped-def]
    """Seconds a per-sample Python loop would take to evaluate GPUWorkloadIdle for every pod: each
    GPU sample read to find the pod's highest activity and whether it has data, then running counts
    over the window, the offset sample and `for`. Timed on `share` of the samples, scaled."""
    pods = history.pods
    range_slots, offset_slots, for_slots = rule.slots(history.step)
    target = max(1, int(history.samples * share))
    done, started = 0, time.perf_counter()
    for pod in range(len(pods)):
        workload = int(pods.workload[pod])
        first = int(pods.first_column[pod])
        block = history.block(workload)[:, first:first + int(pods.columns[pod])].tolist()
        count = len(block)
        sampled, highest = [], []
        for row in block:
            top, seen = -1.0, False
            for value in row:
                if value == value and value >= 0:  # noqa: PLR0124 - NaN check
                    seen = True
                    top = max(top, value)
            sampled.append(seen)
            highest.append(top)
        present = bad = 0
        active = None
        for k in range(count + offset_slots + 1):
            if k < count and sampled[k]:
                present += 1
                bad += highest[k] > rule.threshold
            old = k - range_slots - 1
            if 0 <= old < count and sampled[old]:
                present -= 1
                bad -= highest[old] > rule.threshold
            back = k - offset_slots
            holds = present > 0 and bad == 0 and 0 <= back < count and sampled[back]
            active = (active if active is not None else k) if holds else None
            _ = holds and k - active >= for_slots  # firing
        done += count * int(pods.columns[pod])
        if done >= target:
            break
    return (time.perf_counter() - started) * history.samples / done


def calibration(history, samples: IdleSamples) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Idle share per training job by duration (Philly: 49 % under 6 h, 25 % over 24 h)."""
    rows = history.rows
    has_rows = rows.count > 0
    idle_rows = np.add.reduceat(samples.idle.astype(np.int64), rows.start[has_rows])
    share = idle_rows / rows.count[has_rows]
    workloads = history.workloads
    kind = workloads.kind[has_rows]
    hours = (workloads.end - workloads.start)[has_rows] / 3600.0
    training = kind == "PyTorchJob"
    out = {}
    for name, low, high in (("under_6h", 0, 6), ("6h_to_24h", 6, 24), ("over_24h", 24, 1e9)):
        chosen = training & (hours >= low) & (hours < high)
        out[f"training_idle_share_{name}"] = round(float(share[chosen].mean()), 3) if chosen.any() else None
    out["notebook_idle_share"] = round(float(share[kind == "Notebook"].mean()), 3)
    held = float(((workloads.end - workloads.start) * workloads.gpus).sum()) / 3600.0
    out["idle_gpu_hours_share_of_held"] = round(float(samples.stretch_gpu_hours.sum()) / held, 3)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--trace-io", action="store_true", help="also write and read the history as a trace")
    args = parser.parse_args()
    figures: dict[str, object] = {"load_average_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}

    started = time.perf_counter()
    history = synthesize(seed=args.seed, days=args.days)
    figures["synthesize_s"] = round(time.perf_counter() - started, 2)
    workloads = history.workloads
    span = history.end - history.start
    figures.update(samples=history.samples, workloads=len(workloads),
                   gpus_held_on_average=round(float(((workloads.end - workloads.start) * workloads.gpus).sum()) / span,
                                              1), days=round(span / 86400, 2))
    print(f"history: {history.samples / 1e6:.1f} M GPU samples, {len(workloads):,} workloads, "
          f"{figures['gpus_held_on_average']} GPUs held on average over {figures['days']} days "
          f"(synthesized in {figures['synthesize_s']} s)")

    started = time.perf_counter()
    floor = history.activity <= 0.05
    figures["baseline_numpy_pass_s"] = round(time.perf_counter() - started, 3)
    del floor
    policy, _ = load_policy()
    timings = load_timings()
    figures["baseline_python_loop_alert_rule_estimate_s"] = round(python_loop_alert_estimate(history, timings.rule), 1)
    started = time.perf_counter()
    simulator = Simulator(history, policy, timings)
    figures["prepare_s"] = round(time.perf_counter() - started, 2)
    started = time.perf_counter()
    given = simulator.run_policy("given policy", "given", policy, timings.rule)
    figures["replay_one_policy_s"] = round(time.perf_counter() - started, 2)
    figures["one_policy_s"] = round(figures["prepare_s"] + figures["replay_one_policy_s"], 2)  # type: ignore[operator]
    started = time.perf_counter()
    PodAlerts(history, timings.rule).episodes()
    figures["alert_rule_vectorised_s"] = round(time.perf_counter() - started, 2)
    print(f"one policy: {figures['one_policy_s']} s (prepare {figures['prepare_s']} s + replay "
          f"{figures['replay_one_policy_s']} s); baseline: one numpy pass over the samples "
          f"{figures['baseline_numpy_pass_s']} s")
    print(f"alert rule over every pod: vectorised {figures['alert_rule_vectorised_s']} s; baseline per-sample "
          f"Python loop ~{figures['baseline_python_loop_alert_rule_estimate_s']} s")

    started = time.perf_counter()
    runs = simulator.compare(sweep=DEFAULT_SWEEP)
    figures["full_comparison_s"] = round(time.perf_counter() - started + figures["prepare_s"], 2)  # type: ignore[operator]
    figures["ratio_one_policy_to_numpy_pass"] = round(figures["one_policy_s"] / max(figures["baseline_numpy_pass_s"],  # type: ignore[operator, arg-type]
                                                                                   1e-9), 1)
    figures["ratio_python_loop_to_vectorised_alert_rule"] = round(  # type: ignore[operator]
        figures["baseline_python_loop_alert_rule_estimate_s"] / max(figures["alert_rule_vectorised_s"], 1e-9), 1)
    print(f"full comparison ({len(runs)} policies): {figures['full_comparison_s']} s")
    outcome = {}
    for run in runs:
        total = run.total
        key = run.name.replace(" ", "_").lower()
        outcome[key] = {"reclaimed_share": total["reclaimedShare"], "wrong_release_share": total["wrongReleaseShare"],
                        "releases": total["releases"], "latency_p50_min": None if total["latencySeconds"]["median"]
                        is None else round(total["latencySeconds"]["median"] / 60, 1)}
        print(f"  {run.name:18s} reclaimed {total['reclaimedShare']:6.1%}  wrong {total['wrongReleaseShare']:6.1%}  "
              f"releases {total['releases']:6,}  ({run.seconds:.1f} s)")
    figures["outcome"] = outcome
    figures["given_policy_on_idle_runs"] = dict(given.outcomes)
    outcome_given = given.total
    figures["calibration"] = calibration(history, simulator.samples)
    figures["calibration_published"] = {"philly_idle_share_under_6h": 0.49, "philly_idle_share_over_24h": 0.25}
    print(f"calibration: {figures['calibration']} (Philly: 0.49 under 6 h, 0.25 over 24 h)")

    figures["peak_rss_mb"] = round(peak_rss_mb(), 1)
    if args.trace_io:
        import subprocess

        from gpuaas.simulate.trace import write_trace

        with tempfile.TemporaryDirectory(prefix="gpuaas-bench-trace-") as tmp:
            started = time.perf_counter()
            write_trace(history, tmp)
            figures["write_trace_s"] = round(time.perf_counter() - started, 1)
            figures["trace_gz_mb"] = round((Path(tmp) / "activity.csv.gz").stat().st_size / 1e6, 1)
            # what a user runs: read the trace and replay one policy, in a process of its own
            started = time.perf_counter()
            result = subprocess.run([sys.executable, "-m", "gpuaas.cli", "simulate", "--trace", tmp, "--windows", "",
                                     "--output", "json"], capture_output=True, text=True, check=True, cwd=ROOT)
            figures["trace_one_policy_command_s"] = round(time.perf_counter() - started, 1)
            figures["trace_command_peak_rss_mb"] = round(
                resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0, 1)
            replayed = json.loads(result.stdout)
            figures["trace_read_s"] = replayed["seconds"]["read"]
            assert replayed["policies"][0]["total"] == outcome_given, "the trace replays differently"
        print(f"trace: written in {figures['write_trace_s']} s ({figures['trace_gz_mb']} MB gzip); "
              f"`gpuaas simulate --trace` (one policy + baselines) {figures['trace_one_policy_command_s']} s "
              f"(reading {figures['trace_read_s']} s), peak {figures['trace_command_peak_rss_mb']} MB")
    print(f"peak memory: {figures['peak_rss_mb']} MB; load average {figures['load_average_1m']} on {figures['cpus']} CPUs")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
