"""What the Workload reactions observe, read once from the live cluster (never from the event alone).

    observe_workload(context, request) -> WorkloadState

The state carries the parsed event (for the record and to explain stale deliveries), the live
Workload (either API version), its owner chain, its tenant, the ScaledObjects that scale its owner,
and the release record gpuaas left on it or on the object it changed. Reactions plan from it purely.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from steps.events import ResourceEvent, parse_resource_event
from steps.model.owners import OwnerChain, resolve_owners
from steps.model.tenancy import Tenant, resolve_tenant
from steps.model.workload import Workload
from steps.plan import ReactionRequest

JSON = dict[str, Any]
MANAGED_BY = "gpuaas.io/managed-by"
MANAGED_BY_VALUE = "gpuaas"
WORKLOAD_LABEL_KEY = "gpuaas.io/workload"
OWNER_UID_LABEL = "gpuaas.io/owner-uid"
TENANT_LABEL = "gpuaas.io/tenant"
KEDA_KINDS = ("Deployment", "StatefulSet")


@dataclass
class WorkloadState:
    now: datetime
    event: ResourceEvent | None
    workload: Workload | None
    owners: OwnerChain = field(default_factory=OwnerChain)
    tenant_info: Tenant = field(default_factory=lambda: Tenant(None, source="unknown"))
    scaled_objects: list[JSON] = field(default_factory=list)
    """ScaledObjects in the namespace whose scaleTargetRef is the owner (ours or the tenant's)."""
    managed_scaled_objects: list[JSON] = field(default_factory=list)
    """Every ScaledObject gpuaas created in the namespace (label gpuaas.io/managed-by=gpuaas)."""
    autoscalers: list[JSON] = field(default_factory=list)
    """HorizontalPodAutoscalers on the KEDA target that no ScaledObject owns (someone else autoscales it)."""
    scale_target: JSON | None = None
    """When a ScaledObject carries the release record (pause-keda): the Deployment/StatefulSet it scales."""
    release: JSON | None = None
    release_on: JSON | None = None
    """The live object carrying the release record (the Workload, or the object the release changed)."""
    prometheus_url: str = ""
    keda_authentication: str = ""
    """`Kind/name` of the (Cluster)TriggerAuthentication KEDA's Prometheus scaler uses (GPUAAS_KEDA_AUTHENTICATION:
    OpenShift's thanos-querier wants a bearer token); empty = none."""
    predictor: JSON | None = None
    """The Deployment a raw-deployment InferenceService runs (when the Workload is owned by the ISVC itself)."""
    leftovers: list[JSON] = field(default_factory=list)
    """Objects that outlive the Workload and still hold GPU workers (a RayJob's kept RayCluster)."""
    extra: JSON = field(default_factory=dict)
    run_id: str = ""
    """The Argo run observing (StepContext.run_id): a release record naming it was made by this run."""
    delivery: Any = None
    """steps.delivery.Delivery: the transition this run handles, and whether it was handled already."""

    # -- what run_planned and the record read ----------------------------------------------------
    @property
    def workload_object(self) -> JSON | None:
        return dict(self.workload.obj) if self.workload is not None else None

    @property
    def workload_ref(self) -> JSON | None:
        if self.workload is not None:
            return self.workload.ref()
        if self.event is not None and self.event.name:
            return {"namespace": self.event.namespace, "name": self.event.name, "uid": self.event.uid}
        return None

    @property
    def tenant(self) -> str | None:
        return self.tenant_info.cluster_queue

    @property
    def cohort(self) -> str | None:
        return self.tenant_info.cohort

    @property
    def event_summary(self) -> JSON | None:
        return self.event.summary() if self.event is not None else None

    def keda_target(self) -> JSON | None:
        """The Deployment/StatefulSet KEDA would scale (None for Notebooks: their controller owns replicas;
        None for Knative-scaled servers: Knative's autoscaler owns them and scales them to zero itself)."""
        if "Notebook" in self.owners.kinds() or self.owners.knative:
            return None
        for kind in KEDA_KINDS:
            found = self.owners.find(kind)
            if found is not None:
                return found
        return self.predictor

    def event_notes(self) -> list[str]:
        """Why the event may not describe the live Workload (stale, replaced, duplicated)."""
        notes: list[str] = []
        if self.event is None:
            return notes
        if self.workload is None:
            notes.append(f"the event's Workload {self.event.namespace}/{self.event.name} no longer exists")
        elif self.event.uid and self.workload.uid and self.event.uid != self.workload.uid:
            notes.append(f"the event is about an earlier Workload with this name (uid {self.event.uid}); "
                         f"the live one (uid {self.workload.uid}) was created later and is judged on its own")
        elif self.event.resource_version and self.workload.resource_version \
                and self.event.resource_version != self.workload.resource_version:
            notes.append(f"the event shows resourceVersion {self.event.resource_version}, the live Workload is at "
                         f"{self.workload.resource_version}: the live state is what counts")
        return notes

    def observed(self) -> JSON:
        wl = self.workload
        return {
            "workload": None if wl is None else {
                "apiVersion": wl.api_version, "status": wl.status(), "active": wl.active,
                "finishedReason": wl.finished_reason, "evicted": (wl.evicted.reason if wl.evicted else None),
                "admission": wl.admission.to_dict() if wl.admission else None,
                "gpusAdmitted": float(wl.gpus_admitted), "resourceVersion": wl.resource_version},
            "owners": self.owners.to_dict(),
            "tenant": self.tenant_info.to_dict(),
            "scaledObjects": [(so.get("metadata") or {}).get("name") for so in self.scaled_objects],
            "autoscalers": [(hpa.get("metadata") or {}).get("name") for hpa in self.autoscalers],
            "release": self.release,
            "leftovers": [f"{o.get('kind')}/{(o.get('metadata') or {}).get('name')}" for o in self.leftovers],
            "eventNotes": self.event_notes(),
            **self.extra,
        }


def _get_workload(kube: Any, namespace: str, name: str, event: ResourceEvent | None) -> JSON | None:
    from steps.gateways.resources import WORKLOAD, WORKLOAD_V1BETA1

    prefer_v1beta1 = event is not None and str(event.body.get("apiVersion", "")).endswith("/v1beta1")
    order = (WORKLOAD_V1BETA1, WORKLOAD) if prefer_v1beta1 else (WORKLOAD, WORKLOAD_V1BETA1)
    for resource in order:
        obj = kube.get(resource, name, namespace)
        if obj is not None:
            obj.setdefault("apiVersion", resource.api_version)
            obj.setdefault("kind", "Workload")
            return obj
    return None


def observe_workload(context: Any, request: ReactionRequest) -> WorkloadState:
    """Read the Workload and everything around it. Names come from the parameters, else the event."""
    from steps.gateways.resources import HORIZONTAL_POD_AUTOSCALER, SCALED_OBJECT
    from steps.strategies import read_release

    event = parse_resource_event(request.event)
    state = WorkloadState(now=context.now(), event=event, workload=None,
                          prometheus_url=context.environ.get("GPUAAS_PROMETHEUS_URL")
                          or "http://prometheus-operated.monitoring.svc:9090",
                          keda_authentication=context.environ.get("GPUAAS_KEDA_AUTHENTICATION") or "",
                          run_id=getattr(context, "run_id", ""))
    kube = context.kube
    obj = _get_workload(kube, request.namespace, request.workload, event)
    state.delivery = _delivery(context, event, obj, state.now, state.run_id)
    if obj is None:
        return state
    workload = Workload(obj)
    state.workload = workload
    state.owners = resolve_owners(kube, obj)
    state.tenant_info = resolve_tenant(kube, obj)
    isvc = state.owners.find("InferenceService")
    if isvc is not None and state.owners.find("Deployment") is None:
        state.predictor = _predictor_of(kube, isvc)
    all_so = kube.list(SCALED_OBJECT, workload.namespace)
    state.managed_scaled_objects = [so for so in all_so
                                    if ((so.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY)
                                    == MANAGED_BY_VALUE]
    target = state.keda_target()
    if target is not None:
        state.scaled_objects = [so for so in all_so if targets(so, target)]
        state.autoscalers = [hpa for hpa in kube.list(HORIZONTAL_POD_AUTOSCALER, workload.namespace)
                             if targets(hpa, target) and not any(
                                 ref.get("kind") == "ScaledObject"
                                 for ref in (hpa.get("metadata") or {}).get("ownerReferences") or [])]
    record = read_release(obj)
    if record is not None:
        state.release, state.release_on = record, obj
        target = _release_target(kube, workload.namespace, record)
        if target is not None and read_release(target) is not None:
            # The Workload only mirrors the record: the object the release changed is what resume restores.
            state.release, state.release_on = read_release(target), target
    else:
        for candidate in [*state.owners.objects, *state.scaled_objects]:
            record = read_release(candidate)
            if record is not None:
                state.release, state.release_on = record, candidate
                break
    if state.release_on is not None and state.release_on.get("kind") == "ScaledObject":
        state.scale_target = scale_target_of(kube, state.release_on)
    return state


def _delivery(context: Any, event: ResourceEvent | None, obj: JSON | None, now: datetime, run: str) -> Any:
    """How this run's delivery relates to the live Workload (steps.delivery), for the reactions that
    follow a Workload transition; None for the others."""
    from steps.delivery import TRACKED, delivery_via, judge_delivery

    reaction = getattr(context, "reaction", "")
    if reaction not in TRACKED:
        return None
    via = delivery_via(event.context if event is not None else None, event is not None)
    reason = None
    if event is not None and event.kind == "SWEEP":
        reason = event.extra.get("reason") if isinstance(event.extra.get("reason"), str) else None
    return judge_delivery(reaction, via=via, live=obj, delivered_body=event.body if event is not None else None,
                          now=now, run=run, sweep_reason=reason)


def scale_target_of(kube: Any, scaled_object: JSON) -> JSON | None:
    """The live object a ScaledObject's scaleTargetRef names (same namespace), or None."""
    from steps.gateways.resources import for_kind

    ref = (scaled_object.get("spec") or {}).get("scaleTargetRef") or {}
    resource = for_kind(str(ref.get("apiVersion") or "apps/v1"), str(ref.get("kind") or "Deployment"))
    if resource is None or not ref.get("name"):
        return None
    found = kube.get(resource, str(ref["name"]), (scaled_object.get("metadata") or {}).get("namespace"))
    if found is not None:
        found.setdefault("apiVersion", resource.api_version)
        found.setdefault("kind", resource.kind)
    return found


def targets(autoscaler: JSON, target: JSON) -> bool:
    """Whether an HPA's (or ScaledObject's) scaleTargetRef names `target` (same namespace)."""
    ref = (autoscaler.get("spec") or {}).get("scaleTargetRef") or {}
    return (ref.get("name") == (target.get("metadata") or {}).get("name")
            and ref.get("kind", "Deployment") == target.get("kind"))


def _release_target(kube: Any, namespace: str, record: JSON) -> JSON | None:
    """The live object a release record names (None when it is the Workload itself, unknown or gone)."""
    from steps.gateways.resources import for_kind
    from steps.strategies import STRATEGY_KINDS

    target = record.get("target") or {}
    if not isinstance(target, dict) or target.get("kind") in (None, "Workload"):
        return None
    if target.get("kind") not in STRATEGY_KINDS.get(str(record.get("strategy")), ()):
        return None  # a record naming a kind its strategy never changes is not followed (nor trusted)
    resource = for_kind(str(target.get("apiVersion") or ""), str(target.get("kind")))
    if resource is None or not target.get("name"):
        return None
    return kube.get(resource, str(target["name"]), namespace if resource.namespaced else None)


def predictor_names(isvc: JSON) -> list[str]:
    """The names KServe gives the predictor Deployment of a raw-deployment InferenceService, most likely first
    (pure). kserve pkg/constants PredictorServiceName: `<isvc>-<spec.predictor.name>-predictor` when the
    predictor is named (KServe >= 0.20, canary rollouts), else `<isvc>-predictor`; KServe <= 0.15 kept
    `<isvc>-predictor-default` for a service made before the rename (`DefaultPredictorServiceName`, chosen when
    its Service of that name existed; removed in 0.16). The raw-deployment reconciler names the Deployment after
    the component (reconcilers/deployment createRawDefaultDeployment: ObjectMeta is the component's). In
    Serverless (Knative) mode Knative names it after the Revision, `<isvc>-predictor-00001-deployment`, and its
    controller is the Revision: none of these names, and the owner check below, finds it (it is Knative's to
    scale: steps.model.owners)."""
    meta = isvc.get("metadata") or {}
    name = str(meta.get("name") or "")
    if not name:
        return []
    named = str(((isvc.get("spec") or {}).get("predictor") or {}).get("name") or "")
    return [*([f"{name}-{named}-predictor"] if named else []), f"{name}-predictor", f"{name}-predictor-default"]


def _predictor_of(kube: Any, isvc: JSON) -> JSON | None:
    """The Deployment KServe created for a raw-deployment InferenceService: the first of `predictor_names` that
    exists and whose controller is this InferenceService. Read by name (get), never by listing the namespace's
    Deployments: another Deployment the InferenceService controls (its transformer, explainer, a canary, a
    multi-node worker group) is not its predictor, and gpuaas-steps needs no `list deployments`."""
    from steps.gateways.resources import DEPLOYMENT

    meta = isvc.get("metadata") or {}
    for name in predictor_names(isvc):
        deployment = kube.get(DEPLOYMENT, name, meta.get("namespace"))
        if deployment is None:
            continue
        refs = (deployment.get("metadata") or {}).get("ownerReferences") or []
        if any(r.get("controller") and (r.get("uid") == meta.get("uid")
                                        or (r.get("kind") == "InferenceService" and r.get("name") == meta.get("name")))
               for r in refs):
            deployment.setdefault("apiVersion", DEPLOYMENT.api_version)
            deployment.setdefault("kind", "Deployment")
            return deployment
    return None
