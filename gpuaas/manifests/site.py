"""Everything a site changes, applied to the product's objects: ONE builder for the chart and the YAML.

`objects(values, namespace)` builds the objects for a values file (gpuaas/manifests/values.py): the
product (what `manifests/base` holds), the tenants' Kueue objects and the GPU node pool. The same
builders, run over a *symbolic* view of the values (`Values.symbolic()`), write the Helm chart's
templates (gpuaas/manifests/chart.py): where a builder reads a value, the chart gets the Helm
expression of that value, and where a part of the objects depends on a value (a tenant list, an
optional node pool), the chart gets the `range`/`if` around it. So the chart is not a second copy of
the objects: it is these builders' output with the values left open, and tests/artifacts/test_chart.py
shows `helm template` and this module build the same objects for the same values.

A value read in a builder goes through `Values`: `v["image"]["tag"]` is a view, `.raw` the value
(a number stays a number), `.text` its string form (for names, URLs and queries), `.default(other)`
Helm's `default`, and `.derive(python, helm)` a value computed from it, written twice side by side
(Python for the YAML, Go template for the chart; the equivalence test runs both).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JSON = dict[str, Any]

OPEN, CLOSE = "\u27e6", "\u27e7"
"""Marks of a Helm expression inside a symbolic build (mathematical white brackets: never in the YAML)."""
SENTINEL = re.compile(f"{OPEN}(\\d+){CLOSE}")


class SiteError(ValueError):
    """Values the chart refuses (`fail` in the templates; here before anything is built)."""


# -- the values, concrete or symbolic ------------------------------------------------------------
class Expressions:
    """The Helm expressions a symbolic build used, by number: `⟦n⟧` in the built objects is expression n."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def mark(self, kind: str, expr: str) -> str:
        """kind `raw`: the value itself (a number, a mapping), only as a whole YAML value; `text`: its string form."""
        self.items.append((kind, expr))
        return f"{OPEN}{len(self.items) - 1}{CLOSE}"


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Values:
    """A view of one value: concrete (`data`) when building YAML, symbolic (`expr`) when writing the chart."""

    def __init__(self, data: Any = None, expr: str | None = None, marks: Expressions | None = None) -> None:
        self.data = data
        self.expr = expr
        self.marks = marks

    @classmethod
    def symbolic(cls, marks: Expressions, root: str = "$.Values") -> Values:
        return cls(expr=root, marks=marks)

    @property
    def is_symbolic(self) -> bool:
        return self.expr is not None

    def __getitem__(self, key: str) -> Values:
        if self.expr is not None:
            path = f"{self.expr}.{key}" if _IDENTIFIER.match(key) else f'(index {self.expr} "{key}")'
            return Values(expr=path, marks=self.marks)
        return Values(data=self.data.get(key) if isinstance(self.data, Mapping) else None)

    def _mark(self, kind: str) -> str:
        assert self.marks is not None and self.expr is not None
        return self.marks.mark(kind, self.expr)

    @property
    def raw(self) -> Any:
        """The value as it is (a number, a boolean, a mapping): a whole YAML value in the chart."""
        return self._mark("raw") if self.expr is not None else copy.deepcopy(self.data)

    @property
    def text(self) -> str:
        """The value as text, as Helm's `toString` writes it (8, not 8.0)."""
        if self.expr is not None:
            return self._mark("text")
        return _to_string(self.data)

    def literal(self, data: Any) -> Values:
        """A constant beside this view (for `.default`): the data here, `fromJson` of it in the chart."""
        if self.expr is not None:
            text = json.dumps(data, separators=(",", ":"))
            assert "`" not in text
            return Values(expr=f"(fromJson `{text}`)", marks=self.marks)
        return Values(data=copy.deepcopy(data))

    def default(self, other: Values) -> Values:
        """Helm's `default`: this value unless it is empty (absent, "", 0, false, empty list or map)."""
        if self.expr is not None:
            return Values(expr=f"({self.expr} | default {other.expr})", marks=self.marks)
        return self if self.data else other

    def derive(self, python: Callable[[Any], Any], helm: str) -> Values:
        """A value computed from this one: `python(data)` here, the Go template `helm` (`{}` = this value) in the chart."""
        if self.expr is not None:
            return Values(expr="(" + helm.replace("{}", self.expr) + ")", marks=self.marks)
        return Values(data=python(self.data))

    def merged_into(self, fixed: Mapping[str, Any]) -> Any:
        """`{**fixed, **value}` (the value's keys win), as a whole YAML value."""
        if self.expr is not None:
            assert self.marks is not None
            if any(isinstance(v, str) and SENTINEL.fullmatch(v) for v in fixed.values()):
                # a fixed value that is itself a value of the chart (a tenant's name): a `dict` of expressions
                def item(value: Any) -> str:
                    whole = SENTINEL.fullmatch(value) if isinstance(value, str) else None
                    if whole:
                        kind, expr = self.marks.items[int(whole.group(1))]
                        return f"(toString {expr})" if kind == "text" else expr
                    assert not (isinstance(value, str) and OPEN in value), value
                    return json.dumps(value)
                base = "(dict " + " ".join(f"{json.dumps(k)} {item(v)}" for k, v in fixed.items()) + ")"
            else:
                literal = json.dumps(fixed, separators=(",", ":"))
                assert "`" not in literal
                base = f"(fromJson `{literal}`)"
            return self.marks.mark("raw", f"(mustMergeOverwrite {base} (deepCopy ({self.expr} | default dict)))")
        return {**copy.deepcopy(dict(fixed)), **copy.deepcopy(dict(self.data or {}))}


