"""OpenShift's monitoring as cluster-monitoring-operator sets it up, for `gpuaas cluster up --monitoring openshift`.

The real Prometheus Operator (gpuaas.cluster.prometheus_operator) reconciles the resources below; what
OpenShift's own controllers do around it is done here by STAND-INS, transcribed from their source
(gpuaas.cluster.profiles names the files and commits), because they cannot be built here
(cluster-monitoring-operator is refused by this machine's Go module proxy; the service CA operator and
Thanos are out of proportion):

- `resources()`: what cluster-monitoring-operator 4.18 makes with user-workload monitoring on: the platform
  Prometheus `k8s`, `alertmanager-main` (its Secret with CMO's default routing), user-workload's Prometheus
  and Thanos Ruler (both enforcing `namespace`), the ClusterRole `cluster-monitoring-view`, the PriorityClass
  `openshift-user-critical`. Adapted as gpuaas.cluster.prometheus_operator says (one replica, 5 s
  intervals, the stand-ins' scrape jobs), and the platform Prometheus sends no alerts (its Alertmanager
  path is not the product's: alertmanager-main's pod is not run; the operator still generates its
  configuration, which the tier reads).
- `main()` (a process of the stack, `python -m gpuaas.cluster.openshift_platform`): every SYNC_SECONDS,
  cluster-monitoring-operator's translation of ConfigMap
  `openshift-user-workload-monitoring/user-workload-monitoring-config` (`uwm_resources`:
  `namespacesWithoutLabelEnforcement` -> `excludedFromEnforcement` of the user-workload Prometheus and
  Thanos Ruler; `alertmanager.enabled` / `enableAlertmanagerConfig` -> the user-workload Alertmanager and
  its AlertmanagerConfig selectors), and the service CA operator's CA bundle: ConfigMap
  `openshift-service-ca.crt` (key `service-ca.crt`) in every namespace and in every ConfigMap annotated
  `service.beta.openshift.io/inject-cabundle: "true"`.
- Thanos Ruler itself is a STAND-IN (gpuaas.cluster.monitoring_pods): Debian's Prometheus evaluating the
  rule files the operator generated for the ThanosRuler (with its enforcement applied or not), reading
  the platform Prometheus' series through remote read (what thanos-querier gives Thanos Ruler) and
  alerting to the user-workload Alertmanager. thanos-querier is the platform Prometheus' API behind the
  real kube-rbac-proxy (v0.19.1, built): SubjectAccessReview against the apiserver, a serving certificate
  from the stack's service CA.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpuaas.cluster import profiles

if TYPE_CHECKING:
    from gpuaas.cluster.prometheus_operator import StackEnv

JSON = dict[str, Any]
SYNC_SECONDS = 2.0
MONITORING, UWM = "openshift-monitoring", "openshift-user-workload-monitoring"
UWM_CONFIGMAP = "user-workload-monitoring-config"
SERVICE_CA_CONFIGMAP = "openshift-service-ca.crt"
INJECT = "service.beta.openshift.io/inject-cabundle"
THANOS_VERSION = "0.36.1"
"""What CMO 4.18 pins (assets/thanos-ruler/thanos-ruler.yaml); only the operator reads it (no Thanos runs)."""
UWM_ALERTMANAGER = profiles.OPENSHIFT_ALERTMANAGER_USER_WORKLOAD
THANOS_RULER = next(e for e in profiles.OPENSHIFT.evaluators if e.kind == "ThanosRuler")
UWM_PROMETHEUS = next(e for e in profiles.OPENSHIFT.evaluators if e.kind == "Prometheus" and e.namespace == UWM)
PLATFORM = profiles.OPENSHIFT_PLATFORM_PROMETHEUS
CMO_MAIN_CONFIG = {  # assets/alertmanager/secret.yaml
    "global": {"http_config": {"proxy_from_environment": True}},
    "inhibit_rules": [
        {"equal": ["namespace", "alertname"], "source_matchers": ["severity = critical"],
         "target_matchers": ["severity =~ warning|info"]},
        {"equal": ["namespace", "alertname"], "source_matchers": ["severity = warning"],
         "target_matchers": ["severity = info"]}],
    "receivers": [{"name": "Default"}, {"name": "Watchdog"}, {"name": "Critical"}],
    "route": {"group_by": ["namespace"], "group_interval": "5m", "group_wait": "30s", "receiver": "Default",
              "repeat_interval": "12h", "routes": [{"matchers": ["alertname = Watchdog"], "receiver": "Watchdog"},
                                                   {"matchers": ["severity = critical"], "receiver": "Critical"}]},
}
CMO_UWM_CONFIG = {"global": {"http_config": {"proxy_from_environment": True}},  # assets/alertmanager-user-workload/secret.yaml
                  "receivers": [{"name": "Default"}], "route": {"group_by": ["namespace"], "receiver": "Default"}}


def _namespace(name: str) -> JSON:
    labels = {profiles.CLUSTER_MONITORING_LABEL: "true"} if name.startswith("openshift-") and name != "openshift-keda" else {}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def _account(namespace: str, name: str) -> JSON:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}


def _binding(name: str, role: str, namespace: str, account: str) -> JSON:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]}


def _secret(namespace: str, name: str, key: str, value: Any) -> JSON:
    text = value if isinstance(value, str) else yaml.safe_dump(value, sort_keys=False)
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "stringData": {key: text}}


def resources(env: StackEnv) -> list[JSON]:
    """What cluster-monitoring-operator makes (module docstring), before the admin's UWM ConfigMap."""
    from gpuaas.cluster.prometheus_operator import NOT_RUN, SCRAPE_SECRET

    not_run = {NOT_RUN: "true"}
    query = profiles.OPENSHIFT_QUERY
    return [
        *[_namespace(n) for n in (MONITORING, UWM, "openshift-keda", "openshift-machine-api")],
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "openshift-user-critical"},
         "value": 1000000000, "description": "OpenShift's priority class for user-critical pods (a stand-in)"},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",  # assets/cluster-monitoring-operator/cluster-role-view.yaml
         "metadata": {"name": query.cluster_role},
         "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
                   {"apiGroups": ["monitoring.coreos.com"], "resources": ["prometheuses/api"],
                    "resourceNames": ["k8s"], "verbs": ["get", "create", "update"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",  # assets/thanos-querier/cluster-role.yaml
         "metadata": {"name": "thanos-querier"},
         "rules": [{"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
                   {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}]},
        _account(MONITORING, "thanos-querier"), _binding("thanos-querier", "thanos-querier", MONITORING, "thanos-querier"),
        _account(MONITORING, "prometheus-k8s"), _binding("prometheus-k8s", "prometheus", MONITORING, "prometheus-k8s"),
        _account(UWM, "prometheus-user-workload"), _account(UWM, "thanos-ruler"), _account(MONITORING, "alertmanager-main"),
        _account(UWM, "alertmanager-user-workload"),
        env.scrape_secret(MONITORING),
        _secret(MONITORING, "alertmanager-main", "alertmanager.yaml", CMO_MAIN_CONFIG),
        _secret(UWM, "alertmanager-user-workload", "alertmanager.yaml", CMO_UWM_CONFIG),
        _secret(UWM, "thanos-ruler-query-config", "query.yaml",  # assets/thanos-ruler/query-config-secret.yaml
                [{"static_configs": [f"dnssrv+_web._tcp.thanos-querier.{MONITORING}.svc"], "scheme": "https"}]),
        _secret(UWM, "thanos-ruler-alertmanagers-config", "alertmanagers.yaml",  # assets/thanos-ruler/alertmanagers-config-secret.yaml
                {"alertmanagers": [{"api_version": "v2", "scheme": "https", "static_configs": [
                    f"dnssrv+_web._tcp.alertmanager-operated.{UWM}.svc"]}]}),
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
         "metadata": {"name": PLATFORM.name, "namespace": MONITORING},
         "spec": {"version": env.prometheus_version, "replicas": 1, "serviceAccountName": "prometheus-k8s",
                  "scrapeInterval": "5s", "evaluationInterval": "5s", "priorityClassName": "system-cluster-critical",
                  "ruleSelector": PLATFORM.rule_selector, "ruleNamespaceSelector": PLATFORM.rule_namespace_selector,
                  "serviceMonitorSelector": {}, "serviceMonitorNamespaceSelector": PLATFORM.rule_namespace_selector,
                  "podMonitorSelector": {}, "podMonitorNamespaceSelector": PLATFORM.rule_namespace_selector,
                  "additionalScrapeConfigs": {"name": SCRAPE_SECRET, "key": "scrape.yaml"}}},
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
         "metadata": {"name": UWM_PROMETHEUS.name, "namespace": UWM, "annotations": not_run},
         "spec": {"version": env.prometheus_version, "replicas": 1, "serviceAccountName": "prometheus-user-workload",
                  "priorityClassName": "openshift-user-critical", "enforcedNamespaceLabel": "namespace",
                  "ignoreNamespaceSelectors": True, "overrideHonorLabels": True, "overrideHonorTimestamps": True,
                  "ruleSelector": UWM_PROMETHEUS.rule_selector,
                  "ruleNamespaceSelector": UWM_PROMETHEUS.rule_namespace_selector,
                  "serviceMonitorSelector": {"matchExpressions": profiles.USER_RULES},
                  "serviceMonitorNamespaceSelector": {"matchExpressions": profiles.NOT_CLUSTER_MONITORING}}},
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "ThanosRuler",
         "metadata": {"name": THANOS_RULER.name, "namespace": UWM},
         "spec": {"version": THANOS_VERSION, "replicas": 1, "serviceAccountName": "thanos-ruler",
                  "priorityClassName": "openshift-user-critical", "evaluationInterval": "5s",
                  "enforcedNamespaceLabel": "namespace",
                  "ruleSelector": THANOS_RULER.rule_selector, "ruleNamespaceSelector": THANOS_RULER.rule_namespace_selector,
                  "queryConfig": {"key": "query.yaml", "name": "thanos-ruler-query-config"},
                  "alertmanagersConfig": {"key": "alertmanagers.yaml", "name": "thanos-ruler-alertmanagers-config"}}},
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "Alertmanager",
         "metadata": {"name": profiles.OPENSHIFT_ALERTMANAGER_MAIN.name, "namespace": MONITORING, "annotations": not_run},
         "spec": {"version": env.alertmanager_version, "replicas": 1, "serviceAccountName": "alertmanager-main",
                  "priorityClassName": "system-cluster-critical"}},
    ]


