"""The demo report's quota-advice section: `gpuaas quota advise` run on the demo's own history.

At the end of `make demo` the demo's real Prometheus holds the run's Kueue series (from
engine.kueue.metrics, scraped like real Kueue) and DCGM series; the advisor `gpuaas demo` hands in
(DemoOptions.quota_advisor: `gpuaas quota advise` over the whole run, kept in gpuaas/ because the
engine does not import the CLI package) returns the advice and each tenant's sampled series. `section` draws the chart
(GPUs allocated and waiting per tenant against its quota, and the quota now vs advised) and
returns the HTML for the report page. It lives apart from engine/report.py on purpose: that page's
other charts change independently.
"""

from __future__ import annotations

import base64
import html
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from engine.colours import tenant_colours


def _clock_start(clock: str) -> datetime:
    hours, minutes = (int(part) for part in clock.split(":"))
    return datetime(2000, 1, 1, hours, minutes)


def _chart(output: Path, advice: dict[str, Any], demo_hours: float, summary_clock: str = "08:00",
           colours: dict[str, str] | None = None) -> str:
    """The quota chart; a tenant's colour is the one the demo report's allocation chart gives it (`colours`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    tenants = [t["tenant"] for t in advice["tenants"]]
    colours = colours or tenant_colours(tenants)
    scale = demo_hours / max(1, advice.get("wall_seconds", 1))  # wall seconds -> demo hours
    start = _clock_start(summary_clock)
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [2.2, 1]})
    for tenant in tenants:
        colour = colours[tenant]
        series = advice["series"].get(tenant, {})
        allocated = series.get("allocated", [])
        pending = {t: v for t, v in series.get("pending", [])}
        if allocated:
            xs = [start + timedelta(hours=t * scale) for t, _ in allocated]  # the demo clock, as on the page
            left.step(xs, [v for _, v in allocated], where="post", color=colour, label=f"{tenant} allocated")
            left.step(xs, [v + pending.get(t, 0.0) for t, v in allocated], where="post", color=colour,
                      linestyle="--", alpha=0.8, label=f"{tenant} allocated + waiting")
        nominal = series.get("nominal", [])
        if nominal:
            left.axhline(nominal[-1][1], color=colour, linestyle=":", linewidth=1)  # data: the quota
    left.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M"))
    left.set_xlabel("demo clock (the timeline's)")
    left.set_ylabel("GPUs")
    left.set_title("Kueue: GPUs allocated and waiting per tenant (dotted: nominal quota)", fontsize=10)
    left.set_ylim(bottom=0)
    left.grid(alpha=0.3)
    left.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.22))
    now = [t["usage"]["nominal"] for t in advice["tenants"]]
    advised = [t["newNominal"] if t["newNominal"] is not None else t["usage"]["nominal"] for t in advice["tenants"]]
    positions = range(len(tenants))
    right.bar([p - 0.2 for p in positions], now, width=0.4, color="#BBBBBB", label="nominal now")
    right.bar([p + 0.2 for p in positions], advised, width=0.4, color=[colours[t] for t in tenants], label="advised")
    for p, t in zip(positions, advice["tenants"], strict=True):
        right.plot([p - 0.4, p + 0.4], [t["usage"]["demand_p95"]] * 2, color="black", linewidth=1.5,
                   label="demand p95" if p == 0 else None)
    # the verdict under the tenant's name: written over the bars it crossed the demand line (issue 18)
    right.set_xticks(list(positions), [f"{t['tenant']}\n{t['verdict']}" for t in advice["tenants"]])
    right.set_ylabel("GPUs")
    right.set_title("Quota now vs advised", fontsize=10)
    right.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.22))
    demand = [t["usage"]["demand_p95"] for t in advice["tenants"]]
    right.set_ylim(0, max([*now, *advised, *demand, 1]) * 1.1)
    figure.tight_layout()
    name = "quota-advice.png"
    figure.savefig(output / name, dpi=110)
    plt.close(figure)
    return name


def section(output: Path, summary: dict[str, Any]) -> str:
    """HTML for the report: the chart, the per-tenant table, the reasons and the submissions."""
    advice = summary.get("quota_advice")
    if not advice:
        reason = summary.get("quota_advice_unavailable", "the demo ran without Prometheus")
        return f"<h2>Quota advice</h2><p>Not computed: {html.escape(str(reason))}.</p>"
    demo_hours = (summary.get("demo_time") or {}).get("demo_hours", 0.0) or 1.0
    speed = (summary.get("demo_time") or {}).get("speed", 1.0) or 1.0  # Prometheus saw wall seconds
    image = _chart(output, advice, demo_hours, str((summary.get("demo_time") or {}).get("clock_start") or "08:00"),
                   tenant_colours(list(summary.get("tenants") or {}) + [t["tenant"] for t in advice["tenants"]]))
    embedded = "data:image/png;base64," + base64.b64encode((output / image).read_bytes()).decode("ascii")
    rows = []
    for t in advice["tenants"]:
        u = t["usage"]
        change = f"{u['nominal']} -> {t['newNominal']}" if t["newNominal"] is not None else t["verdict"]
        wait = (f"{u['wait_p90_seconds'] * speed / 60:.0f} min" if u.get("wait_p90_seconds") is not None
                else "-")
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in (
            t["tenant"], u["nominal"], f"{u['allocated_mean']:.1f}", f"{u['allocated_p95']:.1f}",
            f"{u['demand_p95']:.1f}", f"{u['borrowed_mean']:.1f}", f"{u['lent_mean']:.1f}", wait, change,
            "; ".join(t["reasons"]))) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("tenant", "nominal", "alloc mean", "alloc p95", "demand p95",
                                              "borrowed", "lent", "wait p90 (demo time)", "advice", "why"))
    commands = "".join(f"<li><code>{html.escape(s['command'])}</code></li>" for s in advice["submissions"])
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in advice["notes"])
    return (f"<h2>Quota advice (<code>gpuaas quota advise</code> on this run's Prometheus)</h2>"
            f'<figure><img src="{embedded}" alt="Quota advice"><figcaption>Kueue allocation and demand per '
            f"tenant over the demo clock, and the quota advised from it ({image}; window: "
            f"{html.escape(advice['window'])})</figcaption></figure>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
            + (f"<p>Hand submissions that would apply it (gpuaas applies nothing itself):</p><ul>{commands}</ul>"
               if commands else "<p>No change recommended: nothing to submit.</p>")
            + (f"<ul>{notes}</ul>" if notes else ""))
