"""Hand-made facts of a cluster where every prerequisite holds (kube-prometheus-stack-like monitoring: the
PrometheusRule and the AlertmanagerConfig in the product's namespace, the operator's default OnNamespace
matcher strategy); each test breaks exactly one thing and expects exactly one finding to change."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from gpuaas.doctor import versions as V
from gpuaas.doctor.facts import (
    Alertmanager,
    ClusterQueueFact,
    Controller,
    Crd,
    CronWorkflowFact,
    Dcgm,
    EventObject,
    Facts,
    KueueConfig,
    LocalQueueFact,
    Metrics,
    MonitoringResource,
    PodFact,
    ProductObject,
    Prometheus,
    RuleGroup,
    SecretFact,
    Sweep,
    SweepPass,
    WorkflowFact,
)
from gpuaas.doctor.gather import PRESENT_METRICS
from gpuaas.manifests import observability as obs

NS = "gpuaas"
TOKEN_DIGEST = "5e884898da280471"
IMAGES = {"argo-workflows": "quay.io/argoproj/workflow-controller:v4.0.5",
          "argo-events": "quay.io/argoproj/argo-events:v1.9.11",
          "kueue": "registry.k8s.io/kueue/kueue:v0.19.2",
          "keda": "ghcr.io/kedacore/keda:2.20.2",
          "prometheus-operator": "quay.io/prometheus-operator/prometheus-operator:v0.93.0"}
EVENT_SOURCES = ("gpuaas-workloads", "gpuaas-alertmanager", "gpuaas-gpu-nodes", "gpuaas-capacity-clock")
SENSORS = ("gpuaas-on-admitted", "gpuaas-on-finished", "gpuaas-on-idle", "gpuaas-provision-quota")
SWEEP_SCHEDULE = "*/2 * * * *"
"""The rendered schedule (workflows/sweep.py SCHEDULE): every 2 minutes."""


def sweep_cron(**changes: Any) -> CronWorkflowFact:
    """The sweep's CronWorkflow a day after the install, last scheduled 40 s ago (changes: its fields)."""
    return dataclasses.replace(CronWorkflowFact(
        "gpuaas-sweep", 86400.0, (SWEEP_SCHEDULE,), last_scheduled_at="2026-12-06T12:00:00Z",
        last_scheduled_age_s=40.0, revalidated_age_s=86395.0, template="gpuaas-sweep"), **changes)


def sweep_pass(name: str = "gpuaas-sweep-1796558400", **changes: Any) -> SweepPass:
    return dataclasses.replace(SweepPass(name, 40.0, "Succeeded", "", "2026-12-06T12:00:07Z"), **changes)
def operator_routing(namespace_matcher: str | None = NS, *, url: str | None = None, amc_namespace: str = NS
                     ) -> dict[str, Any]:
    """The running Alertmanager configuration as prometheus-operator v0.93 generates it for gpuaas-idle:
    its route first with `continue: true`, receivers named <namespace>/<AlertmanagerConfig>/<receiver>;
    `namespace_matcher`: what the default OnNamespace strategy adds (None: OnNamespaceExceptFor... in the
    Alertmanager's own namespace)."""
    idle, admins = receivers(amc_namespace)
    top = [f'alertname=~"{obs.product_alerts_matcher()[2]}"']
    if namespace_matcher:
        top.insert(0, f'namespace="{namespace_matcher}"')
    return {
        "route": {"receiver": "null", "group_by": ["namespace"], "routes": [
            {"receiver": admins, "matchers": top, "continue": True, "routes": [
                {"receiver": idle, "matchers": [f'alertname="{obs.ALERT_NAME}"'],
                 "group_by": ["alertname", "workload_namespace"]},
                {"receiver": admins, "matchers": ['gpuaas_notify="gpu-admins"']}]},
            {"receiver": "null", "matchers": ['alertname="Watchdog"']},
            {"receiver": "oncall", "matchers": ['severity="critical"']}]},
        "receivers": [{"name": "null"}, {"name": "oncall"},
                      {"name": idle, "webhook_configs": [{
                          "url": url or f"http://{obs.WEBHOOK_SERVICE}.{NS}.svc:{obs.WEBHOOK_PORT}{obs.WEBHOOK_PATH}",
                          "send_resolved": False}]},
                      {"name": admins, "webhook_configs": [{"url": "https://chat.example/hook"}]}],
    }


def receivers(amc_namespace: str = NS) -> tuple[str, str]:
    return f"{amc_namespace}/gpuaas-idle/{obs.RECEIVER}", f"{amc_namespace}/gpuaas-idle/{obs.ADMINS_RECEIVER}"


IDLE_RECEIVER, ADMINS_RECEIVER = receivers()


def _rule_groups() -> list[RuleGroup]:
    groups = []
    for group in obs.rule_groups()["groups"]:
        rules = {r.get("record") or r.get("alert"): r["expr"] for r in group["rules"]}
        groups.append(RuleGroup(group["name"], f"/etc/prometheus/rules/prometheus-k8s-rulefiles-0/{NS}-gpuaas-gpu.yaml",
                                "ok", "", 12.0, 30.0, rules))
    return groups


