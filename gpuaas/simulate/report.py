"""How `gpuaas simulate` shows its results: a table on stdout, `--output json`, and `--html DIR`
(index.html with the trade-off curve and the release latency distribution, PNGs beside it)."""

from __future__ import annotations

import base64
import html
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from gpuaas.simulate.comparison import PolicyRun
from gpuaas.simulate.definitions import DEFINITIONS
from gpuaas.simulate.history import History
from gpuaas.simulate.product import ProductTimings, format_duration
from steps.policy import Policy

INTERRUPTIONS_LISTED = 200


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(float(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def history_summary(history: History) -> dict[str, Any]:
    workloads = history.workloads
    span = max(history.end - history.start, 1.0)
    held = float((workloads.gpus * (workloads.end - workloads.start)).sum())
    return {"source": history.source, "start": _iso(history.start), "end": _iso(history.end),
            "days": round(span / 86400.0, 2), "step": format_duration(history.step), "workloads": len(workloads),
            "tenants": len(set(workloads.tenant.tolist())), "namespaces": len(set(workloads.namespace.tolist())),
            "pods": len(history.pods), "gpusHeldOnAverage": round(held / span, 1), "samples": history.samples,
            "notes": list(history.notes), "warnings": list(history.warnings)}


def timings_summary(timings: ProductTimings) -> dict[str, Any]:
    rule, notifications = timings.rule, timings.notifications
    return {"source": timings.source,
            "rule": {"alert": "GPUWorkloadIdle", "window": format_duration(rule.window_seconds),
                     "for": format_duration(rule.for_seconds), "threshold": rule.threshold},
            "alertmanager": {"groupWait": format_duration(notifications.group_wait),
                             "groupInterval": format_duration(notifications.group_interval),
                             "repeatInterval": format_duration(notifications.repeat_interval),
                             "groupsPer": notifications.group_by}}


def effective_repeat(timings: ProductTimings) -> float:
    """Seconds between re-sends of a still-firing group: the first flush more than repeat_interval after
    the last notification (flushes are group_interval apart; see gpuaas.simulate.alertmanager)."""
    notifications = timings.notifications
    return (notifications.repeat_interval // notifications.group_interval + 1) * notifications.group_interval


def timing_notes(policy: Policy, timings: ProductTimings) -> list[str]:
    """What the rendered timings do to the policy's windows and minimum runtime (the replay models it)."""
    rule = timings.rule
    first_look = rule.window_seconds + rule.for_seconds + timings.notifications.group_wait
    repeat = format_duration(effective_repeat(timings))
    notes = []
    settings = [("default", policy.idle), *sorted(policy.tenants.items())]
    for name, idle in settings:
        who = "the default" if name == "default" else f"tenant {name}"
        if idle.window_seconds < rule.window_seconds:
            notes.append(f"{who}: idle.window {format_duration(idle.window_seconds)} is shorter than the alert's window "
                         f"{format_duration(rule.window_seconds)}: nothing is released before "
                         f"{format_duration(first_look)} of idleness (render the rule from this policy: its shortest "
                         "window becomes the alert's)")
        elif idle.window_seconds > rule.window_seconds:
            notes.append(f"{who}: idle.window {format_duration(idle.window_seconds)} is longer than the alert's window "
                         f"{format_duration(rule.window_seconds)}: the step confirms its own window, so a workload the "
                         f"alert finds idle too early is looked at again at Alertmanager's next delivery (a new alert "
                         f"in its namespace, or the repeat every {repeat})")
        if idle.min_runtime_seconds > first_look:
            notes.append(f"{who}: idle.minRuntime {format_duration(idle.min_runtime_seconds)} is longer than the "
                         f"{format_duration(first_look)} a workload idle from its start needs to be alerted: it is "
                         f"skipped then and looked at again at the next delivery (up to {repeat} later)")
    return notes


def interruptions(history: History, run: PolicyRun, limit: int = INTERRUPTIONS_LISTED) -> list[dict[str, Any]]:
    """The wrong releases of a run: whom it would have interrupted, largest GPU counts first."""
    releases = run.releases
    workloads = history.workloads
    wrong = np.flatnonzero(releases.wrong)
    order = wrong[np.lexsort((releases.time[wrong], -workloads.gpus[releases.workload[wrong]]))][:limit]
    out = []
    for index in order.tolist():
        w = int(releases.workload[index])
        latency = releases.latency[index]
        out.append({"workload": str(workloads.name[w]), "namespace": str(workloads.namespace[w]),
                    "tenant": str(workloads.tenant[w]), "kind": str(workloads.kind[w]), "gpus": int(workloads.gpus[w]),
                    "releasedAt": _iso(releases.time[index]),
                    "idleSince": None if np.isnan(latency) else _iso(releases.time[index] - latency),
                    "activityBackAt": _iso(releases.activity_back[index])})
    return out


def as_json(history: History, timings: ProductTimings, policy_source: str, runs: list[PolicyRun],
            seconds: dict[str, float], notes: list[str] | None = None) -> dict[str, Any]:
    given = next((r for r in runs if r.kind == "given"), None)
    return {"history": history_summary(history),
            "product": {**timings_summary(timings), "policy": policy_source, "notes": notes or []},
            "definitions": DEFINITIONS, "policies": [r.as_dict() for r in runs],
            "interruptions": interruptions(history, given) if given else [],
            "seconds": {k: round(v, 3) for k, v in seconds.items()}}


def _pct(value: float) -> str:
    return f"{value * 100:.1f}%"


def _minutes(value: float | None) -> str:
    return "-" if value is None else f"{value / 60:.1f}m"


def _hours(value: float) -> str:
    return f"{value:,.1f}"


def table(history: History, timings: ProductTimings, policy_source: str, runs: list[PolicyRun],
          notes: list[str] | None = None) -> str:
    h = history_summary(history)
    t = timings_summary(timings)
    lines = [
        (f"History: {h['source']}: {h['start']} .. {h['end']} ({h['days']} days), {h['workloads']:,} workloads in "
        f"{h['tenants']} tenants, {h['gpusHeldOnAverage']:,} GPUs held on average, {h['samples'] / 1e6:.1f} M GPU "
        f"samples at {h['step']}"),
        (f"Product: GPUWorkloadIdle window {t['rule']['window']}, for {t['rule']['for']}, threshold "
        f"{t['rule']['threshold']:g}; Alertmanager group_wait {t['alertmanager']['groupWait']}, group_interval "
        f"{t['alertmanager']['groupInterval']}, repeat_interval {t['alertmanager']['repeatInterval']} "
        f"({t['source']}); policy {policy_source}"),
        *(f"  note: {note}" for note in notes or []),
        *(f"  warning: {warning}" for warning in h["warnings"]),
        "",
    ]
    header = ("policy", "reclaimed GPU-h", "share", "right GPU-h", "bound", "reached", "releases", "wrong",
              "wrong GPUs", "owner back", "busy ahead GPU-h", "cost GPU-h", "net GPU-h", "to queue GPU-h",
              "latency p50", "p90", "dry-run plans", "on-idle runs")
    rows = []
    for run in runs:
        total = run.total
        runs_count = sum(run.outcomes.values())
        released = total["releases"]
        rows.append((run.name, _hours(total["reclaimedGpuHours"]), _pct(total["reclaimedShare"]),
                     _hours(total["rightReclaimedGpuHours"]), _pct(total["boundShare"]),
                     _pct(total["reachedShareOfBound"]) if total["boundGpuHours"] else "-",
                     f"{released:,}", f"{total['wrongReleases']:,} ({_pct(total['wrongReleaseShare'])})" if released
                     else "-", _pct(total["wrongGpuShare"]) if released else "-",
                     "-" if total.get("ownerBackReleases") is None or not released else f"{total['ownerBackReleases']:,}",
                     _hours(total["busyGpuHoursAhead"]), _hours(total["costGpuHours"]["total"]),
                     _hours(total["netGpuHours"]),
                     _hours(total["queue"]["handedToQueuedGpuHours"]) if "queue" in total else "-",
                     _minutes(total["latencySeconds"]["median"]), _minutes(total["latencySeconds"]["p90"]),
                     f"{run.dry_run_plans:,}" if run.kind != "baseline" else "-",
                     f"{runs_count:,}" if run.kind != "baseline" else "-"))
    lines += _grid(header, rows)
    first = runs[0].total if runs else {}
    if first:
        lines += ["", (f"Idle: {_hours(first['idleGpuHours'])} GPU-hours in {first['idleStretches']:,} stretches "
                      f"({_hours(first['idleGpuHoursEndingAtFinish'])} in stretches ending at finish, which no release "
                      "can interrupt). bound: what one never-wrong release per workload at the policy's wait could "
                      "reclaim, as a share of the idle GPU-hours; reached: right releases' reclaim / the bound; "
                      "wrong GPUs: GPUs of wrong releases / GPUs released; cost: lost progress, restart and the wait "
                      "to be admitted again of wrong releases; net: reclaimed - cost; owner back: releases after which the "
                      "workload's own source showed work again; to queue: GPU-hours queued jobs ran on freed GPUs.")]
    given = next((r for r in runs if r.kind == "given"), None)
    if given is not None:
        lines += ["", f"{given.name} per tenant:"]
        tenant_rows = []
        for tenant, figures in given.tenants.items():
            tenant_rows.append((tenant, _hours(figures["idleGpuHours"]), _hours(figures["reclaimedGpuHours"]),
                                _pct(figures["reclaimedShare"]), f"{figures['releases']:,}",
                                f"{figures['wrongReleases']:,}",
                                _minutes(figures["latencySeconds"]["median"]), _minutes(figures["latencySeconds"]["p90"])))
        lines += _grid(("tenant", "idle GPU-h", "reclaimed GPU-h", "share", "releases", "wrong", "latency p50", "p90"),
                       tenant_rows)
        if given.outcomes:
            decided = ", ".join(f"{gate} {count:,}" for gate, count in given.outcomes.most_common())
            lines += ["", f"On-idle runs by the rule that decided them: {decided}"]
    lines += ["", "Definitions:"] + [f"  {name}: {text}" for name, text in DEFINITIONS.items()]
    return "\n".join(lines)


def _grid(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths,
                                                                                                      strict=True)))
    return [line(header)] + [line(row) for row in rows]


# -- charts ------------------------------------------------------------------------------------------
COLOURS = {"given": "#C44E52", "variant": "#DD8452", "sweep": "#4C72B0", "baseline": "#55A868"}


def _tradeoff_axis(axis: Any, policies: list[dict[str, Any]], title: str) -> None:
    """One panel: reclaimed share (y) against wrong releases weighted by GPUs (x), one point per policy;
    the window sweep is a line; the bound of the given policy's wait is a dashed line."""
    sweep = [p for p in policies if p["kind"] == "sweep"]
    if sweep:
        axis.plot([p["total"]["wrongGpuShare"] * 100 for p in sweep], [p["total"]["reclaimedShare"] * 100 for p in sweep],
                  "-o", color=COLOURS["sweep"], label="one window for every kind, swept")
        offsets = ((7, 5), (7, -11), (-34, 5), (-34, -11))
        for index, policy in enumerate(sweep):
            x, y = policy["total"]["wrongGpuShare"] * 100, policy["total"]["reclaimedShare"] * 100
            axis.annotate(policy["name"].removeprefix("window "), (x, y), textcoords="offset points",
                          xytext=offsets[index % len(offsets)], fontsize=8, color=COLOURS["sweep"])
    markers = {"no automation": "s", "KEDA only": "^", "KEDA only, cooldown 30m": "v", "Kubeflow culler": "D",
               "Kubeflow culler 1h": "d"}
    variant_markers = ("P", "X", "h")
    variants = 0
    for policy in policies:
        if policy["kind"] == "sweep":
            continue
        marker = markers.get(policy["name"], "o")
        if policy["kind"] == "given":
            marker = "*"
        elif policy["kind"] == "variant":
            marker, variants = variant_markers[variants % len(variant_markers)], variants + 1
        axis.scatter([policy["total"]["wrongGpuShare"] * 100], [policy["total"]["reclaimedShare"] * 100],
                     s=160 if policy["kind"] == "given" else 60, zorder=4 if policy["kind"] == "given" else 3,
                     marker=marker, color=COLOURS[policy["kind"]], label=policy["name"],
                     alpha=1.0 if policy["kind"] == "given" else 0.85)
    given = next((p for p in policies if p["kind"] == "given"), None)
    if given is not None:
        axis.axhline(given["total"]["boundShare"] * 100, color=COLOURS["given"], linestyle="--", linewidth=1,
                     label=f"bound for the {given['name']}'s wait")
    axis.set_xlabel("wrong releases (% of released GPUs: materially busy again before the end)")
    axis.set_ylabel("reclaimed (% of idle GPU-hours)")
    axis.set_xlim(left=-2, right=102)
    axis.set_ylim(bottom=0)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, loc="best")
    axis.set_title(title, fontsize=10)


