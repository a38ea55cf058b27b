"""Observability objects: the idle alert, per-tenant GPU rules, the Alertmanager route, the dashboard.

Everything is built as plain dicts from ONE set of PromQL expressions, so the PrometheusRule the
admin applies, the rule file the local engine loads into a real Prometheus, and the rule file
`promtool test rules` checks are the same rules (only the window and `for` differ, for speed).

Label spellings. dcgm-exporter labels each GPU with the pod that holds it (`pod`, `namespace`,
`container`). Behind the usual ServiceMonitor (`honorLabels: false`) Prometheus keeps the
exporter pod's own target labels and renames the GPU's to `exported_pod`/`exported_namespace`.
`gpuaas:gpu_activity:ratio` normalises both into `namespace`/`pod` of the WORKLOAD's pod:
series with `exported_pod` get their `namespace`/`pod` replaced from the exported labels; plain
series are taken as they are, except those in the exporter's own namespaces (a GPU no pod holds
carries only the exporter's target labels in the exported setup; it must not look like a workload).

MIG. The slices of one GPU share its UUID, so a GPU is keyed by UUID plus `GPU_I_ID`
(steps.gpu_key.BY_GPU), and `DCGM_FI_DEV_GPU_UTIL`, which MIG does not report (0 or absent), is read
for whole GPUs only: a slice's activity is `DCGM_FI_PROF_GR_ENGINE_ACTIVE` or nothing.

Tenants. A tenant is a Kueue ClusterQueue. Allocation per tenant comes from Kueue itself
(`kueue_cluster_queue_resource_usage`, needs `metrics.enableClusterQueueResources: true`);
utilisation per tenant joins GPU activity to the tenant through the namespace label
`gpuaas.io/tenant` exposed by kube-state-metrics (`kube_namespace_labels`, needs
`--metric-labels-allowlist=namespaces=[gpuaas.io/tenant]`). Requests per project come from
kube-state-metrics (`kube_pod_container_resource_requests`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gpuaas.manifests import gpu_health
from steps.gpu_key import ENGINE_ACTIVE, GPU_UTIL, by_gpu, whole_gpu_only
from steps.reactions.idle_alerts import WORKLOAD_NAMESPACE_LABEL

ALERT_NAME = "GPUWorkloadIdle"
RULE_GROUP = "gpuaas-gpu"
GPU_RESOURCE = "nvidia.com/gpu"
KSM_GPU_RESOURCE = "nvidia_com_gpu"  # kube-state-metrics sanitises resource names
TENANT_NAMESPACE_LABEL = "gpuaas.io/tenant"
# WORKLOAD_NAMESPACE_LABEL (from the step, one name for the rule and the reaction that reads it):
# The idle alert's label for the WORKLOAD's namespace. The alert's own `namespace` label is the PRODUCT's
# namespace (where the PrometheusRule and the AlertmanagerConfig live): the Prometheus Operator's default
# AlertmanagerConfig matcher strategy (`OnNamespace`, the one kube-prometheus-stack and OpenShift leave in
# place) adds `namespace="<the AlertmanagerConfig's namespace>"` to the product's route, and OpenShift's
# user-workload monitoring forces `namespace="<the rule's namespace>"` onto every alert of a PrometheusRule
# (prometheus-operator pkg/namespacelabeler). An alert that names the product's namespace is routed by the
# operator's defaults on every platform, with the fewest cluster-wide changes (docs/platforms.md).
DEFAULT_EXPORTER_NAMESPACES = ("gpu-operator", "nvidia-gpu-operator")
RUNBOOK_URL = "https://github.com/gpuaas/gpuaas/blob/main/docs/observability.md#the-alert-gpuworkloadidle"

# Argo custom metrics the product's WorkflowTemplates emit (Argo prefixes `argo_workflows_`;
# some exporters add `_total` to counters, so queries accept both).
RECLAIMED_GPU_HOURS_METRIC = "gpuaas_gpu_hours_reclaimed"
RELEASED_GPUS_METRIC = "gpuaas_idle_gpus_released"

# Recording rule names (level:metric:operation, the Prometheus convention).
GPU_ACTIVITY = "gpuaas:gpu_activity:ratio"
NAMESPACE_UTILIZATION = "gpuaas:namespace_gpu_utilization:ratio"
TENANT_UTILIZATION = "gpuaas:tenant_gpu_utilization:ratio"
TENANT_ALLOCATED = "gpuaas:tenant_gpu_allocated:sum"
TENANT_QUOTA = "gpuaas:tenant_gpu_nominal_quota:sum"
NAMESPACE_REQUESTED = "gpuaas:namespace_gpu_requested:sum"
TENANT_QUEUE_WAIT_P90 = "gpuaas:tenant_admission_wait_seconds:p90"
TENANT_BORROWED = "gpuaas:tenant_gpu_borrowed:sum"
TENANT_PENDING = "gpuaas:tenant_gpu_pending:sum"

# Kueue v0.19 labels every metric with `replica_role` (leader | follower | standalone): with several
# Kueue replicas the followers' caches report the same gauges, so only non-followers count. Series
# without the label (older Kueue) match too.
KUEUE_SELECTOR = f'resource="{GPU_RESOURCE}", replica_role!="follower"'

# What the product installs by default (names the artifacts' EventSource must match).
DEFAULT_NAMESPACE = "gpuaas"
WEBHOOK_SERVICE = "gpuaas-alertmanager-eventsource-svc"
WEBHOOK_PORT = 12000
WEBHOOK_PATH = "/alertmanager"
WEBHOOK_SECRET = "gpuaas-alertmanager-webhook"
WEBHOOK_SECRET_KEY = "token"
RECEIVER = "gpuaas-idle-webhook"
ADMINS_RECEIVER = "gpuaas-gpu-admins"
ADMINS_SECRET = "gpuaas-admin-alerts"
ADMINS_SECRET_KEY = "url"
DASHBOARD_CONFIGMAP = "gpuaas-gpu-dashboard"


# -- PromQL ------------------------------------------------------------------------------------
def _normalised(metric: str, exporter_namespaces: tuple[str, ...]) -> str:
    """`metric` restricted to GPUs held by a pod, with `namespace`/`pod` of THAT pod in either spelling,
    and to the GPUs that report it (GPU_UTIL: whole GPUs, no MIG slice; steps.gpu_key)."""
    only = "".join(f", {m}" for m in [whole_gpu_only(metric)] if m)
    exported = (f'label_replace(label_replace({metric}{{exported_pod!=""{only}}}, '
                f'"namespace", "$1", "exported_namespace", "(.+)"), "pod", "$1", "exported_pod", "(.+)")')
    skip = "|".join(exporter_namespaces)
    plain = f'{metric}{{exported_pod="", pod!="", namespace!~"{skip}"{only}}}'
    return f"({exported} or {plain})"


def gpu_activity_expr(exporter_namespaces: tuple[str, ...] = DEFAULT_EXPORTER_NAMESPACES) -> str:
    """Per GPU (or MIG slice) activity 0-1: engine-active where profiling metrics exist, else GPU_UTIL/100
    (whole GPUs only: a MIG slice without engine-active has no activity series, never a false 0)."""
    by = by_gpu("namespace", "pod")
    engine = _normalised(ENGINE_ACTIVE, exporter_namespaces)
    util = _normalised(GPU_UTIL, exporter_namespaces)
    return f"max by ({by}) ({engine})\nor\nmax by ({by}) ({util}) / 100"


def idle_alert_expr(window: str, threshold: float) -> str:
    """Pods whose every GPU stayed at or below `threshold` for `window`, with data a window ago.

    The second clause demands a sample at the START of the window, so a pod that appeared a
    minute ago is not "idle for 30 minutes"; an exporter outage makes the clause drop out too.
    """
    return (f"max by (namespace, pod) (max_over_time({GPU_ACTIVITY}[{window}])) <= {threshold:g}\n"
            f"and on (namespace, pod)\n"
            f"max by (namespace, pod) ({GPU_ACTIVITY} offset {window})")


def tenant_of_namespace() -> str:
    """`{namespace, tenant}` = 1 for every namespace labelled gpuaas.io/tenant (kube-state-metrics)."""
    label = "label_" + TENANT_NAMESPACE_LABEL.replace(".", "_").replace("/", "_")
    return (f'max by (namespace, tenant) (label_replace(kube_namespace_labels{{{label}!=""}}, '
            f'"tenant", "$1", "{label}", "(.+)"))')


def _per_queue_flavor(metric: str) -> str:
    """One value per (ClusterQueue, flavor): several scrapes of Kueue (replicas, restarts) count once."""
    return f"max by (cluster_queue, flavor) ({metric}{{{KUEUE_SELECTOR}}})"


def _as_tenant(expr: str) -> str:
    return f'sum by (tenant) (label_replace({expr}, "tenant", "$1", "cluster_queue", "(.+)"))'


def _by_cluster_queue(metric: str) -> str:
    return _as_tenant(_per_queue_flavor(metric))


def tenant_borrowed_expr() -> str:
    """GPUs admitted above the nominal quota, per flavor (what the tenant borrows from the cohort)."""
    usage = _per_queue_flavor("kueue_cluster_queue_resource_usage")
    nominal = _per_queue_flavor("kueue_cluster_queue_nominal_quota")
    return _as_tenant(f"clamp_min({usage} - on (cluster_queue, flavor) {nominal}, 0)")


def recording_rules(exporter_namespaces: tuple[str, ...] = DEFAULT_EXPORTER_NAMESPACES) -> list[dict[str, Any]]:
    """The recording rules, in evaluation order (later ones read earlier ones)."""
    return [
        {"record": GPU_ACTIVITY, "expr": gpu_activity_expr(exporter_namespaces)},
        {"record": NAMESPACE_UTILIZATION, "expr": f"avg by (namespace) ({GPU_ACTIVITY})"},
        {"record": TENANT_UTILIZATION,
         "expr": f"avg by (tenant) ({GPU_ACTIVITY} * on (namespace) group_left (tenant) {tenant_of_namespace()})"},
        {"record": TENANT_ALLOCATED, "expr": _by_cluster_queue("kueue_cluster_queue_resource_usage")},
        {"record": TENANT_QUOTA, "expr": _by_cluster_queue("kueue_cluster_queue_nominal_quota")},
        {"record": TENANT_BORROWED, "expr": tenant_borrowed_expr()},
        {"record": TENANT_PENDING,
         "expr": _as_tenant(f"max by (cluster_queue) (kueue_cluster_queue_resource_pending{{{KUEUE_SELECTOR}}})")},
        {"record": NAMESPACE_REQUESTED,
         "expr": (f'sum by (namespace) (kube_pod_container_resource_requests{{resource="{KSM_GPU_RESOURCE}"}} '
                  f'* on (namespace, pod) group_left () '
                  f'max by (namespace, pod) (kube_pod_status_phase{{phase="Running"}} == 1))')},
        {"record": TENANT_QUEUE_WAIT_P90,
         "expr": ('histogram_quantile(0.9, sum by (tenant, le) (label_replace('
                  'rate(kueue_admission_wait_time_seconds_bucket{replica_role!="follower"}[10m]), '
                  '"tenant", "$1", "cluster_queue", "(.+)")))')},
    ]


def idle_alert(window: str = "30m", for_: str = "5m", threshold: float = 0.05,
               severity: str = "warning", product_namespace: str = DEFAULT_NAMESPACE) -> dict[str, Any]:
    """The alert the on-idle reaction acts on: `workload_namespace`/`pod` are the WORKLOAD's pod, `namespace`
    the product's (WORKLOAD_NAMESPACE_LABEL says why)."""
    return {
        "alert": ALERT_NAME,
        "expr": idle_alert_expr(window, threshold),
        "for": for_,
        "labels": {"severity": severity, "gpuaas_reaction": "on-idle", "namespace": product_namespace,
                   WORKLOAD_NAMESPACE_LABEL: "{{ $labels.namespace }}"},
        "annotations": {
            "summary": "GPUs of pod {{ $labels.namespace }}/{{ $labels.pod }} idle for " + window,
            "description": (
                "Every GPU held by pod {{ $labels.namespace }}/{{ $labels.pod }} stayed at or below "
                f"{threshold:.0%} activity (DCGM engine-active, else GPU utilisation) for {window}; highest "
                "activity {{ $value | humanizePercentage }}. gpuaas confirms this with Prometheus and, "
                "unless the workload is exempt (gpuaas.io/idle-policy: exempt) or the tenant's policy "
                "says dry-run, releases its workers so queued workloads can use the quota."),
            "runbook_url": RUNBOOK_URL,
        },
    }


