"""`gpuaas audit report --html DIR`: one self-contained page for people who will not run a CLI.

index.html embeds its charts as PNG data URIs (it can be mailed or attached to a ticket as one
file); the same PNGs are written beside it for slides. Figures come only from the audit records:
GPU-hours reclaimed is the sum of the records' `gpuHoursReclaimed` metric per tenant, so the page
never claims more than the steps measured.
"""

from __future__ import annotations

import base64
import html
from collections import Counter, defaultdict
from pathlib import Path

from gpuaas.audit.run import OUTCOME_PRECEDENCE, Run

OUTCOME_COLOURS = {"applied": "#55A868", "no-op": "#8C8C8C", "skipped-by-policy": "#4C72B0",
                   "rejected-input": "#DD8452", "failed": "#C44E52", "unknown": "#8172B3"}
PROBLEM_OUTCOMES = ("failed", "rejected-input", "unknown")
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


def _day(run: Run) -> str:
    started = run.started_at
    return started.strftime("%Y-%m-%d") if started else "(no start time)"


def _short(text: str | None, limit: int = 70) -> str:
    text = (text or "(no reason recorded)").strip()
    return text if len(text) <= limit else text[: limit - 1] + "~"


def _reactions_per_day(runs: list[Run], path: Path) -> None:
    import matplotlib.pyplot as plt

    pairs = [(tenant, _day(r), outcome) for r in runs for tenant, outcome in tenant_outcomes(r)]
    tenants = sorted({tenant for tenant, _, _ in pairs}) or ["(no runs)"]
    days = sorted({_day(r) for r in runs}) or ["-"]
    outcomes = [o for o in OUTCOME_PRECEDENCE if any(r.outcome == o for r in runs)]
    outcomes += sorted({r.outcome for r in runs} - set(outcomes))
    figure, axes = plt.subplots(1, len(tenants), figsize=(max(6.0, 3.2 * len(tenants)), 3.8), sharey=True,
                                squeeze=False)
    counts = Counter(pairs)
    for axis, tenant in zip(axes[0], tenants, strict=True):
        bottom = [0] * len(days)
        for outcome in outcomes:
            values = [counts[(tenant, day, outcome)] for day in days]
            if any(values):
                axis.bar(days, values, bottom=bottom, label=outcome, color=OUTCOME_COLOURS.get(outcome, "#CCB974"))
                bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        axis.set_title(tenant)
        axis.tick_params(axis="x", labelrotation=30)
    axes[0][0].set_ylabel("reaction runs")
    handles = {label: handle for axis in axes[0] for handle, label in zip(*axis.get_legend_handles_labels(),
                                                                          strict=True)}
    if handles:
        figure.legend(handles.values(), handles.keys(), loc="upper right", fontsize=8)
    figure.suptitle("Reactions per day by tenant and outcome")
    figure.tight_layout(rect=(0, 0, 0.86, 0.95))
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _reclaimed_per_tenant(runs: list[Run], path: Path) -> dict[str, tuple[float, float]]:
    import matplotlib.pyplot as plt

    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for run in runs:
        for step in run.primary_steps:
            tenant = step.tenant or _tenant(run)
            totals[tenant][0] += step.metrics.get(RECLAIMED_METRIC, 0.0)
            totals[tenant][1] += step.metrics.get(RELEASED_METRIC, 0.0)
    tenants = sorted(t for t, (hours, gpus) in totals.items() if hours or gpus)
    figure, axis = plt.subplots(figsize=(7, max(2.5, 0.6 * len(tenants) + 1.5)))
    if tenants:
        hours = [totals[t][0] for t in tenants]
        axis.barh(tenants, hours, color="#55A868")
        for index, tenant in enumerate(tenants):
            axis.text(hours[index], index, f" {hours[index]:.3g} h ({totals[tenant][1]:.0f} GPUs released)",
                      va="center", fontsize=8)
        axis.margins(x=0.35)
        axis.set_xlabel("GPU-hours reclaimed (record metric gpuHoursReclaimed)")
    else:
        axis.text(0.5, 0.5, "no run recorded reclaimed GPU-hours or released GPUs", ha="center", va="center")
        axis.set_axis_off()
    axis.set_title("GPU-hours reclaimed per tenant")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return {t: (totals[t][0], totals[t][1]) for t in sorted(totals)}


