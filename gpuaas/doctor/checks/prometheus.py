"""Prometheus: reachable, alerting to an Alertmanager, evaluating the product's rules; and the series
those rules read (DCGM's activity metric and mode, kube-state-metrics' tenant label).

The rules finding reads what Prometheus itself reports (`/api/v1/rules`: each group loaded, its
rules' health, the last evaluation), so it holds whoever loads them (a rule file, the Prometheus
Operator, Thanos Ruler behind thanos-querier). When the groups are missing it explains why from the
operator's side (prometheus-operator v0.93: a `null` ruleSelector selects nothing, a `null`
ruleNamespaceSelector means the Prometheus's own namespace), and an enforced namespace label shows in
the loaded queries themselves (pkg/namespacelabeler adds `namespace="<rule's namespace>"` to every
selector).
"""

from __future__ import annotations

import re

from gpuaas.doctor.facts import Facts, MonitoringResource, ProductObject
from gpuaas.doctor.findings import Finding, Skipped, blocks, ok, warn
from gpuaas.doctor.selectors import describe_selector, labels_that_satisfy, selects
from gpuaas.manifests import gpu_health
from gpuaas.manifests import observability as obs
from steps.gpu_key import ENGINE_ACTIVE, GPU_UTIL

RULE_GROUPS = (obs.RULE_GROUP, gpu_health.GROUP)
STALE_EVALUATIONS = 3
"""A group whose last evaluation is older than this many intervals is not being evaluated any more."""


def prometheus_finding(facts: Facts) -> Finding | Skipped:
    check = "prometheus"
    prometheus = facts.prometheus
    if prometheus is None:
        return warn(check, "no Prometheus given: rules, alerting and metrics were not checked",
                    "gpuaas doctor --prometheus URL  (e.g. after `kubectl -n monitoring port-forward "
                    "svc/prometheus-operated 9090`; on OpenShift https://thanos-querier-openshift-monitoring.apps.<cluster> "
                    "with --bearer-token-file)")
    if not prometheus.reachable:
        return blocks(check, f"Prometheus at {prometheus.url} did not answer: {prometheus.error}",
                      "check --prometheus (the URL of its HTTP API) and --bearer-token-file/--ca-file if it is behind "
                      "a proxy; the product's rules, alerting and metrics cannot be judged without it")
    if prometheus.rule_groups is not None and not prometheus.alertmanagers and not _is_querier(prometheus.url):
        return blocks(check, f"Prometheus at {prometheus.url} sends its alerts to no Alertmanager: GPUWorkloadIdle "
                             "would fire into nothing",
                      "configure alerting.alertmanagers of that Prometheus (Prometheus resource: spec.alerting)")
    return ok(check, f"Prometheus at {prometheus.url} answers",
              f"alerting to: {', '.join(prometheus.alertmanagers) or 'not reported (a querier)'}")


def _is_querier(url: str) -> bool:
    return "thanos" in url or "querier" in url


def _selected_by(resource: MonitoringResource, rule: ProductObject, namespaces: dict[str, dict[str, str]]) -> list[str]:
    """Why `resource` does NOT select `rule` (empty when it does)."""
    spec = resource.spec
    why = []
    if not selects(spec.get("ruleSelector"), rule.labels):
        why.append(f"its ruleSelector ({describe_selector(spec.get('ruleSelector'))}) does not match the rule's labels")
    ns_selector = spec.get("ruleNamespaceSelector")
    if ns_selector is None:
        if rule.namespace != resource.namespace:
            why.append(f"its ruleNamespaceSelector is null (only its own namespace {resource.namespace})")
    elif not selects(ns_selector, {"kubernetes.io/metadata.name": rule.namespace,
                                   **namespaces.get(rule.namespace, {})}):
        why.append(f"its ruleNamespaceSelector ({describe_selector(ns_selector)}) does not select namespace "
                   f"{rule.namespace}")
    return why


def _enforced(resource: MonitoringResource, rule: ProductObject) -> bool:
    spec = resource.spec
    label = spec.get("enforcedNamespaceLabel")
    if not label:
        return False
    excluded = spec.get("excludedFromEnforcement") or []
    return not any(e.get("namespace") == rule.namespace and (not e.get("name") or e.get("name") == rule.name)
                   for e in excluded)


