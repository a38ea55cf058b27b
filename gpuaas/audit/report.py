"""`gpuaas audit report --html DIR`: one self-contained page for people who will not run a CLI.

index.html embeds its charts as PNG data URIs (it can be mailed or attached to a ticket as one
file); the same PNGs are written beside it for slides. Figures come only from the audit records:
GPU-hours reclaimed is the sum of the records' `gpuHoursReclaimed` metric per tenant, so the page
never claims more than the steps measured. One time base: wall-clock UTC, as recorded; for the
demo's archive the page also gives the demo-clock figures, so both reports can be compared.
"""

from __future__ import annotations

import base64
import html
import textwrap
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from engine.colours import NO_TENANT, tenant_colours
from gpuaas.audit.run import OUTCOME_PRECEDENCE, Run

OUTCOME_COLOURS = {"applied": "#55A868", "no-op": "#8C8C8C", "skipped-by-policy": "#4C72B0",
                   "rejected-input": "#DD8452", "failed": "#C44E52", "unknown": "#8172B3"}
PROBLEM_OUTCOMES = ("failed", "rejected-input", "unknown")
# Stacks and legends read from good to bad, so the problems sit at the end of each bar.
OUTCOME_ORDER = ("applied", "no-op", "skipped-by-policy", "rejected-input", "unknown", "failed")
RECLAIMED_METRIC = "gpuHoursReclaimed"
RELEASED_METRIC = "gpusReleased"


def _tenant(run: Run) -> str:
    return run.tenant or "(no tenant)"


def tenant_outcomes(run: Run) -> list[tuple[str, str]]:
    """(tenant, outcome) pairs a run counts for: a fan-out touching two tenants counts once for
    each, with the worst outcome among that tenant's steps. When the workflow's own phase decided
    the outcome (it failed although no step recorded a failure) every tenant gets that outcome."""
    by_tenant: dict[str, list[str]] = defaultdict(list)
    for step in run.primary_steps:
        by_tenant[step.tenant or _tenant(run)].append(step.outcome)
    recorded = {outcome for outcomes in by_tenant.values() for outcome in outcomes}
    if not by_tenant or run.outcome not in recorded:
        return [(tenant, run.outcome) for tenant in sorted(by_tenant) or [_tenant(run)]]
    rank = {outcome: index for index, outcome in enumerate(OUTCOME_PRECEDENCE)}
    return [(tenant, min(outcomes, key=lambda o: rank.get(o, 1))) for tenant, outcomes in sorted(by_tenant.items())]


BINS = ((timedelta(seconds=5), "5 seconds"), (timedelta(seconds=15), "15 seconds"), (timedelta(seconds=30), "30 seconds"),
        (timedelta(minutes=1), "minute"), (timedelta(minutes=5), "5 minutes"), (timedelta(minutes=15), "15 minutes"),
        (timedelta(hours=1), "hour"), (timedelta(hours=6), "6 hours"), (timedelta(days=1), "day"),
        (timedelta(days=7), "week"))
MAX_BINS = 40


def time_bin(runs: list[Run]) -> tuple[timedelta, str]:
    """The smallest bin that splits the runs' span into at most MAX_BINS bars (the demo's minute: 5 seconds;
    a day: hours; a month: days)."""
    starts = [r.started_at for r in runs if r.started_at]
    span = (max(starts) - min(starts)) if starts else timedelta(0)
    for size, name in BINS:
        if span / size <= MAX_BINS:
            return size, name
    return BINS[-1]


