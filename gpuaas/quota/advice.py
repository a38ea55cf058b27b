"""Quota advice: from a tenant's measured use to a recommended quota, with its reasons (pure).

The figures come from `gpuaas.quota.usage` (Prometheus history + the live ClusterQueues); this
module only decides. The rules, per cohort:

1. **Demand** is the p95 over the window of GPUs admitted plus GPUs waiting (allocated + pending):
   what the tenant would have used had the quota been there.
2. A tenant **queues** when GPUs were waiting in at least `queued_fraction` of the samples, or its
   admission wait p90 reached `wait_p90_seconds`. Its shortfall is demand - nominal quota.
3. A tenant's quota **sits idle** when its demand stayed at or below `idle_ratio` x nominal. It can
   give up nominal - max(demand + headroom, GPUs it holds now).
4. GPUs move from idle quota to queued tenants, largest shortfall first: the cohort's total stays
   the same, because Kueue's cohort capacity IS the sum of nominal quotas (lowering a quota with no
   taker would take real GPUs out of every queue). Idle quota with no taker stays and is reported
   (it is lent through the cohort anyway); a shortfall with no idle quota anywhere is reported as
   "the cohort needs N more GPUs".
5. Limits: a tenant that borrowed while another tenant of the cohort queued (and did not queue
   itself) gets a `borrowingLimit` (Kueue lets a borrower keep the GPUs until its workloads end
   unless preemption is configured); a tenant that queued while part of its own quota was lent out
   (and borrowed nothing) gets a `lendingLimit` that keeps its demand at home; a lowered quota takes
   a `lendingLimit` above it down with it (Kueue rejects lendingLimit > nominalQuota). When tenants that
   borrow also queue, the cohort is simply too small: that is a note, not a limit.

"No change" is an answer too: every tenant gets a verdict and the reasons for it.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

TEMPLATE = "gpuaas-provision-quota"


@dataclass(frozen=True)
class TenantUsage:
    """What one tenant (ClusterQueue) had and used over the window. GPU figures are GPU counts."""

    tenant: str
    cohort: str
    flavor: str | None
    """The tenant's one GPU flavor; None when it has several (advice then names no submission)."""
    nominal: int
    in_use_now: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    allocated_mean: float = 0.0
    allocated_p95: float = 0.0
    demand_p95: float = 0.0
    busy_mean: float | None = None
    borrowed_mean: float = 0.0
    borrowed_p95: float = 0.0
    lent_mean: float = 0.0
    pending_mean: float = 0.0
    queued_fraction: float = 0.0
    wait_p90_seconds: float | None = None
    gpu_hours_reclaimed: float = 0.0
    samples: int = 0


@dataclass(frozen=True)
class AdviceSettings:
    idle_ratio: float = 0.5
    queued_fraction: float = 0.10
    wait_p90_seconds: float = 300.0
    headroom: float = 0.2
    namespace: str = "gpuaas"


@dataclass
class TenantAdvice:
    usage: TenantUsage
    verdict: str = "no change"  # no change | lower | raise | limits
    new_nominal: int | None = None
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    reasons: list[str] = field(default_factory=list)

    @property
    def changes(self) -> bool:
        return self.new_nominal is not None or self.borrowing_limit is not None or self.lending_limit is not None

    def parameters(self) -> list[tuple[str, str]] | None:
        """The gpuaas-provision-quota parameters that apply this advice; None if nothing to submit."""
        if not self.changes or self.usage.flavor is None:
            return None
        params = [("mode", "hand"), ("tenant", self.usage.tenant), ("flavor", self.usage.flavor),
                  ("gpus", str(self.new_nominal if self.new_nominal is not None else self.usage.nominal))]
        if self.borrowing_limit is not None:
            params.append(("borrowing-limit", str(self.borrowing_limit)))
        if self.lending_limit is not None:
            params.append(("lending-limit", str(self.lending_limit)))
        return params

    def to_dict(self, namespace: str) -> dict[str, Any]:
        return {"tenant": self.usage.tenant, "usage": asdict(self.usage), "verdict": self.verdict,
                "newNominal": self.new_nominal, "borrowingLimit": self.borrowing_limit,
                "lendingLimit": self.lending_limit, "reasons": self.reasons,
                "submission": submission(self, namespace)}


