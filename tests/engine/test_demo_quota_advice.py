"""The demo report's quota-advice section: `gpuaas quota advise` on the run's own Prometheus history.

The reduced story with real Prometheus: the engine's Kueue metrics (Kueue v0.19's names and labels)
are scraped next to the DCGM exporter, and at the end the demo advises on the whole run."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from engine.demo import DemoOptions, run_demo
from gpuaas.commands.demo import quota_advice_for_demo
from gpuaas.manifests import observability
from tests.support.prometheus import require_monitoring


def test_reduced_demo_with_prometheus_reports_quota_advice(tmp_path: Path) -> None:
    require_monitoring()
    run_demo(DemoOptions(output_dir=tmp_path, speed=3000.0, metrics="prometheus", short=True, progress=None,
                         alert_rules=observability, quota_advisor=quota_advice_for_demo))
    summary = json.loads((tmp_path / "summary.json").read_text())
    advice = summary["quota_advice"]
    tenants = {t["tenant"]: t for t in advice["tenants"]}
    assert set(tenants) == {"research", "vision", "serving"}
    for tenant in tenants.values():
        usage = tenant["usage"]
        # several samples over the run; how many depends on scrape timing, which a loaded machine delays
        assert usage["nominal"] == 4 and usage["samples"] >= 3, usage
        assert tenant["verdict"] in ("no change", "lower", "raise", "limits") and tenant["reasons"]
    # the story: research's 6-GPU PyTorchJob waited (backlog), so research's demand exceeded its quota
    assert tenants["research"]["usage"]["demand_p95"] > 4
    assert tenants["research"]["usage"]["queued_fraction"] > 0
    assert max(p[1] for p in advice["series"]["research"]["pending"]) >= 6
    page = (tmp_path / "index.html").read_text()
    png = (tmp_path / "quota-advice.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Quota advice (<code>gpuaas quota advise</code>" in page
    assert f'src="data:image/png;base64,{base64.b64encode(png).decode()}"' in page  # embedded, one file


def test_without_prometheus_the_report_says_why(tmp_path: Path) -> None:
    run_demo(DemoOptions(output_dir=tmp_path, speed=3000.0, metrics="in-process", short=True, progress=None))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert "quota_advice" not in summary and "without Prometheus" in summary["quota_advice_unavailable"]
    assert "Not computed: the demo ran without Prometheus" in (tmp_path / "index.html").read_text()


def test_the_report_shows_queue_wait_in_demo_time(tmp_path: Path) -> None:
    """Prometheus measured the run in wall seconds; the page's timeline and chart are in demo time.
    research's PyTorchJob queued about 90 demo minutes (18 wall seconds at 300x): the table says so."""
    from engine.quota_report import section

    usage = {"nominal": 4, "allocated_mean": 4.5, "allocated_p95": 8.0, "demand_p95": 8.0, "borrowed_mean": 1.7,
             "lent_mean": 0.2, "wait_p90_seconds": 18.0}
    summary = {"demo_time": {"speed": 300.0, "wall_seconds": 66.0, "demo_hours": 5.5},
               "quota_advice": {"window": "66s of wall time (the whole demo)", "wall_seconds": 66, "notes": [],
                                "submissions": [], "series": {"research": {}},
                                "tenants": [{"tenant": "research", "usage": usage, "verdict": "no change",
                                             "newNominal": None, "reasons": ["r"]}]}}
    page = section(tmp_path, summary)
    assert "<td>90 min</td>" in page and "18.0 s" not in page
    assert "wait p90 (demo time)" in page
