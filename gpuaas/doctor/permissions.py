"""The permissions `gpuaas doctor` needs (least privilege): every read the gatherer makes, and the two
server-side dry runs. `gpuaas doctor --print-role` prints them as a ClusterRole; the real-stack test
runs the doctor as a ServiceAccount bound to exactly this role and expects the same findings as the
cluster admin gets, with nothing unreadable.

Secrets: `get` on the three named Secrets only (the webhook token, the admins' URL), whose values the
doctor reduces to digests at once; no `list` on Secrets anywhere.
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]

RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...], str], ...] = (
    ("", ("namespaces",), ("get", "list"), (), "Kueue's namespace selector and the tenants' labels"),
    ("", ("pods",), ("get", "list"), (), "the product's EventSource, Sensor and step pods (image pulls)"),
    ("", ("configmaps",), ("get",), ("kueue-manager-config", "workflow-controller-configmap", "inferenceservice-config",
                                     "gpuaas-policy", "user-workload-monitoring-config"),
     "Kueue's, Argo Workflows', KServe's and OpenShift monitoring's configuration; the idle policy"),
    ("", ("secrets",), ("get",), ("gpuaas-alertmanager-webhook", "gpuaas-admin-alerts"),
     "the webhook token on both sides (digests only)"),
    ("apps", ("deployments",), ("list",), (), "which controllers run, at which version (their images)"),
    ("apiextensions.k8s.io", ("customresourcedefinitions",), ("get",), (), "CRD labels and version annotations"),
    ("apiregistration.k8s.io", ("apiservices",), ("get",), (), "KEDA's external metrics APIService"),
    ("admissionregistration.k8s.io", ("validatingwebhookconfigurations",), ("get",), (), "where Kueue runs"),
    ("kueue.x-k8s.io", ("clusterqueues", "localqueues"), ("list",), (), "tenants"),
    ("kueue.x-k8s.io", ("resourceflavors",), ("create",), (), "a server-side dry run: Kueue's webhook answers"),
    ("keda.sh", ("scaledobjects",), ("create",), (), "a server-side dry run: KEDA's webhook answers"),
    ("argoproj.io", ("eventsources", "sensors", "eventbus", "workflowtemplates", "workflows"), ("list",), (),
     "the product's objects and runs (the probe's run too)"),
    ("argoproj.io", ("cronworkflows",), ("get",), ("gpuaas-sweep",),
     "the catch-up sweep's CronWorkflow: its schedule, suspension and last scheduled time"),
    ("monitoring.coreos.com", ("prometheuses", "thanosrulers", "alertmanagers", "prometheusrules",
                               "alertmanagerconfigs"), ("list",), (), "who selects the rules and the routing"),
    ("serving.kserve.io", ("inferenceservices",), ("list",), (), "KServe's mode per InferenceService"),
    ("datasciencecluster.opendatahub.io", ("datascienceclusters",), ("list",), (), "Data Science Pipelines"),
)
"""(API group, resources, verbs, resourceNames, why)."""

OUTSIDE_KUBERNETES = (
    ("Prometheus: GET /api/v1/query, /api/v1/rules, /api/v1/alertmanagers (on OpenShift thanos-querier: a token "
    "with `get prometheuses/api` in openshift-monitoring, ClusterRole cluster-monitoring-view)"),
    ("Alertmanager: GET /api/v2/status; with --probe POST /api/v2/alerts (on OpenShift alertmanager-main: "
    "ClusterRole monitoring-alertmanager-edit in openshift-monitoring)"),
)


def cluster_role(name: str = "gpuaas-doctor") -> JSON:
    rules = []
    for index, (group, resources, verbs, names, why) in enumerate(RULES):
        rule: JSON = {"apiGroups": [group], "resources": list(resources), "verbs": list(verbs)}
        if names:
            rule["resourceNames"] = list(names)
        rules.append(rule)
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "gpuaas"},
                         "annotations": {f"gpuaas.io/rule-{i}": why for i, (*_, why) in enumerate(RULES)}},
            "rules": rules}
