"""Every check, in the order the report lists them: `run(facts) -> Report` (pure).

| check id | area | reads |
|---|---|---|
| argo-workflows, argo-events, kueue, keda, prometheus-operator | controllers: CRDs, running, version | crds, controllers, webhooks, api-services |
| argo-workflows.namespace | Argo Workflows runs Workflows in the product's namespace | argo-config, workflows |
| argo-events.pods | the product's EventSource and Sensor pods run | event-objects |
| sweep, sweep.pass | the catch-up sweep's CronWorkflow is scheduled on time; its last pass succeeded | sweep |
| step-image | the step image is pinned and pulls | workflow-templates, product-pods |
| kueue.metrics, kueue.namespaces | Kueue's metrics; which namespaces it manages | metrics, kueue-config, tenants |
| prometheus, prometheus.rules | Prometheus answers, alerts somewhere, evaluates the rules | prometheus, monitoring-resources |
| dcgm-exporter, kube-state-metrics | the series the rules read | metrics |
| alertmanager.routing, webhook.token | GPUWorkloadIdle reaches the webhook, with the right token | alertmanager, secrets |
| tenant:<ClusterQueue>, tenants | each tenant's queue, LocalQueues, namespace labels | tenants |
| kserve, data-science-pipelines | OpenShift AI's serving mode and pipelines | kserve, data-science-pipelines |
| probe | a test alert through the real routing (`--probe`) | probe |
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpuaas.doctor.checks import (
    components,
    kueue,
    platform,
    probe,
    product,
    prometheus,
    routing,
    sweep,
    tenants,
)
from gpuaas.doctor.facts import Facts
from gpuaas.doctor.findings import Finding, Report, Skipped

Check = Callable[[Facts], "Finding | Skipped | Iterable[Finding | Skipped] | None"]

CHECKS: tuple[Check, ...] = (
    components.component_findings,
    product.argo_namespace_finding,
    product.event_pods_finding,
    product.images_finding,
    sweep.cron_finding,
    sweep.pass_finding,
    kueue.metrics_finding,
    kueue.namespaces_finding,
    prometheus.prometheus_finding,
    prometheus.rules_finding,
    prometheus.dcgm_finding,
    prometheus.kube_state_metrics_finding,
    routing.routing_finding,
    routing.token_finding,
    tenants.tenant_findings,
    platform.kserve_finding,
    platform.pipelines_finding,
    probe.probe_finding,
)


def run(facts: Facts, *, probe_requested: bool = False) -> Report:
    """Every check over the same facts; what could not be judged goes to `not_checked`."""
    report = Report(unreadable=dict(facts.unreadable), probe_requested=probe_requested)
    for check in CHECKS:
        produced = check(facts)
        items = [produced] if produced is None or isinstance(produced, (Finding, Skipped)) else list(produced)
        for item in items:
            if isinstance(item, Finding):
                report.findings.append(item)
            elif isinstance(item, Skipped):
                report.not_checked[item.check] = item.why
    return report
