"""Whether a planned write is in effect on the live object: the truth after a lost answer.

A write can be committed while its answer is lost (a 504 from the API server after the commit, a
dropped connection). The gateway then retries it: a conditional patch meets 409 Conflict (its own
commit moved the resourceVersion), a create meets AlreadyExists, or the API stays down and the
gateway gives up. None of these means "not written". So the reaction reads the object again and
asks whether what the action would write is there (`took_effect`); the audit record and the
Kubernetes Event then say what is true.

    took_effect(kube, action) -> bool        # reads the object once

The comparison (`contains`) is pure. A merge patch is in effect when every field it sets has that
value and every field it removes (null) is absent; a JSON patch when every add/replace path holds
its value and every removed path is absent (its `test` operations are preconditions, not effects);
a create when the object exists with the body's labels, annotations and spec; a delete when the
object is gone or being deleted. The release record written with every release makes a release
unmistakable: its text (time, reason, run) is unique.
"""

from __future__ import annotations

from typing import Any

from steps.plan import JSON, Action

_MISSING = object()


def contains(live: Any, patch: Any) -> bool:
    """True when the merge patch `patch` would change nothing on `live` (RFC 7386 semantics)."""
    if not isinstance(patch, dict):
        return live == patch
    if not isinstance(live, dict):
        return False
    for key, wanted in patch.items():
        if key == "resourceVersion":
            continue
        value = live.get(key, _MISSING)
        if wanted is None:
            if value is not _MISSING and value is not None:
                return False
        elif isinstance(wanted, dict):
            if value is _MISSING or not contains(value, wanted):
                return False
        elif value is _MISSING or value != wanted:
            return False
    return True


def _pointer(document: Any, pointer: str) -> Any:
    """The value at a JSON pointer (RFC 6901), or _MISSING."""
    current = document
    for raw in pointer.lstrip("/").split("/") if pointer else []:
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(current, dict):
            current = current.get(token, _MISSING)
        elif isinstance(current, list) and token.isdigit() and int(token) < len(current):
            current = current[int(token)]
        else:
            return _MISSING
        if current is _MISSING:
            return _MISSING
    return current


def operations_in_effect(live: JSON, operations: list[JSON]) -> bool:
    """True when every effect of a JSON patch (RFC 6902) is present in `live`."""
    for operation in operations:
        op, path = operation.get("op"), str(operation.get("path", ""))
        if op == "test" or path == "/metadata/resourceVersion":
            continue
        value = _pointer(live, path)
        if op in ("add", "replace") and value != operation.get("value"):
            return False
        if op == "remove" and value is not _MISSING:
            return False
    return True


def took_effect(kube: Any, action: Action) -> bool:
    """Read the action's object and say whether the action's write is in effect there."""
    namespace = action.namespace if action.resource.namespaced else None
    if action.operation == "create":
        body = action.body or {}
        name = (body.get("metadata") or {}).get("name") or action.name
        live = kube.get(action.resource, name, namespace)
        meta = body.get("metadata") or {}
        wanted = {"metadata": {k: meta[k] for k in ("labels", "annotations") if meta.get(k)}}
        if "spec" in body:
            wanted["spec"] = body["spec"]
        return live is not None and contains(live, wanted)
    live = kube.get(action.resource, action.name, namespace)
    if action.operation == "delete":
        return live is None or bool((live.get("metadata") or {}).get("deletionTimestamp"))
    if live is None:
        return False
    if action.operation == "merge-patch":
        return contains(live, action.patch)
    if action.operation == "json-patch":
        return operations_in_effect(live, list(action.patch or []))
    return False
