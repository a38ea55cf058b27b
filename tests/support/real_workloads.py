"""Tenants' workloads of every kind gpuaas reacts to, on the real stack: submit one, find its
Workload, read the quota Kueue reserves for it, and end its pods the way their programs would.

    kinds = RealWorkloads(real_cluster, "team-b")
    submitted = kinds.submit(KINDS["Job"], "train")       # queued through the tenant's LocalQueue
    workload = kinds.admitted(submitted)                   # its Workload once Kueue admitted it
    kinds.reserved_gpus("team-b")                          # ClusterQueue status: GPUs reserved now
    kinds.metric_gpus("team-b")                            # the same figure from Kueue's metrics (Prometheus)
    kinds.finish_pods(submitted)                           # its running pods exit 0 (KWOK completes them)

Pods run on the KWOK GPU nodes. A pod of a Job or PyTorchJob completes after the annotations
`pod-complete.stage.kwok.x-k8s.io/delay` and `/jitter-delay`; every pod here starts with an hour or
more of it (RUNNING), so nothing finishes before the test says so: `finish_pods` sets it to 0 on the
running pods (KWOK re-reads a pod's stages on every change), as the program inside exiting would.
"""

from __future__ import annotations

import copy
import json
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from steps.gateways import resources as R
from steps.gateways.kubernetes import KubernetesGateway
from tests.support.real_cluster import RealCluster, eventually

JSON = dict[str, Any]
COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
COMPLETE_JITTER = "pod-complete.stage.kwok.x-k8s.io/jitter-delay"
RUNNING = {COMPLETE_DELAY: "1h", COMPLETE_JITTER: "2h"}
"""A pod that runs until the test ends it. KWOK's delay is the annotation's duration plus a random part
up to the jitter; a jitter shorter than the duration REPLACES it (default 5 s: the pod would complete
after 5 s), and one equal to it panics (`rand.Int63n(0)`; pkg/kwok/controllers/lifecycle.go Delay)."""
FINISH_NOW = {COMPLETE_DELAY: "0s", COMPLETE_JITTER: "1s"}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ELASTIC = "kueue.x-k8s.io/elastic-job"
GPU = "nvidia.com/gpu"
SLICE_REPLACED = "WorkloadSliceReplaced"


def container(name: str, gpus: int, cpu: str = "1") -> JSON:
    requests = {"cpu": cpu, "memory": "1Gi"}
    limits: JSON = {}
    if gpus:
        requests[GPU] = limits[GPU] = str(gpus)
    return {"name": name, "image": "registry.invalid/gpuaas-test:1",
            "resources": {"requests": requests, **({"limits": limits} if limits else {})}}


def pod_template(name: str, gpus: int, restart: str | None = "Never", labels: JSON | None = None) -> JSON:
    spec: JSON = {"containers": [container(name, gpus)]}
    if restart:
        spec["restartPolicy"] = restart
    return {"metadata": {"annotations": dict(RUNNING), "labels": dict(labels or {})}, "spec": spec}


@dataclass(frozen=True)
class Kind:
    """One row of the kind table: how to build the object and what a release does to it."""

    name: str
    resource: R.Resource
    build: Callable[[str, str, str], JSON]
    """(name, namespace, queue) -> the object."""
    gpus: int
    """GPUs the whole workload holds when admitted."""
    strategy: str
    """The release strategy gpuaas picks (steps.strategies)."""
    gpus_after_release: int = 0
    finishes: bool = True
    """Whether the workload ends on its own (a RayCluster, a Deployment and a StatefulSet never do)."""
    keda_scaled: bool = False
    """on-admitted would give it a KEDA ScaledObject (its release is then `pause-keda`, the KEDA tier's
    subject); here on-admitted runs in dry-run so the plain `scale-to-zero` path is the one judged."""


def job(name: str, namespace: str, queue: str, *, pods: int = 2, gpus: int = 1, elastic: bool = False) -> JSON:
    annotations = {ELASTIC: "true"} if elastic else {}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue},
                         "annotations": annotations},
            "spec": {"parallelism": pods, "completions": pods, "suspend": True,
                     "template": pod_template("train", gpus)}}


def ray_cluster(name: str, namespace: str, queue: str, *, workers: int = 2, gpus: int = 1) -> JSON:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue}},
            "spec": _ray_cluster_spec(workers, gpus)}


