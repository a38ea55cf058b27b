"""The EventBus the product's EventSources and Sensors share: do its servers run?

Argo Events v1.9.11 marks a native bus `Deployed=True` ("JetStream is deployed") as soon as its
StatefulSet exists, whether or not a pod ever starts (pkg/reconciler/eventbus/installer/jetstream.go).
So the evidence is the StatefulSet's pods: a pod that is not Ready is named with the reason (the
scheduler's message, its unbound claims, a waiting container). The usual cause is storage: the
rendered bus asks for 5Gi claims without a storageClassName, which nothing binds on a cluster without
a default StorageClass.

Why every pod counts (2 of 3 blocks too): JetStream's stream has 3 replicas (Argo Events' default
`streamConfig`; the EventSources create it when they first connect, pkg/eventbus/jetstream/base), which
JetStream places only on three servers that are up (nats-server v2.11 selectPeerGroup discards offline
peers), and keeps only with a majority. The doctor cannot see from here whether the stream exists already.

An exotic bus (`jetstreamExotic`, `nats.exotic`) or Kafka runs elsewhere: nothing here to judge;
`--probe` proves delivery end to end.
"""

from __future__ import annotations

import copy
import json
import shlex
from collections.abc import Iterable

from gpuaas.doctor.checks.components import not_installed
from gpuaas.doctor.facts import ClaimFact, EventBusFact, Facts, PodFact
from gpuaas.doctor.findings import Finding, Skipped, blocks, ok, warn

CHECK = "argo-events.bus"
BUS_NAME = "default"
"""The EventBus the product's EventSources and Sensors use (they name none: Argo Events' default)."""
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
PERSISTENCE = {"jetstream": ("jetstream",), "nats": ("nats", "native")}
"""Where each native form keeps `persistence` in the EventBus spec."""
SERVERS = {"jetstream": "JetStream", "nats": "NATS Streaming"}
PARTIAL = {"jetstream": "JetStream creates its stream (3 replicas by Argo Events' default) only with 3 servers up and "
                        "keeps it only with a majority",
           "nats": "NATS Streaming keeps its channels only with a majority of its servers"}
"""What a bus short of servers but with a majority still risks (why it blocks all the same)."""
EXTERNAL = {"jetstreamExotic": "external NATS", "nats.exotic": "external NATS", "kafka": "external Kafka"}


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def _conditions(bus: EventBusFact, *types: str) -> list[str]:
    return [f"{kind}={status} {reason}: {message}".replace(" : ", ": ").rstrip(": ")
            for kind in types for status, reason, message in [bus.conditions.get(kind, ("", "", ""))] if status]


def _pod_ready(pod: PodFact) -> bool:
    return pod.phase == "Running" and pod.ready


def _why(pod: PodFact) -> str:
    if pod.waiting:
        container, reason, message, _ = pod.waiting[0]
        return f"pod {pod.name} is {pod.phase}, not ready: container {container} is {reason}: {message[:200]}"
    if pod.unscheduled:
        return f"pod {pod.name} is {pod.phase}, not scheduled: {pod.unscheduled[:300]}"
    return f"pod {pod.name} is {pod.phase or 'without a phase'}, not ready"


def _class_text(name: str | None) -> str:
    return "no storageClassName" if not name else f"storageClassName {name}"


class _Storage:
    """What the StorageClasses make of a class name: None (not set: the default applies), '' or a name."""

    def __init__(self, classes: dict[str, bool] | None) -> None:
        self.classes = classes or {}
        self.default = next((name for name, default in sorted(self.classes.items()) if default), None)

    def binds(self, name: str | None) -> bool:
        """Something can provision a claim of this class (whether it does is the provisioner's business)."""
        if name is None:
            return self.default is not None
        return bool(name) and name in self.classes

    def why_not(self, claim: ClaimFact) -> str:
        listed = ", ".join(sorted(self.classes)) or "none"
        if claim.storage_class is None:
            return (f"it sets no storageClassName and no StorageClass is the cluster's default (StorageClasses here: "
                    f"{listed})")
        if claim.storage_class == "":
            return "its storageClassName is \"\": only a volume made beforehand for it could bind"
        return f"StorageClass {claim.storage_class} does not exist (StorageClasses here: {listed})"


