"""Example Kueue setup for two tenants: one GPU ResourceFlavor, a Cohort, a ClusterQueue per tenant
(the tenant IS its ClusterQueue) and a LocalQueue in each tenant namespace.

team-a and team-b share the cohort `gpuaas`: each has a nominal GPU quota and may borrow the other's
unused GPUs; preemption reclaims borrowed quota. Namespaces carry `gpuaas.io/tenant` so dashboards
join GPU use to the tenant. Adjust names and quotas, or create tenants with `gpuaas-provision-quota`.
"""

from __future__ import annotations

from typing import Any

from gpuaas.manifests.platform import labels

JSON = dict[str, Any]

KUEUE = "kueue.x-k8s.io/v1beta2"
FLAVOR = "gpu-a100"
COHORT = "gpuaas"
TENANTS = {"team-a": 4, "team-b": 4}
"""tenant (ClusterQueue and namespace) -> nominal GPUs."""


def resource_flavor() -> JSON:
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor",
            "metadata": {"name": FLAVOR, "labels": labels("example-tenants")},
            "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}


def cohort() -> JSON:
    return {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": COHORT, "labels": labels("example-tenants")},
            "spec": {}}


def cluster_queue(tenant: str, gpus: int) -> JSON:
    return {"apiVersion": KUEUE, "kind": "ClusterQueue",
            "metadata": {"name": tenant, "labels": labels("example-tenants")},
            "spec": {
                "cohortName": COHORT,
                "namespaceSelector": {"matchLabels": {"gpuaas.io/tenant": tenant}},
                "queueingStrategy": "BestEffortFIFO",
                "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
                "resourceGroups": [{
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                    "flavors": [{"name": FLAVOR, "resources": [
                        {"name": "cpu", "nominalQuota": str(gpus * 8)},
                        {"name": "memory", "nominalQuota": f"{gpus * 64}Gi"},
                        {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)},
                    ]}],
                }],
            }}


def namespace(tenant: str) -> JSON:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": tenant, "labels": {**labels("example-tenants"), "gpuaas.io/tenant": tenant}}}


def local_queue(tenant: str) -> JSON:
    return {"apiVersion": KUEUE, "kind": "LocalQueue",
            "metadata": {"name": tenant, "namespace": tenant, "labels": labels("example-tenants")},
            "spec": {"clusterQueue": tenant}}


def objects() -> list[JSON]:
    out: list[JSON] = [resource_flavor(), cohort()]
    for tenant, gpus in TENANTS.items():
        out += [namespace(tenant), cluster_queue(tenant, gpus), local_queue(tenant)]
    return out
