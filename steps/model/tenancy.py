"""Tenants: namespace -> LocalQueue (Workload spec.queueName) -> ClusterQueue (the tenant) -> cohort.

The tenant is the ClusterQueue. It is read from the admission when there is one; a deactivated or
released Workload has lost its admission but still belongs to its tenant, so the LocalQueue named
by spec.queueName is the fallback. The `tenant` step parameter is only a hint and never trusted.

    cohort_of(cluster_queue) -> str | None    # v1beta2 spec.cohortName, v1beta1 spec.cohort
    resolve_tenant(kube, workload) -> Tenant
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]


def cohort_of(cluster_queue: Mapping[str, Any] | None) -> str | None:
    spec = (cluster_queue or {}).get("spec") or {}
    return spec.get("cohortName") or spec.get("cohort") or None


@dataclass(frozen=True)
class Tenant:
    cluster_queue: str | None
    cohort: str | None = None
    local_queue: str | None = None
    cluster_queue_object: JSON | None = None
    source: str = ""
    """admission | local-queue | unknown: how the tenant was found."""

    def to_dict(self) -> JSON:
        return {"clusterQueue": self.cluster_queue, "cohort": self.cohort, "localQueue": self.local_queue,
                "source": self.source}


def resolve_tenant(kube: Any, workload: Mapping[str, Any]) -> Tenant:
    from steps.gateways.resources import (
        CLUSTER_QUEUE,
        CLUSTER_QUEUE_V1BETA1,
        LOCAL_QUEUE,
        LOCAL_QUEUE_V1BETA1,
    )

    meta = workload.get("metadata") or {}
    spec = workload.get("spec") or {}
    local_queue = spec.get("queueName") or (meta.get("labels") or {}).get("kueue.x-k8s.io/queue-name")
    cq_name = ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue")
    source = "admission"
    if not cq_name and local_queue:
        lq = kube.get(LOCAL_QUEUE, local_queue, meta.get("namespace")) or \
            kube.get(LOCAL_QUEUE_V1BETA1, local_queue, meta.get("namespace"))
        cq_name = ((lq or {}).get("spec") or {}).get("clusterQueue")
        source = "local-queue"
    if not cq_name:
        return Tenant(None, None, local_queue, None, "unknown")
    cq = kube.get(CLUSTER_QUEUE, cq_name) or kube.get(CLUSTER_QUEUE_V1BETA1, cq_name)
    return Tenant(str(cq_name), cohort_of(cq), local_queue, cq, source)