def _to_string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value is None else str(value)


# -- the parts of the objects ------------------------------------------------------------------------
@dataclass(frozen=True)
class Condition:
    """Whether a part is built: `python(values)` here, the Go template condition `helm` in the chart."""

    python: Callable[[Values], bool]
    helm: str


@dataclass(frozen=True)
class Part:
    """Objects built together: one template file of the chart (`templates/<name>.yaml`).

    `each`: a list value the part is built once per item of (`range` in the chart), the item given to
    `build` as its second argument; `when`: a condition on the whole part (`if` in the chart)."""

    name: str
    build: Callable[..., list[JSON]]
    when: Condition | None = None
    each: str | None = None
    item_when: Condition | None = None


def _get(values: Values, dotted: str) -> Values:
    for key in dotted.split("."):
        values = values[key]
    return values


def build_part(part: Part, values: Values, namespace: Values) -> list[JSON]:
    """The part's objects for concrete values (the chart's `if` and `range` evaluated here)."""
    if part.when and not part.when.python(values):
        return []
    if part.each is None:
        return part.build(values, namespace)
    out: list[JSON] = []
    for item in _get(values, part.each).data or []:
        item_values = Values(data=item)
        if part.item_when and not part.item_when.python(item_values):
            continue
        out += part.build(values, namespace, item_values)
    return out


