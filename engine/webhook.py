"""The `webhook` event source: an HTTP intake on loopback, as the rendered EventSource declares it.

Alertmanager POSTs its idle alerts here as it would to the webhook EventSource's Service. Like
Argo Events (facts: argo-events.md): the request must carry `Authorization: Bearer <token>` when
the EventSource has an `authSecret` (401 otherwise, and nothing is emitted); the body is capped
(1 MB by default, 413 beyond); the event data is `{header, body, metadata}` with the
Authorization header masked; the answer is 200 only after the event was accepted downstream (here:
routed by the sensor runtime and its workflows accepted), 503 if that failed, so Alertmanager
retries as it would against a bus outage.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from engine.events import envelope

log = logging.getLogger(__name__)

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
MASKED = "*****"

EventSink = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class WebhookEndpoint:
    """One `spec.webhook.<eventName>` block of a rendered EventSource."""

    event_source: str
    event_name: str
    endpoint: str
    method: str = "POST"
    requires_token: bool = False
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    metadata: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_event_source(cls, event_source: dict[str, Any]) -> list[WebhookEndpoint]:
        name = event_source["metadata"]["name"]
        endpoints = []
        for event_name, spec in ((event_source.get("spec") or {}).get("webhook") or {}).items():
            if not spec.get("endpoint"):
                raise ValueError(f"EventSource {name} spec.webhook.{event_name}.endpoint: required, found none")
            endpoints.append(cls(event_source=name, event_name=event_name, endpoint=spec["endpoint"],
                                 method=(spec.get("method") or "POST").upper(),
                                 requires_token=bool(spec.get("authSecret")),
                                 max_payload_bytes=int(spec.get("maxPayloadSize") or DEFAULT_MAX_PAYLOAD_BYTES),
                                 metadata=dict(spec.get("metadata") or {})))
        return endpoints


class WebhookIntake:
    """A loopback HTTP server serving every webhook endpoint of the rendered EventSources."""

    def __init__(self, endpoints: list[WebhookEndpoint], token: str, sink: EventSink,
                 clock: Callable[[], datetime] | None = None, port: int = 0) -> None:
        if any(e.requires_token for e in endpoints) and not token:
            raise ValueError("webhook token: the EventSource has an authSecret, so a bearer token is required")
        self.endpoints = {e.endpoint: e for e in endpoints}
        self.token = token
        self.sink = sink
        self.clock = clock or (lambda: datetime.now(UTC))
        self.port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.counts: dict[int, int] = {}
        self._counts_lock = threading.Lock()

    def start(self) -> str:
        intake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # http.server names handlers do_<METHOD>
                intake._handle(self)

            do_PUT = do_GET = do_DELETE = do_PATCH = do_POST

            def log_message(self, format: str, *args: object) -> None:
                log.debug("webhook: " + format, *args)

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="webhook", daemon=True)
        self._thread.start()
        return self.url

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url_for(self, endpoint: str | None = None) -> str:
        endpoint = endpoint or next(iter(self.endpoints))
        return self.url + endpoint

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- one request ------------------------------------------------------------------------------

    def _answer(self, request: BaseHTTPRequestHandler, status: int, text: str, close: bool = False) -> None:
        payload = text.encode()
        request.send_response(status)
        request.send_header("Content-Type", "text/plain; charset=utf-8")
        request.send_header("Content-Length", str(len(payload)))
        if close:
            request.send_header("Connection", "close")
            request.close_connection = True
        request.end_headers()
        request.wfile.write(payload)
        with self._counts_lock:
            self.counts[status] = self.counts.get(status, 0) + 1

    @staticmethod
    def _discard(request: BaseHTTPRequestHandler, length: int, limit: int = 64 * 1024 * 1024) -> None:
        remaining = min(length, limit)
        while remaining > 0:
            chunk = request.rfile.read(min(remaining, 65536))
            if not chunk:
                return
            remaining -= len(chunk)

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        path = request.path.split("?", 1)[0]
        endpoint = self.endpoints.get(path)
        if endpoint is None:
            self._answer(request, 404, f"no webhook endpoint {path}; serving {sorted(self.endpoints)}", close=True)
            return
        if request.command != endpoint.method:
            self._answer(request, 405, f"method {request.command} not allowed; use {endpoint.method}", close=True)
            return
        if endpoint.requires_token:
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
                self._answer(request, 401, "unauthorized: expected Authorization: Bearer <token>", close=True)
                return
        length_header = request.headers.get("Content-Length")
        if length_header is None:
            self._answer(request, 411, "Content-Length required", close=True)
            return
        length = int(length_header)
        if length > endpoint.max_payload_bytes:
            self._discard(request, length)  # so the client reads our 413 instead of a reset connection
            self._answer(request, 413, f"request body of {length} bytes exceeds the limit of "
                         f"{endpoint.max_payload_bytes} bytes", close=True)
            return
        raw = request.rfile.read(length)
        try:
            body = json.loads(raw) if raw.strip() else None
        except json.JSONDecodeError as error:
            self._answer(request, 400, f"body: expected JSON, found invalid JSON ({error})")
            return
        header = {}
        for key in request.headers:
            canonical = "-".join(part.capitalize() for part in key.split("-"))
            values = request.headers.get_all(key) or []
            header[canonical] = [MASKED if canonical == "Authorization" else v for v in values]
        data = {"header": header, "body": body, "metadata": endpoint.metadata or None}
        event = envelope("webhook", endpoint.event_source, endpoint.event_name, data, self.clock())
        try:
            self.sink(event)
        except Exception as error:  # noqa: BLE001 - any downstream failure means "not accepted"
            log.warning("webhook event %s not accepted: %s", event["id"], error)
            self._answer(request, 503, f"event not accepted: {error}")
            return
        self._answer(request, 200, "success")