def rules_finding(facts: Facts) -> Finding | Skipped:
    check = "prometheus.rules"
    prometheus = facts.prometheus
    if prometheus is None or not prometheus.reachable:
        return Skipped(check, "Prometheus was not read")
    if prometheus.rule_groups is None:
        return Skipped(check, f"Prometheus' /api/v1/rules was not read: {facts.unreadable.get('prometheus', '')}")
    groups = {g.name: g for g in prometheus.rule_groups}
    rule = facts.prometheus_rule
    missing = [name for name in RULE_GROUPS if name not in groups]
    if missing:
        return blocks(check, f"Prometheus at {prometheus.url} does not evaluate rule group(s) {', '.join(missing)}: "
                             "GPUWorkloadIdle never fires" + (", and nothing says so" if rule else ""),
                      *_why_not_loaded(facts, rule))
    enforced = [name for name, query in groups[obs.RULE_GROUP].rules.items()
                if re.search(r'namespace="[^"]*"', query) and name in (obs.GPU_ACTIVITY, obs.ALERT_NAME)]
    if enforced:
        ns = rule.namespace if rule else facts.namespace
        return blocks(check, f"the loaded rules carry an enforced namespace matcher ({', '.join(enforced)}): "
                             f"GPUWorkloadIdle only sees series with namespace=\"{ns}\", never a tenant's GPUs",
                      _enforcement_fix(facts, rule), f"loaded {obs.GPU_ACTIVITY}: {groups[obs.RULE_GROUP].rules.get(obs.GPU_ACTIVITY, '')[:200]}")
    details = []
    for name in RULE_GROUPS:
        group = groups[name]
        age = "never" if group.last_evaluation_age_s is None else f"{group.last_evaluation_age_s:.0f}s ago"
        details.append(f"group {name}: {len(group.rules)} rules, health {group.health}, last evaluated {age}"
                       + (f", from {group.file}" if group.file else ""))
        if group.health == "err":
            return blocks(check, f"rule group {name} fails to evaluate: {group.last_error}",
                          "fix the error above (a rule the Prometheus version does not parse, or a series it "
                          "cannot read); then apply the manifests again", *details)
        if group.last_evaluation_age_s is None or group.last_evaluation_age_s > STALE_EVALUATIONS * group.interval_s:
            return blocks(check, f"rule group {name} is loaded but not evaluated (last evaluation {age})",
                          "check the Prometheus's rule evaluation (its logs) and that it is not overloaded", *details)
    expected = {r.get("record") or r.get("alert") for g in obs.rule_groups()["groups"] for r in g["rules"]}
    loaded = {n for g in RULE_GROUPS for n in groups[g].rules}
    if expected - loaded:
        return warn(check, f"the loaded rules are older than this gpuaas: {', '.join(sorted(expected - loaded))} "
                           "missing", "apply the manifests of this version again: kubectl apply -k "
                                      "manifests/overlays/<yours>", *details)
    return ok(check, "Prometheus evaluates the product's rules", *details)


