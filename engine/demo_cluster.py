"""The demo's cluster: GPU nodes, one ResourceFlavor, three tenants sharing a cohort, and their jobs.

Three tenants (ClusterQueues in cohort `gpu-pool`, 4 GPUs nominal each) on 12 A100s:

| tenant    | namespace     | workloads                                                  |
|-----------|---------------|------------------------------------------------------------|
| research  | team-research | notebook (Kubeflow Notebook -> StatefulSet), PyTorchJob    |
| vision    | team-vision   | RayCluster (2 GPU workers), batch Job                      |
| serving   | team-serving  | KServe InferenceService, vLLM StatefulSet (KEDA-scalable)  |

Every object is what the real controllers would see: jobs carry `kueue.x-k8s.io/queue-name` and
the Kueue emulation's job integration creates their Workloads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FLAVOR = "a100"
COHORT = "gpu-pool"
GPU = "nvidia.com/gpu"
GPU_PRODUCT = "NVIDIA-A100-SXM4-80GB"
NODES = ("gpu-node-1", "gpu-node-2", "gpu-node-3")
GPUS_PER_NODE = 4
NOMINAL_GPUS = 4
POLICY_NAMESPACE = "gpuaas"


@dataclass(frozen=True)
class Tenant:
    name: str  # the ClusterQueue
    namespace: str
    queue: str  # the LocalQueue in the namespace


TENANTS = (Tenant("research", "team-research", "research"),
           Tenant("vision", "team-vision", "vision"),
           Tenant("serving", "team-serving", "serving"))
TENANT_BY_NAMESPACE = {t.namespace: t for t in TENANTS}


def _gpu_container(name: str, gpus: int, image: str = "registry.example.com/ml/runtime:2.4") -> dict[str, Any]:
    return {"name": name, "image": image, "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}


def platform_objects(policy_yaml: str) -> list[dict[str, Any]]:
    """Nodes, flavor, queues, namespaces and the gpuaas policy ConfigMap."""
    objects: list[dict[str, Any]] = []
    for namespace in [POLICY_NAMESPACE] + [t.namespace for t in TENANTS]:
        objects.append({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": namespace, "labels": {"kubernetes.io/metadata.name": namespace}}})
    for node in NODES:
        objects.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "labels": {"nvidia.com/gpu.product": GPU_PRODUCT, "nvidia.com/gpu.present": "true",
                                                  "nvidia.com/gpu.count": str(GPUS_PER_NODE)}},
            "status": {"capacity": {GPU: str(GPUS_PER_NODE)}, "allocatable": {GPU: str(GPUS_PER_NODE)},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
        })
    objects.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                    "metadata": {"name": FLAVOR}, "spec": {"nodeLabels": {"nvidia.com/gpu.product": GPU_PRODUCT}}})
    for tenant in TENANTS:
        objects.append({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": tenant.name, "labels": {"gpuaas.io/tenant": tenant.name}},
            "spec": {"cohortName": COHORT, "queueingStrategy": "BestEffortFIFO",
                     "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": tenant.namespace}},
                     "resourceGroups": [{"coveredResources": [GPU], "flavors": [
                         {"name": FLAVOR, "resources": [{"name": GPU, "nominalQuota": NOMINAL_GPUS}]}]}]},
        })
        objects.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                        "metadata": {"name": tenant.queue, "namespace": tenant.namespace},
                        "spec": {"clusterQueue": tenant.name}})
    objects.append({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "gpuaas-policy", "namespace": POLICY_NAMESPACE},
                    "data": {"policy.yaml": policy_yaml}})
    return objects


def queued(tenant: Tenant, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {"kueue.x-k8s.io/queue-name": tenant.queue, **(extra or {})}


def notebook(tenant: Tenant, name: str, gpus: int) -> list[dict[str, Any]]:
    """A Kubeflow Notebook and the StatefulSet its controller creates (Kueue queues the StatefulSet)."""
    labels = {"notebook-name": name}
    return [
        {"apiVersion": "kubeflow.org/v1", "kind": "Notebook",
         "metadata": {"name": name, "namespace": tenant.namespace, "labels": {"app": name}},
         "spec": {"template": {"spec": {"containers": [_gpu_container(name, gpus, "jupyter/pytorch:2024")]}}}},
        {"apiVersion": "apps/v1", "kind": "StatefulSet",
         "metadata": {"name": name, "namespace": tenant.namespace, "labels": queued(tenant, labels)},
         "spec": {"replicas": 1, "serviceName": name, "selector": {"matchLabels": {"statefulset": name}},
                  "template": {"metadata": {"labels": {"statefulset": name, **labels}},
                               "spec": {"containers": [_gpu_container(name, gpus, "jupyter/pytorch:2024")]}}}},
    ]


def model_server(tenant: Tenant, name: str, gpus: int) -> list[dict[str, Any]]:
    """A model server run as a plain StatefulSet (vLLM style): KEDA can scale it to zero."""
    labels = {"app": name}
    return [{"apiVersion": "apps/v1", "kind": "StatefulSet",
             "metadata": {"name": name, "namespace": tenant.namespace, "labels": queued(tenant, labels)},
             "spec": {"replicas": 1, "serviceName": name, "selector": {"matchLabels": labels},
                      "template": {"metadata": {"labels": labels},
                                   "spec": {"containers": [_gpu_container("vllm", gpus, "vllm/vllm-openai:v0.6")]}}}}]


def predictor_deployment(isvc: dict[str, Any], gpus: int) -> dict[str, Any]:
    """The Deployment KServe (raw deployment mode) creates for an InferenceService's predictor."""
    name = f"{isvc['metadata']['name']}-predictor"
    labels = {"serving.kserve.io/inferenceservice": isvc["metadata"]["name"], "app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": isvc["metadata"]["namespace"], "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [_gpu_container("kserve-container", gpus,
                                                                         "kserve/huggingfaceserver:v0.14")]}}}}


