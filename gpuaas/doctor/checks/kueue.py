"""Kueue's side of the product: its metrics in Prometheus, and which namespaces it manages.

Namespace selection (Kueue v0.19.2 apis/config/v1beta2/configuration_types.go): for the pod-based
integrations (pod, deployment, statefulset: notebooks and inference servers) only namespaces matching
`managedJobsNamespaceSelector` are ever managed, queue-name label or not; unset, it is every namespace
but kube-system and Kueue's own (defaults.go). The Red Hat build's operator fixes it to
`kueue.openshift.io/managed: "true"` (openshift/kueue-operator pkg/configmap/configmap.go) and always
enables `metrics.enableClusterQueueResources`.
"""

from __future__ import annotations

from gpuaas.doctor.facts import Facts
from gpuaas.doctor.findings import Finding, Skipped, blocks, ok, warn
from gpuaas.doctor.selectors import describe_selector, labels_that_satisfy, selects

POD_BASED = ("pod", "deployment", "statefulset")
PRODUCT_FRAMEWORKS = ("batch/job", "ray.io/rayjob", "ray.io/raycluster", "kubeflow.org/pytorchjob", "pod",
                      "deployment", "statefulset", "leaderworkerset.x-k8s.io/leaderworkerset", "jobset.x-k8s.io/jobset")
"""The Kueue integrations whose kinds the product releases and resumes (steps/strategies.py)."""
RED_HAT_MANAGED_LABEL = "kueue.openshift.io/managed"
USAGE, PENDING = "kueue_cluster_queue_resource_usage", "kueue_cluster_queue_resource_pending"
ANY_KUEUE = ("kueue_build_info", "kueue_admitted_active_workloads", "kueue_cluster_queue_status", USAGE)


def tenant_namespaces(facts: Facts) -> list[str]:
    """Namespaces whose LocalQueues point at a ClusterQueue with GPU quota, and namespaces labelled as a tenant's."""
    gpu_queues = {cq.name for cq in facts.tenants.cluster_queues if cq.gpu_quota > 0}
    found = {lq.namespace for lq in facts.tenants.local_queues if lq.cluster_queue in gpu_queues}
    found |= {ns for ns, labels in facts.tenants.namespaces.items() if labels.get("gpuaas.io/tenant")}
    return sorted(found)


def default_selector(kueue_namespace: str) -> dict:
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                  "values": ["kube-system", kueue_namespace]}]}


def metrics_finding(facts: Facts) -> Finding | Skipped:
    check = "kueue.metrics"
    if facts.metrics is None:
        return Skipped(check, "Prometheus was not read")
    present = facts.metrics.present
    config = facts.kueue
    namespace = config.namespace if config else "kueue-system"
    if not any(present.get(name) for name in ANY_KUEUE):
        return warn(check, "Prometheus has no Kueue metrics: per-tenant allocation, quota, borrowing, queue wait "
                           "and pending GPUs read nothing (dashboard, `gpuaas quota advise`, the GPU node pool)",
                    "scrape Kueue's metrics endpoint (Service kueue-controller-manager-metrics-service, https :8443, "
                    "authorized by ClusterRole kueue-metrics-reader):\n"
                    "kubectl apply --server-side -f "
                    "https://github.com/kubernetes-sigs/kueue/releases/download/v0.19.2/prometheus.yaml",
                    f"absent: {', '.join(ANY_KUEUE)}")
    if not present.get(USAGE):
        where = config.source if config else f"ConfigMap {namespace}/kueue-manager-config"
        return warn(check, f"Kueue is scraped but exports no {USAGE}: ClusterQueue resource metrics are off, so "
                           "per-tenant GPU allocation, quota and borrowing read nothing",
                    f"set `metrics.enableClusterQueueResources: true` in Kueue's configuration ({where}, key "
                    "controller_manager_config.yaml), then restart Kueue:\n"
                    f"kubectl -n {namespace} edit configmap kueue-manager-config\n"
                    f"kubectl -n {namespace} rollout restart deployment/kueue-controller-manager")
    if not present.get(PENDING):
        return warn(check, f"Kueue exports {USAGE} but not {PENDING} (it appears in Kueue v0.18): the GPU node pool "
                           "never grows and pending GPUs read 0",
                    "upgrade Kueue to v0.19.2: kubectl apply --server-side -f "
                    "https://github.com/kubernetes-sigs/kueue/releases/download/v0.19.2/manifests.yaml")
    return ok(check, "Kueue's ClusterQueue metrics are in Prometheus",
              f"{USAGE}: {present.get(USAGE)} series, {PENDING}: {present.get(PENDING)} series")


def namespaces_finding(facts: Facts) -> Finding | Skipped:
    check = "kueue.namespaces"
    from gpuaas.doctor.checks.components import not_installed

    if not_installed(facts, "clusterqueues.kueue.x-k8s.io"):
        return Skipped(check, not_installed(facts, "clusterqueues.kueue.x-k8s.io") or "")
    if "tenants" in facts.unreadable:
        return Skipped(check, f"namespaces and queues were not read: {facts.unreadable['tenants']}")
    config = facts.kueue
    namespaces = tenant_namespaces(facts)
    if config is None:
        if not namespaces:
            return ok(check, "no tenant namespace yet; Kueue's configuration was not found",
                      facts.unreadable.get("kueue-config", ""))
        selector, source = default_selector("kueue-system"), "Kueue's default (its configuration was not found)"
    else:
        selector = config.managed_jobs_namespace_selector or default_selector(config.namespace)
        source = config.source + ("" if config.managed_jobs_namespace_selector else " (unset: Kueue's default)")
    frameworks = config.frameworks if config else ()
    details = [f"managedJobsNamespaceSelector: {describe_selector(selector)} ({source})"]
    if frameworks:
        unmanaged = [f for f in PRODUCT_FRAMEWORKS if f not in frameworks]
        details.append(f"integrations: {', '.join(frameworks)}")
        if unmanaged:
            details.append(f"not managed by Kueue here (no Workload, so gpuaas never reacts): {', '.join(unmanaged)}")
    outside = [ns for ns in namespaces
               if not selects(selector, {"kubernetes.io/metadata.name": ns, **facts.tenants.namespaces.get(ns, {})})]
    if outside:
        wanted = labels_that_satisfy(selector)
        if config is not None and config.red_hat_build:
            wanted = {RED_HAT_MANAGED_LABEL: "true"}
        if wanted:
            labels = " ".join(f"{k}={v}" for k, v in wanted.items())
            fix = "\n".join(f"kubectl label namespace {ns} {labels}" for ns in outside)
        else:
            fix = (f"change managedJobsNamespaceSelector in {source} so it selects {', '.join(outside)}, "
                   "then restart Kueue")
        return blocks(check, f"Kueue does not manage pod-based workloads in tenant namespace(s) {', '.join(outside)}: "
                             "their notebooks, inference servers and plain pods get no Workload, so gpuaas cannot "
                             "react to them", fix, *details)
    if frameworks and not any(f in frameworks for f in POD_BASED):
        return warn(check, "Kueue manages no pod-based kind (pod, deployment, statefulset): notebooks and inference "
                           "servers get no Workload and gpuaas never releases them",
                    "add `pod`, `deployment` and `statefulset` to integrations.frameworks in "
                    f"{config.source if config else 'Kueue configuration'} and restart Kueue", *details)
    summary = (f"Kueue manages the {len(namespaces)} tenant namespace(s)" if namespaces
               else "no tenant namespace yet")
    return ok(check, summary, *details)
