"""Runs as a table, JSON or CSV, and one run in full (`gpuaas audit show`).

The table has one row per run. A run with several step records (the on-idle fan-out: the alert
split plus one child per alert) gets an indented row per record under it, so a release that
failed for one workload of a group is visible without opening the run.
"""

from __future__ import annotations

import csv
import json
import re
from typing import Any, TextIO

from gpuaas.audit.run import Run, StepRecord
from gpuaas.invocation import command

COLUMNS = ("started", "reaction", "tenant", "namespace", "workload", "outcome", "workflow")
CSV_COLUMNS = ("started", "finished", "reaction", "tenant", "namespace", "workload", "outcome", "reason",
               "phase", "workflow", "uid", "archived", "template", "steps")
_ITEM_SUFFIX = re.compile(r"^([^(]+)\((\d+)(?::.*)?\)$")


def step_label(step: StepRecord) -> str:
    """'on-idle(0:{...long item...})' -> 'on-idle(0)'."""
    match = _ITEM_SUFFIX.match(step.display_name)
    return f"{match.group(1)}({match.group(2)})" if match else step.display_name


def _short_time(value: str | None) -> str:
    return (value or "-").replace("T", " ").removesuffix("Z")[:19]


def _cell(value: str, width: int) -> str:
    return value if len(value) <= width else value[: width - 1] + "~"


def write_table(runs: list[Run], out: TextIO) -> None:
    rows: list[tuple[str, ...]] = []
    for run in runs:
        outcome = run.outcome + ("" if run.reaction_known else " (unknown reaction)")
        rows.append((_short_time(run.started), run.reaction, run.tenant or "-", run.namespace or "-",
                     run.workload or "-", outcome, run.workflow))
        for step in run.children:
            namespace, workload = step.workload_ref
            rows.append(("", f"  - {step_label(step)}", step.tenant or "-", namespace or "-", workload or "-",
                         step.outcome, ""))
    widths = [len(c) for c in COLUMNS]
    limits = (19, 28, 16, 20, 40, 34, 40)
    for row in rows:
        widths = [min(limits[i], max(widths[i], len(v))) for i, v in enumerate(row)]
    out.write("  ".join(c.upper().ljust(widths[i]) for i, c in enumerate(COLUMNS)).rstrip() + "\n")
    for row in rows:
        out.write("  ".join(_cell(v, widths[i]).ljust(widths[i]) for i, v in enumerate(row)).rstrip() + "\n")
    failed = sum(1 for r in runs if r.outcome == "failed")
    unknown = sum(1 for r in runs if r.outcome == "unknown")
    out.write(f"\n{len(runs)} run(s); {failed} failed, {unknown} unknown; times in UTC. "
              f"`{command()} audit show WORKFLOW` for one run in full.\n")


def write_json(runs: list[Run], out: TextIO) -> None:
    json.dump([r.to_dict() for r in runs], out, indent=2)
    out.write("\n")


def write_csv(runs: list[Run], out: TextIO) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for run in runs:
        writer.writerow([run.started or "", run.finished or "", run.reaction, run.tenant, run.namespace,
                         run.workload, run.outcome, run.reason or "", run.phase, run.workflow, run.uid,
                         "true" if run.archived else "false", run.template, len(run.steps)])


def _compact(value: Any, limit: int = 400) -> str:
    text = json.dumps(value, sort_keys=True, separators=(", ", ": "))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _target(target: Any) -> str:
    if not isinstance(target, dict):
        return str(target)
    kind = target.get("kind", "")
    where = "/".join(str(target[k]) for k in ("namespace", "name") if target.get(k))
    return f"{kind} {where}".strip()


def _delivery(delivery: dict) -> str:
    """How the reaction reached the step, in words (docs/catch-up.md): which transition, via what, how late
    and why, and whether it was a duplicate or a stale delivery."""
    transition = delivery.get("transition") if isinstance(delivery.get("transition"), dict) else {}
    words = [f"via {delivery.get('via') or '?'}", f"transition {transition.get('key') or delivery.get('delivered') or '-'}"]
    if delivery.get("duplicateOf"):
        first = delivery["duplicateOf"]
        words.append(f"DUPLICATE of run {first.get('run')} ({first.get('via')}, {first.get('at')}): nothing changed"
                     if delivery.get("via") != "hand" else f"re-applied by hand; answered by run {first.get('run')}")
    if delivery.get("superseded"):
        words.append(f"superseded (the delivery named {delivery.get('delivered')})")
    if delivery.get("late"):
        words.append(f"LATE by {delivery.get('lateSeconds')}s: {delivery.get('whyLate')}")
    elif delivery.get("lateSeconds") is not None:
        words.append(f"{delivery.get('lateSeconds')}s after the transition")
    if delivery.get("marked"):
        words.append("marked handled on the Workload")
    return "; ".join(words)


