"""Every finding of `gpuaas doctor` from hand-made facts: a healthy cluster passes, and each broken
prerequisite is named by exactly one finding (and only that one), with the fix that repairs it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from gpuaas.doctor import checks
from gpuaas.doctor.facts import (
    Controller,
    Crd,
    Dcgm,
    EventObject,
    Facts,
    InferenceServiceFact,
    KueueConfig,
    LocalQueueFact,
    MonitoringResource,
    PodFact,
    ProbeResult,
    ProductObject,
    RuleGroup,
    SecretFact,
    WorkflowFact,
)
from gpuaas.doctor.findings import Status
from gpuaas.doctor.report import render_table
from gpuaas.manifests import observability as obs
from tests.doctor.healthy import NS, TOKEN_DIGEST, broken, healthy, operator_routing


def only(facts: Facts) -> tuple[str, Status, str, str]:
    """The one finding that is not ok: (check, status, summary, fix); fails if there are more or none."""
    report = checks.run(facts)
    bad = [f for f in report.findings if f.status != Status.OK]
    assert len(bad) == 1, [(f.check, str(f.status), f.summary) for f in bad]
    return bad[0].check, bad[0].status, bad[0].summary, bad[0].fix


def test_a_healthy_cluster_passes_with_exit_code_0() -> None:
    report = checks.run(healthy())
    assert report.not_ok() == {} and report.exit_code == 0 and not report.not_checked
    assert {f.check for f in report.findings} >= {"argo-workflows", "argo-events", "kueue", "keda", "prometheus-operator",
                                                  "argo-workflows.namespace", "argo-events.pods", "step-image",
                                                  "kueue.metrics", "kueue.namespaces", "prometheus", "prometheus.rules",
                                                  "dcgm-exporter", "kube-state-metrics", "alertmanager.routing",
                                                  "webhook.token", "tenant:team-a", "kserve", "data-science-pipelines"}
    assert "nothing blocks" in render_table(report)


def _set(attribute: str, value: Any) -> Callable[[Facts], None]:
    return lambda facts: setattr(facts, attribute, value)


# -- the controllers ---------------------------------------------------------------------------------
def _drop_crd(name: str) -> Callable[[Facts], None]:
    return lambda facts: facts.crds.pop(name)


def _serve(name: str, *versions: str) -> Callable[[Facts], None]:
    return lambda facts: facts.crds.__setitem__(name, Crd(name, versions))


def _controller(key: str, **changes: Any) -> Callable[[Facts], None]:
    def change(facts: Facts) -> None:
        facts.controllers = [dataclasses.replace(c, **changes) if c.component == key else c for c in facts.controllers]
    return change


@pytest.mark.parametrize(("change", "check", "status", "words", "fix"), [
    (_drop_crd("workloads.kueue.x-k8s.io"), "kueue", Status.BLOCKS, "not installed", "kueue/releases/download/v0.19.2"),
    (_drop_crd("sensors.argoproj.io"), "argo-events", Status.BLOCKS, "not installed", "argo-events/releases"),
    (_drop_crd("scaledobjects.keda.sh"), "keda", Status.BLOCKS, "not installed", "keda-2.20.2.yaml"),
    (_drop_crd("prometheusrules.monitoring.coreos.com"), "prometheus-operator", Status.BLOCKS, "not installed",
     "bundle.yaml"),
    (_serve("workloads.kueue.x-k8s.io", "v1beta1"), "kueue", Status.BLOCKS, "serves v1beta1",
     "gpuaas render --workload-version v1beta1"),
    (lambda f: f.webhooks.__setitem__("kueue", "failed calling webhook: connection refused"), "kueue", Status.BLOCKS,
     "not running", "rollout restart deployment/kueue-controller-manager"),
    (lambda f: f.api_services.__setitem__("v1beta1.external.metrics.k8s.io", (False, "endpoints not found")), "keda",
     Status.BLOCKS, "not Available", "keda-operator-metrics-apiserver"),
    (_controller("argo-workflows", ready=0), "argo-workflows", Status.BLOCKS, "0 of 1 replicas ready", "kubectl describe"),
    (_controller("argo-workflows", image="quay.io/argoproj/workflow-controller:v3.5.14"), "argo-workflows",
     Status.BLOCKS, "older than v3.6.0", "v4.0.5"),
    (_controller("kueue", image="registry.k8s.io/kueue/kueue:v0.17.1"), "kueue", Status.WARN, "older than v0.18.0",
     "v0.19.2"),
    (_controller("keda", image="ghcr.io/kedacore/keda:2.15.0"), "keda", Status.WARN, "older than v2.17.0", "2.20.2"),
])
def test_controllers(change: Callable[[Facts], None], check: str, status: Status, words: str, fix: str) -> None:
    found = only(broken(change))
    assert found[:2] == (check, status)
    assert words in found[2] and fix in found[3], found


def test_a_missing_component_silences_the_checks_that_need_it() -> None:
    """Argo Events missing: its finding names it, and the EventSource checks say "not checked", not "blocks"."""
    facts = broken(lambda f: [f.crds.pop(n) for n in ("eventsources.argoproj.io", "sensors.argoproj.io",
                                                      "eventbus.argoproj.io")])
    facts.event_objects = []
    report = checks.run(facts)
    assert report.not_ok() == {"argo-events": Status.BLOCKS}
    assert set(report.not_checked) == {"argo-events.pods", "argo-events.bus", "webhook.token"}


def test_versions_come_from_build_info_or_the_crds_when_no_deployment_is_visible() -> None:
    """The real stack runs Kueue, KEDA and the workflow-controller as processes: no Deployment to read."""
    facts = healthy()
    facts.controllers = []
    facts.metrics.versions = {"kueue": "v0.19.2"}  # type: ignore[union-attr]
    report = checks.run(facts).by_id()
    assert "v0.19.2 (kueue_build_info v0.19.2)" in " ".join(report["kueue"].details)
    assert "operator.prometheus.io/version=0.93.0" in " ".join(report["prometheus-operator"].details)
    assert report["keda"].summary == "KEDA running" and "webhook answered" in " ".join(report["keda"].details)
    assert report["argo-workflows"].status == Status.OK  # proven by a Workflow that got a phase
    assert "Workflow(s) in gpuaas got a phase" in " ".join(report["argo-workflows"].details)


# -- Argo Workflows and Argo Events running the product ---------------------------------------------
@pytest.mark.parametrize(("change", "check", "words", "fix"), [
    (lambda f: f.argo_config.__setitem__("instanceID", "team-x"), "argo-workflows.namespace", "instanceID 'team-x'",
     '"path":"/data/instanceID"'),
    (_controller("argo-workflows", args=("workflow-controller", "--namespaced", "--managed-namespace", "ml")),
     "argo-workflows.namespace", "namespaced to ml", "--managed-namespace gpuaas"),
    (_set("workflows", [WorkflowFact("gpuaas-on-idle-abc", "gpuaas-on-idle", 600.0, "")]), "argo-workflows.namespace",
     "no workflow-controller processes namespace gpuaas", "resubmit gpuaas-on-idle-abc"),
    (lambda f: f.event_objects.pop(5), "argo-events.pods", "Sensor gpuaas-on-finished missing", "kubectl apply -k"),
    (lambda f: f.event_objects.__setitem__(2, dataclasses.replace(f.event_objects[2], deployment=None, pods=(), conditions={
        "Deployed": ("False", "DeployFailed", "secret gpuaas-alertmanager-webhook not found")})),
     "argo-events.pods", "not running", "kubectl -n gpuaas describe eventsources,sensors"),
    (lambda f: f.event_objects.__setitem__(4, dataclasses.replace(f.event_objects[4], pods=(PodFact(
        NS, "gpuaas-on-admitted-sensor-x", "Pending", False,
        (("main", "ImagePullBackOff", "Back-off pulling image", "quay.io/argoproj/argo-events:v9"),)),))),
     "argo-events.pods", "not running", "cannot be pulled"),
    (_set("workflow_templates", {"gpuaas-on-idle": ("gpuaas-step",)}), "step-image", "not pinned",
     "kustomize edit set image gpuaas-step="),
    (lambda f: f.product_pods.append(PodFact(NS, "gpuaas-on-idle-abc-idle-alerts-1", "Pending", False,
                                             (("main", "ErrImagePull", "unauthorized", "quay.io/acme/gpuaas-step:0.1.0"),))),
     "step-image", "cannot pull their image", "imagePullSecrets"),
])
def test_the_products_own_objects(change: Callable[[Facts], None], check: str, words: str, fix: str) -> None:
    found = only(broken(change))
    assert found[:2] == (check, Status.BLOCKS)
    assert words in found[2] and fix in found[3], found


def test_no_workflow_yet_is_not_a_failure_but_says_how_to_prove_it() -> None:
    report = checks.run(broken(_set("workflows", []))).by_id()
    assert report["argo-workflows.namespace"].status == Status.OK
    assert "--probe" in report["argo-workflows.namespace"].summary


# -- Kueue ----------------------------------------------------------------------------------------------
def _no_metrics(*names: str) -> Callable[[Facts], None]:
    return lambda f: [f.metrics.present.pop(n) for n in names]  # type: ignore[union-attr]


@pytest.mark.parametrize(("change", "words", "fix"), [
    (_no_metrics("kueue_cluster_queue_resource_usage", "kueue_cluster_queue_resource_pending", "kueue_build_info",
                 "kueue_admitted_active_workloads", "kueue_cluster_queue_status"), "no Kueue metrics", "prometheus.yaml"),
    (_no_metrics("kueue_cluster_queue_resource_usage"), "ClusterQueue resource metrics are off",
     "metrics.enableClusterQueueResources: true"),
    (_no_metrics("kueue_cluster_queue_resource_pending"), "not kueue_cluster_queue_resource_pending", "v0.19.2"),
])
def test_kueue_metrics(change: Callable[[Facts], None], words: str, fix: str) -> None:
    found = only(broken(change))
    assert found[:2] == ("kueue.metrics", Status.WARN) and words in found[2] and fix in found[3], found


def test_red_hat_kueue_needs_the_managed_label_on_tenant_namespaces() -> None:
    """openshift/kueue-operator fixes managedJobsNamespaceSelector to kueue.openshift.io/managed=true."""
    selector = {"matchLabels": {"kueue.openshift.io/managed": "true"}}
    facts = broken(_set("kueue", KueueConfig("ConfigMap openshift-kueue-operator/kueue-manager-config", "openshift-kueue-operator",
                                             selector, True, ("pod", "deployment", "statefulset"), red_hat_build=True)))
    check, status, summary, fix = only(facts)
    assert (check, status) == ("kueue.namespaces", Status.BLOCKS)
    assert "team-a" in summary and "notebooks, inference servers" in summary
    assert fix == "kubectl label namespace team-a kueue.openshift.io/managed=true"
    facts.tenants.namespaces["team-a"]["kueue.openshift.io/managed"] = "true"  # the printed fix, applied
    assert checks.run(facts).not_ok() == {}


def test_a_namespace_excluded_by_an_upstream_selector_says_to_change_the_selector() -> None:
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                      "values": ["kube-system", "team-a"]}]}
    facts = broken(_set("kueue", KueueConfig("ConfigMap kueue-system/kueue-manager-config", "kueue-system", selector,
                                             True, ("pod",))))
    check, status, _, fix = only(facts)
    assert (check, status) == ("kueue.namespaces", Status.BLOCKS) and "change managedJobsNamespaceSelector" in fix


def test_kueue_managing_no_pod_based_kind_warns() -> None:
    facts = broken(_set("kueue", KueueConfig("ConfigMap kueue-system/kueue-manager-config", "kueue-system", None,
                                             True, ("batch/job", "ray.io/raycluster"))))
    assert only(facts)[:2] == ("kueue.namespaces", Status.WARN)


# -- Prometheus and the rules ---------------------------------------------------------------------------
def _groups(change: Callable[[list[RuleGroup]], list[RuleGroup]]) -> Callable[[Facts], None]:
    return lambda f: setattr(f.prometheus, "rule_groups", change(f.prometheus.rule_groups))  # type: ignore[union-attr]


def test_kube_prometheus_stack_does_not_load_the_unlabelled_rule_and_the_fix_is_its_release_label() -> None:
    """The chart's Prometheus selects only rules labelled release=<release> (ruleSelectorNilUsesHelmValues)."""
    def chart(f: Facts) -> None:
        f.prometheus_resources = [MonitoringResource("Prometheus", "monitoring", "kps-prometheus", {
            "ruleSelector": {"matchLabels": {"release": "kps"}}, "ruleNamespaceSelector": {}})]
        f.prometheus.rule_groups = []  # type: ignore[union-attr]
    check, status, summary, fix = only(broken(chart))
    assert (check, status) == ("prometheus.rules", Status.BLOCKS)
    assert "does not evaluate rule group(s) gpuaas-gpu, gpuaas-gpu-health" in summary
    assert fix == "kubectl -n gpuaas label prometheusrule gpuaas-gpu release=kps"


