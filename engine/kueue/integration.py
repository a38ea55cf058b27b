"""The job-integration shim: the Workload Kueue would create for each kind of job (pure builders).

Kueue's job framework watches jobs carrying the label `kueue.x-k8s.io/queue-name` and creates
one Workload per job, named `<lowercase kind>-<job name>-<hash>` where the hash is the first five
hex digits of sha1("<Kind>\\n<group>\\n<name>\\n<uid>") (pkg/controller/jobframework/workload_names.go).
Job-backed Workloads (Job, RayJob, RayCluster, PyTorchJob) get a controller ownerReference to the
job, the label `kueue.x-k8s.io/job-uid` and the finalizer `kueue.x-k8s.io/resource-in-use`.
A StatefulSet (a notebook) is a pod group: non-controller ownerReference plus the annotations
`kueue.x-k8s.io/job-owner-gvk` and `kueue.x-k8s.io/job-owner-name`. Plain Deployments get one
Workload per Pod. Kueue has no InferenceService integration; for the demo an InferenceService
with the queue label gets one Workload for its predictor (say so wherever it matters).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from typing import Any

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
RESOURCE_IN_USE = "kueue.x-k8s.io/resource-in-use"
OWNER_GVK = "kueue.x-k8s.io/job-owner-gvk"
OWNER_NAME = "kueue.x-k8s.io/job-owner-name"
ELASTIC = "kueue.x-k8s.io/elastic-job"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
MAX_NAME = 253
HASH_LENGTH = 5


def workload_name(kind: str, group: str, name: str, uid: str) -> str:
    """Kueue's deterministic Workload name for an owner."""
    digest = hashlib.sha1(f"{kind}\n{group}\n{name}\n{uid}".encode()).hexdigest()[:HASH_LENGTH]
    prefix = f"{kind.lower()}-{name}"[: MAX_NAME - 1 - HASH_LENGTH]
    return f"{prefix}-{digest}"


def _group(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def _pod_set(name: str, count: int, template: Mapping | None) -> dict:
    return {"name": name, "count": max(0, int(count)), "template": copy.deepcopy(template or {"spec": {"containers": []}})}


def pod_sets_for(owner: Mapping) -> list[dict] | None:
    """The pod sets of a job object, by kind; None for a kind the shim does not integrate."""
    kind, spec = owner.get("kind"), owner.get("spec") or {}
    if kind == "Job":
        return [_pod_set("main", spec.get("parallelism", 1), spec.get("template"))]
    if kind in ("RayCluster", "RayJob"):
        cluster = spec if kind == "RayCluster" else (spec.get("rayClusterSpec") or {})
        sets = [_pod_set("head", 1, (cluster.get("headGroupSpec") or {}).get("template"))]
        for group in cluster.get("workerGroupSpecs") or []:
            sets.append(_pod_set(group.get("groupName", "workers"), group.get("replicas", 1), group.get("template")))
        return sets
    if kind == "PyTorchJob":
        replicas = spec.get("pytorchReplicaSpecs") or {}
        return [_pod_set(role.lower(), replicas[role].get("replicas", 1), replicas[role].get("template"))
                for role in sorted(replicas, key=lambda r: (r != "Master", r))]
    if kind == "StatefulSet":
        return [_pod_set("main", spec.get("replicas", 1), spec.get("template"))]
    if kind == "Pod":
        return [_pod_set("main", 1, {"metadata": {"labels": dict((owner.get("metadata") or {}).get("labels") or {})},
                                     "spec": spec})]
    if kind == "InferenceService":
        predictor = spec.get("predictor") or {}
        containers = [_as_container(c) for c in [predictor.get("model")] + list(predictor.get("containers") or []) if c]
        count = predictor.get("minReplicas", 1) or 1
        return [_pod_set("predictor", count, {"spec": {"containers": copy.deepcopy(containers)}})]
    return None


_CONTAINER_FIELDS = ("name", "image", "command", "args", "env", "ports", "resources")


def _as_container(spec: Mapping) -> dict:
    """A KServe predictor `model` spec is a Container plus model fields: keep only the Container part."""
    container = {key: copy.deepcopy(spec[key]) for key in _CONTAINER_FIELDS if key in spec}
    container.setdefault("name", "kserve-container")
    return container


def workload_for(owner: Mapping, api_version: str = "kueue.x-k8s.io/v1beta2") -> dict | None:
    """The Workload Kueue would create for `owner`, or None when it is not queued or not integrated."""
    metadata = owner.get("metadata") or {}
    labels = metadata.get("labels") or {}
    queue = labels.get(QUEUE_LABEL)
    pod_sets = pod_sets_for(owner)
    if not queue or pod_sets is None:
        return None
    if owner.get("kind") == "Pod" and any(ref.get("controller") and ref.get("kind") != "ReplicaSet"
                                          for ref in metadata.get("ownerReferences") or []):
        return None  # a job's or StatefulSet's pod: its owner's Workload already covers it
    kind, owner_api = owner["kind"], owner.get("apiVersion", "v1")
    name, uid = metadata["name"], metadata.get("uid", "")
    reference: dict[str, Any] = {"apiVersion": owner_api, "kind": kind, "name": name, "uid": uid}
    body: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": "Workload",
        "metadata": {"name": workload_name(kind, _group(owner_api), name, uid),
                     "namespace": metadata.get("namespace", "default"),
                     "labels": {JOB_UID_LABEL: uid}, "annotations": {}},
        "spec": {"queueName": queue, "podSets": pod_sets, "active": True},
    }
    if kind == "StatefulSet":
        reference.update(controller=False, blockOwnerDeletion=True)
        # schema.GroupVersionKind.String(): "apps/v1, Kind=StatefulSet"
        body["metadata"]["annotations"].update({OWNER_GVK: f"{owner_api}, Kind={kind}", OWNER_NAME: name})
        del body["metadata"]["labels"][JOB_UID_LABEL]
    else:
        reference.update(controller=True, blockOwnerDeletion=True)
        body["metadata"]["finalizers"] = [RESOURCE_IN_USE]
    if (metadata.get("annotations") or {}).get(ELASTIC) == "true":
        body["metadata"]["annotations"][ELASTIC] = "true"
    body["metadata"]["ownerReferences"] = [reference]
    priority = (owner.get("spec") or {}).get("priority")
    if isinstance(priority, int):
        body["spec"]["priority"] = priority
    return body


