"""`gpuaas simulate`: what would the idle policy have reclaimed, and whom would it have interrupted?

    gpuaas simulate --prometheus http://prometheus:9090 --since 7d            # your cluster's last week
    gpuaas simulate --trace DIR --policy my-policy.yaml --html sim-report     # a trace (docs/simulate.md)
    gpuaas simulate --synthesize --days 30 --output json                      # the synthetic ITP history

The history is replayed through the product: the rendered GPUWorkloadIdle rule (window, `for`,
threshold), Alertmanager's group timings, and the on-idle step's own decision
(`steps.reactions.on_idle.judge`) with the policy given. One run compares that policy, the same
policy with the idle window swept, and three baselines (no automation, KEDA only, the Kubeflow
notebook culler). Exit codes: 0 done, 2 bad input or an unreachable Prometheus (the message says
what to do).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
from pathlib import Path
from typing import Any

MAX_WINDOW = 86400.0
"""Seconds: the longest idle window swept and the coarsest --step (a day; longer ones overflowed the replay)."""
MAX_REACTION_DELAY = 3600.0
MIN_DAYS = 1 / 24
"""--days below an hour holds no whole workload of the trace."""


def configure(parser: argparse.ArgumentParser) -> None:
    source = parser.add_argument_group("history (one of)")
    choice = source.add_mutually_exclusive_group(required=True)
    choice.add_argument("--trace", type=Path, metavar="DIR",
                        help="a trace directory: workloads.csv and activity.csv[.gz] (format: docs/simulate.md)")
    choice.add_argument("--prometheus", metavar="URL", help="read the history from this Prometheus")
    choice.add_argument("--synthesize", action="store_true",
                        help="a seeded synthetic history from the Microsoft ITP job trace (docs/simulate.md)")
    source.add_argument("--since", default="7d", help="--prometheus: start, RFC 3339 or an age (default 7d)")
    source.add_argument("--until", default=None, help="--prometheus: end, RFC 3339 or an age (default now)")
    source.add_argument("--step", default="1m", help="sample grid (default 1m); samples in one step keep the highest")
    synth = parser.add_argument_group("--synthesize")
    synth.add_argument("--itp", type=Path, default=None,
                       help="ITP jobs: the original raw-traces.tar.gz, a folder of clusterNN.csv, or the bundled "
                            "30-day extract (default)")
    synth.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    synth.add_argument("--days", type=float, default=30.0, help="days of the trace to use (default 30)")
    synth.add_argument("--calibration", choices=("philly", "pai"), default="philly",
                       help="philly: a training cluster as in Microsoft's Philly trace (default); pai: the "
                            "low-utilisation mixed cluster of Alibaba PAI (docs/simulate.md)")
    synth.add_argument("--write-trace", type=Path, metavar="DIR", default=None,
                       help="also write the history as a trace directory (activity.csv.gz)")
    product = parser.add_argument_group("product settings")
    product.add_argument("--policy", type=Path, default=None,
                         help="the gpuaas-policy ConfigMap or a policy.yaml (default: manifests/base/policy.yaml)")
    product.add_argument("--observability", type=Path, default=None,
                         help="the PrometheusRule and AlertmanagerConfig (default: manifests/base/observability.yaml)")
    product.add_argument("--mode", choices=("enforce", "dry-run"), default=None,
                         help="override every tenant's idle.mode (e.g. enforce: what would switching do?)")
    windows = product.add_argument("--windows", default="5m,10m,15m,30m,1h,2h",
                                   help="idle windows to sweep (default 5m,10m,15m,30m,1h,2h; empty: no sweep)")
    windows.empty_allowed = True  # type: ignore[attr-defined]  # gpuaas.cli.check_spelling: "" means no sweep
    product.add_argument("--no-variants", action="store_true",
                         help="skip the given policy's variants (every tenant releasing on demand; GPU activity only)")
    product.add_argument("--reaction-delay", default="0s",
                         help="time from a webhook delivery to the on-idle step reading Prometheus (default 0s)")
    output = parser.add_argument_group("output")
    output.add_argument("--output", choices=("table", "json"), default="table",
                        help="table (default) or json on stdout; progress goes to stderr")
    output.add_argument("--html", type=Path, metavar="DIR", default=None,
                        help="write index.html with the trade-off and latency charts (PNGs beside it)")


class _Progress:
    """One line per stage on stderr, updated in place when it is a terminal."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.tty = sys.stderr.isatty()
        self.last: tuple[str, int] | None = None

    def __call__(self, stage: str, share: float) -> None:
        percent = int(share * 100)
        if self.last == (stage, percent) or (not self.tty and percent not in (0, 100) and percent % 25):
            return
        self.last = (stage, percent)
        text = f"[{time.perf_counter() - self.started:6.1f}s] {stage}: {percent}%"
        if self.tty:
            print("\r" + text.ljust(72), end="" if percent < 100 else "\n", file=sys.stderr, flush=True)
        else:
            print(text, file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        if self.tty and self.last and self.last[1] < 100:
            print(file=sys.stderr)
        self.last = None
        print(f"[{time.perf_counter() - self.started:6.1f}s] {text}", file=sys.stderr, flush=True)


def _seconds(option: str, value: str) -> float:
    from gpuaas.simulate.product import ProductSettingsError, prometheus_duration

    try:
        return prometheus_duration(value, option)
    except ProductSettingsError as error:
        raise ValueError(str(error)) from None


def _windows(text: str, step: float) -> list[float]:
    """The swept idle windows in seconds, each once, in the order given; none shorter than the grid's step
    (the replay reads the history one step at a time, so a shorter window holds no sample)."""
    from gpuaas.simulate.product import format_duration

    windows: list[float] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        seconds = _seconds("--windows", item)
        if seconds > MAX_WINDOW:
            raise ValueError(f"--windows: expected idle windows of at most 1d, found {item}")
        if seconds < step:
            raise ValueError(f"--windows: expected idle windows of at least --step ({format_duration(step)}), "
                             f"found {item}; pass longer windows or a finer --step")
        if seconds not in windows:
            windows.append(seconds)
    return windows


def _sparse_grid_note(history: Any) -> str | None:
    """A note when most held GPU slots have no sample, which is what a --step finer than the samples'
    interval gives: every other slot reads as "no data", idle stretches break up and little is idle."""
    import numpy as np

    from gpuaas.simulate.product import format_duration

    held = history.samples
    share = int(np.count_nonzero(history.activity >= 0)) / held if held else 1.0
    if share >= 0.5:
        return None
    interval = format_duration(round(history.step / max(share, 1e-9)))
    return (f"only {share:.0%} of the held GPU slots on the {format_duration(history.step)} grid have a sample: "
            f"samples come about every {interval} (or the exporter was silent), so most slots count as no data "
            f"and idle stretches break up; pass --step {interval} or coarser")


def _writable_folder(option: str, folder: Path | None) -> None:
    """Make the folder an option writes into, before minutes of replay; a clear error if it cannot be."""
    if folder is None:
        return
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{option} {folder}: expected a folder to write into, found a file; pass another folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(f"{option} {folder}: expected a folder this user can write, found "
                         f"{(error.strerror or str(error)).lower()}; pass another folder") from None


def _history(args: argparse.Namespace, step: float, progress: _Progress) -> Any:
    if args.trace is not None:
        from gpuaas.simulate.trace import read_trace

        progress.note(f"reading trace {args.trace}")
        return read_trace(args.trace, step)
    if args.prometheus:
        from gpuaas.audit.filters import parse_moment
        from gpuaas.simulate.cluster_history import read_cluster

        since = parse_moment("--since", args.since).timestamp()
        until = parse_moment("--until", args.until).timestamp() if args.until else time.time()
        progress.note(f"reading {args.prometheus} from {args.since} to {args.until or 'now'}")
        return read_cluster(args.prometheus, since, until, step, progress=progress)
    from gpuaas.simulate.synthesis import CALIBRATIONS, load_itp, synthesize

    if not math.isfinite(args.days) or args.days < MIN_DAYS:
        raise ValueError(f"--days: expected a number of days of at least {MIN_DAYS:.3f} (an hour), such as 7 or 30, "
                         f"found {args.days:g}")
    if args.seed < 0:
        raise ValueError(f"--seed: expected a whole number >= 0, found {args.seed}")
    try:
        jobs = load_itp(args.itp)
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(f"--itp {error}") from None
    covered = math.ceil(float(jobs.submission.max()) / 86400.0 - 1e-9)
    if args.days > covered:
        raise ValueError(f"--days: expected at most {covered} days (the ITP jobs given cover {covered}), found "
                         f"{args.days:g}; the original raw-traces.tar.gz (--itp) covers 60")
    progress.note(f"synthesizing {args.days:g} days of the ITP trace ({args.calibration} calibration, seed {args.seed})")
    history = synthesize(jobs, seed=args.seed, days=args.days, step=step, calibration=CALIBRATIONS[args.calibration],
                         progress=lambda share: progress("synthesizing", share))
    if args.write_trace is not None:
        from gpuaas.simulate.trace import write_trace

        write_trace(history, args.write_trace, progress=lambda share: progress("writing trace", share))
        progress.note(f"trace written to {args.write_trace}")
    return history


def run(args: argparse.Namespace) -> int:
    from gpuaas.simulate.cluster_history import ClusterHistoryError
    from gpuaas.simulate.product import ProductSettingsError, load_policy, load_timings
    from gpuaas.simulate.trace import TraceError

    progress = _Progress()
    seconds: dict[str, float] = {}
    try:
        step = _seconds("--step", args.step)
        delay = _seconds("--reaction-delay", args.reaction_delay)
        if step < 1:
            raise ValueError(f"--step: expected a duration of at least 1s such as 1m (Prometheus stores whole "
                             f"seconds), found {args.step!r}")
        if step > MAX_WINDOW:
            raise ValueError(f"--step: expected at most 1d (one sample a day), found {args.step!r}")
        if delay > MAX_REACTION_DELAY:
            raise ValueError(f"--reaction-delay: expected at most 1h (from a webhook delivery to the step reading "
                             f"Prometheus; seconds to minutes in practice), found {args.reaction_delay!r}")
        windows = _windows(args.windows, step)
        _writable_folder("--html", args.html)
        _writable_folder("--write-trace", args.write_trace)
        policy, policy_source = load_policy(args.policy)
        timings = load_timings(args.observability)
        started = time.perf_counter()
        history = _history(args, step, progress)
        seconds["read"] = time.perf_counter() - started
    except (TraceError, ProductSettingsError, ClusterHistoryError, ValueError, OSError) as error:
        print(f"gpuaas simulate: {error}", file=sys.stderr)
        return 2
    if len(history.workloads) == 0:
        print("gpuaas simulate: the history holds no workload; nothing to replay", file=sys.stderr)
        return 2
    sparse = _sparse_grid_note(history)
    if sparse:
        history.warnings.append(sparse)
        progress.note(f"warning: {sparse}")
    from gpuaas.simulate.comparison import Simulator
    from gpuaas.simulate.report import as_json, table, timing_notes, write_html

    started = time.perf_counter()
    progress.note(f"{len(history.workloads):,} workloads, {history.samples / 1e6:.1f} M GPU samples; preparing")
    simulator = Simulator(history, policy, timings, reaction_delay=delay, progress=progress)
    seconds["prepare"] = time.perf_counter() - started
    started = time.perf_counter()
    runs = simulator.compare(sweep=windows, mode=args.mode, variants=not args.no_variants)
    seconds["replay"] = time.perf_counter() - started
    notes = timing_notes(policy, timings)
    document = as_json(history, timings, policy_source, runs, seconds, notes)
    if args.synthesize:
        from gpuaas.simulate.synthesis import calibration

        document["history"]["calibration"] = calibration(history, simulator.samples, args.calibration)
    document["peakMemoryMB"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)
    if args.html is not None:
        target = write_html(args.html, history, timings, policy_source, runs, document)
        progress.note(f"report written to {target}")
    if args.output == "json":
        json.dump(document, sys.stdout, indent=2)
        print()
    else:
        print(table(history, timings, policy_source, runs, notes))
    return 0