def each_mapping(node: Any) -> Iterator[JSON]:
    """Every mapping in an object, depth first (containers and env entries sit at different depths)."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from each_mapping(value)
    elif isinstance(node, list):
        for value in node:
            yield from each_mapping(value)


# -- what the chart refuses ------------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    """Settings the schema accepts one by one but that cannot work together: refused in one line."""

    refused: Condition
    message: str


CHECKS: tuple[Check, ...] = (
    Check(Condition(lambda v: v["monitoring"]["platform"].data == "kube-prometheus-stack"
                    and not (v["monitoring"]["ruleLabels"].data or {}).get("release"),
                    'and (eq $.Values.monitoring.platform "kube-prometheus-stack") '
                    '(not (index ($.Values.monitoring.ruleLabels | default dict) "release"))'),
          "monitoring.ruleLabels: expected a `release` label with monitoring.platform kube-prometheus-stack (the "
          "chart's Prometheus loads only rules labelled release: <its release name>), found none; add "
          "--set monitoring.ruleLabels.release=YOUR-RELEASE or start from examples/values/kube-prometheus-stack.yaml"),
    Check(Condition(lambda v: v["monitoring"]["platform"].data == "openshift"
                    and v["prometheus"]["auth"]["type"].data != "serviceAccountToken",
                    'and (eq $.Values.monitoring.platform "openshift") '
                    '(ne $.Values.prometheus.auth.type "serviceAccountToken")'),
          "prometheus.auth.type: expected serviceAccountToken with monitoring.platform openshift (thanos-querier "
          "answers 401 without a token), found none; start from examples/values/openshift.yaml"),
    Check(Condition(lambda v: bool((v["prometheus"]["ca"].data or {}).get("configMap"))
                    and v["prometheus"]["auth"]["type"].data != "serviceAccountToken",
                    '(and ($.Values.prometheus.ca | default dict).configMap '
                    '(ne $.Values.prometheus.auth.type "serviceAccountToken"))'),
          "prometheus.ca: a CA is used with prometheus.auth.type serviceAccountToken only (KEDA takes it from "
          "the product's ClusterTriggerAuthentication, which carries the token), found auth none; set "
          "prometheus.auth.type=serviceAccountToken or remove prometheus.ca"),
)


def check(values: Values) -> None:
    for item in CHECKS:
        if item.refused.python(values):
            raise SiteError(item.message)


# -- the parts ----------------------------------------------------------------------------------
STEP_IMAGE = "gpuaas-step"
"""The image name the rendered templates carry (workflows/reaction.py IMAGE); kustomize's `images:` or the
chart's `image` values replace it."""
PROMETHEUS_CONFIGMAP = "gpuaas-prometheus"
"""Every step's environment (envFrom, workflows/reaction.py): where and how the steps query Prometheus, and the
authentication on-admitted writes into the ScaledObjects it makes."""
CA_CONFIGMAP_DEFAULT = "gpuaas-prometheus-ca"
"""The CA volume's ConfigMap when `prometheus.ca` is unset (optional: absent, nothing is mounted)."""
CA_DIR = "/etc/gpuaas/prometheus-ca"
TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
"""The step pod's own ServiceAccount token (`prometheus.auth.type: serviceAccountToken`)."""
KEDA_ACCOUNT = "gpuaas-keda-prometheus"
"""The ServiceAccount (in `keda.namespace`) whose token KEDA's scalers send, and its token Secret."""
KEDA_AUTHENTICATION = "gpuaas-prometheus"
"""The ClusterTriggerAuthentication of the product's ScaledObjects (on-admitted's and the node pool's)."""


def _in_namespace(obj: JSON, namespace: str) -> JSON:
    """The object with `metadata.namespace` set, placed right after the name (reads like kubectl's output)."""
    metadata = obj["metadata"]
    obj["metadata"] = {"name": metadata["name"], "namespace": namespace,
                       **{k: v for k, v in metadata.items() if k not in ("name", "namespace")}}
    return obj


def _namespace(v: Values, ns: Values) -> list[JSON]:
    from gpuaas.manifests import platform
    from gpuaas.manifests.tenants import KEEP

    obj = platform.namespace(ns.text)
    obj["metadata"]["annotations"] = dict(KEEP)  # it holds the Secrets the admin made: never deleted by uninstall
    return [obj]


def _rbac(v: Values, ns: Values) -> list[JSON]:
    from gpuaas.manifests import platform, rbac

    return [*platform.service_accounts(ns.text), *rbac.objects(ns.text)]


def _event_bus(v: Values, ns: Values) -> list[JSON]:
    from gpuaas.manifests import platform

    bus = platform.event_bus(ns.text)
    spec = v["eventBus"]["spec"]
    bus["spec"] = spec.default(spec.literal(platform.event_bus("x")["spec"])).raw
    return [bus]


def policy_values(v: Values) -> Values:
    """The values' `policy`, or the steps' documented example when it is empty (values.yaml says why:
    Helm merges a values file's mapping into the default's key by key, so a default policy with an example
    tenant would leak into every site's policy)."""
    import yaml

    from steps.policy import default_policy_text

    policy = v["policy"]
    return policy.default(policy.literal(yaml.safe_load(default_policy_text())))


