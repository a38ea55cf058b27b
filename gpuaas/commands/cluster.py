"""`gpuaas cluster`: build and run the real control plane (Kubernetes, Kueue, KEDA, KWOK) on loopback.

    gpuaas cluster build                 # go install the pinned components into the cache (a cache hit the 2nd time)
    gpuaas cluster up [--with node,argo,events | --with all] [--idle-window 30s] [--monitoring PROFILE]   # prints `export KUBECONFIG=...` and `export PATH=...`
    gpuaas cluster status [--output json]
    gpuaas cluster down

`--state-dir DIR` runs a second cluster beside the first. The cache is `$GPUAAS_STACK_CACHE`
(default `.stack-cache/` in the checkout); the default state dir is `<cache>/cluster`.
Exit codes: 0 success, 1 a component failed (its last log lines are printed), 2 bad usage, 130 or 143 `up`
stopped by Ctrl-C or SIGTERM while starting (what it had started is stopped again; nothing is handed over
until the cluster is ready).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

MIN_TIMEOUT, MAX_TIMEOUT = 10.0, 86400.0
"""`cluster up --timeout` (seconds): below 10 nothing is ready yet; above a day a stuck start is not noticed."""


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    build = actions.add_parser("build", help="build the pinned components (go install) into the cache")
    build.add_argument("components", nargs="*", help="only these (folder names under stack/)")
    build.add_argument("--output", choices=("text", "json"), default="text")
    build.add_argument("--argo-ui", action="store_true",
                       help="also build the Argo UI from the pinned module's source (yarn, webpack: many minutes, "
                            "the npm registry) for `argo server` to embed; kept for later builds")
    for name, text in (("up", "start the cluster and wait until every component is ready"),
                       ("down", "stop every process the cluster started"),
                       ("status", "each component's state, pid, endpoint, log file and memory")):
        sub = actions.add_parser(name, help=text, description=text)
        sub.add_argument("--state-dir", type=Path, default=None,
                         help="the cluster's folder (default: <cache>/cluster); one per cluster")
        if name in ("up", "status"):
            sub.add_argument("--output", choices=("text", "json"), default="text")
        if name == "up":
            sub.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for readiness (600)")
            sub.add_argument("--no-build", action="store_true", help="fail instead of building missing binaries")
            sub.add_argument("--with", dest="parts", action="append", default=[], metavar="PART",
                             help="also start PART (repeat, or comma-separated): node (a real kubelet for pods; "
                                  "root), argo (Argo Workflows, archive, Argo Server), events (Argo Events; implies node and "
                                  "argo), "
                                  "all")
            sub.add_argument("--monitoring", default="plain", metavar="PROFILE",
                             choices=("plain", "kube-prometheus-stack", "openshift"),
                             help="who configures Prometheus and Alertmanager: plain (the stack writes their files; "
                                  "default), kube-prometheus-stack or openshift (the Prometheus Operator, with that "
                                  "platform's resources: docs/platforms.md)")
            sub.add_argument("--idle-window", default=None, metavar="DURATION",
                             help="with the events part: the window of the product's GPUWorkloadIdle rule in the "
                                  "stack's Prometheus (default 30s, to see the alert within a minute; `for` is a "
                                  "sixth of it, at least 5s; the rendered rule uses 30m)")


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    state_dir = getattr(args, "state_dir", None)
    if state_dir is not None and state_dir.exists() and not state_dir.is_dir():
        print(f"gpuaas cluster {args.action}: --state-dir: expected a folder (or a path to create), found a file "
              f"at {state_dir}; pass another path", file=sys.stderr)
        return 2
    try:
        return {"build": _build, "up": _up, "down": _down, "status": _status}[args.action](args)
    except BrokenPipeError:  # `gpuaas cluster status | head`: the reader left, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _build(args: argparse.Namespace) -> int:
    from gpuaas.cluster.binaries import BuildFailed, build_all, cache_dir, components

    known = [c.name for c in components()]
    unknown = sorted(set(args.components) - set(known))
    if unknown:
        print(f"gpuaas cluster build: expected components among {', '.join(known)}, found {', '.join(unknown)}; "
              "name folders under stack/", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        results = build_all(args.components or None, progress=_progress, build_ui=args.argo_ui)
    except BuildFailed as error:
        print(f"gpuaas cluster build: {error}", file=sys.stderr)
        return 1
    total = time.monotonic() - started
    if args.output == "json":
        print(json.dumps({"cache": str(cache_dir()), "seconds": round(total, 1),
                          "components": [{"name": r.component, "seconds": round(r.seconds, 1), "cached": r.cached,
                                          "programs": list(r.programs)} for r in results]}))
    else:
        width = max(len(r.component) for r in results) if results else 9
        print(f"{'component':<{width}}  {'seconds':>8}  {'result':<10}  programs")
        for r in results:
            print(f"{r.component:<{width}}  {r.seconds:>8.1f}  {'cache hit' if r.cached else 'built':<10}  "
                  f"{', '.join(r.programs)}")
        print(f"{'total':<{width}}  {total:>8.1f}  binaries in {cache_dir() / 'bin'}")
    return 0


def _up(args: argparse.Namespace) -> int:
    from gpuaas.cluster.binaries import BuildFailed, build_all
    from gpuaas.cluster.stack import PARTS, Cluster, ClusterError
    from gpuaas.invocation import command
    from gpuaas.stops import Stopped

    if any(not given.strip(" ,") for given in args.parts):
        print(f"gpuaas cluster up: --with: expected parts among {', '.join(PARTS)} or all, found an empty value",
              file=sys.stderr)
        return 2
    if not math.isfinite(args.timeout) or not MIN_TIMEOUT <= args.timeout <= MAX_TIMEOUT:
        print(f"gpuaas cluster up: --timeout: expected seconds from {MIN_TIMEOUT:g} to {MAX_TIMEOUT:g} (a day; "
              f"the stack starts in 1 to 7 minutes), found {args.timeout:g}", file=sys.stderr)
        return 2
    parts = {part.strip() for given in args.parts for part in given.split(",") if part.strip()}
    if "all" in parts:
        parts = (parts - {"all"}) | set(PARTS)
    unknown = sorted(parts - set(PARTS))
    if unknown:
        print(f"gpuaas cluster up: --with: expected parts among {', '.join(PARTS)} or all, found "
              f"{', '.join(unknown)}", file=sys.stderr)
        return 2
    if args.idle_window is not None and "events" not in parts:
        print("gpuaas cluster up: --idle-window: only the events part loads the alert rules; add `--with events`",
              file=sys.stderr)
        return 2
    if args.idle_window is not None:
        from gpuaas.cluster.alerting import IdleRule

        try:
            IdleRule.from_window(args.idle_window)
        except ValueError as error:
            print(f"gpuaas cluster up: {error}", file=sys.stderr)
            return 2
    cluster = Cluster(args.state_dir, progress=_progress)
    try:
        if not args.no_build:
            try:
                build_all(progress=_progress)
            except BuildFailed as error:
                print(f"gpuaas cluster up: {error}", file=sys.stderr)
                return 1
        try:
            state = cluster.up(timeout_s=args.timeout, parts=parts, monitoring=args.monitoring,
                               **({"idle_window": args.idle_window} if args.idle_window is not None else {}))
        except ClusterError as error:
            print(f"gpuaas cluster up: {error}", file=sys.stderr)
            return 1
    except Stopped as stop:  # nothing was handed over: up() stopped what it had started (module docstring)
        started = cluster.stopped_on_failure
        print(f"gpuaas cluster up: stopped by {stop} while starting: " + (
            f"stopped the {started} processes it had started; their logs stay in {cluster.logs}" if started
            else "no process of the cluster had started yet"), file=sys.stderr)
        return stop.exit_code
    # The stack is up and handed over: what follows only helps, and never turns that into a failure.
    values = _admin_values(cluster.state_dir, args.monitoring or "plain") if "events" in parts else None
    if args.output == "json":
        print(json.dumps({**cluster.status(), **({"adminValues": str(values)} if values else {})}, indent=2))
    else:
        _progress(f"cluster ready in {state.ready_seconds:.1f}s (state in {state.state_dir}); stop it with "
                  f"`{command()} cluster down" + (f" --state-dir {args.state_dir}`" if args.state_dir else "`"))
        if values:
            _progress(f"to install the product with your values (namespace gpuaas and the webhook Secret exist "
                      f"already): helm install gpuaas {_chart()} -n gpuaas -f YOURS.yaml -f {values} --server-side=false")
        print(f"export KUBECONFIG={state.kubeconfig}")
        tools = _tool_dirs()
        if tools:
            print(f"export PATH={os.pathsep.join(str(d) for d in tools)}{os.pathsep}$PATH")
    return 0


def _chart() -> Path:
    """This checkout's chart by its absolute path (the printed helm line works from any folder); imported here,
    not at the CLI's start-up."""
    from gpuaas.manifests.chart import CHART

    return Path(__file__).resolve().parents[2] / CHART