def _ray_cluster_spec(workers: int, gpus: int) -> JSON:
    head = pod_template("ray-head", 0, restart=None)
    worker = pod_template("ray-worker", gpus, restart=None)
    return {"rayVersion": "2.41.0",
            "headGroupSpec": {"rayStartParams": {}, "template": head},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": workers, "minReplicas": workers,
                                  "maxReplicas": workers, "rayStartParams": {}, "template": worker}]}


def ray_job(name: str, namespace: str, queue: str, *, workers: int = 2, gpus: int = 1) -> JSON:
    """A RayJob in K8sJobMode: KubeRay makes its RayCluster, then a submitter Job once the head is ready.
    Kueue wants `shutdownAfterJobFinishes: true` on a RayJob it manages."""
    submitter = pod_template("ray-job-submitter", 0)
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue}},
            "spec": {"entrypoint": "python train.py", "shutdownAfterJobFinishes": True, "suspend": True,
                     "submitterPodTemplate": submitter, "rayClusterSpec": _ray_cluster_spec(workers, gpus)}}


def pytorch_job(name: str, namespace: str, queue: str, *, workers: int = 1, gpus: int = 1) -> JSON:
    def replica(count: int) -> JSON:
        return {"replicas": count, "restartPolicy": "Never", "template": pod_template("pytorch", gpus, restart=None)}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue}},
            "spec": {"runPolicy": {"suspend": True},
                     "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}}}


def deployment(name: str, namespace: str, queue: str, *, replicas: int = 1, gpus: int = 1) -> JSON:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": pod_template("server", gpus, restart=None, labels=labels)}}


def stateful_set(name: str, namespace: str, queue: str, *, replicas: int = 1, gpus: int = 1) -> JSON:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue}},
            "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": labels},
                     "template": pod_template("notebook", gpus, restart=None, labels=labels)}}


def plain_pod(name: str, namespace: str, queue: str, *, gpus: int = 1) -> JSON:
    template = pod_template("main", gpus)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue},
                         "annotations": template["metadata"]["annotations"]},
            "spec": template["spec"]}


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("Job", R.JOB, job, gpus=2, strategy="deactivate-workload"),
    Kind("elastic Job", R.JOB, lambda n, ns, q: job(n, ns, q, elastic=True), gpus=2, strategy="scale-worker-groups"),
    Kind("RayCluster", R.RAY_CLUSTER, ray_cluster, gpus=2, strategy="deactivate-workload", finishes=False),
    Kind("RayJob", R.RAY_JOB, ray_job, gpus=2, strategy="deactivate-workload", finishes=False),
    Kind("PyTorchJob", R.PYTORCH_JOB, pytorch_job, gpus=2, strategy="deactivate-workload"),
    Kind("Deployment", R.DEPLOYMENT, deployment, gpus=1, strategy="scale-to-zero", finishes=False, keda_scaled=True),
    Kind("StatefulSet", R.STATEFUL_SET, stateful_set, gpus=1, strategy="scale-to-zero", finishes=False,
         keda_scaled=True),
    Kind("Pod", R.POD, plain_pod, gpus=1, strategy="none", gpus_after_release=1),
)}


@dataclass
class Submitted:
    kind: Kind
    namespace: str
    name: str
    uid: str


