"""KEDA ScaledObject that grows a GPU node pool when Kueue has GPUs pending.

Target: an OpenShift MachineSet (machine.openshift.io/v1beta1, has /scale) or a Cluster API
MachineDeployment (cluster.x-k8s.io/v1beta1, has /scale). KEDA requires the target in the
ScaledObject's own namespace, so the object lives beside the MachineSet/MachineDeployment.

Query: nodes wanted = (GPUs allocatable on the pool's nodes + GPUs pending in the pool's ClusterQueues)
/ GPUs per node, with `metricType: AverageValue` and `threshold` = GPUs per node, so the HPA's desired
replica count is ceil(total / per-node).
- The pool's nodes are those carrying the pool label (`gpuaas.io/node-pool: <pool>` by default, set in
  the MachineSet's / MachineDeployment's node template), read from kube-state-metrics'
  `kube_node_labels` (the label must be allowlisted: `--metric-labels-allowlist=nodes=[gpuaas.io/node-pool]`);
  other GPU nodes do not count.
- A pool with no nodes has no such series: `or vector(0)` makes its capacity 0, so the pool grows from
  0 nodes (the query used to be empty there, and KEDA never scaled).
- Pending GPUs come from `kueue_cluster_queue_resource_pending` (Kueue v0.18+, with
  `metrics.enableClusterQueueResources: true`). It has no flavor label (pending workloads have no
  flavor yet): `cluster_queues` names the ClusterQueues whose GPUs this pool serves. With several
  Kueue replicas the followers report the same gauge (label `replica_role="follower"`: the workload
  and ClusterQueue controllers run on followers for the visibility API), so only non-followers count,
  one value per ClusterQueue (`max by`: a second scrape does not count twice either), as in the
  product's recording rules (gpuaas/manifests/observability.py KUEUE_SELECTOR). Likewise one value
  per node from kube-state-metrics.

Never shrinking: the pool only grows. `autoscaling.keda.sh/paused-scale-in: "true"` keeps KEDA from
taking the target to `minReplicaCount` 0 when the query reads 0 (no demand, or kube-state-metrics
missing: KEDA v2.20 `scaleToZeroOrIdle` returns on it) and sets the HPA's scale-down to Disabled. A
MachineSet removes a machine by its deletion policy, not by emptiness, and could take a busy GPU
node; shrinking is left to the admin (or a cluster-autoscaler that drains). A missing metric can
under-count the capacity, which only makes the pool grow less. gpuaas frees GPUs by releasing idle
workloads, which makes room for pending ones before any node is added.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpuaas.manifests.platform import labels

JSON = dict[str, Any]

PENDING_METRIC = "kueue_cluster_queue_resource_pending"
"""Kueue v0.18+ (pkg/metrics/metrics.go ClusterQueueResourcePending); absent in v0.16 and v0.17."""
POOL_LABEL = "gpuaas.io/node-pool"
PAUSED_SCALE_IN = "autoscaling.keda.sh/paused-scale-in"


@dataclass(frozen=True)
class NodePool:
    api_version: str
    kind: str
    name: str
    namespace: str
    prometheus_url: str
    gpus_per_node: int = 8
    max_nodes: int = 8
    pool_label: str = POOL_LABEL
    """The node label whose value is the pool's name (set in the node template; allowlisted in kube-state-metrics)."""
    cluster_queues: str = ".+"
    """Regexp on `cluster_queue`: the ClusterQueues whose pending GPUs this pool serves."""
    authentication: str | None = None
    """ClusterTriggerAuthentication name (the product's bearer token and CA for an authenticated Prometheus such as
    OpenShift's thanos-querier: gpuaas.manifests.site, `prometheus.auth`)."""
    label_series: str | None = None
    """The label's name in kube-state-metrics' series (default: from pool_label, `label_series()`)."""

    def query(self) -> str:
        label = self.label_series or label_series(self.pool_label)
        nodes = f'max by (node) (kube_node_labels{{{label}="{self.name}"}})'
        allocatable = (f'sum(max by (node) (kube_node_status_allocatable{{resource="nvidia_com_gpu"}}) '
                       f"* on (node) group_left () {nodes})")
        pending = (f'sum(max by (cluster_queue) ({PENDING_METRIC}{{resource="nvidia.com/gpu", '
                   f'replica_role!="follower", cluster_queue=~"{self.cluster_queues}"}}))')
        return f"({allocatable} or vector(0)) + ({pending} or vector(0))"


def label_series(pool_label: str) -> str:
    """kube-state-metrics' name for a node label: `label_` + the label with every other character as `_`
    (the chart: `print "label_" (regexReplaceAll "[^a-zA-Z0-9_]" LABEL "_")`)."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", pool_label)


def scaled_object(pool: NodePool) -> JSON:
    metadata: JSON = {"name": "gpuaas-gpu-node-pool", "namespace": pool.namespace, "labels": labels("node-pool"),
                      "annotations": {PAUSED_SCALE_IN: "true"}}
    trigger: JSON = {"type": "prometheus", "metricType": "AverageValue", "metadata": {
        "serverAddress": pool.prometheus_url, "query": pool.query(),
        "threshold": str(pool.gpus_per_node), "activationThreshold": "0", "ignoreNullValues": "false"}}
    if pool.authentication:
        trigger["metadata"]["authModes"] = "bearer"
        trigger["authenticationRef"] = {"name": pool.authentication, "kind": "ClusterTriggerAuthentication"}
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


def example(name: str) -> list[JSON]:
    """The node pool of examples/values/<name>.yaml (what manifests/overlays/<name>/node-pool.yaml holds)."""
    from gpuaas.manifests import site

    return site.node_pool_objects(site.example_values(name))


def openshift() -> list[JSON]:
    return example("openshift")


def kubernetes() -> list[JSON]:
    return example("kubernetes")
