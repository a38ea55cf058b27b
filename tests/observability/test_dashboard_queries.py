"""Every dashboard panel's query, run on a real Prometheus holding three hours of backfilled history.

The history (tests/support/cluster_history.py) is a small cluster with a known story: two tenants
in one cohort, node-a scraped with dcgm-exporter's own pod labels and node-b behind a
ServiceMonitor (`exported_*` spelling), one busy and one idle notebook, a training job on borrowed
quota, a hot GPU, an XID, an uncorrectable ECC error, a GPU that vanished, Kueue metrics from a
leader and a follower replica, kube-state-metrics and the Argo custom metrics.

`promtool tsdb create-blocks-from openmetrics` writes it into the TSDB, `create-blocks-from rules`
evaluates the product's recording rules over it (in dependency order), and the same Prometheus then
runs every rule live, so alerts fire on the backfilled data. Each panel's query must return the
series it is meant to, and every series must carry the labels its legend prints: a panel that
would show "No data" or an empty legend fails here.
"""

from __future__ import annotations

import json
import math
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from engine.backfill import BackfilledPrometheus, OpenMetricsHistory, rule_stages
from engine.exporter import DcgmExporter
from gpuaas.manifests import gpu_health
from gpuaas.manifests import observability as obs
from tests.support.cluster_history import DcgmTimeline, KueueHistory, QueueTimeline, argo_counters, kube_state
from tests.support.prometheus import require_monitoring

MINUTES = 180
XID_AT, DBE_AT, HOT_FROM, VANISH_AT = 170, 176, 100, 120


@dataclass
class Backfilled:
    prometheus: BackfilledPrometheus
    start: float
    end: float

    def get(self, path: str, **params: Any) -> list[dict[str, Any]]:
        url = f"{self.prometheus.url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=30) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]["result"]


