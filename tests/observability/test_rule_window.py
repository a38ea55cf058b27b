"""The rendered alert window is the policy's shortest idle window, so a tenant's window means what it says."""

from __future__ import annotations

import pytest

from gpuaas.manifests import observability as obs


def test_rendered_rule_uses_the_rendered_policys_shortest_window() -> None:
    rule = next(o for o in obs.objects() if o["kind"] == "PrometheusRule")
    alert = rule["spec"]["groups"][0]["rules"][-1]
    assert alert["alert"] == obs.ALERT_NAME and obs.rule_window() == "30m"
    assert "[30m]" in alert["expr"] and "offset 30m" in alert["expr"]


@pytest.mark.parametrize(("policy", "window"), [
    ("idle: {window: 30m}\ntenants: {team-a: {idle: {window: 10m}}}\n", "10m"),
    ("idle: {window: 1h}\ntenants: {team-a: {idle: {window: 2h}}}\n", "1h"),
    ("idle: {window: 90s}\n", "90s"),
    ("idle: {window: 1h30m}\n", "90m"),
])
def test_rule_window_is_the_shortest(policy: str, window: str) -> None:
    assert obs.rule_window(policy) == window
