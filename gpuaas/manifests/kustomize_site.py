"""A kustomize site: the same settings as a values file, as kustomize's own fields and patch files.

For admins who install with `kubectl apply -k` instead of Helm. A site folder holds:

    kustomization.yaml            resources: product/, tenants.yaml, node-pool.yaml
    product/kustomization.yaml    manifests/base with the site's namespace (`namespace:`), step image
                                  (`images:`), policy (`configMapGenerator` from policy.yaml) and patches
    product/policy.yaml           the policy document: the same YAML as the values' `policy:`
    product/patches/<kind>-<name>.yaml
                                  one JSON 6902 patch per object the site changes otherwise (Prometheus
                                  address, Secret names, rule labels and the alert's window, the EventBus,
                                  the event pods' placement, pull policy), or a `$patch: delete`
    tenants.yaml, node-pool.yaml  the site's tenants and node pool (Kueue and KEDA objects)
    platform.yaml                 what the values add to the product (`prometheus.auth`: the query role's
                                  bindings, KEDA's token and ClusterTriggerAuthentication)
    other-namespaces.yaml         product objects the values put outside the release namespace (the
                                  AlertmanagerConfig with monitoring.alertRouting.namespace)

`site_files(values, namespace)` writes such a folder for a values file: manifests/examples/site is
examples/values/site.yaml's. The patches are what kustomize must change after its own fields have
done their part, computed by comparing manifests/base (as kustomize transforms it) with the objects
the chart builds for the same values (gpuaas/manifests/site.py); tests/artifacts/test_chart.py builds
the folder with the pinned kubectl and compares it object for object with `helm template`.
"""

from __future__ import annotations

import copy
from typing import Any

JSON = dict[str, Any]

BASE_NAMESPACE = "gpuaas"
KUSTOMIZATION = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}


def _pointer(path: list[str | int]) -> str:
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


def json_patch(before: Any, after: Any, path: list[str | int] | None = None) -> list[JSON]:
    """JSON 6902 operations that turn `before` into `after` (mappings key by key, lists of one length item by item)."""
    path = path or []
    if before == after:
        return []
    if isinstance(before, dict) and isinstance(after, dict):
        ops: list[JSON] = [{"op": "remove", "path": _pointer([*path, key])} for key in before if key not in after]
        for key, value in after.items():
            if key not in before:
                ops.append({"op": "add", "path": _pointer([*path, key]), "value": value})
            else:
                ops += json_patch(before[key], value, [*path, key])
        return ops
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [op for index, (old, new) in enumerate(zip(before, after, strict=True))
                for op in json_patch(old, new, [*path, index])]
    return [{"op": "replace", "path": _pointer(path), "value": after}]


def as_kustomize_builds(base: list[JSON], namespace: str, image: str, policy_text: str) -> list[JSON]:
    """manifests/base after the site kustomization's own fields: `namespace:` (kustomize also renames the
    Namespace and moves the RoleBindings' and ClusterRoleBindings' ServiceAccount subjects), `images:`
    and the policy ConfigMap replaced by `configMapGenerator`."""
    from gpuaas.manifests.site import STEP_IMAGE, each_mapping

    out = copy.deepcopy(base)
    for obj in out:
        metadata = obj["metadata"]
        if metadata.get("namespace") == BASE_NAMESPACE:
            metadata["namespace"] = namespace
        if obj["kind"] == "Namespace" and metadata["name"] == BASE_NAMESPACE:
            metadata["name"] = namespace
        for subject in obj.get("subjects") or []:
            if subject.get("kind") == "ServiceAccount" and subject.get("namespace") == BASE_NAMESPACE:
                subject["namespace"] = namespace
        if obj["kind"] == "ConfigMap" and metadata["name"] == "gpuaas-policy":
            obj["data"] = {"policy.yaml": policy_text}
    for node in each_mapping(out):
        if node.get("image") == STEP_IMAGE:
            node["image"] = image
    return out