def rule_groups(window: str = "30m", for_: str = "5m", threshold: float = 0.05, *,
                interval: str | None = None, product_namespace: str = DEFAULT_NAMESPACE,
                exporter_namespaces: tuple[str, ...] = DEFAULT_EXPORTER_NAMESPACES,
                health: gpu_health.HealthSettings = gpu_health.DEFAULT_SETTINGS) -> dict[str, Any]:
    """A plain Prometheus rule file (`promtool`, the local engine): `{"groups": [...]}`.

    Two groups: utilisation, allocation and the idle alert; and GPU health (per-GPU series and the
    alerts that page the admins).
    """
    group: dict[str, Any] = {"name": RULE_GROUP}
    if interval:
        group["interval"] = interval
    group["rules"] = [*recording_rules(exporter_namespaces),
                      idle_alert(window, for_, threshold, product_namespace=product_namespace)]
    return {"groups": [group, gpu_health.rule_group(health, interval, product_namespace)]}


def _labels(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {"app.kubernetes.io/name": "gpuaas", "app.kubernetes.io/part-of": "gpuaas",
            "app.kubernetes.io/component": "observability", **(extra or {})}


def prometheus_rule(namespace: str = DEFAULT_NAMESPACE, *, window: str = "30m", for_: str = "5m",
                    threshold: float = 0.05, rule_labels: dict[str, str] | None = None,
                    exporter_namespaces: tuple[str, ...] = DEFAULT_EXPORTER_NAMESPACES) -> dict[str, Any]:
    """PrometheusRule (monitoring.coreos.com/v1). `rule_labels` must match your Prometheus's ruleSelector."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "gpuaas-gpu", "namespace": namespace,
                     "labels": _labels({"role": "alert-rules", **(rule_labels or {})})},
        "spec": rule_groups(window, for_, threshold, exporter_namespaces=exporter_namespaces,
                            product_namespace=namespace),
    }


@dataclass(frozen=True)
class Route:
    """One child route under the product's top route: who gets which alerts, grouped how."""

    receiver: str
    matchers: tuple[tuple[str, str, str], ...]
    """(label, operator, value), operator one of = != =~ !~."""
    group_by: tuple[str, ...]
    group_wait: str
    group_interval: str
    repeat_interval: str


def routes(*, idle_timing: tuple[str, str, str] = ("30s", "5m", "1h"),
           admins_timing: tuple[str, str, str] = ("30s", "5m", "4h")) -> list[Route]:
    """Idle alerts to the idle reaction's webhook; health alerts to the admins, never to the webhook."""
    return [
        Route(RECEIVER, (("alertname", "=", ALERT_NAME),), ("alertname", WORKLOAD_NAMESPACE_LABEL), *idle_timing),
        Route(ADMINS_RECEIVER, ((gpu_health.NOTIFY_LABEL, "=", gpu_health.NOTIFY_ADMINS),),
              ("alertname", "node"), *admins_timing),
    ]


def product_alerts_matcher() -> tuple[str, str, str]:
    """The top route takes only the product's own alerts (with the operator's matcher strategy None,
    nothing else restricts it, and it would otherwise swallow every alert of the cluster)."""
    return ("alertname", "=~", "|".join((ALERT_NAME, *gpu_health.ALERTS)))


def alertmanager_config_object(namespace: str = DEFAULT_NAMESPACE, *, service: str = WEBHOOK_SERVICE,
                               port: int = WEBHOOK_PORT, path: str = WEBHOOK_PATH,
                               secret_name: str = WEBHOOK_SECRET, secret_key: str = WEBHOOK_SECRET_KEY,
                               admins_secret: str = ADMINS_SECRET, admins_secret_key: str = ADMINS_SECRET_KEY,
                               group_wait: str = "30s", group_interval: str = "5m",
                               repeat_interval: str = "1h", webhook_namespace: str | None = None) -> dict[str, Any]:
    """AlertmanagerConfig (monitoring.coreos.com/v1alpha1): GPUWorkloadIdle to the webhook EventSource,
    GPU health alerts to the admins' webhook (URL from Secret `gpuaas-admin-alerts`, key `url`).

    Caution: by default the operator adds `namespace="<this object's namespace>"` to the top
    route, while GPUWorkloadIdle carries the WORKLOAD's namespace. docs/observability.md: put this
    object in the Alertmanager's namespace with `alertmanagerConfigMatcherStrategy:
    {type: OnNamespaceExceptForAlertmanagerNamespace}` (`None` would affect every tenant's AlertmanagerConfig).
    """
    def matchers(items: tuple[tuple[str, str, str], ...]) -> list[dict[str, str]]:
        return [{"name": name, "value": value, "matchType": op} for name, op, value in items]

    children = [{"receiver": r.receiver, "matchers": matchers(r.matchers), "groupBy": list(r.group_by),
                 "groupWait": r.group_wait, "groupInterval": r.group_interval, "repeatInterval": r.repeat_interval}
                for r in routes(idle_timing=(group_wait, group_interval, repeat_interval))]
    return {
        "apiVersion": "monitoring.coreos.com/v1alpha1",
        "kind": "AlertmanagerConfig",
        "metadata": {"name": "gpuaas-idle", "namespace": namespace, "labels": _labels({"alertmanagerConfig": "gpuaas"})},
        "spec": {
            "route": {
                "receiver": ADMINS_RECEIVER,
                "matchers": matchers((product_alerts_matcher(),)),
                "groupBy": ["alertname"],
                "routes": children,
            },
            "receivers": [
                {"name": RECEIVER,
                 "webhookConfigs": [{
                     "url": f"http://{service}.{webhook_namespace or namespace}.svc:{port}{path}",
                     "sendResolved": False,
                     "httpConfig": {"authorization": {"type": "Bearer",
                                                      "credentials": {"name": secret_name, "key": secret_key}}},
                 }]},
                {"name": ADMINS_RECEIVER,
                 "webhookConfigs": [{"urlSecret": {"name": admins_secret, "key": admins_secret_key},
                                     "sendResolved": True}]},
            ],
        },
    }


def alertmanager_config(webhook_url: str, credentials_file: str, *, admins_url: str | None = None,
                        group_wait: str = "1s", group_interval: str = "1s", repeat_interval: str = "1h") -> dict[str, Any]:
    """A plain Alertmanager config with the same routing, for the local engine and the tests.

    `admins_url`: where health alerts go (a webhook); None = the admins' receiver has no target.
    """
    timing = (group_wait, group_interval, repeat_interval)
    top = product_alerts_matcher()
    return {
        "route": {
            "receiver": "discard",
            "group_by": ["alertname"],
            "group_wait": group_wait, "group_interval": group_interval, "repeat_interval": repeat_interval,
            "routes": [{
                "receiver": ADMINS_RECEIVER,
                "matchers": [f'{top[0]}{top[1]}"{top[2]}"'],
                "routes": [{"receiver": r.receiver, "matchers": [f'{n}{op}"{v}"' for n, op, v in r.matchers],
                            "group_by": list(r.group_by), "group_wait": r.group_wait,
                            "group_interval": r.group_interval, "repeat_interval": r.repeat_interval}
                           for r in routes(idle_timing=timing, admins_timing=timing)],
            }],
        },
        "receivers": [
            {"name": "discard"},
            {"name": RECEIVER, "webhook_configs": [{
                "url": webhook_url, "send_resolved": False,
                "http_config": {"authorization": {"type": "Bearer", "credentials_file": credentials_file}},
            }]},
            {"name": ADMINS_RECEIVER, **({"webhook_configs": [{"url": admins_url, "send_resolved": True}]}
                                        if admins_url else {})},
        ],
    }


# -- Grafana --------------------------------------------------------------------------------------
def dashboard() -> dict[str, Any]:
    """The Grafana dashboard model, built with grafana-foundation-sdk in gpuaas/manifests/dashboard.py."""
    from gpuaas.manifests import dashboard as grafana

    return grafana.dashboard()


def dashboard_configmap(namespace: str = DEFAULT_NAMESPACE) -> dict[str, Any]:
    """ConfigMap the Grafana sidecar picks up (label grafana_dashboard: "1")."""
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": DASHBOARD_CONFIGMAP, "namespace": namespace,
                     "labels": _labels({"grafana_dashboard": "1"})},
        "data": {"gpuaas-gpu.json": json.dumps(dashboard(), indent=2, sort_keys=True)},
    }


