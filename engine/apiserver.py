"""A Kubernetes-API-compatible HTTP server for the local engine and the tests.

Schemaless: any plural under `/api/v1` or `/apis/{group}/{version}` is stored as JSON, so the
steps reach it with the official client exactly as they reach a real cluster. It implements the
API machinery the product depends on (ARCHITECTURE section 5): create with generateName, uid,
resourceVersion and generation; optimistic concurrency (409 on a stale resourceVersion); merge,
JSON and strategic-merge (as merge) patches; the /status and /scale subresources; label and field
selectors; watch from a resourceVersion; finalizers and owner-reference garbage collection;
errors as `Status` objects.

`server.store` is the same state without HTTP (the Kueue emulation and the engine write through
it): one resourceVersion counter, one change log, so HTTP watchers see in-process writes.

Objects are indexed by (group, plural) -> namespace -> name; versions of one group share storage
(a v1beta1 read of a v1beta2 Workload sees the same object under its own apiVersion, without
field conversion). Stored dicts are never mutated in place: every write builds a new dict, so a
reader may hold a reference without copying.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import queue
import random
import re
import select
import socket
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol, Self
from urllib.parse import parse_qs, unquote, urlsplit

from engine.http_server import QuietHTTPServer
from steps.gateways import resources as known

JSON = dict[str, Any]

# --------------------------------------------------------------------------------- resource types


@dataclass(frozen=True, slots=True)
class ScaleSpec:
    """Where a kind keeps what autoscaling/v1 Scale exposes."""

    replicas: tuple[str, ...] = ("spec", "replicas")
    status_replicas: tuple[str, ...] = ("status", "replicas")
    selector: tuple[str, ...] = ("spec", "selector")


@dataclass(frozen=True, slots=True)
class ResourceType:
    """What the server knows about one (group, plural): its kind, scope and subresources."""

    group: str
    plural: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = True
    scale: ScaleSpec | None = None
    status_on_create: bool = False  # Nodes accept status on create; most kinds reset it.


class ResourceLike(Protocol):
    group: str
    version: str
    plural: str


_NO_STATUS = {"configmaps", "events", "secrets", "serviceaccounts", "endpoints", "limitranges",
              "podtemplates", "roles", "rolebindings", "clusterroles", "clusterrolebindings",
              "priorityclasses", "storageclasses", "leases"}
_CORE_EXTRA = [
    ResourceType("", "services", "Service"), ResourceType("", "secrets", "Secret", status_subresource=False),
    ResourceType("", "serviceaccounts", "ServiceAccount", status_subresource=False),
    ResourceType("", "persistentvolumeclaims", "PersistentVolumeClaim"),
    ResourceType("", "persistentvolumes", "PersistentVolume", namespaced=False),
    ResourceType("", "endpoints", "Endpoints", status_subresource=False),
    ResourceType("coordination.k8s.io", "leases", "Lease", status_subresource=False),
    ResourceType("events.k8s.io", "events", "Event", status_subresource=False),
    ResourceType("scheduling.k8s.io", "priorityclasses", "PriorityClass", namespaced=False,
                 status_subresource=False),
    ResourceType("apiextensions.k8s.io", "customresourcedefinitions", "CustomResourceDefinition",
                 namespaced=False),
    ResourceType("kueue.x-k8s.io", "admissionchecks", "AdmissionCheck", namespaced=False),
    ResourceType("kueue.x-k8s.io", "workloadpriorityclasses", "WorkloadPriorityClass", namespaced=False,
                 status_subresource=False),
    ResourceType("argoproj.io", "workflows", "Workflow"),
    ResourceType("argoproj.io", "workflowtemplates", "WorkflowTemplate"),
    ResourceType("argoproj.io", "cronworkflows", "CronWorkflow"),
    ResourceType("argoproj.io", "eventsources", "EventSource"),
    ResourceType("argoproj.io", "sensors", "Sensor"),
    ResourceType("monitoring.coreos.com", "prometheusrules", "PrometheusRule"),
    ResourceType("monitoring.coreos.com", "servicemonitors", "ServiceMonitor"),
    ResourceType("monitoring.coreos.com", "podmonitors", "PodMonitor"),
    ResourceType("jobset.x-k8s.io", "jobsets", "JobSet"),
    ResourceType("trainer.kubeflow.org", "trainjobs", "TrainJob"),
]
_EXTRA_VERSIONS = {"argoproj.io": "v1alpha1", "jobset.x-k8s.io": "v1alpha2", "trainer.kubeflow.org": "v1alpha1",
                   "kueue.x-k8s.io": "v1beta2"}
_SCALE_KINDS = {"deployments", "statefulsets", "replicasets", "machinesets", "machinedeployments",
                "leaderworkersets"}


class Registry:
    """plural -> kind, scope and subresources; extensible at run time.

    An unknown plural under /apis is served as a namespaced custom resource (its kind is learnt
    from the first object created); under /api/v1 as a namespaced core kind.
    """

    def __init__(self) -> None:
        self._types: dict[tuple[str, str], ResourceType] = {}
        self._versions: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        for r in known.ALL:
            self.note_version(r.group, r.version)
            self.register(ResourceType(
                r.group, r.plural, r.kind, r.namespaced,
                status_subresource=r.plural not in _NO_STATUS,
                scale=ScaleSpec() if r.plural in _SCALE_KINDS else None,
                status_on_create=(r.group, r.plural) == ("", "nodes")))
        for t in _CORE_EXTRA:
            self.register(t)
            self.note_version(t.group, _EXTRA_VERSIONS.get(t.group, "v1"))

    def register(self, resource_type: ResourceType) -> None:
        with self._lock:
            self._types[(resource_type.group, resource_type.plural)] = resource_type

    def lookup(self, group: str, plural: str, kind_hint: str | None = None) -> ResourceType:
        found = self._types.get((group, plural))
        if found is not None:
            return found
        guessed = ResourceType(group, plural, kind_hint or _guess_kind(plural))
        if kind_hint:
            self.register(guessed)
        return guessed

    def known(self, group: str, plural: str) -> bool:
        return (group, plural) in self._types

    def note_version(self, group: str, version: str) -> None:
        """Remember a version a client used, so discovery lists it."""
        with self._lock:
            versions = self._versions.setdefault(group, [])
            if version not in versions:
                versions.append(version)

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions, preferred first."""
        with self._lock:
            return {g: list(vs) for g, vs in self._versions.items()}

    def resources_of(self, group: str) -> list[ResourceType]:
        with self._lock:
            return sorted((t for (g, _), t in self._types.items() if g == group), key=lambda t: t.plural)


