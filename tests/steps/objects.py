"""Kubernetes objects for the steps tests: one Workload and its owner chain per kind, either API version.

    scene = Scene.of("RayCluster", version="v1beta1", status="admitted", gpus_per_pod=2, workers=3)
    scene.objects()            # [(Resource, dict)] to seed the API server's store
    scene.workload             # the Workload dict

Timestamps are fixed so plans are reproducible: created T0, quota reserved / admitted T0+60s,
finished T0+2h.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from steps.gateways import resources as R

JSON = dict[str, Any]
T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
NS = "team-a"
CQ = "team-a"
LQ = "team-a-queue"


def ts(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def pod_template(gpus: int, init_gpus: int = 0) -> JSON:
    spec: JSON = {"containers": [{"name": "main", "image": "trainer",
                                  "resources": {"requests": {"nvidia.com/gpu": str(gpus)},
                                                "limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if init_gpus:
        spec["initContainers"] = [{"name": "warm", "image": "x",
                                   "resources": {"limits": {"nvidia.com/gpu": str(init_gpus)}}}]
    return {"spec": spec}


def conditions(status: str) -> list[JSON]:
    """Conditions for a Kueue status: pending | quota-reserved | admitted | finished | finished-unadmitted | evicted."""
    reserved = {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                "message": f"Quota reserved in ClusterQueue {CQ}", "lastTransitionTime": ts(60)}
    admitted = {"type": "Admitted", "status": "True", "reason": "Admitted",
                "message": "The workload is admitted", "lastTransitionTime": ts(60)}
    finished = {"type": "Finished", "status": "True", "reason": "Succeeded", "message": "Job finished successfully",
                "lastTransitionTime": ts(7260)}
    if status == "pending":
        return [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                 "message": "couldn't assign flavors", "lastTransitionTime": ts(1)}]
    if status == "quota-reserved":
        return [reserved, {"type": "Admitted", "status": "False", "reason": "UnsatisfiedAdmissionChecks",
                           "message": "waiting", "lastTransitionTime": ts(60)}]
    if status == "admitted":
        return [reserved, admitted]
    if status == "finished":
        return [reserved, admitted, finished]
    if status == "finished-unadmitted":
        return [finished]
    if status == "evicted":
        return [{**reserved, "status": "False", "reason": "Pending"}, {**admitted, "status": "False",
                                                                       "reason": "NoReservation"},
                {"type": "Evicted", "status": "True", "reason": "Deactivated", "message": "deactivated",
                 "lastTransitionTime": ts(300)}]
    raise ValueError(status)


@dataclass
class Scene:
    kind: str
    version: str = "v1beta2"
    status: str = "admitted"
    gpus_per_pod: int = 1
    workers: int = 2
    elastic: bool = False
    exempt_on: str | None = None
    knative: bool = False
    """Deployment only: controlled by a Knative Revision (KServe Serverless), as knative/serving makes it."""
    name: str = "train"
    owners: list[tuple[Any, JSON]] = field(default_factory=list)
    workload: JSON = field(default_factory=dict)

    @classmethod
    def of(cls, kind: str, **kwargs: Any) -> Scene:
        scene = cls(kind, **kwargs)
        scene.build()
        return scene

    def _meta(self, name: str, uid: str, owner: tuple[Any, JSON] | None = None, controller: bool = True) -> JSON:
        meta: JSON = {"name": name, "namespace": NS, "uid": uid, "creationTimestamp": ts(0)}
        if owner is not None:
            resource, obj = owner
            meta["ownerReferences"] = [{"apiVersion": resource.api_version, "kind": resource.kind,
                                        "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"],
                                        "controller": controller}]
        return meta

    def _add(self, resource: Any, obj: JSON) -> tuple[Any, JSON]:
        obj = {"apiVersion": resource.api_version, "kind": resource.kind, **obj}
        self.owners.append((resource, obj))
        return resource, obj

    def build(self) -> None:
        kind, n, tpl = self.kind, self.name, pod_template(self.gpus_per_pod)
        direct: tuple[Any, JSON] | None = None
        via_annotations = False
        pod_sets = [{"name": "main", "count": self.workers, "template": tpl}]
        if kind == "RayCluster":
            direct = self._add(R.RAY_CLUSTER, {"metadata": self._meta(n, "uid-ray"), "spec": {
                "headGroupSpec": {"template": pod_template(0)},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": self.workers, "minReplicas": 1,
                                      "maxReplicas": 8, "template": tpl}]}})
            pod_sets = [{"name": "head", "count": 1, "template": pod_template(0)},
                        {"name": "gpu", "count": self.workers, "template": tpl}]
        elif kind == "RayJob":
            direct = self._add(R.RAY_JOB, {"metadata": self._meta(n, "uid-rayjob"), "spec": {
                "rayClusterSpec": {"workerGroupSpecs": [{"groupName": "gpu", "replicas": self.workers,
                                                         "template": tpl}]}},
                "status": {"rayClusterName": f"{n}-raycluster"}})
            cluster = {"metadata": self._meta(f"{n}-raycluster", "uid-rayjob-cluster", direct),
                       "spec": {"workerGroupSpecs": [{"groupName": "gpu", "replicas": self.workers, "template": tpl}]}}
            self.owners.append((R.RAY_CLUSTER, {"apiVersion": R.RAY_CLUSTER.api_version, "kind": "RayCluster",
                                                **cluster}))
            # the cluster is not in the Workload's chain (RayJob is the owner), it is a leftover candidate
        elif kind == "PyTorchJob":
            direct = self._add(R.PYTORCH_JOB, {"metadata": self._meta(n, "uid-ptj"), "spec": {
                "pytorchReplicaSpecs": {"Worker": {"replicas": self.workers, "template": tpl}}}})
        elif kind == "Job":
            direct = self._add(R.JOB, {"metadata": self._meta(n, "uid-job"), "spec": {
                "parallelism": self.workers, "completions": self.workers, "template": tpl}})
        elif kind == "StatefulSet":
            direct = self._add(R.STATEFUL_SET, {"metadata": self._meta(n, "uid-sts"),
                                                "spec": {"replicas": self.workers, "template": tpl}})
            via_annotations = True
        elif kind == "LeaderWorkerSet":
            direct = self._add(R.LEADER_WORKER_SET, {"metadata": self._meta(n, "uid-lws"), "spec": {
                "replicas": self.workers, "leaderWorkerTemplate": {"size": 1, "workerTemplate": tpl}}})
            via_annotations = True
        elif kind == "Notebook":
            notebook = self._add(R.NOTEBOOK, {"metadata": self._meta(n, "uid-nb"), "spec": {"template": tpl}})
            direct = self._add(R.STATEFUL_SET, {"metadata": self._meta(n, "uid-nb-sts", notebook),
                                                "spec": {"replicas": 1, "template": tpl}})
            via_annotations = True
        elif kind in ("Deployment", "InferenceService"):
            parent = None
            if kind == "InferenceService":
                parent = self._add(R.INFERENCE_SERVICE, {"metadata": {
                    **self._meta(n, "uid-isvc"), "annotations": {"serving.kserve.io/deploymentMode": "RawDeployment",
                                                                 "serving.kserve.io/autoscalerClass": "keda"}},
                    "spec": {"predictor": {}}})
            deployment = self._add(R.DEPLOYMENT, {"metadata": self._meta(f"{n}-predictor" if parent else n, "uid-dep",
                                                                         parent),
                                                  "spec": {"replicas": self.workers, "template": tpl}})
            if self.knative:  # knative/serving MakeDeployment: a controller reference to the Revision (never read)
                deployment[1]["metadata"]["ownerReferences"] = [{
                    "apiVersion": "serving.knative.dev/v1", "kind": "Revision", "name": f"{n}-predictor-00001",
                    "uid": "uid-revision", "controller": True, "blockOwnerDeletion": True}]
                deployment[1]["metadata"]["labels"] = {"serving.knative.dev/revision": f"{n}-predictor-00001"}
            rs = self._add(R.REPLICA_SET, {"metadata": self._meta(f"{deployment[1]['metadata']['name']}-5d9f",
                                                                  "uid-rs", deployment),
                                           "spec": {"replicas": self.workers}})
            direct = self._add(R.POD, {"metadata": self._meta(f"{rs[1]['metadata']['name']}-abcde", "uid-pod", rs),
                                       "spec": tpl["spec"]})
            pod_sets = [{"name": "main", "count": 1, "template": tpl}]
        elif kind == "Pod":
            direct = self._add(R.POD, {"metadata": self._meta(n, "uid-pod"), "spec": tpl["spec"]})
            pod_sets = [{"name": "main", "count": 1, "template": tpl}]
        elif kind != "none":
            raise ValueError(kind)
        annotations: JSON = {}
        if self.elastic:
            annotations["kueue.x-k8s.io/elastic-job"] = "true"
        meta = self._meta(f"{kind.lower()}-{n}-1a2b3", "uid-wl", direct if direct and not via_annotations else None)
        if via_annotations and direct:
            annotations["kueue.x-k8s.io/job-owner-gvk"] = f"{direct[0].api_version}, Kind={direct[0].kind}"
            annotations["kueue.x-k8s.io/job-owner-name"] = direct[1]["metadata"]["name"]
            meta["ownerReferences"] = [{"apiVersion": direct[0].api_version, "kind": direct[0].kind,
                                        "name": direct[1]["metadata"]["name"], "uid": direct[1]["metadata"]["uid"]}]
        if annotations:
            meta["annotations"] = annotations
        status: JSON = {"conditions": conditions(self.status)}
        if self.status in ("quota-reserved", "admitted", "finished"):
            status["admission"] = {"clusterQueue": CQ, "podSetAssignments": [
                {"name": p["name"], "count": p["count"], "flavors": {"nvidia.com/gpu": "a100"}} for p in pod_sets]}
        spec: JSON = {"queueName": LQ, "podSets": pod_sets}
        if self.status == "evicted":
            spec["active"] = False
        self.workload = {"apiVersion": f"kueue.x-k8s.io/{self.version}", "kind": "Workload", "metadata": meta,
                         "spec": spec, "status": status}
        if self.exempt_on == "workload":
            meta.setdefault("annotations", {})["gpuaas.io/idle-policy"] = "exempt"
        elif self.exempt_on == "owner" and self.owners:
            self.owners[0][1]["metadata"].setdefault("annotations", {})["gpuaas.io/idle-policy"] = "exempt"

    def chain(self) -> list[JSON]:
        """The Workload's owner chain, nearest first (what resolve_owners reads from a cluster)."""
        objects = [o for _, o in self.owners]
        if self.kind == "RayJob":
            objects = objects[:1]  # the RayJob's RayCluster is not an owner of the Workload
        return list(reversed(objects))

    @property
    def workload_resource(self) -> Any:
        return R.WORKLOAD_V1BETA1 if self.version == "v1beta1" else R.WORKLOAD

    def objects(self) -> list[tuple[Any, JSON]]:
        cq_spec: JSON = {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
            {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}]}]}
        cq_spec["cohort" if self.version == "v1beta1" else "cohortName"] = "gpuaas"
        cq_resource = R.CLUSTER_QUEUE_V1BETA1 if self.version == "v1beta1" else R.CLUSTER_QUEUE
        return [
            (cq_resource, {"apiVersion": cq_resource.api_version, "kind": "ClusterQueue",
                           "metadata": {"name": CQ}, "spec": cq_spec}),
            (R.LOCAL_QUEUE, {"apiVersion": R.LOCAL_QUEUE.api_version, "kind": "LocalQueue",
                             "metadata": {"name": LQ, "namespace": NS}, "spec": {"clusterQueue": CQ}}),
            *[(r, copy.deepcopy(o)) for r, o in self.owners],
            (self.workload_resource, copy.deepcopy(self.workload)),
        ]

    def seed(self, store: Any) -> None:
        for resource, obj in self.objects():
            store.create(resource, obj, obj["metadata"].get("namespace"))


KINDS = ("RayCluster", "RayJob", "PyTorchJob", "Job", "StatefulSet", "Notebook", "Deployment", "InferenceService",
         "Pod", "none")
VERSIONS = ("v1beta2", "v1beta1")
