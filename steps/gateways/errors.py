"""Failures of a gateway call, typed by what the caller should do next.

- `NotFound` (404): the object is gone; callers usually treat it as a fact, not a failure.
- `Conflict` (409): someone wrote first (stale resourceVersion) or the name is taken
  (`AlreadyExists`); re-read and re-plan.
- `TransientError`: 5xx, 429, timeouts, refused connections, or conflict retries exhausted,
  after bounded backoff; the step exits 75 and the WorkflowTemplate retries it.
- `PermanentError`: any other 4xx (422 Invalid, 403 Forbidden, 400 BadRequest); retrying
  cannot help, the step exits 1.

Every error carries the HTTP status, the Status `reason` and the API's own message so the audit
record shows what the API server said, not what we guessed.
"""

from __future__ import annotations

from typing import Any


class KubernetesError(Exception):
    """Base of every gateway failure."""

    def __init__(self, status: int, message: str, reason: str = "", *, method: str = "",
                 path: str = "", body: dict[str, Any] | None = None) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.method = method
        self.path = path
        self.body = body
        self.maybe_committed = False
        """True for a write that may have taken effect although it failed: an earlier try of the same
        request failed transiently (its answer may have been lost after the commit). Re-read to know."""
        where = f" ({method} {path})" if method else ""
        super().__init__(f"{status} {reason or 'Error'}: {message}{where}")


class NotFound(KubernetesError):
    """404: the object (or its namespace) does not exist."""


class Conflict(KubernetesError):
    """409 Conflict: the write was based on a stale resourceVersion; re-read and re-plan."""


class AlreadyExists(Conflict):
    """409 AlreadyExists: a create named an object that exists."""


class TransientError(KubernetesError):
    """The API was unavailable, slow or kept conflicting after bounded retries; retry later."""


class PermanentError(KubernetesError):
    """A 4xx other than 404/409: the request itself is wrong and retrying cannot help."""


class NoApiConfigured(PermanentError):
    """No Kubernetes API is configured (no service account, kubeconfig or GPUAAS_KUBE_URL): no request was sent."""

    def __init__(self, message: str) -> None:
        super().__init__(0, message, "NoApiConfigured")

    def __str__(self) -> str:
        return self.message


def from_status(status: int, body: dict[str, Any] | None, *, method: str = "", path: str = "",
                text: str = "") -> KubernetesError:
    """Build the typed error for an HTTP error response (a Kubernetes `Status` object or not)."""
    body = body if isinstance(body, dict) else None
    message = (body or {}).get("message") or text or f"HTTP {status}"
    reason = (body or {}).get("reason") or ""
    kwargs = {"method": method, "path": path, "body": body}
    if status == 404:
        return NotFound(status, message, reason or "NotFound", **kwargs)
    if status == 409:
        if reason == "AlreadyExists":
            return AlreadyExists(status, message, reason, **kwargs)
        return Conflict(status, message, reason or "Conflict", **kwargs)
    if status == 429 or status >= 500:
        return TransientError(status, message, reason, **kwargs)
    return PermanentError(status, message, reason, **kwargs)
