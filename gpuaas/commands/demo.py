"""`gpuaas demo`: run the whole product on this machine and write demo-report/.

The local engine runs the RENDERED manifests (manifests/): event sources feed the Sensors, which
start the WorkflowTemplates, whose steps change the cluster. See docs/local-engine.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from gpuaas.invocation import command

REQUIRED_KINDS = ("WorkflowTemplate", "Sensor", "EventSource")


MAX_SPEED = 1000.0


def _speed(text: str) -> float:
    """--speed: demo seconds per wall second, a number from 1 to MAX_SPEED.

    Below 1 the demo clock runs slower than the wall clock: the story's five demo hours would take
    more than five real hours (and near 0 the pauses overflow the platform's sleep). Above 1000 the
    waits that take wall time at any speed (Prometheus's idle window, about 11 s; the reactions) stretch
    the demo clock by hours each and can run it past midnight, where its HH:MM wraps."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of demo seconds per wall second (e.g. 300), "
                                         f"found {text!r}") from None
    if not math.isfinite(value) or not 1 <= value <= MAX_SPEED:
        raise argparse.ArgumentTypeError(f"expected a number from 1 to {MAX_SPEED:g} (1 is real time; 300, the "
                                         f"default, runs the story in about a minute), found {text}")
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output-dir", type=Path, default=Path("demo-report"),
                        help="where to write summary.json, index.html, charts, runs.db (default: demo-report)")
    parser.add_argument("--manifests", type=Path, default=None,
                        help="rendered manifests to run (default: the repository's manifests/)")
    parser.add_argument("--steps", choices=("in-process", "subprocess"), default="in-process",
                        help="run each step in-process (fast) or as `python -m steps ...` like a pod")
    parser.add_argument("--metrics", choices=("auto", "prometheus", "in-process"), default="auto",
                        help="auto: real Prometheus/Alertmanager when installed, else the in-process idle rule")
    parser.add_argument("--speed", type=_speed, default=None,
                        help=f"demo seconds per wall second, 1 to {MAX_SPEED:g} (default: 300; 120 with --stack real)")
    parser.add_argument("--stack", choices=("local", "real"), default="local",
                        help="local: the local engine (about a minute); real: the real stack of `gpuaas cluster up "
                             "--with events` (Kueue, KubeRay, training-operator, Argo Events and Workflows; 6-7 "
                             "minutes measured on a ready cluster, plus 2-7 to start one)")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="with --stack real: a ready cluster started with `gpuaas cluster up --with events "
                             "--state-dir DIR` (default: start one in a new folder and stop it at the end); an "
                             "earlier demo's namespaces team-research, team-vision, team-serving there are deleted "
                             "first, and any of those names or ClusterQueues research/vision/serving or flavor a100 "
                             "that the demo did not make stops it before anything changes")
    parser.add_argument("--output", choices=("table", "json"), default="table",
                        help="table: progress, timeline and summary; json: summary.json on stdout")


def _print_table(rows: list[dict[str, str]], out) -> None:
    headers = ["time", "event", "sensor", "workflow", "outcome"]
    widths = {h: max([len(h)] + [len(str(r.get(h, ""))) for r in rows]) for h in headers}
    widths["event"] = min(widths["event"], 58)
    line = "  ".join(h.upper().ljust(widths[h]) for h in headers).rstrip()
    print(line, file=out)
    for row in rows:
        print("  ".join(str(row.get(h, ""))[: widths[h]].ljust(widths[h]) for h in headers).rstrip(), file=out)


def quota_advice_for_demo(prometheus_url: str, cluster_queues: list[dict[str, Any]], wall_seconds: float,
                    end: float) -> dict[str, Any]:
    """`gpuaas quota advise` over the whole demo run (its window is the run's wall time: demo time is
    compressed): the advice as `--output json` prints it, plus each tenant's sampled series for the
    report's chart. DemoOptions.quota_advisor: the engine calls it, gpuaas owns it."""
    from prometheus_api_client import PrometheusConnect

    from gpuaas.quota.advice import advise
    from gpuaas.quota.usage import Window, read_history, tenant_usage

    window = Window(end=end, seconds=max(10, math.ceil(wall_seconds)))
    history = read_history(PrometheusConnect(url=prometheus_url, disable_ssl=True), window)
    result = advise(tenant_usage(history, cluster_queues), window=f"{window.seconds}s of wall time (the whole demo)")
    out = result.to_dict()
    out["series"] = {t.usage.tenant: {name: [[round(ts - window.start, 2), value] for ts, value in points]
                                      for name, points in history.timeline(t.usage.tenant).items()
                                      if name in ("allocated", "pending", "nominal")}
                     for t in result.tenants}
    out["wall_seconds"] = window.seconds
    return out