class RealWorkloads:
    """Submits workloads as the tenant would (admin credentials: the tenant is not under test)."""

    def __init__(self, cluster: RealCluster, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.gateway = KubernetesGateway(copy.copy(cluster.admin.configuration), component="gpuaas-tests")
        self.custom = client.CustomObjectsApi(cluster.admin)
        self.core = client.CoreV1Api(cluster.admin)

    # -- objects ----------------------------------------------------------------------------------

    def submit(self, kind: Kind, name: str) -> Submitted:
        created = self.gateway.create(kind.resource, kind.build(name, self.namespace, self.namespace), self.namespace)
        return Submitted(kind, self.namespace, name, created["metadata"]["uid"])

    def get(self, resource: R.Resource, name: str) -> JSON | None:
        return self.gateway.get(resource, name, self.namespace)

    def object(self, submitted: Submitted) -> JSON | None:
        return self.get(submitted.kind.resource, submitted.name)

    def delete(self, submitted: Submitted) -> None:
        self.gateway.delete(submitted.kind.resource, submitted.name, self.namespace)

    def pods(self, submitted: Submitted) -> list[client.V1Pod]:
        """The pods of the workload (owned by it, by its Jobs or ReplicaSets, or the pod itself)."""
        owners = {submitted.uid}
        for resource in (R.RAY_CLUSTER, R.JOB, R.REPLICA_SET):
            for item in self.gateway.list(resource, self.namespace):
                if any(ref.get("uid") in owners for ref in item["metadata"].get("ownerReferences") or []):
                    owners.add(item["metadata"]["uid"])
        return [p for p in self.core.list_namespaced_pod(self.namespace).items
                if p.metadata.uid == submitted.uid
                or any(ref.uid in owners for ref in p.metadata.owner_references or [])]

    def live_pods(self, submitted: Submitted) -> list[client.V1Pod]:
        return [p for p in self.pods(submitted) if p.metadata.deletion_timestamp is None
                and p.status.phase in ("Pending", "Running")]

    def finish_pods(self, submitted: Submitted) -> int:
        """The running pods' programs exit 0: KWOK completes each pod (Job and PyTorchJob pods)."""
        running = [p for p in self.live_pods(submitted) if p.status.phase == "Running"]
        for pod in running:
            self.core.patch_namespaced_pod(pod.metadata.name, self.namespace,
                                           {"metadata": {"annotations": dict(FINISH_NOW)}})
        return len(running)

    # -- Kueue ------------------------------------------------------------------------------------

    def workloads(self, submitted: Submitted) -> list[JSON]:
        """The Workloads Kueue made for it: owned by the object or by one of its pods."""
        owners = {submitted.uid} | {p.metadata.uid for p in self.pods(submitted)}
        items = self.custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", self.namespace,
                                                          "workloads")["items"]
        return [w for w in items
                if any(ref.get("uid") in owners for ref in w["metadata"].get("ownerReferences") or [])
                or (w["metadata"].get("annotations") or {}).get("kueue.x-k8s.io/job-owner-name") == submitted.name]

    def get_workload(self, name: str) -> JSON | None:
        return self.get(R.WORKLOAD, name)

    def workload(self, submitted: Submitted) -> JSON | None:
        """Its one current Workload. An elastic job's scale-up is a new Workload slice that replaces the
        old one (`kueue.x-k8s.io/workload-slice-replacement-for`; the old one ends Finished with
        reason WorkloadSliceReplaced): the replaced slices are not current."""
        found = [w for w in self.workloads(submitted) if condition_reason(w, "Finished") != SLICE_REPLACED]
        return found[0] if len(found) == 1 else None

    def admitted(self, submitted: Submitted, timeout_s: float = 90) -> JSON:
        return eventually(lambda: (w := self.workload(submitted)) and condition(w, "Admitted") == "True" and w,
                          timeout_s=timeout_s, what=f"one Workload of {submitted.kind.name} {submitted.name} admitted")

    def reserved_gpus(self, cluster_queue: str) -> float:
        """GPUs reserved in the ClusterQueue's status (`flavorsReservation`), summed over flavors."""
        return queue_gpus(self.custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues",
                                                                cluster_queue))

    def metric_gpus(self, cluster_queue: str) -> float | None:
        """`kueue_cluster_queue_resource_reservation` for GPUs, as Prometheus scraped it from Kueue."""
        promql = f'sum(kueue_cluster_queue_resource_reservation{{cluster_queue="{cluster_queue}",resource="{GPU}"}})'
        url = f"{self.cluster.endpoint('prometheus')}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=5) as response:
            result = json.load(response)["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    def wait_quota(self, cluster_queue: str, gpus: float, what: str, timeout_s: float = 90) -> None:
        """The ClusterQueue status and then Kueue's metric (scraped every 5 s) both say `gpus` are reserved."""
        for source, read in (("ClusterQueue status.flavorsReservation", self.reserved_gpus),
                             ("kueue_cluster_queue_resource_reservation", self.metric_gpus)):
            deadline = time.monotonic() + timeout_s
            while (seen := read(cluster_queue)) != gpus:
                if time.monotonic() > deadline:
                    raise AssertionError(f"expected {gpus:g} GPUs reserved for {cluster_queue} in {source} "
                                         f"({what}) within {timeout_s:g}s; found {seen}")
                time.sleep(1)

def condition(obj: JSON, kind: str) -> str | None:
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item["type"] == kind:
            return item["status"]
    return None


def condition_reason(obj: JSON, kind: str) -> str | None:
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item["type"] == kind:
            return item.get("reason")
    return None


def queue_gpus(queue: JSON) -> float:
    """GPUs a ClusterQueue's status says are reserved (`flavorsReservation`, all flavors)."""
    total = 0.0
    for flavor in (queue.get("status") or {}).get("flavorsReservation") or []:
        for resource in flavor.get("resources") or []:
            if resource["name"] == GPU:
                total += float(resource.get("total", "0"))
    return total