def _why_not_loaded(facts: Facts, rule: ProductObject | None) -> tuple[str, ...]:
    """(fix, *details) for rule groups that are not loaded."""
    if rule is None:
        where = "not read" if "product-objects" in facts.unreadable else "absent"
        return ((f"apply the product's manifests (the PrometheusRule gpuaas-gpu is {where} in {facts.namespace}): "
                "kubectl apply -k manifests/overlays/<yours>"),)
    prometheuses = [r for r in facts.prometheus_resources if r.kind in ("Prometheus", "ThanosRuler")]
    if not prometheuses:
        return (("the PrometheusRule exists but no Prometheus resource is visible (no Prometheus Operator here): load "
                "the rules into your Prometheus yourself (`gpuaas render` writes them; the `spec` of "
                "manifests/base/observability.yaml's PrometheusRule is a rule file), or run the Prometheus Operator"),)
    details = []
    fixes = []
    for resource in prometheuses:
        why = _selected_by(resource, rule, facts.tenants.namespaces)
        if not why:
            details.append(f"{resource.kind} {resource.namespace}/{resource.name} selects it, but this Prometheus "
                           "has not loaded it: is --prometheus that Prometheus (or a querier in front of it)?")
            continue
        details.append(f"{resource.kind} {resource.namespace}/{resource.name}: " + "; ".join(why))
        wanted = labels_that_satisfy(resource.spec.get("ruleSelector"))
        if wanted and any("ruleSelector" in w for w in why):
            fixes.append(f"kubectl -n {rule.namespace} label prometheusrule {rule.name} "
                         + " ".join(f"{k}={v}" for k, v in wanted.items()))
        ns_selector = resource.spec.get("ruleNamespaceSelector")
        if any("ruleNamespaceSelector" in w for w in why):
            ns_labels = labels_that_satisfy(ns_selector) if ns_selector is not None else None
            if ns_labels:
                fixes.append(f"kubectl label namespace {rule.namespace} "
                             + " ".join(f"{k}={v}" for k, v in ns_labels.items()))
            else:
                fixes.append(f"kubectl -n {resource.namespace} patch {resource.kind.lower()} {resource.name} --type=merge "
                             f"-p '{{\"spec\":{{\"ruleNamespaceSelector\":{{}}}}}}'   # or move the PrometheusRule "
                             f"to namespace {resource.namespace}")
    fix = "\n".join(dict.fromkeys(fixes)) or "see the details: the Prometheus that should load the rules and why"
    return (fix, *details)


def _enforcement_fix(facts: Facts, rule: ProductObject | None) -> str:
    """OpenShift: cluster-monitoring-operator owns the user-workload Prometheus and Thanos Ruler, so the exemption
    goes into its config (namespacesWithoutLabelEnforcement); elsewhere into the resource that enforces."""
    from gpuaas.doctor.openshift import is_openshift_monitoring, patch_user_workload_config

    name, ns = (rule.name, rule.namespace) if rule else ("gpuaas-gpu", facts.namespace)
    enforcing = [r for r in facts.prometheus_resources if rule is None or _enforced(r, rule)]
    if any(is_openshift_monitoring(r.namespace) for r in enforcing) or facts.openshift_user_workload_config is not None:
        return (patch_user_workload_config(facts.openshift_user_workload_config,
                                           {"namespacesWithoutLabelEnforcement": [ns]})
                + f"   # cluster-monitoring-operator then exempts {ns} on user-workload's Prometheus and Thanos Ruler")
    lines = [f"kubectl -n {r.namespace} patch {r.kind.lower()} {r.name} --type=json -p '[{{\"op\":\"add\","
             f"\"path\":\"/spec/excludedFromEnforcement/-\",\"value\":{{\"group\":\"monitoring.coreos.com\","
             f"\"resource\":\"prometheusrules\",\"namespace\":\"{ns}\",\"name\":\"{name}\"}}}}]'"
             for r in enforcing if r.spec.get("excludedFromEnforcement")]
    lines += [f"kubectl -n {r.namespace} patch {r.kind.lower()} {r.name} --type=merge -p '{{\"spec\":"
              f"{{\"excludedFromEnforcement\":[{{\"group\":\"monitoring.coreos.com\",\"resource\":\"prometheusrules\","
              f"\"namespace\":\"{ns}\",\"name\":\"{name}\"}}]}}}}'"
              for r in enforcing if not r.spec.get("excludedFromEnforcement")]
    return "\n".join(lines) or (f"exempt PrometheusRule {ns}/{name} from the namespace label the evaluating "
                                 "Prometheus enforces (its excludedFromEnforcement)")


