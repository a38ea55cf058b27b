"""How to release (and resume) a workload's GPU workers, per kind of owner (facts/kueue.md).

| owner (top of the chain)                     | strategy            | write                                        | quota                          |
|----------------------------------------------|---------------------|----------------------------------------------|--------------------------------|
| Notebook (Kubeflow / OpenShift AI)           | stop-notebook       | Notebook annotation kubeflow-resource-stopped | released (StatefulSet at 0)    |
| Deployment / InferenceService with a ScaledObject | pause-keda     | ScaledObject autoscaling.keda.sh/paused-replicas: "0" | released with the pods |
| StatefulSet, plain Deployment                | scale-to-zero       | spec.replicas: 0                             | released (Workload kept, OnHold) |
| LeaderWorkerSet                              | scale-to-zero       | spec.replicas: 0 (record on the set only)    | released (Kueue deletes its Workloads) |
| elastic Job / RayJob / RayCluster            | scale-worker-groups | worker replicas 0 in the owner               | reservation shrinks            |
| RayCluster, RayJob, PyTorchJob, Job, JobSet, TrainJob, other jobs, no owner | deactivate-workload | Workload spec.active: false | released, Workload kept |
| plain Pod / pod group, InferenceService without KEDA | none        | nothing (would delete pods / cannot scale)   | kept                           |
| Deployment a Knative Revision controls (KServe Serverless) | none  | nothing: Knative scales it to zero itself    | Knative's                      |

WHY not scale non-elastic jobs: changing worker replicas changes the podSets, Kueue stops the job
and recreates the Workload (reservation lost) and owns `suspend`; its maintainers recommend
`spec.active=false` (kueue#14702).

Every release writes, IN THE SAME PATCH as the change, the release record annotation
`gpuaas.io/release` on the object it changes (and mirrors it on the Workload), so a retried or
duplicated step sees "already released" and resume knows exactly what to restore:

    {"strategy", "tenant", "gpus", "releasedAt", "reason", "by", "target": {apiVersion, kind, name},
     "previous": {"active": true} | {"replicas": 2} | {"workerGroups": {"gpu": {"replicas": 2, "minReplicas": 1}}}
                 | {"parallelism": 4} | {"annotations": {"kubeflow-resource-stopped": null}}}

    strategy_for(workload, owners, scaled_object) -> ReleaseStrategy       (pure)
    release_actions(strategy, workload, owners, *, tenant, gpus, now, reason, by) -> list[Action]   (pure)
    resume_actions(record, workload, target) -> (list[Action], list[str] notes)                   (pure)
    read_release(obj) -> dict | None
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from steps.model.owners import OwnerChain
from steps.model.workload import Workload
from steps.plan import Action

JSON = dict[str, Any]
RELEASE_ANNOTATION = "gpuaas.io/release"
NOTEBOOK_STOPPED = "kubeflow-resource-stopped"
KEDA_PAUSED_REPLICAS = "autoscaling.keda.sh/paused-replicas"
ELASTIC = "kueue.x-k8s.io/elastic-job"

DEACTIVATE = "deactivate-workload"
SCALE_WORKERS = "scale-worker-groups"
STOP_NOTEBOOK = "stop-notebook"
SCALE_TO_ZERO = "scale-to-zero"
PAUSE_KEDA = "pause-keda"
NONE = "none"

JOB_KINDS = ("RayCluster", "RayJob", "PyTorchJob", "Job", "JobSet", "TrainJob", "MPIJob", "TFJob", "XGBoostJob",
             "PaddleJob", "JAXJob", "AppWrapper")
ELASTIC_KINDS = ("Job", "RayJob", "RayCluster")
SCALABLE_KINDS = ("StatefulSet", "LeaderWorkerSet", "Deployment")
WORKLOADS_GONE_AT_ZERO = frozenset({"LeaderWorkerSet"})
"""Kinds whose Workloads Kueue deletes once spec.replicas is 0 (v0.19.2: one Workload per LeaderWorkerSet
group, deleted at or beyond spec.replicas, pkg/controller/jobs/leaderworkerset/leaderworkerset_reconciler.go
filterWorkloads): the release record lives on the object alone; resume it by name (target=Kind/name)."""

STRATEGY_KINDS: dict[str, tuple[str, ...]] = {
    DEACTIVATE: ("Workload",),
    SCALE_WORKERS: ELASTIC_KINDS,
    STOP_NOTEBOOK: ("Notebook",),
    SCALE_TO_ZERO: SCALABLE_KINDS,
    PAUSE_KEDA: ("ScaledObject", "Deployment", "StatefulSet"),
}
"""The only kinds each strategy writes. A release or a resume whose object is of another kind is
refused (`WrongTarget`): e.g. a scale-to-zero record read from the Workload's mirror must never
become `spec.replicas` on the Workload. The RBAC test derives the steps' patch grants from it."""