class InvalidConfig(ValueError):
    """config.yaml that cluster-monitoring-operator refuses: it then applies nothing from the file."""


class _StrictLoader(yaml.SafeLoader):
    """YAML with a duplicate mapping key refused, as CMO's parser refuses it (pkg/manifests/config.go
    NewUserConfigFromString: k8s.io/apimachinery yaml.UnmarshalStrict, sigs.k8s.io/yaml YAMLToJSONStrict)."""


def _strict_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> JSON:
    keys = [loader.construct_object(key, deep=deep) for key, _ in node.value]
    duplicates = sorted({str(k) for k in keys if keys.count(k) > 1})
    if duplicates:
        raise InvalidConfig(f"config.yaml: duplicate key {', '.join(duplicates)}")
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _strict_mapping)


def parse_uwm_config(text: str | None) -> JSON:
    """config.yaml of user-workload-monitoring-config as CMO 4.18 reads it (strictly), or InvalidConfig."""
    try:
        config = yaml.load(text or "", Loader=_StrictLoader) or {}
    except yaml.YAMLError as error:
        raise InvalidConfig(f"config.yaml: {error}") from None
    if not isinstance(config, dict):
        raise InvalidConfig(f"config.yaml: expected a mapping, found {type(config).__name__}")
    return config


def uwm_resources(config_text: str | None, alertmanager_version: str) -> tuple[list[JSON], list[JSON], list[JSON]]:
    """CMO's translation of user-workload-monitoring-config (pkg/manifests/manifests.go, release-4.18): merge
    patches for the user-workload Prometheus and Thanos Ruler, the user-workload Alertmanager to apply, and
    the one to delete (when `alertmanager.enabled` is not set). InvalidConfig for a file CMO refuses."""
    config = parse_uwm_config(config_text)
    exempt = [{"group": "monitoring.coreos.com", "resource": "prometheusrules", "namespace": ns}
              for ns in config.get("namespacesWithoutLabelEnforcement") or []]
    patches = [{"apiVersion": "monitoring.coreos.com/v1", "kind": kind, "metadata": {"name": name, "namespace": UWM},
                "spec": {"excludedFromEnforcement": exempt}}
               for kind, name in (("Prometheus", UWM_PROMETHEUS.name), ("ThanosRuler", THANOS_RULER.name))]
    alertmanager = config.get("alertmanager") or {}
    resource = {"apiVersion": "monitoring.coreos.com/v1", "kind": "Alertmanager",
                "metadata": {"name": UWM_ALERTMANAGER.name, "namespace": UWM},
                "spec": {"version": alertmanager_version, "replicas": 1, "serviceAccountName": "alertmanager-user-workload",
                         "priorityClassName": "openshift-user-critical"}}
    # CMO writes the whole resource, so a setting turned off takes its selectors away; as a merge patch (below)
    # that is an explicit null (an absent key would leave the earlier selector in place).
    enabled_configs = bool(alertmanager.get("enableAlertmanagerConfig"))
    resource["spec"]["alertmanagerConfigSelector"] = UWM_ALERTMANAGER.config_selector if enabled_configs else None
    resource["spec"]["alertmanagerConfigNamespaceSelector"] = (UWM_ALERTMANAGER.config_namespace_selector
                                                               if enabled_configs else None)
    if alertmanager.get("enabled"):
        return patches, [resource], []
    return patches, [], [resource]


