"""Everything `gpuaas render` writes, as a layout: relative path -> the objects in that file.

    manifests/
      base/                       namespace gpuaas: RBAC, EventBus, policy, templates, sensors, rules
        workflows/<template>.yaml one file per WorkflowTemplate (rendered by workflows/<module>.py)
        events/<kind>-<name>.yaml one file per EventSource / Sensor (sensors/)
      examples/tenants/           example ResourceFlavor, Cohort, two tenants' ClusterQueues/LocalQueues
      overlays/kubernetes/        base + examples + Cluster API MachineDeployment ScaledObject + image pin
      overlays/kube-prometheus-stack/  the same + the chart's rule label
      overlays/openshift/         base + examples + MachineSet ScaledObject + thanos-querier access + Kueue label
    (the differences are data: gpuaas.manifests.platforms)

Objects carry explicit namespaces (no kustomize `namespace:` transformer), so the example tenants'
LocalQueues keep their own namespaces when an overlay combines them with the base.
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]
Layout = dict[str, list[JSON]]

IMAGE_NAME = "gpuaas-step"
DEFAULT_IMAGE = "quay.io/gpuaas/gpuaas-step"
DEFAULT_TAG = "0.1.0"
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


def _in_namespace(obj: JSON, namespace: str) -> JSON:
    """The object with `metadata.namespace` set, placed right after the name (reads like kubectl's output)."""
    metadata = obj["metadata"]
    obj["metadata"] = {"name": metadata["name"], "namespace": namespace,
                       **{k: v for k, v in metadata.items() if k not in ("name", "namespace")}}
    return obj


def base(workload_version: str = "v1beta2") -> Layout:
    import sensors
    import workflows
    from gpuaas.manifests import observability, platform, rbac

    layout: Layout = {
        "base/namespace.yaml": [platform.namespace()],
        "base/rbac.yaml": [*platform.service_accounts(), *rbac.objects()],
        "base/eventbus.yaml": [platform.event_bus()],
        "base/policy.yaml": [platform.policy_configmap()],
        "base/prometheus.yaml": [platform.prometheus_configmap()],
        "base/observability.yaml": observability.objects(platform.NAMESPACE),
    }
    for name, template in workflows.rendered().items():
        layout[f"base/workflows/{name}.yaml"] = [_in_namespace(template, platform.NAMESPACE)]
    for name, cron in workflows.cron_workflows().items():
        layout[f"base/workflows/cronworkflow-{name}.yaml"] = [_in_namespace(cron, platform.NAMESPACE)]
    for obj in [*sensors.all_event_sources(workload_version), *sensors.all_sensors()]:
        layout[f"base/events/{_file_name(obj)}"] = [_in_namespace(obj, platform.NAMESPACE)]
    return layout


def examples() -> Layout:
    from gpuaas.manifests import tenants

    return {"examples/tenants/tenants.yaml": tenants.objects()}


def overlays() -> Layout:
    from gpuaas.manifests import platforms

    layout: Layout = {}
    for name, platform in platforms.platforms().items():
        layout[f"overlays/{name}/node-pool.yaml"] = platform.node_pool
        if platform.extra:
            layout[f"overlays/{name}/{platform.profile.name}.yaml"] = platform.extra
    return layout


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

    overlay_images = [{"name": IMAGE_NAME, "newName": DEFAULT_IMAGE, "newTag": DEFAULT_TAG}]
    out = {
        "base/kustomization.yaml": {**KUSTOMIZATION, "configurations": ["kustomizeconfig.yaml"],
                                    "resources": files_under("base/")},
        "examples/tenants/kustomization.yaml": {**KUSTOMIZATION, "resources": files_under("examples/tenants/")},
    }
    from gpuaas.manifests import platforms

    for overlay, platform in platforms.platforms().items():
        out[f"overlays/{overlay}/kustomization.yaml"] = {
            **KUSTOMIZATION,
            "resources": ["../../base", "../../examples/tenants", *files_under(f"overlays/{overlay}/")],
            "patches": platform.patches(),
            "images": overlay_images,
        }
    return out
