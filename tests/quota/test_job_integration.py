"""The job-integration shim builds the Workload Kueue would build, kind by kind (pure)."""

from __future__ import annotations

import pytest

from engine.kueue.integration import owner_reference, suspend_patch, workload_for, workload_name
from tests.quota import kueue_objects as K
from tests.support.kueue_schema import kueue_schema_errors


def with_uid(obj: dict, uid: str = "0b5e-uid") -> dict:
    obj["metadata"]["uid"] = uid
    return obj


def pytorch_job() -> dict:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "pt", "namespace": "ns", "labels": {K.QUEUE_LABEL: "gpu"}},
            "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {
                "Worker": {"replicas": 3, "template": K.pod_template(1)},
                "Master": {"replicas": 1, "template": K.pod_template(1)}}}}


def ray_job() -> dict:
    cluster = K.ray_cluster("ns", "rj", workers=2, gpus_per_worker=1, elastic=False)
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": "rj", "namespace": "ns", "labels": {K.QUEUE_LABEL: "gpu"}},
            "spec": {"suspend": True, "entrypoint": "python train.py", "rayClusterSpec": cluster["spec"]}}


def pod() -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-7d9-abcde", "namespace": "ns", "labels": {K.QUEUE_LABEL: "gpu"}},
            "spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
                     "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}


def inference_service() -> dict:
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "llm", "namespace": "ns", "labels": {K.QUEUE_LABEL: "gpu"}},
            "spec": {"predictor": {"minReplicas": 2, "model": {"modelFormat": {"name": "vllm"}, "name": "kserve-container",
                                                               "resources": {"requests": {"nvidia.com/gpu": "1"}}}}}}


KINDS = [
    (K.job("ns", "train", gpus=2, parallelism=4), "job-train-", "batch", [("main", 4)], True),
    (K.ray_cluster("ns", "rc", workers=3, gpus_per_worker=1), "raycluster-rc-", "ray.io",
     [("head", 1), ("gpu-workers", 3)], True),
    (ray_job(), "rayjob-rj-", "ray.io", [("head", 1), ("gpu-workers", 2)], True),
    (pytorch_job(), "pytorchjob-pt-", "kubeflow.org", [("master", 1), ("worker", 3)], True),
    (K.stateful_set("ns", "nb", gpus=1), "statefulset-nb-", "apps", [("main", 1)], False),
    (pod(), "pod-web-7d9-abcde-", "", [("main", 1)], True),
    (inference_service(), "inferenceservice-llm-", "serving.kserve.io", [("predictor", 2)], True),
]


@pytest.mark.parametrize(("owner", "prefix", "group", "pod_sets", "controller"), KINDS,
                         ids=[k[0]["kind"] for k in KINDS])
def test_workload_for_each_kind(owner: dict, prefix: str, group: str, pod_sets: list, controller: bool) -> None:
    owner = with_uid(owner)
    workload = workload_for(owner)
    meta = workload["metadata"]
    assert meta["name"] == workload_name(owner["kind"], group, owner["metadata"]["name"], "0b5e-uid")
    assert meta["name"].startswith(prefix) and len(meta["name"]) == len(prefix) + 5
    assert [(p["name"], p["count"]) for p in workload["spec"]["podSets"]] == pod_sets
    assert workload["spec"]["queueName"] == "gpu"
    reference = meta["ownerReferences"][0]
    assert reference["controller"] is controller and reference["uid"] == "0b5e-uid"
    if controller:
        assert meta["labels"]["kueue.x-k8s.io/job-uid"] == "0b5e-uid"
        assert meta["finalizers"] == ["kueue.x-k8s.io/resource-in-use"]
    else:
        assert meta["annotations"] == {"kueue.x-k8s.io/job-owner-gvk": "apps/v1, Kind=StatefulSet",
                                       "kueue.x-k8s.io/job-owner-name": owner["metadata"]["name"]}
    assert owner_reference(workload)["name"] == owner["metadata"]["name"]
    body = {k: v for k, v in workload.items()}
    body["metadata"] = {"name": meta["name"], "namespace": meta["namespace"]}
    assert kueue_schema_errors(body) == []


def test_unlabelled_or_unknown_kinds_get_no_workload() -> None:
    unlabelled = K.job("ns", "x", gpus=1)
    del unlabelled["metadata"]["labels"]
    assert workload_for(unlabelled) is None
    job_pod = pod()
    job_pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u",
                                               "controller": True}]
    assert workload_for(job_pod) is None, "a job's pod is covered by the job's Workload"
    job_pod["metadata"]["ownerReferences"][0].update(kind="ReplicaSet", apiVersion="apps/v1")
    assert workload_for(job_pod) is not None, "a Deployment's pod gets its own Workload"
    assert workload_for({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "c", "labels": {K.QUEUE_LABEL: "gpu"}}}) is None


@pytest.mark.parametrize(("owner", "suspend", "patch"), [
    (K.job("ns", "j", 1), False, {"spec": {"suspend": False}}),
    (K.job("ns", "j", 1), True, None),
    (pytorch_job(), False, {"spec": {"runPolicy": {"suspend": False}}}),
    (pod(), False, {"spec": {"schedulingGates": []}}),
    (K.stateful_set("ns", "s", 1), True, None),
])
def test_suspend_patch_per_kind(owner: dict, suspend: bool, patch: dict | None) -> None:
    assert suspend_patch(owner, suspend) == patch
