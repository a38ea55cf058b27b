"""The `webhook` event source: an HTTP intake on loopback, as the rendered EventSource declares it.

Alertmanager POSTs its idle alerts here as it would to the webhook EventSource's Service. Like
Argo Events (facts: argo-events.md): the request must carry `Authorization: Bearer <token>` when
the EventSource has an `authSecret` (401 otherwise, and nothing is emitted); the body is capped
(1 MB by default, 413 beyond); the event data is `{header, body, metadata}` with the
Authorization header masked; the answer is 200 only after the event was accepted downstream (here:
routed by the sensor runtime and its workflows accepted), 503 if that failed, so Alertmanager
retries as it would against a bus outage.

Every request gets an HTTP answer, whatever it sends: a Content-Length that is not a decimal
number is 400, one over the cap 413, a body that is not JSON or is nested deeper than 64 levels
(steps.json_text, the limit the steps apply too) 400, a client that stops sending before its
Content-Length is complete 408 after `read_timeout` seconds. The listen backlog holds
LISTEN_BACKLOG pending connections, so a burst of posts is queued, not reset.
"""

from __future__ import annotations

import hmac
import logging
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from engine.events import envelope
from steps.json_text import load as load_json
from steps.plan import RejectedInput

log = logging.getLogger(__name__)

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
MASKED = "*****"
LISTEN_BACKLOG = 1024
"""socketserver's default is 5: under a burst the kernel drops or resets what does not fit."""
DEFAULT_READ_TIMEOUT_SECONDS = 10.0
_DECIMAL = re.compile(r"[0-9]{1,12}")

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
                 clock: Callable[[], datetime] | None = None, port: int = 0,
                 read_timeout: float = DEFAULT_READ_TIMEOUT_SECONDS) -> None:
        if any(e.requires_token for e in endpoints) and not token:
            raise ValueError("webhook token: the EventSource has an authSecret, so a bearer token is required")
        self.endpoints = {e.endpoint: e for e in endpoints}
        self.token = token
        self.sink = sink
        self.clock = clock or (lambda: datetime.now(UTC))
        self.port = port
        self.read_timeout = read_timeout
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.counts: dict[int, int] = {}
        self._counts_lock = threading.Lock()

    def start(self) -> str:
        intake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = intake.read_timeout  # socket timeout for every read: headers and body
            # http.server answers an unparsable request line as HTTP/0.9: a body without a status
            # line. Every answer here is HTTP/1.1 with a status.
            default_request_version = "HTTP/1.1"

            def do_POST(self) -> None:  # http.server names handlers do_<METHOD>
                try:
                    intake._handle(self)
                except TimeoutError:
                    intake._answer(self, 408, f"request body not received within {intake.read_timeout:g}s",
                                   close=True)
                except (ConnectionError, BrokenPipeError):
                    self.close_connection = True

            do_PUT = do_GET = do_DELETE = do_PATCH = do_POST

            def parse_request(self) -> bool:
                # RFC 9112 2.2: a server SHOULD ignore at least one empty line before the request
                # line; http.server drops the connection without an answer instead.
                skipped = 0
                while self.raw_requestline in (b"\r\n", b"\n") and skipped < 8:
                    self.raw_requestline = self.rfile.readline(65537)
                    skipped += 1
                if not self.raw_requestline:
                    self.close_connection = True
                    return False
                return super().parse_request()

            def log_message(self, format: str, *args: object) -> None:
                log.debug("webhook: " + format, *args)

        class Server(ThreadingHTTPServer):
            request_queue_size = LISTEN_BACKLOG
            daemon_threads = True

            def handle_error(self, request: object, client_address: Any) -> None:
                # socketserver prints a traceback to stderr; a client that went away (reset, broken
                # pipe) is routine, anything else is logged with its traceback.
                error = sys.exc_info()[1]
                if isinstance(error, ConnectionError):
                    log.debug("webhook: client %s went away: %s", client_address, error)
                else:
                    log.exception("webhook: request from %s failed", client_address)

        self._server = Server(("127.0.0.1", self.port), Handler)
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
        length_headers = request.headers.get_all("Content-Length") or []
        if not length_headers:
            self._answer(request, 411, "Content-Length required", close=True)
            return
        text = length_headers[0].strip()
        if len(length_headers) > 1 or not _DECIMAL.fullmatch(text):
            shown = ", ".join(length_headers)[:40]
            self._answer(request, 400, f"Content-Length: expected one decimal number of bytes, found {shown!r}",
                         close=True)
            return
        length = int(text)
        if length > endpoint.max_payload_bytes:
            self._discard(request, length)  # so the client reads our 413 instead of a reset connection
            self._answer(request, 413, f"request body of {length} bytes exceeds the limit of "
                         f"{endpoint.max_payload_bytes} bytes", close=True)
            return
        raw = request.rfile.read(length)
        if len(raw) < length:
            self._answer(request, 400, f"body: expected {length} bytes (Content-Length), found {len(raw)} before "
                         "the connection closed", close=True)
            return
        try:
            body = load_json("body", raw) if raw.strip() else None
        except RejectedInput as error:
            self._answer(request, 400, str(error))
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