def _failures(runs: list[Run], path: Path) -> Counter[tuple[str, str]]:
    import matplotlib.pyplot as plt

    reasons: Counter[tuple[str, str]] = Counter((r.outcome, _short(r.reason, 60)) for r in runs
                                                if r.outcome in PROBLEM_OUTCOMES)
    top = reasons.most_common(12)
    figure, axis = plt.subplots(figsize=(9, max(2.5, 0.5 * len(top) + 1.5)))
    if top:
        labels = [f"{reason}" for (_, reason), _ in top][::-1]
        values = [count for _, count in top][::-1]
        colours = [OUTCOME_COLOURS.get(outcome, "#CCB974") for (outcome, _), _ in top][::-1]
        axis.barh(range(len(top)), values, color=colours)
        axis.set_yticks(range(len(top)), labels, fontsize=7)
        axis.set_xlabel("runs (colour: outcome)")
    else:
        axis.text(0.5, 0.5, "no failed, rejected or unknown runs", ha="center", va="center")
        axis.set_axis_off()
    axis.set_title("Failures and their reasons")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return reasons


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body or '<tr><td>none</td></tr>'}</tbody></table>"


def write_report(runs: list[Run], directory: Path, source: str) -> Path:
    """Write DIR/index.html and DIR/*.png; returns the index path."""
    import matplotlib

    matplotlib.use("Agg")
    directory.mkdir(parents=True, exist_ok=True)
    charts = [("reactions-per-day.png", "Reactions per day by tenant and outcome"),
              ("gpu-hours-reclaimed.png", "GPU-hours reclaimed per tenant"),
              ("failures.png", "Failures and their reasons")]
    _reactions_per_day(runs, directory / charts[0][0])
    reclaimed = _reclaimed_per_tenant(runs, directory / charts[1][0])
    reasons = _failures(runs, directory / charts[2][0])

    by_tenant: dict[str, Counter[str]] = defaultdict(Counter)
    for run in runs:
        for tenant, outcome in tenant_outcomes(run):
            by_tenant[tenant][outcome] += 1
    outcomes = [o for o in OUTCOME_PRECEDENCE if any(o in c for c in by_tenant.values())]
    tenant_rows = [[tenant, str(sum(c.values())), *[str(c[o]) for o in outcomes],
                    f"{reclaimed.get(tenant, (0.0, 0.0))[0]:.3f}", f"{reclaimed.get(tenant, (0.0, 0.0))[1]:.0f}"]
                   for tenant, c in sorted(by_tenant.items())]
    by_reaction = Counter((r.reaction, r.outcome) for r in runs)
    reaction_rows = [[reaction, outcome, str(count)] for (reaction, outcome), count in sorted(by_reaction.items())]
    failure_rows = [[r.started or "-", r.workflow, r.reaction, r.tenant or "-", f"{r.namespace}/{r.workload}",
                     r.outcome, r.reason or "-"] for r in runs if r.outcome in PROBLEM_OUTCOMES]
    reason_rows = [[outcome, reason, str(count)] for (outcome, reason), count in reasons.most_common()]
    run_rows = [[r.started or "-", r.workflow, r.reaction, r.tenant or "-", r.namespace or "-", r.workload or "-",
                 r.outcome, f"{r.metric(RECLAIMED_METRIC):.3f}"] for r in runs]

    figures = ""
    for name, title in charts:
        encoded = base64.b64encode((directory / name).read_bytes()).decode("ascii")
        figures += (f'<figure><img alt="{html.escape(title)}" src="data:image/png;base64,{encoded}">'
                    f"<figcaption>{html.escape(title)} ({name})</figcaption></figure>\n")
    total_reclaimed = sum(hours for hours, _ in reclaimed.values())
    problems = sum(1 for r in runs if r.outcome in PROBLEM_OUTCOMES)
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpuaas audit report</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1200px}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left}}th{{background:#eee}}
img{{max-width:100%}}figure{{margin:1em 0}}</style></head><body>
<h1>gpuaas audit report</h1>
<p>Source: {html.escape(source)}. <b>{len(runs)}</b> runs, <b>{problems}</b> failed, rejected or unknown,
<b>{total_reclaimed:.3f}</b> GPU-hours reclaimed (sum of the records' gpuHoursReclaimed).</p>
{figures}
<h2>Per tenant</h2>
{_table(["tenant", "runs", *outcomes, "GPU-hours reclaimed", "GPUs released"], tenant_rows)}
<h2>Per reaction and outcome</h2>
{_table(["reaction", "outcome", "runs"], reaction_rows)}
<h2>Failure reasons</h2>
{_table(["outcome", "reason", "runs"], reason_rows)}
<h2>Failed, rejected and unknown runs</h2>
{_table(["started", "workflow", "reaction", "tenant", "workload", "outcome", "reason"], failure_rows)}
<h2>All runs</h2>
{_table(["started", "workflow", "reaction", "tenant", "namespace", "workload", "outcome", "GPU-h reclaimed"],
        run_rows)}
<p>Details of one run: <code>gpuaas audit show WORKFLOW</code>.</p>
</body></html>
"""
    index = directory / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
