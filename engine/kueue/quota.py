"""ClusterQueue quota and cohort borrowing arithmetic (pure).

Kueue's model, reduced to what the demo needs: each ClusterQueue has, per (flavor, resource), a
`nominalQuota`, an optional `borrowingLimit` (how far above nominal it may go) and an optional
`lendingLimit` (how much of its unused nominal the cohort may use; unset = all of it). The part of
nominal that is not lendable is guaranteed to the queue. The cohort's pool is the sum of what the
members lend; a queue may use its own guaranteed part plus whatever of the pool is unused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from engine.kueue.quantity import parse_quantity

FlavorResource = tuple[str, str]


@dataclass(frozen=True)
class ResourceQuota:
    nominal: Fraction
    borrowing_limit: Fraction | None = None
    lending_limit: Fraction | None = None

    @property
    def guaranteed(self) -> Fraction:
        """The part of nominal the cohort cannot borrow."""
        if self.lending_limit is None:
            return Fraction(0)
        return max(Fraction(0), self.nominal - self.lending_limit)

    @property
    def lendable(self) -> Fraction:
        return self.nominal - self.guaranteed


@dataclass(frozen=True)
class ResourceGroup:
    covered: tuple[str, ...]
    flavors: tuple[tuple[str, Mapping[str, ResourceQuota]], ...]


@dataclass
class QueueQuota:
    """One ClusterQueue's quota and current reservation, as admission sees it."""

    name: str
    cohort: str | None
    strategy: str
    groups: tuple[ResourceGroup, ...]
    stop_policy: str = "None"
    usage: dict[FlavorResource, Fraction] = field(default_factory=dict)

    def quota(self, flavor: str, resource: str) -> ResourceQuota | None:
        for group in self.groups:
            for name, resources in group.flavors:
                if name == flavor and resource in resources:
                    return resources[resource]
        return None

    def group_for(self, resource: str) -> ResourceGroup | None:
        for group in self.groups:
            if resource in group.covered:
                return group
        return None

    def flavor_resources(self) -> list[tuple[str, list[str]]]:
        """Flavors in spec order with their resources (the shape of status.flavorsUsage)."""
        out: list[tuple[str, list[str]]] = []
        for group in self.groups:
            for name, resources in group.flavors:
                out.append((name, list(resources)))
        return out


def queue_from_object(obj: Mapping) -> QueueQuota:
    """Read a v1beta2 or v1beta1 ClusterQueue (`cohortName` or `cohort`)."""
    spec = obj.get("spec") or {}
    groups = []
    for group in spec.get("resourceGroups") or []:
        flavors = []
        for flavor in group.get("flavors") or []:
            resources = {}
            for resource in flavor.get("resources") or []:
                resources[resource["name"]] = ResourceQuota(
                    nominal=parse_quantity(resource.get("nominalQuota", 0)),
                    borrowing_limit=_optional(resource.get("borrowingLimit")),
                    lending_limit=_optional(resource.get("lendingLimit")))
            flavors.append((flavor["name"], resources))
        groups.append(ResourceGroup(tuple(group.get("coveredResources") or ()), tuple(flavors)))
    return QueueQuota(
        name=obj["metadata"]["name"],
        cohort=spec.get("cohortName") or spec.get("cohort") or None,
        strategy=spec.get("queueingStrategy") or "BestEffortFIFO",
        groups=tuple(groups),
        stop_policy=spec.get("stopPolicy") or "None",
    )


def _optional(value: object) -> Fraction | None:
    return None if value is None else parse_quantity(value)


class CohortBook:
    """Usage of every queue, and how much each may still take, borrowing included."""

    def __init__(self, queues: Iterable[QueueQuota]):
        self.queues = {q.name: q for q in queues}

    def members(self, queue: QueueQuota) -> list[QueueQuota]:
        if not queue.cohort:
            return [queue]
        return [q for q in self.queues.values() if q.cohort == queue.cohort]

    def available(self, queue: QueueQuota, flavor: str, resource: str) -> Fraction:
        """How much more of (flavor, resource) `queue` may reserve now."""
        own = queue.quota(flavor, resource)
        if own is None:
            return Fraction(0)
        used = queue.usage.get((flavor, resource), Fraction(0))
        if not queue.cohort:
            return max(Fraction(0), own.nominal - used)
        pool, pool_used = Fraction(0), Fraction(0)
        for member in self.members(queue):
            quota = member.quota(flavor, resource)
            if quota is None:
                continue
            pool += quota.lendable
            pool_used += max(Fraction(0), member.usage.get((flavor, resource), Fraction(0)) - quota.guaranteed)
        available = max(Fraction(0), own.guaranteed - used) + max(Fraction(0), pool - pool_used)
        if own.borrowing_limit is not None:
            available = min(available, own.nominal + own.borrowing_limit - used)
        return max(Fraction(0), available)

    def maximum(self, queue: QueueQuota, flavor: str, resource: str) -> Fraction:
        """The most the queue could ever hold of (flavor, resource), with an empty cohort."""
        own = queue.quota(flavor, resource)
        if own is None:
            return Fraction(0)
        if not queue.cohort:
            return own.nominal
        total = own.guaranteed + sum((m.quota(flavor, resource).lendable for m in self.members(queue)
                                      if m.quota(flavor, resource) is not None), Fraction(0))
        if own.borrowing_limit is not None:
            total = min(total, own.nominal + own.borrowing_limit)
        return total

    def reserve(self, queue: QueueQuota, usage: Mapping[FlavorResource, Fraction], sign: int = 1) -> None:
        for key, amount in usage.items():
            queue.usage[key] = queue.usage.get(key, Fraction(0)) + sign * amount
