"""Everything `gpuaas render` writes, as a layout: relative path -> the objects in that file.

    manifests/
      base/                       namespace gpuaas: RBAC, EventBus, policy, templates, sensors, rules
        workflows/<template>.yaml one file per WorkflowTemplate (rendered by workflows/<module>.py)
        events/<kind>-<name>.yaml one file per EventSource / Sensor (sensors/)
      examples/tenants/           example ResourceFlavor, Cohort, two tenants' ClusterQueues/LocalQueues
      overlays/openshift/         base + examples + MachineSet ScaledObject (+ thanos auth) + image pin
      overlays/kubernetes/        base + examples + Cluster API MachineDeployment ScaledObject + image pin

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
OVERLAYS = ("openshift", "kubernetes")
"""Each overlay is examples/values/<name>.yaml: the base, the example tenants, its node pool and the image pin."""
OVERLAY_KEYS = ("image", "namespace", "kueue", "tenants", "nodePool")
"""What an overlay's values may change from the chart's defaults (the rest needs patches: examples/site)."""


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
        "base/observability.yaml": parts["observability"] + parts["alert-routing"],
    }
    for template in parts["workflowtemplates"]:
        layout[f"base/workflows/{template['metadata']['name']}.yaml"] = [template]
    for obj in parts["events"]:
        layout[f"base/events/{_file_name(obj)}"] = [obj]
    return layout


def overlay_values(name: str) -> JSON:
    """examples/values/<name>.yaml, refused if it changes what an overlay cannot carry (OVERLAY_KEYS)."""
    from gpuaas.manifests import site, values

    example = site.example_values(name)
    defaults = values.defaults()
    changed = sorted(key for key in set(example) | set(defaults)
                     if key not in OVERLAY_KEYS and example.get(key) != defaults.get(key))
    if changed:
        raise site.SiteError(f"examples/values/{name}.yaml changes {changed}, which the overlay {name} cannot carry "
                             f"(it is the base plus {', '.join(OVERLAY_KEYS)}); make it a site (manifests/examples/site)")
    return example


def examples() -> Layout:
    """The example tenants of the overlays (the same in every overlay's values)."""
    from gpuaas.manifests import site

    tenants = {name: site.tenant_objects(overlay_values(name)) for name in OVERLAYS}
    first = tenants[OVERLAYS[0]]
    different = [name for name, objects in tenants.items() if objects != first]
    if different:
        raise site.SiteError(f"examples/values/{different[0]}.yaml has other tenants than "
                             f"examples/values/{OVERLAYS[0]}.yaml; the overlays share manifests/examples/tenants")
    return {"examples/tenants/tenants.yaml": first}


def overlays() -> Layout:
    from gpuaas.manifests import site

    return {f"overlays/{name}/node-pool.yaml": site.node_pool_objects(overlay_values(name)) for name in OVERLAYS}


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
    for overlay in OVERLAYS:
        image = overlay_values(overlay)["image"]
        out[f"overlays/{overlay}/kustomization.yaml"] = {
            **KUSTOMIZATION,
            "resources": ["../../base", "../../examples/tenants", *files_under(f"overlays/{overlay}/")],
            "images": [{"name": IMAGE_NAME, "newName": image["repository"], "newTag": image["tag"]}],
        }
    return out