def _floor(moment: datetime, size: timedelta) -> datetime:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return epoch + ((moment.astimezone(UTC) - epoch) // size) * size


def _short(text: str | None, limit: int = 70) -> str:
    text = (text or "(no reason recorded)").strip()
    return text if len(text) <= limit else text[: limit - 1] + "~"


def _outcomes_in_order(outcomes: set[str]) -> list[str]:
    ordered = [o for o in OUTCOME_ORDER if o in outcomes]
    return ordered + sorted(outcomes - set(ordered))


def _legend_on_top(figure: Any, axes: list[Any], ncol: int = 6) -> None:
    """One legend for all panels, in outcome order, just above the top panel: it never covers a bar.
    Call after tight_layout (it reads where the top panel ended up)."""
    handles: dict[str, Any] = {}
    for axis in axes:
        for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    labels = _outcomes_in_order(set(handles))
    if labels:
        figure.legend([handles[label] for label in labels], labels, loc="lower center", ncol=min(ncol, len(labels)),
                      fontsize=8, frameon=False, bbox_to_anchor=(0.5, axes[0].get_position().y1))


def _colours(runs: list[Run]) -> dict[str, str]:
    """Tenant -> colour over every tenant the runs name (engine.colours), so a chart that shows only some of them
    colours each as the others do, and as the demo report does for the demo's tenants."""
    return tenant_colours({tenant for run in runs for tenant, _ in tenant_outcomes(run)} | {"(no runs)"})


def _runs_over_time(runs: list[Run], path: Path) -> str:
    """Stacked bars of runs per time bin, one panel per tenant, coloured by outcome; returns the bin name."""
    import matplotlib.pyplot as plt

    size, name = time_bin(runs)
    dated = [(tenant, _floor(r.started_at, size), outcome) for r in runs if r.started_at
             for tenant, outcome in tenant_outcomes(r)]
    tenants = sorted({tenant for tenant, _, _ in dated}) or ["(no runs)"]
    bins = sorted({moment for _, moment, _ in dated})
    outcomes = _outcomes_in_order({outcome for _, _, outcome in dated})
    counts = Counter(dated)
    colours = _colours(runs)  # bars are coloured by outcome; each panel's name by its tenant
    figure, axes = plt.subplots(len(tenants), 1, figsize=(10, 1.3 + 1.7 * len(tenants)), sharex=True, sharey=True,
                                squeeze=False)
    width = size.total_seconds() / 86400 * 0.8  # matplotlib dates count days
    for axis, tenant in zip(axes[:, 0], tenants, strict=True):
        bottom = [0] * len(bins)
        for outcome in outcomes:
            values = [counts[(tenant, moment, outcome)] for moment in bins]
            if any(values):
                axis.bar([b + size / 2 for b in bins], values, width=width, bottom=bottom, label=outcome,
                         color=OUTCOME_COLOURS.get(outcome, "#CCB974"))
                bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        axis.set_ylabel(f"{tenant}\nruns", fontsize=9, color=colours[tenant])
        axis.grid(axis="y", alpha=0.3)
        axis.yaxis.get_major_locator().set_params(integer=True)
    axis = axes[-1, 0]
    if bins:
        axis.set_xlim(bins[0] - size / 2, bins[-1] + size * 1.5)
        ticks = bins[::max(1, len(bins) // 10)]  # a label under a bar names the start of its bin
        axis.set_xticks([b + size / 2 for b in ticks])
        same_day = bins[-1].date() == bins[0].date()
        shape = ("%Y-%m-%d" if size >= timedelta(days=1) else "%H:%M:%S" if size < timedelta(minutes=1)
                 else "%H:%M" if same_day else "%m-%d %H:%M")
        axis.set_xticklabels([b.strftime(shape) for b in ticks], fontsize=8)
        axis.set_xlabel(f"start time, UTC{f' on {bins[0]:%Y-%m-%d}' if same_day and size < timedelta(days=1) else ''}"
                        f"; one bar per {name}, labelled with its start")
    else:
        axis.set_xlabel(f"start time, UTC; one bar per {name}")
    figure.suptitle(f"Reaction runs per {name}, by tenant and outcome", fontsize=11)
    figure.tight_layout(rect=(0, 0, 1, 0.92))
    _legend_on_top(figure, list(axes[:, 0]))
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return name


def _reclaimed_per_tenant(runs: list[Run], path: Path, demo_speed: float | None) -> dict[str, tuple[float, float]]:
    import matplotlib.pyplot as plt

    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for run in runs:
        for step in run.primary_steps:
            tenant = step.tenant or _tenant(run)
            totals[tenant][0] += step.metrics.get(RECLAIMED_METRIC, 0.0)
            totals[tenant][1] += step.metrics.get(RELEASED_METRIC, 0.0)
    tenants = sorted(t for t, (hours, gpus) in totals.items() if hours or gpus)
    figure, axis = plt.subplots(figsize=(10, max(2.2, 0.5 * len(tenants) + 1.6)))
    if tenants:
        hours = [totals[t][0] for t in tenants]
        colours = _colours(runs)
        axis.barh(tenants, hours, color=[colours.get(t, NO_TENANT) for t in tenants], height=0.5)
        for index, tenant in enumerate(tenants):
            text = f" {hours[index]:.3g} GPU-hours"
            if demo_speed:
                text += f" (= {hours[index] * demo_speed:.3g} on the demo clock)"
            axis.text(hours[index], index, text + f"; {totals[tenant][1]:.0f} GPUs released", va="center", fontsize=8)
        axis.margins(x=0.9)
        axis.set_xlabel("GPU-hours reclaimed, wall clock: GPUs released x hours until resumed (the records' "
                        f"{RECLAIMED_METRIC})", fontsize=9)
    else:
        axis.text(0.5, 0.5, "no run recorded reclaimed GPU-hours or released GPUs", ha="center", va="center")
        axis.set_axis_off()
    axis.set_title("GPU-hours reclaimed per tenant", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return {t: (totals[t][0], totals[t][1]) for t in sorted(totals)}


def _failures(runs: list[Run], path: Path) -> Counter[tuple[str, str]]:
    """Outcomes per reaction (every run, so the share of failures shows), then the failures' reasons."""
    import matplotlib.pyplot as plt

    reasons: Counter[tuple[str, str]] = Counter((r.outcome, _short(r.reason, 60)) for r in runs
                                                if r.outcome in PROBLEM_OUTCOMES)
    by_reaction = Counter((r.reaction, r.outcome) for r in runs)
    reactions = sorted({r.reaction for r in runs}, reverse=True)
    outcomes = _outcomes_in_order({r.outcome for r in runs})
    top = reasons.most_common(10)
    heights = [max(1, len(reactions))] + ([2 * len(top)] if top else [])  # a reason takes two lines
    figure, axes = plt.subplots(len(heights), 1, squeeze=False, gridspec_kw={"height_ratios": heights},
                                figsize=(10, 1.6 + 0.32 * len(reactions) + (0.6 * len(top) + 0.8 if top else 0)))
    axis = axes[0, 0]
    if reactions:
        left = [0] * len(reactions)
        for outcome in outcomes:
            values = [by_reaction[(reaction, outcome)] for reaction in reactions]
            if any(values):
                axis.barh(reactions, values, left=left, height=0.6, label=outcome,
                          color=OUTCOME_COLOURS.get(outcome, "#CCB974"))
                left = [a + b for a, b in zip(left, values, strict=True)]
        axis.set_xlabel("runs", fontsize=9)
        axis.xaxis.get_major_locator().set_params(integer=True)
    else:
        axis.text(0.5, 0.5, "no runs", ha="center", va="center")
        axis.set_axis_off()
    problems = sum(1 for r in runs if r.outcome in PROBLEM_OUTCOMES)
    figure.suptitle(f"Outcomes per reaction: {problems} of {len(runs)} runs failed, were rejected or are unknown",
                    fontsize=11)
    if top:
        reason_axis = axes[1, 0]
        reason_axis.barh(range(len(top)), [count for _, count in top][::-1], height=0.6,
                         color=[OUTCOME_COLOURS.get(outcome, "#CCB974") for (outcome, _), _ in top][::-1])
        reason_axis.set_yticks(range(len(top)), [textwrap.fill(reason, 45) for (_, reason), _ in top][::-1], fontsize=8)
        reason_axis.set_xlabel("runs with this reason (colour: outcome)", fontsize=9)
        reason_axis.xaxis.get_major_locator().set_params(integer=True)
    figure.tight_layout(rect=(0, 0, 1, 0.9))
    _legend_on_top(figure, [axis])
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return reasons


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body or '<tr><td>none</td></tr>'}</tbody></table>"


def write_report(runs: list[Run], directory: Path, source: str, demo_speed: float | None = None) -> Path:
    """Write DIR/index.html and DIR/*.png; returns the index path.

    Times are wall-clock UTC and GPU-hours are wall-clock hours, as the steps record them. When the
    history is the local demo's (`demo_speed`: its clock runs that many times wall time), the page
    says so and gives the demo-clock figure beside each one, so it matches the demo's own report.
    """
    import matplotlib

    matplotlib.use("Agg")
    directory.mkdir(parents=True, exist_ok=True)
    charts = [("runs-over-time.png", "Reaction runs over time, by tenant and outcome"),
              ("gpu-hours-reclaimed.png", "GPU-hours reclaimed per tenant"),
              ("failures.png", "Outcomes per reaction, and the reasons of failures")]
    bin_name = _runs_over_time(runs, directory / charts[0][0])
    charts[0] = (charts[0][0], f"Reaction runs per {bin_name}, by tenant and outcome")
    reclaimed = _reclaimed_per_tenant(runs, directory / charts[1][0], demo_speed)
    reasons = _failures(runs, directory / charts[2][0])

    by_tenant: dict[str, Counter[str]] = defaultdict(Counter)
    for run in runs:
        for tenant, outcome in tenant_outcomes(run):
            by_tenant[tenant][outcome] += 1
    outcomes = [o for o in OUTCOME_PRECEDENCE if any(o in c for c in by_tenant.values())]
    tenant_rows = [[tenant, str(sum(c.values())), *[str(c[o]) for o in outcomes],
                    f"{reclaimed.get(tenant, (0.0, 0.0))[0]:.4g}", f"{reclaimed.get(tenant, (0.0, 0.0))[1]:.0f}"]
                   for tenant, c in sorted(by_tenant.items())]
    by_reaction = Counter((r.reaction, r.outcome) for r in runs)
    reaction_rows = [[reaction, outcome, str(count)] for (reaction, outcome), count in sorted(by_reaction.items())]
    failure_rows = [[r.started or "-", r.workflow, r.reaction, r.tenant or "-", f"{r.namespace}/{r.workload}",
                     r.outcome, r.reason or "-"] for r in runs if r.outcome in PROBLEM_OUTCOMES]
    reason_rows = [[outcome, reason, str(count)] for (outcome, reason), count in reasons.most_common()]
    run_rows = [[r.started or "-", r.workflow, r.reaction, r.tenant or "-", r.namespace or "-", r.workload or "-",
                 r.outcome, f"{r.metric(RECLAIMED_METRIC):.4g}"] for r in runs]

    figures = ""
    for name, title in charts:
        encoded = base64.b64encode((directory / name).read_bytes()).decode("ascii")
        figures += (f'<figure><img alt="{html.escape(title)}" src="data:image/png;base64,{encoded}">'
                    f"<figcaption>{html.escape(title)} ({name})</figcaption></figure>\n")
    total_reclaimed = sum(hours for hours, _ in reclaimed.values())
    demo_note = "" if not demo_speed else (
        f" This history comes from <code>gpuaas demo</code>, whose clock runs {demo_speed:g}x wall time: "
        f"{total_reclaimed:.3g} GPU-hours here are {total_reclaimed * demo_speed:.3g} GPU-hours on the demo clock, "
        "the figure the demo's report shows.")
    problems = sum(1 for r in runs if r.outcome in PROBLEM_OUTCOMES)
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpuaas audit report</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1200px}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left}}th{{background:#eee}}
img{{max-width:100%}}figure{{margin:1em 0}}</style></head><body>
<h1>gpuaas audit report</h1>
<p>Source: {html.escape(source)}. <b>{len(runs)}</b> runs, <b>{problems}</b> failed, rejected or unknown,
<b>{total_reclaimed:.3g}</b> GPU-hours reclaimed (GPUs released x hours until resumed: the sum of the records'
{RECLAIMED_METRIC}).</p>
<p style="color:#555">Time base: start times are wall-clock UTC and GPU-hours are wall-clock hours, as the steps
measured them.{demo_note}</p>
{figures}
<h2>Per tenant</h2>
{_table(["tenant", "runs", *outcomes, "GPU-hours reclaimed (wall clock)", "GPUs released"], tenant_rows)}
<h2>Per reaction and outcome</h2>
{_table(["reaction", "outcome", "runs"], reaction_rows)}
<h2>Failure reasons</h2>
{_table(["outcome", "reason", "runs"], reason_rows)}
<h2>Failed, rejected and unknown runs</h2>
{_table(["started (UTC)", "workflow", "reaction", "tenant", "workload", "outcome", "reason"], failure_rows)}
<h2>All runs</h2>
{_table(["started (UTC)", "workflow", "reaction", "tenant", "namespace", "workload", "outcome",
         "GPU-hours reclaimed (wall clock)"],
        run_rows)}
<p>Details of one run: <code>gpuaas audit show WORKFLOW</code>.</p>
</body></html>
"""
    index = directory / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