def test_a_prometheus_that_reads_only_its_own_namespace() -> None:
    def own(f: Facts) -> None:
        f.prometheus_resources = [MonitoringResource("Prometheus", "monitoring", "k8s", {"ruleSelector": {}})]
        f.prometheus.rule_groups = []  # type: ignore[union-attr]
    check, _, _, fix = only(broken(own))
    assert check == "prometheus.rules" and "ruleNamespaceSelector" in fix and "move the PrometheusRule" in fix


def _enforcing(namespace: str, name: str) -> Callable[[Facts], None]:
    def enforce(f: Facts) -> None:
        f.prometheus_resources = [MonitoringResource("ThanosRuler", namespace, name, {
            "ruleSelector": {}, "ruleNamespaceSelector": {}, "enforcedNamespaceLabel": "namespace"})]
        group = f.prometheus.rule_groups[0]  # type: ignore[index,union-attr]
        group.rules[obs.GPU_ACTIVITY] = group.rules[obs.GPU_ACTIVITY].replace(
            '{exported_pod!=""}', '{exported_pod!="",namespace="gpuaas"}')
    return enforce


def test_an_enforced_namespace_label_is_seen_in_the_loaded_queries_and_openshift_gets_its_cmo_setting() -> None:
    """OpenShift user-workload monitoring: the operator adds namespace="gpuaas" to every selector; the exemption
    is cluster-monitoring-operator's setting namespacesWithoutLabelEnforcement, printed as a patch that keeps
    the admin's other settings."""
    facts = broken(_enforcing("openshift-user-workload-monitoring", "user-workload"))
    facts.openshift_user_workload_config = "prometheus:\n  retention: 24h\n"
    check, status, summary, fix = only(facts)
    assert (check, status) == ("prometheus.rules", Status.BLOCKS) and 'namespace="gpuaas"' in summary
    assert fix.startswith("kubectl -n openshift-user-workload-monitoring patch configmap user-workload-monitoring-config")
    patch = json.loads(fix.split(" -p ", 1)[1].split("'")[1])
    assert yaml.safe_load(patch["data"]["config.yaml"]) == {"prometheus": {"retention": "24h"},
                                                            "namespacesWithoutLabelEnforcement": ["gpuaas"]}