def _pod(name: str, label: str, owner: str) -> PodFact:
    return PodFact(NS, name, "Running", True, (), {label: owner})


def healthy() -> Facts:
    facts = Facts(namespace=NS)
    for component in V.COMPONENTS:
        for name, version in component.crds:
            annotations = {"operator.prometheus.io/version": "0.93.0"} if component.key == "prometheus-operator" else {}
            served = ("v1beta1", "v1beta2") if component.key == "kueue" else (version,)
            facts.crds[name] = Crd(name, served, {}, annotations)
        facts.controllers.append(Controller(component.key, {"argo-workflows": "argo", "argo-events": "argo-events",
                                                            "kueue": "kueue-system", "keda": "keda",
                                                            "prometheus-operator": "monitoring"}[component.key],
                                            f"{component.key}-controller", IMAGES[component.key], 1, 1))
    facts.api_services["v1beta1.external.metrics.k8s.io"] = (True, "Passed: all checks passed")
    facts.webhooks = {"kueue": None, "keda": None}
    facts.kueue = KueueConfig("ConfigMap kueue-system/kueue-manager-config", "kueue-system", None, True,
                              ("batch/job", "pod", "deployment", "statefulset", "ray.io/raycluster"))
    facts.prometheus = Prometheus("http://prometheus.test:9090", True, "", _rule_groups(),
                                  ("http://10.0.0.9:9093/api/v2/alerts",))
    facts.metrics = Metrics(present={name: 3 for name in PRESENT_METRICS}, tenant_label_namespaces=("team-a",),
                            gpu_requests=4, dcgm=Dcgm(gpus=8, engine_active=8, gpu_util=8, held_exported=4))
    facts.prometheus_resources = [MonitoringResource("Prometheus", "monitoring", "k8s",
                                                     {"ruleSelector": {}, "ruleNamespaceSelector": {}})]
    facts.alertmanager_resources = [MonitoringResource("Alertmanager", "monitoring", "main", {
        "alertmanagerConfigSelector": {}, "alertmanagerConfigNamespaceSelector": {}})]
    rule = obs.prometheus_rule(NS)
    facts.prometheus_rule = ProductObject("PrometheusRule", NS, "gpuaas-gpu", rule["metadata"]["labels"], rule["spec"])
    amc = obs.alertmanager_config_object(NS)
    facts.alertmanager_config = ProductObject("AlertmanagerConfig", NS, "gpuaas-idle", amc["metadata"]["labels"],
                                              amc["spec"])
    facts.alertmanager = Alertmanager("http://alertmanager.test:9093", True, "", operator_routing(), "0.28.1")
    facts.secrets = {f"{NS}/{obs.WEBHOOK_SECRET}": SecretFact(NS, obs.WEBHOOK_SECRET, True, {"token": TOKEN_DIGEST}),
                     f"{NS}/{obs.ADMINS_SECRET}": SecretFact(NS, obs.ADMINS_SECRET, True, {"url": "aa"})}
    for name in EVENT_SOURCES:
        auth = (obs.WEBHOOK_SECRET, "token") if name == "gpuaas-alertmanager" else None
        facts.event_objects.append(EventObject("EventSource", name, {"Deployed": ("True", "", "")}, auth, (1, 1),
                                               (_pod(f"{name}-eventsource-abc-x1", "eventsource-name", name),)))
    for name in SENSORS:
        facts.event_objects.append(EventObject("Sensor", name, {"Deployed": ("True", "", "")}, None, (1, 1),
                                               (_pod(f"{name}-sensor-abc-x1", "sensor-name", name),)))
    facts.event_objects.append(EventObject("EventBus", "default", {"Deployed": ("True", "", "")}))
    facts.product_pods = [p for o in facts.event_objects for p in o.pods]
    facts.workflow_templates = {name: ("quay.io/acme/gpuaas-step:0.1.0",) for name in (
        "gpuaas-on-admitted", "gpuaas-on-finished", "gpuaas-on-idle", "gpuaas-release-workers",
        "gpuaas-resume-workers", "gpuaas-provision-quota")}
    facts.workflows = [WorkflowFact("gpuaas-on-admitted-x7k2p", "gpuaas-on-admitted", 600.0, "Succeeded")]
    facts.sweep = Sweep(sweep_cron(), [sweep_pass()])
    facts.argo_config = {"source": "ConfigMap argo/workflow-controller-configmap", "instanceID": "", "namespace": ""}
    facts.tenants.cluster_queues = [ClusterQueueFact("team-a", 4.0, True)]
    facts.tenants.local_queues = [LocalQueueFact("team-a", "team-a", "team-a")]
    facts.tenants.namespaces = {"team-a": {"gpuaas.io/tenant": "team-a"}, NS: {}, "monitoring": {},
                                "kueue-system": {}, "kube-system": {}}
    facts.tenants.policy_tenants = ("team-a",)
    return facts


def broken(change: Any) -> Facts:
    """`healthy()` with one change applied (a function of the facts)."""
    facts = copy.deepcopy(healthy())
    change(facts)
    return facts
