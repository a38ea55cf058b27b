"""Tenants' Kueue objects: one GPU ResourceFlavor, a Cohort, a ClusterQueue per tenant (the tenant IS its
ClusterQueue), a LocalQueue in the tenant's namespace, and the namespace labelled `gpuaas.io/tenant`.

Built from the values' `kueue` and `tenants` (gpuaas/manifests/site.py): the example tenants
(manifests/examples/tenants) are examples/values/kubernetes.yaml's. Tenants in one cohort may borrow
each other's unused GPUs; preemption reclaims borrowed quota. Namespaces carry `gpuaas.io/tenant` so
dashboards join GPU use to the tenant, and `helm.sh/resource-policy: keep`: they hold the tenant's
work, which `helm uninstall` must never delete (kubectl ignores the annotation).
"""

from __future__ import annotations

from typing import Any

from gpuaas.manifests.platform import labels

JSON = dict[str, Any]

KUEUE = "kueue.x-k8s.io/v1beta2"
TENANT_LABEL = "gpuaas.io/tenant"
KEEP = {"helm.sh/resource-policy": "keep"}
"""Helm leaves an object with this annotation in place on uninstall (a tenant's namespace holds its work)."""


def resource_flavor(name: str, node_labels: Any, tolerations: Any) -> JSON:
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor",
            "metadata": {"name": name, "labels": labels("tenants")},
            "spec": {"nodeLabels": node_labels, "tolerations": tolerations}}


def cohort(name: str) -> JSON:
    return {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": name, "labels": labels("tenants")},
            "spec": {}}


def cluster_queue(tenant: str, cohort_name: str, flavor: str, covered: Any, resources: Any) -> JSON:
    """`covered`: the resource names, sorted; `resources`: `[{name, nominalQuota}]` in the same order."""
    return {"apiVersion": KUEUE, "kind": "ClusterQueue",
            "metadata": {"name": tenant, "labels": labels("tenants")},
            "spec": {
                "cohortName": cohort_name,
                "namespaceSelector": {"matchLabels": {TENANT_LABEL: tenant}},
                "queueingStrategy": "BestEffortFIFO",
                "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
                "resourceGroups": [{"coveredResources": covered,
                                    "flavors": [{"name": flavor, "resources": resources}]}],
            }}


def namespace(name: str, tenant: str) -> JSON:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {**labels("tenants"), TENANT_LABEL: tenant},
                         "annotations": dict(KEEP)}}


def local_queue(name: str, namespace_name: str, tenant: str) -> JSON:
    return {"apiVersion": KUEUE, "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace_name, "labels": labels("tenants")},
            "spec": {"clusterQueue": tenant}}


def quota_resources(quota: dict[str, Any]) -> list[JSON]:
    """`{cpu: 32, nvidia.com/gpu: 4}` -> `[{name, nominalQuota}]` sorted by name (the chart's gpuaas.quotaResources)."""
    from gpuaas.manifests.site import _to_string

    return [{"name": name, "nominalQuota": _to_string(quota[name])} for name in sorted(quota)]