def tradeoff_chart(runs: list[PolicyRun] | list[tuple[str, list[dict[str, Any]]]], path: Path,
                   title: str = "") -> Path:
    """The trade-off: one panel for these runs, or one panel per (title, policies as --output json gives
    them) pair (the docs' chart of both calibrations)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if runs and isinstance(runs[0], tuple):
        panels = list(runs)  # type: ignore[arg-type]
    else:
        panels = [(title, [r.as_dict() for r in runs])]  # type: ignore[union-attr]
    figure, axes = plt.subplots(1, len(panels), figsize=(7.5 * len(panels), 5.4), squeeze=False)
    for axis, (name, policies) in zip(axes[0], panels, strict=True):
        _tradeoff_axis(axis, policies, name)
    figure.suptitle("Idle policy trade-off: GPU-hours reclaimed vs GPUs released wrongly", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def docs_chart(path: Path, documents: list[Path]) -> Path:
    """The docs' trade-off chart from `gpuaas simulate --output json` documents, one panel each:

        python -m gpuaas.simulate.report docs/images/simulate-tradeoff.png philly.json pai.json
    """
    import json

    panels = []
    for document in documents:
        data = json.loads(Path(document).read_text())
        history = data["history"]
        panels.append(((f"{history['source']}: {history['days']:g} days, {history['gpusHeldOnAverage']:,.0f} GPUs held "
                       "on average"), data["policies"]))
    return tradeoff_chart(panels, path)


def latency_chart(runs: list[PolicyRun], path: Path) -> Path:
    """Release latency (release minus the start of the idle stretch) per policy, as box plots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in runs if len(r.releases.latency) and np.any(~np.isnan(r.releases.latency))]
    figure, axis = plt.subplots(figsize=(max(6.0, 0.9 * len(shown) + 2), 4.5))
    if shown:
        data = [r.releases.latency[~np.isnan(r.releases.latency)] / 60.0 for r in shown]
        boxes = axis.boxplot(data, whis=(10, 90), showfliers=False, patch_artist=True)
        for patch, run in zip(boxes["boxes"], shown, strict=True):
            patch.set_facecolor(COLOURS[run.kind])
            patch.set_alpha(0.6)
        axis.set_xticks(range(1, len(shown) + 1), [r.name for r in shown], rotation=30, ha="right", fontsize=8)
        axis.set_yscale("log")
    axis.set_ylabel("minutes from idle to release (log)")
    axis.set_title("Release latency (box: quartiles, whiskers: p10-p90)")
    axis.grid(alpha=0.3, axis="y")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def write_html(directory: Path, history: History, timings: ProductTimings, policy_source: str,
               runs: list[PolicyRun], document: dict[str, Any]) -> Path:
    notes = document.get("product", {}).get("notes", [])
    directory.mkdir(parents=True, exist_ok=True)
    summary_ = history_summary(history)
    tradeoff = tradeoff_chart(runs, directory / "tradeoff.png",
                              f"{summary_['source']}: {summary_['days']:g} days, {summary_['gpusHeldOnAverage']:,.0f} "
                              "GPUs held on average")
    latency = latency_chart(runs, directory / "latency.png")

    def image(path: Path, alt: str) -> str:
        data = base64.b64encode(path.read_bytes()).decode()
        return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'

    text = table(history, timings, policy_source, runs, notes)
    interrupted = document.get("interruptions", [])
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(item[key]))}</td>" for key in
                         ("workload", "namespace", "tenant", "kind", "gpus", "idleSince", "releasedAt", "activityBackAt"))
        + "</tr>" for item in interrupted)
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>gpuaas simulate</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}}pre{{background:#f6f6f6;
padding:1em;overflow-x:auto;font-size:12px}}table{{border-collapse:collapse;font-size:12px}}td,th{{border:1px solid #ddd;
padding:3px 6px}}img{{max-width:100%}}</style></head><body>
<h1>What the idle policy would have done</h1>
<p>Replayed with the production decision (<code>steps.reactions.on_idle.judge</code>) behind the rendered
alert and Alertmanager timings. Every figure follows the definitions at the end of the table.</p>
<h2>Trade-off</h2>{image(tradeoff, "reclaimed share vs wrong-release share per policy")}
<h2>Release latency</h2>{image(latency, "release latency per policy")}
<h2>Figures</h2><pre>{html.escape(text)}</pre>
<h2>Whom the given policy would have interrupted (first {len(interrupted)}, most GPUs first)</h2>
<table><tr><th>workload</th><th>namespace</th><th>tenant</th><th>kind</th><th>GPUs</th><th>idle since</th>
<th>released</th><th>activity back</th></tr>{rows}</table>
</body></html>
"""
    target = directory / "index.html"
    target.write_text(page)
    return target


if __name__ == "__main__":  # pragma: no cover - the docs' chart, from saved `--output json` documents
    import sys

    if len(sys.argv) < 3:
        raise SystemExit("usage: python -m gpuaas.simulate.report OUT.png SIMULATE.json [SIMULATE.json ...]")
    print(docs_chart(Path(sys.argv[1]), [Path(a) for a in sys.argv[2:]]))
