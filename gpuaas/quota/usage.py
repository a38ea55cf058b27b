"""What each tenant had and used: the live ClusterQueues plus Prometheus history, as TenantUsage.

Quota and limits come from the ClusterQueues (the official kubernetes client, through
`steps.gateways.kubernetes`): what is configured NOW is what a change starts from. Use comes from
Prometheus (prometheus-api-client) over the window, with the metric names and labels Kueue v0.19
exports (`kueue_cluster_queue_resource_usage`, `_nominal_quota`, `_resource_pending` {cluster_queue,
flavor, resource, replica_role}, the `kueue_admission_wait_time_seconds` histogram), DCGM activity
joined to tenants through kube-state-metrics' namespace label, and the Argo custom metric
`gpuaas_gpu_hours_reclaimed`. The queries read raw series (not the product's recording rules), so
the advice works on a cluster where the PrometheusRule is not installed.

Lent GPUs are not a Kueue metric: at each sample the cohort's borrowed GPUs are attributed to the
tenants whose quota sat unused, in proportion to how much each left unused.
"""

from __future__ import annotations

import math
import re
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from gpuaas.manifests import observability as obs
from gpuaas.quota.advice import TenantUsage

_DURATION = re.compile(r"^(\d+)([smhdw])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
MAX_POINTS = 720
MAX_WINDOW_SECONDS = 366 * 86400
"""The longest `quota advise --since`: a year; a longer one made queries before the epoch."""


def parse_window(text: str) -> int:
    """`7d`, `12h`, `90m`, `300s` -> seconds (raises ValueError with what was expected)."""
    match = _DURATION.match(text.strip())
    if not match or int(match.group(1)) == 0:
        raise ValueError(f"--since: expected a duration like 7d, 12h or 90m, found {text!r}")
    seconds = int(match.group(1)) * _SECONDS[match.group(2)]
    if seconds > MAX_WINDOW_SECONDS:
        raise ValueError(f"--since: expected a window of at most 366d (Prometheus keeps weeks to months of "
                         f"history), found {text!r}")
    return seconds


@dataclass(frozen=True)
class Window:
    end: float
    seconds: int

    @property
    def start(self) -> float:
        return self.end - self.seconds

    @property
    def step(self) -> float:
        return max(1.0, self.seconds / MAX_POINTS)

    @property
    def range(self) -> str:
        return f"{self.seconds}s"


def _queue_flavor(metric: str) -> str:
    return f"max by (cluster_queue, flavor) ({metric}{{{obs.KUEUE_SELECTOR}}})"


QUERIES = {
    "allocated": f"sum by (cluster_queue) ({_queue_flavor('kueue_cluster_queue_resource_usage')})",
    "nominal": f"sum by (cluster_queue) ({_queue_flavor('kueue_cluster_queue_nominal_quota')})",
    "borrowed": ("sum by (cluster_queue) (clamp_min(" + _queue_flavor("kueue_cluster_queue_resource_usage")
                 + " - on (cluster_queue, flavor) " + _queue_flavor("kueue_cluster_queue_nominal_quota") + ", 0))"),
    "unused": ("sum by (cluster_queue) (clamp_min(" + _queue_flavor("kueue_cluster_queue_nominal_quota")
               + " - on (cluster_queue, flavor) " + _queue_flavor("kueue_cluster_queue_resource_usage") + ", 0))"),
    "pending": f"max by (cluster_queue) (kueue_cluster_queue_resource_pending{{{obs.KUEUE_SELECTOR}}})",
    "busy": (f"sum by (tenant) ({obs.gpu_activity_expr()} * on (namespace) group_left (tenant) "
             f"{obs.tenant_of_namespace()})"),
}


def _series(result: list[dict[str, Any]], label: str) -> dict[str, dict[float, float]]:
    out: dict[str, dict[float, float]] = {}
    for item in result:
        key = item["metric"].get(label, "")
        out[key] = {float(t): float(v) for t, v in item.get("values", [])}
    return out


def _p(values: list[float], q: float) -> float:
    """Quantile with linear interpolation (numpy's default), for p95 of a sampled series."""
    if not values:
        return 0.0
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class UsageHistory:
    """The sampled series per tenant, kept for charts (`timeline`) and reduced to TenantUsage."""

    window: Window
    series: dict[str, dict[str, dict[float, float]]]
    wait_p90: dict[str, float]
    reclaimed: dict[str, float]

    def timeline(self, tenant: str) -> dict[str, list[tuple[float, float]]]:
        return {name: sorted(by_tenant.get(tenant, {}).items()) for name, by_tenant in self.series.items()}


def read_history(prometheus: Any, window: Window) -> UsageHistory:
    """Range queries over the window (prometheus: a prometheus_api_client.PrometheusConnect)."""
    from datetime import UTC, datetime

    start = datetime.fromtimestamp(window.start, UTC)
    end = datetime.fromtimestamp(window.end, UTC)
    series = {}
    for name, query in QUERIES.items():
        result = prometheus.custom_query_range(query, start_time=start, end_time=end, step=f"{window.step:g}s")
        series[name] = _series(result, "tenant" if name == "busy" else "cluster_queue")
    waits = prometheus.custom_query(
        "histogram_quantile(0.9, sum by (cluster_queue, le) (increase(kueue_admission_wait_time_seconds_bucket"
        f'{{replica_role!="follower"}}[{window.range}])))', params={"time": window.end})
    wait_p90 = {w["metric"].get("cluster_queue", ""): float(w["value"][1]) for w in waits
                if not math.isnan(float(w["value"][1]))}
    counter = '{__name__=~"argo_workflows_' + obs.RECLAIMED_GPU_HOURS_METRIC + '(_total)?"}'
    reclaimed_result = prometheus.custom_query(f"sum by (tenant) (increase({counter}[{window.range}]))",
                                               params={"time": window.end})
    reclaimed = {r["metric"].get("tenant", ""): float(r["value"][1]) for r in reclaimed_result}
    return UsageHistory(window, series, wait_p90, reclaimed)


def _lent(history: UsageHistory, cohorts: dict[str, str]) -> dict[str, list[float]]:
    """Per tenant, per sample: its share of the cohort's borrowed GPUs, by how much quota it left unused."""
    unused, borrowed = history.series["unused"], history.series["borrowed"]
    times = sorted({t for by_t in unused.values() for t in by_t})
    lent: dict[str, list[float]] = defaultdict(list)
    for t in times:
        by_cohort: dict[str, list[str]] = defaultdict(list)
        for tenant, cohort in cohorts.items():
            by_cohort[cohort].append(tenant)
        for members in by_cohort.values():
            total_borrowed = sum(borrowed.get(m, {}).get(t, 0.0) for m in members)
            total_unused = sum(unused.get(m, {}).get(t, 0.0) for m in members)
            for m in members:
                share = unused.get(m, {}).get(t, 0.0) / total_unused if total_unused else 0.0
                lent[m].append(min(total_borrowed, total_unused) * share)
    return lent


def tenant_usage(history: UsageHistory, cluster_queues: list[dict[str, Any]]) -> list[TenantUsage]:
    """Reduce the sampled series to one TenantUsage per ClusterQueue that has GPU quota."""
    from steps.cluster_queue import cohort_of, gpu_quotas, gpus_in_use

    queues = {cq["metadata"]["name"]: cq for cq in cluster_queues if gpu_quotas(cq)}
    lent = _lent(history, {name: cohort_of(cq) for name, cq in queues.items()})
    out = []
    for name, cq in sorted(queues.items()):
        quotas = gpu_quotas(cq)
        allocated = list(history.series["allocated"].get(name, {}).values())
        pending_by_t = history.series["pending"].get(name, {})
        alloc_by_t = history.series["allocated"].get(name, {})
        demand = [alloc_by_t[t] + pending_by_t.get(t, 0.0) for t in alloc_by_t]
        pending = list(pending_by_t.values())
        borrowed = list(history.series["borrowed"].get(name, {}).values())
        busy = list(history.series["busy"].get(name, {}).values())
        limits = _limits(cq)
        out.append(TenantUsage(
            tenant=name, cohort=cohort_of(cq), flavor=next(iter(quotas)) if len(quotas) == 1 else None,
            nominal=sum(quotas.values()), in_use_now=sum(gpus_in_use(cq).values()),
            borrowing_limit=limits.get("borrowingLimit"), lending_limit=limits.get("lendingLimit"),
            allocated_mean=_mean(allocated), allocated_p95=_p(allocated, 0.95), demand_p95=_p(demand, 0.95),
            busy_mean=_mean(busy) if busy else None, borrowed_mean=_mean(borrowed), borrowed_p95=_p(borrowed, 0.95),
            lent_mean=_mean(lent.get(name, [])), pending_mean=_mean(pending),
            queued_fraction=(sum(1 for v in pending if v > 0) / len(pending)) if pending else 0.0,
            wait_p90_seconds=history.wait_p90.get(name), gpu_hours_reclaimed=history.reclaimed.get(name, 0.0),
            samples=len(allocated)))
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _limits(cluster_queue: dict[str, Any]) -> dict[str, int]:
    """borrowingLimit / lendingLimit of the GPU resource (summed over flavors), where set."""
    from steps.capacity import GPU_RESOURCE

    out: dict[str, int] = {}
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                if resource.get("name") != GPU_RESOURCE:
                    continue
                for key in ("borrowingLimit", "lendingLimit"):
                    if resource.get(key) is not None:
                        out[key] = out.get(key, 0) + int(float(str(resource[key])))
    return out


def now() -> float:
    return time.time()
