"""Does a release help someone? (pure; `idle.releaseOn: demand`)

A GPU freed while nobody waits reclaims nothing but power. With `releaseOn: demand` (per tenant, or
per kind), an idle workload is released only when

- queued work in its cohort would be admitted into what it frees: a pending Workload whose GPU
  request does not fit into the cohort's unused GPU quota but fits into it plus the GPUs this
  release frees. One that fits into the unused quota already does not wait for this release: Kueue
  admits it without it, or it waits for something these books do not show, and freeing GPUs helps it
  nothing; or
- the node pool could shrink (`nodePoolAutoscaled: true`): the release leaves a GPU node with no
  GPU pod, which the cluster autoscaler can then remove.

This is Kaiwo's `OnPressure` mode (silogen/kaiwo, docs/docs/admin/gpu-preemption.md) with Kueue's
books, simplified: GPUs are counted over the cohort's ClusterQueues whatever their flavor (a pending
Workload may need another flavor than the one released), without ClusterQueues' `lendingLimit` and
`borrowingLimit` (the unused quota a queue keeps for itself, or may not borrow past), without a
hierarchical `Cohort`'s own quota, and on GPUs alone (a Workload may wait for CPU or memory). Where
the books overstate the free quota, a Workload they say fits already is not counted as helped,
which errs towards keeping the idle workload. The on-idle step observes the cohort (ClusterQueues,
pending Workloads, the workload's nodes); `gpuaas simulate` models the queue (gpuaas.simulate.demand);
both judge with `verdict`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Demand:
    """What waits in the cohort, and what a release would empty."""

    cohort: str | None
    pending: tuple[tuple[str, int], ...] = ()
    """(namespace/name, GPUs) of each pending Workload in the cohort."""
    free_gpus: int = 0
    """GPU quota of the cohort not in use (nominal quota minus usage, over its ClusterQueues)."""
    emptied_nodes: tuple[str, ...] = ()
    """Nodes the release would leave without a GPU pod."""
    node_pool_autoscaled: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"cohort": self.cohort, "pending": [{"workload": n, "gpus": g} for n, g in self.pending[:20]],
                "pendingCount": len(self.pending), "freeGpus": self.free_gpus, "emptiedNodes": list(self.emptied_nodes),
                "nodePoolAutoscaled": self.node_pool_autoscaled}


@dataclass(frozen=True)
class DemandVerdict:
    helps: bool
    reason: str
    details: dict[str, Any] = field(default_factory=dict)


def verdict(demand: Demand, releasing: int) -> DemandVerdict:
    """Whether releasing `releasing` GPUs helps queued work or lets the node pool shrink."""
    details = {**demand.to_dict(), "releasing": releasing}
    free = demand.free_gpus
    room = free + releasing
    asking = [(name, gpus) for name, gpus in demand.pending if gpus > 0]
    fits = [(name, gpus) for name, gpus in asking if free < gpus <= room]
    cohort = f"cohort {demand.cohort}" if demand.cohort else "the cohort"
    if fits:
        name, gpus = fits[0]
        return DemandVerdict(True, f"{len(fits)} pending Workload(s) in {cohort} fit into the {room} GPU(s) free "
                                   f"after the release (first: {name}, {gpus} GPU(s))", details)
    if demand.node_pool_autoscaled and demand.emptied_nodes:
        return DemandVerdict(True, f"the release empties GPU node(s) {', '.join(demand.emptied_nodes[:3])}: the "
                                   "node pool can shrink", details)
    already = [(name, gpus) for name, gpus in asking if gpus <= free]
    if already:
        return DemandVerdict(False, f"{len(already)} pending Workload(s) in {cohort} fit into the {free} GPU(s) free "
                                    "already, so they do not wait for this release (Kueue admits them without it, or "
                                    "they wait for what the GPU quota does not show: another flavor, a lending or "
                                    "borrowing limit, CPU or memory)" + (
                                        f"; {len(asking) - len(already)} ask more than the {room} free after it"
                                        if len(asking) > len(already) else ""), details)
    if asking:
        smallest = min(g for _, g in asking)
        return DemandVerdict(False, f"{len(asking)} pending Workload(s) in {cohort}, the smallest asking "
                                    f"{smallest} GPU(s): more than the {room} free after the release", details)
    what = "nothing that asks for GPUs is queued" if demand.pending else "nothing is queued"
    return DemandVerdict(False, f"{what} in {cohort}" + (
        "" if demand.node_pool_autoscaled else " (and the node pool is not autoscaled)"), details)
