"""demo-report/index.html: the demo's story in one chart, then its reactions and timeline.

One time base on the whole page: the demo clock (08:00 at the start, `speed` demo seconds per
wall second), the clock of the timeline the demo prints. The chart has one panel per tenant on
one GPU scale: GPUs Kueue reserved for the tenant, GPUs its pods kept busy, its nominal quota,
and the moments the story turns on (a job queued, GPUs going idle, the alert and the release,
the queued job's admission, the resume), with the reclaimed and queued spans shaded. The page
embeds the chart (a data URI: one file to mail or attach); the PNG is also written beside it.
"""

from __future__ import annotations

import base64
import html
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from engine.colours import tenant_colours

MARK_COLOUR = "#333333"
CHART = "gpu-allocation.png"
MERGE_WITHIN_HOURS = 10 / 60  # marks of one tenant closer than this share one label
BACKGROUND = "background"
"""gid of what the chart draws behind the data (the marks' lines, the shaded spans): labels may cross it, never data."""
LABEL_CHAR_FRACTION = 0.0075  # one label character, as a fraction of the time axis (10-inch figure, 7.5 pt)


def _clock(summary: dict[str, Any]) -> datetime:
    """The demo clock's start as a datetime (any date: only HH:MM is shown)."""
    start = str((summary.get("demo_time") or {}).get("clock_start") or "08:00")
    hours, minutes = (int(part) for part in start.split(":"))
    return datetime(2000, 1, 1, hours, minutes)


