"""How a flavor's GPU capacity is split among the tenants' ClusterQueues (pure; no I/O).

Capacity tracking (`provision-quota` with `mode=capacity`) turns "the cluster has N GPUs of this
flavor right now" into one `nominalQuota` per tenant ClusterQueue. Kueue's field doc says the
nominal quota should represent resources available in the cluster; if the nominals of a cohort
add up to more than the nodes have, Kueue admits work the scheduler cannot place, and if they add
up to less, GPUs sit idle behind quota. So the split must add up to the capacity exactly, and it
must be a deterministic pure function: the same inputs give the same quotas, and a second run
against unchanged nodes patches nothing.

Rules, in order (each tenant's result names the rule that set it, for the audit record):

1. **In use is a floor.** A tenant never gets less than its ClusterQueue is using for the
   flavor (`status.flavorsUsage`), even when the capacity shrank below the total in use: taking
   quota away from admitted work does not stop it, it only makes Kueue's books wrong.
2. **Lent GPUs are set aside.** GPUs lent to a ClusterQueue for one workload (annotation
   `gpuaas.io/lent-gpus`, see `steps.reactions.provision_quota`) are taken out of the capacity
   before the split and added back to that tenant afterwards, until on-finished returns them.
3. **Guarantees next.** A tenant's guaranteed GPUs (policy) are a floor as far as the capacity
   left after rule 1 allows; when guarantees over-subscribe it they are scaled down in
   proportion (largest remainder).
4. **Weights split the rest.** The capacity is shared in proportion to the weights
   (water-filling: a tenant whose floor is above its weighted share keeps the floor and drops
   out; the others share what is left). Weight 0 means "floors only".
5. **Largest-remainder rounding.** Fractional shares are floored and the leftover GPUs go one
   each to the largest fractional parts, ties broken by ClusterQueue name, so the result is
   integral, sums to the capacity and never depends on dict order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class TenantClaim:
    """What one tenant's ClusterQueue brings to the split of one flavor."""

    cluster_queue: str
    weight: Fraction = Fraction(1)
    guarantee: int = 0
    in_use: int = 0
    lent: int = 0
    current: int | None = None  # nominalQuota now; None when the ClusterQueue lacks the flavor


@dataclass(frozen=True)
class TenantQuota:
    """The split's answer for one ClusterQueue, with the rule that decided it."""

    cluster_queue: str
    nominal: int
    current: int | None
    reason: str

    @property
    def changed(self) -> bool:
        return self.current != self.nominal


