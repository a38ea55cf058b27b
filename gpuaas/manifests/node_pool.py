"""KEDA ScaledObject that grows a GPU node pool when Kueue has GPUs pending.

Target: an OpenShift MachineSet (machine.openshift.io/v1beta1, has /scale) or a Cluster API
MachineDeployment (cluster.x-k8s.io/v1beta1, has /scale). KEDA requires the target in the
ScaledObject's own namespace, so the object lives beside the MachineSet/MachineDeployment.

Query: nodes wanted = (GPUs allocatable on the pool's nodes + GPUs pending in Kueue) / GPUs per node,
with `metricType: AverageValue` and `threshold` = GPUs per node, so the HPA's desired replica count is
ceil(total / per-node). Scale-in is DISABLED: a MachineSet removes a machine by its deletion policy,
not by emptiness, and could take a busy GPU node; shrinking is left to the admin (or a
cluster-autoscaler that drains). gpuaas frees GPUs by releasing idle workloads, which makes room
for pending ones before any node is added.

Failure mode: a missing metric must never read as "no GPUs wanted" (KEDA would scale the pool to
zero after the cooldown); the query leaves the allocatable part without a default and
`ignoreNullValues: "false"` makes an empty result an error, on which KEDA keeps the current size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuaas.manifests.platform import labels

JSON = dict[str, Any]

PENDING_METRIC = 'kueue_cluster_queue_resource_pending{resource="nvidia.com/gpu"}'


@dataclass(frozen=True)
class NodePool:
    api_version: str
    kind: str
    name: str
    namespace: str
    prometheus_url: str
    gpus_per_node: int = 8
    max_nodes: int = 8
    node_regex: str = ".+"
    """Regexp on the `node` label selecting this pool's nodes in kube-state-metrics."""
    authentication: str | None = None
    """TriggerAuthentication name (bearer token for OpenShift's thanos-querier)."""

    def query(self) -> str:
        # No `or vector(0)` on the allocatable part: if kube-state-metrics is missing, the query is empty,
        # KEDA reports an error (ignoreNullValues false) and holds the pool, instead of reading "0 GPUs
        # wanted" and scaling GPU nodes away.
        allocatable = f'sum(kube_node_status_allocatable{{resource="nvidia_com_gpu", node=~"{self.node_regex}"}})'
        return f"{allocatable} + (sum({PENDING_METRIC}) or vector(0))"


def scaled_object(pool: NodePool) -> JSON:
    metadata: JSON = {"name": "gpuaas-gpu-node-pool", "namespace": pool.namespace, "labels": labels("node-pool")}
    trigger: JSON = {"type": "prometheus", "metricType": "AverageValue", "metadata": {
        "serverAddress": pool.prometheus_url, "query": pool.query(),
        "threshold": str(pool.gpus_per_node), "activationThreshold": "0", "ignoreNullValues": "false"}}
    if pool.authentication:
        trigger["metadata"]["authModes"] = "bearer"
        trigger["authenticationRef"] = {"name": pool.authentication}
    return {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": metadata,
        "spec": {
            "scaleTargetRef": {"apiVersion": pool.api_version, "kind": pool.kind, "name": pool.name},
            "minReplicaCount": 0, "maxReplicaCount": pool.max_nodes,
            "pollingInterval": 30, "cooldownPeriod": 600,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 60,
                            "policies": [{"type": "Pods", "value": 2, "periodSeconds": 300}]},
                "scaleDown": {"selectPolicy": "Disabled"},
            }}},
            "triggers": [trigger],
        },
    }


def trigger_authentication(name: str, namespace: str, secret: str) -> JSON:
    """Bearer token + CA for thanos-querier (Secret holds `token` and `ca.crt` of an SA with cluster-monitoring-view)."""
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "TriggerAuthentication",
            "metadata": {"name": name, "namespace": namespace, "labels": labels("node-pool")},
            "spec": {"secretTargetRef": [{"parameter": "bearerToken", "name": secret, "key": "token"},
                                         {"parameter": "ca", "name": secret, "key": "ca.crt"}]}}


def openshift() -> list[JSON]:
    pool = NodePool("machine.openshift.io/v1beta1", "MachineSet", "gpu-worker", "openshift-machine-api",
                    "https://thanos-querier.openshift-monitoring.svc:9091",
                    authentication="gpuaas-keda-thanos")
    return [scaled_object(pool), trigger_authentication("gpuaas-keda-thanos", pool.namespace, "gpuaas-keda-thanos")]


def kubernetes() -> list[JSON]:
    pool = NodePool("cluster.x-k8s.io/v1beta1", "MachineDeployment", "gpu-workers", "default",
                    "http://prometheus-operated.monitoring.svc:9090")
    return [scaled_object(pool)]