class _Unusable(ValueError):
    pass


def _check_manifests(folder: Path) -> None:
    """The engine runs the rendered YAML: say which kinds are missing instead of failing mid-way."""
    from engine.rendered import RenderedManifests

    try:
        rendered = RenderedManifests.load(folder)
    except (FileNotFoundError, ValueError) as error:
        raise _Unusable(f"--manifests: {error}") from None
    missing = [kind for kind in REQUIRED_KINDS if not rendered.of_kind(kind)]
    if missing:
        raise _Unusable(f"--manifests {folder}: expected the rendered {', '.join(REQUIRED_KINDS)} objects, found no "
                        f"{', '.join(missing)}; pass the folder `{command()} render` writes (manifests/)")


REAL_SPEED = 120.0
"""--stack real's default demo speed (gpuaas.demo_real.REAL_SPEED says why)."""


def _check_real(args: argparse.Namespace) -> None:
    """--stack real: the options that mean something only locally are refused; a given --state-dir must be
    a ready cluster with the events part, where nothing of the demo's names (namespaces, ClusterQueues,
    flavor) is someone else's (checked before anything starts)."""
    if args.manifests is not None:
        raise _Unusable("--manifests: only with --stack local (the real stack runs the rendered base installed by "
                        "gpuaas.cluster.install)")
    if args.steps != "in-process" or args.metrics != "auto":
        raise _Unusable("--steps/--metrics: only with --stack local (on the real stack the steps run as pods on the "
                        "real node and the stack's Prometheus and Alertmanager raise the alerts)")
    if args.state_dir is not None:
        from kubernetes import config

        from gpuaas.demo_real import StackNotReady, check_demo_names_free, check_stack

        try:
            status = check_stack(args.state_dir)
        except StackNotReady as error:
            raise _Unusable(str(error)) from None
        try:
            check_demo_names_free(config.new_client_from_config(config_file=str(status["kubeconfig"])))
        except StackNotReady as error:
            raise _Unusable(str(error)) from None
        except Exception as error:  # noqa: BLE001 - a gone apiserver, a broken kubeconfig: one line, not a traceback
            first = (str(error).strip().splitlines() or [""])[0]
            raise _Unusable(f"--state-dir {args.state_dir}: expected its apiserver to answer, found "
                            f"{type(error).__name__}: {first}; see `{command()} cluster status --state-dir "
                            f"{args.state_dir}`") from None


def _stack_errors() -> tuple[type[BaseException], ...]:
    """What the real stack's clients raise when a component fails or refuses (not the demo's own defects)."""
    import subprocess

    import urllib3
    from kubernetes.client.rest import ApiException

    return RuntimeError, ApiException, urllib3.exceptions.HTTPError, subprocess.TimeoutExpired


def run(args: argparse.Namespace) -> int:
    from engine.rendered import DEFAULT_MANIFESTS
    from gpuaas.report_folder import ReportFolder, ReportFolderError

    real = getattr(args, "stack", "local") == "real"
    folder = ReportFolder(args.output_dir)
    try:
        folder.check()
        if real:
            _check_real(args)
        else:
            if getattr(args, "state_dir", None) is not None:
                raise _Unusable("--state-dir: only with --stack real (the local engine needs no cluster)")
            _check_manifests(args.manifests or DEFAULT_MANIFESTS)
        with folder:  # locked against a second demo; the run writes beside the report, swapped in at the end
            return _run_into(args, folder, real)
    except (_Unusable, ReportFolderError) as error:
        print(f"gpuaas demo: {error}", file=sys.stderr)
        return 2


def _stop_words(args: argparse.Namespace, real: bool, had_report: bool) -> str:
    """What a stopped or failed demo left: the same promise for a signal and a defect."""
    if real and args.state_dir is None:
        started = "the cluster it started (stopped and its folder removed)"
    elif real:
        started = f"its commands (the cluster in {args.state_dir} stays up, with the demo's namespaces in it)"
    else:
        started = "the engine, Prometheus and Alertmanager it started"
    kept = (f"{args.output_dir} keeps the previous report" if had_report
            else f"no report was written to {args.output_dir}")
    return f"stopped {started}, removed its temporary folders; {kept}"