class WrongTarget(ValueError):
    """An action was about to write an object of a kind its strategy never writes."""


KIND_TABLE: tuple[tuple[str, str, str], ...] = (
    ("Notebook", STOP_NOTEBOOK, "the notebook controller scales its StatefulSet to 0 and back"),
    ("Deployment/InferenceService + ScaledObject", PAUSE_KEDA, "KEDA owns replicas; pausing at 0 is KEDA's own switch"),
    ("StatefulSet, LeaderWorkerSet, Deployment", SCALE_TO_ZERO, "N<->0 keeps the Workload (OnHold) and frees quota"),
    ("elastic Job/RayJob/RayCluster", SCALE_WORKERS, "workload slices shrink the same Workload's reservation"),
    ("RayCluster, RayJob, PyTorchJob, Job, JobSet, TrainJob", DEACTIVATE,
     "changing replicas would recreate the Workload; spec.active=false frees quota and keeps it"),
    ("Pod, pod group, InferenceService without KEDA", NONE, "nothing can stop them without deleting tenant pods"),
    ("Deployment of a Knative Revision (KServe Serverless)", NONE,
     "Knative's autoscaler owns its replicas and scales it to zero itself; gpuaas never fights it"),
)


@dataclass(frozen=True)
class ReleaseStrategy:
    """What a release of this workload does and to which object (`target` is a live dict)."""

    name: str
    target: JSON | None
    why: str

    @property
    def target_ref(self) -> JSON | None:
        if self.target is None:
            return None
        return {"apiVersion": self.target.get("apiVersion"), "kind": self.target.get("kind"),
                "name": (self.target.get("metadata") or {}).get("name")}

    def to_dict(self) -> JSON:
        return {"strategy": self.name, "target": self.target_ref, "why": self.why}


def _annotations(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}


def read_release(obj: Mapping[str, Any] | None) -> JSON | None:
    """The release record on an object, or None (a malformed one is reported as such, not trusted)."""
    raw = _annotations(obj).get(RELEASE_ANNOTATION)
    if not raw:
        return None
    try:
        record = json.loads(raw)
    except json.JSONDecodeError:
        return {"strategy": "unreadable", "raw": raw}
    return record if isinstance(record, dict) else {"strategy": "unreadable", "raw": raw}


def is_elastic(workload: Workload, owners: OwnerChain) -> bool:
    return workload.elastic or _annotations(owners.direct).get(ELASTIC) == "true"


def strategy_for(workload: Workload, owners: OwnerChain, scaled_object: Mapping[str, Any] | None) -> ReleaseStrategy:
    """Pick the release strategy from the live owner chain (pure)."""
    kinds = owners.kinds()
    if owners.knative:
        return ReleaseStrategy(NONE, owners.top, knative_reason(owners.knative))
    if "Notebook" in kinds:
        return ReleaseStrategy(STOP_NOTEBOOK, owners.find("Notebook"),
                               "Notebook: the kubeflow-resource-stopped annotation scales its StatefulSet to 0")
    if scaled_object is not None and ("Deployment" in kinds or "InferenceService" in kinds):
        return ReleaseStrategy(PAUSE_KEDA, dict(scaled_object),
                               "KEDA scales this owner: autoscaling.keda.sh/paused-replicas \"0\" holds it at 0")
    if "InferenceService" in kinds:
        return ReleaseStrategy(NONE, owners.find("InferenceService"),
                               "InferenceService without a ScaledObject: only KEDA can scale raw deployments to 0")
    for kind in ("LeaderWorkerSet", "StatefulSet", "Deployment"):
        if kind in kinds:
            kept = ("Kueue deletes its groups' Workloads (resume it by name)" if kind in WORKLOADS_GONE_AT_ZERO
                    else "keeps the Workload")
            return ReleaseStrategy(SCALE_TO_ZERO, owners.find(kind), f"{kind}: replicas 0 {kept} and releases its quota")
    direct = owners.direct
    direct_kind = (direct or {}).get("kind")
    if direct is not None and direct_kind in ELASTIC_KINDS and is_elastic(workload, owners):
        return ReleaseStrategy(SCALE_WORKERS, direct,
                               f"elastic {direct_kind}: scaling workers down shrinks the same Workload's reservation")
    if owners.reference is not None and owners.reference.kind == "Pod":
        return ReleaseStrategy(NONE, direct, "plain Pod workload: stopping it would delete the tenant's pod")
    if direct is None and owners.reference is not None:
        return ReleaseStrategy(DEACTIVATE, dict(workload.obj),
                               f"owner {owners.reference.kind} {owners.reference.name}: {owners.missing}; "
                               "deactivating the Workload releases its quota and keeps every object (its pods are stopped)")
    kind = direct_kind or "no owner"
    return ReleaseStrategy(DEACTIVATE, dict(workload.obj),
                           f"{kind}: spec.active=false releases the quota and keeps the Workload (kueue#14702)")


