"""The Kubernetes API as a step sees it: generic paths, dict in, dict out, typed failures.

Built on the official client's REST layer (`kubernetes.client.rest.RESTClientObject`, which is
what `ApiClient.call_api` delegates to) and its `Configuration`/config loaders, but never on the
generated typed APIs: converting every object to a model and back costs more than the reaction.

Import cost matters: a step is a fresh process with a 0.6 s cold start budget, and
`import kubernetes` eagerly loads the kubeconfig loader, the dynamic client and jsonschema
(~0.4 s). `_import_rest_layer()` loads only `kubernetes.client.rest` and `.configuration`
(~0.1 s); the config loaders are imported only on the in-cluster or kubeconfig path.

Configuration, first match wins: `GPUAAS_KUBE_URL` (plain http, no auth: the local engine and
the tests), the in-cluster service account, then `$KUBECONFIG` / `~/.kube/config`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from steps.gateways.errors import (
    Conflict,
    KubernetesError,
    NoApiConfigured,
    NotFound,
    TransientError,
    from_status,
)
from steps.gateways.resources import EVENT, Resource

JSON = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
OCCURRENCE_ANNOTATION = "gpuaas.io/occurrence"
"""On an Event: the last happening it counted (see `KubernetesGateway.record_event`)."""
JSON_PATCH = "application/json-patch+json"


def _import_rest_layer() -> tuple[types.ModuleType, types.ModuleType, types.ModuleType]:
    """Import the client's REST layer without running `kubernetes/__init__.py`.

    WHY: that `__init__` imports `kubernetes.config` and `kubernetes.dynamic` (jsonschema,
    requests-oauthlib) for every user. A placeholder parent package is installed only for the
    duration of this import and removed afterwards, so a later plain `import kubernetes`
    elsewhere in the process runs the real `__init__` and finds the same submodules.
    """
    placeholder = None
    if "kubernetes" not in sys.modules:
        spec = importlib.util.find_spec("kubernetes")
        if spec is not None and spec.submodule_search_locations:
            placeholder = types.ModuleType("kubernetes")
            placeholder.__path__ = list(spec.submodule_search_locations)
            sys.modules["kubernetes"] = placeholder
    try:
        import urllib3.exceptions
        from kubernetes.client import configuration, rest
    finally:
        if placeholder is not None and sys.modules.get("kubernetes") is placeholder:
            del sys.modules["kubernetes"]
    return configuration, rest, urllib3.exceptions


_configuration_module, _rest, _urllib3_errors = _import_rest_layer()
Configuration = _configuration_module.Configuration


def load_configuration() -> Any:
    """Resolve where the API is: GPUAAS_KUBE_URL > in-cluster service account > kubeconfig."""
    url = os.environ.get("GPUAAS_KUBE_URL", "").strip()
    if url:
        return Configuration(host=url.rstrip("/"))
    configuration = Configuration()
    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            from kubernetes.config import incluster_config

            incluster_config.load_incluster_config(client_configuration=configuration)
            return configuration
        from kubernetes.config import kube_config

        # Read $KUBECONFIG now: the client captures it once, when kube_config is first imported.
        kube_config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None,
                                     client_configuration=configuration)
    except Exception as error:  # noqa: BLE001 - ConfigException, and TypeError/YAMLError for a malformed file
        where = os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise NoApiConfigured(f"expected a Kubernetes API to talk to (in a pod: the service account; else "
                              f"$KUBECONFIG or ~/.kube/config; locally: GPUAAS_KUBE_URL=http://127.0.0.1:PORT), "
                              f"found none usable ({where}: {type(error).__name__}: {error}); set KUBECONFIG or GPUAAS_KUBE_URL") from None
    return configuration


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded backoff for 5xx, 429, timeouts and refused connections.

    `attempts` counts every try; the waits between them are `first_delay * factor**i`
    (0.2, 0.4, 0.8 s by default: about 1.4 s of patience before a TransientError).
    """

    attempts: int = 4
    first_delay: float = 0.2
    factor: float = 2.0
    max_delay: float = 5.0

    def delay(self, retry: int) -> float:
        return min(self.first_delay * self.factor ** retry, self.max_delay)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubernetesGateway:
    """Generic Kubernetes API access over real HTTP with the official client's REST layer.

    Thread-safe: urllib3's pool manager is, and the gateway holds no per-call state.
    """

    def __init__(self, configuration: Any | None = None, *, url: str | None = None,
                 retry: RetryPolicy | None = None, timeout: float | tuple[float, float] = 10.0,
                 component: str = "gpuaas") -> None:
        if url is not None:
            configuration = Configuration(host=url.rstrip("/"))
        self.configuration = configuration if configuration is not None else load_configuration()
        # No urllib3-level retries: a read timeout retried silently by urllib3 would multiply the
        # wait; all retrying is ours (bounded, and visible in the error).
        self.configuration.retries = _urllib3_retry()
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        self.component = component
        self._rest = _rest.RESTClientObject(self.configuration)
        self._host = self.configuration.host.rstrip("/")

    # ---------------------------------------------------------------- reads
    def get(self, resource: Resource, name: str, namespace: str | None = None,
            subresource: str | None = None) -> JSON | None:
        """The object, or None when it does not exist."""
        try:
            obj = self._call("GET", resource.path(namespace, name, subresource))
        except NotFound:
            return None
        return obj if subresource else _with_type(resource, obj)

    def list(self, resource: Resource, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> list[JSON]:
        """Objects of one kind in a namespace (or all namespaces when namespace is None)."""
        return self.list_with_version(resource, namespace, label_selector, field_selector)[0]

    def list_pages(self, resource: Resource, namespace: str | None = None, label_selector: str | None = None,
                   limit: int = 500) -> Iterator[list[JSON]]:
        """The objects in pages of at most `limit` (the API's limit/continue): a caller that handles one page
        at a time holds one page in memory, not every object of a large cluster. A continue token that
        expired (410 Gone, after etcd compaction) raises PermanentError: list again from the start."""
        token = ""
        while True:
            query = {"limit": str(limit)}
            if label_selector:
                query["labelSelector"] = label_selector
            if token:
                query["continue"] = token
            body = self._call("GET", resource.path(namespace), query=query)
            yield [_with_type(resource, item) for item in body.get("items") or []]
            token = str((body.get("metadata") or {}).get("continue") or "")
            if not token:
                return

    def list_with_version(self, resource: Resource, namespace: str | None = None,
                          label_selector: str | None = None,
                          field_selector: str | None = None) -> tuple[list[JSON], str]:
        """Objects plus the collection resourceVersion, the point a watch continues from."""
        query = {}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        body = self._call("GET", resource.path(namespace), query=query)
        items = [_with_type(resource, item) for item in body.get("items") or []]
        return items, str((body.get("metadata") or {}).get("resourceVersion", ""))

    # ---------------------------------------------------------------- writes
    def create(self, resource: Resource, body: JSON, namespace: str | None = None) -> JSON:
        """Create the object; raises AlreadyExists (a Conflict) when the name is taken."""
        body = dict(body)
        body.setdefault("apiVersion", resource.api_version)
        body.setdefault("kind", resource.kind)
        namespace = namespace or (body.get("metadata") or {}).get("namespace")
        return _with_type(resource, self._call("POST", resource.path(namespace), body=body))

    def replace(self, resource: Resource, body: JSON, namespace: str | None = None,
                subresource: str | None = None) -> JSON:
        """PUT the whole object; a stale metadata.resourceVersion raises Conflict."""
        metadata = body.get("metadata") or {}
        namespace = namespace or metadata.get("namespace")
        return _with_type(resource, self._call(
            "PUT", resource.path(namespace, metadata["name"], subresource), body=body))

    def merge_patch(self, resource: Resource, name: str, patch: JSON, namespace: str | None = None,
                    subresource: str | None = None) -> JSON:
        """RFC 7386 merge patch. Put metadata.resourceVersion in the patch to make it conditional."""
        return self._call("PATCH", resource.path(namespace, name, subresource), body=patch,
                          content_type=MERGE_PATCH)

    def json_patch(self, resource: Resource, name: str, operations: list[JSON],
                   namespace: str | None = None, subresource: str | None = None) -> JSON:
        """RFC 6902 JSON patch; a failed `test` operation raises PermanentError (422)."""
        return self._call("PATCH", resource.path(namespace, name, subresource), body=list(operations),
                          content_type=JSON_PATCH)

    def delete(self, resource: Resource, name: str, namespace: str | None = None,
               propagation: str = "Background") -> JSON | None:
        """Delete the object (dependents are garbage-collected); None when it was already gone."""
        try:
            return self._call("DELETE", resource.path(namespace, name),
                              body={"kind": "DeleteOptions", "apiVersion": "v1",
                                    "propagationPolicy": propagation})
        except NotFound:
            return None

    def update_with_retry(self, resource: Resource, name: str, mutate: Callable[[JSON], JSON | None],
                          namespace: str | None = None, attempts: int = 5,
                          subresource: str | None = None) -> JSON:
        """Read, let `mutate(obj)` decide a merge patch (None = nothing to do), write conditionally.

        The patch carries the read resourceVersion, so a concurrent writer makes it fail with 409;
        then the object is read again and `mutate` decides again on the fresh state (it must be a
        pure function of the object). Returns the object as written (or as read when `mutate`
        returned None). Raises NotFound if the object does not exist, TransientError when every
        attempt conflicted.
        """
        last: Conflict | None = None
        for _ in range(max(1, attempts)):
            obj = self.get(resource, name, namespace)
            if obj is None:
                raise NotFound(404, f'{resource.plural} "{name}" not found', "NotFound",
                               method="GET", path=resource.path(namespace, name))
            patch = mutate(obj)
            if patch is None:
                return obj
            patch = dict(patch)
            metadata = dict(patch.get("metadata") or {})
            metadata["resourceVersion"] = obj["metadata"]["resourceVersion"]
            patch["metadata"] = metadata
            try:
                return self.merge_patch(resource, name, patch, namespace, subresource)
            except Conflict as error:
                last = error
        assert last is not None
        raise TransientError(409, f"gave up after {attempts} conflicting writes: {last.message}",
                             "Conflict", method="PATCH", path=resource.path(namespace, name))

    # ---------------------------------------------------------------- watch
    def watch(self, resource: Resource, namespace: str | None = None, resource_version: str | None = None,
              timeout_seconds: int | None = None, label_selector: str | None = None,
              ) -> Iterator[tuple[str, JSON]]:
        """Yield (type, object) for every change after `resource_version`; ends when the server
        closes the stream (timeoutSeconds). A 410 Gone raises PermanentError: re-list and re-watch.
        Without `resource_version` the current objects come first as ADDED. Closing the generator
        early (break) closes the connection.
        """
        query: dict[str, str] = {"watch": "true", "allowWatchBookmarks": "false"}
        if resource_version:
            query["resourceVersion"] = str(resource_version)
        if timeout_seconds is not None:
            query["timeoutSeconds"] = str(int(timeout_seconds))
        if label_selector:
            query["labelSelector"] = label_selector
        read_timeout = (timeout_seconds + 10.0) if timeout_seconds is not None else None
        response = self._send("GET", resource.path(namespace), query=query, stream=True,
                              timeout=(_connect_timeout(self.timeout), read_timeout))
        raw = response.response
        finished = False
        try:
            buffer = b""
            for chunk in raw.stream(65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    event = _watch_event(resource, line)
                    if event is not None:
                        yield event
            finished = True
            event = _watch_event(resource, buffer)
            if event is not None:
                yield event
        except (_urllib3_errors.ProtocolError, _urllib3_errors.ReadTimeoutError):
            return
        finally:
            if not finished:
                raw.close()  # abandoned mid-stream: the connection must not go back to the pool
            raw.release_conn()

    # ---------------------------------------------------------------- events
    def record_event(self, involved_object: JSON, reason: str, message: str, type: str = "Normal",
                     action: str | None = None, occurrence: str | None = None) -> JSON:
        """Create a core/v1 Event on the object, or bump count/lastTimestamp of the same event.

        The Event name is derived from (object uid or name, type, reason, message), as client-go's
        event correlator does with its aggregation key, so repeating a reaction does not flood
        `kubectl describe` with copies.

        `occurrence` names the happening the Event reports (a reaction run): recording it again
        (a create retried after its answer was lost, a retried attempt of the same run) finds the
        Event already carrying it (annotation gpuaas.io/occurrence) and changes nothing, so `count`
        counts happenings, which the per-tenant release limit relies on.
        """
        ref = _object_reference(involved_object)
        namespace = ref.get("namespace") or "default"
        key = "\x00".join([ref.get("uid") or "", ref["kind"], ref["name"], type, reason, message])
        name = f"{ref['name']}.{hashlib.sha256(key.encode()).hexdigest()[:16]}"
        now = _now()
        for _ in range(3):
            existing = self.get(EVENT, name, namespace)
            if existing is not None:
                seen = ((existing.get("metadata") or {}).get("annotations") or {}).get(OCCURRENCE_ANNOTATION)
                if occurrence and seen == occurrence:
                    return existing
                patch: JSON = {"count": int(existing.get("count") or 1) + 1, "lastTimestamp": now,
                               "message": message,
                               "metadata": {"resourceVersion": existing["metadata"]["resourceVersion"]}}
                if occurrence:
                    patch["metadata"]["annotations"] = {OCCURRENCE_ANNOTATION: occurrence}
                try:
                    return self.merge_patch(EVENT, name, patch, namespace)
                except (Conflict, NotFound):
                    continue
            body = {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": ref, "reason": reason, "message": message, "type": type,
                "source": {"component": self.component}, "reportingComponent": self.component,
                "reportingInstance": os.environ.get("HOSTNAME", self.component),
                "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            }
            if action:
                body["action"] = action
            if occurrence:
                body["metadata"]["annotations"] = {OCCURRENCE_ANNOTATION: occurrence}
            try:
                return self.create(EVENT, body, namespace)
            except Conflict:
                continue
        raise TransientError(409, f"event {namespace}/{name} kept changing while recording it", "Conflict")

    # ---------------------------------------------------------------- transport
    def _call(self, method: str, path: str, *, query: dict[str, str] | None = None,
              body: Any = None, content_type: str = "application/json") -> JSON:
        response = self._send(method, path, query=query, body=body, content_type=content_type)
        data = response.data
        return json.loads(data) if data else {}

    def _send(self, method: str, path: str, *, query: dict[str, str] | None = None, body: Any = None,
              content_type: str = "application/json", stream: bool = False,
              timeout: Any = None) -> Any:
        """One API call with bounded backoff on 5xx, 429 (honouring Retry-After up to max_delay),
        timeouts and refused connections. Writes are retried too: a create retried after a lost
        answer then meets AlreadyExists, which callers treat as "done" for fixed names.
        """
        url = self._host + path + (("?" + urlencode(query)) if query else "")
        timeout = timeout if timeout is not None else self.timeout
        # A write whose earlier try failed transiently may have been committed with its answer lost
        # (a 504 after the commit, a dropped connection): a 409 on the retry, or giving up, does not
        # mean "not written". Such errors carry maybe_committed; callers re-read (steps.effects).
        write = method != "GET"
        last: KubernetesError | None = None
        for attempt in range(max(1, self.retry.attempts)):
            if attempt:
                time.sleep(self._wait(attempt - 1, last))
            headers = {"Accept": "application/json", "Content-Type": content_type,
                       "User-Agent": f"{self.component}/steps", **self._auth_headers()}
            try:
                response = self._rest.request(method, url, headers=headers, body=body,
                                              _request_timeout=timeout)
            except (_urllib3_errors.HTTPError, OSError) as error:
                last = TransientError(0, f"{type(error).__name__}: {error}", "Unavailable",
                                      method=method, path=path)
                continue
            if 200 <= response.status < 300:
                if not stream:
                    response.read()
                return response
            response.read()
            text = response.data.decode("utf-8", "replace") if response.data else ""
            try:
                status_body = json.loads(text) if text else None
            except ValueError:
                status_body = None
            error = from_status(response.status, status_body, method=method, path=path, text=text)
            if not isinstance(error, TransientError):
                error.maybe_committed = write and last is not None
                raise error
            error.retry_after = _retry_after(response)  # type: ignore[attr-defined]
            last = error
        assert last is not None
        attempts = max(1, self.retry.attempts)
        gave_up = type(last)(last.status, f"{last.message} (gave up after {attempts} attempts)", last.reason,
                             method=method, path=path, body=last.body)
        gave_up.maybe_committed = write
        raise gave_up

    def _wait(self, retry: int, last: KubernetesError | None) -> float:
        delay = self.retry.delay(retry)
        hinted = getattr(last, "retry_after", None)
        if hinted:
            delay = min(max(delay, hinted), self.retry.max_delay)
        return delay

    def _auth_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        for setting in self.configuration.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        return headers

    def close(self) -> None:
        self._rest.close()


def _urllib3_retry() -> Any:
    from urllib3.util.retry import Retry

    return Retry(total=0, connect=0, read=0, status=0, redirect=0, other=0, raise_on_status=False)


def _connect_timeout(timeout: float | tuple[float, float]) -> float:
    return timeout[0] if isinstance(timeout, tuple) else timeout


def _retry_after(response: Any) -> float | None:
    value = response.getheader("Retry-After")
    try:
        return float(value) if value else None
    except ValueError:
        return None


def _with_type(resource: Resource, obj: JSON) -> JSON:
    """Items of a list response carry no apiVersion/kind; give every object both."""
    if "kind" not in obj:
        obj["kind"] = resource.kind
    if "apiVersion" not in obj:
        obj["apiVersion"] = resource.api_version
    return obj


def _watch_event(resource: Resource, line: bytes) -> tuple[str, JSON] | None:
    line = line.strip()
    if not line:
        return None
    event = json.loads(line)
    kind = event.get("type", "")
    obj = event.get("object") or {}
    if kind == "ERROR":
        raise from_status(int(obj.get("code") or 500), obj, method="GET", path=resource.path())
    if kind == "BOOKMARK":
        return None
    return kind, _with_type(resource, obj)


def _object_reference(obj: JSON) -> JSON:
    """An ObjectReference from a full object or from a reference-shaped dict."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        ref = {"apiVersion": obj.get("apiVersion", ""), "kind": obj.get("kind", ""),
               "name": metadata.get("name", ""), "namespace": metadata.get("namespace"),
               "uid": metadata.get("uid"), "resourceVersion": metadata.get("resourceVersion")}
    else:
        ref = {k: obj.get(k) for k in ("apiVersion", "kind", "name", "namespace", "uid", "resourceVersion")}
    missing = [k for k in ("kind", "name") if not ref.get(k)]
    if missing:
        raise ValueError(f"involved_object needs {' and '.join(missing)}; got keys {sorted(obj)}")
    return {k: v for k, v in ref.items() if v}
