"""The Kueue emulation's controller: one deterministic `reconcile()` pass over the cluster.

What a pass does, in Kueue's order of concerns:

1. Job integration (`sync_jobs`): create the Workload for every queued job that lacks one, copy
   elastic scale-down and StatefulSet replica counts into the Workload, and mark Workloads
   Finished when their job reports it.
2. Eviction: `spec.active: false` evicts (Evicted/Deactivated, QuotaReserved False, admission
   cleared, Admitted False/NoReservation, job suspended); the object is kept. A StatefulSet at 0
   replicas puts its Workload on hold (QuotaReserved False/OnHold, quota released).
3. Elastic shrink: an admitted Workload whose pod-set count went down keeps its admission with
   the smaller count and reservation.
4. Admission: pending Workloads in order (priority, then queue time: creation, or the time of
   the last eviction, Kueue's default requeuing timestamp), per ClusterQueue FIFO. StrictFIFO
   stops a queue at its first Workload that does not fit; BestEffortFIFO tries the next.
   Quota is nominal per flavor plus cohort borrowing (`quota.CohortBook`).
5. Status: Workload conditions and admission; ClusterQueue and LocalQueue usage and counts.

Finished Workloads keep `admission` and Admitted=True (Kueue only ADDS Finished) but reserve
nothing. Status writes carry `metadata.resourceVersion`, so a Finished condition written by the
engine between our read and our write is never lost: the write conflicts and the next pass
re-reads. Known simplifications: no preemption, no admission checks, no fair sharing, no
Cohort-level quota, a null namespaceSelector admits every namespace (Kueue admits none). stopPolicy
Hold and HoldAndDrain are honoured.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from engine.kueue import conditions as C
from engine.kueue import integration
from engine.kueue.admission import Assignment, assign, pod_set_requests, usage_of_admission
from engine.kueue.cluster import Cluster, GatewayCluster
from engine.kueue.quantity import format_quantity, parse_quantity
from engine.kueue.quota import CohortBook, QueueQuota, queue_from_object
from steps.gateways import resources as R
from steps.gateways.errors import Conflict, KubernetesError, NotFound

log = logging.getLogger(__name__)
JSON = dict[str, Any]
Clock = Callable[[], datetime | float]

# Non-elastic kinds whose Workload Kueue replaces when the job's pod sets change.
RECREATED_ON_RESIZE = frozenset({"RayCluster", "RayJob", "PyTorchJob"})
INTEGRATED: tuple[R.Resource, ...] = (R.JOB, R.RAY_JOB, R.RAY_CLUSTER, R.PYTORCH_JOB, R.STATEFUL_SET,
                                      R.POD, R.INFERENCE_SERVICE)


@dataclass(frozen=True)
class Transition:
    """One thing a pass changed, for the engine's timeline."""

    kind: str
    namespace: str | None
    name: str
    what: str      # created | admitted | pending | inadmissible | evicted | on-hold | requeued | shrunk |
    #                resized | recreated | finished | deleted
    reason: str
    message: str


@dataclass
class _Workload:
    resource: R.Resource
    obj: JSON
    status: JSON          # the status we will write (a deep copy, edited in place)

    @property
    def key(self) -> tuple[str, str]:
        return self.obj["metadata"].get("namespace", ""), self.obj["metadata"]["name"]

    @property
    def conditions(self) -> list[dict]:
        return self.status.setdefault("conditions", [])

    @property
    def reserved(self) -> bool:
        return C.is_true(self.conditions, C.QUOTA_RESERVED) and bool(self.status.get("admission"))

    @property
    def finished(self) -> bool:
        return C.is_true(self.conditions, C.FINISHED)

    @property
    def active(self) -> bool:
        return (self.obj.get("spec") or {}).get("active", True) is not False


