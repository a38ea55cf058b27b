"""Who owns a Workload: the object a release acts on.

Kueue links a Workload to its job in three ways (facts/kueue.md):
- job-backed kinds (Job, RayCluster, RayJob, PyTorchJob, JobSet, ...): a CONTROLLER ownerReference;
- StatefulSet / LeaderWorkerSet: a non-controller ownerReference plus the annotations
  `kueue.x-k8s.io/job-owner-gvk` ("apps/v1, Kind=StatefulSet") and `job-owner-name`;
- plain pods and pod groups: ownerReferences to the Pod(s) (`kueue.x-k8s.io/is-group-workload`).

    owner_reference(workload_obj) -> OwnerRef | None     (pure)
    resolve_owners(kube, workload_obj) -> OwnerChain     (reads: climbs controllers upwards)

The chain climbs controllers (Pod -> ReplicaSet -> Deployment -> InferenceService, StatefulSet ->
Notebook) because the release must act on the TOP object: scaling a Deployment that a KServe
InferenceService or KEDA manages would be undone within seconds.

Knative. A Deployment controlled by a Knative Revision (KServe's Serverless mode, or any Knative
Service) is scaled by Knative's autoscaler, which also takes it to zero itself: knative/serving
makes each Revision's Deployment with a controller ownerReference to the Revision
(`pkg/reconciler/revision/resources/deploy.go` MakeDeployment) and the KPA sets its replicas
(`pkg/reconciler/autoscaling/kpa/scaler.go`). The chain stops there (a Revision is never read: no
grant is needed to know it) and `OwnerChain.knative` says so, so nothing gpuaas does fights Knative.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]
OWNER_KINDS = frozenset({"Pod", "ReplicaSet", "Deployment", "StatefulSet", "LeaderWorkerSet", "Job", "RayCluster",
                         "RayJob", "PyTorchJob", "Notebook", "InferenceService"})
"""The kinds an owner chain reads (a Workload's owners and the controllers above them, a pod's
owners). Any other kind ends the chain as unknown: the steps' RBAC grants `get` on exactly these."""
JOB_OWNER_GVK = "kueue.x-k8s.io/job-owner-gvk"
JOB_OWNER_NAME = "kueue.x-k8s.io/job-owner-name"
GROUP_ANNOTATION = "kueue.x-k8s.io/is-group-workload"
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KNATIVE_SERVING_GROUP = "serving.knative.dev"
KSERVE_DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"
KSERVE_KNATIVE_MODES = frozenset({"Serverless", "Knative"})
"""KServe's deployment modes served by Knative (`Serverless`, renamed `Knative`; kserve pkg/constants)."""


@dataclass(frozen=True)
class OwnerRef:
    api_version: str
    kind: str
    name: str
    uid: str | None = None
    via: str = "controller"
    """controller | annotations | pod | pod-group: how the link was found (for the record)."""

    def to_dict(self) -> JSON:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid, "via": self.via}


def parse_gvk(text: str) -> tuple[str, str] | None:
    """ "apps/v1, Kind=StatefulSet" (Go's GroupVersionKind.String()) -> ("apps/v1", "StatefulSet")."""
    if ", Kind=" not in text:
        return None
    group_version, kind = text.split(", Kind=", 1)
    group_version, kind = group_version.strip(), kind.strip()
    if not kind:
        return None
    return (group_version or "v1"), kind


def owner_reference(workload: Mapping[str, Any]) -> OwnerRef | None:
    """The Workload's owner as Kueue links it (pure; see module docstring for the precedence)."""
    meta = workload.get("metadata") or {}
    refs = [r for r in meta.get("ownerReferences") or [] if isinstance(r, Mapping)]
    controller = next((r for r in refs if r.get("controller")), None)
    if controller is not None:
        via = "pod" if controller.get("kind") == "Pod" else "controller"
        return OwnerRef(str(controller.get("apiVersion") or ""), str(controller.get("kind") or ""),
                        str(controller.get("name") or ""), controller.get("uid"), via)
    annotations = meta.get("annotations") or {}
    gvk = parse_gvk(str(annotations.get(JOB_OWNER_GVK) or ""))
    name = annotations.get(JOB_OWNER_NAME)
    if gvk and name:
        uid = next((r.get("uid") for r in refs if r.get("kind") == gvk[1] and r.get("name") == name), None)
        return OwnerRef(gvk[0], gvk[1], str(name), uid, "annotations")
    pods = [r for r in refs if r.get("kind") == "Pod"]
    if pods:
        via = "pod-group" if annotations.get(GROUP_ANNOTATION) == "true" or len(pods) > 1 else "pod"
        first = pods[0]
        return OwnerRef("v1", "Pod", str(first.get("name") or ""), first.get("uid"), via)
    if refs:
        first = refs[0]
        return OwnerRef(str(first.get("apiVersion") or ""), str(first.get("kind") or ""), str(first.get("name") or ""),
                        first.get("uid"), "reference")
    return None


