"""The Grafana dashboard, built with Grafana's own SDK (grafana-foundation-sdk), as code.

What the admins see, row by row: tenants (ClusterQueues), projects (namespaces), GPUs (load and
health: temperature, power, framebuffer, XID, ECC/row remapping, GPUs reporting per node) and the
automation itself (reactions per outcome, failures, idle workloads, reclaimed GPU-hours).

Every panel reads the product's recording rules or the Argo custom metrics its WorkflowTemplates
emit, never a metric that only exists when something goes wrong: an error panel shows 0 on a
healthy cluster, not "No data" (error counters are per GPU and start at 0; alert counts use
`or vector(0)`). tests/observability/test_dashboard_queries.py runs every query below against a real
Prometheus over backfilled history and checks the series and the labels each legend uses.

`PANELS` is the dashboard's content as data (rows, titles, queries, legends, units); `dashboard()`
turns it into the Grafana model with the SDK's builders.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gpuaas.manifests import gpu_health as health
from gpuaas.manifests import observability as obs

UID = "gpuaas-gpu"
TITLE = "GPUaaS: GPU use, health, quota and the automation"
DATASOURCE_VARIABLE = "datasource"
TENANT = 'tenant=~"$tenant"'
NAMESPACE = 'namespace=~"$namespace"'


def argo_counter(name: str, selector: str = "") -> str:
    """An Argo custom metric: Argo prefixes `argo_workflows_`; some setups add `_total` to counters."""
    extra = f", {selector}" if selector else ""
    return f'{{__name__=~"argo_workflows_{name}(_total)?"{extra}}}'


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str
    instant: bool = False


@dataclass(frozen=True)
class Panel:
    row: str
    title: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"  # timeseries | stat
    unit: str = "short"
    description: str = ""
    span: int = 12
    ratio: bool = False  # 0-1 axis

    def __post_init__(self) -> None:
        if self.kind not in ("timeseries", "stat"):
            raise ValueError(f"kind: expected 'timeseries' or 'stat', found {self.kind!r}")


@dataclass(frozen=True)
class Row:
    title: str
    panels: list[Panel] = field(default_factory=list)


GPU_LEGEND = "{{node}} gpu{{gpu}}"
OUTCOMES = argo_counter("gpuaas_reaction_outcomes")
FAILED_OUTCOMES = argo_counter("gpuaas_reaction_outcomes", 'outcome="failed"')

ROWS: tuple[Row, ...] = (
    Row("Tenants (ClusterQueues)", [
        Panel("tenants", "GPU utilization per tenant",
              (Query(f"{obs.TENANT_UTILIZATION}{{{TENANT}}}", "{{tenant}}"),), unit="percentunit", ratio=True,
              description="Average activity of the GPUs held by each tenant's pods (DCGM engine-active, else "
                          "GPU_UTIL/100); tenant from the namespace label gpuaas.io/tenant."),
        Panel("tenants", "GPUs allocated vs nominal quota per tenant",
              (Query(f"{obs.TENANT_ALLOCATED}{{{TENANT}}}", "{{tenant}} allocated"),
               Query(f"{obs.TENANT_QUOTA}{{{TENANT}}}", "{{tenant}} nominal quota")),
              description="Kueue: kueue_cluster_queue_resource_usage and _nominal_quota for nvidia.com/gpu, "
                          "summed over flavors."),
        Panel("tenants", "GPUs borrowed from the cohort and GPUs waiting per tenant",
              (Query(f"{obs.TENANT_BORROWED}{{{TENANT}}}", "{{tenant}} borrowed"),
               Query(f"{obs.TENANT_PENDING}{{{TENANT}}}", "{{tenant}} waiting")),
              description="Borrowed: admitted above the nominal quota, per flavor. Waiting: GPUs requested by "
                          "pending workloads (kueue_cluster_queue_resource_pending)."),
        Panel("tenants", "Queue wait before admission (p90) per tenant",
              (Query(f"{obs.TENANT_QUEUE_WAIT_P90}{{{TENANT}}}", "{{tenant}}"),), unit="s",
              description="From Kueue's kueue_admission_wait_time_seconds histogram, 10 minute rate."),
        Panel("tenants", "Idle GPU-hours reclaimed per tenant (per hour)",
              (Query(f"sum by (tenant) (increase({argo_counter(obs.RECLAIMED_GPU_HOURS_METRIC, TENANT)}[1h]))",
                     "{{tenant}}"),),
              description=f"Argo custom metric {obs.RECLAIMED_GPU_HOURS_METRIC}: GPUs x hours a released workload "
                          "stayed released, counted when the release ends (resume or finish)."),
        Panel("tenants", "Idle GPU-hours reclaimed (dashboard range)",
              (Query(f"sum(increase({argo_counter(obs.RECLAIMED_GPU_HOURS_METRIC)}[$__range])) or vector(0)",
                     "GPU-hours", instant=True),), kind="stat", span=12),
    ]),
    Row("Projects (namespaces)", [
        Panel("projects", "GPU utilization per project",
              (Query(f"{obs.NAMESPACE_UTILIZATION}{{{NAMESPACE}}}", "{{namespace}}"),), unit="percentunit",
              ratio=True),
        Panel("projects", "GPUs requested per project (running pods)",
              (Query(f"{obs.NAMESPACE_REQUESTED}{{{NAMESPACE}}}", "{{namespace}}"),),
              description="kube-state-metrics: GPU requests of Running pods, also those outside Kueue."),
    ]),
    Row("GPUs", [
        Panel("gpus", "GPU utilization per GPU",
              (Query(f"{obs.GPU_ACTIVITY}{{{NAMESPACE}}}", "{{Hostname}}{{hostname}} gpu{{gpu}} {{namespace}}/{{pod}}"),),
              unit="percentunit", ratio=True, span=24),
        Panel("gpus", "GPU temperature",
              (Query(health.TEMPERATURE, GPU_LEGEND),), unit="celsius",
              description=f"DCGM_FI_DEV_GPU_TEMP. Alert {health.ALERT_TEMPERATURE} above the threshold for a while."),
        Panel("gpus", "GPU power draw", (Query(health.POWER, GPU_LEGEND),), unit="watt",
              description="DCGM_FI_DEV_POWER_USAGE."),
        Panel("gpus", "Framebuffer memory used", (Query(health.FRAMEBUFFER_RATIO, GPU_LEGEND),),
              unit="percentunit", ratio=True, description="DCGM_FI_DEV_FB_USED / (FB_USED + FB_FREE)."),
        Panel("gpus", "Last XID error per GPU (0 = none)", (Query(health.XID_LAST, GPU_LEGEND),),
              description="DCGM_FI_DEV_XID_ERRORS keeps the last XID code until dcgm-exporter restarts. "
                          f"Alert {health.ALERT_XID} pages once per new code."),
        Panel("gpus", "ECC and row-remap errors per GPU (per hour)",
              (Query(f"sum by (node, gpu, kind) (increase({health.MEMORY_ERRORS}[1h]))", GPU_LEGEND + " {{kind}}"),),
              description="Volatile ECC counters (enable them in dcgm-exporter's metrics CSV) and remapped rows. "
                          f"Uncorrectable ones page ({health.ALERT_MEMORY})."),
        Panel("gpus", "GPUs reporting per node",
              (Query(f"count by (node) ({health.GPU_INFO})", "{{node}}"),),
              description=f"A drop without a node going away is a GPU that vanished ({health.ALERT_VANISHED})."),
        Panel("gpus", "GPU health alerts firing",
              (Query(f'count(ALERTS{{{health.NOTIFY_LABEL}="{health.NOTIFY_ADMINS}", alertstate="firing"}}) '
                     "or vector(0)", "alerts", instant=True),), kind="stat"),
    ]),
    Row("Automation", [
        Panel("automation", "Reaction steps per outcome (per hour)",
              (Query(f"sum by (reaction, outcome) (increase({OUTCOMES}[1h]))", "{{reaction}} {{outcome}}"),),
              description="Argo custom metric gpuaas_reaction_outcomes: applied, no-op, skipped-by-policy, "
                          "rejected-input, failed."),
        Panel("automation", "Failed reaction steps (per hour)",
              (Query(f"sum by (reaction) (increase({FAILED_OUTCOMES}[1h]))\n"
                     f"or\nsum by (reaction) (increase({OUTCOMES}[1h])) * 0", "{{reaction}}"),),
              description="0 for every reaction that ran and did not fail."),
        Panel("automation", "Workloads idle now (GPUWorkloadIdle firing)",
              (Query(f'count(ALERTS{{alertname="{obs.ALERT_NAME}", alertstate="firing", '
                     f'{obs.WORKLOAD_NAMESPACE_LABEL}=~"$namespace"}}) or vector(0)',
                     "workloads", instant=True),), kind="stat"),
        Panel("automation", "GPUs released by the idle reaction per tenant (per hour)",
              (Query(f"sum by (tenant) (increase({argo_counter(obs.RELEASED_GPUS_METRIC, TENANT)}[1h]))", "{{tenant}}"),)),
    ]),
)


def panels() -> list[Panel]:
    return [p for row in ROWS for p in row.panels]


def _datasource() -> Any:
    from grafana_foundation_sdk.models.dashboard import DataSourceRef

    return DataSourceRef(type_val="prometheus", uid=f"${{{DATASOURCE_VARIABLE}}}")


def _panel(spec: Panel, pid: int) -> Any:
    from grafana_foundation_sdk.builders import common, prometheus, stat, timeseries
    from grafana_foundation_sdk.models.common import LegendDisplayMode, LegendPlacement

    builder = timeseries.Panel() if spec.kind == "timeseries" else stat.Panel()
    builder = (builder.id(pid).title(spec.title).description(spec.description).datasource(_datasource())
               .unit(spec.unit).span(spec.span).height(8 if spec.kind == "timeseries" else 5))
    if spec.ratio:
        builder = builder.min(0).max(1)
    if spec.kind == "timeseries":
        builder = builder.legend(common.VizLegendOptions().display_mode(LegendDisplayMode.TABLE)
                                 .placement(LegendPlacement.RIGHT).show_legend(True).calcs(["lastNotNull", "max"]))
    for index, query in enumerate(spec.queries):
        target = (prometheus.Dataquery().ref_id(chr(ord("A") + index)).expr(query.expr)
                  .legend_format(query.legend).datasource(_datasource()))
        builder = builder.with_target(target.instant() if query.instant else target.range())
    return builder


def _variables() -> list[Any]:
    from grafana_foundation_sdk.builders import dashboard as d
    from grafana_foundation_sdk.models.dashboard import VariableRefresh

    def query_variable(name: str, label: str, query: str) -> Any:
        return (d.QueryVariable(name).label(label).datasource(_datasource()).query(query)
                .multi(True).include_all(True).refresh(VariableRefresh.ON_TIME_RANGE_CHANGED))

    return [d.DatasourceVariable(DATASOURCE_VARIABLE).label("Prometheus").type("prometheus"),
            query_variable("tenant", "Tenant (ClusterQueue)", f"label_values({obs.TENANT_QUOTA}, tenant)"),
            query_variable("namespace", "Project (namespace)", f"label_values({obs.GPU_ACTIVITY}, namespace)")]


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard model (JSON-ready dict), built with grafana-foundation-sdk."""
    from grafana_foundation_sdk.builders import dashboard as d
    from grafana_foundation_sdk.cog.encoder import JSONEncoder

    builder = (d.Dashboard(TITLE).uid(UID).tags(["gpuaas", "gpu", "kueue", "dcgm"]).refresh("30s")
               .time("now-24h", "now").timezone("browser").editable())
    for variable in _variables():
        builder = builder.with_variable(variable)
    pid = len(ROWS)
    for row in ROWS:
        builder = builder.with_row(d.Row(row.title))
        for spec in row.panels:
            pid += 1
            builder = builder.with_panel(_panel(spec, pid))
    model = json.loads(json.dumps(builder.build(), cls=JSONEncoder))
    # The SDK's row builder has no id setter: number the rows 1..n (panels are n+1...).
    rows = [p for p in model["panels"] if p["type"] == "row"]
    for number, row_panel in enumerate(rows, start=1):
        row_panel["id"] = number
    return model
