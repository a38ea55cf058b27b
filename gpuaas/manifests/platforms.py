"""What differs per platform, as data: the kustomize overlays `manifests/overlays/<platform>/`.

One `Platform` per monitoring profile (gpuaas.cluster.profiles), named by the Helm chart's reserved
values (`monitoring.platform`, `monitoring.ruleLabels`, `monitoring.alertRouting`, `prometheus.url`,
`prometheus.auth`, `prometheus.ca`: `Platform.chart_values`), so each overlay maps onto one values file:

| overlay | `monitoring.platform` | what it adds to base + example tenants |
|---|---|---|
| `kubernetes` | `plain` | the node pool on a Cluster API MachineDeployment |
| `kube-prometheus-stack` | `kube-prometheus-stack` | the same, and `release: kube-prometheus-stack` on the PrometheusRule (the chart's default `ruleSelector`) |
| `openshift` | `openshift` | the node pool on a MachineSet; the steps and KEDA query thanos-querier with a bearer token and the service CA; `cluster-monitoring-view` for both; `kueue.openshift.io/managed: "true"` on the tenants' namespaces |

Where the rules live and how alerts reach the webhook is the same on every platform: the PrometheusRule
and the AlertmanagerConfig stay in the product's namespace, and every product alert carries
`namespace: gpuaas` (gpuaas.manifests.observability WORKLOAD_NAMESPACE_LABEL), which the operator's
default matcher strategy (`OnNamespace`) lets through. That needs no cluster-wide change on
kube-prometheus-stack (its Alertmanager reads AlertmanagerConfigs of every namespace by default) and,
on OpenShift, only user-workload monitoring's ConfigMap (profiles.OPENSHIFT.admin_settings): the
platform Alertmanager reads no AlertmanagerConfig at all, and the rules must be exempt from the
namespace enforcement to read other namespaces' GPUs. docs/platforms.md has the justification and the
upstream files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from gpuaas.cluster import profiles
from gpuaas.manifests import node_pool
from gpuaas.manifests.platform import NAMESPACE, PROMETHEUS_CONFIGMAP, STEPS_ACCOUNT, labels

JSON = dict[str, Any]

CA_CONFIGMAP = "gpuaas-prometheus-ca"
"""Mounted into every step at /etc/gpuaas/prometheus-ca (workflows/reaction.py PROMETHEUS_CA_CONFIGMAP)."""
CA_DIR = "/etc/gpuaas/prometheus-ca"
TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
INJECT_CABUNDLE = "service.beta.openshift.io/inject-cabundle"
"""OpenShift's service CA operator writes its CA into a ConfigMap with this annotation, key `service-ca.crt`."""
KEDA_NAMESPACE_OPENSHIFT = "openshift-keda"
"""Where OpenShift's KEDA (the Custom Metrics Autoscaler operator) runs and reads ClusterTriggerAuthentication
references from (KEDA's KEDA_CLUSTER_OBJECT_NAMESPACE)."""
KEDA_ACCOUNT = "gpuaas-keda-prometheus"
KEDA_AUTHENTICATION = "gpuaas-prometheus"


@dataclass(frozen=True)
class Platform:
    overlay: str
    profile: profiles.Profile
    node_pool: list[JSON]
    prometheus_settings: dict[str, str]
    """ConfigMap gpuaas-prometheus: every step's environment (URL, token file, CA file, KEDA's authentication)."""
    rule_labels: dict[str, str] = field(default_factory=dict)
    tenant_namespace_labels: dict[str, str] = field(default_factory=dict)
    extra: list[JSON] = field(default_factory=list)
    """Objects only this platform needs (RBAC, KEDA's authentication, the CA ConfigMap)."""

    def patches(self) -> list[JSON]:
        """kustomize patches on base and examples (inline, so the overlay is one rendered folder)."""
        out = [{"target": {"kind": "ConfigMap", "name": PROMETHEUS_CONFIGMAP},
                "patch": yaml.safe_dump([{"op": "replace", "path": "/data", "value": self.prometheus_settings}])}]
        if self.rule_labels:
            out.append({"target": {"kind": "PrometheusRule", "name": "gpuaas-gpu"},
                        "patch": yaml.safe_dump([{"op": "add", "path": f"/metadata/labels/{_escape(k)}", "value": v}
                                                 for k, v in self.rule_labels.items()])})
        if self.tenant_namespace_labels:
            out.append({"target": {"kind": "Namespace", "labelSelector": "gpuaas.io/tenant"},
                        "patch": yaml.safe_dump([{"op": "add", "path": f"/metadata/labels/{_escape(k)}", "value": v}
                                                 for k, v in self.tenant_namespace_labels.items()])})
        return out

    def chart_values(self) -> JSON:
        return self.profile.chart_values