@dataclass
class QuotaAdvice:
    tenants: list[TenantAdvice]
    notes: list[str] = field(default_factory=list)
    window: str = ""
    namespace: str = "gpuaas"

    @property
    def changes(self) -> list[TenantAdvice]:
        """Tenants to change, in the order to submit: lowered quotas first, so the cohort never grows."""
        order = {"lower": 0, "limits": 1, "raise": 2}
        return sorted((t for t in self.tenants if t.changes), key=lambda t: (order.get(t.verdict, 1), t.usage.tenant))

    def to_dict(self) -> dict[str, Any]:
        return {"window": self.window, "change": bool(self.changes), "notes": self.notes,
                "tenants": [t.to_dict(self.namespace) for t in self.tenants],
                "submissions": [submission(t, self.namespace) for t in self.changes if submission(t, self.namespace)]}


def submission(advice: TenantAdvice, namespace: str = "gpuaas") -> dict[str, Any] | None:
    """The hand submission that applies `advice`: the argo command line and the Argo UI fields."""
    params = advice.parameters()
    if params is None:
        return None
    argv = ["argo", "submit", "-n", namespace, "--from", f"workflowtemplate/{TEMPLATE}"]
    for name, value in params:
        argv += ["-p", f"{name}={value}"]
    return {"template": TEMPLATE, "parameters": dict(params), "command": shlex.join(argv),
            "dryRunCommand": shlex.join([*argv, "-p", "dry-run=true"])}