def _want(bus: EventBusFact) -> tuple[dict, str | None]:
    """The bus spec's persistence and the class it asks for (None: not set)."""
    node: object = bus.spec
    for key in PERSISTENCE[bus.form]:
        node = (node or {}).get(key) if isinstance(node, dict) else None
    persistence = (node or {}).get("persistence") if isinstance(node, dict) else None
    persistence = persistence if isinstance(persistence, dict) else {}
    name = persistence.get("storageClassName")
    return persistence, None if name is None else str(name)


def _set_class(bus: EventBusFact, ns: str, target: str) -> tuple[str, str]:
    """The change that gives the bus's claims `target` (the values setting for a Helm install, else a patch), and
    how to keep it."""
    path = PERSISTENCE[bus.form]
    if bus.helm_release:
        spec = copy.deepcopy(bus.spec)
        node = spec
        for key in path:
            node = node.setdefault(key, {})
        node.setdefault("persistence", {})["storageClassName"] = target
        return ((f"helm upgrade {bus.helm_release} charts/gpuaas -n {ns} --reuse-values --set-json "
                f"{shlex.quote('eventBus.spec=' + _compact(spec))}"),
                "# keep the class in your values file too: the chart uses eventBus.spec whole")
    patch: dict = {"storageClassName": target}
    for key in reversed((*path, "persistence")):
        patch = {key: patch}
    return (f"kubectl -n {ns} patch eventbus {bus.name} --type=merge -p {shlex.quote(_compact({'spec': patch}))}",
            "# keep the class in your overlay's EventBus too, for the next install")


def _without_persistence(bus: EventBusFact) -> dict:
    """The bus's spec with its persistence set to null (a later values file's null drops the chart's)."""
    spec = copy.deepcopy(bus.spec)
    node = spec
    for key in PERSISTENCE[bus.form]:
        node = node.setdefault(key, {})
    node["persistence"] = None
    return spec


def _recreate(bus: EventBusFact, ns: str, claims: Iterable[ClaimFact], *, statefulset: bool) -> list[str]:
    names = " ".join(c.name for c in claims)
    lines = []
    if statefulset and bus.stateful_set is not None:
        lines.append(f"kubectl -n {ns} delete statefulset {bus.stateful_set.name}")
    if names:
        lines.append(f"kubectl -n {ns} delete pvc {names} --wait=false")
    return lines


