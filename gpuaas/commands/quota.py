"""`gpuaas quota advise --prometheus URL --since 7d [--output json]`: quota advice from measured use.

Reads the ClusterQueues (the cluster of $KUBECONFIG, or GPUAAS_KUBE_URL) and Prometheus history,
and prints per tenant: nominal quota, allocated (mean, p95), busy GPUs, borrowed and lent, queue
wait p90, GPU-hours reclaimed; then the recommendation with its reasons and the exact
`argo submit --from workflowtemplate/gpuaas-provision-quota ...` line (and the Argo UI fields) that
would apply it. It never changes anything itself: a quota change is a hand submission of the
provision-quota reaction, which records it like every reaction.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="quota_command", metavar="COMMAND", required=True)
    advise = sub.add_parser("advise", help="Recommend GPU quota changes from Prometheus history (applies nothing).",
                            description=__doc__.splitlines()[0])
    advise.add_argument("--prometheus", required=True, metavar="URL", help="Prometheus base URL, e.g. http://localhost:9090")
    advise.add_argument("--since", default="7d", metavar="DURATION", help="history window: 7d, 24h, 90m (default 7d)")
    advise.add_argument("--output", choices=["table", "json"], default="table", help="table (default) or json")
    advise.add_argument("--namespace", default="gpuaas", help="namespace of the WorkflowTemplates (default gpuaas)")
    advise.add_argument("--kube-url", default=None, metavar="URL",
                        help="Kubernetes API URL without auth (tests, the local engine); default: $KUBECONFIG")


def run(args: argparse.Namespace) -> int:
    from gpuaas.quota.advice import AdviceSettings, advise
    from gpuaas.quota.usage import Window, now, parse_window, read_history, tenant_usage

    try:
        window = Window(end=now(), seconds=parse_window(args.since))
    except ValueError as error:
        print(f"gpuaas quota advise: {error}", file=sys.stderr)
        return 2
    try:
        cluster_queues = _cluster_queues(args.kube_url)
    except Exception as error:  # noqa: BLE001 - one line for the admin, never a traceback
        print(f"gpuaas quota advise: could not list ClusterQueues ({type(error).__name__}: {error}); "
              "check $KUBECONFIG and that Kueue's CRDs are installed", file=sys.stderr)
        return 1
    if not cluster_queues:
        print("gpuaas quota advise: no ClusterQueues found: expected Kueue ClusterQueues with nvidia.com/gpu quota",
              file=sys.stderr)
        return 1
    try:
        from prometheus_api_client import PrometheusConnect

        history = read_history(PrometheusConnect(url=args.prometheus, disable_ssl=True), window)
    except Exception as error:  # noqa: BLE001
        print(f"gpuaas quota advise: Prometheus at {args.prometheus} did not answer the history queries "
              f"({type(error).__name__}: {str(error)[:200]}); check --prometheus", file=sys.stderr)
        return 1
    advice = advise(tenant_usage(history, cluster_queues), AdviceSettings(namespace=args.namespace), window=args.since)
    if args.output == "json":
        print(json.dumps(advice.to_dict(), indent=2))
    else:
        print(render_table(advice))
    return 0


def _cluster_queues(kube_url: str | None) -> list[dict[str, Any]]:
    from steps.gateways import resources as R
    from steps.gateways.errors import NotFound
    from steps.gateways.kubernetes import KubernetesGateway

    gateway = KubernetesGateway(url=kube_url) if kube_url else KubernetesGateway()
    try:
        return gateway.list(R.CLUSTER_QUEUE)
    except NotFound:
        return gateway.list(R.CLUSTER_QUEUE_V1BETA1)


def _num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    text = f"{value:.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def render_table(advice: Any) -> str:
    headers = ["tenant", "cohort", "nominal", "alloc mean", "alloc p95", "busy", "borrowed", "lent",
               "wait p90", "reclaimed GPU-h", "advice"]
    rows = []
    for t in advice.tenants:
        u = t.usage
        wait = f"{_num(u.wait_p90_seconds / 60)} min" if u.wait_p90_seconds is not None else "-"
        change = "no change"
        if t.new_nominal is not None:
            change = f"{u.nominal} -> {t.new_nominal}"
        limits = [f"borrowingLimit {t.borrowing_limit}" if t.borrowing_limit is not None else "",
                  f"lendingLimit {t.lending_limit}" if t.lending_limit is not None else ""]
        if any(limits):
            change = ", ".join(x for x in [change if t.new_nominal is not None else "", *limits] if x)
        rows.append([u.tenant, u.cohort or "-", str(u.nominal), _num(u.allocated_mean), _num(u.allocated_p95),
                     _num(u.busy_mean), f"{_num(u.borrowed_mean)} (p95 {_num(u.borrowed_p95)})", _num(u.lent_mean),
                     wait, _num(u.gpu_hours_reclaimed), change])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = [f"GPU quota advice over the last {advice.window} (GPUs; mean unless stated)", "",
             "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.append("")
    for t in advice.tenants:
        lines.append(f"{t.usage.tenant}: {t.verdict}")
        lines += [f"  - {reason}" for reason in t.reasons]
    for note in advice.notes:
        lines.append(f"note: {note}")
    changes = advice.changes
    lines.append("")
    if not changes:
        lines.append("No change recommended: nothing to submit.")
        return "\n".join(lines)
    from gpuaas.quota.advice import submission

    lines.append("To apply (in this order; add -p dry-run=true first to see the plan). gpuaas applies nothing itself:")
    for t in changes:
        sub = submission(t, advice.namespace)
        if sub is None:
            lines.append(f"  {t.usage.tenant}: no single submission (see the reasons above)")
            continue
        lines.append(f"  {sub['command']}")
        fields = ", ".join(f"{k}={v}" for k, v in sub["parameters"].items())
        lines.append(f"    Argo UI: Workflow Templates > {sub['template']} > Submit, parameters: {fields}")
    return "\n".join(lines)
