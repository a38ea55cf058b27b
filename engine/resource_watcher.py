"""The `resource` event source: LIST then WATCH over the Kubernetes API, as Argo Events' informer does.

For each `spec.resource.<eventName>` of a rendered EventSource this emits Argo Events resource
events (`{type: ADD|UPDATE|DELETE, body, oldBody, group, version, resource, metadata}`) in the
CloudEvent envelope. Like the real one (facts: argo-events.md): every (re)start LISTs and emits
ADD for every existing object; UPDATE fires on every resourceVersion change, status writes
included, with the previous object as oldBody; a re-list with an identical resourceVersion is
dropped. It talks to the API server over HTTP with the official client, like a pod would: the
engine's server without credentials (`kube_url`), or a real kube-apiserver with a client
`configuration` (TLS and a ServiceAccount token, as the real-stack tier watches Workloads).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import kubernetes
import kubernetes.client.rest

from engine.events import envelope

log = logging.getLogger(__name__)

EventSink = Callable[[dict[str, Any]], None]
WATCH_TYPES = {"ADDED": "ADD", "MODIFIED": "UPDATE", "DELETED": "DELETE"}


@dataclass(frozen=True)
class WatchedResource:
    """One `spec.resource.<eventName>` block of a rendered EventSource."""

    event_source: str
    event_name: str
    group: str
    version: str
    resource: str
    namespace: str | None = None
    event_types: tuple[str, ...] = ("ADD", "UPDATE", "DELETE")
    label_selector: str | None = None
    prefix: str | None = None
    after_start: bool = False
    metadata: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_event_source(cls, event_source: dict[str, Any]) -> list[WatchedResource]:
        name = event_source["metadata"]["name"]
        watched = []
        for event_name, spec in ((event_source.get("spec") or {}).get("resource") or {}).items():
            for required in ("version", "resource", "eventTypes"):
                if not spec.get(required):
                    raise ValueError(f"EventSource {name} spec.resource.{event_name}.{required}: required, "
                                     "found none (re-render the manifests)")
            flt = spec.get("filter") or {}
            if flt.get("fields"):
                raise ValueError(f"EventSource {name} spec.resource.{event_name}.filter.fields: not supported "
                                 "by the local engine's resource watcher")
            selector = ",".join(_label_requirement(r) for r in flt.get("labels") or []) or None
            watched.append(cls(event_source=name, event_name=event_name, group=spec.get("group", ""),
                               version=spec["version"], resource=spec["resource"],
                               namespace=spec.get("namespace") or None,
                               event_types=tuple(spec["eventTypes"]), label_selector=selector,
                               prefix=flt.get("prefix") or None, after_start=bool(flt.get("afterStart")),
                               metadata=dict(spec.get("metadata") or {})))
        return watched

    def path(self) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespace:
            base += f"/namespaces/{self.namespace}"
        return f"{base}/{self.resource}"


def _label_requirement(requirement: dict[str, Any]) -> str:
    operation = requirement.get("operation") or "="
    return f"{requirement['key']}{operation}{requirement.get('value', '')}"


class ResourceWatcher:
    """Watches one resource and emits its events to `sink` (one thread, events in order)."""

    def __init__(self, kube_url: str, watched: WatchedResource, sink: EventSink,
                 clock: Callable[[], datetime] | None = None, watch_timeout_seconds: int = 5,
                 configuration: kubernetes.client.Configuration | None = None) -> None:
        self.watched = watched
        self.sink = sink
        self.clock = clock or (lambda: datetime.now(UTC))
        self.watch_timeout_seconds = watch_timeout_seconds
        if configuration is None:
            configuration = kubernetes.client.Configuration()
            configuration.host = kube_url
        configuration.host = configuration.host.rstrip("/")
        self.host = configuration.host
        self.rest = kubernetes.client.rest.RESTClientObject(configuration)
        self.headers = {"Accept": "application/json"}
        bearer = (configuration.auth_settings().get("BearerToken") or {}).get("value")
        if bearer:
            self.headers["Authorization"] = bearer
        self._known: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._started_at = datetime.now(UTC)
        self._thread: threading.Thread | None = None
        self.ready = threading.Event()
        self.emitted = 0

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        self._started_at = datetime.now(UTC)
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.watched.resource}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                resource_version = self._list()
                self.ready.set()
                while not self._stop.is_set():
                    resource_version = self._watch(resource_version)
                    if resource_version is None:  # 410 Gone: re-list as an informer does
                        break
            except Exception as error:  # noqa: BLE001 - a watcher keeps watching, as the pod would restart
                if self._stop.is_set():
                    return
                log.warning("watch of %s failed (%s); re-listing", self.watched.path(), error)
                self._stop.wait(0.5)

    # -- HTTP -------------------------------------------------------------------------------------

    def _request(self, query: list[tuple[str, str]], stream: bool) -> Any:
        """GET with the official client's REST layer; the urllib3 response, unread when streaming."""
        if self.watched.label_selector:
            query.append(("labelSelector", self.watched.label_selector))
        url = self.host + self.watched.path() + ("?" + urlencode(query) if query else "")
        response = self.rest.request("GET", url, headers=dict(self.headers),
                                     _request_timeout=(5, self.watch_timeout_seconds + 5) if stream else 10)
        if not 200 <= response.status < 300:
            response.read()
            raise RuntimeError(f"GET {url}: HTTP {response.status}: {response.data[:300]!r}")
        return response.response

    def _list(self) -> str:
        response = self._request([], stream=False)
        listing = json.loads(response.data)
        seen: dict[str, dict[str, Any]] = {}
        for item in listing.get("items") or []:
            uid = item["metadata"].get("uid") or item["metadata"]["name"]
            seen[uid] = item
            previous = self._known.get(uid)
            if previous is None:
                self._emit("ADD", item, None)
            elif previous["metadata"].get("resourceVersion") != item["metadata"].get("resourceVersion"):
                self._emit("UPDATE", item, previous)
        for uid, gone in list(self._known.items()):
            if uid not in seen:
                self._emit("DELETE", gone, None)
        self._known = seen
        return str((listing.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, resource_version: str) -> str | None:
        query = [("watch", "true"), ("timeoutSeconds", str(self.watch_timeout_seconds)),
                 ("allowWatchBookmarks", "true")]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        response = self._request(query, stream=True)
        try:
            buffer = b""
            for chunk in response.stream(4096, decode_content=True):
                if self._stop.is_set():
                    return resource_version
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        resource_version = self._handle(json.loads(line), resource_version)
                        if resource_version is None:
                            return None
            if buffer.strip():
                resource_version = self._handle(json.loads(buffer), resource_version)
        finally:
            response.release_conn()
        return resource_version

    def _handle(self, watch_event: dict[str, Any], resource_version: str) -> str | None:
        kind, obj = watch_event.get("type"), watch_event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                return None
            raise RuntimeError(f"watch error: {obj.get('message', obj)}")
        new_version = str((obj.get("metadata") or {}).get("resourceVersion") or resource_version)
        if kind == "BOOKMARK":
            return new_version
        uid = obj["metadata"].get("uid") or obj["metadata"]["name"]
        previous = self._known.get(uid)
        if kind == "DELETED":
            self._known.pop(uid, None)
            self._emit("DELETE", obj, None)
        elif kind == "ADDED" and previous is None:
            self._known[uid] = obj
            self._emit("ADD", obj, None)
        elif previous is None or previous["metadata"].get("resourceVersion") != obj["metadata"].get(
                "resourceVersion"):
            self._known[uid] = obj
            self._emit("UPDATE", obj, previous)
        return new_version

    # -- emission ---------------------------------------------------------------------------------

    def _emit(self, event_type: str, body: dict[str, Any], old_body: dict[str, Any] | None) -> None:
        watched = self.watched
        if event_type not in watched.event_types:
            return
        name = (body.get("metadata") or {}).get("name", "")
        if watched.prefix and not name.startswith(watched.prefix):
            return
        if watched.after_start and not self._after_start(event_type, body):
            return
        body = dict(body)
        body.setdefault("apiVersion", f"{watched.group}/{watched.version}" if watched.group else watched.version)
        data = {"type": event_type, "body": body, "oldBody": old_body, "group": watched.group,
                "version": watched.version, "resource": watched.resource, "metadata": watched.metadata or None}
        self.emitted += 1
        self.sink(envelope("resource", watched.event_source, watched.event_name, data, self.clock()))

    def _after_start(self, event_type: str, body: dict[str, Any]) -> bool:
        """`filter.afterStart`: ADD judged by creationTimestamp, UPDATE by the newest `Update` managedField."""
        metadata = body.get("metadata") or {}
        if event_type == "ADD":
            stamp = metadata.get("creationTimestamp")
        else:
            updates = [f.get("time") for f in metadata.get("managedFields") or []
                       if f.get("operation") == "Update" and f.get("time")]
            stamp = max(updates) if updates else None
        if not stamp:
            return event_type != "ADD"
        return datetime.fromisoformat(stamp) >= self._started_at.replace(microsecond=0)
