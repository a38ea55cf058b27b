"""cluster-monitoring-operator's translation of user-workload-monitoring-config, as the openshift profile's
stand-in does it (gpuaas.cluster.openshift_platform.uwm_resources): answers worked out by hand from CMO
release-4.18 pkg/manifests/manifests.go (excludedFromEnforcement from namespacesWithoutLabelEnforcement; the
user-workload Alertmanager made only with alertmanager.enabled, reading AlertmanagerConfigs only with
enableAlertmanagerConfig)."""

from __future__ import annotations

import pytest

from gpuaas.cluster import openshift_platform as osp

EXEMPT_GPUAAS = [{"group": "monitoring.coreos.com", "resource": "prometheusrules", "namespace": "gpuaas"}]


def _exempt(patches: list[dict]) -> dict[str, list]:
    return {p["kind"]: p["spec"]["excludedFromEnforcement"] for p in patches}


def test_the_installs_two_keys_exempt_gpuaas_and_start_an_alertmanager_that_reads_alertmanagerconfigs() -> None:
    patches, apply, delete = osp.uwm_resources(
        "{namespacesWithoutLabelEnforcement: [gpuaas], alertmanager: {enabled: true, enableAlertmanagerConfig: true}}",
        "0.25.0")
    assert _exempt(patches) == {"Prometheus": EXEMPT_GPUAAS, "ThanosRuler": EXEMPT_GPUAAS}
    (alertmanager,) = apply
    assert not delete
    assert alertmanager["spec"]["alertmanagerConfigSelector"] == osp.UWM_ALERTMANAGER.config_selector
    assert alertmanager["spec"]["alertmanagerConfigNamespaceSelector"] == osp.UWM_ALERTMANAGER.config_namespace_selector


def test_enabled_without_alertmanagerconfigs_takes_the_selectors_away_as_a_merge_patch_must() -> None:
    """An explicit null: applied as a merge patch over the Alertmanager made with the setting on, an absent key
    would have left the earlier selectors (and the product's route) in place."""
    _, (alertmanager,), delete = osp.uwm_resources("alertmanager: {enabled: true}", "0.25.0")
    assert not delete
    assert alertmanager["spec"]["alertmanagerConfigSelector"] is None
    assert alertmanager["spec"]["alertmanagerConfigNamespaceSelector"] is None


def test_no_config_exempts_nothing_and_deletes_the_user_workload_alertmanager() -> None:
    patches, apply, (deleted,) = osp.uwm_resources(None, "0.25.0")
    assert _exempt(patches) == {"Prometheus": [], "ThanosRuler": []}
    assert not apply and deleted["metadata"] == {"name": osp.UWM_ALERTMANAGER.name, "namespace": osp.UWM}


def test_a_key_twice_is_refused_as_cmo_refuses_the_whole_file() -> None:
    with pytest.raises(osp.InvalidConfig):
        osp.uwm_resources("namespacesWithoutLabelEnforcement: [a]\nnamespacesWithoutLabelEnforcement: [gpuaas]\n",
                          "0.25.0")