@dataclass(frozen=True)
class FlavorSplit:
    """The whole split of one flavor: per-tenant quotas plus flavor-level notes."""

    flavor: str
    capacity: int
    quotas: tuple[TenantQuota, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def total(self) -> int:
        return sum(q.nominal for q in self.quotas)

    def by_queue(self) -> dict[str, TenantQuota]:
        return {q.cluster_queue: q for q in self.quotas}


def largest_remainder(total: int, shares: Mapping[str, Fraction]) -> dict[str, int]:
    """Integers proportional to `shares` that add up to `total` (Hamilton's method).

    Ties in the fractional part go to the name that sorts first, so the answer never depends on
    the order the tenants were listed in.
    """
    if total < 0:
        raise ValueError(f"total must be >= 0, got {total}")
    weight_sum = sum(shares.values(), Fraction(0))
    if total == 0 or weight_sum == 0:
        return {name: 0 for name in shares}
    exact = {name: Fraction(total) * share / weight_sum for name, share in shares.items()}
    result = {name: int(value) for name, value in exact.items()}  # floor: values are >= 0
    leftover = total - sum(result.values())
    by_remainder = sorted(exact, key=lambda name: (-(exact[name] - result[name]), name))
    for name in by_remainder[:leftover]:
        result[name] += 1
    return result


def split_capacity(flavor: str, capacity: int, claims: Iterable[TenantClaim]) -> FlavorSplit:
    """Split `capacity` GPUs of `flavor` among `claims` by the rules in the module docstring."""
    claims = sorted(claims, key=lambda c: c.cluster_queue)
    names = [c.cluster_queue for c in claims]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate ClusterQueue in claims for flavor {flavor}: {names}")
    for claim in claims:
        if claim.weight < 0 or claim.guarantee < 0 or claim.in_use < 0 or claim.lent < 0:
            raise ValueError(f"ClusterQueue {claim.cluster_queue}: weight, guarantee, in_use and lent "
                             f"must be >= 0, got {claim}")
    capacity = max(0, capacity)
    notes: list[str] = []
    if not claims:
        return FlavorSplit(flavor, capacity, (), ("no tenant ClusterQueue in the cohort",))

    lent_total = sum(c.lent for c in claims)
    pool = max(0, capacity - lent_total)
    if lent_total:
        notes.append(f"{lent_total} GPU(s) lent to workloads set aside from capacity {capacity}")
    # Rule 1: what is in use beyond the tenant's lent GPUs is a hard floor.
    hard = {c.cluster_queue: max(0, c.in_use - c.lent) for c in claims}
    hard_total = sum(hard.values())
    reasons: dict[str, str] = {}
    if hard_total >= pool:
        if hard_total > pool:
            notes.append(f"capacity {pool} is below the {hard_total} GPU(s) in use; "
                         "every tenant is held at what it uses")
        base = dict(hard)
        for name in names:
            reasons[name] = "held at GPUs in use (capacity does not cover usage)"
        return _finish(flavor, capacity, claims, base, reasons, notes)

    # Rule 3: guarantees above the hard floor, scaled if they over-subscribe what is left.
    extra = {c.cluster_queue: max(0, c.guarantee - hard[c.cluster_queue]) for c in claims}
    room = pool - hard_total
    if sum(extra.values()) > room:
        notes.append(f"guarantees ({sum(extra.values()) + hard_total} GPU(s) with usage) exceed "
                     f"capacity {pool}; scaled down in proportion")
        extra = largest_remainder(room, {n: Fraction(v) for n, v in extra.items()})
    floor = {n: hard[n] + extra[n] for n in names}

    # Rule 4: water-filling by weight over the whole pool.
    weights = {c.cluster_queue: Fraction(c.weight) for c in claims}
    active = {n for n in names if weights[n] > 0}
    pinned = {n for n in names if n not in active}
    while True:
        remaining = pool - sum(floor[n] for n in pinned)
        active_weight = sum((weights[n] for n in active), Fraction(0))
        if not active or active_weight == 0:
            break
        below = {n for n in active if Fraction(remaining) * weights[n] / active_weight < floor[n]}
        if not below:
            break
        active -= below
        pinned |= below
    result = {n: floor[n] for n in pinned}
    remaining = pool - sum(result.values())
    if active:
        shares = largest_remainder(remaining, {n: weights[n] for n in active})
        for n in sorted(active):
            result[n] = shares[n]
            reasons[n] = (f"weighted share {weights[n]}/{sum(weights[m] for m in active)} "
                          f"of {remaining} GPU(s)")
    elif remaining > 0:
        notes.append(f"{remaining} GPU(s) unassigned: no tenant has a weight above 0")
    for n in pinned:
        if n in reasons:
            continue
        if floor[n] == hard[n] and hard[n] > 0 and extra[n] == 0:
            reasons[n] = "held at GPUs in use (above its weighted share)"
        elif extra[n] > 0:
            reasons[n] = "guarantee (above its weighted share)" if weights[n] > 0 else "guarantee (weight 0)"
        else:
            reasons[n] = "weight 0: floors only"
    return _finish(flavor, capacity, claims, result, reasons, notes)


def _finish(flavor: str, capacity: int, claims: list[TenantClaim], split: dict[str, int],
            reasons: dict[str, str], notes: list[str]) -> FlavorSplit:
    quotas = []
    for claim in claims:
        nominal = split[claim.cluster_queue] + claim.lent
        reason = reasons[claim.cluster_queue]
        if claim.lent:
            reason += f", plus {claim.lent} lent GPU(s)"
        quotas.append(TenantQuota(claim.cluster_queue, nominal, claim.current, reason))
    return FlavorSplit(flavor, capacity, tuple(quotas), tuple(notes))


# --- observing capacity from Nodes (pure over the Node dicts the gateway returns) -------------

def node_is_usable(node: Mapping) -> bool:
    """Ready and schedulable: a cordoned or NotReady node's GPUs cannot take new work."""
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def node_matches(node: Mapping, node_labels: Mapping[str, str]) -> bool:
    """A ResourceFlavor's `spec.nodeLabels` select a node when every label is present and equal."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in node_labels.items())


def allocatable_gpus(node: Mapping, resource: str = GPU_RESOURCE) -> int:
    """Whole GPUs the node reports as allocatable (0 when absent or malformed)."""
    value = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
    try:
        return max(0, int(str(value))) if value is not None else 0
    except ValueError:
        return 0


def flavor_capacity(nodes: Iterable[Mapping], node_labels: Mapping[str, str],
                    resource: str = GPU_RESOURCE) -> tuple[int, list[str]]:
    """Sum of allocatable GPUs over usable nodes matching the flavor, and the names counted."""
    total, counted = 0, []
    for node in nodes:
        if node_matches(node, node_labels) and node_is_usable(node):
            gpus = allocatable_gpus(node, resource)
            if gpus:
                total += gpus
                counted.append((node.get("metadata") or {}).get("name", "?"))
    return total, sorted(counted)