class Controllers:
    """The loop of `main()`: CMO's UWM translation and the service CA's bundles (module docstring)."""

    def __init__(self, kubeconfig: str, service_ca: Path, alertmanager_version: str) -> None:
        from kubernetes import client, config

        self.api = config.new_client_from_config(config_file=kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.ca = service_ca.read_text()
        self.alertmanager_version = alertmanager_version
        self.refused = ""

    def sync(self) -> None:
        from kubernetes.client import ApiException

        try:
            found = self.core.read_namespaced_config_map(UWM_CONFIGMAP, UWM).data or {}
        except ApiException as error:
            if error.status != 404:
                raise
            found = {}
        try:
            patches, apply, delete = uwm_resources(found.get("config.yaml"), self.alertmanager_version)
        except InvalidConfig as error:  # CMO reports it (Degraded) and changes nothing
            if str(error) != self.refused:
                print(f"{UWM}/{UWM_CONFIGMAP}: {error}; nothing applied", file=sys.stderr, flush=True)
            self.refused = str(error)
            patches, apply, delete = [], [], []
        else:
            self.refused = ""
        for obj in patches:
            plural = "prometheuses" if obj["kind"] == "Prometheus" else "thanosrulers"
            self.custom.patch_namespaced_custom_object("monitoring.coreos.com", "v1", UWM, plural,
                                                       obj["metadata"]["name"], obj)
        for obj in apply:
            try:
                self.custom.create_namespaced_custom_object("monitoring.coreos.com", "v1", UWM, "alertmanagers", obj)
            except ApiException as error:
                if error.status != 409:
                    raise
                self.custom.patch_namespaced_custom_object("monitoring.coreos.com", "v1", UWM, "alertmanagers",
                                                           obj["metadata"]["name"], {"spec": obj["spec"]})
        for obj in delete:
            try:
                self.custom.delete_namespaced_custom_object("monitoring.coreos.com", "v1", UWM, "alertmanagers",
                                                            obj["metadata"]["name"])
            except ApiException as error:
                if error.status != 404:
                    raise
        self._service_ca()

    def _service_ca(self) -> None:
        data = {"service-ca.crt": self.ca}
        for namespace in self.core.list_namespace().items:
            name = namespace.metadata.name
            maps = {m.metadata.name: m for m in self.core.list_namespaced_config_map(name).items}
            if SERVICE_CA_CONFIGMAP not in maps:
                self.core.create_namespaced_config_map(name, {"metadata": {"name": SERVICE_CA_CONFIGMAP}, "data": data})
            for cm in maps.values():
                if (cm.metadata.annotations or {}).get(INJECT) == "true" and (cm.data or {}) != data:
                    self.core.patch_namespaced_config_map(cm.metadata.name, name, {"data": data})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuaas.cluster.openshift_platform",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--service-ca", required=True, type=Path, help="the stack's service CA certificate (PEM)")
    parser.add_argument("--alertmanager-version", required=True)
    args = parser.parse_args(argv)
    controllers = Controllers(args.kubeconfig, args.service_ca, args.alertmanager_version)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    print("cluster-monitoring-operator's UWM translation and the service CA (stand-ins) running", flush=True)
    while True:
        try:
            controllers.sync()
        except Exception as error:  # noqa: BLE001 - the apiserver may be briefly away; next round retries
            print(f"sync failed (retried): {error}", flush=True)
        if stopping.wait(SYNC_SECONDS):
            return 0


if __name__ == "__main__":
    sys.exit(main())
