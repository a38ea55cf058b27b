"""`gpuaas route`: evaluate the rendered Sensors on events and say which workflows they would
submit, and for everything that did not fire, why.

    gpuaas route --manifests manifests/ event.json
    gpuaas route --manifests manifests/ --events events.jsonl          # one JSON line per event
    gpuaas route --manifests manifests/ --events events.jsonl --output text

Events are CloudEvents in JSON structured mode: `source` = EventSource name, `subject` = event
name, `type` = EventSource type, `data` = what Argo Events delivers. With `--events`, the
events share one router, so `&&` conditions and duplicate ids behave as in one sensor pod.
Exit code: 0 when every event was read, 2 on bad input (the message names the line and field).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from gpuaas.invocation import command

DEFAULT_MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("event", nargs="?", type=Path, help="a CloudEvent JSON file ('-' for stdin)")
    parser.add_argument("--manifests", type=Path, default=DEFAULT_MANIFESTS,
                        help="folder with the rendered Sensors and EventSources (default: the repository's manifests/)")
    parser.add_argument("--events", type=Path, help="a JSON-lines file of CloudEvents, routed in order")
    parser.add_argument("--output", choices=("json", "text"), default="json",
                        help="json (default): one object per event; text: a readable explanation")
    parser.add_argument("--only-subscribed", action="store_true",
                        help="leave out sensors that do not listen to the event's source and name")


def run(args: argparse.Namespace) -> int:
    from routing import EventError, ManifestError, Router

    if (args.event is None) == (args.events is None):
        print("gpuaas route: give exactly one of EVENT.json or --events FILE.jsonl", file=sys.stderr)
        return 2
    try:
        router = Router.from_manifests(args.manifests, explain_unsubscribed=not args.only_subscribed)
    except ManifestError as exc:
        print(f"gpuaas route: {exc}", file=sys.stderr)
        return 2
    if not router.sensors:
        print(f"gpuaas route: no Sensor found under {args.manifests} (run `{command()} render` first?)", file=sys.stderr)
        return 2
    for warning in router.load_warnings:
        print(f"warning: {warning}", file=sys.stderr)
    out = sys.stdout
    try:
        for where, event in _read_events(args):
            try:
                result = router.route(event)
            except EventError as exc:
                print(f"gpuaas route: {where}: {exc}", file=sys.stderr)
                return 2
            if args.output == "json":
                out.write(json.dumps(result.to_dict(), separators=(",", ":") if args.events else None,
                                     indent=None if args.events else 2) + "\n")
            else:
                _write_text(result, out)
    except _InputError as exc:
        print(f"gpuaas route: {exc}", file=sys.stderr)
        return 2
    return 0


class _InputError(ValueError):
    pass


def _read_events(args: argparse.Namespace) -> Iterator[tuple[str, Any]]:
    if args.events is not None:
        if str(args.events) == "-":
            yield from _read_lines("<stdin>", sys.stdin)
            return
        try:
            with open(args.events, encoding="utf-8") as handle:
                yield from _read_lines(str(args.events), handle)
        except OSError as exc:
            raise _InputError(f"cannot read --events {args.events}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise _InputError(_not_utf8(str(args.events), exc)) from None
        return
    path = args.event
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except OSError as exc:
        raise _InputError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise _InputError(_not_utf8(str(path), exc)) from None
    if not text.strip():
        raise _InputError(f"{'<stdin>' if str(path) == '-' else path}: expected a JSON CloudEvent, found "
                          f"{'an empty file' if not text else 'only white space'}")
    try:
        yield str(path), _json(text)
    except ValueError as exc:
        lines = "; one event per line (JSON lines): pass it with --events" if "Extra data" in str(exc) else ""
        raise _InputError(f"{path}: not a JSON CloudEvent: {exc}{lines}") from None


def _json(text: str) -> Any:
    """json.loads, with nesting too deep for Python's parser (about 1,000 levels) a ValueError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("expected JSON nested at most about 900 levels deep (what Python's parser reads), "
                         "found deeper nesting") from None


def _not_utf8(name: str, error: UnicodeDecodeError) -> str:
    return (f"{name}: expected UTF-8 JSON (CloudEvents as the EventSource publishes them), found a byte "
            f"that is not UTF-8 (0x{error.object[error.start]:02x}); save the file as UTF-8")


def _read_lines(name: str, handle: TextIO) -> Iterator[tuple[str, Any]]:
    number = 0
    events = 0
    for number, line in enumerate(handle, start=1):
        if not line.strip():
            continue
        try:
            event = _json(line)
        except ValueError as exc:
            raise _InputError(f"{name}:{number}: not a JSON object: {exc}") from None
        events += 1
        yield f"{name}:{number}", event
    if not events:  # routing nothing and exiting 0 read as "no Sensor fires", which nothing showed
        raise _InputError(f"--events {name}: expected one JSON CloudEvent per line, found "
                          f"{'an empty file' if not number else f'{number} blank line(s)'}")


def _write_text(result: Any, out: TextIO) -> None:
    event = result.event
    out.write(f"event {event['id']}  {event['source']}/{event['subject']}  type={event['type'] or '?'}\n")
    out.writelines(f"  ! {warning}\n" for warning in result.warnings)
    if not result.triggered:
        out.write("  nothing triggered\n")
    for t in result.triggered:
        wf = t.workflow or {}
        params = ((wf.get("spec") or {}).get("arguments") or {}).get("parameters") or []
        template = ((wf.get("spec") or {}).get("workflowTemplateRef") or {}).get("name", "-")
        out.write(f"  FIRES  {t.sensor}/{t.trigger} -> {t.operation} WorkflowTemplate {template} "
                  f"(dependencies: {', '.join(t.dependencies)})\n")
        for p in params:
            value = str(p.get("value", ""))
            out.write(f"           {p.get('name')} = {value if len(value) <= 100 else value[:100] + '...'}\n")
    subscribed = [s for s in result.skipped if not s.reason.startswith("not subscribed")]
    for s in subscribed:
        trigger = f" trigger {s.trigger}:" if s.trigger else ""
        out.write(f"  skip   {s.sensor}/{s.dependency}:{trigger} {s.reason}\n")
    others = sorted({s.sensor for s in result.skipped if s.reason.startswith("not subscribed")})
    if others:
        out.write(f"  (not listening to this event: {', '.join(others)})\n")