def test_an_enforcing_prometheus_elsewhere_gets_excluded_from_enforcement() -> None:
    check, _, _, fix = only(broken(_enforcing("monitoring", "tenant-rules")))
    assert check == "prometheus.rules"
    assert fix.startswith("kubectl -n monitoring patch thanosruler tenant-rules --type=merge")
    assert '"excludedFromEnforcement":[{"group":"monitoring.coreos.com","resource":"prometheusrules",' \
           '"namespace":"gpuaas","name":"gpuaas-gpu"}]' in fix


def test_the_rendered_rules_have_no_namespace_equality_matcher_of_their_own() -> None:
    """What makes enforcement detectable: only an enforced label puts namespace="..." in the product's queries."""
    for group in obs.rule_groups()["groups"]:
        for rule in group["rules"]:
            assert 'namespace="' not in rule["expr"], rule.get("record") or rule.get("alert")


@pytest.mark.parametrize(("change", "status", "words"), [
    (_groups(lambda g: [dataclasses.replace(g[0], health="err", last_error="vector cannot contain metrics with the "
                                                                            "same labelset"), g[1]]), Status.BLOCKS,
     "fails to evaluate"),
    (_groups(lambda g: [dataclasses.replace(g[0], last_evaluation_age_s=3600.0), g[1]]), Status.BLOCKS,
     "not evaluated"),
    (_groups(lambda g: [dataclasses.replace(g[0], rules={k: v for k, v in g[0].rules.items() if k != obs.ALERT_NAME}),
                        g[1]]), Status.WARN, "older than this gpuaas"),
])
def test_rule_groups_loaded_but_unhealthy(change: Callable[[Facts], None], status: Status, words: str) -> None:
    found = only(broken(change))
    assert found[:2] == ("prometheus.rules", status) and words in found[2], found