POLICY_HEADER = ("# gpuaas policy (docs/reactions.md#the-policy-configmap), from the values' policy: change it "
                 "there (helm upgrade) or in your kustomize site's policy.yaml.")


def policy_document(policy: Any) -> str:
    """The ConfigMap's policy.yaml for a values' `policy` (the chart: POLICY_HEADER + toYaml)."""
    import yaml

    return POLICY_HEADER + "\n" + yaml.safe_dump(policy or {}, sort_keys=False)


def _policy(v: Values, ns: Values) -> list[JSON]:
    from gpuaas.manifests import platform

    text = policy_values(v).derive(policy_document, f'print `{POLICY_HEADER}` "\\n" (toYaml ({{}} | default dict))')
    return [platform.policy_configmap(ns.text, document=text.text)]


def _rules(v: Values, ns: Values) -> list[JSON]:
    from gpuaas.manifests import observability as obs

    window = policy_values(v).derive(lambda policy: obs.duration_text(obs.shortest_window_seconds(policy)),
                                'include "gpuaas.ruleWindow" {}')
    rule = obs.prometheus_rule(ns.text, window=window.text)
    rule["metadata"]["labels"] = v["monitoring"]["ruleLabels"].merged_into(rule["metadata"]["labels"])
    return [rule, obs.dashboard_configmap(ns.text)]


def _alert_routing(v: Values, ns: Values) -> list[JSON]:
    from gpuaas.manifests import observability as obs

    webhook, admins = v["secrets"]["webhookToken"], v["secrets"]["adminAlerts"]
    where = v["monitoring"]["alertRouting"]["namespace"].default(ns)
    return [obs.alertmanager_config_object(where.text, secret_name=webhook["name"].text, secret_key=webhook["key"].text,
                                           admins_secret=admins["name"].text, admins_secret_key=admins["key"].text,
                                           webhook_namespace=ns.text)]


def pin_step_image(objects: list[JSON], image: str, pull_policy: Any, ca_configmap: str) -> None:
    """The step image and the CA volume's ConfigMap in rendered WorkflowTemplates (in place)."""
    from workflows.reaction import PROMETHEUS_CA_VOLUME

    for node in each_mapping(objects):
        if node.get("image") == STEP_IMAGE:
            node["image"] = image
            node["imagePullPolicy"] = pull_policy
        if node.get("name") == PROMETHEUS_CA_VOLUME and "configMap" in node:
            node["configMap"]["name"] = ca_configmap


def prometheus_settings(prometheus: Any) -> dict[str, str]:
    """ConfigMap gpuaas-prometheus's data for the values' `prometheus` (the chart: "gpuaas.prometheusSettings")."""
    out = {"GPUAAS_PROMETHEUS_URL": _to_string(prometheus["url"])}
    if (prometheus.get("auth") or {}).get("type") == "serviceAccountToken":
        out["GPUAAS_PROMETHEUS_TOKEN_FILE"] = TOKEN_FILE
        out["GPUAAS_KEDA_AUTHENTICATION"] = f"ClusterTriggerAuthentication/{KEDA_AUTHENTICATION}"
    ca = prometheus.get("ca") or {}
    if ca.get("configMap"):
        out["GPUAAS_PROMETHEUS_CA_FILE"] = f"{CA_DIR}/{ca['key']}"
    return out


def _prometheus(v: Values, ns: Values) -> list[JSON]:
    from gpuaas.manifests import platform

    settings = v["prometheus"].derive(prometheus_settings, 'include "gpuaas.prometheusSettings" {} | fromJson')
    return [platform.prometheus_configmap(ns.text, settings=settings.raw)]


