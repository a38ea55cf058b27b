"""Does a release help someone? (pure; `idle.releaseOn: demand`)

A GPU freed while nobody waits reclaims nothing but power. With `releaseOn: demand` (per tenant, or
per kind), an idle workload is released only when

- queued work in its cohort would be admitted into what it frees: a pending Workload whose GPU
  request fits into the cohort's unused GPU quota plus the GPUs this release frees (Kueue would
  have admitted one that fits into the unused quota already, so it waits for more), or
- the node pool could shrink (`nodePoolAutoscaled: true`): the release leaves a GPU node with no
  GPU pod, which the cluster autoscaler can then remove.

This is Kaiwo's `OnPressure` mode (silogen/kaiwo, docs/docs/admin/gpu-preemption.md) with Kueue's
books. The on-idle step observes the cohort (ClusterQueues, pending Workloads, the workload's
nodes); `gpuaas simulate` models the queue (gpuaas.simulate.demand); both judge with `verdict`.
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
    room = demand.free_gpus + releasing
    fits = [(name, gpus) for name, gpus in demand.pending if 0 < gpus <= room]
    cohort = f"cohort {demand.cohort}" if demand.cohort else "the cohort"
    if fits:
        name, gpus = fits[0]
        return DemandVerdict(True, f"{len(fits)} pending Workload(s) in {cohort} fit into the {room} GPU(s) free "
                                   f"after the release (first: {name}, {gpus} GPU(s))", details)
    if demand.node_pool_autoscaled and demand.emptied_nodes:
        return DemandVerdict(True, f"the release empties GPU node(s) {', '.join(demand.emptied_nodes[:3])}: the "
                                   "node pool can shrink", details)
    if demand.pending:
        smallest = min(g for _, g in demand.pending)
        return DemandVerdict(False, f"{len(demand.pending)} pending Workload(s) in {cohort}, the smallest asking "
                                    f"{smallest} GPU(s): more than the {room} free after the release", details)
    return DemandVerdict(False, f"nothing is queued in {cohort}" + (
        "" if demand.node_pool_autoscaled else " (and the node pool is not autoscaled)"), details)
