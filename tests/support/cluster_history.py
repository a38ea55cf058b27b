"""Hours of a GPU cluster's metrics, built from known stories, for backfilling a real Prometheus.

Every series has the name and labels its real exporter gives it:

- DCGM from `engine.exporter.DcgmExporter` itself (its `samples()` at each minute), one exporter per
  label spelling: node-a as dcgm-exporter writes the pod labels, node-b as a ServiceMonitor stores
  them (`exported_pod`/`exported_namespace` + the exporter pod's own `pod`/`namespace`).
- Kueue v0.19.2 (pkg/metrics/metrics.go): `kueue_cluster_queue_resource_usage`, `_nominal_quota`,
  `_borrowing_limit`, `_lending_limit` {cohort, cluster_queue, flavor, resource, replica_role},
  `kueue_cluster_queue_resource_pending` {cluster_queue, resource, replica_role},
  `kueue_pending_workloads` {cluster_queue, status, replica_role}, the
  `kueue_admission_wait_time_seconds` histogram {cluster_queue, priority_class, replica_role} with
  Kueue's buckets (1, then 2.5 x 2^k).
- kube-state-metrics (docs/metrics): `kube_namespace_labels{label_gpuaas_io_tenant}`,
  `kube_pod_container_resource_requests{resource="nvidia_com_gpu", unit="integer"}`,
  `kube_pod_status_phase`, `kube_node_info`.
- Argo custom metrics of the product's templates: `argo_workflows_gpuaas_reaction_outcomes`,
  `argo_workflows_gpuaas_gpu_hours_reclaimed`, `argo_workflows_gpuaas_idle_gpus_released`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.backfill import OpenMetricsHistory
from engine.exporter import DcgmExporter

GPU = "nvidia.com/gpu"
KUEUE_BUCKETS = [1.0] + [2.5 * 2 ** k for k in range(15)]
STEP = 60.0


@dataclass
class QueueTimeline:
    """One ClusterQueue's GPU figures as functions of minutes since the start."""

    name: str
    cohort: str
    nominal: int
    usage: Callable[[int], float]
    pending: Callable[[int], float] = lambda _m: 0.0
    flavor: str = "a100"
    waits: Callable[[int], list[float]] = lambda _m: []
    """Admission wait times (seconds) of the workloads admitted in that minute."""
    borrowing_limit: float | None = None
    lending_limit: float | None = None


@dataclass
class KueueHistory:
    queues: list[QueueTimeline]
    replicas: tuple[str, ...] = ("leader",)
    _wait_counts: dict[str, list[float]] = field(default_factory=dict)

    def write(self, history: OpenMetricsHistory, start: float, minutes: int) -> None:
        for queue in self.queues:
            buckets = [0.0] * len(KUEUE_BUCKETS)
            total, count = 0.0, 0
            for minute in range(minutes + 1):
                t = start + minute * STEP
                for wait in queue.waits(minute):
                    count += 1
                    total += wait
                    for index, le in enumerate(KUEUE_BUCKETS):
                        if wait <= le:
                            buckets[index] += 1
                for role in self.replicas:
                    base = {"cluster_queue": queue.name, "replica_role": role}
                    flavor = {**base, "cohort": queue.cohort, "flavor": queue.flavor, "resource": GPU}
                    history.add("kueue_cluster_queue_resource_usage", flavor, t, queue.usage(minute))
                    history.add("kueue_cluster_queue_resource_reservation", flavor, t, queue.usage(minute))
                    history.add("kueue_cluster_queue_nominal_quota", flavor, t, queue.nominal)
                    history.add("kueue_cluster_queue_borrowing_limit", flavor, t,
                                math.inf if queue.borrowing_limit is None else queue.borrowing_limit)
                    history.add("kueue_cluster_queue_lending_limit", flavor, t,
                                math.inf if queue.lending_limit is None else queue.lending_limit)
                    history.add("kueue_cluster_queue_resource_pending", {**base, "resource": GPU}, t,
                                queue.pending(minute))
                    history.add("kueue_pending_workloads", {**base, "status": "active"}, t,
                                1.0 if queue.pending(minute) else 0.0)
                    if role == "follower":
                        continue  # only the leader admits, so only it observes wait times
                    hist = {**base, "priority_class": ""}
                    for le, value in zip(KUEUE_BUCKETS, buckets, strict=True):
                        history.add("kueue_admission_wait_time_seconds_bucket", {**hist, "le": f"{le:g}"}, t, value)
                    history.add("kueue_admission_wait_time_seconds_bucket", {**hist, "le": "+Inf"}, t, count)
                    history.add("kueue_admission_wait_time_seconds_sum", hist, t, total)
                    history.add("kueue_admission_wait_time_seconds_count", hist, t, count)


def kube_state(history: OpenMetricsHistory, start: float, minutes: int, *, tenants: dict[str, str],
               pods: list[tuple[str, str, int]], nodes: list[str]) -> None:
    """Namespaces labelled with their tenant, running GPU pods with their requests, Node objects."""
    ksm = {"job": "kube-state-metrics"}
    for minute in range(minutes + 1):
        t = start + minute * STEP
        for namespace, tenant in tenants.items():
            history.add("kube_namespace_labels", {**ksm, "namespace": namespace, "label_gpuaas_io_tenant": tenant}, t, 1)
        for namespace, pod, gpus in pods:
            history.add("kube_pod_container_resource_requests",
                        {**ksm, "namespace": namespace, "pod": pod, "container": "main", "resource": "nvidia_com_gpu",
                         "unit": "integer", "node": "node-a"}, t, gpus)
            for phase in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
                history.add("kube_pod_status_phase", {**ksm, "namespace": namespace, "pod": pod, "phase": phase}, t,
                            1 if phase == "Running" else 0)
        for node in nodes:
            history.add("kube_node_info", {**ksm, "node": node, "kernel_version": "6.1.0",
                                           "kubelet_version": "v1.36.3"}, t, 1)


def argo_counters(history: OpenMetricsHistory, start: float, minutes: int,
                  counters: dict[tuple[str, tuple[tuple[str, str], ...]], Callable[[int], float]]) -> None:
    """Cumulative Argo custom metrics: name + labels -> value at each minute."""
    for (name, labels), value in counters.items():
        for minute in range(minutes + 1):
            history.add(name, {"job": "argo-workflows", **dict(labels)}, start + minute * STEP, value(minute))


@dataclass
class DcgmTimeline:
    """Exporters plus a function that changes them at a given minute (load, incidents, GPUs vanishing)."""

    exporters: list[DcgmExporter]
    target_labels: list[dict[str, str]]
    """Per exporter: labels the scrape adds (the exporter pod's own, behind a ServiceMonitor)."""
    change: Callable[[int], None]

    def write(self, history: OpenMetricsHistory, start: float, minutes: int) -> None:
        for minute in range(minutes + 1):
            self.change(minute)
            for exporter, extra in zip(self.exporters, self.target_labels, strict=True):
                for sample in exporter.samples():
                    history.add(sample.name, {**sample.labels, **extra}, start + minute * STEP, sample.value)