def _run_into(args: argparse.Namespace, folder: Any, real: bool) -> int:
    """The run, writing into folder.staging; the report swapped in only when complete."""
    from engine.demo import DemoOptions, DemoStalled, run_demo
    from engine.rendered import DEFAULT_MANIFESTS
    from engine.report import outcome_words, started_words
    from gpuaas.manifests import observability
    from gpuaas.stops import Stopped, show_tracebacks

    as_json = args.output == "json"
    progress_stream = sys.stderr if as_json else sys.stdout

    def progress(text: str) -> None:
        print(text, file=progress_stream, flush=True)

    had_report = args.output_dir.is_dir() and any(args.output_dir.iterdir())
    speed = args.speed if args.speed is not None else (REAL_SPEED if real else 300.0)
    options = DemoOptions(output_dir=folder.staging, manifests=args.manifests or DEFAULT_MANIFESTS,
                          step_mode=args.steps, speed=speed, metrics=args.metrics, progress=progress,
                          alert_rules=observability, quota_advisor=quota_advice_for_demo)
    try:
        if real:
            from gpuaas.demo_real import run_real_demo

            options.wait_timeout, options.idle_timeout = 300.0, 300.0
            result = run_real_demo(options, args.state_dir)
        else:
            result = run_demo(options)
    except Stopped as stop:
        print(f"gpuaas demo: stopped by {stop}: {_stop_words(args, real, had_report)}", file=sys.stderr)
        return stop.exit_code
    except DemoStalled as error:
        print(f"gpuaas demo: the scenario stalled: {error}; {_stop_words(args, real, had_report)}", file=sys.stderr)
        return 1
    except FileNotFoundError as error:
        print(f"gpuaas demo: {error}", file=sys.stderr)
        return 2
    except Exception as error:
        # the real stack: gpuaas.cluster.install.InstallError, ClusterError, HistoryError (RuntimeErrors), the
        # kubernetes client's ApiException, urllib3's errors, a kubectl or argo past its timeout: one line
        lines = "; ".join(line.strip() for line in str(error).splitlines() if line.strip())
        if real and isinstance(error, _stack_errors()):
            print(f"gpuaas demo: the real stack failed: {type(error).__name__}: {lines}; "
                  f"{_stop_words(args, real, had_report)}", file=sys.stderr)
            return 1
        if show_tracebacks():
            raise
        print(f"gpuaas demo: failed (a defect of gpuaas): {type(error).__name__}: {lines}; "
              f"{_stop_words(args, real, had_report)}; GPUAAS_TRACEBACK=1 shows where", file=sys.stderr)
        return 70
    folder.commit()
    result.output_dir = args.output_dir
    summary = result.summary
    if as_json:
        print(json.dumps(summary, indent=2))
        return 0
    print()
    _print_table(summary["timeline"], sys.stdout)
    print()
    speed = summary["demo_time"]["speed"]
    print(f"runs: {summary['runs']} ({started_words(summary)})")
    print(f"GPU-hours reclaimed: "
          f"{summary['gpu_hours_reclaimed']:.2f} on the demo clock ({summary['gpu_hours_reclaimed_wall']:.4g} as the "
          f"steps measured them in wall time; the demo clock runs {speed:g}x)")
    for name, reaction in summary["reactions"].items():
        runs = f"{reaction['runs']} run" + ("" if reaction["runs"] == 1 else "s")
        print(f"  {name:<26} {runs:>8}   outcomes: {outcome_words(name, reaction)}")
    sweep = summary.get("sweep") or {}
    if sweep.get("passes"):
        print(f"catch-up sweep: {sweep['passes']} passes; recorded {sweep['recorded']} of the runs above without a pod, "
              f"delivered {sweep['delivered']} to a step" + (f"; delivered {sweep['idle_warnings']} idle warning(s) "
                                                             "past their grace to gpuaas-on-idle"
                                                             if sweep.get("idle_warnings") else ""))
    print(f"metrics: {summary['metrics']}")
    if summary.get("stack") == "real":
        print(f"stand-ins: {'; '.join(summary['stand_ins'])}")
        print(f"report: {result.output_dir / 'index.html'}   runs (read from the {summary['runs_source']}): "
              f"{result.output_dir / 'runs.json'}   audit: {summary['files']['audit']}")
        return 0
    print(f"report: {result.output_dir / 'index.html'}   archive: {result.output_dir / 'runs.db'}   "
          f"(try: {command()} audit --archive {result.output_dir / 'runs.db'})")
    return 0
