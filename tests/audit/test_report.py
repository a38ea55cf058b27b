"""`gpuaas audit report --html DIR`: index.html with embedded charts, the PNGs beside it, tables."""

from __future__ import annotations

import base64
import re

from matplotlib import image

CHARTS = ("reactions-per-day.png", "gpu-hours-reclaimed.png", "failures.png")


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
    assert "<b>2.500</b> GPU-hours reclaimed" in page
    assert re.search(r"<td>vision</td><td>2</td>.*?<td>2\.500</td><td>4</td>", page)
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