def _f(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _keep(usage: TenantUsage, settings: AdviceSettings) -> int:
    """GPUs an idle tenant keeps: its demand plus headroom, and never less than it holds now."""
    demand = math.ceil(usage.demand_p95 - 1e-9)
    return max(demand + math.ceil(demand * settings.headroom), usage.in_use_now)


def _queues(usage: TenantUsage, settings: AdviceSettings) -> bool:
    return usage.queued_fraction >= settings.queued_fraction or (
        usage.wait_p90_seconds is not None and usage.wait_p90_seconds >= settings.wait_p90_seconds)


def _queue_reason(usage: TenantUsage) -> str:
    wait = f", admission wait p90 {_f(usage.wait_p90_seconds / 60)} min" if usage.wait_p90_seconds is not None else ""
    return (f"GPUs were waiting in {usage.queued_fraction:.0%} of the window (mean {_f(usage.pending_mean)} GPUs "
            f"pending{wait}); demand p95 {_f(usage.demand_p95)} GPUs vs nominal {usage.nominal}")


def advise(usages: list[TenantUsage], settings: AdviceSettings = AdviceSettings(), window: str = "") -> QuotaAdvice:
    """One verdict per tenant, with reasons; GPU moves stay inside each cohort."""
    result = QuotaAdvice([TenantAdvice(u) for u in sorted(usages, key=lambda u: u.tenant)], window=window,
                         namespace=settings.namespace)
    by_cohort: dict[str, list[TenantAdvice]] = {}
    for advice in result.tenants:
        by_cohort.setdefault(advice.usage.cohort, []).append(advice)
        if advice.usage.samples == 0:
            advice.reasons.append("no Kueue samples in the window: nothing to go by (is Kueue's "
                                  "metrics.enableClusterQueueResources on and scraped?)")
    for cohort, members in sorted(by_cohort.items()):
        _advise_cohort(cohort, [m for m in members if m.usage.samples], settings, result.notes)
    for advice in result.tenants:
        if not advice.changes and advice.usage.samples:
            u = advice.usage
            advice.reasons.insert(0, f"allocated mean {_f(u.allocated_mean)}, p95 {_f(u.allocated_p95)} of nominal "
                                     f"{u.nominal}; demand p95 {_f(u.demand_p95)}: no change")
    return result


def _advise_cohort(cohort: str, members: list[TenantAdvice], settings: AdviceSettings, notes: list[str]) -> None:
    takers = sorted((a for a in members if _queues(a.usage, settings) and a.usage.demand_p95 > a.usage.nominal),
                    key=lambda a: (-(a.usage.demand_p95 - a.usage.nominal), a.usage.tenant))
    donors = sorted((a for a in members if a.usage.demand_p95 <= settings.idle_ratio * a.usage.nominal
                     and a.usage.nominal - _keep(a.usage, settings) > 0 and a not in takers),
                    key=lambda a: (-(a.usage.nominal - _keep(a.usage, settings)), a.usage.tenant))
    spare = {a.usage.tenant: a.usage.nominal - _keep(a.usage, settings) for a in donors}
    for taker in takers:
        u = taker.usage
        short = math.ceil(u.demand_p95 - 1e-9) - u.nominal
        got = 0
        for donor in donors:
            give = min(short - got, spare[donor.usage.tenant])
            if give <= 0:
                continue
            spare[donor.usage.tenant] -= give
            got += give
            d = donor.usage
            donor.new_nominal = (donor.new_nominal if donor.new_nominal is not None else d.nominal) - give
            donor.verdict = "lower"
            donor.reasons.append(
                f"quota sits idle: demand p95 {_f(d.demand_p95)} of nominal {d.nominal} (allocated mean "
                f"{_f(d.allocated_mean)}, lent mean {_f(d.lent_mean)}); gives {give} GPUs to {u.tenant} and keeps "
                f"{donor.new_nominal} (never below demand + {settings.headroom:.0%} headroom = "
                f"{_keep(d, settings)}, nor below the {d.in_use_now} in use)")
        if got:
            taker.new_nominal = u.nominal + got
            taker.verdict = "raise"
            taker.reasons.append(f"queues while others lend: {_queue_reason(u)}; +{got} GPUs from idle quota")
        if got < short:
            taker.reasons.append(f"{short - got} more GPUs needed than the cohort's idle quota has")
            notes.append(f"cohort {cohort or '(none)'}: {u.tenant} needs {short - got} more GPUs than any tenant "
                         "can spare: add GPU nodes (the capacity mode of gpuaas-provision-quota then shares them)")
    for donor in donors:
        d = donor.usage
        if donor.new_nominal is not None and d.lending_limit is not None and d.lending_limit > donor.new_nominal:
            donor.lending_limit = donor.new_nominal
            donor.reasons.append(f"lendingLimit {d.lending_limit} goes down to {donor.new_nominal} with the quota "
                                 "(Kueue rejects a lendingLimit above the nominal quota)")
    for donor in donors:
        if spare[donor.usage.tenant] > 0 and donor.new_nominal is None:
            d = donor.usage
            notes.append(f"{d.tenant}: quota sits idle (demand p95 {_f(d.demand_p95)} of {d.nominal}) but nobody in "
                         f"cohort {cohort or '(none)'} queues for it; it is lent through the cohort, so no change")
    queued = [t for t in members if _queues(t.usage, settings)]
    waiting = sum(max(0, math.ceil(t.usage.demand_p95 - 1e-9) - t.usage.nominal) for t in queued)
    for advice in members:
        u = advice.usage
        others_queued = [t.usage.tenant for t in queued if t is not advice]
        # A borrower that waits itself is as short as the others: the cohort is too small (noted above).
        if others_queued and not _queues(u, settings) and u.borrowed_p95 >= 1 \
                and (u.borrowing_limit is None or u.borrowing_limit > 0):
            limit = max(0, math.floor(u.borrowed_p95) - waiting) if waiting else 0
            if u.borrowing_limit is None or limit < u.borrowing_limit:
                advice.borrowing_limit = limit
                advice.verdict = advice.verdict if advice.verdict != "no change" else "limits"
                advice.reasons.append(
                    f"borrowed up to {_f(u.borrowed_p95)} GPUs (p95) while {', '.join(others_queued)} queued: "
                    f"borrowingLimit {limit} keeps their quota free (without preemption Kueue lets a borrower "
                    "keep GPUs until its workloads end)")
        if _queues(u, settings) and u.lent_mean >= 1 and u.borrowed_p95 < 1:
            keep = math.ceil(u.demand_p95 - 1e-9)
            new_nominal = advice.new_nominal if advice.new_nominal is not None else u.nominal
            limit = max(0, new_nominal - keep)
            if u.lending_limit is None or limit < u.lending_limit:
                advice.lending_limit = limit
                advice.verdict = advice.verdict if advice.verdict != "no change" else "limits"
                advice.reasons.append(f"lent {_f(u.lent_mean)} GPUs on average and queued itself: lendingLimit "
                                      f"{limit} keeps its demand ({keep} GPUs) at home")
    for advice in members:
        if advice.changes and advice.usage.flavor is None:
            advice.reasons.append("several GPU flavors: apply per flavor by hand (no single submission)")
