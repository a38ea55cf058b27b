"""`gpuaas audit`: what the automation did to which tenant's workloads, when, why, and what changed.

    gpuaas audit --archive demo-report/runs.db                       # table of runs
    gpuaas audit --archive demo-report/runs.db --tenant vision --since 24h --output json
    gpuaas audit show gpuaas-on-idle-lhvxi --archive demo-report/runs.db
    gpuaas audit report --html audit-report --archive demo-report/runs.db
    gpuaas audit resubmit gpuaas-on-idle-lhvxi --archive demo-report/runs.db -p dry-run=true
    gpuaas audit --argo-server https://argo.example.com:2746 --token "$ARGO_TOKEN" --reaction on-idle

History comes from a run archive (`--archive`, SQLite as the local engine and Argo's archive keep
it) or an Argo Server (`--argo-server`, live and archived workflows). `--namespace` filters on the
Workload's namespace (the tenant's project); the namespace the workflows live in is
`--argo-namespace` (default gpuaas). Exit codes: 0 done, 1 a resubmitted run failed, 2 bad input
or an unreachable history source (the message says what to do).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from gpuaas.invocation import command

OUTCOME_CHOICES = ("applied", "no-op", "skipped-by-policy", "rejected-input", "failed", "unknown")


def _source(parser: argparse.ArgumentParser, nested: bool) -> None:
    """Options valid before and after the action; nested copies must not reset the outer values."""
    default: Any = argparse.SUPPRESS if nested else None
    source = parser.add_argument_group("history source")
    source.add_argument("--archive", type=Path, default=default,
                        help="run archive (SQLite), e.g. demo-report/runs.db")
    source.add_argument("--argo-server", default=default, metavar="URL",
                        help="Argo Server URL (default: $ARGO_SERVER; https:// assumed without a scheme)")
    source.add_argument("--token", default=default, help="bearer token (default: $ARGO_TOKEN)")
    source.add_argument("--insecure-skip-verify", action="store_true",
                        default=argparse.SUPPRESS if nested else False,
                        help="do not verify the Argo Server's TLS certificate")
    source.add_argument("--ca-file", type=Path, default=default, help="CA bundle to verify the Argo Server with")
    source.add_argument("--argo-namespace", default=default,
                        help="namespace of the workflows (default: $ARGO_NAMESPACE or gpuaas)")


def _filters(parser: argparse.ArgumentParser, nested: bool) -> None:
    default: Any = argparse.SUPPRESS if nested else None
    filters = parser.add_argument_group("filters")
    filters.add_argument("--since", default=default, help="runs started at or after: RFC 3339 or an age (24h, 7d)")
    filters.add_argument("--until", default=default, help="runs started at or before: RFC 3339 or an age")
    filters.add_argument("--tenant", default=default, help="ClusterQueue (tenant) from the audit record")
    filters.add_argument("--namespace", default=default, help="the Workload's namespace")
    filters.add_argument("--workload", default=default, help="the Kueue Workload's name")
    filters.add_argument("--reaction", default=default, help="reaction (on-admitted, on-idle, ...); server-side. "
                         "The catch-up sweep's passes that found nothing are listed with --reaction sweep only")
    filters.add_argument("--outcome", default=default, choices=OUTCOME_CHOICES, help="recorded outcome")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (parser.description or "") + " Without an action: list runs."
    _source(parser, nested=False)
    _filters(parser, nested=False)
    parser.add_argument("--output", choices=("table", "json", "csv"), default="table",
                        help="listing format (default: table)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    show = actions.add_parser("show", help="one run in full: event, observed state, plan, actions, outcome")
    show.add_argument("run", metavar="RUN", help="workflow name or uid")
    show.add_argument("--output", choices=("text", "json"), default="text", dest="show_output")
    _source(show, nested=True)
    report = actions.add_parser("report", help="HTML report with charts (matplotlib) and tables")
    report.add_argument("--html", type=Path, required=True, metavar="DIR", help="folder to write index.html and PNGs")
    _source(report, nested=True)
    _filters(report, nested=True)
    resubmit = actions.add_parser("resubmit", help="run it again (Argo Server resubmit, or the local engine)")
    resubmit.add_argument("run", metavar="RUN", help="workflow name or uid")
    resubmit.add_argument("-p", "--parameter", action="append", default=[], metavar="NAME=VALUE",
                          help="override a parameter, e.g. -p dry-run=true (repeatable)")
    resubmit.add_argument("--memoized", action="store_true", help="Argo only: reuse memoized steps")
    resubmit.add_argument("--snapshot", type=Path, default=None,
                          help="local only: cluster snapshot (default: cluster-snapshot.json beside the archive)")
    resubmit.add_argument("--prometheus", default=None, metavar="URL",
                          help="local only: Prometheus the re-run measures GPU activity with (on-idle needs one)")
    _source(resubmit, nested=True)


class _UsageError(ValueError):
    pass


def _history(args: argparse.Namespace) -> Any:
    from gpuaas.audit.history import ArchiveHistory, ArgoConnection, ArgoServerHistory

    server = getattr(args, "argo_server", None) or os.environ.get("ARGO_SERVER")
    archive = getattr(args, "archive", None)
    if archive is not None and getattr(args, "argo_server", None):
        raise _UsageError("give one history source: --archive FILE or --argo-server URL, not both")
    if archive is not None:
        return ArchiveHistory(archive)
    if not server:
        raise _UsageError("no history source: give --archive FILE (e.g. demo-report/runs.db) or --argo-server URL "
                          "(or set ARGO_SERVER)")
    if "://" not in server:
        secure = os.environ.get("ARGO_SECURE", "true").lower() != "false"
        server = ("https://" if secure else "http://") + server
    verify: bool | str = True
    if getattr(args, "insecure_skip_verify", False):
        verify = False
        print(f"warning: not verifying the TLS certificate of {server} (--insecure-skip-verify)", file=sys.stderr)
    elif getattr(args, "ca_file", None) is not None:
        if not args.ca_file.is_file():
            raise _UsageError(f"--ca-file: expected a PEM CA bundle, found no file at {args.ca_file}")
        verify = str(args.ca_file)
    token = getattr(args, "token", None) or os.environ.get("ARGO_TOKEN")
    namespace = getattr(args, "argo_namespace", None) or os.environ.get("ARGO_NAMESPACE") or "gpuaas"
    args.argo_server = server
    return ArgoServerHistory(ArgoConnection(url=server, token=token, namespace=namespace, verify=verify))


def _filter(args: argparse.Namespace) -> Any:
    from gpuaas.audit.filters import RunFilter, parse_moment

    since = getattr(args, "since", None)
    until = getattr(args, "until", None)
    return RunFilter(
        since=parse_moment("--since", since) if since else None,
        until=parse_moment("--until", until) if until else None,
        tenant=getattr(args, "tenant", None), namespace=getattr(args, "namespace", None),
        workload=getattr(args, "workload", None), reaction=getattr(args, "reaction", None),
        outcome=getattr(args, "outcome", None),
    )


def _selected_runs(args: argparse.Namespace, history: Any) -> list[Any]:
    wanted = _filter(args)
    runs = [run for run in history.runs(wanted.label_selector()) if wanted.matches(run)]
    reaction = getattr(args, "reaction", None)
    if reaction and not runs:
        from gpuaas.audit.run import KNOWN_REACTIONS

        if reaction not in KNOWN_REACTIONS:  # a typo, not an empty history (a newer version's name still matches)
            raise _UsageError(f"--reaction: expected one of {', '.join(sorted(KNOWN_REACTIONS))}, found {reaction!r} "
                              f"and no run with that reaction in {history.where}")
    return runs


def run(args: argparse.Namespace) -> int:
    from gpuaas.audit.filters import FilterError
    from gpuaas.audit.history import HistoryError

    try:
        history = _history(args)
        action = getattr(args, "action", None)
        if action == "show":
            return _show(args, history)
        if action == "report":
            return _report(args, history)
        if action == "resubmit":
            return _resubmit(args, history)
        return _list(args, history)
    except (_UsageError, FilterError, HistoryError) as error:
        print(f"gpuaas audit: {error}", file=sys.stderr)
        return 2


def _list(args: argparse.Namespace, history: Any) -> int:
    from gpuaas.audit import listing

    runs = _selected_runs(args, history)
    writer = {"table": listing.write_table, "json": listing.write_json, "csv": listing.write_csv}[args.output]
    try:
        writer(runs, sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:  # `gpuaas audit ... | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _show(args: argparse.Namespace, history: Any) -> int:
    import json

    from gpuaas.audit import listing
    from gpuaas.audit.resubmit import resubmit_commands

    found = history.find(args.run)
    commands = resubmit_commands(found, archive=getattr(args, "archive", None),
                                 argo_server=getattr(args, "argo_server", None))
    if args.show_output == "json":
        document = found.to_dict(full=True)
        document["resubmit"] = [c for c in commands if not c.startswith("#")]
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        listing.write_run(found, commands, sys.stdout)
    return 0


def _report(args: argparse.Namespace, history: Any) -> int:
    from gpuaas.audit.report import write_report

    runs = _selected_runs(args, history)
    folder: Path = args.html
    if folder.exists() and not folder.is_dir():
        raise _UsageError(f"--html {folder}: expected a folder for index.html and its charts, found a file; "
                          "pass a folder path (it is created if missing)")
    try:
        written = write_report(runs, folder, source=history.where, demo_speed=_demo_speed(args))
    except OSError as error:
        raise _UsageError(f"--html {folder}: expected a folder this user can write, found "
                          f"{(error.strerror or str(error)).lower()} ({error.filename or folder}); "
                          "pass another folder") from None
    print(f"wrote {written} ({len(runs)} runs) and its charts")
    return 0


def _demo_speed(args: argparse.Namespace) -> float | None:
    """The demo clock's speed when the archive is a demo's (its summary.json lies beside it), else None."""
    import json

    archive = getattr(args, "archive", None)
    summary = archive.parent / "summary.json" if archive is not None else None
    if summary is None or not summary.is_file():
        return None
    try:
        speed = json.loads(summary.read_text(encoding="utf-8"))["demo_time"]["speed"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return float(speed) if isinstance(speed, int | float) and speed > 0 else None


def _resubmit(args: argparse.Namespace, history: Any) -> int:
    from gpuaas.audit.resubmit import parse_overrides, resubmit_locally

    original = history.find(args.run)
    overrides = parse_overrides(args.parameter)
    archive = getattr(args, "archive", None)
    if archive is not None:
        snapshot = args.snapshot or archive.parent / "cluster-snapshot.json"
        history.close()
        new = resubmit_locally(archive, snapshot, original, overrides, prometheus_url=args.prometheus)
        where = f"local engine (snapshot {snapshot}); appended to {archive}"
        show_hint = f"{command()} audit show {new.workflow} --archive {archive}"
    else:
        if args.prometheus or args.snapshot:
            raise _UsageError("--snapshot and --prometheus apply to a local re-run (--archive) only; "
                              "on a cluster the workflow's pods use the cluster's Prometheus")
        new = history.resubmit(original, [f"{k}={v}" for k, v in overrides.items()], memoized=args.memoized)
        where = history.where
        show_hint = f"{command()} audit show {new.workflow} --argo-server {args.argo_server}"
    print(f"resubmitted {original.workflow} as {new.workflow} on {where}")
    print(f"  phase {new.phase or 'Pending'}, outcome {new.outcome}" + (f": {new.reason}" if new.reason else ""))
    print(f"  details: {show_hint}")
    return 1 if new.outcome == "failed" else 0
