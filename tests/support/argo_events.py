"""Realistic Argo Events inputs for tests: Kueue Workloads at each lifecycle stage (conditions as
Kueue writes them, v1beta2 and v1beta1), resource events as the `resource` EventSource publishes
them (type/body/oldBody in a CloudEvent), and Alertmanager webhook payloads (version 4) as the
`webhook` EventSource wraps them (header/body/metadata).

Plain functions; every call returns fresh dicts. Reused by tests/routing and the engine tests.
"""

from __future__ import annotations

import copy
import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

BASE_TIME = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)
STAGES = (
    "pending",
    "quota-reserved",
    "admitted",
    "admitted-pods-ready",
    "finished-succeeded",
    "finished-failed",
    "evicted-preempted",
    "deactivated",
    "readmitted",
)
_resource_versions = itertools.count(1000)


def _ts(minutes: int) -> str:
    return (BASE_TIME + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(type_: str, status: str, reason: str, message: str, minute: int, generation: int = 1) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": _ts(minute), "observedGeneration": generation}


OWNER_API_VERSIONS = {"Job": "batch/v1", "StatefulSet": "apps/v1", "Pod": "v1", "RayCluster": "ray.io/v1",
                      "RayJob": "ray.io/v1", "PyTorchJob": "kubeflow.org/v1", "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1"}


def workload(
    name: str = "job-llm-finetune-7c9f2",
    namespace: str = "team-a",
    stage: str = "pending",
    *,
    cluster_queue: str = "team-a",
    local_queue: str = "team-a-gpus",
    flavor: str = "a100-80gb",
    gpus: int = 4,
    api_version: str = "kueue.x-k8s.io/v1beta2",
    uid: str | None = None,
    owner_kind: str = "Job",
) -> dict[str, Any]:
    """A Kueue Workload owned by a batch Job (or `owner_kind`: StatefulSet, Pod, RayCluster...), with status
    for `stage` (see STAGES). The Sensors start runs only for owners a step may write for (not the job
    kinds, whose transitions the catch-up sweep records: steps.delivery.event_path_runs)."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; expected one of {', '.join(STAGES)}")
    v1beta1 = api_version.endswith("v1beta1")
    job_name = name.removeprefix("job-").rsplit("-", 1)[0]
    body: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{name}")),
            "resourceVersion": str(next(_resource_versions)),
            "generation": 1,
            "creationTimestamp": _ts(0),
            "labels": {"kueue.x-k8s.io/job-uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"job/{namespace}/{job_name}"))},
            "finalizers": ["kueue.x-k8s.io/resource-in-use"],
            "ownerReferences": [{
                "apiVersion": OWNER_API_VERSIONS.get(owner_kind, "batch/v1"), "kind": owner_kind, "name": job_name,
                "controller": True,
                "blockOwnerDeletion": True,
                "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"job/{namespace}/{job_name}")),
            }],
            "managedFields": [
                {"manager": "kueue", "operation": "Apply", "apiVersion": api_version, "time": _ts(1),
                 "fieldsType": "FieldsV1", "subresource": "status", "fieldsV1": {"f:status": {}}},
            ],
        },
        "spec": {
            "active": True,
            "queueName": local_queue,
            "priority": 0,
            "podSets": [{
                "name": "main",
                "count": 1,
                "template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": "trainer",
                        "image": "quay.io/example/llm-trainer:1.4",
                        "resources": {"requests": {"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": str(gpus)},
                                      "limits": {"nvidia.com/gpu": str(gpus)}},
                    }],
                }},
            }],
        },
        "status": {},
    }
    if v1beta1:  # v1beta2 renamed priorityClassName/priorityClassSource to priorityClassRef
        body["spec"]["priorityClassSource"] = ""
    admission = {
        "clusterQueue": cluster_queue,
        "podSetAssignments": [{
            "name": "main",
            "count": 1,
            "flavors": {"cpu": "default-flavor", "memory": "default-flavor", "nvidia.com/gpu": flavor},
            "resourceUsage": {"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": str(gpus)},
        }],
    }
    reserved = _condition("QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cluster_queue}", 2)
    admitted = _condition("Admitted", "True", "Admitted", "The workload is admitted", 3)
    status: dict[str, Any] = body["status"]
    if stage == "pending":
        status["conditions"] = [_condition(
            "QuotaReserved", "False", "Pending",
            f"couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor "
            f"{flavor}, {gpus} more needed", 1)]
        status["resourceRequests"] = [{"name": "main", "resources": {"cpu": "16", "memory": "128Gi",
                                                                     "nvidia.com/gpu": str(gpus)}}]
    elif stage == "quota-reserved":
        status["admission"] = admission
        status["conditions"] = [
            reserved,
            _condition("Admitted", "False", "UnsatisfiedAdmissionChecks",
                       "The workload has not all admission checks in Ready state", 2),
        ]
        status["admissionChecks"] = [{"name": "gpu-provisioning", "state": "Pending", "message": "",
                                      "lastTransitionTime": _ts(2)}]
    elif stage in ("admitted", "admitted-pods-ready", "finished-succeeded", "finished-failed"):
        status["admission"] = admission
        status["conditions"] = [reserved, admitted]
        if stage != "admitted":
            status["conditions"].append(_condition("PodsReady", "True", "PodsReady", "All pods reached readiness", 5))
        if stage == "finished-succeeded":
            status["conditions"].append(_condition("Finished", "True", "Succeeded", "Job finished successfully", 40))
        if stage == "finished-failed":
            status["conditions"].append(_condition(
                "Finished", "True", "Failed", "Job has reached the specified backoff limit", 40))
    elif stage == "evicted-preempted":
        status["conditions"] = [
            _condition("QuotaReserved", "False", "Pending", "Preempted to accommodate a workload (UID: "
                       "5e8a1f0c) due to prioritization in the ClusterQueue", 20),
            _condition("Admitted", "False", "NoReservation", "The workload has no reservation", 20),
            _condition("Evicted", "True", "Preempted", "Preempted to accommodate a workload (UID: 5e8a1f0c) due "
                       "to prioritization in the ClusterQueue", 20),
            _condition("Preempted", "True", "InClusterQueue", "Preempted to accommodate a workload (UID: "
                       "5e8a1f0c) due to prioritization in the ClusterQueue", 20),
            _condition("Requeued", "True", "Preempted", "Preempted to accommodate a workload (UID: 5e8a1f0c) due "
                       "to prioritization in the ClusterQueue", 20),
        ]
        status["requeueState"] = {"count": 1}
    elif stage == "deactivated":
        body["spec"]["active"] = False
        status["conditions"] = [
            _condition("QuotaReserved", "False", "Pending", "The workload is deactivated", 25),
            _condition("Admitted", "False", "NoReservation", "The workload has no reservation", 25),
            _condition("Evicted", "True", "Deactivated", "The workload is deactivated", 25),
            _condition("Requeued", "False", "Deactivated", "The workload is deactivated", 25),
        ]
    elif stage == "readmitted":
        status["admission"] = admission
        status["conditions"] = [
            _condition("QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cluster_queue}", 30),
            _condition("Admitted", "True", "Admitted", "The workload is admitted", 30),
            _condition("Evicted", "False", "QuotaReserved", "Previously: Preempted to accommodate a workload (UID: "
                       "5e8a1f0c) due to prioritization in the ClusterQueue", 30),
            _condition("Preempted", "False", "QuotaReserved", "Previously: Preempted to accommodate a workload "
                       "(UID: 5e8a1f0c) due to prioritization in the ClusterQueue", 30),
            _condition("Requeued", "True", "Preempted", "Preempted to accommodate a workload (UID: 5e8a1f0c) due "
                       "to prioritization in the ClusterQueue", 20),
        ]
        status["requeueState"] = {"count": 1}
    return body


def resource_event(
    event_source: str,
    event_name: str,
    kind: str,
    body: dict[str, Any],
    old_body: dict[str, Any] | None = None,
    *,
    event_id: str | None = None,
    minute: int = 10,
) -> dict[str, Any]:
    """A resource EventSource CloudEvent: data = {type, body, oldBody, group, version, resource, metadata}."""
    api_version = str(body.get("apiVersion", "kueue.x-k8s.io/v1beta2"))
    group, _, version = api_version.rpartition("/")
    return {
        "specversion": "1.0",
        "id": event_id or uuid.uuid4().hex,
        "source": event_source,
        "subject": event_name,
        "type": "resource",
        "time": _ts(minute),
        "datacontenttype": "application/json",
        "data": {
            "type": kind,
            "body": copy.deepcopy(body),
            "oldBody": copy.deepcopy(old_body) if (kind == "UPDATE" and old_body is not None) else None,
            "group": group,
            "version": version,
            "resource": "workloads",
            "metadata": {},
        },
    }


def idle_alert(namespace: str = "team-a", pod: str = "llm-finetune-7c9f2-0", *, status: str = "firing",
               alertname: str = "GPUWorkloadIdle", gpu: str = "0") -> dict[str, Any]:
    """One alert as Alertmanager's webhook lists it: the product's rule labels it with the product's namespace
    and the workload's in `workload_namespace` (gpuaas/manifests/observability.py)."""
    labels = {"alertname": alertname, "namespace": "gpuaas", "workload_namespace": namespace, "pod": pod, "gpu": gpu,
              "severity": "info", "Hostname": "gpu-node-1"}
    return {
        "status": status,
        "labels": labels,
        "annotations": {"summary": f"GPU {gpu} of {namespace}/{pod} idle for 30 minutes"},
        "startsAt": _ts(-30),
        "endsAt": _ts(5) if status == "resolved" else "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus-k8s-0:9090/graph?g0.expr=...",
        "fingerprint": uuid.uuid5(uuid.NAMESPACE_URL, f"{alertname}/{namespace}/{pod}/{gpu}").hex[:16],
    }


def alertmanager_payload(alerts: list[dict[str, Any]], *, status: str | None = None,
                         receiver: str = "gpuaas-idle") -> dict[str, Any]:
    """An Alertmanager webhook body (version 4) for one alert group."""
    group_status = status or ("firing" if any(a["status"] == "firing" for a in alerts) else "resolved")
    common = dict(alerts[0]["labels"]) if alerts else {}
    for alert in alerts[1:]:
        common = {k: v for k, v in common.items() if alert["labels"].get(k) == v}
    alertname = common.get("alertname", "")
    return {
        "version": "4",
        "groupKey": f'{{}}/{{alertname="{alertname}"}}:{{alertname="{alertname}"}}',
        "truncatedAlerts": 0,
        "status": group_status,
        "receiver": receiver,
        "groupLabels": {"alertname": alertname} if alertname else {},
        "commonLabels": common,
        "commonAnnotations": {},
        "externalURL": "http://alertmanager-main-0:9093",
        "alerts": alerts,
    }


def webhook_event(event_source: str, event_name: str, body: dict[str, Any], *,
                  event_id: str | None = None, minute: int = 10) -> dict[str, Any]:
    """A webhook EventSource CloudEvent: data = {header, body, metadata} (Authorization masked)."""
    return {
        "specversion": "1.0",
        "id": event_id or uuid.uuid4().hex,
        "source": event_source,
        "subject": event_name,
        "type": "webhook",
        "time": _ts(minute),
        "datacontenttype": "application/json",
        "data": {
            "header": {"Content-Type": ["application/json"], "User-Agent": ["Alertmanager/0.25.0"]},
            "body": copy.deepcopy(body),
            "metadata": {},
        },
    }


def gpu_node(name: str = "gpu-node-1", gpus: int | None = 8, *, ready: bool = True,
             heartbeat_minute: int = 0) -> dict[str, Any]:
    """A GPU Node as the NVIDIA device plugin reports it (`gpus=None`: plugin not registered yet)."""
    capacity: dict[str, str] = {"cpu": "96", "memory": "1056451028Ki", "pods": "250"}
    if gpus is not None:
        capacity["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"node/{name}")),
            "resourceVersion": str(next(_resource_versions)),
            "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true",
                       "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "node-role.kubernetes.io/worker": ""},
        },
        "spec": {"providerID": f"aws:///us-east-1a/i-{uuid.uuid5(uuid.NAMESPACE_URL, name).hex[:17]}"},
        "status": {
            "capacity": dict(capacity),
            "allocatable": dict(capacity),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                            "reason": "KubeletReady" if ready else "KubeletNotReady",
                            "lastHeartbeatTime": _ts(heartbeat_minute), "lastTransitionTime": _ts(0)}],
        },
    }


def calendar_event(event_source: str, event_name: str, *, minute: int = 10) -> dict[str, Any]:
    """A calendar EventSource tick: data = {eventTime, metadata}."""
    return {
        "specversion": "1.0", "id": uuid.uuid4().hex, "source": event_source, "subject": event_name,
        "type": "calendar", "time": _ts(minute), "datacontenttype": "application/json",
        "data": {"eventTime": (BASE_TIME + timedelta(minutes=minute)).strftime("%Y-%m-%d %H:%M:%S.000000000 +0000 UTC"),
                 "metadata": {}},
    }
