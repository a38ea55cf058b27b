"""idle-alerts: split one Alertmanager group into one on-idle item per idle Kueue Workload.

Alertmanager POSTs a GROUP (webhook version 4): several alerts, some perhaps resolved or for
another alert name, and several pods of one workload (each Ray worker fires on its own). The
`gpuaas-on-idle` template fans out one child per item this step writes to the `alerts` output:

    [{"namespace": "team-a", "workload": "raycluster-demo-1a2b3", "pod": "demo-worker-x7k2p",
      "alert": {"labels": {...}, "startsAt": ..., "fingerprint": ..., "status": "firing"}}]

so each child runs under its own workload mutex with its own record. Only FIRING
`GPUWorkloadIdle` alerts become items; everything else is listed in the record with the reason
it was skipped. Pods resolve to their Workload from the live cluster (owner chain), and a
workload with several idle pods yields ONE item: on-idle looks at all its pods anyway.

The pod -> Workload resolution lives here and is shared with on-idle, which re-resolves (an
item may be minutes old by the time its child runs).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

ALERT_NAME = "GPUWorkloadIdle"
WORKLOAD_NAMESPACE_LABEL = "workload_namespace"
"""The label the product's GPUWorkloadIdle rule puts the workload's namespace in (its `namespace` is the
product's own: gpuaas/manifests/observability.py WORKLOAD_NAMESPACE_LABEL)."""
REACTION = "idle-alerts"
JSON = dict[str, Any]

# Pod labels Kueue and the job kinds put on pods; used only when owner references are missing.
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
JOB_OWNER_NAME = "kueue.x-k8s.io/job-owner-name"
JOB_OWNER_GVK = "kueue.x-k8s.io/job-owner-gvk"


class Gateway(Protocol):
    """The part of steps.gateways.kubernetes.KubernetesGateway these functions use."""

    def get(self, resource: Any, name: str, namespace: str | None = None) -> JSON | None: ...
    def list(self, resource: Any, namespace: str | None = None, label_selector: str | None = None) -> list[JSON]: ...


# -- the event -----------------------------------------------------------------------------------
def alertmanager_body(event: Any) -> JSON:
    """The Alertmanager v4 body inside whatever the Sensor delivered.

    Accepts every shape `steps.events.unwrap` does (a CloudEvent in structured mode, the whole Argo
    Events event `{"context", "data"}` with data as an object, JSON text or base64), then the
    webhook event data `{"header", "body", "metadata"}` or the bare Alertmanager body. The raw dict
    is kept (groupKey, receiver, truncatedAlerts go to the record). Raises RejectedInput naming the field.
    """
    from steps.events import unwrap
    from steps.plan import RejectedInput

    _context, data = unwrap(event)
    if data is None:
        raise RejectedInput("event", "the Alertmanager webhook event the Sensor delivered", "an empty value",
                            "the Sensor's trigger must pass the whole event (no dataKey) as parameter `event`")
    if isinstance(data, dict) and "body" in data and "alerts" not in data:
        body = data["body"]
        if isinstance(body, (str, bytes)):
            from steps.json_text import load

            body = load("event.data.body", body, "the webhook EventSource passes Alertmanager's JSON body")
        data = body
    if not isinstance(data, dict):
        raise RejectedInput("event.data.body", "an Alertmanager webhook object", type(data).__name__)
    if not isinstance(data.get("alerts"), list):
        raise RejectedInput("event.data.body.alerts", "the list of alerts of an Alertmanager webhook (version 4)",
                            f"{type(data.get('alerts')).__name__} (keys present: {sorted(data)[:12]})",
                            "check that the Sensor passes the whole webhook event as `event`")
    version = str(data.get("version", ""))
    if version and version != "4":
        raise RejectedInput("event.data.body.version", '"4" (Alertmanager webhook)', repr(version))
    return data


# -- pod -> Workload --------------------------------------------------------------------------------
def _resource_for(api_version: str, kind: str) -> Any | None:
    """The Resource constant for an ownerReference (None for kinds the product does not know)."""
    from steps.gateways import resources
    from steps.model.owners import OWNER_KINDS

    if kind not in OWNER_KINDS:
        return None
    group = api_version.split("/")[0] if "/" in api_version else ""
    for value in vars(resources).values():
        if isinstance(value, resources.Resource) and value.kind == kind and value.group == group:
            return value
    return None


@dataclass(frozen=True)
class OwnerLink:
    """One object of a pod's owner chain (the pod itself first)."""

    api_version: str
    kind: str
    name: str
    uid: str


@dataclass(frozen=True)
class PodWorkload:
    """Where a pod belongs: its owner chain and the Kueue Workload that admitted it (if any)."""

    namespace: str
    pod: str
    pod_found: bool
    chain: tuple[OwnerLink, ...] = ()
    workload: JSON | None = None
    reason: str = ""
    """Why there is no workload, as a sentence for the record."""

    @property
    def workload_name(self) -> str | None:
        return (self.workload or {}).get("metadata", {}).get("name")


def owner_chain(kube: Gateway, obj: JSON, *, limit: int = 5) -> tuple[OwnerLink, ...]:
    """`obj` and its controllers upwards (Pod -> ReplicaSet -> Deployment, Pod -> Job -> ...).

    Stops at an owner the product has no Resource for (its link is still included, so a Workload
    owned by it is found) or one that no longer exists.
    """
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    links = [OwnerLink(obj.get("apiVersion", "v1"), obj.get("kind", "Pod"), meta.get("name", ""), meta.get("uid", ""))]
    current = obj
    for _ in range(limit):
        refs = (current.get("metadata") or {}).get("ownerReferences") or []
        ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
        if not ref:
            break
        links.append(OwnerLink(ref.get("apiVersion", ""), ref.get("kind", ""), ref.get("name", ""), ref.get("uid", "")))
        resource = _resource_for(ref.get("apiVersion", ""), ref.get("kind", ""))
        if resource is None:
            break
        parent = kube.get(resource, ref.get("name", ""), namespace if resource.namespaced else None)
        if parent is None:
            break
        current = parent
    return tuple(links)


def workload_for_chain(workloads: Iterable[JSON], chain: tuple[OwnerLink, ...]) -> JSON | None:
    """The Workload owned by the nearest link of the chain (pure).

    Matches ownerReference uids (job-backed workloads, plain pods, pod groups), then Kueue's
    `job-owner-name`/`job-owner-gvk` annotations (StatefulSet, LeaderWorkerSet).
    """
    workloads = list(workloads)
    for link in chain:
        for wl in workloads:
            refs = (wl.get("metadata") or {}).get("ownerReferences") or []
            if link.uid and any(r.get("uid") == link.uid for r in refs):
                return wl
        for wl in workloads:
            annotations = (wl.get("metadata") or {}).get("annotations") or {}
            gvk = annotations.get(JOB_OWNER_GVK, "")
            if annotations.get(JOB_OWNER_NAME) == link.name and gvk.endswith(f"Kind={link.kind}"):
                return wl
            if annotations.get(JOB_OWNER_NAME) == link.name and gvk.split(",")[-1].strip() == link.kind:
                return wl
    return None


def resolve_pod_workload(kube: Gateway, namespace: str, pod_name: str,
                         workloads: list[JSON] | None = None) -> PodWorkload:
    """Pod -> owner chain -> Workload, from the live cluster."""
    from steps.gateways.resources import POD, WORKLOAD

    pod = kube.get(POD, pod_name, namespace)
    if pod is None:
        return PodWorkload(namespace, pod_name, False,
                           reason=f"pod {namespace}/{pod_name} no longer exists (released, finished or rescheduled)")
    chain = owner_chain(kube, pod)
    if workloads is None:
        workloads = kube.list(WORKLOAD, namespace)
    workload = workload_for_chain(workloads, chain)
    if workload is None:
        group = ((pod.get("metadata") or {}).get("labels") or {}).get(POD_GROUP_LABEL)
        if group:
            workload = next((w for w in workloads if (w.get("metadata") or {}).get("name") == group), None)
    if workload is None:
        path = " -> ".join(f"{link.kind}/{link.name}" for link in chain)
        return PodWorkload(namespace, pod_name, True, chain,
                           reason=f"pod {namespace}/{pod_name} belongs to no Kueue Workload (owner chain {path})")
    return PodWorkload(namespace, pod_name, True, chain, workload)


def pods_of_workload(kube: Gateway, workload: JSON) -> list[str]:
    """Names of the running pods whose owner chain reaches `workload` (all its pods, for metrics)."""
    return sorted(pod_gpus_of_workload(kube, workload))


def pod_gpus_of_workload(kube: Gateway, workload: JSON) -> dict[str, int]:
    """{pod name: GPUs it requests} for the live pods whose owner chain reaches `workload`: what the
    idle decision needs evidence for (every GPU of every pod)."""
    from steps.gateways.resources import POD
    from steps.model.workload import template_request

    meta = workload.get("metadata") or {}
    namespace = meta.get("namespace")
    owner_uids = {r.get("uid") for r in meta.get("ownerReferences") or []}
    out: dict[str, int] = {}
    for pod in kube.list(POD, namespace):
        if ((pod.get("status") or {}).get("phase") or "Running") in ("Succeeded", "Failed"):
            continue
        name = (pod.get("metadata") or {}).get("name", "")
        chain = owner_chain(kube, pod)
        if name and (any(link.uid in owner_uids for link in chain)
                     or workload_for_chain([workload], chain) is not None):
            out[name] = int(template_request({"spec": pod.get("spec") or {}}))
    return out


# -- the split (pure) ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class IdleAlert:
    """One alert of the group, as much of it as on-idle needs."""

    status: str
    alertname: str
    namespace: str
    pod: str
    fingerprint: str
    starts_at: str
    labels: Mapping[str, str] = field(default_factory=dict)
    episode: str = ""
    """The workload's idle episode (steps.delivery.idle_episode), set by idle-alerts on the item it hands
    to on-idle: Alertmanager's re-sends of one episode are recorded as repeats and change nothing."""

    @classmethod
    def from_alert(cls, alert: Any, where: str = "alert") -> IdleAlert:
        """One Alertmanager alert, validated; RejectedInput names the field (`where` is its path)."""
        from steps.names import is_dns_label, is_dns_subdomain
        from steps.plan import RejectedInput

        if not isinstance(alert, Mapping):
            raise RejectedInput(where, "an object (one Alertmanager alert)", type(alert).__name__)
        raw_labels = alert.get("labels")
        if not isinstance(raw_labels, Mapping):
            raise RejectedInput(f"{where}.labels", "an object of text labels", type(raw_labels).__name__)
        for key, value in raw_labels.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise RejectedInput(f"{where}.labels.{key}", "text (Alertmanager label values are strings)",
                                    type(value).__name__)
        labels = dict(raw_labels)
        for field_name in ("status", "fingerprint", "startsAt", "episode"):
            if alert.get(field_name) is not None and not isinstance(alert.get(field_name), str):
                raise RejectedInput(f"{where}.{field_name}", "text", type(alert.get(field_name)).__name__)
        # The product's rules label the alert with the PRODUCT's namespace (`namespace`, which the Prometheus
        # Operator's OnNamespace matcher and OpenShift's enforcement need) and the workload's in
        # `workload_namespace`; an alert of another rule that has only `namespace` names the workload's.
        key = WORKLOAD_NAMESPACE_LABEL if WORKLOAD_NAMESPACE_LABEL in labels else "namespace"
        namespace, pod = labels.get(key, ""), labels.get("pod", "")
        if namespace and not is_dns_label(namespace):
            raise RejectedInput(f"{where}.labels.{key}", "a namespace name (ASCII lower-case letters, digits, "
                                "'-', at most 63)", namespace, "check the alert rule's `by (namespace, pod)`")
        if pod and not is_dns_subdomain(pod):
            raise RejectedInput(f"{where}.labels.pod", "a pod name (ASCII lower-case letters, digits, '-', '.')",
                                pod, "check the alert rule's `by (namespace, pod)`")
        return cls(status=alert.get("status") or "", alertname=labels.get("alertname", ""),
                   namespace=namespace, pod=pod, fingerprint=alert.get("fingerprint") or "",
                   starts_at=alert.get("startsAt") or "", labels=labels, episode=alert.get("episode") or "")

    def as_item(self) -> JSON:
        """The item's `alert`: an OBJECT, which Argo hands to the child's `{{item.alert}}` as compact JSON.
        As JSON text it would arrive with its quotes escaped (Argo v4.0.5 Item.String: a string value
        of an item is JSON-encoded, see engine.expressions.item_scope) and on-idle could not read it."""
        item = {"fingerprint": self.fingerprint, "labels": dict(sorted(self.labels.items())),
                "startsAt": self.starts_at, "status": self.status}
        if self.episode:
            item["episode"] = self.episode
        return item

    def as_param(self) -> str:
        """The `alert` parameter of the on-idle child (what `{{item.alert}}` becomes): compact JSON."""
        return json.dumps(self.as_item(), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Skipped:
    alert: IdleAlert
    reason: str

    def as_dict(self) -> JSON:
        return {"namespace": self.alert.namespace, "pod": self.alert.pod, "alertname": self.alert.alertname,
                "status": self.alert.status, "fingerprint": self.alert.fingerprint, "reason": self.reason}


@dataclass(frozen=True)
class Rejected:
    """A malformed alert of the group: left out, named in the record, the rest still fan out."""

    index: int
    reason: str

    def as_dict(self) -> JSON:
        return {"index": self.index, "reason": self.reason}


@dataclass(frozen=True)
class AlertSplit:
    items: tuple[JSON, ...]
    skipped: tuple[Skipped, ...]


def candidate_alerts(body: Mapping[str, Any]) -> tuple[list[IdleAlert], list[Skipped], list[Rejected]]:
    """Firing GPUWorkloadIdle alerts with a namespace and a pod; the rest with reasons; malformed
    alerts rejected one by one (pure). One bad alert never fails the group."""
    from steps.plan import RejectedInput

    keep: list[IdleAlert] = []
    skipped: list[Skipped] = []
    rejected: list[Rejected] = []
    seen: set[tuple[str, str]] = set()
    for index, raw in enumerate(body.get("alerts") or []):
        try:
            alert = IdleAlert.from_alert(raw, f"event.data.body.alerts[{index}]")
        except RejectedInput as error:
            rejected.append(Rejected(index, str(error)))
            continue
        if alert.alertname != ALERT_NAME:
            skipped.append(Skipped(alert, f"alert {alert.alertname or '(no alertname)'} is not {ALERT_NAME}"))
        elif alert.status != "firing":
            skipped.append(Skipped(alert, f"alert status is {alert.status or '(none)'}, not firing"))
        elif not alert.namespace or not alert.pod:
            skipped.append(Skipped(alert, "alert has no namespace/pod labels (check the rule's `by (namespace, pod)`)"))
        elif (alert.namespace, alert.pod) in seen:
            skipped.append(Skipped(alert, f"duplicate alert for pod {alert.namespace}/{alert.pod} in the same group"))
        else:
            seen.add((alert.namespace, alert.pod))
            keep.append(alert)
    return keep, skipped, rejected


def split_alerts(alerts: list[IdleAlert], resolved: Mapping[tuple[str, str], PodWorkload]) -> AlertSplit:
    """One item per Workload, given each alert's resolution (pure). Each item's alert carries the
    workload's idle episode (the earliest startsAt of its firing alerts in the group); a Workload whose
    marker says that episode was acted on already gets no item: a repeat, recorded as such."""
    from dataclasses import replace

    from steps.delivery import idle_episode, read_marker

    items: list[JSON] = []
    skipped: list[Skipped] = []
    first_for: dict[tuple[str, str], IdleAlert] = {}
    starts: dict[tuple[str, str], list[str]] = {}
    for alert in alerts:
        where = resolved.get((alert.namespace, alert.pod))
        if where is not None and where.workload_name is not None:
            starts.setdefault((alert.namespace, where.workload_name), []).append(alert.starts_at)
    for alert in alerts:
        where = resolved.get((alert.namespace, alert.pod))
        if where is None or where.workload_name is None:
            skipped.append(Skipped(alert, where.reason if where else "pod was not resolved"))
            continue
        key = (alert.namespace, where.workload_name)
        if key in first_for:
            skipped.append(Skipped(alert, f"workload {key[0]}/{key[1]} already has an item (pod {first_for[key].pod}); "
                                          "on-idle checks all of its pods"))
            continue
        first_for[key] = alert
        episode = idle_episode(starts.get(key, [])) or ""
        marker = read_marker(where.workload, "on-idle")
        if episode and marker is not None and marker.transition == episode:
            skipped.append(Skipped(alert, f"repeat of idle episode {episode} of workload {key[0]}/{key[1]}: acted on "
                                          f"by {marker.describe()}; Alertmanager re-sent it, nothing changes"))
            continue
        items.append({"namespace": alert.namespace, "workload": where.workload_name, "pod": alert.pod,
                      "alert": replace(alert, episode=episode).as_item()})
    return AlertSplit(tuple(items), tuple(skipped))


# -- observe (edge) -------------------------------------------------------------------------------
@dataclass(frozen=True)
class IdleAlertsState:
    """The group and where each candidate pod belongs, read from the live cluster."""

    body: Mapping[str, Any]
    candidates: tuple[IdleAlert, ...]
    skipped: tuple[Skipped, ...]
    resolved: Mapping[tuple[str, str], PodWorkload]
    rejected: tuple[Rejected, ...] = ()

    def observed(self) -> JSON:
        return {
            "groupKey": _text(self.body.get("groupKey")), "status": _text(self.body.get("status")),
            "receiver": _text(self.body.get("receiver")), "alerts": len(self.body.get("alerts") or []),
            "truncatedAlerts": self.body.get("truncatedAlerts", 0) if isinstance(
                self.body.get("truncatedAlerts", 0), int) else None,
            "pods": {f"{ns}/{pod}": (r.workload_name or r.reason) for (ns, pod), r in self.resolved.items()},
            "rejected": [r.as_dict() for r in self.rejected],
        }


def _text(value: Any) -> str | None:
    """A group field for the record: text as is, anything else dropped (the body is untrusted input)."""
    return value if isinstance(value, str) else None


def observe(kube: Gateway, event: Any) -> IdleAlertsState:
    """Parse the group (RejectedInput on bad input) and resolve each candidate pod.

    Workloads are listed once per namespace, not once per alert: a group can hold dozens of pods.
    """
    from steps.gateways.resources import WORKLOAD

    body = alertmanager_body(event)
    candidates, skipped, rejected = candidate_alerts(body)
    by_namespace: dict[str, list[JSON]] = {}
    resolved: dict[tuple[str, str], PodWorkload] = {}
    for alert in candidates:
        if alert.namespace not in by_namespace:
            by_namespace[alert.namespace] = kube.list(WORKLOAD, alert.namespace)
        resolved[(alert.namespace, alert.pod)] = resolve_pod_workload(
            kube, alert.namespace, alert.pod, by_namespace[alert.namespace])
    return IdleAlertsState(body, tuple(candidates), tuple(skipped), resolved, tuple(rejected))


def plan(state: IdleAlertsState) -> AlertSplit:
    """The items for the fan-out, and every alert left out with its reason (pure)."""
    split = split_alerts(list(state.candidates), state.resolved)
    return AlertSplit(split.items, state.skipped + split.skipped)


# -- the step (steps.reactions convention) ----------------------------------------------------------
def step(context: Any) -> Any:
    """`python -m steps idle-alerts FILE`: write the `alerts` output for the on-idle fan-out.

    Outcome `applied` when at least one item is handed to the fan-out (that hand-over is this
    step's only effect: it writes nothing to the cluster), `no-op` when none is.
    """
    import time

    from steps.plan import Outcome, ReactionRequest, RejectedInput, StepReport

    started = time.perf_counter()
    request = ReactionRequest.from_params(REACTION, context.params)
    if not request.event.strip():
        if request.namespace and request.workload:
            return _hand_submitted(context, request, started)
        raise RejectedInput("event", "the Alertmanager webhook event the Sensor delivered", "an empty value",
                            "pass the whole webhook event, or submit by hand with namespace and workload")
    t = time.perf_counter()
    state = observe(context.kube, request.event)
    observe_s = time.perf_counter() - t
    t = time.perf_counter()
    split = plan(state)
    plan_s = time.perf_counter() - t
    actions = [{"action": "fan-out", "target": {"kind": "Workload", "namespace": i["namespace"], "name": i["workload"]},
                "reason": f"firing {ALERT_NAME} for pod {i['namespace']}/{i['pod']}"} for i in split.items]
    reasons = [f"skipped {s.alert.namespace or '?'}/{s.alert.pod or '?'}: {s.reason}" for s in split.skipped]
    reasons += [f"rejected alert {r.index}: {r.reason}" for r in state.rejected]
    if not split.items:
        reasons.insert(0, "no firing GPUWorkloadIdle alert resolves to a Kueue Workload")
    alerts = state.body.get("alerts") or []
    if split.items:
        outcome = Outcome.APPLIED
    elif state.rejected and len(state.rejected) == len(alerts):
        outcome = Outcome.REJECTED_INPUT  # nothing in the group was a readable alert
    else:
        outcome = Outcome.NO_OP
    return StepReport(
        reaction=REACTION, outcome=outcome, request=request, errors=[r.reason for r in state.rejected],
        plan={"actions": actions, "reasons": reasons},
        results=[{**a, "before": None, "after": None, "result": "applied"} for a in actions],
        observed={**state.observed(), "skipped": [s.as_dict() for s in split.skipped]},
        metrics={"alerts": len(state.body.get("alerts") or []), "items": len(split.items)},
        timings={"observeSeconds": observe_s, "planSeconds": plan_s, "applySeconds": 0.0,
                 "totalSeconds": time.perf_counter() - started},
        event_summary={"groupKey": _text(state.body.get("groupKey")), "status": _text(state.body.get("status")),
                       "receiver": _text(state.body.get("receiver"))},
        outputs={"alerts": json.dumps(list(split.items), separators=(",", ":"))},
    )


def _hand_submitted(context: Any, request: Any, started: float) -> Any:
    """Submitted by hand with namespace/workload and no event: one item for that Workload (if it exists)."""
    import time

    from steps.gateways.resources import WORKLOAD
    from steps.plan import Outcome, StepReport

    t = time.perf_counter()
    workload = context.kube.get(WORKLOAD, request.workload, request.namespace)
    observe_s = time.perf_counter() - t
    target = {"kind": "Workload", "namespace": request.namespace, "name": request.workload}
    timings = {"observeSeconds": observe_s, "planSeconds": 0.0, "applySeconds": 0.0,
               "totalSeconds": time.perf_counter() - started}
    if workload is None:
        return StepReport(reaction=REACTION, outcome=Outcome.NO_OP, request=request,
                          plan={"actions": [], "reasons": [f"Workload {request.namespace}/{request.workload} not found"]},
                          observed={"handSubmitted": True, "workloadFound": False}, timings=timings,
                          outputs={"alerts": "[]"})
    item = {"namespace": request.namespace, "workload": request.workload, "pod": "", "alert": ""}
    action = {"action": "fan-out", "target": target, "reason": "submitted by hand (no alert): on-idle checks this Workload"}
    return StepReport(reaction=REACTION, outcome=Outcome.APPLIED, request=request,
                      plan={"actions": [action], "reasons": ["hand submission with namespace and workload"]},
                      results=[{**action, "before": None, "after": None, "result": "applied"}],
                      observed={"handSubmitted": True, "workloadFound": True}, metrics={"alerts": 0, "items": 1},
                      timings=timings, outputs={"alerts": json.dumps([item], separators=(",", ":"))})
