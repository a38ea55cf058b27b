"""The selection semantics the doctor reproduces: label selectors, and Alertmanager's routing tree, which is
checked against Alertmanager's own code (`amtool config routes test`, Debian's prometheus-alertmanager)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaas.doctor.selectors import (
    Matcher,
    Route,
    blocking_matchers,
    deliveries,
    describe_selector,
    labels_that_satisfy,
    parse_matchers,
    paths_to,
    selects,
)
from gpuaas.manifests import observability as obs
from tests.doctor.healthy import IDLE_RECEIVER, operator_routing
from tests.support.prometheus import require_monitoring


@pytest.mark.parametrize(("selector", "labels", "expected"), [
    ({}, {}, True),
    (None, {"a": "b"}, False),
    ({"matchLabels": {"release": "kps"}}, {"release": "kps", "x": "y"}, True),
    ({"matchLabels": {"release": "kps"}}, {}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}, {"tier": "b"}, True),
    ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]}, {}, False),
    ({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                            "values": ["kube-system"]}]}, {"kubernetes.io/metadata.name": "team-a"}, True),
    ({"matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["1"]}]}, {}, True),
    ({"matchExpressions": [{"key": "x", "operator": "Exists"}]}, {"x": ""}, True),
    ({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}, {"x": "1"}, False),
])
def test_label_selectors(selector: dict[str, Any] | None, labels: dict[str, str], expected: bool) -> None:
    assert selects(selector, labels) is expected


def test_labels_that_satisfy_a_selector_are_what_the_fixes_print() -> None:
    selector = {"matchLabels": {"release": "kps"},
                "matchExpressions": [{"key": "team", "operator": "In", "values": ["gpu"]},
                                     {"key": "skip", "operator": "DoesNotExist"}]}
    wanted = labels_that_satisfy(selector)
    assert wanted == {"release": "kps", "team": "gpu"} and selects(selector, wanted)
    assert labels_that_satisfy(None) is None
    assert describe_selector(None) == "null" and describe_selector({}) == "{} (everything)"


@pytest.mark.parametrize(("text", "expected"), [
    ('alertname="GPUWorkloadIdle"', [Matcher("alertname", "=", "GPUWorkloadIdle")]),
    ('{namespace="gpuaas", alertname=~"A|B"}', [Matcher("namespace", "=", "gpuaas"), Matcher("alertname", "=~", "A|B")]),
    ('severity!=critical', [Matcher("severity", "!=", "critical")]),
    (r'msg="a \"quoted, comma\""', [Matcher("msg", "=", 'a "quoted, comma"')]),
])
def test_matchers_parse(text: str, expected: list[Matcher]) -> None:
    assert parse_matchers(text) == expected


def test_a_malformed_matcher_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="expected an Alertmanager matcher"):
        parse_matchers("not a matcher")


def test_the_blocking_matcher_on_the_path_to_the_webhook_is_named() -> None:
    root = Route.parse(operator_routing(namespace_matcher="gpuaas")["route"])
    labels = {"alertname": obs.ALERT_NAME, "namespace": "team-a"}
    (path,) = paths_to(root, IDLE_RECEIVER)
    assert [str(m) for m in blocking_matchers(path, labels)] == ['namespace="gpuaas"']


CONFIGS = {
    "operator, OnNamespace (the default) in gpuaas": operator_routing(),
    "operator, in the Alertmanager's namespace, no matcher": operator_routing(namespace_matcher=None,
                                                                              amc_namespace="monitoring"),
    "operator, OnNamespace in monitoring": operator_routing(namespace_matcher="monitoring", amc_namespace="monitoring"),
    "plain (gpuaas cluster up)": obs.alertmanager_config("http://127.0.0.1:9/alertmanager", "/dev/null",
                                                         admins_url="http://127.0.0.1:9/admins"),
    "match and match_re, continue": {
        "route": {"receiver": "default", "routes": [
            {"receiver": "a", "match": {"team": "x"}, "continue": True},
            {"receiver": "b", "match_re": {"alertname": "GPU.*"}, "routes": [
                {"receiver": "c", "matchers": ['{severity=~"warn.*", namespace!="kube-system"}']}]},
            {"receiver": "d", "matchers": ["severity=critical"]}]},
        "receivers": [{"name": n} for n in ("default", "a", "b", "c", "d")]},
}
LABEL_SETS = [
    {"alertname": obs.ALERT_NAME, "namespace": "gpuaas", "workload_namespace": "team-a", "pod": "p",
     "severity": "warning", "gpuaas_reaction": "on-idle"},
    {"alertname": obs.ALERT_NAME, "namespace": "team-a", "pod": "p", "severity": "warning",
     "gpuaas_reaction": "on-idle"},
    {"alertname": obs.ALERT_NAME, "namespace": "gpuaas", "severity": "warning"},
    {"alertname": "GPUTemperatureHigh", "gpuaas_notify": "gpu-admins", "severity": "warning", "team": "x"},
    {"alertname": "GPUXidError", "severity": "critical", "namespace": "kube-system"},
    {"alertname": "KubePodCrashLooping", "severity": "critical"},
    {"alertname": "Other", "team": "x"},
]


@pytest.mark.parametrize("name", CONFIGS)
def test_routing_agrees_with_alertmanagers_own_code(tmp_path: Path, name: str) -> None:
    require_monitoring()
    amtool = shutil.which("amtool")
    assert amtool, "amtool comes with the Debian package prometheus-alertmanager (make setup)"
    config = tmp_path / "alertmanager.yml"
    config.write_text(yaml.safe_dump(CONFIGS[name]))
    root = Route.parse(CONFIGS[name]["route"])
    for labels in LABEL_SETS:
        done = subprocess.run([amtool, "config", "routes", "test", f"--config.file={config}",
                               *(f"{k}={v}" for k, v in labels.items())], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        theirs = [r for r in re.split(r"[,\s]+", done.stdout.strip()) if r]
        assert deliveries(root, labels) == theirs, (name, labels)