def test_no_prometheus_rule_in_the_cluster_and_no_operator() -> None:
    def plain(f: Facts) -> None:
        f.prometheus_resources = []
        f.prometheus.rule_groups = []  # type: ignore[union-attr]
    assert "no Prometheus Operator here" in only(broken(plain))[3]
    assert "kubectl apply -k" in only(broken(lambda f: (_set("prometheus_rule", None)(f), plain(f))))[3]


@pytest.mark.parametrize(("change", "check", "status", "words"), [
    (_set("prometheus", None), "prometheus", Status.WARN, "no Prometheus given"),
    (lambda f: setattr(f.prometheus, "reachable", False), "prometheus", Status.BLOCKS, "did not answer"),
    (lambda f: setattr(f.prometheus, "alertmanagers", ()), "prometheus", Status.BLOCKS, "no Alertmanager"),
])
def test_prometheus(change: Callable[[Facts], None], check: str, status: Status, words: str) -> None:
    facts = broken(change)
    if facts.prometheus is None or not facts.prometheus.reachable:
        facts.metrics = None  # nothing is read from a Prometheus that was not given or does not answer
    report = checks.run(facts)
    assert {k: v for k, v in report.not_ok().items()} == {check: status}
    assert words in report.by_id()[check].summary


# -- the series the rules read --------------------------------------------------------------------------
def _dcgm(**changes: Any) -> Callable[[Facts], None]:
    return lambda f: setattr(f.metrics, "dcgm", dataclasses.replace(f.metrics.dcgm, **changes))  # type: ignore[union-attr]


