"""Policy: the documented example, per-tenant overrides, durations, precise errors (pure)."""

from __future__ import annotations

import pytest

from steps.policy import (
    EXAMPLE_POLICY_YAML,
    IdleSettings,
    PolicyError,
    default_policy_text,
    exempt_by,
    parse_duration,
    parse_policy,
)


def test_example_policy_parses_with_tenant_overrides() -> None:
    policy = parse_policy(default_policy_text())
    assert default_policy_text() == EXAMPLE_POLICY_YAML
    assert policy.idle == IdleSettings(window_seconds=1800, threshold=0.05, min_coverage=0.9,
                                       min_runtime_seconds=3600, mode="enforce", max_releases_per_hour=10)
    team_a = policy.idle_for("team-a")
    assert (team_a.window_seconds, team_a.mode, team_a.threshold) == (3600, "dry-run", 0.05)
    assert policy.idle_for("team-b") == policy.idle and policy.idle_for(None) == policy.idle
    assert policy.raw["quota"]["cohort"] == "gpuaas"
    assert policy.tenant_section("team-a")["quota"]["weight"] == 2


def test_empty_document_means_defaults() -> None:
    assert parse_policy("").idle == IdleSettings()


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("10m", 600), ("1h30m", 5400), ("1.5h", 5400),
                                               (45, 45), (2.5, 2.5)])
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration("x", text) == seconds


@pytest.mark.parametrize(("text", "field", "found"), [
    ("idle: {window: soon}", "policy.yaml idle.window", "'soon'"),
    ("idle: {window: 0}", "policy.yaml idle.window", "0"),
    ("idle: {threshold: 5}", "policy.yaml idle.threshold", "5"),
    ("idle: {threshold: '5%'}", "policy.yaml idle.threshold", "'5%'"),
    ("idle: {mode: enforcing}", "policy.yaml idle.mode", "'enforcing'"),
    ("idle: {maxReleasesPerHour: -1}", "policy.yaml idle.maxReleasesPerHour", "-1"),
    ("idle: {maxReleasesPerHour: true}", "policy.yaml idle.maxReleasesPerHour", "True"),
    ("idle: {windw: 10m}", "policy.yaml idle.windw", "'windw'"),
    ("idel: {}", "policy.yaml idel", "'idel'"),
    ("tenants: {team-a: {idle: {mode: off}}}", "policy.yaml tenants.team-a.idle.mode", "False"),
    ("tenants: {team-a: {limits: {}}}", "policy.yaml tenants.team-a.limits", "'limits'"),
    ("tenants: [a]", "policy.yaml tenants", "list"),
    ("idle: [1]", "policy.yaml idle", "list"),
    ("- a", "policy.yaml (document)", "list"),
    ("idle: {window: 10m\n", "policy.yaml (document)", "syntax error at line"),
    # NaN compares false: threshold .nan judged every GPU idle, minCoverage .nan any coverage enough
    ("idle: {threshold: .nan}", "policy.yaml idle.threshold", "nan"),
    ("idle: {minCoverage: .nan}", "policy.yaml idle.minCoverage", "nan"),
    ("idle: {window: .inf}", "policy.yaml idle.window", "inf"),
    ("idle: {maxReleasesPerHour: " + "9" * 5000 + "}", "policy.yaml (document)", "digits"),  # YAML's own int()
    ("idle: {maxReleasesPerHour: " + "9" * 30 + "}", "policy.yaml idle.maxReleasesPerHour", "digits"),
    ("idle: {window: " + "9" * 400 + "}", "policy.yaml idle.window", "digits"),
    ("idle: {window: " + "9" * 400 + "s}", "policy.yaml idle.window", "at most 15 digits"),
    ("idle: " + "[" * 5000 + "]" * 5000, "policy.yaml (document)", "nested"),
])
def test_errors_name_the_key(text: str, field: str, found: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(text)
    assert caught.value.field == field
    assert found in str(caught.value)
    assert "fix the policy: the chart's `policy` value (helm upgrade)" in str(caught.value)


def test_exemption_on_workload_or_owner_label_or_annotation() -> None:
    wl = {"kind": "Workload", "metadata": {"name": "w"}}
    owner = {"kind": "Notebook", "metadata": {"name": "nb", "labels": {"gpuaas.io/idle-policy": "Exempt"}}}
    assert exempt_by(wl, owner) == "Notebook nb"
    assert exempt_by(wl, None) is None
    wl["metadata"]["annotations"] = {"gpuaas.io/idle-policy": "exempt"}
    assert exempt_by(wl, owner) == "Workload w"


def test_example_quota_section_is_what_provision_quota_reads() -> None:
    from steps.reactions.provision_quota import QuotaSettings

    settings = QuotaSettings.from_policy(parse_policy(EXAMPLE_POLICY_YAML))
    assert settings.cohort == "gpuaas" and settings.tenants["team-a"].weight == 2
