"""The replay reads the product's settings from the YAML the admin applies, and says clearly what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuaas.manifests import observability as obs
from gpuaas.manifests import platform
from gpuaas.simulate.product import (
    DEFAULT_OBSERVABILITY,
    ProductSettingsError,
    format_duration,
    load_policy,
    load_timings,
    prometheus_duration,
)
from steps.policy import default_policy_text, parse_policy


def test_the_rendered_files_are_the_defaults() -> None:
    policy, source = load_policy()
    assert policy == parse_policy(default_policy_text()) and "ConfigMap gpuaas-policy" in source
    timings = load_timings()
    assert (timings.rule.window_seconds, timings.rule.for_seconds, timings.rule.threshold) == (1800, 300, 0.05)
    n = timings.notifications
    assert (n.group_wait, n.group_interval, n.repeat_interval) == (30, 300, 3600)
    assert timings.source == str(DEFAULT_OBSERVABILITY)


@pytest.mark.parametrize(("window", "for_", "threshold"), [("10m", "2m", 0.1), ("1h30m", "0s", 0.0), ("45s", "15s", 0.02)])
def test_rule_timings_are_read_back_from_the_rendered_rule(tmp_path: Path, window: str, for_: str,
                                                          threshold: float) -> None:
    path = tmp_path / "observability.yaml"
    path.write_text(yaml.safe_dump_all([obs.prometheus_rule(window=window, for_=for_, threshold=threshold),
                                        obs.alertmanager_config_object(group_wait="10s", repeat_interval="4h")]))
    timings = load_timings(path)
    assert timings.rule.window_seconds == prometheus_duration(window, "w")
    assert timings.rule.for_seconds == prometheus_duration(for_, "f") and timings.rule.threshold == threshold
    assert (timings.notifications.group_wait, timings.notifications.repeat_interval) == (10, 14400)


def test_plain_prometheus_and_alertmanager_files_work_too(tmp_path: Path) -> None:
    rules, am = tmp_path / "rules.yml", tmp_path / "am.yml"
    rules.write_text(yaml.safe_dump(obs.rule_groups("20m", "3m")))
    am.write_text(yaml.safe_dump(obs.alertmanager_config("http://x", "/t", group_wait="5s", group_interval="1m",
                                                         repeat_interval="2h")))
    timings = load_timings(rules, am)
    assert timings.rule.window_seconds == 1200 and timings.notifications.repeat_interval == 7200


def test_a_bare_policy_document_and_its_errors(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("idle: {window: 10m, mode: enforce}\n")
    assert load_policy(path)[0].idle.window_seconds == 600
    path.write_text("idle: {threshold: 50}\n")
    with pytest.raises(ProductSettingsError, match=r"policy.yaml idle.threshold: expected a number between 0 and 1"):
        load_policy(path)
    path.write_text(yaml.safe_dump(platform.policy_configmap(document="idle: {window: 1h}\n")))
    assert load_policy(path)[0].idle.window_seconds == 3600


@pytest.mark.parametrize(("content", "says"), [
    ("kind: ConfigMap\ndata: {}\n", "has no data key 'policy.yaml'"),
    (": : :\n", "not valid YAML"),
])
def test_policy_file_errors(tmp_path: Path, content: str, says: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(content)
    with pytest.raises(ProductSettingsError, match=says):
        load_policy(path)


def test_observability_errors_say_what_to_pass(tmp_path: Path) -> None:
    path = tmp_path / "o.yaml"
    path.write_text(yaml.safe_dump(obs.alertmanager_config_object()))
    with pytest.raises(ProductSettingsError, match="no GPUWorkloadIdle alerting rule"):
        load_timings(path)
    path.write_text(yaml.safe_dump(obs.prometheus_rule()))
    with pytest.raises(ProductSettingsError, match="no Alertmanager route"):
        load_timings(path)
    with pytest.raises(ProductSettingsError, match="cannot read it"):
        load_timings(tmp_path / "missing.yaml")


def test_durations() -> None:
    assert prometheus_duration("1h30m", "x") == 5400 and prometheus_duration("1d", "x") == 86400
    assert format_duration(5400) == "1h30m" and format_duration(45) == "45s"
    with pytest.raises(ProductSettingsError, match="expected a duration"):
        prometheus_duration("soon", "route groupWait")


def test_notes_say_what_the_rendered_timings_do_to_the_policy() -> None:
    from gpuaas.simulate.report import effective_repeat, timing_notes
    from steps.policy import IdleSettings, Policy
    from tests.simulate.conftest import PRODUCT

    assert effective_repeat(PRODUCT) == 3900  # repeat 1h with group_interval 5m: every 65 minutes
    notes = timing_notes(Policy(idle=IdleSettings(window_seconds=600, min_runtime_seconds=0),
                                tenants={"slow": IdleSettings(window_seconds=7200, min_runtime_seconds=0)}), PRODUCT)
    assert len(notes) == 2
    assert notes[0].startswith("the default: idle.window 10m is shorter than the alert's window 30m")
    assert "35m30s" in notes[0]
    assert notes[1].startswith("tenant slow: idle.window 2h is longer") and "every 1h5m" in notes[1]


def test_the_idle_route_is_found_among_nested_routes_with_what_it_inherits() -> None:
    from gpuaas.simulate.product import idle_route

    top = {"receiver": "admins", "group_by": ["alertname"], "group_wait": "10s", "repeat_interval": "4h",
           "matchers": ['alertname=~"GPUWorkloadIdle|GPUXidError"'],
           "routes": [{"receiver": "other", "matchers": ['severity="critical"'], "group_wait": "1s"},
                      {"receiver": "idle", "matchers": ['alertname="GPUWorkloadIdle"'], "group_by": ["alertname", "namespace"],
                       "group_interval": "2m"},
                      {"receiver": "late", "matchers": ['alertname="GPUWorkloadIdle"'], "group_wait": "9m"}]}
    assert idle_route(top) == {"group_by": ["alertname", "namespace"], "group_wait": "10s", "repeat_interval": "4h",
                               "group_interval": "2m"}
    assert idle_route({**top, "matchers": ['alertname="GPUXidError"']}) is None
    rendered = load_timings().notifications
    assert (rendered.group_by, rendered.repeat_interval) == ("namespace", 3600)


@pytest.mark.parametrize(("group_by", "expected"), [(["alertname"], "all"), (["..."], "pod"),
                                                    (["namespace", "alertname"], "namespace"),
                                                    (["alertname", "workload_namespace"], "namespace")])
def test_grouping(group_by: list[str], expected: str) -> None:
    from gpuaas.simulate.product import grouping

    assert grouping(group_by) == expected
