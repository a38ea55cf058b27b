"""A cluster's state as a file: what the demo leaves behind so a run can be re-played later.

The snapshot lists every object of the kinds the product reads or writes (the Resource constants
of steps/gateways/resources.py), read over the Kubernetes API. Restoring creates them again in a
fresh local API server, status included (through /status), so `gpuaas audit resubmit` re-runs an
archived workflow against the state the demo ended in, and the step re-checks live state there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from steps.gateways import resources
from steps.gateways.errors import Conflict, NotFound
from steps.gateways.kubernetes import KubernetesGateway
from steps.gateways.resources import Resource

SNAPSHOT_FORMAT = "gpuaas.io/cluster-snapshot/v1"
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")

# Order matters on restore: namespaces and queues before what refers to them.
SNAPSHOT_KINDS: tuple[Resource, ...] = (
    resources.NAMESPACE, resources.NODE, resources.RESOURCE_FLAVOR, resources.COHORT, resources.CLUSTER_QUEUE,
    resources.LOCAL_QUEUE, resources.CONFIG_MAP, resources.STATEFUL_SET, resources.DEPLOYMENT,
    resources.JOB, resources.RAY_CLUSTER, resources.RAY_JOB, resources.PYTORCH_JOB, resources.NOTEBOOK,
    resources.INFERENCE_SERVICE, resources.SCALED_OBJECT, resources.POD, resources.WORKLOAD,
    resources.EVENT,
)


def resource_of(obj: dict[str, Any]) -> Resource:
    """The Resource constant for an object's apiVersion and kind."""
    for resource in SNAPSHOT_KINDS:
        if resource.api_version == obj.get("apiVersion") and resource.kind == obj.get("kind"):
            return resource
    raise ValueError(f"object {obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}: apiVersion "
                     f"{obj.get('apiVersion')!r} kind {obj.get('kind')!r} is not a kind the engine knows "
                     f"(known: {', '.join(sorted({r.kind for r in SNAPSHOT_KINDS}))})")


def capture(gateway: KubernetesGateway) -> dict[str, Any]:
    """Every object of the known kinds, as the API serves them."""
    objects: list[dict[str, Any]] = []
    for resource in SNAPSHOT_KINDS:
        for obj in gateway.list(resource):
            obj = dict(obj)
            obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
            objects.append(obj)
    return {"format": SNAPSHOT_FORMAT, "objects": objects}


def write(gateway: KubernetesGateway, path: Path) -> int:
    snapshot = capture(gateway)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(snapshot, indent=1, sort_keys=True))
    return len(snapshot["objects"])


def read(path: Path) -> list[dict[str, Any]]:
    expected = "expected the demo's demo-report/cluster-snapshot.json"
    try:
        text = Path(path).read_text(encoding="utf-8")
        snapshot = json.loads(text) if text.strip() else None
    except (OSError, ValueError) as error:  # ValueError: JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"snapshot {path}: cannot read it ({error}); {expected}") from error
    if snapshot is None:
        raise ValueError(f"snapshot {path}: {expected}, found an empty file")
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("objects"), list):
        raise ValueError(  # noqa: TRY004 - bad file content, not a caller type error
            f"snapshot {path}: expected {{\"objects\": [...]}}, found {type(snapshot).__name__}")
    return snapshot["objects"]


def _owner_key(api_version: str, kind: str, namespace: str | None, name: str) -> tuple[str, str, str, str]:
    return api_version, kind, namespace or "", name


def apply(gateway: KubernetesGateway, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Create (or merge into) each object, then write its status: idempotent.

    The server gives every object a new uid, so an ownerReference to an object applied earlier in
    the same call is pointed at that object's new uid (a real cluster's garbage collector deletes
    dependents whose owner uid does not exist)."""
    applied = []
    uids: dict[tuple[str, str, str, str], str] = {}
    for obj in objects:
        resource = resource_of(obj)
        metadata = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in SERVER_FIELDS}
        if metadata.get("ownerReferences"):
            metadata["ownerReferences"] = [
                {**ref, "uid": uids.get(_owner_key(ref.get("apiVersion", ""), ref.get("kind", ""),
                                                   metadata.get("namespace"), ref.get("name", "")), ref.get("uid"))}
                for ref in metadata["ownerReferences"]]
        body = {k: v for k, v in obj.items() if k != "status"} | {"metadata": metadata}
        namespace = metadata.get("namespace") if resource.namespaced else None
        try:
            live = gateway.create(resource, body, namespace=namespace)
        except Conflict:
            live = gateway.merge_patch(resource, metadata["name"], {k: v for k, v in body.items()
                                                                    if k not in ("apiVersion", "kind")},
                                       namespace=namespace)
        if obj.get("status"):
            try:
                live = gateway.merge_patch(resource, metadata["name"], {"status": obj["status"]},
                                           namespace=namespace, subresource="status")
            except NotFound:
                pass
        applied.append(live)
        live_meta = live.get("metadata") or {}
        if live_meta.get("uid"):
            uids[_owner_key(obj.get("apiVersion", ""), obj.get("kind", ""), live_meta.get("namespace"),
                            live_meta.get("name", ""))] = live_meta["uid"]
    return applied


def main(argv: list[str]) -> int:
    """`python -m engine.cluster_state FILE...`: apply objects with their status to a Kubernetes API.

    FILE is a snapshot (`{"objects": [...]}`, as the demo writes and examples/cluster/ holds). The API
    is $GPUAAS_KUBE_URL (the local server: `python -m engine.apiserver PORT`), else $KUBECONFIG."""
    import sys

    from steps.gateways.errors import KubernetesError

    usage = ("usage: python -m engine.cluster_state FILE...  (apply a snapshot's objects, status included, to "
             "the Kubernetes API at $GPUAAS_KUBE_URL, else $KUBECONFIG)")
    if not argv:
        print(f"python -m engine.cluster_state: {usage}", file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        print(usage)
        return 0
    try:
        snapshots = [(path, read(Path(path))) for path in argv]  # every file is checked before any write
        gateway = KubernetesGateway()
        for path, objects in snapshots:
            applied = apply(gateway, objects)
            print(f"applied {len(applied)} objects from {path} to {gateway.configuration.host}")
    except (ValueError, KubernetesError) as error:
        print(f"python -m engine.cluster_state: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