class KueueController:
    """Kueue's admission behaviour over a Kubernetes-API-compatible cluster."""

    def __init__(self, cluster: Cluster, *, clock: Clock | None = None,
                 excluded_resource_prefixes: Sequence[str] = ()) -> None:
        self.cluster = cluster
        self.clock = clock or (lambda: datetime.now(UTC))
        self.excluded_resource_prefixes = tuple(excluded_resource_prefixes)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._follower: threading.Thread | None = None
        self.last_error: Exception | None = None

    @classmethod
    def over_url(cls, url: str, **kwargs: Any) -> KueueController:
        return cls(GatewayCluster.over_url(url), **kwargs)

    @classmethod
    def over_store(cls, store: Any, **kwargs: Any) -> KueueController:
        from engine.kueue.store import StoreCluster

        return cls(StoreCluster(store), **kwargs)

    def now(self) -> datetime:
        value = self.clock()
        if isinstance(value, (int, float)):
            return datetime.fromtimestamp(value, UTC)
        return value if value.tzinfo else value.replace(tzinfo=UTC)

    # ------------------------------------------------------------------ background mode
    def start(self, interval: float = 0.2) -> None:
        """Reconcile on a thread every `interval` seconds, and at once after `notify()`."""
        if self._thread is not None:
            return
        self._stop.clear()

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    self.reconcile()
                    self.last_error = None
                except Exception as error:  # noqa: BLE001 - keep running: the next pass re-reads everything
                    self.last_error = error
                    log.warning("kueue reconcile failed: %s", error)
                self._wake.wait(interval)
                self._wake.clear()

        self._thread = threading.Thread(target=loop, name="kueue-emulation", daemon=True)
        self._thread.start()
        subscribe = getattr(self.cluster, "subscribe", None)
        if subscribe is not None:  # in-process store: react to every change, not only on the tick
            subscription = subscribe()

            def follow() -> None:
                while not self._stop.is_set():
                    if subscription.next(timeout=0.5) is not None:
                        self._wake.set()
                subscription.close()

            self._follower = threading.Thread(target=follow, name="kueue-emulation-watch", daemon=True)
            self._follower.start()

    def notify(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for thread in (self._thread, self._follower):
            if thread is not None:
                thread.join(timeout=5)
        self._thread = self._follower = None

    # ------------------------------------------------------------------ one pass
    def reconcile(self) -> list[Transition]:
        with self._lock:
            transitions = self.sync_jobs()
            transitions += self._admission_pass()
            return transitions

    def sync_jobs(self) -> list[Transition]:
        """The job framework: Workloads for queued jobs, counts from owners, Finished from jobs."""
        now = self.now()
        workloads = {w.key: w for w in self._workloads()}
        by_owner_uid: dict[str, _Workload] = {}
        for workload in workloads.values():
            for reference in workload.obj["metadata"].get("ownerReferences") or []:
                by_owner_uid[reference.get("uid", "")] = workload
        transitions: list[Transition] = []
        for workload in workloads.values():
            transitions += self._release_finalizer(workload)
        for resource in INTEGRATED:
            for owner in self._safe_list(resource):
                desired = integration.workload_for(owner)
                if desired is None:
                    continue
                meta = desired["metadata"]
                existing = workloads.get((meta["namespace"], meta["name"])) or by_owner_uid.get(
                    owner["metadata"].get("uid") or "\0")
                if existing is None:
                    try:
                        self.cluster.create(R.WORKLOAD, desired)
                    except Conflict:
                        continue
                    transitions.append(Transition("Workload", meta["namespace"], meta["name"], "created",
                                                  "CreatedWorkload", f"Created Workload: {meta['namespace']}/"
                                                  f"{meta['name']}"))
                    continue
                transitions += self._sync_counts(existing, owner)
                if integration.finished_condition(owner) is None:
                    transitions += self._sync_pods_ready(existing, owner, now)
                transitions += self._sync_finished(existing, owner, now)
        return transitions

    def _sync_pods_ready(self, workload: _Workload, owner: JSON, now: datetime) -> list[Transition]:
        """Kueue's job reconciler writes PodsReady on an admitted Workload after the admission (and
        keeps it False/WaitForStart while the Workload is not admitted)."""
        ready = integration.pods_ready(owner)
        current = C.find(workload.conditions, C.PODS_READY)
        if ready is None or workload.finished or (current is None and not workload.reserved):
            return []
        admitted = workload.reserved and C.is_true(workload.conditions, C.ADMITTED)
        if admitted and ready:
            wanted = (True, C.REASON_STARTED, C.MSG_PODS_READY)
        elif admitted and current is not None and current.get("status") == "True":
            wanted = (False, C.REASON_WAIT_FOR_RECOVERY, C.MSG_PODS_RECOVERY)
        else:
            wanted = (False, C.REASON_WAIT_FOR_START, C.MSG_PODS_NOT_READY)
        status = copy.deepcopy(workload.obj.get("status") or {})
        conditions = status.setdefault("conditions", [])
        if not C.set_condition(conditions, C.PODS_READY, *wanted, now):
            return []
        if self._write_status(workload.resource, workload.obj, {"conditions": conditions}):
            ns, name = workload.key
            return [Transition("Workload", ns, name, "pods-ready" if wanted[0] else "pods-not-ready", wanted[1],
                               wanted[2])]
        return []

    def _release_finalizer(self, workload: _Workload) -> list[Transition]:
        """A deleted Workload (its job was deleted: owner GC) gives its quota back and may go.

        Kueue's `kueue.x-k8s.io/resource-in-use` finalizer keeps the object until Kueue has
        released the quota; the emulation holds nothing beyond the object itself, so it drops
        the finalizer at once and the next pass no longer counts the Workload.
        """
        meta = workload.obj["metadata"]
        finalizers = meta.get("finalizers") or []
        if not meta.get("deletionTimestamp") or integration.RESOURCE_IN_USE not in finalizers:
            return []
        ns, name = workload.key
        kept = [f for f in finalizers if f != integration.RESOURCE_IN_USE]
        try:
            self.cluster.merge_patch(workload.resource, name, {"metadata": {
                "finalizers": kept or None, "resourceVersion": meta.get("resourceVersion")}}, namespace=ns)
        except (Conflict, NotFound):
            return []
        return [Transition("Workload", ns, name, "deleted", "ResourceInUseReleased",
                           "The workload was deleted; its quota is released")]

    def _sync_counts(self, workload: _Workload, owner: JSON) -> list[Transition]:
        """Elastic jobs shrink their pod sets in place; a StatefulSet's replicas become the count."""
        elastic = (workload.obj["metadata"].get("annotations") or {}).get(integration.ELASTIC) == "true"
        if not elastic and owner.get("kind") in RECREATED_ON_RESIZE:
            return self._recreate_if_resized(workload, owner)
        if not elastic and owner.get("kind") != "StatefulSet":
            return []
        desired = integration.desired_counts(owner)
        pod_sets = copy.deepcopy((workload.obj.get("spec") or {}).get("podSets") or [])
        changed = False
        for pod_set in pod_sets:
            want = desired.get(pod_set.get("name"))
            if want is None or want == pod_set.get("count"):
                continue
            if owner.get("kind") == "StatefulSet" and (want == 0 or workload.reserved):
                continue  # N <-> 0 is "on hold", not a new count; Kueue does not resize an admitted pod group
            if elastic and want > pod_set.get("count", 1) and workload.reserved:
                continue  # scale-up of an admitted elastic job needs a new slice: not emulated
            pod_set["count"] = want
            changed = True
        if not changed:
            return []
        ns, name = workload.key
        updated = self.cluster.merge_patch(workload.resource, name, {"spec": {"podSets": pod_sets}}, namespace=ns)
        workload.obj["spec"] = updated.get("spec", workload.obj.get("spec"))
        return [Transition("Workload", ns, name, "resized", "PodSetsUpdated",
                           "pod set counts now " + ", ".join(f"{p['name']}={p['count']}" for p in pod_sets))]

    def _recreate_if_resized(self, workload: _Workload, owner: JSON) -> list[Transition]:
        """A non-elastic job whose pod sets changed no longer matches its Workload: Kueue stops the
        job, deletes the Workload and creates a new one, which queues again (the reservation is lost)."""
        desired = integration.desired_counts(owner)
        current = {p.get("name"): p.get("count", 1) for p in (workload.obj.get("spec") or {}).get("podSets") or []}
        if desired == current or workload.finished:
            return []
        ns, name = workload.key
        self._suspend(owner, True)
        try:
            self.cluster.merge_patch(workload.resource, name, {"metadata": {"finalizers": None}}, namespace=ns)
            self.cluster.delete(workload.resource, name, ns)
            replacement = integration.workload_for(owner)
            if replacement is not None:
                self.cluster.create(R.WORKLOAD, replacement)
        except (Conflict, NotFound):
            return []
        message = ("pod sets changed (" + ", ".join(f"{k}={v}" for k, v in sorted(desired.items())) +
                   "); the job was suspended and its Workload recreated")
        return [Transition("Workload", ns, name, "recreated", "PodSetsChanged", message)]

    def _sync_finished(self, workload: _Workload, owner: JSON, now: datetime) -> list[Transition]:
        finished = integration.finished_condition(owner)
        if finished is None or workload.finished:
            return []
        reason, message = finished
        status = copy.deepcopy(workload.obj.get("status") or {})
        conditions = status.setdefault("conditions", [])
        C.set_condition(conditions, C.FINISHED, True, reason, message, now)
        if self._write_status(workload.resource, workload.obj, {"conditions": conditions}):
            ns, name = workload.key
            return [Transition("Workload", ns, name, "finished", reason, message)]
        return []

    # ------------------------------------------------------------------ admission
    def _admission_pass(self) -> list[Transition]:
        now = self.now()
        queues_raw = self._latest(R.CLUSTER_QUEUE, R.CLUSTER_QUEUE_V1BETA1, namespaced=False)
        local_raw = self._latest(R.LOCAL_QUEUE, R.LOCAL_QUEUE_V1BETA1, namespaced=True)
        flavors = self._latest(R.RESOURCE_FLAVOR, R.RESOURCE_FLAVOR_V1BETA1, namespaced=False)
        flavor_labels = {name: (obj.get("spec") or {}).get("nodeLabels") or {} for (_, name), (_, obj) in flavors.items()}
        queues = {name: queue_from_object(obj) for (_, name), (_, obj) in queues_raw.items()}
        namespace_labels = {obj["metadata"]["name"]: (obj["metadata"].get("labels") or {})
                            for obj in self._safe_list(R.NAMESPACE)}
        book = CohortBook(queues.values())
        workloads = self._workloads()
        owners = self._owner_index(workloads)
        transitions: list[Transition] = []

        candidates: list[_Workload] = []
        for workload in workloads:
            ns, name = workload.key
            if workload.finished or workload.obj["metadata"].get("deletionTimestamp"):
                continue
            owner = owners.get(self._owner_key(workload))
            if not workload.active:
                # Kueue's steps: the workload controller marks it Evicted (the reservation stays) and the
                # job reconciler suspends the job; once the job is no longer active, the reconciler
                # clears the reservation and sets Requeued=False with the eviction's reason.
                evicted = C.find(workload.conditions, C.EVICTED) or {}
                if workload.reserved and not (evicted.get("status") == "True"
                                              and evicted.get("reason") == C.REASON_DEACTIVATED):
                    C.set_condition(workload.conditions, C.EVICTED, True, C.REASON_DEACTIVATED, C.MSG_DEACTIVATED,
                                    now)
                    self._suspend(owner, True)
                    transitions.append(Transition("Workload", ns, name, "evicted", C.REASON_DEACTIVATED,
                                                  C.MSG_DEACTIVATED))
                elif workload.reserved or workload.status.get("admission"):
                    self._release(workload, now, evicted=True)
                    C.set_condition(workload.conditions, C.REQUEUED, False, C.REASON_DEACTIVATED,
                                    C.MSG_DEACTIVATED, now)
                    transitions.append(Transition("Workload", ns, name, "released", C.REASON_DEACTIVATED,
                                                  C.MSG_DEACTIVATED))
                continue
            if owner is not None and owner.get("kind") == "StatefulSet" and \
                    (owner.get("spec") or {}).get("replicas", 1) == 0:
                if workload.reserved or not C.is_true(workload.conditions, C.QUOTA_RESERVED) and \
                        (C.find(workload.conditions, C.QUOTA_RESERVED) or {}).get("reason") != C.REASON_ON_HOLD:
                    message = f"The workload is on hold: StatefulSet {owner['metadata']['name']} has 0 replicas"
                    self._release(workload, now, evicted=False, reason=C.REASON_ON_HOLD, message=message)
                    transitions.append(Transition("Workload", ns, name, "on-hold", C.REASON_ON_HOLD, message))
                continue
            if workload.reserved:
                queue = queues.get(workload.status["admission"].get("clusterQueue", ""))
                if queue is not None and queue.stop_policy == "HoldAndDrain":
                    self._release(workload, now, evicted=True, message=C.MSG_CQ_STOPPED,
                                  eviction=(C.REASON_CQ_STOPPED, C.MSG_CQ_STOPPED))
                    self._suspend(owner, True)
                    transitions.append(Transition("Workload", ns, name, "evicted", C.REASON_CQ_STOPPED,
                                                  C.MSG_CQ_STOPPED))
                    candidates.append(workload)
                    continue
                shrunk = self._shrink(workload)
                if shrunk:
                    transitions.append(Transition("Workload", ns, name, "shrunk", "ElasticScaleDown", shrunk))
                if queue is not None:
                    book.reserve(queue, usage_of_admission(workload.status.get("admission")))
                continue
            evicted = C.find(workload.conditions, C.EVICTED)
            if evicted and evicted.get("status") == "True" and evicted.get("reason") == C.REASON_DEACTIVATED \
                    and not C.is_true(workload.conditions, C.REQUEUED):
                # Kueue's workload controller writes Requeued=True/Reactivated on its own; the
                # scheduler admits it on a later pass.
                C.set_condition(workload.conditions, C.REQUEUED, True, C.REASON_REACTIVATED,
                                "The workload was reactivated", now)
                transitions.append(Transition("Workload", ns, name, "requeued", C.REASON_REACTIVATED,
                                              "The workload was reactivated"))
                continue
            candidates.append(workload)

        # Queue each admissible candidate in its ClusterQueue, in queue order.
        queued: dict[str, list[tuple[_Workload, list]]] = {}
        for workload in sorted(candidates, key=self._queue_order):
            ns, name = workload.key
            spec = workload.obj.get("spec") or {}
            queue_name = spec.get("queueName") or ""
            local = local_raw.get((ns, queue_name))
            cluster_queue = ((local or (None, {}))[1].get("spec") or {}).get("clusterQueue", "")
            queue = queues.get(cluster_queue)
            problem = None
            if local is None:
                problem = f"LocalQueue {queue_name} doesn't exist"
            elif queue is None:
                problem = f"ClusterQueue {cluster_queue} doesn't exist"
            elif queue.stop_policy != "None":
                problem = f"ClusterQueue {cluster_queue} is inactive"
            elif not self._namespace_allowed(queues_raw[("", cluster_queue)][1], ns, namespace_labels.get(ns) or {}):
                problem = "Workload namespace doesn't match ClusterQueue selector"
            requests: list = []
            if problem is None:
                try:
                    requests = pod_set_requests(workload.obj, self.excluded_resource_prefixes)
                except ValueError as error:
                    problem = str(error)
            if problem:
                if C.set_condition(workload.conditions, C.QUOTA_RESERVED, False, C.REASON_INADMISSIBLE, problem, now):
                    transitions.append(Transition("Workload", ns, name, "inadmissible", C.REASON_INADMISSIBLE, problem))
                continue
            queued.setdefault(cluster_queue, []).append((workload, requests))

        # Scheduling cycles, as Kueue's scheduler: take the head of every ClusterQueue, admit heads that fit
        # without borrowing before heads that borrow (then priority, then queue time), re-checking each fit
        # against what this cycle already admitted. A head that does not fit leaves the queue for this pass
        # (BestEffortFIFO: the next one becomes head) or blocks it (StrictFIFO: the rest is not attempted).
        while queued:
            heads = []
            for cluster_queue, entries in queued.items():
                workload, requests = entries[0]
                heads.append((workload, requests, queues[cluster_queue],
                              assign(requests, queues[cluster_queue], book, flavor_labels)))
            heads.sort(key=lambda h: (not isinstance(h[3], Assignment),
                                      isinstance(h[3], Assignment) and h[3].borrows, self._queue_order(h[0])))
            for workload, requests, queue, first_try in heads:
                ns, name = workload.key
                queued[queue.name].pop(0)
                result = first_try if not isinstance(first_try, Assignment) else \
                    assign(requests, queue, book, flavor_labels)
                if isinstance(result, Assignment):
                    book.reserve(queue, result.usage)
                    self._admit(workload, result, now)
                    self._suspend(owners.get(self._owner_key(workload)), False)
                    transitions.append(Transition("Workload", ns, name, "admitted", C.REASON_QUOTA_RESERVED,
                                                  C.quota_reserved_message(queue.name)))
                else:
                    if queue.strategy == "StrictFIFO":
                        queued[queue.name].clear()  # only the head is attempted; the rest carry no condition
                    if C.set_condition(workload.conditions, C.QUOTA_RESERVED, False, result.reason, result.message,
                                       now):
                        transitions.append(Transition("Workload", ns, name, "pending", result.reason, result.message))
                    workload.status["resourceRequests"] = [
                        {"name": r.name, "resources": {k: format_quantity(v, k) for k, v in sorted(r.total().items())}}
                        for r in requests]
                if not queued[queue.name]:
                    del queued[queue.name]

        for workload in workloads:
            if workload.status != (workload.obj.get("status") or {}):
                self._write_status(workload.resource, workload.obj, workload.status)
        self._write_queue_status(queues_raw, queues, local_raw, workloads, book, now)
        return transitions

    def _admit(self, workload: _Workload, assignment: Assignment, now: datetime) -> None:
        workload.status["admission"] = assignment.admission()
        workload.status.pop("resourceRequests", None)
        generation = workload.obj["metadata"].get("generation")
        C.set_condition(workload.conditions, C.QUOTA_RESERVED, True, C.REASON_QUOTA_RESERVED,
                        C.quota_reserved_message(assignment.cluster_queue), now, generation)
        C.set_condition(workload.conditions, C.ADMITTED, True, C.REASON_ADMITTED, C.MSG_ADMITTED, now, generation)
        evicted = C.find(workload.conditions, C.EVICTED)
        if evicted and evicted.get("status") == "True":
            C.set_condition(workload.conditions, C.EVICTED, False, C.REASON_QUOTA_RESERVED,
                            f"Previously: {evicted.get('message', '')}", now)
        # Requeued stays as it is: Kueue's SetQuotaReservation resets Evicted and Preempted only, and
        # Requeued's lastTransitionTime is where Kueue measures the admission wait from.

    def _release(self, workload: _Workload, now: datetime, *, evicted: bool, reason: str = C.REASON_PENDING,
                 message: str = C.MSG_DEACTIVATED,
                 eviction: tuple[str, str] = (C.REASON_DEACTIVATED, C.MSG_DEACTIVATED)) -> None:
        workload.status["admission"] = None
        if evicted:
            C.set_condition(workload.conditions, C.EVICTED, True, eviction[0], eviction[1], now)
        C.set_condition(workload.conditions, C.QUOTA_RESERVED, False, reason, message, now)
        if C.find(workload.conditions, C.ADMITTED) is not None:
            C.set_condition(workload.conditions, C.ADMITTED, False, C.REASON_NO_RESERVATION, C.MSG_NO_RESERVATION, now)
        if C.is_true(workload.conditions, C.REQUEUED):
            C.set_condition(workload.conditions, C.REQUEUED, False, reason, message, now)

    def _shrink(self, workload: _Workload) -> str | None:
        """Elastic scale-down: the admitted pod sets take the Workload's smaller counts."""
        counts = {p.get("name"): int(p.get("count", 1)) for p in (workload.obj.get("spec") or {}).get("podSets") or []}
        admission = workload.status.get("admission") or {}
        notes = []
        for assignment in admission.get("podSetAssignments") or []:
            new, old = counts.get(assignment.get("name")), int(assignment.get("count", 1))
            if new is None or new >= old or old == 0:
                continue
            assignment["resourceUsage"] = {
                r: format_quantity(parse_quantity(q) * new / old, r) for r, q in (assignment.get("resourceUsage") or {}).items()}
            assignment["count"] = new
            notes.append(f"pod set {assignment.get('name')} {old} -> {new}")
        return ", ".join(notes) or None

    # ------------------------------------------------------------------ queue status
    def _write_queue_status(self, queues_raw: dict, queues: dict[str, QueueQuota], local_raw: dict,
                            workloads: list[_Workload], book: CohortBook, now: datetime) -> None:
        counts: dict[str, dict[str, int]] = {name: {"pending": 0, "reserving": 0, "admitted": 0} for name in queues}
        local_counts: dict[tuple[str, str], dict[str, Any]] = {}
        local_to_cq = {key: ((obj.get("spec") or {}).get("clusterQueue", "")) for key, (_, obj) in local_raw.items()}
        for workload in workloads:
            if workload.finished or not workload.active:
                continue
            ns, _ = workload.key
            lq_key = (ns, (workload.obj.get("spec") or {}).get("queueName", ""))
            cq = (workload.status.get("admission") or {}).get("clusterQueue") or local_to_cq.get(lq_key)
            on_hold = (C.find(workload.conditions, C.QUOTA_RESERVED) or {}).get("reason") == C.REASON_ON_HOLD
            bucket = "reserving" if workload.reserved else (None if on_hold else "pending")
            if bucket is None:
                continue
            entry = local_counts.setdefault(lq_key, {"pending": 0, "reserving": 0, "admitted": 0, "usage": {}})
            entry[bucket] += 1
            if workload.reserved:
                if C.is_true(workload.conditions, C.ADMITTED):
                    entry["admitted"] += 1
                for key, amount in usage_of_admission(workload.status.get("admission")).items():
                    entry["usage"][key] = entry["usage"].get(key, Fraction(0)) + amount
            if cq in counts:
                counts[cq][bucket] += 1
                if workload.reserved and C.is_true(workload.conditions, C.ADMITTED):
                    counts[cq]["admitted"] += 1
        for (_, name), (resource, obj) in queues_raw.items():
            queue = queues[name]
            usage = []
            for flavor, resources in queue.flavor_resources():
                entries = []
                for resource_name in resources:
                    total = queue.usage.get((flavor, resource_name), Fraction(0))
                    nominal = queue.quota(flavor, resource_name).nominal
                    entries.append({"name": resource_name, "total": format_quantity(total, resource_name),
                                    "borrowed": format_quantity(max(Fraction(0), total - nominal), resource_name)})
                usage.append({"name": flavor, "resources": entries})
            status = copy.deepcopy(obj.get("status") or {})
            status.update({"flavorsReservation": usage, "flavorsUsage": copy.deepcopy(usage),
                           "pendingWorkloads": counts[name]["pending"],
                           "reservingWorkloads": counts[name]["reserving"],
                           "admittedWorkloads": counts[name]["admitted"]})
            conditions = status.setdefault("conditions", [])
            if queue.stop_policy == "None":
                C.set_condition(conditions, "Active", True, "Ready", "Can admit new workloads", now)
            else:
                C.set_condition(conditions, "Active", False, "Stopped", "ClusterQueue is stopped", now)
            if status != (obj.get("status") or {}):
                self._write_status(resource, obj, status)
        for key, (resource, obj) in local_raw.items():
            entry = local_counts.get(key, {"pending": 0, "reserving": 0, "admitted": 0, "usage": {}})
            by_flavor: dict[str, list[dict]] = {}
            for (flavor, resource_name), amount in sorted(entry["usage"].items()):
                by_flavor.setdefault(flavor, []).append({"name": resource_name,
                                                         "total": format_quantity(amount, resource_name)})
            flavors_usage = [{"name": f, "resources": r} for f, r in by_flavor.items()]
            status = copy.deepcopy(obj.get("status") or {})
            status.update({"pendingWorkloads": entry["pending"], "reservingWorkloads": entry["reserving"],
                           "admittedWorkloads": entry["admitted"], "flavorsReservation": flavors_usage,
                           "flavorsUsage": copy.deepcopy(flavors_usage)})
            cq_exists = ("", local_to_cq.get(key, "")) in queues_raw
            C.set_condition(status.setdefault("conditions", []), "Active", cq_exists,
                            "Ready" if cq_exists else "ClusterQueueDoesNotExist",
                            "Can submit new workloads to localQueue" if cq_exists
                            else "Can't submit new workloads to clusterQueue", now)
            if status != (obj.get("status") or {}):
                self._write_status(resource, obj, status)

    # ------------------------------------------------------------------ reads and writes
    def gpus_in_use(self, resource: str = "nvidia.com/gpu") -> dict[str, dict[str, int]]:
        """ClusterQueue -> flavor -> GPUs reserved, read from status.flavorsUsage (for charts)."""
        out: dict[str, dict[str, int]] = {}
        for (_, name), (_, obj) in self._latest(R.CLUSTER_QUEUE, R.CLUSTER_QUEUE_V1BETA1, namespaced=False).items():
            for flavor in (obj.get("status") or {}).get("flavorsUsage") or []:
                for entry in flavor.get("resources") or []:
                    if entry.get("name") == resource:
                        out.setdefault(name, {})[flavor["name"]] = int(parse_quantity(entry.get("total", 0)))
        return out

    def _safe_list(self, resource: R.Resource) -> list[JSON]:
        try:
            return self.cluster.list(resource)
        except NotFound:
            return []

    def _latest(self, primary: R.Resource, legacy: R.Resource, *, namespaced: bool) -> dict:
        """Objects of both API versions keyed by (namespace, name); v1beta2 wins a duplicate."""
        out: dict[tuple[str, str], tuple[R.Resource, JSON]] = {}
        for resource in (legacy, primary):
            for obj in self._safe_list(resource):
                meta = obj.get("metadata") or {}
                out[(meta.get("namespace", "") if namespaced else "", meta["name"])] = (resource, obj)
        return out

    def _workloads(self) -> list[_Workload]:
        latest = self._latest(R.WORKLOAD, R.WORKLOAD_V1BETA1, namespaced=True)
        return [_Workload(resource, obj, copy.deepcopy(obj.get("status") or {}))
                for _, (resource, obj) in sorted(latest.items())]

    def _owner_key(self, workload: _Workload) -> tuple[str, str, str] | None:
        reference = integration.owner_reference(workload.obj)
        if reference is None:
            return None
        return reference.get("kind", ""), workload.key[0], reference.get("name", "")

    def _owner_index(self, workloads: Iterable[_Workload]) -> dict[tuple[str, str, str], JSON]:
        wanted = {key[0] for w in workloads if (key := self._owner_key(w))}
        index: dict[tuple[str, str, str], JSON] = {}
        for resource in INTEGRATED + (R.DEPLOYMENT, R.NOTEBOOK, R.LEADER_WORKER_SET):
            if resource.kind not in wanted:
                continue
            for obj in self._safe_list(resource):
                meta = obj.get("metadata") or {}
                obj.setdefault("kind", resource.kind)
                obj.setdefault("apiVersion", resource.api_version)
                index[(resource.kind, meta.get("namespace", ""), meta.get("name", ""))] = obj
        return index

    def _suspend(self, owner: JSON | None, suspend: bool) -> None:
        if owner is None:
            return
        patch = integration.suspend_patch(owner, suspend)
        resource = R.for_kind(owner.get("apiVersion", ""), owner.get("kind", ""))
        if patch is None or resource is None:
            return
        meta = owner["metadata"]
        try:
            self.cluster.merge_patch(resource, meta["name"], patch, namespace=meta.get("namespace"))
        except NotFound:
            pass

    def _write_status(self, resource: R.Resource, obj: JSON, status: JSON) -> bool:
        """Conditional status write; False when someone wrote first (the next pass re-reads)."""
        meta = obj["metadata"]
        patch: JSON = {"status": status}
        if meta.get("resourceVersion"):
            patch["metadata"] = {"resourceVersion": meta["resourceVersion"]}
        try:
            self.cluster.merge_patch(resource, meta["name"], patch, namespace=meta.get("namespace"),
                                     subresource="status")
            return True
        except (Conflict, NotFound):
            return False
        except KubernetesError as error:
            log.warning("status write of %s %s failed: %s", resource.kind, meta["name"], error)
            return False

    def _queue_order(self, workload: _Workload) -> tuple:
        spec = workload.obj.get("spec") or {}
        evicted = C.find(workload.conditions, C.EVICTED)
        stamp = workload.obj["metadata"].get("creationTimestamp", "")
        if evicted is not None and evicted.get("status") == "True":
            stamp = max(stamp, evicted.get("lastTransitionTime", ""))
        return (-int(spec.get("priority") or 0), stamp, workload.key)

    @staticmethod
    def _namespace_allowed(cluster_queue: JSON, namespace: str, namespace_labels: dict[str, str]) -> bool:
        """The ClusterQueue's namespaceSelector against the Namespace's labels, plus the
        `kubernetes.io/metadata.name` label kube-apiserver gives every Namespace."""
        selector = (cluster_queue.get("spec") or {}).get("namespaceSelector")
        if not selector:
            return True
        labels = {**namespace_labels, "kubernetes.io/metadata.name": namespace}
        return label_selector_matches(selector, labels)


def label_selector_matches(selector: JSON, labels: dict[str, str]) -> bool:
    """A Kubernetes LabelSelector (matchLabels, matchExpressions In/NotIn/Exists/DoesNotExist) against labels;
    `{}` selects everything (gpuaas.cluster.profiles uses it for the Prometheus Operator's selectors too)."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        present = key in labels
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, interval: float = 0.02) -> bool:
    """Poll a predicate (for callers driving the background thread); True once it holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