@pytest.mark.parametrize(("change", "status", "words", "fix"), [
    (_dcgm(gpus=0, engine_active=0, gpu_util=0, held_exported=0), Status.BLOCKS, "no DCGM series",
     "serviceMonitor.enabled"),
    (_dcgm(held_exported=0), Status.BLOCKS, "not in Kubernetes mode", "DCGM_EXPORTER_KUBERNETES=true"),
    (_dcgm(mig_slices=2, mig_slices_without_engine_active=("node-1/GPU-1/GI1", "node-1/GPU-1/GI2")), Status.WARN,
     "2 MIG slice(s) report no DCGM_FI_PROF_GR_ENGINE_ACTIVE", "metrics CSV"),
])
def test_dcgm_exporter(change: Callable[[Facts], None], status: Status, words: str, fix: str) -> None:
    found = only(broken(change))
    assert found[:2] == ("dcgm-exporter", status) and words in found[2] and fix in found[3], found


def test_gpu_util_only_is_ok_and_says_it_is_coarser() -> None:
    report = checks.run(broken(_dcgm(engine_active=0))).by_id()
    assert report["dcgm-exporter"].status == Status.OK and "coarser" in report["dcgm-exporter"].summary


@pytest.mark.parametrize(("change", "words", "fix"), [
    (_no_metrics("kube_namespace_labels", "kube_pod_container_resource_requests"), "no kube-state-metrics",
     "--metric-labels-allowlist=namespaces=[gpuaas.io/tenant]"),
    (lambda f: setattr(f.metrics, "tenant_label_namespaces", ()), "does not export the label gpuaas.io/tenant of team-a",
     "--metric-labels-allowlist=namespaces=[gpuaas.io/tenant]"),
])
def test_kube_state_metrics(change: Callable[[Facts], None], words: str, fix: str) -> None:
    found = only(broken(change))
    assert found[:2] == ("kube-state-metrics", Status.WARN) and words in found[2] and fix in found[3], found


# -- Alertmanager -----------------------------------------------------------------------------------------
def _amc_in(namespace: str, f: Facts, *, matcher: str | None) -> None:
    """The AlertmanagerConfig (and its Secrets, same token) in another namespace, routed as the operator does."""
    amc = obs.alertmanager_config_object(namespace)
    f.alertmanager_config = ProductObject("AlertmanagerConfig", namespace, "gpuaas-idle", amc["metadata"]["labels"],
                                          amc["spec"])
    f.alertmanager.config = operator_routing(namespace_matcher=matcher, amc_namespace=namespace)  # type: ignore[union-attr]
    f.secrets[f"{namespace}/{obs.WEBHOOK_SECRET}"] = SecretFact(namespace, obs.WEBHOOK_SECRET, True,
                                                                {"token": TOKEN_DIGEST})
    f.secrets[f"{namespace}/{obs.ADMINS_SECRET}"] = SecretFact(namespace, obs.ADMINS_SECRET, True, {"url": "aa"})