def _write_step(step: StepRecord, out: TextIO) -> None:
    data = step.data
    attempts = f", {step.attempts} attempts" if step.attempts > 1 else ""
    out.write(f"\n--- step {step_label(step)} [{step.role}] {step.phase}{attempts}: {step.outcome}\n")
    if step.reason:
        out.write(f"  reason:     {step.reason}\n")
    if step.record is None:
        out.write(f"  record:     none ({step.record_problem})\n")
        return
    namespace, workload = step.workload_ref
    out.write(f"  reaction:   {step.reaction}{'  (dry run)' if data.get('dryRun') else ''}\n")
    out.write(f"  workload:   {namespace}/{workload}  tenant: {step.tenant or '-'}  "
              f"cohort: {data.get('cohort') or '-'}\n" if workload else f"  tenant:     {step.tenant or '-'}\n")
    event = data.get("event")
    out.write(f"  event:      {_compact(event) if event else 'none in the record (hand submission, resubmission or a fan-out child)'}\n")
    delivery = data.get("delivery")
    if isinstance(delivery, dict):
        out.write(f"  delivery:   {_delivery(delivery)}\n")
    observed = data.get("observed")
    if observed:
        out.write("  observed:\n")
        out.writelines(f"    {key}: {_compact(value, 300)}\n" for key, value in (observed.items() if isinstance(observed, dict) else [("value", observed)]))
    plan = data.get("plan") if isinstance(data.get("plan"), dict) else {}
    out.write("  plan:\n")
    out.writelines(f"    - {reason}\n" for reason in plan.get("reasons") or [])
    for action in plan.get("actions") or []:
        if isinstance(action, dict):
            out.write(f"    * {action.get('action')} {_target(action.get('target'))}: {action.get('reason', '')}\n")
    if not plan.get("reasons") and not plan.get("actions"):
        out.write("    (empty)\n")
    actions = data.get("actions") or []
    out.write("  actions:" + ("\n" if actions else " none\n"))
    for action in actions:
        if not isinstance(action, dict):
            out.write(f"    ? {_compact(action)}\n")
            continue
        out.write(f"    * {action.get('action')} {_target(action.get('target'))} -> {action.get('result')}\n")
        out.write(f"        before: {_compact(action.get('before'))}\n")
        out.write(f"        after:  {_compact(action.get('after'))}\n")
        if action.get("error"):
            out.write(f"        error:  {action['error']}\n")
    errors = step.errors
    out.write("  errors:" + ("\n" if errors else " none\n"))
    out.writelines(f"    ! {error}\n" for error in errors)
    if step.metrics:
        out.write(f"  metrics:    {_compact(step.metrics)}\n")
    timings = data.get("timings")
    if isinstance(timings, dict) and timings:
        out.write("  timings:    " + ", ".join(f"{k.removesuffix('Seconds')} {v:.3f}s" for k, v in timings.items()
                                               if isinstance(v, (int, float))) + "\n")


def write_run(run: Run, resubmit: list[str], out: TextIO) -> None:
    """One run in full: the trigger, each step's observed state, plan, actions, outcome and errors."""
    out.write(f"Run {run.workflow}  (uid {run.uid or '-'}, namespace {run.argo_namespace or '-'}, "
              f"{'archived' if run.archived else 'live'})\n")
    out.write(f"  template:   {run.template or '-'}\n")
    out.write(f"  reaction:   {run.reaction}{'' if run.reaction_known else '  (not a reaction this version knows)'}\n")
    out.write(f"  outcome:    {run.outcome}  (Argo phase {run.phase or '-'})\n")
    if run.reason:
        out.write(f"  reason:     {run.reason}\n")
    if run.message and run.message != run.reason:
        out.write(f"  message:    {run.message}\n")
    out.write(f"  tenant:     {run.tenant or '-'}\n  workload:   {run.namespace or '-'}/{run.workload or '-'}\n")
    duration = run.duration_seconds
    out.write(f"  started:    {run.started or '-'}\n  finished:   {run.finished or '-'}"
              f"{f'  ({duration:.1f}s)' if duration is not None else ''}\n")
    if run.labels.get("workflows.argoproj.io/resubmitted-from-workflow"):
        out.write(f"  resubmitted from: {run.labels['workflows.argoproj.io/resubmitted-from-workflow']}\n")
    sensor = run.labels.get("events.argoproj.io/sensor")
    out.write(f"  trigger:    {'sensor ' + sensor if sensor else 'submitted by hand (no sensor label)'}"
              f"{', trigger ' + run.labels['events.argoproj.io/trigger'] if run.labels.get('events.argoproj.io/trigger') else ''}\n")
    out.write("  parameters:\n")
    for name, value in run.parameters.items():
        shown = value if len(value) <= 160 else value[:157] + "..."
        out.write(f"    {name} = {shown!r}\n" if name == "event" else f"    {name} = {shown}\n")
    if not run.steps:
        out.write("\n(no step nodes: the workflow never ran a step, or its status was not archived)\n")
    for step in run.steps:
        _write_step(step, out)
    out.write("\nResubmit (the steps re-check the live state; the event may be stale):\n")
    out.writelines(f"  {command}\n" for command in resubmit)