def owned_by(child: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any]:
    """`child` with a controller ownerReference to the live `owner` (as the owner's controller sets it)."""
    reference = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
                 "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    return {**child, "metadata": {**child["metadata"], "ownerReferences": [reference]}}


def ray_cluster(tenant: Tenant, name: str, workers: int, gpus_per_worker: int) -> list[dict[str, Any]]:
    return [{
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": name, "namespace": tenant.namespace, "labels": queued(tenant)},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
                     {"name": "ray-head", "image": "rayproject/ray:2.40.0"}]}}},
                 "workerGroupSpecs": [{"groupName": "gpu-workers", "replicas": workers, "minReplicas": 0,
                                       "maxReplicas": workers, "rayStartParams": {},
                                       "template": {"spec": {"containers": [
                                           _gpu_container("ray-worker", gpus_per_worker, "rayproject/ray:2.40.0")]}}}]},
    }]


def pytorch_job(tenant: Tenant, name: str, workers: int, gpus_per_pod: int) -> list[dict[str, Any]]:
    def replica(count: int) -> dict[str, Any]:
        return {"replicas": count, "restartPolicy": "OnFailure",
                "template": {"spec": {"containers": [_gpu_container("pytorch", gpus_per_pod)]}}}
    return [{
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": tenant.namespace, "labels": queued(tenant)},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)},
                 "runPolicy": {"suspend": True}},
    }]


def batch_job(tenant: Tenant, name: str, gpus: int) -> list[dict[str, Any]]:
    return [{
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": tenant.namespace, "labels": queued(tenant)},
        "spec": {"parallelism": 1, "completions": 1, "suspend": True,
                 "template": {"spec": {"restartPolicy": "Never", "containers": [_gpu_container("eval", gpus)]}}},
    }]


def inference_service(tenant: Tenant, name: str, gpus: int) -> list[dict[str, Any]]:
    """A KServe raw-deployment InferenceService scaled by KEDA (the facts: KServe needs KEDA for zero)."""
    return [{
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": name, "namespace": tenant.namespace, "labels": queued(tenant),
                     "annotations": {"serving.kserve.io/deploymentMode": "RawDeployment",
                                     "serving.kserve.io/autoscalerClass": "keda"}},
        "spec": {"predictor": {"minReplicas": 1, "maxReplicas": 1, "model": {
            "modelFormat": {"name": "huggingface"}, "name": "kserve-container",
            "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}}},
    }]


def finished_status(kind: str, succeeded: bool = True) -> dict[str, Any]:
    """The status the job's own controller writes when it completes."""
    if kind == "Job":
        kind_type = "Complete" if succeeded else "Failed"
        return {"conditions": [{"type": kind_type, "status": "True", "reason": "Completed" if succeeded else
                                "BackoffLimitExceeded"}], "succeeded": 1 if succeeded else 0}
    if kind == "PyTorchJob":
        return {"conditions": [{"type": "Succeeded" if succeeded else "Failed", "status": "True",
                                "reason": "PyTorchJobSucceeded" if succeeded else "PyTorchJobFailed",
                                "message": "PyTorchJob train-llm is successfully completed."}]}
    raise ValueError(f"kind {kind!r}: the demo finishes only Job and PyTorchJob")