def window_keys() -> tuple[str, ...]:
    """The policy keys that set an idle window (steps.policy.IDLE_FIELDS: `window` and its alias)."""
    from steps.policy import _ALIASES, FIELDS_BY_KEY

    spec = next(f for f in FIELDS_BY_KEY.values() if f.attr == "window_seconds")
    return (spec.key, *(alias for alias, name in _ALIASES.items() if name == spec.key))


def shortest_window_seconds(document: Any) -> float:
    """The shortest idle window in effect for any tenant and kind of a policy document: the step's own
    layering (steps.policy Policy.windows: built-in per-kind windows, the policy's idle and kinds, each
    tenant's idle and kinds). The chart's `gpuaas.ruleWindow` resolves the same layers in the values'
    policy (tests/artifacts/test_chart.py compares them)."""
    from steps.policy import policy_from_mapping

    return min(policy_from_mapping(document).windows())


def duration_text(seconds: float) -> str:
    """Whole seconds (half up) as Prometheus writes a range: 2h, 90m, 45s."""
    whole = int(seconds + 0.5)
    return f"{whole // 3600}h" if whole % 3600 == 0 else f"{whole // 60}m" if whole % 60 == 0 else f"{whole}s"


def rule_window(policy_text: str | None = None) -> str:
    """The alert's window: the SHORTEST idle window of the policy, over every tenant and kind (default:
    the policy gpuaas renders).

    The rule cannot know tenants or kinds, and an alert can only start the on-idle step. With the
    shortest window, a tenant or kind whose `idle.window` is shorter than the default is looked at as
    soon as its own window is idle; longer windows are confirmed by the step over their own window (it
    reads Prometheus over the tenant's and kind's `idle.window`).
    """
    from steps.policy import default_policy_text, parse_policy

    policy = parse_policy(policy_text if policy_text is not None else default_policy_text())
    return duration_text(min(policy.windows()))


def objects(namespace: str = DEFAULT_NAMESPACE, **webhook: Any) -> list[dict[str, Any]]:
    """What `gpuaas render` writes: PrometheusRule (window from the rendered policy), AlertmanagerConfig,
    dashboard ConfigMap."""
    return [prometheus_rule(namespace, window=rule_window()), alertmanager_config_object(namespace, **webhook),
            dashboard_configmap(namespace)]