def _guess_kind(plural: str) -> str:
    singular = plural[:-3] + "y" if plural.endswith("ies") else plural.removesuffix("s")
    return singular[:1].upper() + singular[1:]


# --------------------------------------------------------------------------------- errors


class ApiError(Exception):
    """A request the API refuses; rendered as a Kubernetes `Status` object."""

    def __init__(self, code: int, reason: str, message: str, details: JSON | None = None) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}

    def status(self) -> JSON:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "details": self.details,
                "code": self.code}


def _qualified(rt: ResourceType) -> str:
    return f"{rt.plural}.{rt.group}" if rt.group else rt.plural


def _not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{_qualified(rt)} "{name}" not found',
                    {"name": name, "group": rt.group, "kind": rt.plural})


def _conflict(rt: ResourceType, name: str) -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {_qualified(rt)} "{name}": the object '
                    "has been modified; please apply your changes to the latest version and try again",
                    {"name": name, "group": rt.group, "kind": rt.plural})


def _invalid(rt: ResourceType, name: str, message: str) -> ApiError:
    return ApiError(422, "Invalid", f'{rt.kind} "{name}" is invalid: {message}',
                    {"name": name, "group": rt.group, "kind": rt.kind})


# --------------------------------------------------------------------------------- selectors


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        # "!=" and "notin" match objects without the key, as in Kubernetes.
        return not present or labels[self.key] not in self.values


_SET_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*(?:(in|notin)\s*\(([^)]*)\)|(==|!=|=)\s*([^,]*?))?\s*$")


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse `a=b,c!=d,e in (f,g),h notin (i),j,!k` into requirements (400 on bad syntax)."""
    if not text:
        return []
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    out = []
    for part in parts:
        if not part.strip():
            continue
        m = _SET_RE.match(part)
        if not m:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {part.strip()!r}")
        bang, key, set_op, set_values, op, value = m.groups()
        if bang and (set_op or op):
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {part.strip()!r}")
        if bang:
            out.append(Requirement(key, "!"))
        elif set_op:
            values = frozenset(v.strip() for v in set_values.split(",") if v.strip())
            out.append(Requirement(key, "in" if set_op == "in" else "notin", values))
        elif op:
            out.append(Requirement(key, "!=" if op == "!=" else "=", frozenset({value.strip()})))
        else:
            out.append(Requirement(key, "exists"))
    return out


def parse_field_selector(text: str | None) -> list[tuple[tuple[str, ...], bool, str]]:
    """Parse `metadata.name=x,metadata.namespace!=y` into (path, equal, value) terms.

    Any dotted path is accepted (Kubernetes allows only a per-kind list; here `involvedObject.name`
    on Events or `spec.nodeName` on Pods simply work).
    """
    if not text:
        return []
    terms = []
    for part in text.split(","):
        if not part.strip():
            continue
        m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|!=|=)\s*(.*?)\s*$", part)
        if not m:
            raise ApiError(400, "BadRequest", f"invalid field selector: {part.strip()!r}")
        terms.append((tuple(m.group(1).split(".")), m.group(2) != "!=", m.group(3)))
    return terms


def _selected(obj: JSON, labels: list[Requirement], fields: list[tuple[tuple[str, ...], bool, str]]) -> bool:
    if labels:
        obj_labels = (obj.get("metadata") or {}).get("labels") or {}
        if not all(r.matches(obj_labels) for r in labels):
            return False
    for path, equal, value in fields:
        found = _dig(obj, path)
        text = "" if found is None else (str(found).lower() if isinstance(found, bool) else str(found))
        if (text == value) != equal:
            return False
    return True


def _dig(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


# --------------------------------------------------------------------------------- patches


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (returns a new value; `target` is not modified)."""
    if not isinstance(patch, dict):
        return _copy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class PatchError(ValueError):
    pass


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}: must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, tokens: list[str], path: str) -> tuple[Any, str]:
    for token in tokens[:-1]:
        if isinstance(doc, dict) and token in doc:
            doc = doc[token]
        elif isinstance(doc, list) and token.isdigit() and int(token) < len(doc):
            doc = doc[int(token)]
        else:
            raise PatchError(f"doc is missing path: {path!r}")
    return doc, tokens[-1]


def _get_at(doc: Any, path: str) -> Any:
    for token in _pointer(path):
        if isinstance(doc, dict) and token in doc:
            doc = doc[token]
        elif isinstance(doc, list) and token.isdigit() and int(token) < len(doc):
            doc = doc[int(token)]
        else:
            raise PatchError(f"doc is missing path: {path!r}")
    return doc


def _remove_at(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent, last = _parent(doc, tokens, path)
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise PatchError(f"doc is missing path: {path!r}")


def _add_at(doc: Any, path: str, value: Any, replace: bool = False) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent, last = _parent(doc, tokens, path)
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise PatchError(f"doc is missing key: {path!r}")
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent) - (1 if replace else 0):
            if replace:
                parent[int(last)] = value
            else:
                parent.insert(int(last), value)
        else:
            raise PatchError(f"index out of range in {path!r}")
    else:
        raise PatchError(f"doc is missing path: {path!r}")
    return doc


def json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test) on a copy of `doc`."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = _copy(doc)
    for number, op in enumerate(operations):
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"operation {number} needs 'op' and 'path'")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"operation {number} ({kind}) needs 'value'")
        if kind == "add":
            doc = _add_at(doc, path, _copy(op["value"]))
        elif kind == "remove":
            _remove_at(doc, path)
        elif kind == "replace":
            doc = _add_at(doc, path, _copy(op["value"]), replace=True)
        elif kind in ("move", "copy"):
            if "from" not in op:
                raise PatchError(f"operation {number} ({kind}) needs 'from'")
            value = _remove_at(doc, op["from"]) if kind == "move" else _copy(_get_at(doc, op["from"]))
            doc = _add_at(doc, path, value)
        elif kind == "test":
            if _get_at(doc, path) != op["value"]:
                raise PatchError(f"testing value {path} failed")
        else:
            raise PatchError(f"unexpected operation {kind!r}")
    return doc


