"""`gpuaas audit report --html DIR`: index.html with embedded charts, the PNGs beside it, tables."""

from __future__ import annotations

import base64
import re

from matplotlib import image

CHARTS = ("runs-over-time.png", "gpu-hours-reclaimed.png", "failures.png")


def test_report_is_self_contained_with_valid_charts(cli, archive, tmp_path):
    out_dir = tmp_path / "report"
    code, out, err = cli("audit", "report", "--html", str(out_dir), "--archive", str(archive))
    assert code == 0, err
    assert "(8 runs)" in out
    page = (out_dir / "index.html").read_text()
    embedded = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(embedded) == len(CHARTS)
    for name, data in zip(CHARTS, embedded, strict=True):
        png = out_dir / name
        assert base64.b64decode(data) == png.read_bytes()
        pixels = image.imread(png)  # raises on a broken PNG
        assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert "src=\"http" not in page and "<script" not in page
    # Figures come from the records: 2.5 GPU-hours reclaimed by the vision child of the on-idle run.
    assert "<b>2.5</b> GPU-hours reclaimed" in page
    assert "wall-clock UTC" in page and "demo clock" not in page  # not a demo archive: no second unit
    assert re.search(r"<td>vision</td><td>2</td>.*?<td>2\.5</td><td>4</td>", page)
    # Failures and their reasons, including the run whose archive row is unreadable.
    for reason in ("409 Conflict after 5 attempts", "Error (exit code 75)", "no readable Workflow JSON",
                   "is not JSON"):
        assert reason in page, reason


def test_report_respects_filters_and_escapes_text(cli, archive, tmp_path):
    out_dir = tmp_path / "research"
    code, out, _ = cli("audit", "report", "--html", str(out_dir), "--archive", str(archive), "--namespace", "team-research")
    assert code == 0 and "(3 runs)" in out
    page = (out_dir / "index.html").read_text()
    assert "gpuaas-on-finished-q1w2e" not in page
    assert "&#x27;resumed OK (not JSON)&#x27;" in page  # record text is escaped, not injected


def test_report_with_no_runs_still_draws_every_chart(cli, archive, tmp_path):
    out_dir = tmp_path / "empty"
    code, _, _ = cli("audit", "report", "--html", str(out_dir), "--archive", str(archive), "--tenant", "nobody")
    assert code == 0
    assert all(image.imread(out_dir / name).size for name in CHARTS)


def test_report_of_a_demo_archive_gives_the_demo_clock_figure_too(cli, archive, tmp_path):
    """One time base per figure, both said: wall-clock GPU-hours, and x speed on the demo clock."""
    (archive.parent / "summary.json").write_text('{"demo_time": {"speed": 300}}')
    out_dir = tmp_path / "demo"
    code, _, err = cli("audit", "report", "--html", str(out_dir), "--archive", str(archive))
    assert code == 0, err
    page = (out_dir / "index.html").read_text()
    assert "runs 300x wall time: 2.5 GPU-hours here are 750 GPU-hours on the demo clock" in page


def test_time_bins_follow_the_span_of_the_history():
    from datetime import UTC, datetime, timedelta

    from gpuaas.audit.report import time_bin

    class Started:
        def __init__(self, minutes: float) -> None:
            self.started_at = datetime(2026, 12, 1, tzinfo=UTC) + timedelta(minutes=minutes)

    assert time_bin([Started(0), Started(1.2)])[1] == "5 seconds"  # the demo's archive: about a minute
    assert time_bin([Started(0), Started(30)])[1] == "minute"
    assert time_bin([Started(0), Started(60 * 20)])[1] == "hour"
    assert time_bin([Started(0), Started(60 * 24 * 30)])[1] == "day"