def test_an_alertmanager_config_outside_the_products_namespace_is_matched_on_the_wrong_namespace() -> None:
    """OnNamespace (the operator's default) adds namespace="<the AlertmanagerConfig's namespace>"; the
    product's alerts carry namespace="gpuaas" (the workload's is workload_namespace)."""
    check, status, summary, fix = only(broken(lambda f: _amc_in("monitoring", f, matcher="monitoring")))
    assert (check, status) == ("alertmanager.routing", Status.BLOCKS)
    assert 'requires namespace="monitoring"' in summary and "namespace=gpuaas" in summary
    assert fix.startswith("kubectl -n monitoring delete alertmanagerconfig gpuaas-idle && kubectl apply -k")
    # in the Alertmanager's own namespace with OnNamespaceExceptForAlertmanagerNamespace: no matcher, it works
    assert checks.run(broken(lambda f: _amc_in("monitoring", f, matcher=None))).not_ok() == {}


def test_an_alertmanager_that_does_not_select_the_alertmanager_config() -> None:
    def unlabelled(f: Facts) -> None:
        f.alertmanager.config = {"route": {"receiver": "null"}, "receivers": [{"name": "null"}]}  # type: ignore[union-attr]
        f.alertmanager_resources = [MonitoringResource("Alertmanager", "monitoring", "main", {
            "alertmanagerConfigSelector": {"matchLabels": {"team": "gpu"}}, "alertmanagerConfigNamespaceSelector": {}})]
    check, status, summary, fix = only(broken(unlabelled))
    assert (check, status) == ("alertmanager.routing", Status.BLOCKS) and "no route to the idle webhook" in summary
    assert fix == "kubectl -n gpuaas label alertmanagerconfig gpuaas-idle team=gpu"


def test_an_alertmanager_that_reads_only_its_own_namespace() -> None:
    def own(f: Facts) -> None:
        f.alertmanager.config = {"route": {"receiver": "null"}, "receivers": [{"name": "null"}]}  # type: ignore[union-attr]
        f.alertmanager_resources = [MonitoringResource("Alertmanager", "monitoring", "main",
                                                       {"alertmanagerConfigSelector": {}})]
    check, _, _, fix = only(broken(own))
    assert check == "alertmanager.routing" and "alertmanagerConfigNamespaceSelector" in fix


def test_openshift_alertmanager_main_reads_no_alertmanager_config() -> None:
    def main(f: Facts) -> None:
        f.alertmanager_resources = [MonitoringResource("Alertmanager", "openshift-monitoring", "main", {})]
        f.alertmanager.config = {"route": {"receiver": "Default"}, "receivers": [{"name": "Default"}]}  # type: ignore[union-attr]
    check, _, _, fix = only(broken(main))
    assert check == "alertmanager.routing" and "alertmanager-main reads no AlertmanagerConfig" in fix
    patch = json.loads(fix.split(" -p ", 1)[1].split("'")[1]) if " -p " in fix else None
    assert fix.startswith("echo ") or patch  # no user-workload ConfigMap yet: it is created
    assert '"enableAlertmanagerConfig": true' in fix or "enableAlertmanagerConfig: true" in fix


@pytest.mark.parametrize(("change", "status", "words"), [
    (lambda f: setattr(f.alertmanager, "config", operator_routing(url="http://webhook.other.svc:80/x")), Status.BLOCKS,
     "not the webhook EventSource"),
    (lambda f: (f.alertmanager.config["route"]["routes"][0]["routes"].pop(1),  # type: ignore[union-attr]
                f.alertmanager.config["route"]["routes"][0].update(receiver="null")), Status.WARN,  # type: ignore[union-attr]
     "health alerts do not reach"),
    (lambda f: setattr(f.alertmanager, "reachable", False), Status.BLOCKS, "did not answer"),
    (_set("alertmanager", None), Status.WARN, "no Alertmanager given"),
])
def test_routing(change: Callable[[Facts], None], status: Status, words: str) -> None:
    facts = broken(change)
    report = checks.run(facts)
    finding = report.by_id()["alertmanager.routing"]
    assert (finding.status, words in finding.summary) == (status, True), finding
    assert set(report.not_ok()) == {"alertmanager.routing"}


def test_the_plain_routing_of_the_stack_is_ok() -> None:
    """No Prometheus Operator: Alertmanager runs the product's plain configuration (gpuaas cluster up)."""
    def plain(f: Facts) -> None:
        f.alertmanager_resources, f.prometheus_resources = [], []
        f.alertmanager.config = obs.alertmanager_config("http://127.0.0.1:38211/alertmanager", "/state/token")  # type: ignore[union-attr]
    report = checks.run(broken(plain))
    assert report.not_ok() == {}
    assert "not comparable from here" in " ".join(report.by_id()["webhook.token"].details)


