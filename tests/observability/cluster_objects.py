"""Workloads, their owners and pods, created in the local API server the way Kueue and the job
controllers would leave them (owner references with real uids), for the idle reaction's tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from steps.gateways import resources as R

JSON = dict[str, Any]


def ref(obj: JSON, controller: bool = True) -> JSON:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": controller, "blockOwnerDeletion": True}


def ts(minutes_ago: float) -> str:
    return (datetime.now(UTC) - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def admitted_status(cluster_queue: str, gpus: int, count: int, admitted_minutes_ago: float) -> JSON:
    at = ts(admitted_minutes_ago)
    return {
        "admission": {"clusterQueue": cluster_queue, "podSetAssignments": [
            {"name": "workers", "flavors": {"nvidia.com/gpu": "a100"}, "count": count,
             "resourceUsage": {"nvidia.com/gpu": str(gpus * count)}}]},
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
             "message": f"Quota reserved in ClusterQueue {cluster_queue}", "lastTransitionTime": at},
            {"type": "Admitted", "status": "True", "reason": "Admitted",
             "message": "The workload is admitted", "lastTransitionTime": at},
        ],
    }


@dataclass
class Cluster:
    """Thin builder over ApiServer.store (in-process, keeps status)."""

    store: Any
    created: list[JSON] = field(default_factory=list)

    def create(self, resource: R.Resource, body: JSON) -> JSON:
        body = {"apiVersion": resource.api_version, "kind": resource.kind, **body}
        obj = self.store.create(resource, body, body["metadata"].get("namespace"))
        self.created.append(obj)
        return obj

    def namespace(self, name: str, tenant: str) -> JSON:
        return self.create(R.NAMESPACE, {"metadata": {"name": name, "labels": {"gpuaas.io/tenant": tenant}}})

    def pod(self, ns: str, name: str, owner: JSON | None, gpus: int = 1, labels: dict[str, str] | None = None,
            phase: str = "Running") -> JSON:
        meta: JSON = {"name": name, "namespace": ns, "labels": labels or {}}
        if owner is not None:
            meta["ownerReferences"] = [ref(owner)]
        return self.create(R.POD, {"metadata": meta, "spec": {"containers": [
            {"name": "main", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": phase}})

    def workload(self, ns: str, name: str, owner: JSON | None, *, cluster_queue: str = "tenant-a", gpus: int = 1,
                 count: int = 1, admitted_minutes_ago: float | None = 120, annotations: dict[str, str] | None = None,
                 controller: bool = True, active: bool = True) -> JSON:
        meta: JSON = {"name": name, "namespace": ns, "annotations": annotations or {}}
        if owner is not None:
            meta["ownerReferences"] = [ref(owner, controller)]
        body: JSON = {"metadata": meta, "spec": {"queueName": "default", "active": active, "podSets": [
            {"name": "workers", "count": count, "template": {"spec": {"containers": [
                {"name": "main", "image": "trainer", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}}]}}
        if admitted_minutes_ago is not None:
            body["status"] = admitted_status(cluster_queue, gpus, count, admitted_minutes_ago)
        return self.create(R.WORKLOAD, body)

    # -- whole kinds ------------------------------------------------------------------------------
    def ray_cluster(self, ns: str, name: str, workers: int, gpus: int = 1, **wl: Any) -> tuple[JSON, JSON, list[JSON]]:
        ray = self.create(R.RAY_CLUSTER, {"metadata": {"name": name, "namespace": ns,
                                                       "labels": {"kueue.x-k8s.io/queue-name": "default"}},
                                          "spec": {"workerGroupSpecs": [{"groupName": "gpu", "replicas": workers,
                                                                         "minReplicas": 0, "maxReplicas": workers}]}})
        workload = self.workload(ns, f"raycluster-{name}-1a2b3", ray, gpus=gpus, count=workers, **wl)
        head = self.pod(ns, f"{name}-head-abcde", ray, gpus=0, labels={"ray.io/cluster": name, "ray.io/node-type": "head"})
        pods = [self.pod(ns, f"{name}-worker-gpu-{i}", ray, gpus=gpus, labels={"ray.io/cluster": name}) for i in range(workers)]
        return ray, workload, [head, *pods]

    def deployment_pod_workload(self, ns: str, name: str, **wl: Any) -> tuple[JSON, JSON, JSON]:
        """A Deployment under Kueue's pod integration: one Workload per Pod, owned by the Pod."""
        deploy = self.create(R.DEPLOYMENT, {"metadata": {"name": name, "namespace": ns}, "spec": {"replicas": 1}})
        rs = self.create(R.REPLICA_SET, {"metadata": {"name": f"{name}-7d9f8", "namespace": ns,
                                                      "ownerReferences": [ref(deploy)]}, "spec": {"replicas": 1}})
        pod = self.pod(ns, f"{name}-7d9f8-x2x4q", rs)
        workload = self.workload(ns, f"pod-{pod['metadata']['name']}-9f3e1", pod, **wl)
        return deploy, workload, pod

    def job(self, ns: str, name: str, **wl: Any) -> tuple[JSON, JSON, JSON]:
        job = self.create(R.JOB, {"metadata": {"name": name, "namespace": ns}, "spec": {"parallelism": 1}})
        workload = self.workload(ns, f"job-{name}-5c6d7", job, **wl)
        pod = self.pod(ns, f"{name}-lq2rn", job)
        return job, workload, pod

    def stateful_set(self, ns: str, name: str, **wl: Any) -> tuple[JSON, JSON, JSON]:
        """StatefulSet (notebooks): non-controller ownerRef plus Kueue's job-owner annotations."""
        sts = self.create(R.STATEFUL_SET, {"metadata": {"name": name, "namespace": ns}, "spec": {"replicas": 1}})
        workload = self.workload(ns, f"statefulset-{name}-0a1b2", sts, controller=False, annotations={
            "kueue.x-k8s.io/job-owner-gvk": "apps/v1, Kind=StatefulSet", "kueue.x-k8s.io/job-owner-name": name}, **wl)
        pod = self.pod(ns, f"{name}-0", sts)
        return sts, workload, pod
