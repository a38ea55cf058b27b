"""engine.monitoring says clearly what is wrong: missing binaries, a Prometheus that refuses its rules."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from engine.exporter import DcgmExporter
from engine.monitoring import Monitoring, MonitoringUnavailable, availability
from tests.support.prometheus import require_monitoring


def test_missing_binaries_are_named_with_the_install_command(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: nothing is found
    found = availability()
    assert not found.ok and found.prometheus is None
    assert "prometheus, prometheus-alertmanager, promtool" in found.reason
    assert "apt-get install -y --no-install-recommends prometheus prometheus-alertmanager" in found.reason
    with pytest.raises(MonitoringUnavailable, match="not on PATH: prometheus"):
        Monitoring(rule_groups={"groups": []}).start()


def test_prometheus_refusing_its_rules_reports_its_log() -> None:
    require_monitoring()
    broken = {"groups": [{"name": "broken", "rules": [{"record": "x", "expr": "sum("}]}]}
    monitoring = Monitoring(rule_groups=broken)
    with pytest.raises(MonitoringUnavailable, match="(?s)prometheus exited with code 1.*could not parse expression"):
        monitoring.start()
    assert monitoring.prometheus is None and monitoring.workdir is None  # stopped and cleaned up


def test_exporter_serves_only_metrics() -> None:
    with DcgmExporter() as exporter:
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(f"{exporter.url}/", timeout=5)
        assert caught.value.code == 404
        with urllib.request.urlopen(f"{exporter.url}/metrics", timeout=5) as response:
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        with pytest.raises(KeyError, match="uuid: no emulated GPU"):
            exporter.set_utilization("GPU-missing", 10)