def grouped_marks(marks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Marks of one tenant within MERGE_WITHIN_HOURS read as one step of the story ("alert -> released")."""
    groups: list[dict[str, Any]] = []
    for mark in sorted(marks, key=lambda m: m["hours"]):
        last = next((g for g in reversed(groups) if g["tenant"] == mark["tenant"]), None)
        if last is not None and mark["hours"] - last["hours"] <= MERGE_WITHIN_HOURS:
            last["what"] += f" -> {mark['what']}"
            continue
        groups.append(dict(mark))
    return groups


def _span(marks: list[dict[str, Any]], tenant: str, begins: str, ends: str) -> tuple[float, float] | None:
    start = next((m["hours"] for m in marks if m["tenant"] == tenant and m["what"].startswith(begins)), None)
    end = next((m["hours"] for m in marks if m["tenant"] == tenant and m["what"].startswith(ends)), None)
    return (start, end) if start is not None and end is not None and end > start else None


def queued_spans(marks: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Per tenant, each wait for quota: from a `<workload> queued` mark to that workload's next
    `<workload> admitted...` mark (train-llm until the release; ray-vision from its resume until train-llm
    ends). A wait the run did not see end is left out rather than drawn to the edge."""
    spans: dict[str, list[tuple[float, float]]] = {}
    ordered = sorted(marks, key=lambda m: m["hours"])
    for index, mark in enumerate(ordered):
        workload, _, rest = mark["what"].partition(" ")
        if rest != "queued":
            continue
        end = next((later["hours"] for later in ordered[index + 1:] if later["tenant"] == mark["tenant"]
                    and later["what"].startswith(f"{workload} admitted")), None)
        if end is not None and end > mark["hours"]:
            spans.setdefault(mark["tenant"], []).append((mark["hours"], end))
    return spans


def label_rows(extents: list[tuple[float, float]]) -> list[int]:
    """For labels placed in order, each one's row: the lowest where it overlaps no label placed before it."""
    placed: list[tuple[float, float, int]] = []
    rows = []
    for begin, end in extents:
        taken = {row for b, e, row in placed if b < end and begin < e}
        row = next(r for r in range(len(placed) + 1) if r not in taken)
        placed.append((begin, end, row))
        rows.append(row)
    return rows


def allocation_chart(path: Path, samples: list[Any], summary: dict[str, Any]) -> None:
    """GPUs reserved, busy and nominal per tenant on one scale and one clock, with the story's marks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    tenants = list(summary.get("tenants") or {}) or ["(no tenant)"]
    start = _clock(summary)
    times = [start + timedelta(hours=s.hours) for s in samples]
    peak = max([summary["tenants"][t]["nominal_gpus"] for t in tenants if t in summary.get("tenants", {})]
               + [v for s in samples for v in list(s.reserved.values()) + list(s.busy.values())] + [1])
    marks = summary.get("marks") or []
    figure, axes = plt.subplots(len(tenants), 1, figsize=(10, 1.15 + 2.05 * len(tenants)), sharex=True, sharey=True,
                                squeeze=False)
    colours = tenant_colours(tenants)
    for axis, tenant in zip(axes[:, 0], tenants, strict=True):
        colour = colours[tenant]
        axis.step(times, [s.reserved.get(tenant, 0) for s in samples], where="post", color=colour, linewidth=1.8,
                  label="GPUs reserved by Kueue (admitted)")
        axis.fill_between(times, [s.busy.get(tenant, 0.0) for s in samples], step="post", alpha=0.3, color=colour,
                          linewidth=0, label="GPUs busy (DCGM utilization)")
        nominal = (summary.get("tenants") or {}).get(tenant, {}).get("nominal_gpus")
        if nominal is not None:
            axis.axhline(nominal, color="grey", linestyle=":", linewidth=1.2, label="nominal quota")
        axis.set_ylabel(f"{tenant}\nGPUs")
        axis.grid(alpha=0.25)
        released = _span(marks, tenant, "released", "resumed")
        if released:
            axis.axvspan(start + timedelta(hours=released[0]), start + timedelta(hours=released[1]),
                         color="#55A868", alpha=0.12, hatch="//", linewidth=0, label="released: GPUs back in the cohort",
                         gid=BACKGROUND)
        for begin, end in queued_spans(marks).get(tenant, []):
            axis.axvspan(start + timedelta(hours=begin), start + timedelta(hours=end),
                         color="#999999", alpha=0.12, linewidth=0, label="queued: waiting for quota", gid=BACKGROUND)
    axes[0, 0].set_ylim(0, peak * 1.5 + 0.5)  # head room for the marks' labels; raised below to fit their rows
    span_hours = max([s.hours for s in samples] + [1.0])
    labels = []
    for index, mark in enumerate(grouped_marks(marks), start=1):
        panel = mark["tenant"] if mark["tenant"] in tenants else tenants[0]
        text = f"{index}  {mark['time'][:5]} {mark['what']}"
        width = len(text) * LABEL_CHAR_FRACTION * span_hours  # about how far the label reaches to the right
        leftward = mark["hours"] + width > span_hours  # near the right edge: the label goes left of its line
        extent = (mark["hours"] - width, mark["hours"]) if leftward else (mark["hours"], mark["hours"] + width)
        labels.append((mark, panel, text, leftward, extent))
    levels: dict[int, int] = {}  # label index -> row, placed per panel
    for panel in tenants:
        mine = [i for i, label in enumerate(labels) if label[1] == panel]
        levels.update(zip(mine, label_rows([labels[i][4] for i in mine]), strict=True))
    for number, (mark, panel, text, leftward, _) in enumerate(labels):
        moment = start + timedelta(hours=mark["hours"])
        for axis in axes[:, 0]:
            axis.axvline(moment, color=MARK_COLOUR, linestyle="--", linewidth=0.8, alpha=0.55, gid=BACKGROUND)
        level = levels[number]
        axes[tenants.index(panel), 0].annotate(
            text, xy=(moment, 1), xycoords=("data", "axes fraction"), xytext=(-3 if leftward else 3, -4 - 12 * level),
            textcoords="offset points", va="top", ha="right" if leftward else "left", fontsize=7.5,
            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "#bbbbbb", "alpha": 0.9})
    axis = axes[-1, 0]
    axis.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M"))
    # half hours fit a day of about five demo hours (the fast demo); a longer one (the real stack's, about
    # ten at 120x) gets whole hours, or its labels run into each other
    hours = float((summary.get("demo_time") or {}).get("demo_hours") or 0)
    axis.xaxis.set_major_locator(mdates.HourLocator() if hours > 7 else mdates.MinuteLocator(byminute=[0, 30]))
    speed = (summary.get("demo_time") or {}).get("speed", 1)
    axis.set_xlabel(f"demo clock (the timeline's; runs {speed:g}x wall time)")
    handles: dict[str, Any] = {}
    for row in axes[:, 0]:
        for handle, label in zip(*row.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    figure.suptitle("GPUs per tenant: reserved by Kueue, busy on the GPUs, and what gpuaas did", fontsize=11)
    figure.tight_layout(rect=(0, 0, 1, 0.935))
    _above_the_labels(figure, axes[:, 0], peak)
    figure.tight_layout(rect=(0, 0, 1, 0.935))
    figure.legend(handles.values(), handles.keys(), loc="lower center", ncol=3, fontsize=8, frameon=False,
                  bbox_to_anchor=(0.5, axes[0, 0].get_position().y1))
    figure.savefig(path, dpi=110)
    plt.close(figure)


def started_words(summary: dict[str, Any]) -> str:
    """What started the runs: `7 started by the Sensors (from 41 events routed), 6 by the catch-up sweep, 1 hand-submitted, 0 resubmitted`."""
    starts = summary.get("started_by") or {}
    routed = summary.get("events_routed", 0)
    source = (f"from {routed} events routed" if summary.get("stack") != "real"
              else "Argo Events on the stack")
    return (f"{starts.get('events', 0)} started by the Sensors ({source}), {starts.get('sweep', 0)} by the catch-up "
            f"sweep, {starts.get('hand-submitted', 0)} hand-submitted, {starts.get('resubmitted', 0)} resubmitted")


def _above_the_labels(figure: Any, axes: Any, peak: float) -> None:
    """Raise the shared y scale until every line and area stays below the lowest label of the marks.

    The labels hang from each panel's top in rows (`label_rows`), so how far down they reach depends on how
    many marks crowd one panel: a fixed head room let a third row cover the reserved line (issue 18)."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    needed = axes[0].get_ylim()[1]
    for axis in axes:
        box = axis.get_window_extent(renderer)
        labels = [text.get_bbox_patch().get_window_extent(renderer) if text.get_bbox_patch() is not None
                  else text.get_window_extent(renderer) for text in axis.texts]
        if not labels or box.height <= 0:
            continue
        free = (min(label.y0 for label in labels) - box.y0) / box.height  # the share of the panel under the labels
        needed = max(needed, peak * 1.08 / max(free, 0.2))
    axes[0].set_ylim(0, needed)
    # ticks only up to the data: above it is the labels' room, and a tick at the top edge ran into the next
    # panel's 0 (shared scale, panels close together)
    from matplotlib.ticker import MaxNLocator

    axes[0].set_yticks([tick for tick in MaxNLocator(nbins=4, integer=True).tick_values(0, peak) if 0 <= tick <= peak])


def outcome_words(template: str, reaction: dict[str, Any]) -> str:
    """`applied 2` for one step; per step for a fan-out, the template's own reaction last as it runs last
    (`idle-alerts: applied 1; on-idle: applied 1`)."""
    steps = reaction.get("steps") or {}
    if len(steps) > 1:
        own = template.removeprefix("gpuaas-")
        ordered = sorted(steps, key=lambda step: (step == own, step))
        return "; ".join(f"{step}: " + ", ".join(f"{k} {v}" for k, v in steps[step].items()) for step in ordered)
    return ", ".join(f"{k} {v}" for k, v in (reaction.get("outcomes") or {}).items()) or "-"


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _files(summary: dict[str, Any]) -> str:
    """The report's files: the local engine's archive and snapshot, or on the real stack the runs as the
    Argo Server served them and how to audit them there (its PostgreSQL archive is the record)."""
    if summary.get("stack") == "real":
        audit = summary["files"]["audit"]
        # a command while the cluster stays (--state-dir); else the sentence saying the server is gone
        where = (f"audit them there: <code>{html.escape(audit)}</code>" if audit.startswith("gpuaas audit")
                 else html.escape(audit))
        return (f"""<ul><li><a href="runs.json">runs.json</a>: the runs as the {html.escape(summary['runs_source'])}
served them; {where}</li>
<li>stand-ins on the stack: {html.escape('; '.join(summary.get('stand_ins') or []))}</li>
<li><a href="summary.json">summary.json</a>, <a href="{CHART}">{CHART}</a></li></ul>""")
    return f"""<ul><li><a href="runs.db">runs.db</a>: the run archive (Argo archive layout): <code>gpuaas audit --archive runs.db</code></li>
<li><a href="cluster-snapshot.json">cluster-snapshot.json</a>: the final cluster state, for local resubmission</li>
<li><a href="summary.json">summary.json</a>, <a href="{CHART}">{CHART}</a></li></ul>"""


def write(output: Path, summary: dict[str, Any], samples: list[Any]) -> Path:
    output.mkdir(parents=True, exist_ok=True)
    allocation_chart(output / CHART, samples, summary)
    chart = base64.b64encode((output / CHART).read_bytes()).decode("ascii")
    from engine import quota_report  # its own section: gpuaas quota advise on this run

    quota_section = quota_report.section(output, summary)
    reactions = [[name, r["runs"], ", ".join(f"{k} {v}" for k, v in r["phases"].items()), outcome_words(name, r)]
                 for name, r in (summary.get("reactions") or {}).items()]
    timeline = [[r["time"], r["event"], r["sensor"], r["workflow"], r["outcome"]]
                for r in summary.get("timeline") or []]
    story = [[index, mark["time"][:5], mark["tenant"], mark["what"]]
             for index, mark in enumerate(grouped_marks(summary.get("marks") or []), start=1)]
    demo_time = summary.get("demo_time") or {}
    speed = demo_time.get("speed", 1)
    reclaimed = summary.get("gpu_hours_reclaimed", 0)
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpuaas demo report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}
td, th {{ border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }}
th {{ background: #f3f3f3; }} figure {{ margin: 1.5em 0; }} img {{ max-width: 100%; }}
code {{ background: #f3f3f3; padding: 0 0.2em; }} .note {{ color: #555; font-size: 0.9em; }}
</style></head><body>
<h1>gpuaas demo report</h1>
<p><b>{summary.get('runs', 0)}</b> workflow runs: {html.escape(started_words(summary))};
<b>{reclaimed:.2f} GPU-hours reclaimed</b> from idle workloads (GPUs released &times; hours until they were
resumed).</p>
<p class="note">Time base: every time on this page is the <b>demo clock</b>, which starts at
{html.escape(str(demo_time.get('clock_start', '08:00')))} and runs {speed:g}x wall time
({demo_time.get('demo_hours', 0)} demo hours in {demo_time.get('wall_seconds', 0)} s). The steps measure wall
time, so their records, <code>gpuaas audit</code> and its report show the same reclaim as
{summary.get('gpu_hours_reclaimed_wall', 0):.4g} GPU-hours, at wall-clock UTC times.</p>
<figure><img src="data:image/png;base64,{chart}" alt="GPUs reserved and busy per tenant over the demo clock,
with the idle alert, the release, the queued job's admission and the resume marked">
<figcaption>GPUs per tenant over the demo clock ({CHART}); the numbers point to the story below.</figcaption></figure>
<h2>The story</h2>
{_table(["#", "demo clock", "tenant", "what happened"], story)}
<p class="note">Metrics: {html.escape(str(summary.get('metrics', '')))}. Steps ran
{html.escape(str(summary.get('step_mode')))}.</p>
{quota_section}
<h2>Reactions by WorkflowTemplate</h2>
{_table(["WorkflowTemplate", "runs", "phases", "outcomes (per step for a fan-out)"], reactions)}
<h2>Timeline</h2>
{_table(["demo clock", "event", "sensor", "workflow", "outcome"], timeline)}
<h2>Files</h2>
{_files(summary)}
</body></html>
"""
    path = output / "index.html"
    path.write_text(page)
    return path