def knative_reason(why: str) -> str:
    """The record's words for a Knative-scaled server (OwnerChain.knative says which object and Revision)."""
    return (f"{why}: Knative's autoscaler sets its replicas and scales it to zero itself when it gets no requests "
            "(autoscaling.knative.dev/min-scale, scale-to-zero-grace-period), so gpuaas neither makes a ScaledObject "
            "for it nor patches its replicas (either would fight Knative)")


def _record(strategy: ReleaseStrategy, previous: JSON, *, tenant: str | None, gpus: float, now: datetime,
            reason: str, by: str, run: str = "") -> str:
    record = {"strategy": strategy.name, "tenant": tenant, "gpus": gpus,
              "releasedAt": now.isoformat().replace("+00:00", "Z"), "reason": reason, "by": by,
              "target": strategy.target_ref, "previous": previous}
    if run:
        record["run"] = run
    return json.dumps(record, separators=(",", ":"), sort_keys=True)


def release_message(record: Mapping[str, Any]) -> str:
    """The GPUaaSWorkersReleased Event's text, from the release record alone: an attempt that
    records an earlier attempt's release writes the very same Event (counted once)."""
    target = record.get("target") or {}
    return (f"gpuaas released {float(record.get('gpus') or 0):g} GPU(s): {record.get('strategy')} on "
            f"{target.get('kind')} {target.get('name')} ({record.get('reason')})")


def release_action_name(strategy: str, kind: str | None) -> str:
    """The action name a release of `strategy` on `kind` is recorded under."""
    if strategy == SCALE_WORKERS:
        return "scale-workers" if kind == "Job" else "scale-worker-groups"
    return {DEACTIVATE: "deactivate-workload", STOP_NOTEBOOK: "stop-notebook", SCALE_TO_ZERO: "scale-to-zero",
            PAUSE_KEDA: "pause-keda"}.get(strategy, strategy)


def check_target(strategy: str, obj: Mapping[str, Any]) -> None:
    """Raise WrongTarget unless `obj` is of a kind `strategy` writes (STRATEGY_KINDS)."""
    kinds = STRATEGY_KINDS.get(strategy, ())
    if obj.get("kind") not in kinds:
        raise WrongTarget(f"strategy {strategy} writes only {', '.join(kinds) or 'nothing'}, "
                          f"not {obj.get('kind')} {(obj.get('metadata') or {}).get('name')}")


def _resource(obj: Mapping[str, Any], strategy: str) -> Any:
    from steps.gateways.resources import for_kind

    check_target(strategy, obj)
    resource = for_kind(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))
    if resource is None:
        raise ValueError(f"no Resource for {obj.get('apiVersion')} {obj.get('kind')}")
    return resource


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def worker_groups_path(kind: str) -> str:
    return "/spec/rayClusterSpec/workerGroupSpecs" if kind == "RayJob" else "/spec/workerGroupSpecs"


