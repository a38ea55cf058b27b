"""The API server's in-process store as a `Cluster` (the demo's fast path, no HTTP).

`engine.apiserver.Store` raises its own `ApiError` with the HTTP code; this adapter turns 404 and
409 into the gateway's `NotFound` and `Conflict` so the controller handles both paths alike.
Writes still go through the store's resourceVersion check and change log, so HTTP watchers (the
engine's resource event source) see what the emulation writes.
"""

from __future__ import annotations

from typing import Any

from steps.gateways.errors import AlreadyExists, Conflict, KubernetesError, NotFound, PermanentError
from steps.gateways.resources import Resource

JSON = dict[str, Any]


class StoreCluster:
    def __init__(self, store: Any) -> None:
        self.store = store

    def list(self, resource: Resource) -> list[JSON]:
        return self._call(self.store.list, resource)

    def create(self, resource: Resource, body: JSON) -> JSON:
        namespace = (body.get("metadata") or {}).get("namespace")
        return self._call(self.store.create, resource, body, namespace, keep_status=False)

    def merge_patch(self, resource: Resource, name: str, patch: JSON, namespace: str | None = None,
                    subresource: str | None = None) -> JSON:
        return self._call(self.store.patch, resource, name, patch, namespace, subresource=subresource)

    def delete(self, resource: Resource, name: str, namespace: str | None = None) -> None:
        try:
            self._call(self.store.delete, resource, name, namespace)
        except NotFound:
            pass

    def subscribe(self) -> Any:
        """Every change of every kind from now on (the background thread wakes on each)."""
        return self.store.subscribe(None)

    @staticmethod
    def _call(method: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception as error:
            code = getattr(error, "code", None)
            if code is None:
                raise
            message = getattr(error, "message", str(error))
            reason = getattr(error, "reason", "")
            if code == 404:
                raise NotFound(404, message, reason) from error
            if code == 409:
                raise (AlreadyExists if reason == "AlreadyExists" else Conflict)(409, message, reason) from error
            if 400 <= code < 500:
                raise PermanentError(code, message, reason) from error
            raise KubernetesError(code, message, reason) from error