def _key(obj: JSON) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def site_layout(values: JSON, namespace: str, base_path: str = "../../../base") -> dict[str, Any]:
    """Relative path -> content (a mapping, a list of mappings, or text for policy.yaml)."""
    from gpuaas.manifests import site

    base = [obj for objects in site.base_objects(site.values_module().defaults()).values() for obj in objects]
    image = values["image"]
    image_ref = f"{image['repository']}:{image['tag']}"
    policy_text = site.policy_document(site.policy_values(site.Values(data=values)).data)
    built = as_kustomize_builds(base, namespace, image_ref, policy_text)
    transformed = {_key(obj): obj for obj in built}
    original_of = {_key(obj): original for obj, original in zip(built, base, strict=True)}
    wanted = {_key(obj): obj for obj in site.product_objects(values, namespace)}
    added = [obj for key, obj in wanted.items() if key not in transformed]
    """Objects the values add to the product (prometheus.auth's RBAC and KEDA authentication): platform.yaml, outside
    product/ so that kustomize's `namespace:` leaves those in KEDA's namespace where they are."""

    files: dict[str, Any] = {}
    patches: list[JSON] = []
    elsewhere: list[JSON] = []
    for key, obj in transformed.items():
        kind, name = key
        group, _, version = obj["apiVersion"].rpartition("/")
        target = {"group": group, "version": version, "kind": kind, "name": name} if group else \
            {"version": version, "kind": kind, "name": name}
        file = f"patches/{kind.lower()}-{original_of[key]['metadata']['name']}.yaml"
        moved = key in wanted and wanted[key]["metadata"].get("namespace") != obj["metadata"].get("namespace")
        if moved:  # kustomize's `namespace:` would undo a patch of the namespace: the object goes in at the top
            elsewhere.append(wanted[key])
        if key not in wanted or moved:
            original = original_of[key]
            files[f"product/{file}"] = {"apiVersion": obj["apiVersion"], "kind": kind,
                                        "metadata": {"name": original["metadata"]["name"],
                                                     **({"namespace": original["metadata"]["namespace"]}
                                                        if "namespace" in original["metadata"] else {})},
                                        "$patch": "delete"}
            patches.append({"path": file})
            continue
        operations = json_patch(obj, wanted[key])
        if operations:
            files[f"product/{file}"] = operations
            patches.append({"path": file, "target": target})

    product: JSON = {**KUSTOMIZATION, "resources": [base_path]}
    if namespace != BASE_NAMESPACE:
        product["namespace"] = namespace
    product["images"] = [{"name": site.STEP_IMAGE, "newName": image["repository"], "newTag": image["tag"]}]
    product["configMapGenerator"] = [{"name": "gpuaas-policy", "namespace": BASE_NAMESPACE, "behavior": "replace",
                                      "files": ["policy.yaml"], "options": {"disableNameSuffixHash": True}}]
    if patches:
        product["patches"] = patches
    files["product/kustomization.yaml"] = product
    files["product/policy.yaml"] = policy_text

    resources = ["product"]
    for name, objects in (("platform.yaml", added), ("other-namespaces.yaml", elsewhere),
                          ("tenants.yaml", site.tenant_objects(values)), ("node-pool.yaml", site.node_pool_objects(values))):
        if objects:
            files[name] = objects
            resources.append(name)
    files["kustomization.yaml"] = {**KUSTOMIZATION, "resources": resources}
    return files


def site_files(values: JSON, namespace: str, base_path: str = "../../../base", header: str = "") -> dict[str, str]:
    """site_layout as file texts (each with `header`): objects as YAML documents, patches as one document."""
    from gpuaas.manifests.files import dump

    out = {}
    for path, content in site_layout(values, namespace, base_path).items():
        if isinstance(content, str):
            text = content
        elif path in ("tenants.yaml", "node-pool.yaml", "other-namespaces.yaml", "platform.yaml"):
            text = dump(content)
        else:
            text = dump([content])
        out[path] = header + text
    return out


def _target(obj: JSON) -> JSON:
    group, _, version = obj["apiVersion"].rpartition("/")
    target = {"group": group, "version": version} if group else {"version": version}
    target.update(kind=obj["kind"], name=obj["metadata"]["name"])
    if obj["metadata"].get("namespace"):
        target["namespace"] = obj["metadata"]["namespace"]
    return target


def overlay_layout(values: JSON, base: list[JSON], tenants: list[JSON]) -> dict[str, Any]:
    """A flat overlay (manifests/overlays/<name>/) for a values file installed in namespace gpuaas:
    `resources` manifests/base and manifests/examples/tenants (`base`, `tenants`: their objects as rendered),
    `images:` for the step image, one JSON 6902 patch file per object the values change (`patches/`), a
    `$patch: delete` for one they drop, and the objects the values add: `node-pool.yaml` (the GPU node pool)
    and `platform.yaml` (what the platform needs besides: its RBAC, KEDA's authentication, ...).

    Relative path -> content; `kustomization.yaml` lists them. The same comparison as site_layout: what
    kustomize builds from the resources against what the chart builds for the values
    (tests/artifacts/test_chart.py compares `kubectl kustomize` with `helm template` for every overlay)."""
    from gpuaas.manifests import site

    image = values["image"]
    have = copy.deepcopy([*base, *tenants])
    for node in site.each_mapping(have):
        if node.get("image") == site.STEP_IMAGE:
            node["image"] = f"{image['repository']}:{image['tag']}"
    wanted_list = site.objects(values, BASE_NAMESPACE, hooks=False)
    wanted = {_key(obj): obj for obj in wanted_list}
    pool = {_key(obj) for obj in site.node_pool_objects(values)}
    files: dict[str, Any] = {}
    patches: list[JSON] = []
    for obj in have:
        key = _key(obj)
        file = f"patches/{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
        if key not in wanted:
            files[file] = {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
                           "metadata": {k: obj["metadata"][k] for k in ("name", "namespace") if k in obj["metadata"]},
                           "$patch": "delete"}
            patches.append({"path": file})
            continue
        operations = json_patch(obj, wanted[key])
        if operations:
            files[file] = operations
            patches.append({"path": file, "target": _target(obj)})
    have_keys = {_key(obj) for obj in have}
    added = [obj for obj in wanted_list if _key(obj) not in have_keys]
    resources = ["../../base", "../../examples/tenants"]
    for name, objects in (("node-pool.yaml", [o for o in added if _key(o) in pool]),
                          ("platform.yaml", [o for o in added if _key(o) not in pool])):
        if objects:
            files[name] = objects
            resources.append(name)
    kustomization: JSON = {**KUSTOMIZATION, "resources": resources,
                           "images": [{"name": site.STEP_IMAGE, "newName": image["repository"],
                                       "newTag": image["tag"]}]}
    if patches:
        kustomization["patches"] = patches
    files["kustomization.yaml"] = kustomization
    return files
