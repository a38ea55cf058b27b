"""demo-report/: index.html with PNG charts, written from the demo's summary and samples.

Charts (matplotlib, no display needed): GPUs reserved by Kueue and GPUs actually busy per tenant
over demo time, and the GPU-hours reclaimed by releases of idle workloads. The page is
self-contained (relative links to the PNGs, the archive and the snapshot in the same folder).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

TENANT_COLOURS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3")


def _charts(output: Path, samples: list[Any], summary: dict[str, Any]) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    charts: list[tuple[str, str]] = []
    tenants = list(summary.get("tenants") or {})
    hours = [s.hours for s in samples]
    figure, axes = plt.subplots(len(tenants) or 1, 1, figsize=(9, 2.4 * max(1, len(tenants))), sharex=True)
    axes_list = axes if hasattr(axes, "__len__") else [axes]
    for axis, tenant, colour in zip(axes_list, tenants, TENANT_COLOURS, strict=False):
        axis.step(hours, [s.reserved.get(tenant, 0) for s in samples], where="post", color=colour,
                  label="GPUs reserved (Kueue admission)")
        axis.fill_between(hours, [s.busy.get(tenant, 0.0) for s in samples], step="post", alpha=0.35,
                          color=colour, label="GPUs busy (DCGM utilization)")
        axis.axhline(summary["tenants"][tenant]["nominal_gpus"], color="grey", linestyle=":", linewidth=1,
                     label="nominal quota")
        axis.set_ylabel(f"{tenant}\nGPUs")
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
    axes_list[0].legend(loc="upper left", fontsize=8, ncol=3)
    axes_list[-1].set_xlabel("demo time (hours since 08:00)")
    figure.suptitle("GPU allocation and use per tenant")
    figure.tight_layout()
    figure.savefig(output / "gpu-allocation.png", dpi=110)
    plt.close(figure)
    charts.append(("gpu-allocation.png", "GPU allocation and use per tenant over time"))

    reclaimed = summary.get("gpu_hours_reclaimed_by_workload") or {}
    figure, axis = plt.subplots(figsize=(9, 2.8))
    if reclaimed:
        names = list(reclaimed)
        axis.barh(names, [reclaimed[n] for n in names], color="#55A868")
        for index, name in enumerate(names):
            axis.text(reclaimed[name], index, f" {reclaimed[name]:.2f}", va="center", fontsize=9)
    else:
        axis.text(0.5, 0.5, "no workload was released", ha="center", va="center", transform=axis.transAxes)
    axis.set_xlabel("GPU-hours reclaimed (demo time)")
    axis.set_title(f"Reclaimed from idle workloads: {summary.get('gpu_hours_reclaimed', 0):.2f} GPU-hours")
    figure.tight_layout()
    figure.savefig(output / "gpu-hours-reclaimed.png", dpi=110)
    plt.close(figure)
    charts.append(("gpu-hours-reclaimed.png", "GPU-hours reclaimed by releasing idle workloads"))
    return charts


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def write(output: Path, summary: dict[str, Any], samples: list[Any]) -> Path:
    output.mkdir(parents=True, exist_ok=True)
    charts = _charts(output, samples, summary)
    from engine import quota_report  # its own section: gpuaas quota advise on this run

    quota_section = quota_report.section(output, summary)
    reactions = [[name, r["runs"], ", ".join(f"{k} {v}" for k, v in r["phases"].items()),
                  ", ".join(f"{k} {v}" for k, v in r["outcomes"].items())]
                 for name, r in (summary.get("reactions") or {}).items()]
    timeline = [[r["time"], r["event"], r["sensor"], r["workflow"], r["outcome"]]
                for r in summary.get("timeline") or []]
    demo_time = summary.get("demo_time") or {}
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpuaas demo report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}
td, th {{ border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; }}
th {{ background: #f3f3f3; }} .figure {{ margin: 1.5em 0; }} code {{ background: #f3f3f3; padding: 0 0.2em; }}
</style></head><body>
<h1>gpuaas demo report</h1>
<p><b>{summary.get('runs', 0)}</b> workflow runs, <b>{summary.get('gpu_hours_reclaimed', 0):.2f}</b> GPU-hours
reclaimed, {summary.get('events_routed', 0)} events routed through the rendered Sensors.
Demo time ran {demo_time.get('speed', 1):g}x wall time ({demo_time.get('demo_hours', 0)} demo hours in
{demo_time.get('wall_seconds', 0)} s).</p>
<p>Metrics: {html.escape(str(summary.get('metrics', '')))}. Steps ran {html.escape(str(summary.get('step_mode')))}.</p>
{''.join(f'<div class="figure"><img src="{name}" alt="{html.escape(title)}"><br><i>{html.escape(title)}</i></div>'
         for name, title in charts)}
{quota_section}
<h2>Reactions by WorkflowTemplate</h2>
{_table(["WorkflowTemplate", "runs", "phases", "outcomes"], reactions)}
<h2>Timeline</h2>
{_table(["time", "event", "sensor", "workflow", "outcome"], timeline)}
<h2>Files</h2>
<ul><li><a href="runs.db">runs.db</a>: the run archive (Argo archive layout): <code>gpuaas audit --archive runs.db</code></li>
<li><a href="cluster-snapshot.json">cluster-snapshot.json</a>: the final cluster state, for local resubmission</li>
<li><a href="summary.json">summary.json</a></li></ul>
</body></html>
"""
    path = output / "index.html"
    path.write_text(page)
    return path
