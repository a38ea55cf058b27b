"""The demo report's charts (issue 18 item 6): one colour per tenant in both, no word over the data, and a
headline that says what started each run. Measured on the drawn figures (tests/support/chart_overlaps.py:
matplotlib's own boxes of the labels, ticks and legends against the drawn lines, bars and areas).

One full demo with real Prometheus (the quota chart needs its history) at 1000x, and the audit report of its
archive; then the chart alone with more story marks crowded into one panel than the demo makes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from matplotlib.colors import to_hex

from engine.demo import DemoOptions, DemoResult, run_demo
from gpuaas.commands.demo import quota_advice_for_demo
from gpuaas.manifests import observability
from tests.support.chart_overlaps import checked_charts
from tests.support.prometheus import require_monitoring

TENANTS = ("research", "vision", "serving")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DemoResult, Any]]:
    require_monitoring()
    output = tmp_path_factory.mktemp("demo-report")
    with checked_charts() as checked:
        result = run_demo(DemoOptions(output_dir=output, speed=1000.0, metrics="prometheus", progress=None,
                                      alert_rules=observability, quota_advisor=quota_advice_for_demo))
    yield result, checked


def _tenant_colours_of_allocation(figure: Any) -> dict[str, str]:
    """Each panel's reserved line colour, by the tenant its y label names."""
    return {axis.get_ylabel().split("\n")[0]: to_hex(axis.lines[0].get_color()) for axis in figure.axes}


def _tenant_colours_of_quota(figure: Any) -> dict[str, str]:
    left = figure.axes[0]
    return {line.get_label().removesuffix(" allocated"): to_hex(line.get_color()) for line in left.lines
            if line.get_label().endswith(" allocated")}


def test_both_charts_give_each_tenant_one_colour(demo: tuple[DemoResult, Any]) -> None:
    _, checked = demo
    allocation = _tenant_colours_of_allocation(checked.figures["gpu-allocation.png"])
    quota = _tenant_colours_of_quota(checked.figures["quota-advice.png"])
    assert set(allocation) == set(quota) == set(TENANTS), (allocation, quota)
    assert allocation == quota
    assert len(set(allocation.values())) == len(TENANTS)  # three tenants, three colours
    bars = checked.figures["quota-advice.png"].axes[1].patches
    advised = [to_hex(bar.get_facecolor()) for bar in bars if bar.get_label() in ("advised", "_nolegend_")][-3:]
    assert sorted(advised) == sorted(quota.values())


def test_no_word_covers_the_data_in_either_chart(demo: tuple[DemoResult, Any]) -> None:
    _, checked = demo
    assert {"gpu-allocation.png", "quota-advice.png"} <= set(checked.charts)
    assert checked.problems == []


def test_the_headline_says_what_started_each_run(demo: tuple[DemoResult, Any]) -> None:
    result, _ = demo
    summary = result.summary
    # the sweep also delivers the Ray cluster's idle warning once its grace is over (steps.warning)
    swept = summary["sweep"]["recorded"] + summary["sweep"]["delivered"] + summary["sweep"]["idle_warnings"]
    assert swept > 0, summary["sweep"]  # the job kinds' admissions and finishes are the sweep's
    assert summary["started_by"] == {"events": summary["runs"] - 1 - swept, "sweep": swept, "hand-submitted": 1,
                                     "resubmitted": 0}
    page = (result.output_dir / "index.html").read_text()
    assert (f"<b>{summary['runs']}</b> workflow runs: {summary['runs'] - 1 - swept} started by the Sensors (from "
            f"{summary['events_routed']} events routed), {swept} by the catch-up sweep, 1 hand-submitted, "
            f"0 resubmitted") in page
    assert "started by 31 events" not in page and "runs started by" not in page


def test_the_audit_report_of_the_demo_uses_the_demos_colours(demo: tuple[DemoResult, Any], tmp_path: Path) -> None:
    from gpuaas.audit.history import ArchiveHistory
    from gpuaas.audit.report import write_report

    result, checked = demo
    allocation = _tenant_colours_of_allocation(checked.figures["gpu-allocation.png"])
    history = ArchiveHistory(result.output_dir / "runs.db")
    with checked_charts() as audit:
        write_report(list(history.runs()), tmp_path, source=history.where)
    assert audit.problems == []
    runs_chart = next(figure for name, figure in audit.figures.items() if "runs" in name)
    panel_colours = {axis.get_ylabel().split("\n")[0]: to_hex(axis.yaxis.label.get_color()) for axis in runs_chart.axes}
    assert {t: panel_colours[t] for t in TENANTS} == allocation
    reclaimed = next(figure for name, figure in audit.figures.items() if "reclaim" in name)
    bars = {tick.get_text(): to_hex(bar.get_facecolor())
            for tick, bar in zip(reclaimed.axes[0].get_yticklabels(), reclaimed.axes[0].patches, strict=False)}
    assert bars == {"vision": allocation["vision"]}  # the one tenant whose GPUs were reclaimed


def test_crowded_marks_stay_above_the_data(tmp_path: Path, demo: tuple[DemoResult, Any]) -> None:
    """Eight marks within an hour in one panel take several label rows: the scale makes room under them."""
    from engine import report

    result, _ = demo
    summary = json.loads(json.dumps(result.summary))
    first = summary["marks"][0]["hours"]
    summary["marks"] += [{"time": "09:00:00", "hours": first + 0.1 * i, "tenant": "research", "what": f"step {i} of a "
                          "busy hour"} for i in range(8)]
    with checked_charts() as checked:
        report.allocation_chart(tmp_path / "crowded.png", result.samples, summary)
    assert checked.problems == []
