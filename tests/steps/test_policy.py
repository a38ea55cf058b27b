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
    # signalUrl is formatted with the owner's {name}, {namespace} and {domain} in the step: any other
    # placeholder (or a lone brace) failed there with a KeyError, after the policy had been accepted
    ("idle: {kinds: {notebook: {signalUrl: 'http://{notebook}.svc/x'}}}", "policy.yaml idle.kinds.notebook.signalUrl",
     "'http://{notebook}.svc/x'"),
    ("idle: {kinds: {ray: {signalUrl: 'http://{name}:8265/{'}}}", "policy.yaml idle.kinds.ray.signalUrl",
     "'http://{name}:8265/{'"),
    ("idle: {kinds: {ray: {signalUrl: 'http://{0}:8265'}}}", "policy.yaml idle.kinds.ray.signalUrl", "'http://{0}:8265'"),
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


# -- per kind ----------------------------------------------------------------------------------------------
LAYERED = """
idle:
  window: 30m
  kinds:
    notebook: {window: 1h}
    training: {withoutSignal: keep, progressMetric: train_steps_total}
tenants:
  a:
    idle: {window: 10m, kinds: {notebook: {window: 2h, releaseOn: demand}}}
  b:
    idle: {mode: dry-run}
"""


@pytest.mark.parametrize(("tenant", "kind", "window", "mode", "without", "release_on"), [
    ("", "notebook", 3600, "enforce", "gpu", "idle"),       # the cluster-wide kind beats the cluster-wide default
    ("", "batch", 1800, "enforce", "gpu", "idle"),
    ("", "training", 1800, "enforce", "keep", "idle"),
    ("a", "notebook", 7200, "enforce", "gpu", "demand"),    # the tenant's kind beats everything
    ("a", "batch", 600, "enforce", "gpu", "idle"),           # the tenant's general setting beats cluster-wide kinds
    ("a", "training", 600, "enforce", "keep", "idle"),
    ("b", "notebook", 3600, "dry-run", "gpu", "idle"),
    ("unknown", "notebook", 3600, "enforce", "gpu", "idle"),
])
def test_settings_are_layered_by_scope(tenant: str, kind: str, window: float, mode: str, without: str,
                                       release_on: str) -> None:
    settings = parse_policy(LAYERED).idle_for(tenant, kind)
    assert (settings.window_seconds, settings.mode, settings.without_signal, settings.release_on, settings.kind) == \
        (window, mode, without, release_on, kind)


def test_windows_span_tenants_and_kinds_and_a_sweep_sets_them_all() -> None:
    policy = parse_policy(LAYERED)
    assert policy.windows() == [600.0, 1800.0, 3600.0, 7200.0]
    swept = policy.with_window(900.0)
    assert swept.windows() == [900.0]
    assert swept.idle_for("a", "notebook").release_on == "demand"  # only the window changes


@pytest.mark.parametrize(("text", "field", "expected"), [
    ("idle: {kinds: {gpu-job: {window: 1h}}}", "idle.kinds.gpu-job", "one of notebook, ray, training, serving, batch"),
    ("idle: {kinds: {notebook: {maxReleasesPerHour: 3}}}", "idle.kinds.notebook.maxReleasesPerHour", "one of"),
    ("idle: {kinds: {notebook: {kinds: {}}}}", "idle.kinds.notebook.kinds", "one of"),
    ("idle: {releaseOn: queue}", "idle.releaseOn", "idle or demand"),
    ("idle: {kinds: {training: {withoutSignal: never}}}", "idle.kinds.training.withoutSignal", "gpu or keep"),
    ("idle: {kinds: {training: {progressMetric: 'rate(x[5m])'}}}", "idle.kinds.training.progressMetric",
     "a Prometheus metric name"),
    ("idle: {kinds: {notebook: {signalUrl: 'nb.svc'}}}", "idle.kinds.notebook.signalUrl", "an http(s) URL"),
    ("idle: {nodePoolAutoscaled: 'yes'}", "idle.nodePoolAutoscaled", "true or false"),
    ("tenants: {a: {idle: {kinds: [notebook]}}}", "tenants.a.idle.kinds", "a mapping of kind"),
])
def test_kind_errors_name_the_key(text: str, field: str, expected: str) -> None:
    with pytest.raises(PolicyError) as error:
        parse_policy(text)
    assert f"policy.yaml {field}" in str(error.value) and expected in str(error.value), str(error.value)


def test_the_json_schema_accepts_and_rejects_what_the_parser_does() -> None:
    """The chart's values.schema.json is generated from the same field table: documents the parser takes
    validate, and each wrong document above fails the schema too (where JSON Schema can say it)."""
    import jsonschema
    import yaml

    from steps.policy import EXAMPLE_POLICY_YAML, policy_json_schema

    validator = jsonschema.Draft7Validator(policy_json_schema())
    for text in (EXAMPLE_POLICY_YAML, LAYERED, "", "idle: {windowSeconds: 600, kinds: {serving: {requestMetric: a:b}}}"):
        parse_policy(text)
        assert not list(validator.iter_errors(yaml.safe_load(text))), text
    for text in ("idle: {kinds: {gpu-job: {window: 1h}}}", "idle: {kinds: {notebook: {maxReleasesPerHour: 3}}}",
                 "idle: {releaseOn: queue}", "idle: {threshold: 2}", "idle: {window: 10 minutes}", "other: {}",
                 "idle: {kinds: {training: {progressMetric: 'rate(x[5m])'}}}", "tenants: {a: {idle: {kinds: [x]}}}"):
        with pytest.raises(PolicyError):
            parse_policy(text)
        assert list(validator.iter_errors(yaml.safe_load(text))), text


def test_kind_of_follows_the_owner_chain() -> None:
    from steps.policy import kind_of

    assert kind_of(["StatefulSet", "Notebook"]) == "notebook"
    assert kind_of(["Deployment", "InferenceService"]) == "serving"
    assert kind_of(["RayCluster", "RayJob"]) == "ray"
    assert kind_of(["Job", "JobSet"]) == "training"
    assert kind_of("PyTorchJob") == "training" and kind_of("Job") == "batch" and kind_of([]) == "batch"
    assert kind_of("StatefulSet") == "serving" and kind_of("SomethingElse") == "batch"


def test_the_rendered_policy_spells_out_the_built_in_per_kind_defaults() -> None:
    """An absent ConfigMap and the rendered example give every kind the same settings, and a key of the
    policy's own `idle` replaces the built-in per-kind value of that key (what the admin sees applies)."""
    from steps.policy import EXAMPLE_POLICY_YAML, KINDS, policy_from_mapping

    example, absent = parse_policy(EXAMPLE_POLICY_YAML), policy_from_mapping(None)
    for kind in KINDS:
        assert example.idle_for("team-z", kind) == absent.idle_for("team-z", kind), kind
    assert [absent.idle_for("", k).window_seconds for k in KINDS] == [9600.0, 86400.0, 29400.0, 29400.0, 1800.0]
    assert {parse_policy("idle: {window: 1h}").idle_for("", k).window_seconds for k in KINDS} == {3600.0}
    assert parse_policy("idle: {threshold: 0.1}").idle_for("", "ray").window_seconds == 86400.0
