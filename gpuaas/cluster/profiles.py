"""Monitoring profiles: where the product's rules are evaluated and its alerts routed, per platform.

`gpuaas cluster up --monitoring PROFILE` runs one of these; `gpuaas doctor` and its tests compare a live
cluster with them; the overlays under `manifests/overlays/` are rendered from their values (`chart_values`).
A profile is DATA, transcribed from each platform's own source with its provenance (`Source`: repository,
file, commit), because the Prometheus Operator, not gpuaas, decides on those platforms:

- which PrometheusRules a `Prometheus` or `ThanosRuler` loads (`ruleSelector`, `ruleNamespaceSelector`:
  an unset selector selects nothing, `{}` everything; an unset namespace selector means the resource's
  own namespace only; prometheus-operator v0.93 pkg/prometheus/resource_selector.go);
- whether it rewrites the rules' selectors and alerts (`enforcedNamespaceLabel`, `excludedFromEnforcement`:
  pkg/namespacelabeler);
- which AlertmanagerConfigs an `Alertmanager` reads and which matcher it adds to their routes
  (`alertmanagerConfigSelector`, `alertmanagerConfigNamespaceSelector`, `alertmanagerConfigMatcherStrategy`:
  pkg/alertmanager/operator.go, amcfg.go; unset strategy = `OnNamespace`);
- where a pod in the cluster queries metrics, with which credentials and CA.

    from gpuaas.cluster.profiles import PROFILES, profile
    p = profile("openshift")
    p.evaluator_for(rule_labels={}, namespace="gpuaas", namespace_labels={})   # who loads the product's rule
    p.router_for(...)                                                            # who reads gpuaas-idle
    p.query                                                                      # URL, auth, CA, RBAC

Each profile's `chart_values` is it in the Helm chart's keys (`monitoring.platform`, `monitoring.ruleLabels`,
`monitoring.alertRouting`, `prometheus.url`, `prometheus.auth`, `prometheus.ca`, `keda.namespace`,
`kueue.namespaceLabels`): examples/values/<platform>.yaml carries them, and the overlay of the same name is
rendered from that file, so the chart, the overlays and the stack's profiles stay one table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]
Selector = Mapping[str, Any] | None
"""A Kubernetes LabelSelector as JSON; None = the field is unset (not the same as `{}`)."""

PRODUCT_NAMESPACE = "gpuaas"
CLUSTER_MONITORING_LABEL = "openshift.io/cluster-monitoring"
USER_MONITORING_LABEL = "openshift.io/user-monitoring"
EVALUATION_SCOPE_LABEL = "openshift.io/prometheus-rule-evaluation-scope"
KUEUE_MANAGED_LABEL = "kueue.openshift.io/managed"


@dataclass(frozen=True)
class Source:
    """Where a transcribed setting comes from: read there, pinned to that commit."""

    repo: str
    path: str
    commit: str
    what: str = ""

    def __str__(self) -> str:
        return f"{self.repo} {self.path} @ {self.commit[:12]}" + (f" ({self.what})" if self.what else "")


CMO_COMMIT = "6b6b1aa184f384cffc1ff611281c115652ddd734"
"""openshift/cluster-monitoring-operator, branch release-4.18 (OpenShift 4.18: the first release with
`namespacesWithoutLabelEnforcement`, and the first the Red Hat build of Kueue supports)."""
CHART_COMMIT = "cf408a290aec489277a94450bb3511432477a53a"
"""prometheus-community/helm-charts: kube-prometheus-stack 88.5.3 (appVersion v0.93.1, the operator pinned here)."""
KUEUE_OPERATOR_COMMIT = "a82b72a1a973bcf95874ca050c12f0bd36f20f2e"
"""openshift/kueue-operator, branch release-1.4."""
ODH_COMMIT = "0c0c9913c712e3adac471a50f4bb461c125ef534"
"""opendatahub-io/opendatahub-operator, main of 2026-08-21 (OpenShift AI's upstream)."""
PROMETHEUS_OPERATOR_VERSION = "v0.93.1"

CMO = "openshift/cluster-monitoring-operator"
CHART = "prometheus-community/helm-charts"


def cmo(path: str, what: str = "") -> Source:
    return Source(CMO, path, CMO_COMMIT, what)


def chart(path: str, what: str = "") -> Source:
    return Source(CHART, f"charts/kube-prometheus-stack/{path}", CHART_COMMIT, what)


# -- label selectors, as the apiserver and the operator evaluate them -------------------------------
def matches(selector: Selector, labels: Mapping[str, str]) -> bool:
    """Whether a LabelSelector selects `labels` (`{}` selects everything; None is handled by the callers,
    because an unset selector means different things on different fields)."""
    from engine.kueue.controller import label_selector_matches

    return selector is not None and label_selector_matches(dict(selector), dict(labels))


def _namespace_selected(selector: Selector, own_namespace: str, namespace: str, labels: Mapping[str, str]) -> bool:
    """The operator's namespace selectors: unset = the resource's own namespace only."""
    return namespace == own_namespace if selector is None else matches(selector, labels)


# -- the resources that decide ------------------------------------------------------------------------
@dataclass(frozen=True)
class RuleEvaluator:
    """A `Prometheus` or `ThanosRuler` resource, as far as rule selection and enforcement go."""

    kind: str
    namespace: str
    name: str
    rule_selector: Selector
    rule_namespace_selector: Selector
    enforced_namespace_label: str | None = None
    excluded_from_enforcement: tuple[str, ...] = ()
    """Namespaces whose PrometheusRules are NOT rewritten (OpenShift: `namespacesWithoutLabelEnforcement`)."""
    sees: str = ""
    """Which series its rules read (its own TSDB, or a querier's), in words."""
    source: Source | None = None

    def selects(self, rule_labels: Mapping[str, str], namespace: str, namespace_labels: Mapping[str, str]) -> bool:
        return (matches(self.rule_selector, rule_labels)
                and _namespace_selected(self.rule_namespace_selector, self.namespace, namespace, namespace_labels))

    def enforces(self, namespace: str) -> bool:
        """Whether a rule of `namespace` gets `<label>="<namespace>"` forced into every selector and alert."""
        return bool(self.enforced_namespace_label) and namespace not in self.excluded_from_enforcement


@dataclass(frozen=True)
class AlertRouter:
    """An `Alertmanager` resource: which AlertmanagerConfigs it reads, and the matcher it adds."""

    namespace: str
    name: str
    config_selector: Selector
    config_namespace_selector: Selector
    matcher_strategy: str = "OnNamespace"
    config_secret: str = ""
    """The Secret with the base configuration (the admin's routing on OpenShift's alertmanager-main)."""
    source: Source | None = None

    def reads(self, config_labels: Mapping[str, str], namespace: str, namespace_labels: Mapping[str, str]) -> bool:
        return (matches(self.config_selector, config_labels)
                and _namespace_selected(self.config_namespace_selector, self.namespace, namespace, namespace_labels))

    def added_matcher(self, namespace: str) -> str | None:
        """The matcher the operator adds to an AlertmanagerConfig's route in `namespace` (amcfg.go enforcers)."""
        if self.matcher_strategy == "None":
            return None
        if self.matcher_strategy == "OnNamespaceExceptForAlertmanagerNamespace" and namespace == self.namespace:
            return None
        return f'namespace="{namespace}"'


@dataclass(frozen=True)
class QueryEndpoint:
    """Where a pod of the product (the steps, KEDA's scalers) asks PromQL questions."""

    url: str
    auth: str = "none"
    """`none` or `bearer` (the pod's ServiceAccount token, or a token Secret for KEDA)."""
    ca_configmap: tuple[str, str] | None = None
    """(ConfigMap, key) in the product's namespace holding the serving certificate's CA."""
    cluster_role: str | None = None
    """The ClusterRole a caller needs (bound to the product's ServiceAccounts)."""
    authorization: JSON = field(default_factory=dict)
    """What the proxy in front asks the apiserver (a SubjectAccessReview's resourceAttributes)."""
    source: Source | None = None


@dataclass(frozen=True)
class KueueSettings:
    """What the platform's Kueue manages: which namespaces' pod-based kinds, which frameworks."""

    managed_jobs_namespace_selector: Selector
    frameworks: tuple[str, ...]
    source: tuple[Source, ...] = ()


@dataclass(frozen=True)
class AdminSetting:
    """A cluster-wide change the platform needs for the product (the install docs' commands make it)."""

    where: str
    setting: str
    why: str
    source: Source | None = None


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    evaluators: tuple[RuleEvaluator, ...]
    routers: tuple[AlertRouter, ...]
    query: QueryEndpoint
    rule_labels: Mapping[str, str]
    """Labels the product's PrometheusRule carries so the evaluator selects it."""
    namespace_labels: Mapping[str, str]
    """Labels the product's namespace carries."""
    tenant_namespace_labels: Mapping[str, str]
    """Labels every tenant namespace needs (beside gpuaas.io/tenant)."""
    alert_routing: str
    """How idle alerts reach the webhook: `alertmanager-config` (the product's AlertmanagerConfig, read by an
    Alertmanager of the platform) or `static` (a plain Alertmanager configured with the product's routing)."""
    kueue: KueueSettings | None
    admin_settings: tuple[AdminSetting, ...] = ()
    keda_namespace: str = "keda"
    """Where the platform's KEDA operator runs and reads ClusterTriggerAuthentication references
    (KEDA_CLUSTER_OBJECT_NAMESPACE)."""
    operator_managed: bool = True
    """False for `plain`: no Prometheus Operator; the stack writes Prometheus' and Alertmanager's files."""

    def evaluator_for(self, rule_labels: Mapping[str, str], namespace: str,
                      namespace_labels: Mapping[str, str]) -> RuleEvaluator | None:
        """The evaluator that loads a PrometheusRule with these labels in that namespace WITHOUT rewriting it,
        else the first that loads it at all (rewritten), else None."""
        loading = [e for e in self.evaluators if e.selects(rule_labels, namespace, namespace_labels)]
        return next((e for e in loading if not e.enforces(namespace)), loading[0] if loading else None)

    def router_for(self, config_labels: Mapping[str, str], namespace: str,
                   namespace_labels: Mapping[str, str]) -> AlertRouter | None:
        return next((r for r in self.routers if r.reads(config_labels, namespace, namespace_labels)), None)

    @property
    def chart_values(self) -> JSON:
        """This profile as Helm values (the chart's platform keys; gpuaas/manifests/values.py): what
        examples/values/<platform>.yaml sets (tests/cluster/test_profiles.py checks each example carries them)."""
        values: JSON = {"monitoring": {"platform": self.name, "ruleLabels": dict(self.rule_labels),
                                       "alertRouting": {"mode": "alertmanagerConfig"}},
                        "prometheus": {"url": self.query.url,
                                       "auth": {"type": "serviceAccountToken" if self.query.auth == "bearer" else "none",
                                                "clusterRole": self.query.cluster_role or ""}},
                        "keda": {"namespace": self.keda_namespace},
                        "kueue": {"namespaceLabels": dict(self.tenant_namespace_labels)}}
        values["prometheus"]["ca"] = ({"configMap": self.query.ca_configmap[0], "key": self.query.ca_configmap[1]}
                                      if self.query.ca_configmap else {})
        return values


# -- plain: the stack as before (no operator) ------------------------------------------------------
PLAIN = Profile(
    name="plain",
    description="no Prometheus Operator: Prometheus loads the product's rule file and Alertmanager its routing "
                "(the files gpuaas renders); any Kubernetes with a Prometheus the admin configures by hand",
    evaluators=(RuleEvaluator("Prometheus", "monitoring", "prometheus", {}, {}, sees="its own scrapes"),),
    routers=(AlertRouter("monitoring", "alertmanager", {}, {}, matcher_strategy="None"),),
    query=QueryEndpoint("http://prometheus-operated.monitoring.svc:9090"),
    rule_labels={}, namespace_labels={}, tenant_namespace_labels={},
    alert_routing="static", kueue=None, operator_managed=False,
)

# -- kube-prometheus-stack with the chart's defaults ----------------------------------------------
KPS_RELEASE = "kube-prometheus-stack"
"""The release name the chart's README installs with (`helm install kube-prometheus-stack ...`), in `monitoring`."""
KPS_NAMESPACE = "monitoring"

KUBE_PROMETHEUS_STACK = Profile(
    name="kube-prometheus-stack",
    description=f"the kube-prometheus-stack chart with its default values, release {KPS_RELEASE!r} in "
                f"namespace {KPS_NAMESPACE!r}",
    evaluators=(RuleEvaluator(
        "Prometheus", KPS_NAMESPACE, f"{KPS_RELEASE}-prometheus",
        # ruleSelectorNilUsesHelmValues: true, ruleSelector: {} -> matchLabels release: <release>
        rule_selector={"matchLabels": {"release": KPS_RELEASE}}, rule_namespace_selector={},
        sees="its own scrapes (ServiceMonitors labelled release: <release>)",
        source=chart("templates/prometheus/prometheus.yaml", "ruleSelector from ruleSelectorNilUsesHelmValues "
                     "(values.yaml prometheus.prometheusSpec)")),),
    routers=(AlertRouter(
        KPS_NAMESPACE, f"{KPS_RELEASE}-alertmanager",
        # alertmanagerConfigSelector: {}, alertmanagerConfigNamespaceSelector: {}, no matcher strategy
        config_selector={}, config_namespace_selector={}, matcher_strategy="OnNamespace",
        config_secret=f"alertmanager-{KPS_RELEASE}-alertmanager",
        source=chart("templates/alertmanager/alertmanager.yaml", "selectors {} from values.yaml "
                     "alertmanager.alertmanagerSpec; alertmanagerConfigMatcherStrategy unset")),),
    query=QueryEndpoint(f"http://prometheus-operated.{KPS_NAMESPACE}.svc:9090",
                        source=Source("prometheus-operator/prometheus-operator", "pkg/prometheus/server/operator.go",
                                      "v0.93.1", "the governing Service prometheus-operated")),
    rule_labels={"release": KPS_RELEASE}, namespace_labels={}, tenant_namespace_labels={},
    alert_routing="alertmanager-config", kueue=None,
)

# -- OpenShift 4.18+: platform and user-workload monitoring, the Red Hat build of Kueue ----------------
NOT_CLUSTER_MONITORING = [{"key": CLUSTER_MONITORING_LABEL, "operator": "NotIn", "values": ["true"]},
                          {"key": USER_MONITORING_LABEL, "operator": "NotIn", "values": ["false"]}]
USER_RULES = [{"key": USER_MONITORING_LABEL, "operator": "NotIn", "values": ["false"]}]

OPENSHIFT_PLATFORM_PROMETHEUS = RuleEvaluator(
    "Prometheus", "openshift-monitoring", "k8s", rule_selector={},
    rule_namespace_selector={"matchLabels": {CLUSTER_MONITORING_LABEL: "true"}},
    sees="the platform's scrapes: DCGM exporter (GPU Operator), kube-state-metrics, Kueue",
    source=cmo("assets/prometheus-k8s/prometheus.yaml"))


def openshift_user_workload(exempt: tuple[str, ...] = (PRODUCT_NAMESPACE,)) -> tuple[RuleEvaluator, ...]:
    """UWM's Prometheus (rules labelled leaf-prometheus) and Thanos Ruler (the others), both enforcing
    `namespace`, except for the namespaces in `namespacesWithoutLabelEnforcement` (`exempt`)."""
    return (
        RuleEvaluator("ThanosRuler", "openshift-user-workload-monitoring", "user-workload",
                      rule_selector={"matchExpressions": [*USER_RULES, {"key": EVALUATION_SCOPE_LABEL,
                                                                        "operator": "NotIn",
                                                                        "values": ["leaf-prometheus"]}]},
                      rule_namespace_selector={"matchExpressions": NOT_CLUSTER_MONITORING},
                      enforced_namespace_label="namespace", excluded_from_enforcement=exempt,
                      sees="thanos-querier: the platform's and user-workload Prometheus' series",
                      source=cmo("assets/thanos-ruler/thanos-ruler.yaml; pkg/manifests/manifests.go "
                                 "excludedFromEnforcement")),
        RuleEvaluator("Prometheus", "openshift-user-workload-monitoring", "user-workload",
                      rule_selector={"matchExpressions": [*USER_RULES, {"key": EVALUATION_SCOPE_LABEL,
                                                                        "operator": "In",
                                                                        "values": ["leaf-prometheus"]}]},
                      rule_namespace_selector={"matchExpressions": NOT_CLUSTER_MONITORING},
                      enforced_namespace_label="namespace", excluded_from_enforcement=exempt,
                      sees="user namespaces' scrapes only (no DCGM, kube-state-metrics or Kueue series)",
                      source=cmo("assets/prometheus-user-workload/prometheus.yaml")),
    )


OPENSHIFT_ALERTMANAGER_MAIN = AlertRouter(
    "openshift-monitoring", "main", config_selector=None, config_namespace_selector=None,
    config_secret="alertmanager-main", source=cmo("assets/alertmanager/alertmanager.yaml",
                                                  "no alertmanagerConfigSelector: reads no AlertmanagerConfig"))
OPENSHIFT_ALERTMANAGER_USER_WORKLOAD = AlertRouter(
    "openshift-user-workload-monitoring", "user-workload",
    config_selector={"matchExpressions": USER_RULES},
    config_namespace_selector={"matchExpressions": NOT_CLUSTER_MONITORING},
    config_secret="alertmanager-user-workload",
    source=cmo("pkg/manifests/manifests.go", "AlertmanagerUserWorkload with alertmanager.enableAlertmanagerConfig; "
               "no alertmanagerConfigMatcherStrategy anywhere in CMO: OnNamespace"))

OPENSHIFT_UWM_CONFIG = {"namespacesWithoutLabelEnforcement": [PRODUCT_NAMESPACE],
                        "alertmanager": {"enabled": True, "enableAlertmanagerConfig": True}}
"""The `config.yaml` of ConfigMap openshift-user-workload-monitoring/user-workload-monitoring-config the
openshift install adds (CMO pkg/manifests/types.go UserWorkloadConfiguration)."""

OPENSHIFT_QUERY = QueryEndpoint(
    "https://thanos-querier.openshift-monitoring.svc:9091", auth="bearer",
    ca_configmap=("openshift-service-ca.crt", "service-ca.crt"), cluster_role="cluster-monitoring-view",
    authorization={"apiGroup": "monitoring.coreos.com", "resource": "prometheuses", "subresource": "api",
                   "namespace": "openshift-monitoring", "name": "k8s"},
    source=cmo("assets/thanos-querier/deployment.yaml; kube-rbac-proxy-web-secret.yaml; "
               "assets/cluster-monitoring-operator/cluster-role-view.yaml",
               "kube-rbac-proxy-web on 9091: SubjectAccessReview get prometheuses/api k8s; serving certificate "
               "from the service CA (service.beta.openshift.io/serving-cert-secret-name: thanos-querier-tls)"))

OPENSHIFT_KUEUE = KueueSettings(
    managed_jobs_namespace_selector={"matchLabels": {KUEUE_MANAGED_LABEL: "true"}},
    frameworks=("RayJob", "RayCluster", "PyTorchJob", "Pod", "Deployment", "StatefulSet"),
    source=(Source("openshift/kueue-operator", "pkg/configmap/configmap.go", KUEUE_OPERATOR_COMMIT,
                   "ManagedJobsNamespaceSelector, EnableClusterQueueResources: true"),
            Source("opendatahub-io/opendatahub-operator", "internal/controller/components/kueue/kueue_config.go",
                   ODH_COMMIT, "default frameworks of OpenShift AI's Kueue configuration")))

OPENSHIFT = Profile(
    name="openshift",
    description="OpenShift 4.18+ monitoring (cluster-monitoring-operator's platform and user-workload "
                "stacks), the Red Hat build of Kueue as its operator configures it, OpenShift AI's defaults",
    evaluators=(OPENSHIFT_PLATFORM_PROMETHEUS, *openshift_user_workload()),
    routers=(OPENSHIFT_ALERTMANAGER_USER_WORKLOAD, OPENSHIFT_ALERTMANAGER_MAIN),
    query=OPENSHIFT_QUERY,
    rule_labels={}, namespace_labels={}, tenant_namespace_labels={KUEUE_MANAGED_LABEL: "true"},
    alert_routing="alertmanager-config",
    kueue=OPENSHIFT_KUEUE,
    keda_namespace="openshift-keda",
    admin_settings=(
        AdminSetting("openshift-user-workload-monitoring/user-workload-monitoring-config config.yaml",
                     f"namespacesWithoutLabelEnforcement: [{PRODUCT_NAMESPACE}]",
                     "the product's rules read every namespace's GPU series; with enforcement they would see "
                     f"only namespace={PRODUCT_NAMESPACE!r} and GPUWorkloadIdle would never fire",
                     cmo("pkg/manifests/types.go", "UserWorkloadConfiguration.NamespacesWithoutLabelEnforcement")),
        AdminSetting("openshift-user-workload-monitoring/user-workload-monitoring-config config.yaml",
                     "alertmanager: {enabled: true, enableAlertmanagerConfig: true}",
                     "alertmanager-main reads no AlertmanagerConfig; the user-workload Alertmanager reads them "
                     "from user namespaces (OnNamespace)", cmo("pkg/manifests/manifests.go")),
        AdminSetting("cluster-monitoring-config (openshift-monitoring) config.yaml", "enableUserWorkload: true",
                     "user-workload monitoring (OpenShift AI's model serving metrics need it too)",
                     cmo("pkg/manifests/types.go", "ClusterMonitoringConfiguration.UserWorkloadEnabled")),
    ),
)

PROFILES: dict[str, Profile] = {p.name: p for p in (PLAIN, KUBE_PROMETHEUS_STACK, OPENSHIFT)}


def profile(name: str) -> Profile:
    """The profile called `name`, or a ValueError naming the choices."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"--monitoring: expected one of {', '.join(PROFILES)}, found {name!r}") from None