def _prometheus_access(v: Values, ns: Values) -> list[JSON]:
    """`prometheus.auth.type: serviceAccountToken`: the steps' account and KEDA's may query (`clusterRole`, the
    role the endpoint's proxy checks), KEDA's token, and the ClusterTriggerAuthentication the ScaledObjects name."""
    from gpuaas.manifests.platform import labels

    keda_namespace = v["keda"]["namespace"].text
    ca = v["prometheus"]["ca"]
    authentication: JSON = {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ClusterTriggerAuthentication",
        "metadata": {"name": KEDA_AUTHENTICATION, "labels": labels("prometheus")},
        "spec": {"secretTargetRef": [{"parameter": "bearerToken", "name": KEDA_ACCOUNT, "key": "token"}],
                 "configMapTargetRef": ca.derive(
                     lambda c: [{"parameter": "ca", "name": c["configMap"], "key": c["key"]}]
                     if (c or {}).get("configMap") else [],
                     '{} | default dict | include "gpuaas.caTargetRef" | fromJsonArray').raw}}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": KEDA_ACCOUNT, "namespace": keda_namespace, "labels": labels("prometheus")}},
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
         "metadata": {"name": KEDA_ACCOUNT, "namespace": keda_namespace, "labels": labels("prometheus"),
                      "annotations": {"kubernetes.io/service-account.name": KEDA_ACCOUNT}}},
        authentication,
    ]


def _query_bindings(v: Values, ns: Values) -> list[JSON]:
    """`prometheus.auth.clusterRole` for the steps' ServiceAccount and KEDA's."""
    from gpuaas.manifests.platform import STEPS_ACCOUNT

    return [_query_binding(v, name, account, namespace) for name, account, namespace in (
        ("gpuaas-steps-query-prometheus", STEPS_ACCOUNT, ns.text),
        ("gpuaas-keda-query-prometheus", KEDA_ACCOUNT, v["keda"]["namespace"].text))]