def _storage_fix(bus: EventBusFact, ns: str, pending: list[ClaimFact], details: list[str]) -> list[str]:
    """The claims' class is the cause: set one the cluster has, then have the StatefulSet and claims made again.

    A StatefulSet's volumeClaimTemplates cannot change (the API server refuses the update), and Argo Events
    v1.9.11 only Updates it (the EventBus turns Deployed=False JetStreamStatefulSetFailed); it re-creates a
    StatefulSet that was deleted (it watches them). Claims are never re-made by a new StatefulSet: one of the
    old name is reused, so the unbound ones go too (no volume: no data). Order matters: deleted first, the
    old StatefulSet would make them again for its Pending pods.
    """
    storage = _Storage(bus.storage_classes)
    persistence, want = _want(bus)
    template = bus.stateful_set.claim_storage_class if bus.stateful_set is not None else want
    if template != want and bus.stateful_set is not None:
        details.append(f"StatefulSet {bus.stateful_set.name} still makes claims with {_class_text(template)}; the "
                       f"EventBus asks for {want or 'none'}")
    if storage.binds(want):
        stale = [c for c in pending if c.storage_class != want and not storage.binds(c.storage_class)]
        return [("# the EventBus asks for a class this cluster has; its StatefulSet and unbound claims predate it: "
                "delete them, Argo Events makes them again"),
                *_recreate(bus, ns, stale or pending, statefulset=template != want)]
    names = sorted(storage.classes)
    if not names:
        where = "/".join(("spec", *PERSISTENCE[bus.form], "persistence"))
        return [(f"# this cluster has no StorageClass: install a volume provisioner (a CSI driver with its "
                f"StorageClass), set that class in the EventBus ({where.replace('/', '.')}.storageClassName) and "
                "delete the StatefulSet and claims as below; or run the bus without persistence (events kept in "
                "memory, lost when a bus pod restarts):"),
                # a Helm release renders the chart's persistence again on the next upgrade: null it there, in the
                # whole spec (the chart uses it whole; helm v4.3.2 given `eventBus.spec.jetstream.persistence=null`
                # alone rendered `{"jetstream":{"persistence":null}}`, the rest of the bus gone)
                (f"helm upgrade {bus.helm_release} charts/gpuaas -n {ns} --reuse-values --set-json "
                 f"{shlex.quote('eventBus.spec=' + _compact(_without_persistence(bus)))}" if bus.helm_release else
                 f"kubectl -n {ns} patch eventbus {bus.name} --type=json "
                 f"-p '[{{\"op\":\"remove\",\"path\":\"/{where}\"}}]'"),
                *_recreate(bus, ns, pending, statefulset=True)]
    target = names[0] if len(names) == 1 else f"<a StorageClass of yours: {', '.join(names)}>"
    change, keep = _set_class(bus, ns, target)
    lines = [("# give the bus's claims a StorageClass, then have Argo Events make its StatefulSet and claims again "
             "(it cannot change a StatefulSet's claim template; the unbound claims hold no data):"),
             change, *_recreate(bus, ns, pending, statefulset=True), keep]
    if want is None and "storageClassName" not in persistence and all(c.storage_class is None for c in pending):
        default = names[0] if len(names) == 1 else "<yours>"
        lines.append("# or, instead of the above, make it the cluster's default StorageClass: the pending claims (no "
                     "class set) get it (Kubernetes 1.28+), nothing else changes: "
                     f"kubectl patch storageclass {default} -p "
                     f"{shlex.quote(_compact({'metadata': {'annotations': {DEFAULT_CLASS: 'true'}}}))}")
    return lines


def _down_fix(bus: EventBusFact, ns: str, down: list[PodFact], details: list[str]) -> str:
    claims = {c.name: c for c in bus.claims}
    pending_claims = [claims[name] for pod in down for name in pod.claims
                      if name in claims and claims[name].phase != "Bound"]
    storage = _Storage(bus.storage_classes)
    for claim in pending_claims:
        details.append(f"claim {claim.name} is {claim.phase}: " + (
            storage.why_not(claim) if not storage.binds(claim.storage_class) else
            f"StorageClass {claim.storage_class or storage.default} has not provisioned it "
            f"(kubectl -n {ns} describe pvc {claim.name})"))
    unbindable = [c for c in pending_claims if not storage.binds(c.storage_class)]
    lines: list[str] = []
    if unbindable:
        lines += _storage_fix(bus, ns, pending_claims, details)
    elif pending_claims:
        lines.append(f"kubectl -n {ns} describe pvc {' '.join(c.name for c in pending_claims)}   # the provisioner's "
                     "events say why it has not made the volumes")
    for pod in down:
        if any(c.name in pod.claims for c in pending_claims):
            continue
        if pod.waiting:
            container, reason = pod.waiting[0][:2]
            previous = " --previous" if reason == "CrashLoopBackOff" else ""
            lines.append(f"kubectl -n {ns} logs {pod.name} -c {container}{previous}   # and kubectl -n {ns} "
                         f"describe pod {pod.name}")
        else:
            lines.append(f"kubectl -n {ns} describe pod {pod.name}   # make room, or place the bus: the EventBus's "
                         f"spec.{PERSISTENCE[bus.form][0]}.nodeSelector, tolerations, affinity")
    return "\n".join(lines)