def _escape(key: str) -> str:
    """A label key as a JSON Pointer token."""
    return key.replace("~", "~0").replace("/", "~1")


def _openshift_objects() -> list[JSON]:
    """The steps' and KEDA's access to thanos-querier: cluster-monitoring-view, a token for KEDA, the CA."""
    query = profiles.OPENSHIFT_QUERY
    assert query.cluster_role and query.ca_configmap
    ca_map, ca_key = query.ca_configmap

    def binding(name: str, account: str, namespace: str) -> JSON:
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name, "labels": labels("prometheus"),
                             "annotations": {"gpuaas.io/why": "thanos-querier's kube-rbac-proxy asks the apiserver "
                                             "whether the caller may get prometheuses/api k8s in openshift-monitoring "
                                             "(cluster-monitoring-operator assets/thanos-querier)"}},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": query.cluster_role},
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]}

    return [
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": CA_CONFIGMAP, "namespace": NAMESPACE, "labels": labels("prometheus"),
                      "annotations": {INJECT_CABUNDLE: "true"}}},
        binding("gpuaas-steps-cluster-monitoring-view", STEPS_ACCOUNT, NAMESPACE),
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": KEDA_ACCOUNT, "namespace": KEDA_NAMESPACE_OPENSHIFT, "labels": labels("prometheus")}},
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
         "metadata": {"name": KEDA_ACCOUNT, "namespace": KEDA_NAMESPACE_OPENSHIFT, "labels": labels("prometheus"),
                      "annotations": {"kubernetes.io/service-account.name": KEDA_ACCOUNT}}},
        binding("gpuaas-keda-cluster-monitoring-view", KEDA_ACCOUNT, KEDA_NAMESPACE_OPENSHIFT),
        {"apiVersion": "keda.sh/v1alpha1", "kind": "ClusterTriggerAuthentication",
         "metadata": {"name": KEDA_AUTHENTICATION, "labels": labels("prometheus")},
         "spec": {"secretTargetRef": [{"parameter": "bearerToken", "name": KEDA_ACCOUNT, "key": "token"}],
                  "configMapTargetRef": [{"parameter": "ca", "name": ca_map, "key": ca_key}]}},
    ]


def platforms() -> dict[str, Platform]:
    default_url = {"GPUAAS_PROMETHEUS_URL": profiles.PLAIN.query.url}
    openshift_query = profiles.OPENSHIFT_QUERY
    return {p.overlay: p for p in (
        Platform("kubernetes", profiles.PLAIN, node_pool.kubernetes(), default_url),
        Platform("kube-prometheus-stack", profiles.KUBE_PROMETHEUS_STACK, node_pool.kubernetes(),
                 {"GPUAAS_PROMETHEUS_URL": profiles.KUBE_PROMETHEUS_STACK.query.url},
                 rule_labels=dict(profiles.KUBE_PROMETHEUS_STACK.rule_labels)),
        Platform("openshift", profiles.OPENSHIFT, node_pool.openshift(KEDA_AUTHENTICATION),
                 {"GPUAAS_PROMETHEUS_URL": openshift_query.url,
                  "GPUAAS_PROMETHEUS_TOKEN_FILE": TOKEN_FILE,
                  "GPUAAS_PROMETHEUS_CA_FILE": f"{CA_DIR}/{(openshift_query.ca_configmap or ('', 'ca.crt'))[1]}",
                  "GPUAAS_KEDA_AUTHENTICATION": f"ClusterTriggerAuthentication/{KEDA_AUTHENTICATION}"},
                 tenant_namespace_labels=dict(profiles.OPENSHIFT.tenant_namespace_labels),
                 extra=_openshift_objects()),
    )}