def _dcgm() -> DcgmTimeline:
    node_a, node_b = DcgmExporter(), DcgmExporter(label_style="exported")
    for index in range(4):
        node_a.add_gpu("node-a", index)
    for index in range(2):
        node_b.add_gpu("node-b", index)
    a = [g.uuid for g in node_a.gpus()]
    b = [g.uuid for g in node_b.gpus()]
    node_a.assign(a[0], namespace="team-a", pod="nb-0")
    node_a.assign(a[1], namespace="team-a", pod="nb-0")
    node_a.assign(a[2], namespace="team-a", pod="nb-idle")
    node_b.assign(b[0], namespace="team-b", pod="train-0")
    node_b.assign(b[1], namespace="team-b", pod="train-0")

    def change(minute: int) -> None:
        node_a.set_utilization(a[0], 55 + 10 * ((minute // 7) % 3))
        node_a.set_utilization(a[1], 40)
        node_a.set_utilization(a[2], 0)
        node_b.set_utilization(b[0], 80)
        node_b.set_utilization(b[1], 90)
        if minute == HOT_FROM:
            node_b.set(b[1], temperature_c=92.0)
        if minute == XID_AT:
            node_a.set(a[0], xid=79)
        if minute == DBE_AT:
            node_b.add_ecc_errors(b[0], uncorrectable=1)
        if minute == VANISH_AT:
            node_a.remove_gpu(a[3])

    return DcgmTimeline([node_a, node_b], [
        {"job": "nvidia-dcgm-exporter", "instance": "10.0.1.1:9400"},
        # behind a ServiceMonitor the exporter pod's labels win: the GPU's became exported_*
        {"job": "nvidia-dcgm-exporter", "instance": "10.0.1.2:9400", "namespace": "gpu-operator",
         "pod": "nvidia-dcgm-exporter-b7x9q", "container": "nvidia-dcgm-exporter"}], change)


def build_history(start: float) -> OpenMetricsHistory:
    history = OpenMetricsHistory()
    _dcgm().write(history, start, MINUTES)
    KueueHistory([
        QueueTimeline("tenant-a", "gpus", 4, usage=lambda m: 3, pending=lambda m: 0,
                      waits=lambda m: [5.0] if m % 5 == 0 else []),
        QueueTimeline("tenant-b", "gpus", 2, usage=lambda m: 3, pending=lambda m: 2 if m % 20 < 10 else 0,
                      waits=lambda m: [600.0] if m % 5 == 0 else []),
    ], replicas=("leader", "follower")).write(history, start, MINUTES)
    kube_state(history, start, MINUTES, tenants={"team-a": "tenant-a", "team-b": "tenant-b"},
               pods=[("team-a", "nb-0", 2), ("team-a", "nb-idle", 1), ("team-b", "train-0", 2)],
               nodes=["node-a", "node-b"])
    outcome = "argo_workflows_gpuaas_reaction_outcomes"
    argo_counters(history, start, MINUTES, {
        (outcome, (("reaction", "on-admitted"), ("outcome", "applied"))): lambda m: m // 10,
        (outcome, (("reaction", "on-idle"), ("outcome", "applied"))): lambda m: m // 60,
        (outcome, (("reaction", "on-idle"), ("outcome", "failed"))): lambda m: 1 if m >= 90 else 0,
        ("argo_workflows_gpuaas_gpu_hours_reclaimed", (("tenant", "tenant-a"),)): lambda m: 2.5 * (m // 60),
        ("argo_workflows_gpuaas_idle_gpus_released", (("tenant", "tenant-a"),)): lambda m: 2 * (m // 60),
    })
    return history


# Alerts fire on the backfilled data right away: the production windows, no `for`.
HEALTH_NOW = gpu_health.HealthSettings(temperature_for="0s", vanished_for="0s", remap_failure_for="0s")
RULES = obs.rule_groups("30m", "0s", health=HEALTH_NOW)


@pytest.fixture(scope="module")
def backfilled() -> Iterator[Backfilled]:
    require_monitoring()
    end = float(int(time.time()) - 30)
    start = end - MINUTES * 60
    history = build_history(start)
    with BackfilledPrometheus(history, RULES, start=start, end=end, evaluation_interval_s=1.0) as prometheus:
        yield Backfilled(prometheus, start, end)


def _variables(expr: str) -> str:
    return (expr.replace('"$tenant"', '".*"').replace('"$namespace"', '".*"').replace("$__range", f"{MINUTES}m"))


def _placeholder_groups(legend: str) -> list[list[str]]:
    """Labels a legend prints; adjacent placeholders ({{Hostname}}{{hostname}}) are alternatives."""
    groups: list[list[str]] = []
    for run in re.findall(r"(?:\{\{\s*\w+\s*\}\})+", legend):
        groups.append(re.findall(r"\{\{\s*(\w+)\s*\}\}", run))
    return groups


def run_query(backfilled: Backfilled, target: dict[str, Any]) -> list[dict[str, Any]]:
    expr = _variables(target["expr"])
    if target.get("instant"):
        return backfilled.get("/api/v1/query", query=expr)
    return backfilled.get("/api/v1/query_range", query=expr, start=backfilled.start + 1800, end=backfilled.end, step=60)


def _values(series: dict[str, Any]) -> list[float]:
    if "values" in series:
        return [float(v) for _, v in series["values"]]
    return [float(series["value"][1])]


# title -> (for each target: label sets that must be among the series)
EXPECTED: dict[str, list[list[dict[str, str]]]] = {
    "GPU utilization per tenant": [[{"tenant": "tenant-a"}, {"tenant": "tenant-b"}]],
    "GPUs allocated vs nominal quota per tenant": [[{"tenant": "tenant-a"}, {"tenant": "tenant-b"}]] * 2,
    "GPUs borrowed from the cohort and GPUs waiting per tenant": [[{"tenant": "tenant-a"}, {"tenant": "tenant-b"}]] * 2,
    "Queue wait before admission (p90) per tenant": [[{"tenant": "tenant-a"}, {"tenant": "tenant-b"}]],
    "Idle GPU-hours reclaimed per tenant (per hour)": [[{"tenant": "tenant-a"}]],
    "Idle GPU-hours reclaimed (dashboard range)": [[{}]],
    "GPU utilization per project": [[{"namespace": "team-a"}, {"namespace": "team-b"}]],
    "GPUs requested per project (running pods)": [[{"namespace": "team-a"}, {"namespace": "team-b"}]],
    "GPU utilization per GPU": [[{"namespace": "team-a", "pod": "nb-0", "gpu": "0"},
                                 {"namespace": "team-a", "pod": "nb-idle", "gpu": "2"},
                                 {"namespace": "team-b", "pod": "train-0", "gpu": "1"}]],
    "GPU temperature": [[{"node": "node-a", "gpu": "0"}, {"node": "node-a", "gpu": "3"}, {"node": "node-b", "gpu": "1"}]],
    "GPU power draw": [[{"node": "node-a", "gpu": "1"}, {"node": "node-b", "gpu": "0"}]],
    "Framebuffer memory used": [[{"node": "node-a", "gpu": "2"}, {"node": "node-b", "gpu": "1"}]],
    "Last XID error per GPU (0 = none)": [[{"node": "node-a", "gpu": "0"}, {"node": "node-b", "gpu": "0"}]],
    "ECC and row-remap errors per GPU (per hour)": [[{"node": "node-b", "gpu": "0", "kind": "ecc-uncorrectable"},
                                                     {"node": "node-a", "gpu": "1", "kind": "ecc-correctable"}]],
    "GPUs reporting per node": [[{"node": "node-a"}, {"node": "node-b"}]],
    "GPU health alerts firing": [[{}]],
    "Reaction steps per outcome (per hour)": [[{"reaction": "on-admitted", "outcome": "applied"},
                                               {"reaction": "on-idle", "outcome": "failed"}]],
    "Failed reaction steps (per hour)": [[{"reaction": "on-idle"}, {"reaction": "on-admitted"}]],
    "Workloads idle now (GPUWorkloadIdle firing)": [[{}]],
    "GPUs released by the idle reaction per tenant (per hour)": [[{"tenant": "tenant-a"}]],
}


def _panels() -> list[dict[str, Any]]:
    model = json.loads(obs.dashboard_configmap()["data"]["gpuaas-gpu.json"])
    return [p for p in model["panels"] if p["type"] != "row"]


def test_every_panel_has_an_expectation() -> None:
    assert sorted(p["title"] for p in _panels()) == sorted(EXPECTED)


def test_recording_rules_are_backfilled_in_dependency_order() -> None:
    stages = rule_stages(RULES)
    first = {r["record"] for g in stages[0]["groups"] for r in g["rules"]}
    later = {r["record"] for s in stages[1:] for g in s["groups"] for r in g["rules"]}
    assert obs.GPU_ACTIVITY in first and gpu_health.GPU_INFO in first
    assert {obs.NAMESPACE_UTILIZATION, obs.TENANT_UTILIZATION} <= later


@pytest.fixture(scope="module")
def firing_alerts(backfilled: Backfilled) -> set[tuple[str, str, str]]:
    """Alerts firing after the live evaluation over the backfilled data."""
    wanted = {gpu_health.ALERT_TEMPERATURE, gpu_health.ALERT_XID, gpu_health.ALERT_MEMORY,
              gpu_health.ALERT_VANISHED, obs.ALERT_NAME}
    deadline = time.monotonic() + 30
    seen: set[tuple[str, str, str]] = set()
    while time.monotonic() < deadline:
        result = backfilled.get("/api/v1/query", query='ALERTS{alertstate="firing"}')
        # the idle alert names the workload's namespace in workload_namespace (its `namespace` is the product's)
        seen = {(s["metric"]["alertname"], s["metric"].get("node", s["metric"].get(obs.WORKLOAD_NAMESPACE_LABEL, "")),
                 s["metric"].get("gpu", s["metric"].get("pod", ""))) for s in result}
        if wanted <= {name for name, _, _ in seen}:
            break
        time.sleep(0.5)
    return seen


def test_alerts_fire_on_the_backfilled_incidents(firing_alerts: set[tuple[str, str, str]]) -> None:
    assert (gpu_health.ALERT_TEMPERATURE, "node-b", "1") in firing_alerts
    assert (gpu_health.ALERT_XID, "node-a", "0") in firing_alerts
    assert (gpu_health.ALERT_MEMORY, "node-b", "0") in firing_alerts
    assert (gpu_health.ALERT_VANISHED, "node-a", "3") in firing_alerts
    assert (obs.ALERT_NAME, "team-a", "nb-idle") in firing_alerts
    # nothing else: the busy notebook, the training job and the healthy GPUs stay quiet
    assert len(firing_alerts) == 5, firing_alerts


@pytest.mark.parametrize("title", sorted(EXPECTED))
def test_panel_query_returns_its_series_with_legend_labels(backfilled: Backfilled,
                                                           firing_alerts: set[tuple[str, str, str]],
                                                           title: str) -> None:
    (panel,) = [p for p in _panels() if p["title"] == title]
    for target, expected in zip(panel["targets"], EXPECTED[title], strict=True):
        result = run_query(backfilled, target)
        assert result, f"{title!r} {target['refId']}: no data for {target['expr']}"
        for series in result:
            labels = series["metric"]
            for group in _placeholder_groups(target["legendFormat"]):
                assert any(labels.get(name) for name in group), (
                    f"{title!r}: legend {target['legendFormat']!r} prints {group} but the series has {labels}")
            assert not all(math.isnan(v) for v in _values(series)), f"{title!r}: only NaN for {labels}"
        for wanted in expected:
            assert any(wanted.items() <= s["metric"].items() for s in result), (
                f"{title!r}: no series with {wanted}; got {[s['metric'] for s in result]}")


def test_panels_show_the_story(backfilled: Backfilled, firing_alerts: set[tuple[str, str, str]]) -> None:
    """Values, not just series: the incidents and the quota figures are where the story put them."""
    def last(title: str, index: int = 0) -> dict[tuple[tuple[str, str], ...], float]:
        (panel,) = [p for p in _panels() if p["title"] == title]
        result = run_query(backfilled, panel["targets"][index])
        return {tuple(sorted((k, v) for k, v in s["metric"].items() if k != "__name__")): max(_values(s))
                for s in result}

    temperature = last("GPU temperature")
    assert max(v for k, v in temperature.items() if ("node", "node-b") in k and ("gpu", "1") in k) == 92
    borrowed = last("GPUs borrowed from the cohort and GPUs waiting per tenant")
    assert borrowed[(("tenant", "tenant-b"),)] == 1 and borrowed[(("tenant", "tenant-a"),)] == 0
    allocated = last("GPUs allocated vs nominal quota per tenant")  # leader and follower count once
    assert allocated[(("tenant", "tenant-a"),)] == 3 and allocated[(("tenant", "tenant-b"),)] == 3
    waits = last("Queue wait before admission (p90) per tenant")
    assert waits[(("tenant", "tenant-a"),)] <= 5 and 320 <= waits[(("tenant", "tenant-b"),)] <= 640
    gpus = last("GPUs reporting per node")
    assert gpus[(("node", "node-a"),)] == 4 and gpus[(("node", "node-b"),)] == 2
    unassigned = [k for k in last("GPU utilization per GPU") if ("pod", "nvidia-dcgm-exporter-b7x9q") in k]
    assert unassigned == []
    assert list(last("GPU health alerts firing").values()) == [4]
    assert list(last("Workloads idle now (GPUWorkloadIdle firing)").values()) == [1]


def test_quota_advice_reads_busy_gpus_per_tenant(backfilled: Backfilled) -> None:
    """`gpuaas quota advise`'s busy figure: DCGM activity of both spellings joined to tenants by kube-state-metrics."""
    from prometheus_api_client import PrometheusConnect

    from gpuaas.quota.usage import Window, read_history

    history = read_history(PrometheusConnect(url=backfilled.prometheus.url, disable_ssl=True),
                           Window(end=backfilled.end, seconds=3600))
    busy = {tenant: sum(points.values()) / len(points) for tenant, points in history.series["busy"].items()}
    # tenant-a: nb-0 holds two GPUs at 55-75 % and 40 %, nb-idle one at 0 %; tenant-b: train-0 at 80 % and 90 %
    assert busy["tenant-a"] == pytest.approx(0.65 + 0.40, abs=0.05)
    assert busy["tenant-b"] == pytest.approx(0.80 + 0.90, abs=0.01)
    assert history.series["allocated"]["tenant-a"] and history.wait_p90["tenant-b"] > 300
