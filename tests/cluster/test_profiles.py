"""The monitoring profiles as data (gpuaas.cluster.profiles): the operator's selection semantics and where the
product's objects land on each platform, checked against what each platform's values build (gpuaas.manifests.site), and
each example values file carries its profile's values (`chart_values`)."""

from __future__ import annotations

import pytest

from gpuaas.cluster import profiles
from gpuaas.manifests import site, values
from gpuaas.manifests.values import coalesce

PLATFORMS = {"kubernetes": profiles.PLAIN, "kube-prometheus-stack": profiles.KUBE_PROMETHEUS_STACK,
             "openshift": profiles.OPENSHIFT}
"""examples/values/<name>.yaml (and manifests/overlays/<name>) -> the monitoring profile it is for."""


def test_unset_and_empty_selectors_mean_what_the_operator_means() -> None:
    assert profiles.matches({}, {"a": "b"}) and not profiles.matches(None, {"a": "b"})
    notin = {"matchExpressions": [{"key": "openshift.io/cluster-monitoring", "operator": "NotIn", "values": ["true"]}]}
    assert profiles.matches(notin, {}) and not profiles.matches(notin, {"openshift.io/cluster-monitoring": "true"})
    router = profiles.AlertRouter("monitoring", "main", {}, None)
    assert router.reads({}, "monitoring", {}) and not router.reads({}, "gpuaas", {})  # unset: its own namespace


@pytest.mark.parametrize("example", sorted(PLATFORMS))
def test_each_platforms_example_values_are_its_profile(example: str) -> None:
    """The example's values already hold every platform key of the profile (coalescing changes nothing)."""
    chosen = site.example_values(example)
    assert coalesce(chosen, PLATFORMS[example].chart_values) == chosen, PLATFORMS[example].chart_values


@pytest.mark.parametrize("example", sorted(PLATFORMS))
def test_every_platform_loads_the_rule_unrewritten_and_reads_the_alertmanager_config(example: str) -> None:
    profile = PLATFORMS[example]
    built = {(o["kind"], o["metadata"]["name"]): o for o in site.objects(site.example_values(example))}
    rule, config = built[("PrometheusRule", "gpuaas-gpu")], built[("AlertmanagerConfig", "gpuaas-idle")]
    evaluator = profile.evaluator_for(rule["metadata"]["labels"], "gpuaas", profile.namespace_labels)
    assert evaluator is not None and not evaluator.enforces("gpuaas"), evaluator
    router = profile.router_for(config["metadata"]["labels"], "gpuaas", profile.namespace_labels)
    assert router is not None and router.added_matcher("gpuaas") in (None, 'namespace="gpuaas"'), router
    tenants = [o for o in built.values() if o["kind"] == "Namespace" and "gpuaas.io/tenant" in o["metadata"]["labels"]]
    assert tenants and all(profile.tenant_namespace_labels.items() <= t["metadata"]["labels"].items() for t in tenants)
    settings = built[("ConfigMap", "gpuaas-prometheus")]["data"]
    assert settings["GPUAAS_PROMETHEUS_URL"] == profile.query.url
    assert ("GPUAAS_PROMETHEUS_TOKEN_FILE" in settings) == (profile.query.auth == "bearer")


def test_openshift_values_give_the_steps_and_keda_the_querier_role_token_and_ca() -> None:
    built = {(o["kind"], o["metadata"]["name"]): o for o in site.objects(site.example_values("openshift"))}
    bindings = [o for o in built.values() if o["kind"] == "ClusterRoleBinding"
                and o["roleRef"]["name"] == profiles.OPENSHIFT.query.cluster_role]
    assert {(b["subjects"][0]["name"], b["subjects"][0]["namespace"]) for b in bindings} == {
        ("gpuaas-steps", "gpuaas"), (site.KEDA_ACCOUNT, profiles.OPENSHIFT.keda_namespace)}
    authentication = built[("ClusterTriggerAuthentication", site.KEDA_AUTHENTICATION)]["spec"]
    assert authentication["configMapTargetRef"] == [{"parameter": "ca", "name": "openshift-service-ca.crt",
                                                     "key": "service-ca.crt"}]
    pool = built[("ScaledObject", "gpuaas-gpu-node-pool")]["spec"]["triggers"][0]
    assert pool["authenticationRef"] == {"name": site.KEDA_AUTHENTICATION, "kind": "ClusterTriggerAuthentication"}
    volumes = {v["configMap"]["name"] for o in built.values() if o["kind"] == "WorkflowTemplate"
               for v in o["spec"]["volumes"]}
    assert volumes == {"openshift-service-ca.crt"}


@pytest.mark.parametrize(("values_", "key"), [
    ({"monitoring": {"platform": "kube-prometheus-stack"}}, "monitoring.ruleLabels"),
    ({"monitoring": {"platform": "openshift"}}, "prometheus.auth.type"),
    ({"prometheus": {"ca": {"configMap": "x", "key": "ca.crt"}}}, "prometheus.ca"),
])
def test_settings_that_cannot_work_on_the_platform_are_refused_naming_the_key(values_: dict, key: str) -> None:
    with pytest.raises(site.SiteError, match=key.replace(".", r"\.")):
        site.objects(values.load(overrides=values_))


def test_kube_prometheus_stack_skips_an_unlabelled_rule() -> None:
    (evaluator,) = profiles.KUBE_PROMETHEUS_STACK.evaluators
    from gpuaas.manifests import observability as obs

    assert not evaluator.selects(obs.prometheus_rule()["metadata"]["labels"], "gpuaas", {})


def test_openshift_enforces_every_other_user_namespace_and_alertmanager_main_reads_none() -> None:
    p = profiles.OPENSHIFT
    assert p.evaluator_for({}, "team-b", {}).enforces("team-b")
    assert p.evaluator_for({}, "gpuaas", {}).kind == "ThanosRuler"
    assert not profiles.OPENSHIFT_ALERTMANAGER_MAIN.reads({}, "gpuaas", {})
    assert p.evaluator_for({}, "gpuaas", {profiles.CLUSTER_MONITORING_LABEL: "true"}).name == "k8s"
    assert p.query.auth == "bearer" and p.query.cluster_role == "cluster-monitoring-view"
    assert p.tenant_namespace_labels == {profiles.KUEUE_MANAGED_LABEL: "true"}


def test_every_transcribed_setting_names_its_file_and_commit() -> None:
    for profile in profiles.PROFILES.values():
        for source in [*(e.source for e in profile.evaluators), *(r.source for r in profile.routers),
                       *(s.source for s in profile.admin_settings), *(profile.kueue.source if profile.kueue else ())]:
            if profile.operator_managed:
                assert source is not None and len(source.commit) >= 6 and source.path, (profile.name, source)