def _query_binding(v: Values, name: str, account: str, namespace: str) -> JSON:
    from gpuaas.manifests.platform import labels

    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": labels("prometheus"),
                         "annotations": {"gpuaas.io/why": "the Prometheus endpoint's proxy asks the apiserver whether "
                                         "the caller may query (prometheus.auth.clusterRole; OpenShift's "
                                         "thanos-querier: cluster-monitoring-view)"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": v["prometheus"]["auth"]["clusterRole"].text},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]}


def _workflows(v: Values, ns: Values, pin: bool = True) -> list[JSON]:
    import workflows

    out = [_in_namespace(template, ns.text) for template in workflows.rendered().values()]
    image = v["image"]
    if pin:
        ca = v["prometheus"]["ca"]["configMap"].derive(lambda name: name or CA_CONFIGMAP_DEFAULT,
                                                       f'{{}} | default "{CA_CONFIGMAP_DEFAULT}"')
        pin_step_image(out, f"{image['repository'].text}:{image['tag'].text}", image["pullPolicy"].raw, ca.text)
    return out


def _crons(v: Values, ns: Values) -> list[JSON]:
    """The catch-up sweep's CronWorkflow (workflows/sweep.py) with the values' schedule and grace."""
    from workflows import sweep

    settings = v["sweep"]
    return [_in_namespace(sweep.cron_workflow(settings["schedule"].text, settings["grace"].text), ns.text)]


INSTALL_HOOK = "gpuaas-install-hook"
"""The post-install/post-upgrade hook's Job, ServiceAccount, Role and RoleBinding (steps/install_hook.py)."""
HOOK_PLACEMENT = {"nodeSelector": "dict", "tolerations": "list", "affinity": "dict", "imagePullSecrets": "list"}
"""What the hook's pod takes from `events.podTemplate` (where the product's own pods may run and pull from), and
each key's empty value."""


def _hook_annotations(weight: int) -> dict[str, str]:
    """Helm runs the hook after every object of the release exists, on install and on upgrade; deletes it once
    it succeeded (a failed Job stays, for its log, until the next install or upgrade) and prints a failure's log."""
    return {"helm.sh/hook": "post-install,post-upgrade", "helm.sh/hook-weight": str(weight),
            "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded",
            **({"helm.sh/hook-output-log-policy": "hook-failed"} if weight >= 0 else {})}


def _install_hook(v: Values, ns: Values) -> list[JSON]:
    """The Helm hook that has the workflow-controller validate the CronWorkflows again once their WorkflowTemplates
    exist (Helm creates CronWorkflows first: steps/install_hook.py says why). Helm only: kustomize has no hooks, and
    gpuaas.cluster.install orders its own apply."""
    import workflows
    from gpuaas.manifests.platform import labels
    from workflows.reaction import restricted_security_context

    crons = workflows.cron_workflows()
    templates = sorted({c["spec"]["workflowSpec"]["workflowTemplateRef"]["name"] for c in crons.values()})
    meta = {"name": INSTALL_HOOK, "namespace": ns.text, "labels": labels("install-hook")}
    rbac = "rbac.authorization.k8s.io"
    why = {"gpuaas.io/rule-0": "steps/install_hook.py: reads each of the chart's CronWorkflows (get) and annotates it "
                               "(patch), which has the workflow-controller validate it again",
           "gpuaas.io/rule-1": "steps/install_hook.py: waits for the WorkflowTemplate each CronWorkflow runs and reads "
                               "its resourceVersion (get)"}
    image = v["image"]
    template = v["events"]["podTemplate"]
    placement = {key: template.derive(lambda t, key=key, empty=empty: (t or {}).get(key) or ({} if empty == "dict" else []),
                                      f'get ({{}} | default dict) "{key}" | default {empty}').raw
                 for key, empty in HOOK_PLACEMENT.items()}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {**meta, "annotations": _hook_annotations(-5)}},
        {"apiVersion": f"{rbac}/v1", "kind": "Role",
         "metadata": {**meta, "annotations": {**_hook_annotations(-5), **why}},
         "rules": [{"apiGroups": ["argoproj.io"], "resources": ["cronworkflows"], "verbs": ["get", "patch"],
                    "resourceNames": sorted(crons)},
                   {"apiGroups": ["argoproj.io"], "resources": ["workflowtemplates"], "verbs": ["get"],
                    "resourceNames": templates}]},
        {"apiVersion": f"{rbac}/v1", "kind": "RoleBinding", "metadata": {**meta, "annotations": _hook_annotations(-5)},
         "roleRef": {"apiGroup": rbac, "kind": "Role", "name": INSTALL_HOOK},
         "subjects": [{"kind": "ServiceAccount", "name": INSTALL_HOOK, "namespace": ns.text}]},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {**meta, "annotations": _hook_annotations(0)},
         "spec": {"backoffLimit": 2, "activeDeadlineSeconds": 300, "template": {
             "metadata": {"labels": labels("install-hook")},
             "spec": {"serviceAccountName": INSTALL_HOOK, "restartPolicy": "Never", **placement,
                      "containers": [{
                          "name": "revalidate-cronworkflows",
                          "image": f"{image['repository'].text}:{image['tag'].text}",
                          "imagePullPolicy": image["pullPolicy"].raw,
                          "command": ["python", "-m", "steps.install_hook", *sorted(crons)],
                          "env": [{"name": "GPUAAS_NAMESPACE",
                                   "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
                          "securityContext": restricted_security_context().model_dump(by_alias=True, exclude_none=True),
                          "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                      }]}}}},
    ]


def _events(v: Values, ns: Values) -> list[JSON]:
    import sensors

    out = []
    version = v["kueue"]["workloadVersion"]
    for obj in [*sensors.all_event_sources(version.text), *sensors.all_sensors()]:
        obj = _in_namespace(obj, ns.text)
        obj["spec"]["template"] = v["events"]["podTemplate"].merged_into(obj["spec"]["template"])
        for webhook in (obj["spec"].get("webhook") or {}).values():
            if "authSecret" in webhook:
                secret = v["secrets"]["webhookToken"]
                webhook["authSecret"] = {"name": secret["name"].text, "key": secret["key"].text}
        out.append(obj)
    return out


def _flavor(v: Values, ns: Values) -> list[JSON]:
    from gpuaas.manifests import tenants

    flavor = v["kueue"]["flavor"]
    return [tenants.resource_flavor(flavor["name"].text, flavor["nodeLabels"].raw, flavor["tolerations"].raw)]


def _cohort(v: Values, ns: Values) -> list[JSON]:
    from gpuaas.manifests import tenants

    return [tenants.cohort(v["kueue"]["cohort"]["name"].text)]


def _tenant_namespace(v: Values, ns: Values, tenant: Values) -> list[JSON]:
    from gpuaas.manifests import tenants

    obj = tenants.namespace(tenant["namespace"].default(tenant["name"]).text, tenant["name"].text)
    obj["metadata"]["labels"] = v["kueue"]["namespaceLabels"].merged_into(obj["metadata"]["labels"])
    return [obj]


def _cluster_queue(v: Values, ns: Values, tenant: Values) -> list[JSON]:
    from gpuaas.manifests import tenants

    quota = tenant["quota"]
    return [tenants.cluster_queue(
        tenant["name"].text, tenant["cohort"].default(v["kueue"]["cohort"]["name"]).text,
        tenant["flavor"].default(v["kueue"]["flavor"]["name"]).text,
        quota.derive(sorted, "keys {} | sortAlpha").raw,
        quota.derive(tenants.quota_resources, 'include "gpuaas.quotaResources" {} | fromJsonArray').raw)]


def _local_queue(v: Values, ns: Values, tenant: Values) -> list[JSON]:
    from gpuaas.manifests import tenants

    name = tenant["name"]
    return [tenants.local_queue(tenant["localQueue"].default(name).text, tenant["namespace"].default(name).text,
                                name.text)]


def _pool(v: Values, authenticated: bool) -> list[JSON]:
    from gpuaas.manifests import node_pool

    pool = v["nodePool"]
    settings = node_pool.NodePool(
        api_version=pool["kind"].derive(lambda kind: values_module().NODE_POOL_KINDS[kind],
                                        'ternary "machine.openshift.io/v1beta1" "cluster.x-k8s.io/v1beta1" '
                                        '(eq {} "MachineSet")').text,
        kind=pool["kind"].text, name=pool["name"].text, namespace=pool["namespace"].text,
        prometheus_url=pool["prometheus"]["url"].default(v["prometheus"]["url"]).text,
        gpus_per_node=pool["gpusPerNode"].text, max_nodes=pool["maxNodes"].raw,
        pool_label=pool["label"].text,
        label_series=pool["label"].derive(node_pool.label_series,
                                          'print "label_" (regexReplaceAll "[^a-zA-Z0-9_]" {} "_")').text,
        cluster_queues=pool["clusterQueues"].text,
        authentication=KEDA_AUTHENTICATION if authenticated else None)
    return [node_pool.scaled_object(settings)]


def values_module() -> Any:
    from gpuaas.manifests import values

    return values


_CREATE_NAMESPACE = Condition(lambda v: v["namespace"]["create"].data is True, "$.Values.namespace.create")
_ROUTING = Condition(lambda v: v["monitoring"]["alertRouting"]["mode"].data == "alertmanagerConfig",
                     'eq $.Values.monitoring.alertRouting.mode "alertmanagerConfig"')
_FLAVOR = Condition(lambda v: bool(v["kueue"]["flavor"]["create"].data and v["tenants"].data),
                    "and $.Values.kueue.flavor.create $.Values.tenants")
_COHORT = Condition(lambda v: bool(v["kueue"]["cohort"]["create"].data and v["tenants"].data),
                    "and $.Values.kueue.cohort.create $.Values.tenants")
_TENANT_NAMESPACE = Condition(lambda t: t["createNamespace"].data is not False,
                              'ne (toJson $item.createNamespace) "false"')
_TOKEN = Condition(lambda v: v["prometheus"]["auth"]["type"].data == "serviceAccountToken",
                   'eq $.Values.prometheus.auth.type "serviceAccountToken"')
_BOUND = Condition(lambda v: _TOKEN.python(v) and bool(v["prometheus"]["auth"]["clusterRole"].data),
                   f"and ({_TOKEN.helm}) $.Values.prometheus.auth.clusterRole")
_POOL = Condition(lambda v: v["nodePool"]["enabled"].data is True and not _TOKEN.python(v),
                  f"and $.Values.nodePool.enabled (not ({_TOKEN.helm}))")
_POOL_AUTH = Condition(lambda v: v["nodePool"]["enabled"].data is True and _TOKEN.python(v),
                       f"and $.Values.nodePool.enabled ({_TOKEN.helm})")

PRODUCT: tuple[Part, ...] = (
    Part("namespace", _namespace, when=_CREATE_NAMESPACE),
    Part("rbac", _rbac),
    Part("eventbus", _event_bus),
    Part("policy", _policy),
    Part("prometheus", _prometheus),
    Part("prometheus", _prometheus_access, when=_TOKEN),
    Part("prometheus", _query_bindings, when=_BOUND),
    Part("observability", _rules),
    Part("alert-routing", _alert_routing, when=_ROUTING),
    Part("workflowtemplates", _workflows),
    Part("cronworkflows", _crons),
    Part("events", _events),
)
"""What manifests/base holds (the namespace, with namespace.create), in the base's order."""
HOOKS: tuple[Part, ...] = (Part("install-hook", _install_hook),)
"""Helm's alone (kustomize has no hooks; docs/install.md says what a kustomize install runs instead)."""
TENANTS: tuple[Part, ...] = (
    Part("tenants", _flavor, when=_FLAVOR),
    Part("tenants", _cohort, when=_COHORT),
    Part("tenants", _tenant_namespace, each="tenants", item_when=_TENANT_NAMESPACE),
    Part("tenants", _cluster_queue, each="tenants"),
    Part("tenants", _local_queue, each="tenants"),
)
NODE_POOL: tuple[Part, ...] = (
    Part("node-pool", lambda v, ns: _pool(v, False), when=_POOL),
    Part("node-pool", lambda v, ns: _pool(v, True), when=_POOL_AUTH),
)
PARTS: tuple[Part, ...] = (*PRODUCT, *HOOKS, *TENANTS, *NODE_POOL)


def _build(parts: tuple[Part, ...], values: JSON, namespace: str) -> list[JSON]:
    view = Values(data=values)
    check(view)
    out: list[JSON] = []
    for part in parts:
        out += build_part(part, view, Values(data=namespace))
    return out


def objects(values: JSON, namespace: str = "gpuaas", hooks: bool = True) -> list[JSON]:
    """Every object the chart installs for these values in this release namespace (`helm template`; without
    `hooks`, `helm template --no-hooks`: what a kustomize build of the same values holds)."""
    return _build(PARTS if hooks else tuple(p for p in PARTS if p not in HOOKS), values, namespace)


def product_objects(values: JSON, namespace: str = "gpuaas") -> list[JSON]:
    return _build(PRODUCT, values, namespace)


def tenant_objects(values: JSON) -> list[JSON]:
    return _build(TENANTS, values, "gpuaas")


def node_pool_objects(values: JSON) -> list[JSON]:
    return _build(NODE_POOL, values, "gpuaas")


def base_objects(values: JSON, namespace: str = "gpuaas") -> dict[str, list[JSON]]:
    """manifests/base: the product for these values with the step image left as `gpuaas-step` (kustomize's
    `images:` pins it), by part name; the Namespace always (kubectl apply merges into an existing one)."""
    view = Values(data=values)
    check(view)
    ns = Values(data=namespace)
    out: dict[str, list[JSON]] = {}
    for part in PRODUCT:
        if part.build is _workflows:
            built = _workflows(view, ns, pin=False)
        elif part.when is _CREATE_NAMESPACE:
            built = _namespace(view, ns)
        else:
            built = build_part(part, view, ns)
        out[part.name] = out.get(part.name, []) + built
    return out


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "values"
"""Example values files: kubernetes.yaml and openshift.yaml (the overlays), site.yaml (a kustomize site)."""


def example_values(name: str) -> JSON:
    from gpuaas.manifests import values

    return values.load(EXAMPLES / f"{name}.yaml")