def _copy(value: Any) -> Any:
    """A deep copy of JSON data (a JSON round trip is several times faster than copy.deepcopy)."""
    if isinstance(value, (dict, list)):
        return json.loads(json.dumps(value))
    return value


# --------------------------------------------------------------------------------- the store


@dataclass(frozen=True, slots=True)
class Change:
    """One write, as a watcher sees it."""

    resource_version: int
    group: str
    plural: str
    namespace: str
    name: str
    type: str  # ADDED | MODIFIED | DELETED
    object: JSON
    previous: JSON | None = None  # the object before a MODIFIED, for selector transitions


class Subscription:
    """A watch: changes after a resourceVersion, delivered through a queue.

    Iterate `events(timeout)` for (type, object) pairs; `close()` ends it (the server closes all
    subscriptions on stop, so blocked watchers return promptly).
    """

    _CLOSED = object()

    def __init__(self, store: Store, key: tuple[str, str] | None, namespace: str | None,
                 version: str | None, labels: list[Requirement], fields: list) -> None:
        self._store = store
        self.key = key
        self.namespace = namespace
        self.version = version
        self.labels = labels
        self.fields = fields
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.closed = False

    def translate(self, change: Change) -> Change | None:
        """The change as this watcher sees it, or None.

        With a selector, an object that starts matching arrives as ADDED and one that stops
        matching as DELETED, as the API server's watch cache reports them.
        """
        if self.key is not None and (change.group, change.plural) != self.key:
            return None
        if self.namespace and change.namespace != self.namespace:
            return None
        if not self.labels and not self.fields:
            return change
        now = _selected(change.object, self.labels, self.fields)
        if change.type != "MODIFIED":
            return change if now else None
        before = change.previous is not None and _selected(change.previous, self.labels, self.fields)
        if now and before:
            return change
        if now:
            return dataclasses.replace(change, type="ADDED")
        if before:
            return dataclasses.replace(change, type="DELETED")
        return None

    def _push(self, item: Any) -> None:
        self._queue.put(item)

    def next(self, timeout: float | None = None) -> Change | None:
        """The next change, or None on timeout or once closed."""
        if self.closed:
            return None
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is Subscription._CLOSED:
            self.closed = True
            return None
        return item

    def events(self, timeout: float | None = None) -> Iterator[tuple[str, JSON]]:
        """(type, object copy) pairs until `timeout` seconds pass with no change, or close()."""
        while True:
            change = self.next(timeout)
            if change is None:
                return
            yield change.type, self._store._present(change.object, self.version)

    def close(self) -> None:
        self._store._unsubscribe(self)
        self._queue.put(Subscription._CLOSED)