def _worker_groups(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "RayJob":
        spec = spec.get("rayClusterSpec") or {}
    return list(spec.get("workerGroupSpecs") or [])


def release_actions(strategy: ReleaseStrategy, workload: Workload, *, tenant: str | None, gpus: float,
                    now: datetime, reason: str, by: str, run: str = "") -> list[Action]:
    """The writes that release the workers, each carrying the release record (pure)."""
    target = strategy.target
    if strategy.name == NONE or target is None:
        return []
    meta = _meta(target)
    name, namespace = str(meta.get("name")), meta.get("namespace") or workload.namespace
    rv = meta.get("resourceVersion")
    actions: list[Action] = []
    if strategy.name == DEACTIVATE:
        record = _record(strategy, {"active": workload.active}, tenant=tenant, gpus=gpus, now=now, reason=reason, by=by,
                         run=run)
        from steps.gateways.resources import WORKLOAD, WORKLOAD_V1BETA1

        resource = WORKLOAD_V1BETA1 if workload.version == "v1beta1" else WORKLOAD
        return [Action("deactivate-workload", resource, workload.name, workload.namespace, reason,
                       patch={"metadata": {"annotations": {RELEASE_ANNOTATION: record}}, "spec": {"active": False}},
                       resource_version=workload.resource_version,
                       before={"spec": {"active": workload.active},
                               "metadata": {"annotations": {RELEASE_ANNOTATION: None}}})]
    if strategy.name == SCALE_WORKERS:
        kind = str(target.get("kind"))
        if kind == "Job":
            parallelism = int((target.get("spec") or {}).get("parallelism") or 1)
            record = _record(strategy, {"parallelism": parallelism}, tenant=tenant, gpus=gpus, now=now, reason=reason,
                             by=by, run=run)
            actions.append(Action("scale-workers", _resource(target, SCALE_WORKERS), name, namespace, reason,
                                  patch={"metadata": {"annotations": {RELEASE_ANNOTATION: record}},
                                         "spec": {"parallelism": 0}},
                                  resource_version=rv, before={"spec": {"parallelism": parallelism}}))
        else:
            groups = _worker_groups(target)
            previous = {str(g.get("groupName")): {"replicas": g.get("replicas"), "minReplicas": g.get("minReplicas")}
                        for g in groups}
            record = _record(strategy, {"workerGroups": previous}, tenant=tenant, gpus=gpus, now=now, reason=reason,
                             by=by, run=run)
            path = worker_groups_path(kind)
            ops: list[JSON] = []
            for index, group in enumerate(groups):
                ops.append({"op": "test", "path": f"{path}/{index}/groupName", "value": group.get("groupName")})
                ops.append({"op": "replace" if "replicas" in group else "add", "path": f"{path}/{index}/replicas",
                            "value": 0})
                if group.get("minReplicas"):
                    ops.append({"op": "replace", "path": f"{path}/{index}/minReplicas", "value": 0})
            annotations_path = "/metadata/annotations"
            if _annotations(target):
                ops.append({"op": "add", "path": f"{annotations_path}/{RELEASE_ANNOTATION.replace('/', '~1')}",
                            "value": record})
            else:
                ops.append({"op": "add", "path": annotations_path, "value": {RELEASE_ANNOTATION: record}})
            actions.append(Action("scale-worker-groups", _resource(target, SCALE_WORKERS), name, namespace, reason,
                                  operation="json-patch", patch=ops, resource_version=rv,
                                  before={"workerGroups": previous}))
    elif strategy.name == STOP_NOTEBOOK:
        old = _annotations(target).get(NOTEBOOK_STOPPED)
        record = _record(strategy, {"annotations": {NOTEBOOK_STOPPED: old}}, tenant=tenant, gpus=gpus, now=now,
                         reason=reason, by=by, run=run)
        stamp = now.isoformat().replace("+00:00", "Z")
        actions.append(Action("stop-notebook", _resource(target, STOP_NOTEBOOK), name, namespace, reason,
                              patch={"metadata": {"annotations": {NOTEBOOK_STOPPED: stamp, RELEASE_ANNOTATION: record}}},
                              resource_version=rv, before={"metadata": {"annotations": {NOTEBOOK_STOPPED: old}}}))
    elif strategy.name == SCALE_TO_ZERO:
        replicas = (target.get("spec") or {}).get("replicas")
        replicas = 1 if replicas is None else int(replicas)
        record = _record(strategy, {"replicas": replicas}, tenant=tenant, gpus=gpus, now=now, reason=reason, by=by,
                         run=run)
        actions.append(Action("scale-to-zero", _resource(target, SCALE_TO_ZERO), name, namespace, reason,
                              patch={"metadata": {"annotations": {RELEASE_ANNOTATION: record}}, "spec": {"replicas": 0}},
                              resource_version=rv, before={"spec": {"replicas": replicas}}))
    elif strategy.name == PAUSE_KEDA:
        old = _annotations(target).get(KEDA_PAUSED_REPLICAS)
        record = _record(strategy, {"annotations": {KEDA_PAUSED_REPLICAS: old}, "replicas": scaled_size(target)},
                         tenant=tenant, gpus=gpus, now=now, reason=reason, by=by, run=run)
        actions.append(Action("pause-keda", _resource(target, PAUSE_KEDA), name, namespace, reason,
                              patch={"metadata": {"annotations": {KEDA_PAUSED_REPLICAS: "0",
                                                                  RELEASE_ANNOTATION: record}}},
                              resource_version=rv, before={"metadata": {"annotations": {KEDA_PAUSED_REPLICAS: old}}}))
    if actions and workload.obj.get("metadata") and target.get("kind") not in WORKLOADS_GONE_AT_ZERO:
        actions.append(mirror_release(workload, record, reason))
    return actions


def mirror_release(workload: Workload, record: str | None, reason: str) -> Action:
    """Copy (or, with None, remove) the release record on the Workload (kubectl get workloads shows it)."""
    from steps.gateways.resources import WORKLOAD, WORKLOAD_V1BETA1

    resource = WORKLOAD_V1BETA1 if workload.version == "v1beta1" else WORKLOAD
    return Action("record-release-on-workload" if record else "clear-release-on-workload", resource, workload.name,
                  workload.namespace, reason, patch={"metadata": {"annotations": {RELEASE_ANNOTATION: record}}},
                  before={"metadata": {"annotations": {RELEASE_ANNOTATION: workload.annotations.get(RELEASE_ANNOTATION)}}})


def scaled_size(scaled_object: Mapping[str, Any]) -> int:
    """The size a ScaledObject brings its target back to: gpuaas' own records it as minReplicaCount
    (= maxReplicaCount, with idleReplicaCount 0); otherwise its maxReplicaCount (KEDA's default 100
    is not a size anyone recorded: 1)."""
    spec = scaled_object.get("spec") or {}
    if int(spec.get("minReplicaCount") or 0) > 0:
        return int(spec["minReplicaCount"])
    return int(spec.get("maxReplicaCount") or 1)


def restore_scale_target(scale_target: Mapping[str, Any], size: int, reason: str) -> tuple[list[Action], list[str]]:
    """Bring a KEDA scale target at 0 back to `size` (KEDA cannot: at 0 its activity query is empty,
    and its HPA is disabled at 0 replicas). A target someone sized since is left alone."""
    meta = _meta(scale_target)
    replicas = int((scale_target.get("spec") or {}).get("replicas") or 0)
    if replicas != 0:
        return [], [f"{scale_target.get('kind')} {meta.get('name')} has {replicas} replicas (changed since); left as is"]
    return [Action("restore-replicas", _resource(scale_target, PAUSE_KEDA), str(meta.get("name")), meta.get("namespace"),
                   reason, patch={"spec": {"replicas": size}}, resource_version=meta.get("resourceVersion"),
                   before={"spec": {"replicas": replicas}})], []


def resume_actions(record: Mapping[str, Any], target: Mapping[str, Any], reason: str, *,
                   scale_target: Mapping[str, Any] | None = None) -> tuple[list[Action], list[str]]:
    """Undo exactly the recorded release on `target` (the live object the record names). Pure.

    A field someone changed since the release (replicas no longer 0, annotation no longer ours) is
    left alone and reported: resume restores our change, never overwrites a newer decision.
    `scale_target`: for pause-keda, the Deployment/StatefulSet the ScaledObject scales; it is brought
    back to the recorded size after the unpause (removing paused-replicas alone leaves it at 0).
    """
    strategy = record.get("strategy")
    previous = record.get("previous") or {}
    recorded = (record.get("target") or {}).get("kind") if isinstance(record.get("target"), Mapping) else None
    if strategy in STRATEGY_KINDS and (target.get("kind") not in STRATEGY_KINDS[str(strategy)]
                                       or (recorded and recorded != target.get("kind"))):
        return [], [(f"the release record ({strategy} on {recorded}) is on {target.get('kind')} "
                     f"{_meta(target).get('name')}: {strategy} never writes a {target.get('kind')}, so nothing "
                     "is restored there")]
    meta = _meta(target)
    name, namespace, rv = str(meta.get("name")), meta.get("namespace"), meta.get("resourceVersion")
    notes: list[str] = []
    clear: JSON = {"metadata": {"annotations": {RELEASE_ANNOTATION: None}}}
    spec = target.get("spec") or {}
    if strategy == DEACTIVATE:
        active = previous.get("active", True)
        patch = {**clear, "spec": {"active": active}} if spec.get("active", True) is False else clear
        if spec.get("active", True) is not False:
            notes.append("Workload is already active (reactivated by someone else); only the record is removed")
        return [Action("reactivate-workload", _resource(target, DEACTIVATE), name, namespace, reason, patch=patch,
                       resource_version=rv, before={"spec": {"active": spec.get("active", True)}})], notes
    if strategy == SCALE_TO_ZERO:
        patch = clear
        if int(spec.get("replicas") or 0) == 0:
            patch = {**clear, "spec": {"replicas": int(previous.get("replicas") or 1)}}
        else:
            notes.append(f"replicas is {spec.get('replicas')} (changed since the release); left as is")
        return [Action("restore-replicas", _resource(target, SCALE_TO_ZERO), name, namespace, reason, patch=patch,
                       resource_version=rv, before={"spec": {"replicas": spec.get("replicas")}})], notes
    if strategy in (STOP_NOTEBOOK, PAUSE_KEDA):
        key = NOTEBOOK_STOPPED if strategy == STOP_NOTEBOOK else KEDA_PAUSED_REPLICAS
        old = (previous.get("annotations") or {}).get(key)
        annotations = {RELEASE_ANNOTATION: None}
        current = _annotations(target).get(key)
        if current is not None and (strategy == STOP_NOTEBOOK or current == "0"):
            annotations[key] = old
        elif current != old:
            notes.append(f"annotation {key} is {current!r} (changed since the release); left as is")
        resource = _resource(target, STOP_NOTEBOOK) if strategy == STOP_NOTEBOOK else _resource(target, PAUSE_KEDA)
        resumed = [Action("resume-notebook" if strategy == STOP_NOTEBOOK else "unpause-keda", resource, name,
                          namespace, reason, patch={"metadata": {"annotations": annotations}}, resource_version=rv,
                          before={"metadata": {"annotations": {key: current}}})]
        if strategy == PAUSE_KEDA and scale_target is not None and KEDA_PAUSED_REPLICAS in annotations:
            size = int(previous.get("replicas") or scaled_size(target))
            restored, more = restore_scale_target(scale_target, size, reason)
            resumed += restored
            notes += more
        elif strategy == PAUSE_KEDA and scale_target is None:
            notes.append("the ScaledObject's target was not found: only the pause is removed")
        return resumed, notes
    if strategy == SCALE_WORKERS:
        if target.get("kind") == "Job":
            patch = clear
            if int(spec.get("parallelism") or 0) == 0:
                patch = {**clear, "spec": {"parallelism": int(previous.get("parallelism") or 1)}}
            return [Action("restore-parallelism", _resource(target, SCALE_WORKERS), name, namespace, reason, patch=patch,
                           resource_version=rv, before={"spec": {"parallelism": spec.get("parallelism")}})], notes
        groups = _worker_groups(target)
        path = worker_groups_path(str(target.get("kind")))
        ops: list[JSON] = []
        wanted = previous.get("workerGroups") or {}
        for index, group in enumerate(groups):
            before = wanted.get(str(group.get("groupName")))
            if before is None:
                notes.append(f"worker group {group.get('groupName')} was not part of the release; left as is")
                continue
            if int(group.get("replicas") or 0) != 0:
                notes.append(f"worker group {group.get('groupName')} has {group.get('replicas')} replicas; left as is")
                continue
            ops.append({"op": "test", "path": f"{path}/{index}/groupName", "value": group.get("groupName")})
            ops.append({"op": "replace", "path": f"{path}/{index}/replicas", "value": before.get("replicas") or 0})
            if before.get("minReplicas") is not None:
                ops.append({"op": "replace" if "minReplicas" in group else "add",
                            "path": f"{path}/{index}/minReplicas", "value": before["minReplicas"]})
        ops.append({"op": "remove", "path": f"/metadata/annotations/{RELEASE_ANNOTATION.replace('/', '~1')}"})
        return [Action("restore-worker-groups", _resource(target, SCALE_WORKERS), name, namespace, reason, operation="json-patch",
                       patch=ops, resource_version=rv, before={"workerGroups": {str(g.get('groupName')): g.get('replicas') for g in groups}})
                ], notes
    return [], [f"release record strategy {strategy!r} is not one this version can undo"]