def owner_reference(workload: Mapping) -> dict | None:
    """The job a Workload belongs to: the controller ownerReference, else the StatefulSet annotations."""
    metadata = workload.get("metadata") or {}
    references = metadata.get("ownerReferences") or []
    for reference in references:
        if reference.get("controller"):
            return dict(reference)
    annotations = metadata.get("annotations") or {}
    if annotations.get(OWNER_NAME):
        gvk = annotations.get(OWNER_GVK, "apps/v1, Kind=StatefulSet")
        version, _, kind = gvk.partition(", Kind=")
        return {"apiVersion": version.strip(), "kind": kind.strip(), "name": annotations[OWNER_NAME]}
    return dict(references[0]) if references else None


def suspend_patch(owner: Mapping, suspend: bool) -> dict | None:
    """The merge patch that (un)suspends a job the way Kueue does, or None when the kind has no switch."""
    kind, spec = owner.get("kind"), owner.get("spec") or {}
    if kind in ("Job", "RayJob", "RayCluster"):
        return None if bool(spec.get("suspend", False)) == suspend else {"spec": {"suspend": suspend}}
    if kind == "PyTorchJob":
        current = bool((spec.get("runPolicy") or {}).get("suspend", False))
        return None if current == suspend else {"spec": {"runPolicy": {"suspend": suspend}}}
    if kind == "Pod" and not suspend:
        gates = spec.get("schedulingGates") or []
        kept = [g for g in gates if g.get("name") != ADMISSION_GATE]
        return None if len(kept) == len(gates) else {"spec": {"schedulingGates": kept}}
    return None


def finished_condition(owner: Mapping) -> tuple[str, str] | None:
    """(reason, message) when the job itself reports it finished (Job conditions, RayJob status)."""
    kind, status = owner.get("kind"), owner.get("status") or {}
    if kind == "Job":
        for condition in status.get("conditions") or []:
            if condition.get("status") == "True" and condition.get("type") == "Complete":
                return "Succeeded", "Job finished successfully"
            if condition.get("status") == "True" and condition.get("type") == "Failed":
                return "Failed", condition.get("message") or "Job failed"
    if kind == "RayJob":
        state = status.get("jobDeploymentStatus")
        if state == "Complete":
            return "Succeeded", "RayJob finished successfully"
        if state == "Failed":
            return "Failed", status.get("message") or "RayJob failed"
    if kind == "PyTorchJob":
        for condition in status.get("conditions") or []:
            if condition.get("status") == "True" and condition.get("type") in ("Succeeded", "Failed"):
                return condition["type"], condition.get("message") or f"PyTorchJob {condition['type'].lower()}"
    return None


def pods_ready(owner: Mapping) -> bool | None:
    """Whether the job's pods are all ready or succeeded, as Kueue's integration reads the job's status
    (Job: `ready + succeeded >= parallelism`; StatefulSet: `readyReplicas >= replicas`); None for the
    kinds the emulation does not judge (no PodsReady condition is written for them)."""
    kind, spec, status = owner.get("kind"), owner.get("spec") or {}, owner.get("status") or {}
    if kind == "Job":
        wanted = spec.get("parallelism", 1)
        if spec.get("completions") is not None:
            wanted = min(wanted, spec["completions"])
        return int(status.get("ready") or 0) + int(status.get("succeeded") or 0) >= int(wanted)
    if kind == "StatefulSet":
        return int(status.get("readyReplicas") or 0) >= int(spec.get("replicas", 1))
    return None


def desired_counts(owner: Mapping) -> dict[str, int]:
    """Pod-set counts the owner asks for now (elastic shrink and StatefulSet replicas read this)."""
    return {pod_set["name"]: pod_set["count"] for pod_set in pod_sets_for(owner) or []}