class Store:
    """All objects, one resourceVersion counter, one change log, and the watchers.

    The in-process fast path: `get`, `list`, `create`, `replace`, `patch`, `delete`, `subscribe`
    take a `steps.gateways.resources.Resource` (anything with group, version, plural) and raise
    `ApiError` exactly where the HTTP API answers with an error Status.
    """

    def __init__(self, registry: Registry | None = None, history: int = 200_000,
                 require_namespaces: bool = False) -> None:
        self.registry = registry or Registry()
        self.require_namespaces = require_namespaces
        self._lock = threading.RLock()
        self._objects: dict[tuple[str, str], dict[str, dict[str, JSON]]] = {}
        self._by_uid: dict[str, tuple[str, str, str, str]] = {}
        self._dependents: dict[str, set[str]] = {}
        self._log: deque[Change] = deque(maxlen=history)
        self._subscribers: list[Subscription] = []
        # Starts above 0: resourceVersion "0" means "any version" to a watch, so an empty store's
        # list must not hand it out.
        self._rv = 1
        self.writes: Counter[str] = Counter()

    # ----------------------------------------------------------- public fast path
    @property
    def resource_version(self) -> int:
        return self._rv

    def get(self, resource: ResourceLike, name: str, namespace: str | None = None) -> JSON | None:
        rt = self._type(resource)
        obj = self._objects.get((rt.group, rt.plural), {}).get(_ns(rt, namespace), {}).get(name)
        return None if obj is None else self._present(obj, resource.version)

    def list(self, resource: ResourceLike, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> list[JSON]:
        return self.list_with_version(resource, namespace, label_selector, field_selector)[0]

    def list_with_version(self, resource: ResourceLike, namespace: str | None = None,
                          label_selector: str | None = None,
                          field_selector: str | None = None) -> tuple[list[JSON], int]:
        rt = self._type(resource)
        items, rv = self._select(rt, namespace, parse_label_selector(label_selector),
                                 parse_field_selector(field_selector))
        return [self._present(o, resource.version) for o in items], rv

    def create(self, resource: ResourceLike, obj: JSON, namespace: str | None = None,
               keep_status: bool = True) -> JSON:
        """Create; the fast path keeps `status` by default (a controller creating and reporting
        at once, or a test seeding a scenario); HTTP creates reset it as the API server does."""
        rt = self._type(resource, (obj or {}).get("kind"))
        return self._present(self._create(rt, resource.version, _copy(obj), namespace, keep_status),
                             resource.version)

    def replace(self, resource: ResourceLike, obj: JSON, namespace: str | None = None,
                subresource: str | None = None) -> JSON:
        rt = self._type(resource)
        meta = obj.get("metadata") or {}
        return self._present(self._replace(rt, resource.version, _copy(obj), namespace or meta.get("namespace"),
                                           meta.get("name", ""), subresource), resource.version)

    def patch(self, resource: ResourceLike, name: str, patch: Any, namespace: str | None = None,
              subresource: str | None = None, patch_type: str = "merge") -> JSON:
        """`patch_type`: "merge" (RFC 7386; also used for strategic merge) or "json" (RFC 6902)."""
        rt = self._type(resource)
        return self._present(self._patch(rt, resource.version, name, namespace, _copy(patch), patch_type,
                                         subresource), resource.version)

    def delete(self, resource: ResourceLike, name: str, namespace: str | None = None,
               propagation: str = "Background") -> JSON:
        rt = self._type(resource)
        return self._present(self._delete(rt, name, namespace, propagation), resource.version)

    def subscribe(self, resource: ResourceLike | None = None, namespace: str | None = None,
                  resource_version: int | str | None = None, label_selector: str | None = None) -> Subscription:
        """Changes after `resource_version` (None: from now on; "0"/"": current objects as ADDED
        first) of one kind, or of every kind when `resource` is None."""
        rt = self._type(resource) if resource is not None else None
        return self._subscribe(rt, getattr(resource, "version", None), namespace,
                               None if resource_version is None else str(resource_version),
                               parse_label_selector(label_selector), [],
                               synthetic_added=resource_version is not None and str(resource_version) in ("", "0"))

    def snapshot(self) -> list[JSON]:
        """Every object of every kind (copies), for the demo's final cluster dump."""
        with self._lock:
            objects = [o for kinds in self._objects.values() for names in kinds.values() for o in names.values()]
        return [_copy(o) for o in objects]

    # ----------------------------------------------------------- internals
    def _type(self, resource: Any, kind_hint: str | None = None) -> ResourceType:
        if isinstance(resource, ResourceType):
            return resource
        if not self.registry.known(resource.group, resource.plural) and hasattr(resource, "namespaced"):
            # A Resource constant the registry has not met: learn its kind and scope from it.
            rt = ResourceType(resource.group, resource.plural, getattr(resource, "kind", None) or kind_hint
                              or _guess_kind(resource.plural), bool(resource.namespaced))
            self.registry.register(rt)
            return rt
        return self.registry.lookup(resource.group, resource.plural, kind_hint)

    def _present(self, obj: JSON, version: str | None) -> JSON:
        """A private copy for in-process callers, under the apiVersion they asked for."""
        return _copy(_view(obj, version))

    def _select(self, rt: ResourceType, namespace: str | None, labels: list[Requirement],
                fields: list) -> tuple[list[JSON], int]:
        with self._lock:
            kinds = self._objects.get((rt.group, rt.plural), {})
            if rt.namespaced and namespace:
                pools = [kinds.get(namespace, {})]
            else:
                pools = list(kinds.values())
            items = [o for pool in pools for o in pool.values() if _selected(o, labels, fields)]
            rv = self._rv
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        return items, rv

    def _bucket(self, rt: ResourceType, namespace: str) -> dict[str, JSON]:
        return self._objects.setdefault((rt.group, rt.plural), {}).setdefault(namespace, {})

    def _record(self, rt: ResourceType, kind: str, obj: JSON, previous: JSON | None = None) -> None:
        meta = obj["metadata"]
        change = Change(self._rv, rt.group, rt.plural, meta.get("namespace", ""), meta["name"], kind, obj, previous)
        self._log.append(change)
        for sub in self._subscribers:
            seen = sub.translate(change)
            if seen is not None:
                sub._push(seen)

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _index_owners(self, obj: JSON, old: JSON | None) -> None:
        uid = obj["metadata"]["uid"]
        before = {r.get("uid") for r in ((old or {}).get("metadata") or {}).get("ownerReferences") or []}
        after = {r.get("uid") for r in (obj["metadata"].get("ownerReferences") or [])}
        for owner in before - after:
            self._dependents.get(owner, set()).discard(uid)
        for owner in after - before:
            if owner:
                self._dependents.setdefault(owner, set()).add(uid)

    def _create(self, rt: ResourceType, version: str, obj: JSON, namespace: str | None,
                keep_status: bool) -> JSON:
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", "the request body must be a JSON object")
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = obj["metadata"] = {}
        body_ns = meta.get("namespace")
        if rt.namespaced:
            namespace = namespace or body_ns
            if not namespace:
                raise ApiError(400, "BadRequest", f"a namespace is required to create {_qualified(rt)}")
            if body_ns and body_ns != namespace:
                raise ApiError(400, "BadRequest", "the namespace of the provided object does not match "
                               "the namespace sent on the request")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
            namespace = ""
        with self._lock:
            if self.require_namespaces and rt.namespaced and \
                    self._objects.get(("", "namespaces"), {}).get("", {}).get(namespace) is None:
                raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found',
                               {"name": namespace, "kind": "namespaces"})
            bucket = self._bucket(rt, namespace)
            name = meta.get("name")
            if not name:
                prefix = meta.get("generateName")
                if not prefix:
                    raise _invalid(rt, "", "metadata.name: Required value: name or generateName is required")
                for _ in range(100):
                    name = prefix + "".join(random.choices("bcdfghjklmnpqrstvwxz2456789", k=5))
                    if name not in bucket:
                        break
                meta["name"] = name
            if name in bucket:
                raise ApiError(409, "AlreadyExists", f'{_qualified(rt)} "{name}" already exists',
                               {"name": name, "group": rt.group, "kind": rt.plural})
            obj["apiVersion"] = f"{rt.group}/{version}" if rt.group else version
            obj["kind"] = obj.get("kind") or rt.kind
            if rt.status_subresource and not keep_status and not rt.status_on_create:
                obj.pop("status", None)
            if (rt.group, rt.plural) == ("", "namespaces"):
                obj.setdefault("status", {})["phase"] = "Active"
            meta["uid"] = str(uuid.uuid4())
            meta["resourceVersion"] = self._next_rv()
            meta["creationTimestamp"] = _now()
            meta["generation"] = 1
            meta.pop("deletionTimestamp", None)
            bucket[name] = obj
            self._by_uid[meta["uid"]] = (rt.group, rt.plural, namespace, name)
            self._index_owners(obj, None)
            self.writes["create"] += 1
            self._record(rt, "ADDED", obj)
            return obj

    def _current(self, rt: ResourceType, namespace: str | None, name: str) -> JSON:
        obj = self._objects.get((rt.group, rt.plural), {}).get(_ns(rt, namespace), {}).get(name)
        if obj is None:
            raise _not_found(rt, name)
        return obj

    def _replace(self, rt: ResourceType, version: str, new: JSON, namespace: str | None, name: str,
                 subresource: str | None) -> JSON:
        if not isinstance(new, dict):
            raise ApiError(400, "BadRequest", "the request body must be a JSON object")
        with self._lock:
            old = self._current(rt, namespace, name)
            if subresource == "scale":
                return self._write_scale(rt, old, new, name)
            return self._commit(rt, old, new, subresource, "update")

    def _patch(self, rt: ResourceType, version: str, name: str, namespace: str | None, patch: Any,
               patch_type: str, subresource: str | None) -> JSON:
        with self._lock:
            old = self._current(rt, namespace, name)
            base = self._scale_of(rt, old) if subresource == "scale" else old
            try:
                if patch_type == "json":
                    new = json_patch(base, patch)
                else:
                    if not isinstance(patch, dict):
                        raise PatchError("a merge patch must be a JSON object")
                    new = merge_patch(base, patch)
            except PatchError as error:
                raise _invalid(rt, name, str(error)) from None
            if not isinstance(new, dict):
                raise _invalid(rt, name, "the patched object is not a JSON object")
            if subresource == "scale":
                return self._write_scale(rt, old, new, name)
            return self._commit(rt, old, new, subresource, "patch")

    def _commit(self, rt: ResourceType, old: JSON, new: JSON, subresource: str | None, verb: str) -> JSON:
        """Apply the API server's update rules to `new` and store it (caller holds the lock)."""
        old_meta = old["metadata"]
        meta = new.get("metadata") if isinstance(new.get("metadata"), dict) else {}
        name = old_meta["name"]
        if meta.get("resourceVersion") not in (None, "", old_meta["resourceVersion"]):
            raise _conflict(rt, name)
        if meta.get("name") not in (None, name):
            raise ApiError(400, "BadRequest", f'the name of the object ({meta.get("name")}) does not match '
                           f"the name on the URL ({name})")
        if subresource == "status":
            result = dict(old)
            if "status" in new:
                result["status"] = new["status"]
            else:
                result.pop("status", None)
            result["metadata"] = dict(old_meta)
        else:
            result = dict(new)
            if rt.status_subresource:
                if "status" in old:
                    result["status"] = old["status"]
                else:
                    result.pop("status", None)
            result["metadata"] = dict(meta)
            for fixed in ("uid", "creationTimestamp", "namespace", "name", "generation", "deletionTimestamp",
                          "deletionGracePeriodSeconds"):
                if fixed in old_meta:
                    result["metadata"][fixed] = old_meta[fixed]
                else:
                    result["metadata"].pop(fixed, None)
            result["apiVersion"] = old["apiVersion"]
            result["kind"] = old["kind"]
            if _spec_of(result) != _spec_of(old):
                result["metadata"]["generation"] = int(old_meta.get("generation") or 1) + 1
        if result == old:
            return old  # no-op writes keep the resourceVersion and emit no event, as in Kubernetes
        result["metadata"]["resourceVersion"] = self._next_rv()
        self._store_update(rt, old, result)
        self.writes[verb] += 1
        if result["metadata"].get("deletionTimestamp") and not result["metadata"].get("finalizers"):
            self._remove(rt, result, "Background")
        else:
            self._record(rt, "MODIFIED", result, old)
        return result

    def _store_update(self, rt: ResourceType, old: JSON, result: JSON) -> None:
        meta = result["metadata"]
        self._bucket(rt, meta.get("namespace", ""))[meta["name"]] = result
        self._index_owners(result, old)

    def _scale_of(self, rt: ResourceType, obj: JSON) -> JSON:
        if rt.scale is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource "
                           f"({_qualified(rt)}/scale)")
        meta = obj["metadata"]
        selector = _dig(obj, rt.scale.selector)
        if isinstance(selector, dict):
            selector = ",".join(f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items())
        scale = {"apiVersion": "autoscaling/v1", "kind": "Scale",
                 "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                                   "creationTimestamp") if k in meta},
                 "spec": {"replicas": int(_dig(obj, rt.scale.replicas) or 0)},
                 "status": {"replicas": int(_dig(obj, rt.scale.status_replicas) or 0)}}
        if selector:
            scale["status"]["selector"] = selector
        return scale

    def _write_scale(self, rt: ResourceType, old: JSON, scale: JSON, name: str) -> JSON:
        self._scale_of(rt, old)
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise _invalid(rt, name, f"spec.replicas: Invalid value: {replicas!r}: must be a non-negative integer")
        new = _copy(old)
        new["metadata"]["resourceVersion"] = (scale.get("metadata") or {}).get("resourceVersion") or \
            old["metadata"]["resourceVersion"]
        target = new
        for key in rt.scale.replicas[:-1]:
            target = target.setdefault(key, {})
        target[rt.scale.replicas[-1]] = replicas
        return self._scale_of(rt, self._commit(rt, old, new, None, "patch"))

    def _delete(self, rt: ResourceType, name: str, namespace: str | None, propagation: str) -> JSON:
        with self._lock:
            obj = self._current(rt, namespace, name)
            self.writes["delete"] += 1
            if obj["metadata"].get("finalizers"):
                if obj["metadata"].get("deletionTimestamp"):
                    return obj
                new = _copy(obj)
                new["metadata"]["deletionTimestamp"] = _now()
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                new["metadata"]["resourceVersion"] = self._next_rv()
                self._store_update(rt, obj, new)
                self._record(rt, "MODIFIED", new, obj)
                return new
            self._remove(rt, obj, propagation)
            return obj

    def _remove(self, rt: ResourceType, obj: JSON, propagation: str) -> None:
        """Remove the object, then collect its dependents (caller holds the lock).

        Background and Foreground propagation both delete dependents right after the owner
        (synchronously, so tests see a settled state); Orphan strips the ownerReferences instead.
        """
        meta = obj["metadata"]
        namespace, name, uid = meta.get("namespace", ""), meta["name"], meta["uid"]
        self._bucket(rt, namespace).pop(name, None)
        self._by_uid.pop(uid, None)
        self._index_owners({"metadata": {"uid": uid}}, obj)
        final = _copy(obj)
        final["metadata"]["resourceVersion"] = self._next_rv()
        self._record(rt, "DELETED", final)
        dependents = sorted(self._dependents.pop(uid, set()))
        for dep_uid in dependents:
            where = self._by_uid.get(dep_uid)
            if where is None:
                continue
            group, plural, dep_ns, dep_name = where
            dep_rt = self.registry.lookup(group, plural)
            dep = self._objects[(group, plural)][dep_ns][dep_name]
            refs = dep["metadata"].get("ownerReferences") or []
            if propagation == "Orphan":
                new = _copy(dep)
                new["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid] or None
                if new["metadata"]["ownerReferences"] is None:
                    del new["metadata"]["ownerReferences"]
                new["metadata"]["resourceVersion"] = self._next_rv()
                self._store_update(dep_rt, dep, new)
                self._record(dep_rt, "MODIFIED", new, dep)
            elif not any(r.get("uid") in self._by_uid for r in refs if r.get("uid") != uid):
                self.writes["gc-delete"] += 1
                self._delete(dep_rt, dep_name, dep_ns or None, "Background")
        if (rt.group, rt.plural) == ("", "namespaces"):
            for (group, plural), spaces in list(self._objects.items()):
                for dep in list(spaces.get(name, {}).values()):
                    self._delete(self.registry.lookup(group, plural), dep["metadata"]["name"], name,
                                 "Background")

    def _subscribe(self, rt: ResourceType | None, version: str | None, namespace: str | None,
                   resource_version: str | None, labels: list[Requirement], fields: list,
                   synthetic_added: bool) -> Subscription:
        key = (rt.group, rt.plural) if rt else None
        sub = Subscription(self, key, namespace if (rt is None or rt.namespaced) else None, version, labels, fields)
        with self._lock:
            if synthetic_added and rt is not None:
                for obj in self._select(rt, namespace, labels, fields)[0]:
                    meta = obj["metadata"]
                    sub._push(Change(int(meta["resourceVersion"]), rt.group, rt.plural,
                                     meta.get("namespace", ""), meta["name"], "ADDED", obj))
            elif resource_version not in (None, "", "0"):
                try:
                    since = int(resource_version)
                except ValueError:
                    raise ApiError(400, "BadRequest", f"invalid resourceVersion {resource_version!r}") from None
                if self._log and since < self._log[0].resource_version - 1:
                    raise ApiError(410, "Expired", f"too old resource version: {since} "
                                   f"({self._log[0].resource_version - 1})")
                replay = []
                for change in reversed(self._log):
                    if change.resource_version <= since:
                        break
                    seen = sub.translate(change)
                    if seen is not None:
                        replay.append(seen)
                for change in reversed(replay):
                    sub._push(change)
            self._subscribers.append(sub)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            if sub in self._subscribers:
                self._subscribers.remove(sub)

    def close_watches(self) -> None:
        with self._lock:
            subs = list(self._subscribers)
        for sub in subs:
            sub.close()


def _view(obj: JSON, version: str | None) -> JSON:
    """The object under the requested version (shallow: only for serialising right away)."""
    if not version:
        return obj
    group = obj.get("apiVersion", "").rpartition("/")[0]
    api_version = f"{group}/{version}" if group else version
    return obj if obj.get("apiVersion") == api_version else {**obj, "apiVersion": api_version}


def _ns(rt: ResourceType, namespace: str | None) -> str:
    return (namespace or "") if rt.namespaced else ""


def _spec_of(obj: JSON) -> JSON:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------- faults


@dataclass
class _Fault:
    remaining: int
    status: int | None = None
    delay: float = 0.0
    method: str | None = None
    path: str | None = None
    retry_after: float | None = None
    after_commit: bool = False
    """Serve the request (the write is committed), then answer `status` instead, or, with status 0,
    close the connection without any answer: the client cannot know the write happened."""
    then_unavailable: int = 0
    """After an `after_commit` fault: answer the next N requests (any) with 503, an outage."""

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and (self.path is None or self.path in path)


class Faults:
    """Failures injected into the next matching requests, to test retries over real sockets.

    `fail_next(2, status=503)` answers the next two requests with a 503 Status;
    `delay_next(1, 3.0)` holds the next request 3 s before serving it (a client timeout);
    `commit_then_fail(1, status=504)` serves the next request (a write is committed) and then
    answers 504 instead of the result; `status=0` closes the connection with no answer at all
    (a lost answer: the client cannot tell whether its write happened); `then_unavailable=N`
    answers the N requests after it with 503 (the API stays down longer than the client's patience);
    `method`/`path` (a substring of the URL path) restrict which requests are hit.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[_Fault] = []
        self.injected = 0

    def fail_next(self, n: int = 1, status: int = 500, *, method: str | None = None, path: str | None = None,
                  retry_after: float | None = None) -> None:
        with self._lock:
            self._rules.append(_Fault(n, status=status, method=method, path=path, retry_after=retry_after))

    def delay_next(self, n: int, seconds: float, *, method: str | None = None, path: str | None = None) -> None:
        with self._lock:
            self._rules.append(_Fault(n, delay=seconds, method=method, path=path))

    def commit_then_fail(self, n: int = 1, status: int = 504, *, method: str | None = None,
                         path: str | None = None, then_unavailable: int = 0) -> None:
        with self._lock:
            self._rules.append(_Fault(n, status=status, method=method, path=path, after_commit=True,
                                      then_unavailable=then_unavailable))

    def _outage(self, n: int) -> None:
        """Fail the next `n` requests with 503, before any other rule."""
        if n > 0:
            with self._lock:
                self._rules.insert(0, _Fault(n, status=503))

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def take(self, method: str, path: str) -> _Fault | None:
        with self._lock:
            for rule in self._rules:
                if rule.remaining > 0 and rule.matches(method, path):
                    rule.remaining -= 1
                    self.injected += 1
                    if rule.remaining == 0:
                        self._rules.remove(rule)
                    return rule
        return None


# --------------------------------------------------------------------------------- HTTP


@dataclass
class _Target:
    group: str
    version: str
    namespace: str | None
    plural: str
    name: str | None
    subresource: str | None


def _parse_path(path: str) -> _Target | None:
    parts = [unquote(p) for p in path.strip("/").split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return None
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3 and not (group == "" and len(rest) == 3
                                                          and rest[2] in ("status", "finalize")):
        namespace, rest = rest[1], rest[2:]
    if len(rest) > 3:
        return None
    return _Target(group, version, namespace, rest[0], rest[1] if len(rest) > 1 else None,
                   rest[2] if len(rest) > 2 else None)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate small writes; with Nagle on, every kept-alive request
    # after the first waits ~40 ms for the client's delayed ACK.
    disable_nagle_algorithm = True
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    # ------------------------------------------------------------------
    def _serve(self, method: str) -> None:
        api: ApiServer = self.server.api
        split = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        api._count_request(method)
        fault = api.faults.take(method, split.path)
        if fault is not None and fault.after_commit:
            self._serve_then_fail(api, method, split.path, query, raw, fault)
            return
        if fault is not None:
            if fault.delay:
                time.sleep(fault.delay)
            if fault.status:
                headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
                reason = {429: "TooManyRequests", 503: "ServiceUnavailable", 504: "Timeout"}.get(
                    fault.status, "InternalError")
                self._send(fault.status, ApiError(fault.status, reason, f"injected fault ({fault.status})").status(),
                           headers)
                return
        try:
            if method != "GET":
                api._count_write(method, split.path)
            self._route(method, split.path, query, raw)
        except ApiError as error:
            self._send(error.code, error.status())
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as error:  # noqa: BLE001 - the API must answer, not drop the connection
            self._send(500, ApiError(500, "InternalError", f"{type(error).__name__}: {error}").status())

    def _serve_then_fail(self, api: ApiServer, method: str, path: str, query: dict[str, str], raw: bytes,
                         fault: _Fault) -> None:
        """Commit the request as usual, drop its answer, then fail (or hang up) instead."""
        self._swallow = True
        try:
            if method != "GET":
                api._count_write(method, path)
            self._route(method, path, query, raw)
        except Exception:  # noqa: BLE001, S110 - whatever the request did, the client sees only the fault
            pass
        finally:
            self._swallow = False
        api.faults._outage(fault.then_unavailable)
        if not fault.status:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        reason = {503: "ServiceUnavailable", 504: "Timeout"}.get(fault.status, "InternalError")
        self._send(fault.status, ApiError(fault.status, reason, f"injected fault after commit ({fault.status})"
                                          ).status())

    def _route(self, method: str, path: str, query: dict[str, str], raw: bytes) -> None:
        api: ApiServer = self.server.api
        store = api.store
        if method == "GET" and path in ("/version", "/version/"):
            self._send(200, {"major": "1", "minor": "34", "gitVersion": "v1.34.0-gpuaas", "platform": "local"})
            return
        if method == "GET" and path in ("/healthz", "/readyz", "/livez"):
            self._send(200, "ok")
            return
        if method == "GET" and path in ("/api", "/api/"):
            self._send(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
            return
        if method == "GET" and path in ("/apis", "/apis/"):
            groups = [{"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                       "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}}
                      for g, vs in sorted(store.registry.groups().items()) if g]
            self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
            return
        discovery = re.fullmatch(r"/api/(v1)/?|/apis/([^/]+)/([^/]+)/?", path)
        if method == "GET" and discovery:
            group, version = ("", "v1") if discovery.group(1) else (discovery.group(2), discovery.group(3))
            self._send(200, _resource_list(store.registry, group, version))
            return
        target = _parse_path(path)
        if target is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        body: Any = None
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if raw and ("protobuf" in content_type or "cbor" in content_type or "yaml" in content_type):
            raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format "
                           f"({content_type}); this server accepts JSON only")
        if raw:
            try:
                body = json.loads(raw)
            except ValueError as error:
                raise ApiError(400, "BadRequest", f"the request body is not valid JSON: {error}") from None
        kind_hint = body.get("kind") if method == "POST" and isinstance(body, dict) else None
        store.registry.note_version(target.group, target.version)
        rt = store.registry.lookup(target.group, target.plural, kind_hint)
        if target.namespace and not rt.namespaced:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource "
                           f"({_qualified(rt)} is cluster-scoped)")
        if target.name is not None and rt.namespaced and not target.namespace:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource "
                           f"({_qualified(rt)} is namespaced)")
        if target.subresource not in (None, "status", "scale"):
            raise ApiError(404, "NotFound", f"the server could not find the requested resource "
                           f"({target.subresource})")
        if target.subresource == "status" and not rt.status_subresource:
            raise ApiError(404, "NotFound", f"{_qualified(rt)} has no status subresource")
        version = target.version
        if target.name is None:
            if method == "GET":
                self._collection(rt, target, query)
            elif method == "POST":
                obj = store._create(rt, version, body, target.namespace, keep_status=False)
                self._send(201, _view(obj, version))
            else:
                raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on a collection")
            return
        name = target.name
        if method == "GET":
            obj = store._current(rt, target.namespace, name)
            if target.subresource == "scale":
                self._send(200, store._scale_of(rt, obj))
            else:
                self._send(200, _view(obj, version))
        elif method == "PUT":
            obj = store._replace(rt, version, body, target.namespace, name, target.subresource)
            self._send(200, obj if target.subresource == "scale" else _view(obj, version))
        elif method == "PATCH":
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            if content_type == "application/json-patch+json":
                patch_type = "json"
            elif content_type in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                patch_type = "merge"
            else:
                raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown "
                               f"format ({content_type or 'none'}); accepted: application/json-patch+json, "
                               "application/merge-patch+json, application/strategic-merge-patch+json")
            obj = store._patch(rt, version, name, target.namespace, body, patch_type, target.subresource)
            self._send(200, obj if target.subresource == "scale" else _view(obj, version))
        elif method == "DELETE":
            propagation = (body or {}).get("propagationPolicy") if isinstance(body, dict) else None
            propagation = query.get("propagationPolicy") or propagation or "Background"
            obj = store._delete(rt, name, target.namespace, propagation)
            self._send(200, _view(obj, version))
        else:
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported")

    def _collection(self, rt: ResourceType, target: _Target, query: dict[str, str]) -> None:
        store = self.server.api.store
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"))
        if query.get("watch") in ("true", "1"):
            self._watch(rt, target, query, labels, fields)
            return
        items, rv = store._select(rt, target.namespace, labels, fields)
        version = target.version
        api_version = f"{rt.group}/{version}" if rt.group else version
        meta: JSON = {"resourceVersion": str(rv)}
        limit = int(query["limit"]) if str(query.get("limit") or "").isdigit() and int(query["limit"]) > 0 else 0
        if limit:
            # limit/continue as the API server pages: items in (namespace, name) order, the token says
            # where the next page starts (the engine's token is that position, the real one is opaque).
            items = sorted(items, key=lambda o: ((o.get("metadata") or {}).get("namespace") or "",
                                                 (o.get("metadata") or {}).get("name") or ""))
            start = int(query["continue"]) if str(query.get("continue") or "").isdigit() else 0
            if start + limit < len(items):
                meta["continue"] = str(start + limit)
                meta["remainingItemCount"] = len(items) - start - limit
            items = items[start:start + limit]
        # Like the real API server, list items carry no apiVersion/kind.
        payload = [{k: v for k, v in o.items() if k not in ("apiVersion", "kind")} for o in items]
        self._send(200, {"apiVersion": api_version, "kind": f"{rt.kind}List", "metadata": meta, "items": payload})

    def _watch(self, rt: ResourceType, target: _Target, query: dict[str, str], labels: list[Requirement],
               fields: list) -> None:
        api: ApiServer = self.server.api
        resource_version = query.get("resourceVersion")
        try:
            sub = api.store._subscribe(rt, target.version, target.namespace, resource_version, labels, fields,
                                       synthetic_added=resource_version in (None, "", "0"))
        except ApiError as error:
            if error.code != 410:
                raise
            self._start_stream()
            self._chunk({"type": "ERROR", "object": error.status()})
            self._end_stream()
            return
        timeout = query.get("timeoutSeconds")
        deadline = time.monotonic() + float(timeout) if timeout else None
        self._start_stream()
        try:
            while not api._stopping.is_set():
                wait = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
                if wait <= 0:
                    break
                change = sub.next(wait)
                if change is None:
                    if sub.closed or self._client_gone():
                        break
                    continue
                self._chunk({"type": change.type, "object": _view(change.object, target.version)})
            self._end_stream()
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            sub.close()
        self.close_connection = True

    # ------------------------------------------------------------------
    def _client_gone(self) -> bool:
        """True when the watcher hung up: an idle watch must not hold a thread forever."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def _chunk(self, event: JSON) -> None:
        data = json.dumps(event, separators=(",", ":")).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    _swallow = False
    """True while a commit-then-fail fault serves a request: its real answer is dropped."""

    def _send(self, code: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        if self._swallow:
            return
        data = (payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json" if not isinstance(payload, str) else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


def _resource_list(registry: Registry, group: str, version: str) -> JSON:
    """APIResourceList for discovery (kubectl maps `kubectl get workloads` through it)."""
    verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
    resources: list[JSON] = []
    for t in registry.resources_of(group):
        resources.append({"name": t.plural, "singularName": t.kind.lower(), "namespaced": t.namespaced,
                          "kind": t.kind, "verbs": verbs})
        if t.status_subresource:
            resources.append({"name": f"{t.plural}/status", "singularName": "", "namespaced": t.namespaced,
                              "kind": t.kind, "verbs": ["get", "patch", "update"]})
        if t.scale is not None:
            resources.append({"name": f"{t.plural}/scale", "singularName": "", "namespaced": t.namespaced,
                              "group": "autoscaling", "version": "v1", "kind": "Scale",
                              "verbs": ["get", "patch", "update"]})
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version, "resources": resources}


class _HTTPServer(QuietHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    api: ApiServer


_WRITE_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass
class ApiServer:
    """The server: `start() -> url`, `stop()`, `store` (fast path), `faults`, request counters.

    `writes` counts write requests received over HTTP by verb (create, update, patch, delete),
    including ones the API refused: a test asserting "no write" means "not even attempted".
    `writes_by_resource` counts (verb, plural). `requests` counts every HTTP request by method.
    """

    port: int = 0
    host: str = "127.0.0.1"
    require_namespaces: bool = False
    history: int = 200_000
    store: Store = field(init=False)
    faults: Faults = field(init=False, default_factory=Faults)
    writes: Counter = field(init=False, default_factory=Counter)
    writes_by_resource: Counter = field(init=False, default_factory=Counter)
    requests: Counter = field(init=False, default_factory=Counter)
    url: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self.store = Store(history=self.history, require_namespaces=self.require_namespaces)
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._count_lock = threading.Lock()

    @property
    def registry(self) -> Registry:
        return self.store.registry

    @property
    def write_count(self) -> int:
        return sum(self.writes.values())

    def start(self) -> str:
        if self._httpd is not None:
            return self.url
        self._stopping.clear()
        self._httpd = _HTTPServer((self.host, self.port), _Handler)
        self._httpd.api = self
        self.port = self._httpd.server_address[1]
        self.url = f"http://{self.host}:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        name=f"apiserver:{self.port}", daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._stopping.set()
        self.store.close_watches()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def reset_counters(self) -> None:
        with self._count_lock:
            self.writes.clear()
            self.writes_by_resource.clear()
            self.requests.clear()

    def _count_request(self, method: str) -> None:
        with self._count_lock:
            self.requests[method] += 1

    def _count_write(self, method: str, path: str) -> None:
        verb = _WRITE_VERBS.get(method, method.lower())
        target = _parse_path(path)
        with self._count_lock:
            self.writes[verb] += 1
            if target is not None:
                self.writes_by_resource[(verb, target.plural)] += 1

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_forever(port: int = 0, on_ready: Callable[[str], None] | None = None) -> None:
    """Run a server in the foreground (`python -m engine.apiserver [PORT]`), for manual poking."""
    server = ApiServer(port=port)
    url = server.start()
    (on_ready or (lambda u: print(f"serving the Kubernetes API on {u}", flush=True)))(url)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


def main(argv: list[str]) -> int:
    """`python -m engine.apiserver [PORT]`: a wrong PORT is one line and exit 2, not a traceback."""
    import sys

    name = "python -m engine.apiserver"
    if argv and argv[0] in ("-h", "--help"):
        print(f"usage: {name} [PORT]  (serves on 127.0.0.1; PORT 0 or none: a free port)")
        return 0
    if len(argv) > 1:
        print(f"{name}: expected one PORT (or none), found {len(argv)} arguments", file=sys.stderr)
        return 2
    text = argv[0] if argv else "0"
    if not text.isdigit() or int(text) > 65535:
        print(f"{name}: expected a TCP port 0-65535 (0: a free one), found {text!r}", file=sys.stderr)
        return 2
    try:
        serve_forever(int(text))
    except OSError as error:
        print(f"{name}: cannot listen on 127.0.0.1:{text}: {(error.strerror or str(error)).lower()}; "
              "pick another port (0: a free one)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
