"""Flavor assignment for one Workload against one ClusterQueue (pure).

For every pod set, each requested resource must be covered by a resource group of the
ClusterQueue; all resources of one group go to the same flavor, tried in the order the
ClusterQueue lists them; the first flavor where everything fits (borrowing allowed, Kueue's
default `whenCanBorrow: MayStopSearch`) wins. A flavor whose `nodeLabels` contradict the pod
set's `nodeSelector` is skipped. When nothing fits, the message says what is missing, worded as
Kueue words it ("couldn't assign flavors to pod set main: insufficient unused quota for
nvidia.com/gpu in flavor a100, 4 more needed").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from engine.kueue.quantity import format_quantity, parse_quantity
from engine.kueue.quota import CohortBook, FlavorResource, QueueQuota


@dataclass(frozen=True)
class PodSetRequest:
    name: str
    count: int
    per_pod: Mapping[str, Fraction]
    node_selector: Mapping[str, str]

    def total(self, count: int | None = None) -> dict[str, Fraction]:
        n = self.count if count is None else count
        return {resource: amount * n for resource, amount in self.per_pod.items()}


@dataclass(frozen=True)
class Assignment:
    """A successful admission: the status.admission body and the usage it reserves."""

    cluster_queue: str
    pod_sets: tuple[dict, ...]
    usage: Mapping[FlavorResource, Fraction]
    borrows: bool

    def admission(self) -> dict:
        return {"clusterQueue": self.cluster_queue, "podSetAssignments": [dict(p) for p in self.pod_sets]}


@dataclass(frozen=True)
class NoFit:
    reason: str   # Pending (waiting for quota) or Inadmissible (can never fit as configured)
    message: str


def pod_set_requests(workload: Mapping, excluded_prefixes: Sequence[str] = ()) -> list[PodSetRequest]:
    """Per-pod requests of each pod set: containers summed, limits standing in for missing requests."""
    out = []
    for pod_set in (workload.get("spec") or {}).get("podSets") or []:
        spec = ((pod_set.get("template") or {}).get("spec") or {})
        per_pod: dict[str, Fraction] = {}
        for container in spec.get("containers") or []:
            resources = container.get("resources") or {}
            merged = dict(resources.get("limits") or {})
            merged.update(resources.get("requests") or {})
            for resource, amount in merged.items():
                if any(resource.startswith(prefix) for prefix in excluded_prefixes):
                    continue
                per_pod[resource] = per_pod.get(resource, Fraction(0)) + parse_quantity(amount)
        out.append(PodSetRequest(
            name=pod_set.get("name", "main"),
            count=int(pod_set.get("count", 1)),
            per_pod={r: a for r, a in per_pod.items() if a},
            node_selector=spec.get("nodeSelector") or {},
        ))
    return out


def assign(requests: Sequence[PodSetRequest], queue: QueueQuota, book: CohortBook,
           flavor_labels: Mapping[str, Mapping[str, str]]) -> Assignment | NoFit:
    """Choose flavors for every pod set or say why none fits."""
    assumed: dict[FlavorResource, Fraction] = {}
    assignments = []
    borrows = False
    for request in requests:
        total = request.total()
        flavors: dict[str, str] = {}
        by_group: dict[int, list[str]] = {}
        for resource in sorted(total):
            group = queue.group_for(resource)
            if group is None:
                return NoFit("Inadmissible", f"couldn't assign flavors to pod set {request.name}: "
                                             f"resource {resource} unavailable in ClusterQueue")
            by_group.setdefault(queue.groups.index(group), []).append(resource)
        for index, resources in sorted(by_group.items()):
            group = queue.groups[index]
            problems: list[str] = []
            chosen = None
            for flavor, quotas in group.flavors:
                labels = flavor_labels.get(flavor, {})
                if any(key in labels and labels[key] != value for key, value in request.node_selector.items()):
                    problems.append(f"flavor {flavor} doesn't match node affinity")
                    continue
                fits = True
                for resource in resources:
                    if resource not in quotas:
                        problems.append(f"resource {resource} unavailable in flavor {flavor}")
                        fits = False
                        continue
                    need = assumed.get((flavor, resource), Fraction(0)) + total[resource]
                    have = book.available(queue, flavor, resource)
                    if need > have:
                        problems.append(f"insufficient unused quota for {resource} in flavor {flavor}, "
                                        f"{format_quantity(need - have, resource)} more needed")
                        fits = False
                if fits:
                    chosen = flavor
                    break
            if chosen is None:
                return NoFit("Pending", f"couldn't assign flavors to pod set {request.name}: "
                                        + ", ".join(problems))
            for resource in resources:
                flavors[resource] = chosen
                key = (chosen, resource)
                assumed[key] = assumed.get(key, Fraction(0)) + total[resource]
                quota = queue.quota(chosen, resource)
                if quota and queue.usage.get(key, Fraction(0)) + assumed[key] > quota.nominal:
                    borrows = True
        assignments.append({
            "name": request.name,
            "flavors": flavors,
            "resourceUsage": {r: format_quantity(a, r) for r, a in sorted(total.items())},
            "count": request.count,
        })
    return Assignment(queue.name, tuple(assignments), assumed, borrows)


def usage_of_admission(admission: Mapping | None) -> dict[FlavorResource, Fraction]:
    """(flavor, resource) -> amount a written status.admission reserves."""
    usage: dict[FlavorResource, Fraction] = {}
    for pod_set in (admission or {}).get("podSetAssignments") or []:
        flavors = pod_set.get("flavors") or {}
        for resource, amount in (pod_set.get("resourceUsage") or {}).items():
            flavor = flavors.get(resource)
            if flavor is None:
                continue
            usage[(flavor, resource)] = usage.get((flavor, resource), Fraction(0)) + parse_quantity(amount)
    return usage
