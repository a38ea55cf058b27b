"""The monitoring profiles as data (gpuaas.cluster.profiles): the operator's selection semantics and where the
product's objects land on each platform, checked against what the overlays render (gpuaas.manifests.platforms)."""

from __future__ import annotations

import pytest

from gpuaas.cluster import profiles
from gpuaas.manifests import observability as obs
from gpuaas.manifests.platforms import platforms


def test_unset_and_empty_selectors_mean_what_the_operator_means() -> None:
    assert profiles.matches({}, {"a": "b"}) and not profiles.matches(None, {"a": "b"})
    notin = {"matchExpressions": [{"key": "openshift.io/cluster-monitoring", "operator": "NotIn", "values": ["true"]}]}
    assert profiles.matches(notin, {}) and not profiles.matches(notin, {"openshift.io/cluster-monitoring": "true"})
    router = profiles.AlertRouter("monitoring", "main", {}, None)
    assert router.reads({}, "monitoring", {}) and not router.reads({}, "gpuaas", {})  # unset: its own namespace


@pytest.mark.parametrize("overlay", ["kubernetes", "kube-prometheus-stack", "openshift"])
def test_every_platform_loads_the_rendered_rule_unrewritten_and_reads_the_alertmanager_config(overlay: str) -> None:
    platform = platforms()[overlay]
    profile = platform.profile
    rule, config = obs.prometheus_rule(), obs.alertmanager_config_object()
    labels = {**rule["metadata"]["labels"], **platform.rule_labels}
    evaluator = profile.evaluator_for(labels, "gpuaas", profile.namespace_labels)
    assert evaluator is not None and not evaluator.enforces("gpuaas"), evaluator
    router = profile.router_for(config["metadata"]["labels"], "gpuaas", profile.namespace_labels)
    assert router is not None and router.added_matcher("gpuaas") in (None, 'namespace="gpuaas"'), router
    assert profile.chart_values["monitoring"]["platform"] == profile.name


def test_kube_prometheus_stack_skips_an_unlabelled_rule() -> None:
    (evaluator,) = profiles.KUBE_PROMETHEUS_STACK.evaluators
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