@pytest.mark.parametrize(("change", "words", "fix"), [
    (lambda f: f.secrets.__setitem__(f"{NS}/{obs.WEBHOOK_SECRET}", SecretFact(NS, obs.WEBHOOK_SECRET, False)),
     "does not exist", f"kubectl -n {NS} create secret generic {obs.WEBHOOK_SECRET}"),
    (lambda f: f.secrets.__setitem__(f"{NS}/{obs.WEBHOOK_SECRET}", SecretFact(NS, obs.WEBHOOK_SECRET, True, {"token": ""})),
     "no non-empty key", "delete secret"),
    (lambda f: (_amc_in("monitoring", f, matcher=None), f.secrets.__setitem__(
        f"monitoring/{obs.WEBHOOK_SECRET}", SecretFact("monitoring", obs.WEBHOOK_SECRET, True, {"token": "0badc0ffee"}))),
     "different token", "kubectl -n monitoring create secret generic gpuaas-alertmanager-webhook --dry-run=client"),
    (lambda f: f.secrets.__setitem__(f"{NS}/{obs.ADMINS_SECRET}", SecretFact(NS, obs.ADMINS_SECRET, False)),
     "rejects the whole AlertmanagerConfig", "gpuaas-admin-alerts"),
])
def test_webhook_token_on_both_sides(change: Callable[[Facts], None], words: str, fix: str) -> None:
    found = only(broken(change))
    assert found[:2] == ("webhook.token", Status.BLOCKS) and words in found[2] and fix in found[3], found


# -- tenants ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("change", "check", "status", "words", "fix"), [
    (lambda f: setattr(f.tenants, "cluster_queues", [dataclasses.replace(f.tenants.cluster_queues[0], active=False,
                                                                          message="FlavorNotFound: a100")]),
     "tenant:team-a", Status.BLOCKS, "not active", "kubectl describe clusterqueue team-a"),
    # an admin deleted the tenant: Kueue holds the ClusterQueue (Active False, reason Terminating) until its
    # admitted Workloads are gone; nothing is misconfigured, so it is said, not a blocker (CI run ciE: a test's
    # tenant removed seconds before the doctor ran made it exit 1)
    (lambda f: setattr(f.tenants, "cluster_queues", [dataclasses.replace(
        f.tenants.cluster_queues[0], active=False, terminating=True,
        message="Terminating: Can't admit new workloads; clusterQueue is terminating")]),
     "tenant:team-a", Status.WARN, "is being deleted", "status.admission.clusterQueue"),
    (lambda f: setattr(f.tenants, "local_queues", []), "tenant:team-a", Status.WARN, "no LocalQueue", "kind: LocalQueue"),
    (lambda f: f.tenants.namespaces.__setitem__("team-a", {}), "tenant:team-a", Status.WARN, "lack the label",
     "kubectl label namespace team-a gpuaas.io/tenant=team-a --overwrite"),
    (lambda f: setattr(f.tenants, "policy_tenants", ("team-a", "team-z")), "tenants", Status.WARN, "team-z",
     "edit configmap gpuaas-policy"),
])
def test_tenants(change: Callable[[Facts], None], check: str, status: Status, words: str, fix: str) -> None:
    facts = broken(change)
    facts.metrics.tenant_label_namespaces = ()  # type: ignore[union-attr]  # KSM follows the namespace labels
    if facts.tenants.namespaces["team-a"]:
        facts.metrics.tenant_label_namespaces = ("team-a",)  # type: ignore[union-attr]
    found = only(facts)
    assert found[:2] == (check, status) and words in found[2] and fix in found[3], found


def test_no_tenant_yet_warns_with_how_to_make_one() -> None:
    def none(f: Facts) -> None:
        f.tenants.cluster_queues, f.tenants.local_queues, f.tenants.policy_tenants = [], [], ()
        f.tenants.namespaces = {NS: {}}
        f.metrics.tenant_label_namespaces = ()  # type: ignore[union-attr]
    check, status, _, fix = only(broken(none))
    assert (check, status) == ("tenants", Status.WARN) and "gpuaas-provision-quota" in fix


# -- OpenShift AI -----------------------------------------------------------------------------------------
def test_kserve_in_serverless_mode_is_reported_as_left_to_knative() -> None:
    def serverless(f: Facts) -> None:
        f.kserve.installed, f.kserve.knative_serving = True, True
        f.kserve.default_mode, f.kserve.config_source = "Serverless", "ConfigMap redhat-ods-applications/inferenceservice-config"
        f.kserve.inference_services = [InferenceServiceFact("team-a", "llm", ""), InferenceServiceFact("team-a", "raw", "RawDeployment")]
    finding = checks.run(broken(serverless)).by_id()["kserve"]
    assert finding.status == Status.OK and "left to Knative" in finding.summary and "(1 now)" in finding.summary
    assert any("RawDeployment: team-a/raw" in d for d in finding.details)
    assert any("serving.kserve.io/deploymentMode: RawDeployment" in d for d in finding.details)


