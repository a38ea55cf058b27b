"""Everything `gpuaas render` writes, as a layout: relative path -> the objects in that file.

    manifests/
      base/                       namespace gpuaas: RBAC, EventBus, policy, templates, sensors, rules
        workflows/<template>.yaml one file per WorkflowTemplate (rendered by workflows/<module>.py), and
        workflows/cronworkflow-<name>.yaml per CronWorkflow (the catch-up sweep's)
        events/<kind>-<name>.yaml one file per EventSource / Sensor (sensors/)
      examples/tenants/           example ResourceFlavor, Cohort, two tenants' ClusterQueues/LocalQueues
      overlays/<platform>/        examples/values/<platform>.yaml as kustomize builds it: base + examples +
                                  patches + node pool + the platform's objects (kubernetes,
                                  kube-prometheus-stack, openshift)

Objects carry explicit namespaces (no kustomize `namespace:` transformer), so the example tenants'
LocalQueues keep their own namespaces when an overlay combines them with the base.
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]
Layout = dict[str, list[JSON]]

IMAGE_NAME = "gpuaas-step"
KUSTOMIZATION = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
IMAGE_FIELDS = {
    # kustomize's `images:` only rewrites containers[]/initContainers[] by default; these field specs
    # let an overlay's `images:` entry pin the step image inside Argo script templates too.
    "images": [
        {"path": "spec/templates[]/script/image", "kind": "WorkflowTemplate"},
        {"path": "spec/templates[]/container/image", "kind": "WorkflowTemplate"},
    ],
}


def _file_name(obj: JSON) -> str:
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


SITE_EXAMPLE = "site"
SITE_EXAMPLE_NAMESPACE = "gpu-automation"
"""manifests/examples/site is examples/values/site.yaml installed in this namespace (`helm install -n`)."""
OVERLAYS = ("kubernetes", "kube-prometheus-stack", "openshift")
"""Each overlay is examples/values/<name>.yaml installed in namespace gpuaas: the base, the example tenants,
patches for what the values change (gpuaas/manifests/kustomize_site.py overlay_layout) and the objects they add."""
TENANTS_EXAMPLE = "kubernetes"
"""manifests/examples/tenants holds this example's tenants; an overlay whose values label them otherwise
(openshift: kueue.openshift.io/managed) patches them."""


def _defaults(workload_version: str) -> JSON:
    from gpuaas.manifests import values

    return values.load(overrides={"kueue": {"workloadVersion": workload_version}})


def base(workload_version: str = "v1beta2") -> Layout:
    """manifests/base: the product for the chart's default values (gpuaas/manifests/site.py), image unpinned."""
    from gpuaas.manifests import site

    parts = site.base_objects(_defaults(workload_version))
    layout: Layout = {
        "base/namespace.yaml": parts["namespace"],
        "base/rbac.yaml": parts["rbac"],
        "base/eventbus.yaml": parts["eventbus"],
        "base/policy.yaml": parts["policy"],
        "base/prometheus.yaml": parts["prometheus"],
        "base/observability.yaml": parts["observability"] + parts["alert-routing"],
    }
    for template in parts["workflowtemplates"]:
        layout[f"base/workflows/{template['metadata']['name']}.yaml"] = [template]
    for cron in parts["cronworkflows"]:
        layout[f"base/workflows/cronworkflow-{cron['metadata']['name']}.yaml"] = [cron]
    for obj in parts["events"]:
        layout[f"base/events/{_file_name(obj)}"] = [obj]
    return layout


def overlay_values(name: str) -> JSON:
    """examples/values/<name>.yaml over the chart's defaults (validated)."""
    from gpuaas.manifests import site

    return site.example_values(name)


def examples() -> Layout:
    """The example tenants the overlays share (examples/values/kubernetes.yaml's)."""
    from gpuaas.manifests import site

    return {"examples/tenants/tenants.yaml": site.tenant_objects(overlay_values(TENANTS_EXAMPLE))}


def overlay_layouts() -> dict[str, dict[str, Any]]:
    """overlays/<name>/: path -> content (objects, a patch, or the kustomization), per overlay."""
    from gpuaas.manifests.kustomize_site import overlay_layout

    base_objects = [obj for docs in base().values() for obj in docs]
    tenants = examples()["examples/tenants/tenants.yaml"]
    return {name: overlay_layout(overlay_values(name), base_objects, tenants) for name in OVERLAYS}


OBJECT_FILES = ("node-pool.yaml", "platform.yaml")
"""The overlay files that hold objects of their own (the others are patches and the kustomization)."""


def overlays() -> Layout:
    """The objects the overlays add to base and examples (node pools, platform objects), by path."""
    return {f"overlays/{name}/{path}": content for name, layout in overlay_layouts().items()
            for path, content in layout.items() if path in OBJECT_FILES}


def objects(workload_version: str = "v1beta2") -> list[JSON]:
    """Every rendered Kubernetes object (base, examples and overlays' own objects)."""
    out: list[JSON] = []
    for part in (base(workload_version), examples(), overlays()):
        for docs in part.values():
            out += docs
    return out


def kustomizations(layout: Layout) -> dict[str, JSON]:
    """kustomization.yaml for base, examples and each overlay, listing the rendered files."""
    def files_under(prefix: str) -> list[str]:
        return sorted(path[len(prefix):] for path in layout if path.startswith(prefix))

    out = {
        "base/kustomization.yaml": {**KUSTOMIZATION, "configurations": ["kustomizeconfig.yaml"],
                                    "resources": files_under("base/")},
        "examples/tenants/kustomization.yaml": {**KUSTOMIZATION, "resources": files_under("examples/tenants/")},
    }
    return out
