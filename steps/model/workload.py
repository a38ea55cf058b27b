"""Kueue Workloads (kueue.x-k8s.io v1beta2 and v1beta1) as a typed view over the API dict.

The wrapper never copies or validates the whole object: it reads what the reactions decide on and
tolerates unknown fields, so a newer Kueue does not break an older step image.

    wl = Workload(obj)
    wl.status()                 # "finished" | "admitted" | "quota-reserved" | "pending" (Kueue's precedence)
    wl.is_finished / wl.is_admitted / wl.has_quota / wl.active / wl.deactivated / wl.evicted
    wl.admission                # Admission(cluster_queue, pod_sets=[PodSetAdmission(name, count, flavors, gpus)])
    wl.gpus_admitted            # GPUs the admission holds (resourceUsage, else count x template request)
    wl.queue_wait_seconds       # creationTimestamp -> QuotaReserved/Admitted lastTransitionTime
    wl.admitted_at / wl.finished_at

WHY Finished wins: Kueue only ADDS the Finished condition; `admission` and Admitted=True may
remain on a finished Workload (pkg/workload/workload.go Status()).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

JSON = dict[str, Any]
GPU = "nvidia.com/gpu"
GROUP = "kueue.x-k8s.io"
VERSIONS = ("v1beta2", "v1beta1")

FINISHED = "Finished"
SLICE_REPLACED = "WorkloadSliceReplaced"
"""Finished reason of an elastic job's old Workload slice once a scale-up's new slice replaced it:
the job runs on (apis/kueue/v1beta2/workload_types.go, Kueue v0.19)."""
ADMITTED = "Admitted"
QUOTA_RESERVED = "QuotaReserved"
EVICTED = "Evicted"
PREEMPTED = "Preempted"
PODS_READY = "PodsReady"
REQUEUED = "Requeued"
DEACTIVATED_REASONS = ("Deactivated", "InactiveWorkload")


def parse_time(value: object) -> datetime | None:
    """RFC 3339 (with Z) -> aware datetime; None when absent or malformed."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


_SUFFIX = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
           "m": Decimal("0.001")}


def quantity(value: object) -> Decimal:
    """A Kubernetes quantity ("2", "500m", "1Gi", 2) as a Decimal; 0 when absent or malformed."""
    if value is None or value == "":
        return Decimal(0)
    text = str(value).strip()
    for suffix in ("Ki", "Mi", "Gi", "Ti", "k", "M", "G", "T", "m"):
        if text.endswith(suffix):
            try:
                return Decimal(text[: -len(suffix)]) * Decimal(_SUFFIX[suffix])
            except InvalidOperation:
                return Decimal(0)
    try:
        return Decimal(text)
    except InvalidOperation:
        return Decimal(0)


def template_request(template: Mapping[str, Any] | None, resource: str = GPU) -> Decimal:
    """What one pod of a template requests: containers summed, init containers max (the larger wins).

    Limits count when requests are absent (extended resources such as GPUs must have
    requests == limits, and a limit alone defaults the request).
    """
    spec = (template or {}).get("spec") or {}

    def one(container: Mapping[str, Any]) -> Decimal:
        resources = container.get("resources") or {}
        amount = (resources.get("requests") or {}).get(resource)
        if amount is None:
            amount = (resources.get("limits") or {}).get(resource)
        return quantity(amount)

    containers = sum((one(c) for c in spec.get("containers") or []), Decimal(0))
    init = max((one(c) for c in spec.get("initContainers") or []), default=Decimal(0))
    return max(containers, init)


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition: datetime | None = None

    @property
    def true(self) -> bool:
        return self.status == "True"


@dataclass(frozen=True)
class PodSetAdmission:
    name: str
    count: int
    flavors: Mapping[str, str] = field(default_factory=dict)
    gpus: Decimal = Decimal(0)
    """GPUs of the whole pod set (resourceUsage, else count x per-pod request)."""

    @property
    def gpu_flavor(self) -> str | None:
        return self.flavors.get(GPU)


@dataclass(frozen=True)
class Admission:
    cluster_queue: str
    pod_sets: tuple[PodSetAdmission, ...] = ()

    @property
    def gpus(self) -> Decimal:
        return sum((p.gpus for p in self.pod_sets), Decimal(0))

    def to_dict(self) -> JSON:
        return {"clusterQueue": self.cluster_queue,
                "podSets": [{"name": p.name, "count": p.count, "flavors": dict(p.flavors), "gpus": float(p.gpus)}
                            for p in self.pod_sets]}