def test_kserve_serverless_without_knative_warns() -> None:
    def broken_serverless(f: Facts) -> None:
        f.kserve.installed, f.kserve.default_mode, f.kserve.config_source = True, "Serverless", "ConfigMap kserve/x"
    assert only(broken(broken_serverless))[:2] == ("kserve", Status.WARN)


def test_data_science_pipelines_beside_a_separate_argo_workflows() -> None:
    """opendatahub-operator checkPreConditions: the workflows CRD must carry the DSP label unless Removed."""
    def odh(f: Facts) -> None:
        f.pipelines.installed = True
        f.pipelines.clusters = [{"name": "default-dsc", "component": "datasciencepipelines",
                                 "managementState": "Managed", "argoWorkflowsControllers": ""}]
    check, status, summary, fix = only(broken(odh))
    assert (check, status) == ("data-science-pipelines", Status.WARN) and "default-dsc" in summary
    assert '"argoWorkflowsControllers":{"managementState":"Removed"}' in fix and "datasciencepipelines" in fix
    fixed = broken(odh)
    fixed.pipelines.clusters[0]["argoWorkflowsControllers"] = "Removed"
    assert checks.run(fixed).not_ok() == {}


# -- the probe ------------------------------------------------------------------------------------------
ALERT = {"alertname": obs.ALERT_NAME, "namespace": "gpuaas-doctor-probe-1a2b", "pod": "gpuaas-doctor-probe-1a2b"}


@pytest.mark.parametrize(("probe", "status", "words"), [
    (ProbeResult(ALERT, "http://am:9093", True, arrived_after_s=9.0, workflow="gpuaas-on-idle-x", phase="Succeeded",
                 outcome="idle-alerts: no-op (skipped: pod gone)"), Status.OK, "nothing was released"),
    (ProbeResult(ALERT, "http://am:9093", False, "HTTP 401"), Status.BLOCKS, "did not accept"),
    (ProbeResult(ALERT, "http://am:9093", True, waited_s=180.0), Status.BLOCKS, "did not reach the product within 180s"),
    (ProbeResult(ALERT, "http://am:9093", True, arrived_after_s=9.0, workflow="w", phase="Failed",
                 outcome="ErrImagePull"), Status.BLOCKS, "ended Failed"),
    (ProbeResult(ALERT, "http://am:9093", True, arrived_after_s=9.0, workflow="w", phase="Succeeded", released=True),
     Status.BLOCKS, "released something"),
])
def test_probe(probe: ProbeResult, status: Status, words: str) -> None:
    facts = broken(_set("probe", probe))
    finding = checks.run(facts, probe_requested=True).by_id()["probe"]
    assert finding.status == status and words in finding.summary, finding


def test_report_as_json_and_exit_codes() -> None:
    report = checks.run(broken(_drop_crd("scaledobjects.keda.sh")))
    data = json.loads(json.dumps(report.to_dict()))
    assert data["status"] == "blocks" and data["exitCode"] == 1 and data["counts"]["blocks"] == 1
    keda = next(f for f in data["findings"] if f["check"] == "keda")
    assert keda["fix"].startswith("kubectl apply") and data["probe"] == "not run"
    warned = checks.run(broken(_dcgm(mig_slices=1, mig_slices_without_engine_active=("n/GPU-1/GI1",))))
    assert warned.exit_code == 0 and warned.to_dict()["status"] == "warn"


def test_the_table_shows_the_fix_under_each_finding_that_is_not_ok() -> None:
    text = render_table(checks.run(broken(_drop_crd("scaledobjects.keda.sh"))))
    lines = text.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("BLOCKS  keda"))
    fix = next(line for line in lines[row:] if "fix:" in line)
    assert "fix: kubectl apply --server-side -f https://github.com/kedacore/keda" in fix
    assert "the product cannot react" in text.splitlines()[-1]


def test_unused_fact_types_are_still_importable() -> None:
    """The facts a test does not change keep their shape (a guard for the fixture)."""
    assert Controller and Dcgm and EventObject and LocalQueueFact and ProductObject
