"""Real Kueue admits a real batch Job from the example tenants' LocalQueue onto a KWOK GPU node.

The example ResourceFlavor selects nodes by `nvidia.com/gpu.product` and tolerates the GPU taint;
Kueue injects both into the Job's pods at admission, the real scheduler binds them to a KWOK GPU
node, KWOK runs them to completion, the Job controller completes the Job and Kueue marks the
Workload Finished. Nothing here is emulated except the kubelet (KWOK).
"""

from __future__ import annotations

from pathlib import Path

from kubernetes import client

from tests.support.real_cluster import RealCluster, eventually

TENANTS = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "tenants"


def _condition(obj: dict, kind: str) -> str | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition["type"] == kind:
            return condition["status"]
    return None


def test_real_kueue_admits_a_job_onto_a_gpu_node_and_it_finishes(real_cluster: RealCluster) -> None:
    real_cluster.kubectl("apply", "--server-side", "--field-manager=gpuaas-tests", "-k", str(TENANTS))
    batch = client.BatchV1Api(real_cluster.admin)
    custom = client.CustomObjectsApi(real_cluster.admin)
    core = client.CoreV1Api(real_cluster.admin)
    namespace = "team-a"
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"generateName": "train-", "namespace": namespace,
                     "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
        "spec": {"parallelism": 2, "completions": 2, "suspend": True, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "registry.invalid/train:1", "resources": {
                "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                "limits": {"nvidia.com/gpu": "1"}}}]}}},
    }
    created = batch.create_namespaced_job(namespace, job)
    name, uid = created.metadata.name, created.metadata.uid

    def workload() -> dict | None:
        items = custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "workloads",
                                                     label_selector=f"kueue.x-k8s.io/job-uid={uid}")["items"]
        return items[0] if items else None

    admitted = eventually(lambda: (w := workload()) and _condition(w, "Admitted") == "True" and w,
                          timeout_s=60, what=f"the Workload of Job {name} admitted")
    assert admitted["status"]["admission"]["clusterQueue"] == "team-a"
    flavors = admitted["status"]["admission"]["podSetAssignments"][0]["flavors"]
    assert flavors["nvidia.com/gpu"] == "gpu-a100"

    pods = eventually(lambda: [p for p in core.list_namespaced_pod(namespace, label_selector=f"job-name={name}").items
                               if p.spec.node_name] or None, timeout_s=60, what="the Job's pods bound to nodes")
    for pod in pods:
        assert pod.spec.node_name.startswith("gpu-node-"), f"{pod.metadata.name} ran on {pod.spec.node_name}"
        assert pod.spec.node_selector.get("nvidia.com/gpu.product") == "NVIDIA-A100-SXM4-80GB"

    eventually(lambda: (j := batch.read_namespaced_job(name, namespace)).status.succeeded == 2 and j,
               timeout_s=90, what=f"Job {name} to complete")
    finished = eventually(lambda: (w := workload()) and _condition(w, "Finished") == "True" and w,
                          timeout_s=60, what=f"the Workload of Job {name} Finished")
    reason = next(c["reason"] for c in finished["status"]["conditions"] if c["type"] == "Finished")
    assert reason == "Succeeded"