@dataclass(frozen=True)
class OwnerChain:
    """The Workload's direct owner and the controllers above it, nearest first (live objects)."""

    reference: OwnerRef | None = None
    objects: tuple[JSON, ...] = ()
    missing: str | None = None
    """Why the chain stops early (owner deleted, kind unknown), for the record."""
    unknown_kinds: tuple[str, ...] = field(default_factory=tuple)

    @property
    def direct(self) -> JSON | None:
        return self.objects[0] if self.objects else None

    @property
    def top(self) -> JSON | None:
        """The topmost live owner: what a release acts on."""
        return self.objects[-1] if self.objects else None

    def find(self, kind: str) -> JSON | None:
        return next((o for o in self.objects if o.get("kind") == kind), None)

    def kinds(self) -> list[str]:
        return [str(o.get("kind")) for o in self.objects]

    @property
    def knative(self) -> str | None:
        """Why Knative, not gpuaas, scales this workload's server ("Deployment x is controlled by Knative
        Revision y"), or None. Pure: read from the chain's own objects."""
        for obj in self.objects:
            name = (obj.get("metadata") or {}).get("name")
            revision = knative_revision(obj)
            if revision is not None:
                return f"{obj.get('kind')} {name} is controlled by Knative Revision {revision}"
            if obj.get("kind") == "InferenceService" and kserve_mode(obj) in KSERVE_KNATIVE_MODES:
                return f"InferenceService {name} runs in KServe's {kserve_mode(obj)} (Knative) mode"
        return None

    def to_dict(self) -> JSON:
        return {"reference": self.reference.to_dict() if self.reference else None,
                "chain": [f"{o.get('kind')}/{(o.get('metadata') or {}).get('name')}" for o in self.objects],
                "missing": self.missing}


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((r for r in refs if isinstance(r, Mapping) and r.get("controller")), None)


def is_knative_revision(ref: Mapping[str, Any] | None) -> bool:
    """Whether an ownerReference names a Knative Serving Revision (serving.knative.dev/*)."""
    return bool(ref) and ref.get("kind") == "Revision" and \
        str(ref.get("apiVersion") or "").split("/")[0] == KNATIVE_SERVING_GROUP


def knative_revision(obj: Mapping[str, Any]) -> str | None:
    """The name of the Knative Revision that controls `obj`, else None."""
    ref = controller_of(obj)
    return str(ref.get("name")) if ref is not None and is_knative_revision(ref) else None


def kserve_mode(isvc: Mapping[str, Any]) -> str:
    """An InferenceService's deployment mode: its annotation (KServe's defaulting webhook sets it for the
    non-Knative modes), else its status (`status.deploymentMode`), else ''."""
    annotations = (isvc.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(KSERVE_DEPLOYMENT_MODE) or (isvc.get("status") or {}).get("deploymentMode") or "")


def resolve_owners(kube: Any, workload: Mapping[str, Any], *, limit: int = 4) -> OwnerChain:
    """Read the owner and climb its controllers (Pod -> ReplicaSet -> Deployment -> InferenceService)."""
    from steps.gateways.resources import for_kind

    ref = owner_reference(workload)
    if ref is None:
        return OwnerChain(None, (), "the Workload has no owner (created by hand)")
    namespace = (workload.get("metadata") or {}).get("namespace")
    objects: list[JSON] = []
    api_version, kind, name = ref.api_version, ref.kind, ref.name
    missing = None
    for _ in range(limit):
        resource = for_kind(api_version, kind) if kind in OWNER_KINDS else None
        if resource is None:
            missing = f"owner kind {kind} ({api_version}) is not one the product knows"
            break
        obj = kube.get(resource, name, namespace if resource.namespaced else None)
        if obj is None:
            missing = f"{kind} {namespace}/{name} no longer exists"
            break
        objects.append(obj)
        parent = controller_of(obj)
        if parent is None or is_knative_revision(parent):
            break  # a Knative Revision: Knative scales this object (OwnerChain.knative), nothing above is read
        api_version, kind, name = str(parent.get("apiVersion") or ""), str(parent.get("kind") or ""), \
            str(parent.get("name") or "")
        if kind == "Workload":
            break
    return OwnerChain(ref, tuple(objects), missing)