def dcgm_finding(facts: Facts) -> Finding | Skipped:
    check = "dcgm-exporter"
    if facts.metrics is None:
        return Skipped(check, "Prometheus was not read")
    dcgm = facts.metrics.dcgm
    if not dcgm.gpus:
        return blocks(check, f"Prometheus has no DCGM series ({ENGINE_ACTIVE} or {GPU_UTIL}): GPUWorkloadIdle can never "
                             "fire and on-idle never confirms idleness",
                      "run NVIDIA's dcgm-exporter (the GPU Operator's default, `dcgmExporter.enabled: true`) and "
                      "have this Prometheus scrape it (GPU Operator: `dcgmExporter.serviceMonitor.enabled: true`)")
    spelling = ("exported_pod/exported_namespace" if dcgm.held_exported else "pod/namespace") \
        if (dcgm.held_exported or dcgm.held_plain) else "none"
    details = [f"{dcgm.gpus} GPU(s); {ENGINE_ACTIVE}: {dcgm.engine_active} series, {GPU_UTIL}: {dcgm.gpu_util} series",
               f"pod labels: {spelling} ({dcgm.held_plain + dcgm.held_exported} series held by a pod)",
               f"MIG slices: {dcgm.mig_slices}"]
    if not (dcgm.held_plain or dcgm.held_exported):
        if facts.metrics.gpu_requests:
            return blocks(check, "no DCGM series names the pod that holds its GPU, while pods request GPUs: the "
                                 "exporter is not in Kubernetes mode, so no alert can name a workload",
                          "set DCGM_EXPORTER_KUBERNETES=true on dcgm-exporter (GPU Operator: ClusterPolicy "
                          "spec.dcgmExporter.env) and mount the kubelet's pod-resources socket "
                          "(/var/lib/kubelet/pod-resources)", *details)
        details.append("no GPU is held by a pod now: the Kubernetes mode is not proven")
    if dcgm.mig_slices_without_engine_active:
        shown = ", ".join(dcgm.mig_slices_without_engine_active[:5])
        return warn(check, f"{len(dcgm.mig_slices_without_engine_active)} MIG slice(s) report no {ENGINE_ACTIVE}: MIG "
                           f"does not report {GPU_UTIL}, so gpuaas has no activity for them and never releases them",
                    f"enable the profiling metrics: add `{ENGINE_ACTIVE}, gauge, Ratio of time the graphics engine is "
                    "active.` to dcgm-exporter's metrics CSV (GPU Operator: a ConfigMap named in "
                    "ClusterPolicy spec.dcgmExporter.config.name)", *details, f"slices: {shown}")
    metric = ENGINE_ACTIVE if dcgm.engine_active else f"{GPU_UTIL}/100 (no profiling metrics: coarser)"
    return ok(check, f"dcgm-exporter reports {dcgm.gpus} GPU(s); activity from {metric}", *details)


def kube_state_metrics_finding(facts: Facts) -> Finding | Skipped:
    check = "kube-state-metrics"
    if facts.metrics is None:
        return Skipped(check, "Prometheus was not read")
    present = facts.metrics.present
    if not present.get("kube_namespace_labels") and not present.get("kube_pod_container_resource_requests"):
        return warn(check, "Prometheus has no kube-state-metrics series: per-tenant utilization, GPUs requested per "
                           "project and the dashboard's tenant panels read nothing; `gpuaas simulate --prometheus` "
                           "cannot tell who held a GPU",
                    "run kube-state-metrics with the tenant label exported and scrape it: "
                    "--metric-labels-allowlist=namespaces=[gpuaas.io/tenant] (kube-prometheus-stack: "
                    "kube-state-metrics.metricLabelsAllowlist: [\"namespaces=[gpuaas.io/tenant]\"])",
                    "absent: kube_namespace_labels, kube_pod_container_resource_requests")
    labelled = sorted(ns for ns, labels in facts.tenants.namespaces.items() if labels.get("gpuaas.io/tenant"))
    exported = set(facts.metrics.tenant_label_namespaces)
    hidden = [ns for ns in labelled if ns not in exported]
    if hidden:
        return warn(check, f"kube-state-metrics does not export the label gpuaas.io/tenant of {', '.join(hidden)}: "
                           "GPU utilization per tenant reads nothing for them",
                    "add --metric-labels-allowlist=namespaces=[gpuaas.io/tenant] to kube-state-metrics "
                    "(kube-prometheus-stack: kube-state-metrics.metricLabelsAllowlist: "
                    "[\"namespaces=[gpuaas.io/tenant]\"])",
                    f"exported with the label: {', '.join(sorted(exported)) or 'none'}")
    return ok(check, "kube-state-metrics exports the tenant label"
              + (f" of {len(labelled)} tenant namespace(s)" if labelled else " (no namespace carries it yet)"))
