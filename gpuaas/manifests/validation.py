"""Strict validation of everything gpuaas renders: unknown keys are errors, and references must hold.

Why strict: the Argo CRDs preserve unknown fields and structural CRDs prune them silently, so a
misspelt or misplaced key (hera's nested `groupVersionResource`, a `webhookContext` block) is
accepted by the API server and ignored by the controller. A sensor that never fires looks exactly
like a quiet cluster. So every object is checked against the upstream schemas and CRDs of the Go
modules pinned under `stack/` (`gpuaas.upstream`: the same versions the real-stack tier runs), with
closed object schemas:

- Argo Workflows / Argo Events kinds: the generated JSON Schemas, with `additionalProperties: false`
  injected into every definition that lists `properties`, and the quirks PROVENANCE.md names allowed
  for (IntOrString typed as string only; `WebhookContext.url` and `ResourceEventSource.namespace`
  marked required although the controllers default them). Every Workflow embedded in a Sensor's
  `argoWorkflow` trigger is validated as a Workflow too.
- Kueue, KEDA, Prometheus Operator, KubeRay: the CRD's `openAPIV3Schema` of the served version named
  by `apiVersion`, closed the same way (except where the CRD says `x-kubernetes-preserve-unknown-fields`).
- Core kinds: `kubernetes-validate` in strict mode.

`cross_reference_errors(objects)` checks what no schema can: each trigger's WorkflowTemplate exists and
declares every parameter it is given, each dependency names a real EventSource event, each trigger
condition names a dependency, and each service account the objects run as exists.

    from gpuaas.manifests.validation import validate_all
    problems = validate_all(objects)      # [] when all is well; each problem names kind/name and path
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from gpuaas.upstream import upstream_file

JSON = dict[str, Any]

ARGO_WORKFLOW_KINDS = {"Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow"}
ARGO_EVENTS_KINDS = {"Sensor", "EventSource", "EventBus"}
KUEUE = "sigs.k8s.io/kueue"
KEDA = "github.com/kedacore/keda/v2"
PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator"
PLATFORM_ROLES = frozenset({"cluster-monitoring-view"})
"""ClusterRoles a platform ships that rendered bindings may name (OpenShift's, for thanos-querier)."""
KUBERAY = "github.com/ray-project/kuberay/ray-operator"
ARGO_WORKFLOWS = "github.com/argoproj/argo-workflows/v4"
ARGO_EVENTS = "github.com/argoproj/argo-events"
ARGO_SCHEMAS: dict[str, tuple[str, str]] = {
    # schema name -> (pinned module, path of its generated strict JSON Schema there)
    "argo-workflows": (ARGO_WORKFLOWS, "api/jsonschema/schema.json"),
    "argo-events": (ARGO_EVENTS, "api/jsonschema/schema.json"),
}
CRD_FILES: dict[tuple[str, str], tuple[str, str]] = {
    # (group, kind) -> (pinned module, path of the CRD there)
    ("kueue.x-k8s.io", "ClusterQueue"): (KUEUE, "config/components/crd/bases/kueue.x-k8s.io_clusterqueues.yaml"),
    ("kueue.x-k8s.io", "LocalQueue"): (KUEUE, "config/components/crd/bases/kueue.x-k8s.io_localqueues.yaml"),
    ("kueue.x-k8s.io", "ResourceFlavor"): (KUEUE, "config/components/crd/bases/kueue.x-k8s.io_resourceflavors.yaml"),
    ("kueue.x-k8s.io", "Cohort"): (KUEUE, "config/components/crd/bases/kueue.x-k8s.io_cohorts.yaml"),
    ("kueue.x-k8s.io", "Workload"): (KUEUE, "config/components/crd/bases/kueue.x-k8s.io_workloads.yaml"),
    ("kueue.x-k8s.io", "AdmissionCheck"): (KUEUE, "config/components/crd/bases/kueue.x-k8s.io_admissionchecks.yaml"),
    ("kueue.x-k8s.io", "WorkloadPriorityClass"):
        (KUEUE, "config/components/crd/bases/kueue.x-k8s.io_workloadpriorityclasses.yaml"),
    ("keda.sh", "ScaledObject"): (KEDA, "config/crd/bases/keda.sh_scaledobjects.yaml"),
    ("keda.sh", "TriggerAuthentication"): (KEDA, "config/crd/bases/keda.sh_triggerauthentications.yaml"),
    ("keda.sh", "ClusterTriggerAuthentication"): (KEDA, "config/crd/bases/keda.sh_clustertriggerauthentications.yaml"),
    ("monitoring.coreos.com", "PrometheusRule"):
        (PROMETHEUS_OPERATOR, "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml"),
    ("monitoring.coreos.com", "AlertmanagerConfig"):
        (PROMETHEUS_OPERATOR, "example/prometheus-operator-crd/monitoring.coreos.com_alertmanagerconfigs.yaml"),
    ("monitoring.coreos.com", "ServiceMonitor"):
        (PROMETHEUS_OPERATOR, "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"),
    ("monitoring.coreos.com", "PodMonitor"):
        (PROMETHEUS_OPERATOR, "example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml"),
    ("ray.io", "RayCluster"): (KUBERAY, "config/crd/bases/ray.io_rayclusters.yaml"),
    ("ray.io", "RayJob"): (KUBERAY, "config/crd/bases/ray.io_rayjobs.yaml"),
}
KUBERNETES_VERSION = "1.33"
"""Core kinds are checked against this Kubernetes version's schemas (kubernetes-validate)."""

# Fields the generated Argo schemas mark required although the controllers default them (PROVENANCE.md).
_DEFAULTED_REQUIRED = {
    "io.argoproj.events.v1alpha1.WebhookContext": {"url"},
    "io.argoproj.events.v1alpha1.WebhookEventSource": {"url"},  # the webhook EventSource inlines the context
    "io.argoproj.events.v1alpha1.ResourceEventSource": {"namespace"},
}


def schema_file(name: str) -> Path:
    """The strict JSON Schema `argo-workflows` or `argo-events`, from the pinned upstream module."""
    module, path = ARGO_SCHEMAS[name]
    return upstream_file(module, path)


def crd_file(group: str, kind: str) -> Path:
    """The upstream CRD of a kind gpuaas renders or reads, from the pinned upstream module."""
    module, path = CRD_FILES[(group, kind)]
    return upstream_file(module, path)


def _closed(schema: Any) -> Any:
    """Close every object schema that lists properties (unknown keys become errors)."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


@functools.cache
def _argo_schema(name: str) -> JSON:
    schema = json.loads(schema_file(name).read_text())
    definitions = schema["definitions"]
    for definition, fields in _DEFAULTED_REQUIRED.items():
        if definition in definitions and "required" in definitions[definition]:
            definitions[definition]["required"] = [f for f in definitions[definition]["required"]
                                                   if f not in fields]
    # Kubernetes serialises IntOrString as either; the generated schema allows only strings.
    definitions["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = {"type": ["string", "integer"]}
    return _closed(schema)


def _argo_definition(kind: str) -> tuple[str, str]:
    if kind in ARGO_WORKFLOW_KINDS:
        return "argo-workflows", f"io.argoproj.workflow.v1alpha1.{kind}"
    return "argo-events", f"io.argoproj.events.v1alpha1.{kind}"


class _CrdLoader(yaml.SafeLoader):
    """PyYAML reads a bare `=` (a Kueue enum value) as YAML 1.1's "value" tag; take it as a scalar."""


_CrdLoader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


@functools.cache
def _crd_schema(group: str, kind: str, version: str) -> JSON | None:
    with crd_file(group, kind).open() as handle:
        crd = yaml.load(handle, Loader=_CrdLoader)
    for served in crd["spec"]["versions"]:
        if served["name"] == version and served.get("served", True):
            schema = copy.deepcopy(served["schema"]["openAPIV3Schema"])
            # The API server validates metadata itself; the CRD's `metadata: {type: object}` says nothing.
            schema.get("properties", {}).pop("metadata", None)
            closed = _closed(schema)
            closed.setdefault("properties", {})["metadata"] = {"type": "object"}
            return closed
    return None


def _format(error: Any) -> str:
    where = "/".join(str(p) for p in error.absolute_path) or "(top)"
    return f"{where}: {error.message}"


def _schema_errors(schema: JSON, instance: JSON) -> list[str]:
    import jsonschema

    validator = jsonschema.Draft7Validator(schema)
    return sorted(_format(e) for e in validator.iter_errors(instance))


def _label(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or "?"
    return f"{obj.get('kind', '?')} {name}"


def schema_errors(obj: JSON) -> list[str]:
    """Problems of one object against its upstream schema, each prefixed with `Kind name: path:`."""
    kind = str(obj.get("kind", ""))
    api_version = str(obj.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    label = _label(obj)
    if kind in ARGO_WORKFLOW_KINDS | ARGO_EVENTS_KINDS:
        filename, definition = _argo_definition(kind)
        schema = _argo_schema(filename)
        wrapper = {"$ref": f"#/definitions/{definition}", "definitions": schema["definitions"]}
        problems = [f"{label}: {p}" for p in _schema_errors(wrapper, obj)]
        if kind == "Sensor":
            for index, workflow in _trigger_workflows(obj):
                problems += [f"{label}: spec.triggers[{index}] embedded {p}" for p in schema_errors(workflow)]
        return problems
    if (group, kind) in CRD_FILES:
        crd_schema = _crd_schema(group, kind, version)
        if crd_schema is None:
            module, path = CRD_FILES[(group, kind)]
            return [(f"{label}: apiVersion {api_version}: not a served version of the {kind} CRD in "
                    f"{module} {path}")]
        return [f"{label}: {p}" for p in _schema_errors(crd_schema, obj)]
    return [f"{label}: {p}" for p in _core_errors(obj)]


def _core_errors(obj: JSON) -> list[str]:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{'/'.join(str(p) for p in error.path) or '(top)'}: {error.message}"]
    except kubernetes_validate.SchemaNotFoundError:
        return [(f"no schema for apiVersion {obj.get('apiVersion')} kind {obj.get('kind')}: add it to "
                "gpuaas.manifests.validation.CRD_FILES or render a known kind")]
    return []


def _trigger_workflows(sensor: JSON) -> Iterator[tuple[int, JSON]]:
    for index, trigger in enumerate((sensor.get("spec") or {}).get("triggers") or []):
        argo = ((trigger.get("template") or {}).get("argoWorkflow") or {})
        resource = ((argo.get("source") or {}).get("resource"))
        if isinstance(resource, dict):
            yield index, resource


def _trigger_parameters(trigger: JSON) -> list[JSON]:
    """Trigger-level parameters plus the argoWorkflow trigger's own (the ones that fill the Workflow)."""
    argo = ((trigger.get("template") or {}).get("argoWorkflow") or {})
    return [*(trigger.get("parameters") or []), *(argo.get("parameters") or [])]


def _parameter_index(dest: str) -> int | None:
    match = re.fullmatch(r"spec\.arguments\.parameters\.(\d+)\.value", dest)
    return int(match.group(1)) if match else None


def cross_reference_errors(objects: Iterable[JSON]) -> list[str]:
    """What schemas cannot see: references between the rendered objects."""
    objects = list(objects)
    by_kind: dict[str, dict[str, JSON]] = {}
    for obj in objects:
        by_kind.setdefault(obj.get("kind", ""), {})[(obj.get("metadata") or {}).get("name", "")] = obj
    templates = by_kind.get("WorkflowTemplate", {})
    service_accounts = set(by_kind.get("ServiceAccount", {}))
    events: set[tuple[str, str]] = set()
    for name, source in by_kind.get("EventSource", {}).items():
        for source_type, entries in (source.get("spec") or {}).items():
            if isinstance(entries, dict) and source_type not in ("template", "service", "eventBusName"):
                events.update((name, event) for event in entries)
    problems: list[str] = []

    for name, sensor in by_kind.get("Sensor", {}).items():
        spec = sensor.get("spec") or {}
        dependencies = {d.get("name") for d in spec.get("dependencies") or []}
        for dependency in spec.get("dependencies") or []:
            key = (dependency.get("eventSourceName"), dependency.get("eventName"))
            if key not in events:
                problems.append(f"Sensor {name}: dependency {dependency.get('name')} names event {key[1]!r} of "
                                f"EventSource {key[0]!r}, which is not rendered (known: {sorted(events)})")
        for index, trigger in enumerate(spec.get("triggers") or []):
            template = trigger.get("template") or {}
            conditions = str(template.get("conditions") or "")
            for word in re.findall(r"[A-Za-z0-9_.-]+", conditions):
                if word not in dependencies:
                    problems.append(f"Sensor {name}: trigger {template.get('name')} condition names {word!r}, "
                                    f"not a dependency ({sorted(dependencies)})")
            if not conditions and len(dependencies) > 1:
                problems.append(f"Sensor {name}: trigger {template.get('name')} has no conditions, so it waits "
                                f"for ALL of {sorted(dependencies)}; give each trigger its `conditions`")
            for parameter in _trigger_parameters(trigger):
                dep = (parameter.get("src") or {}).get("dependencyName")
                if dep not in dependencies:
                    problems.append(f"Sensor {name}: trigger {template.get('name')} parameter reads dependency "
                                    f"{dep!r}, not one of {sorted(dependencies)}")
        for index, workflow in _trigger_workflows(sensor):
            problems += _workflow_reference_errors(f"Sensor {name} trigger {index}", workflow,
                                                   (spec.get("triggers") or [])[index], templates)
        account = ((spec.get("template") or {}).get("serviceAccountName"))
        if account and service_accounts and account not in service_accounts:
            problems.append(f"Sensor {name}: serviceAccountName {account} is not rendered")

    for name, source in by_kind.get("EventSource", {}).items():
        account = (((source.get("spec") or {}).get("template") or {}).get("serviceAccountName"))
        if account and service_accounts and account not in service_accounts:
            problems.append(f"EventSource {name}: serviceAccountName {account} is not rendered")
    for name, template in templates.items():
        account = (template.get("spec") or {}).get("serviceAccountName")
        if account and service_accounts and account not in service_accounts:
            problems.append(f"WorkflowTemplate {name}: serviceAccountName {account} is not rendered")
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        for name, binding in by_kind.get(kind, {}).items():
            role = binding.get("roleRef") or {}
            if role.get("name") not in by_kind.get(role.get("kind", ""), {}) and role.get("name") not in PLATFORM_ROLES:
                problems.append(f"{kind} {name}: roleRef {role.get('kind')} {role.get('name')} is not rendered")
            for subject in binding.get("subjects") or []:
                if subject.get("kind") == "ServiceAccount" and subject.get("name") not in service_accounts:
                    problems.append(f"{kind} {name}: subject ServiceAccount {subject.get('name')} is not rendered")
    return problems


def _workflow_reference_errors(where: str, workflow: JSON, trigger: JSON,
                               templates: dict[str, JSON]) -> list[str]:
    spec = workflow.get("spec") or {}
    ref = (spec.get("workflowTemplateRef") or {}).get("name")
    if not ref:
        return [f"{where}: the submitted Workflow has no spec.workflowTemplateRef.name"]
    if ref not in templates:
        return [f"{where}: spec.workflowTemplateRef {ref} is not a rendered WorkflowTemplate ({sorted(templates)})"]
    declared = {p["name"] for p in ((templates[ref].get("spec") or {}).get("arguments") or {}).get("parameters") or []}
    given = [p.get("name") for p in (spec.get("arguments") or {}).get("parameters") or []]
    problems = [f"{where}: parameter {p!r} is not declared by WorkflowTemplate {ref} ({sorted(declared)})"
                for p in given if p not in declared]
    for parameter in ((trigger.get("template") or {}).get("argoWorkflow") or {}).get("parameters") or []:
        dest = str(parameter.get("dest", ""))
        index = _parameter_index(dest)
        if dest.startswith("spec.arguments.parameters.") and (index is None or index >= len(given)):
            problems.append(f"{where}: parameter dest {dest} points past the {len(given)} arguments")
    return problems


def validate_all(objects: Iterable[JSON]) -> list[str]:
    """Schema problems of every object plus cross-reference problems; [] means valid."""
    objects = list(objects)
    problems: list[str] = []
    for obj in objects:
        problems += schema_errors(obj)
    return problems + cross_reference_errors(objects)


YamlLoader = _CrdLoader
"""A safe YAML loader that also reads a bare `=` as a string (kustomize output, Kueue CRDs)."""


def load_tree(root: Path | str) -> list[JSON]:
    """Every Kubernetes object in the YAML files under `root` (kustomization/config files and patches skipped)."""
    objects: list[JSON] = []
    for path in sorted(Path(root).rglob("*.y*ml")):
        for document in yaml.load_all(path.read_text(), Loader=YamlLoader):
            if isinstance(document, dict) and "kind" in document and "apiVersion" in document \
                    and not document["apiVersion"].startswith("kustomize.config.k8s.io/") and "$patch" not in document:
                objects.append(document)
    return objects


def validate_tree(root: Path | str) -> list[str]:
    """`validate_all` over a rendered folder (e.g. manifests/ or a `gpuaas render --out` folder)."""
    return validate_all(load_tree(root))