def _tool_dirs() -> list[Path]:
    """Where the built kubectl, helm and argo are (the stack's cache), those that are built: on PATH after
    `eval "$(gpuaas cluster up)"`."""
    from gpuaas.cluster.binaries import bin_dir

    return [bin_dir(component) for component, name in
            (("kubernetes", "kubectl"), ("helm", "helm"), ("argo-workflows", "argo"))
            if (bin_dir(component) / name).is_file()]


def _admin_values(state_dir: Path, monitoring: str) -> Path | None:
    """The stack's values file for the product's `helm install` (gpuaas.cluster.product.admin_values), or None
    with a line on stderr when it cannot be written (the stack is up regardless)."""
    from gpuaas.cluster.product import write_admin_values

    try:
        return write_admin_values(state_dir, monitoring)
    except OSError as error:
        _progress(f"could not write the stack's values file for `helm install` into {state_dir}: {error}; the "
                  "stack is up (gpuaas.cluster.product.admin_values has its settings)")
        return None


def _down(args: argparse.Namespace) -> int:
    from gpuaas.cluster.stack import Cluster

    cluster = Cluster(args.state_dir, progress=_progress)
    stopped = cluster.down()
    _progress(f"stopped {len(stopped)} processes" if stopped else f"nothing running from {cluster.state_dir}")
    return 0


def _status(args: argparse.Namespace) -> int:
    from gpuaas.cluster.stack import Cluster

    report = Cluster(args.state_dir).status()
    if args.output == "json":
        print(json.dumps(report, indent=2))
        return 0
    print(f"cluster: {report['phase']} ({report['stateDir']})" +
          (f"; parts: {', '.join(report['parts'])}" if report.get("parts") else ""))
    if report.get("kubeconfig"):
        print(f"kubeconfig: {report['kubeconfig']}")
    if report.get("idleRule"):
        print(f"idle rule: GPUWorkloadIdle window {report['idleRule']['window']}, for {report['idleRule']['for']}")
    for name, endpoint in (report.get("endpoints") or {}).items():
        print(f"{name}: {endpoint}")
    rows = [("component", "state", "pid", "rss MiB", "endpoint", "log")]
    for c in report["components"]:
        rss = f"{c['rssBytes'] / 2**20:.0f}" if c["rssBytes"] else "-"
        rows.append((c["name"], c["state"], str(c["pid"]), rss, c["endpoint"] if c["running"] else "-", c["log"]))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0