def event_bus_finding(facts: Facts) -> Finding | Skipped:
    if not_installed(facts, "eventbus.argoproj.io"):
        return Skipped(CHECK, not_installed(facts, "eventbus.argoproj.io") or "")
    for key in ("event-objects", "event-bus"):
        if key in facts.unreadable:
            return Skipped(CHECK, facts.unreadable[key])
    ns, bus = facts.namespace, facts.event_bus
    if bus is None:
        return blocks(CHECK, f"no EventBus {BUS_NAME} in {ns}: the EventSources and Sensors have no bus to send and "
                             "receive events on",
                      "apply the product's manifests (kubectl apply -k manifests/overlays/<yours>, or helm upgrade)")
    if not bus.native:
        what = EXTERNAL.get(bus.form)
        if what is None:
            return blocks(CHECK, f"EventBus {bus.name} names no bus (none of nats, jetstream, kafka, jetstreamExotic)",
                          f"kubectl -n {ns} edit eventbus {bus.name}   # or apply the product's manifests again",
                          *_conditions(bus, "Configured", "Deployed"))
        spec = (bus.spec.get("nats") or {}).get("exotic") if bus.form == "nats.exotic" else bus.spec.get(bus.form)
        url = str((spec or {}).get("url") or "") if isinstance(spec, dict) else ""
        return ok(CHECK, f"EventBus {bus.name} uses {bus.form}" + (f" ({url})" if url else "") +
                  f", {what}: not judged from here; --probe checks delivery end to end",
                  *_conditions(bus, "Configured", "Deployed"))
    servers = SERVERS[bus.form]
    conditions = _conditions(bus, "Configured", "Deployed")
    statefulset = bus.stateful_set
    if statefulset is None:
        return blocks(CHECK, f"Argo Events made no StatefulSet for EventBus {bus.name}"
                             + (f" ({'; '.join(conditions)})" if conditions else " and the bus has no status")
                             + ": no event reaches any Sensor",
                      f"kubectl -n {ns} describe eventbus {bus.name}; kubectl -n argo-events logs "
                      "deploy/controller-manager   # an invalid spec, or no Argo Events controller running")
    pods = sorted(bus.pods, key=lambda p: p.name)
    down = [p for p in pods if not _pod_ready(p)]
    ready = min(statefulset.ready, len(pods) - len(down))
    where = f"StatefulSet {statefulset.name}"
    notes = [f"EventBus {bus.name}: {c}" for c in conditions if not c.split(" ", 1)[0].endswith("=True")]
    if down or ready < statefulset.desired:
        details = [_why(p) for p in down]
        missing = statefulset.desired - len(pods)
        if missing > 0:
            details.append(f"{missing} of its {statefulset.desired} pods do not exist (kubectl -n {ns} describe "
                           f"statefulset {statefulset.name}: its events say why, e.g. a ResourceQuota)")
        fix = _down_fix(bus, ns, down, details) or f"kubectl -n {ns} describe statefulset {statefulset.name}"
        majority = statefulset.desired // 2 + 1
        effect = ("no event reaches any Sensor, so the product cannot react" if ready < majority else
                  PARTIAL[bus.form] + ", so events may not be delivered")
        return blocks(CHECK, f"EventBus {bus.name} has {ready} of {statefulset.desired} {servers} pods ready ({where}): "
                             + effect, fix, *details, *notes)
    summary = f"EventBus {bus.name}: {ready} of {statefulset.desired} {servers} pods ready ({where})"
    kwok = [p for p in pods if p.node in facts.kwok_nodes]
    if kwok:
        nodes = ", ".join(sorted({p.node for p in kwok}))
        return blocks(CHECK, f"{len(kwok)} of EventBus {bus.name}'s pods are Running on KWOK nodes ({nodes}): KWOK only "
                           f"simulates them, no {servers} server runs",
                    f"place the bus on nodes that run containers: the EventBus's spec.{PERSISTENCE[bus.form][0]}."
                    "nodeSelector and tolerations (Helm: eventBus.spec), then delete its pods",
                    *(f"pod {p.name} on {p.node}" for p in kwok))
    if notes:
        return warn(CHECK, f"{summary}, but Argo Events has not applied the EventBus's current spec",
                    f"kubectl -n {ns} describe eventbus {bus.name}; kubectl -n argo-events logs deploy/controller-manager"
                    "   # a changed claim template cannot be applied: delete the StatefulSet, Argo Events makes it again "
                    "and reuses the bound claims", *notes)
    bound = sum(1 for c in bus.claims if c.phase == "Bound")
    return ok(CHECK, summary, *([f"{bound} claims bound"] if bus.claims else []), *conditions)
