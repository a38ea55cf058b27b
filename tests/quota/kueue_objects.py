"""Builders for the Kueue and job objects the quota tests create (plain dicts, as kubectl would send)."""

from __future__ import annotations

from typing import Any

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def resource_flavor(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": {"nodeLabels": labels or {"gpuaas.io/flavor": name}}}


def cluster_queue(name: str, gpus: int, *, flavor: str = "a100", cohort: str | None = "gpuaas",
                  strategy: str = "BestEffortFIFO", borrowing_limit: int | None = None,
                  lending_limit: int | None = None) -> dict[str, Any]:
    resource: dict[str, Any] = {"name": "nvidia.com/gpu", "nominalQuota": gpus}
    if borrowing_limit is not None:
        resource["borrowingLimit"] = borrowing_limit
    if lending_limit is not None:
        resource["lendingLimit"] = lending_limit
    spec: dict[str, Any] = {"namespaceSelector": {}, "queueingStrategy": strategy,
                            "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                                                "flavors": [{"name": flavor, "resources": [resource]}]}]}
    if cohort:
        spec["cohortName"] = cohort
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(namespace: str, cluster_queue_name: str, name: str = "gpu") -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cluster_queue_name}}


def pod_template(gpus: int) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "main", "image": "trainer",
                                     "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}


def job(namespace: str, name: str, gpus: int, parallelism: int = 1, queue: str = "gpu") -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue}},
            "spec": {"suspend": True, "parallelism": parallelism, "template": pod_template(gpus)}}


def workload(namespace: str, name: str, gpus: int, count: int = 1, queue: str = "gpu",
             api_version: str = "kueue.x-k8s.io/v1beta2") -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "Workload", "metadata": {"name": name, "namespace": namespace},
            "spec": {"queueName": queue, "podSets": [{"name": "main", "count": count, "template": pod_template(gpus)}]}}


def stateful_set(namespace: str, name: str, gpus: int, replicas: int = 1) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: "gpu"}},
            "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": {"app": name}},
                     "template": pod_template(gpus)}}


def ray_cluster(namespace: str, name: str, workers: int, gpus_per_worker: int, elastic: bool = True) -> dict[str, Any]:
    annotations = {"kueue.x-k8s.io/elastic-job": "true"} if elastic else {}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: "gpu"},
                         "annotations": annotations},
            "spec": {"suspend": True,
                     "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head", "image": "ray"}]}}},
                     "workerGroupSpecs": [{"groupName": "gpu-workers", "replicas": workers,
                                           "template": pod_template(gpus_per_worker)}]}}