class Workload:
    """A Kueue Workload (either API version). `obj` is the API dict; it is never mutated."""

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.obj: Mapping[str, Any] = obj

    # -- identity ---------------------------------------------------------------------------------
    @property
    def metadata(self) -> Mapping[str, Any]:
        return self.obj.get("metadata") or {}

    @property
    def name(self) -> str:
        return str(self.metadata.get("name") or "")

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace") or "")

    @property
    def uid(self) -> str | None:
        return self.metadata.get("uid")

    @property
    def resource_version(self) -> str | None:
        return self.metadata.get("resourceVersion")

    @property
    def api_version(self) -> str:
        return str(self.obj.get("apiVersion") or f"{GROUP}/v1beta2")

    @property
    def version(self) -> str:
        return self.api_version.split("/")[-1]

    @property
    def labels(self) -> Mapping[str, str]:
        return self.metadata.get("labels") or {}

    @property
    def annotations(self) -> Mapping[str, str]:
        return self.metadata.get("annotations") or {}

    @property
    def created_at(self) -> datetime | None:
        return parse_time(self.metadata.get("creationTimestamp"))

    def ref(self) -> JSON:
        return {"namespace": self.namespace, "name": self.name, "uid": self.uid}

    # -- spec -------------------------------------------------------------------------------------
    @property
    def spec(self) -> Mapping[str, Any]:
        return self.obj.get("spec") or {}

    @property
    def queue_name(self) -> str | None:
        return self.spec.get("queueName") or self.labels.get("kueue.x-k8s.io/queue-name") or None

    @property
    def active(self) -> bool:
        """spec.active (default true): false = deactivated by someone (us, a user, Kueue)."""
        return self.spec.get("active", True) is not False

    @property
    def pod_sets(self) -> list[Mapping[str, Any]]:
        return list(self.spec.get("podSets") or [])

    @property
    def elastic(self) -> bool:
        return self.annotations.get("kueue.x-k8s.io/elastic-job") == "true"

    # -- conditions -------------------------------------------------------------------------------
    @property
    def status_obj(self) -> Mapping[str, Any]:
        return self.obj.get("status") or {}

    def condition(self, kind: str) -> Condition | None:
        for raw in self.status_obj.get("conditions") or []:
            if raw.get("type") == kind:
                return Condition(kind, str(raw.get("status", "Unknown")), str(raw.get("reason") or ""),
                                 str(raw.get("message") or ""), parse_time(raw.get("lastTransitionTime")))
        return None

    def is_true(self, kind: str) -> bool:
        cond = self.condition(kind)
        return cond is not None and cond.true

    @property
    def is_finished(self) -> bool:
        return self.is_true(FINISHED)

    @property
    def is_admitted(self) -> bool:
        """Admitted=True and not finished (Finished wins)."""
        return not self.is_finished and self.is_true(ADMITTED)

    @property
    def has_quota(self) -> bool:
        return not self.is_finished and self.is_true(QUOTA_RESERVED)

    @property
    def evicted(self) -> Condition | None:
        cond = self.condition(EVICTED)
        return cond if cond is not None and cond.true else None

    @property
    def deactivated(self) -> bool:
        evicted = self.evicted
        return not self.active or (evicted is not None and evicted.reason in DEACTIVATED_REASONS)

    def status(self) -> str:
        """Kueue's precedence: finished > admitted > quota-reserved > pending."""
        if self.is_true(FINISHED):
            return "finished"
        if self.is_true(ADMITTED):
            return "admitted"
        if self.is_true(QUOTA_RESERVED):
            return "quota-reserved"
        return "pending"

    @property
    def finished_reason(self) -> str | None:
        cond = self.condition(FINISHED)
        return cond.reason if cond and cond.true else None

    @property
    def admitted_at(self) -> datetime | None:
        cond = self.condition(ADMITTED)
        if cond and cond.true and cond.last_transition:
            return cond.last_transition
        cond = self.condition(QUOTA_RESERVED)
        return cond.last_transition if cond and cond.true else None

    @property
    def quota_reserved_at(self) -> datetime | None:
        cond = self.condition(QUOTA_RESERVED)
        if cond and cond.true and cond.last_transition:
            return cond.last_transition
        return self.admitted_at

    @property
    def finished_at(self) -> datetime | None:
        cond = self.condition(FINISHED)
        return cond.last_transition if cond and cond.true else None

    @property
    def queue_wait_seconds(self) -> float | None:
        """creationTimestamp -> quota reservation (what a tenant waited in the queue)."""
        created, reserved = self.created_at, self.quota_reserved_at
        if created is None or reserved is None:
            return None
        return max(0.0, (reserved - created).total_seconds())

    # -- admission --------------------------------------------------------------------------------
    @property
    def admission(self) -> Admission | None:
        raw = self.status_obj.get("admission")
        if not raw or not raw.get("clusterQueue"):
            return None
        templates = {p.get("name"): p for p in self.pod_sets}
        pod_sets = []
        for assignment in raw.get("podSetAssignments") or []:
            name = str(assignment.get("name") or "main")
            pod_set = templates.get(name) or {}
            count = assignment.get("count")
            count = int(count if count is not None else pod_set.get("count") or 0)
            usage = (assignment.get("resourceUsage") or {}).get(GPU)
            gpus = quantity(usage) if usage is not None else count * template_request(pod_set.get("template"))
            pod_sets.append(PodSetAdmission(name, count, dict(assignment.get("flavors") or {}), gpus))
        return Admission(str(raw["clusterQueue"]), tuple(pod_sets))

    @property
    def gpus_admitted(self) -> Decimal:
        admission = self.admission
        return admission.gpus if admission else Decimal(0)

    @property
    def gpus_requested(self) -> Decimal:
        """GPUs the spec asks for (count x per-pod request, summed over pod sets)."""
        return sum((int(p.get("count") or 0) * template_request(p.get("template")) for p in self.pod_sets),
                   Decimal(0))


def is_workload(obj: object) -> bool:
    """A Kueue Workload dict of a supported API version."""
    if not isinstance(obj, Mapping):
        return False
    api_version = str(obj.get("apiVersion") or "")
    return obj.get("kind") == "Workload" and api_version in (f"{GROUP}/{v}" for v in VERSIONS)
