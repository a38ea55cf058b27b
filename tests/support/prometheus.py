"""Test harness: real Prometheus/Alertmanager (engine.monitoring), DCGM-like exporters, and a
webhook receiver standing in for the Argo Events webhook EventSource.

Reusable by any area's tests:

    from tests.support.prometheus import require_monitoring, running_monitoring, AlertWebhookReceiver

`require_monitoring()` FAILS the calling test with the reason (missing binaries and how to install
them): a tier that cannot run must never pass silently. `make setup` installs the Debian packages.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from engine.monitoring import Availability, Monitoring, availability


def require_monitoring() -> Availability:
    """Fail the current test, saying how to fix it (`make setup`), when prometheus / alertmanager / promtool
    are absent: CI never skips a tier silently."""
    found = availability()
    if not found.ok:
        pytest.fail(f"real Prometheus/Alertmanager needed: {found.reason}; run `make setup`", pytrace=False)
    return found


@contextmanager
def running_monitoring(**kwargs: Any) -> Iterator[Monitoring]:
    """Start engine.monitoring.Monitoring (failing if absent), wait for its targets, stop it after."""
    require_monitoring()
    monitoring = Monitoring(**kwargs)
    monitoring.start()
    try:
        if monitoring.scrape_targets:
            monitoring.wait_for_targets_up()
        yield monitoring
    finally:
        monitoring.stop()


@dataclass
class ReceivedPost:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class AlertWebhookReceiver:
    """HTTP receiver on 127.0.0.1 that demands `Authorization: Bearer <token>` (401 otherwise),
    like the Argo Events webhook EventSource with `authSecret`, and keeps what it accepted."""

    token: str = field(default_factory=lambda: secrets.token_hex(16))
    posts: list[ReceivedPost] = field(default_factory=list)
    rejected: int = 0

    def __post_init__(self) -> None:
        self._cond = threading.Condition()
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> str:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.headers.get("Authorization") != f"Bearer {receiver.token}":
                    with receiver._cond:
                        receiver.rejected += 1
                    self.send_response(401)
                    self.end_headers()
                    return
                post = ReceivedPost(self.path, dict(self.headers.items()), json.loads(raw))
                with receiver._cond:
                    receiver.posts.append(post)
                    receiver._cond.notify_all()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self.url

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/alertmanager"

    def write_credentials(self, directory: Path) -> Path:
        """The token as Alertmanager's `credentials_file`."""
        path = directory / "webhook-token"
        path.write_text(self.token)
        return path

    def wait_for(self, predicate: Any, timeout_s: float = 40.0) -> ReceivedPost:
        """Block until a received POST satisfies `predicate(post)`; return it."""
        with self._cond:
            ok = self._cond.wait_for(lambda: any(predicate(p) for p in self.posts), timeout=timeout_s)
            if not ok:
                raise TimeoutError(f"no matching webhook POST within {timeout_s:g}s; got {len(self.posts)} "
                                   f"POSTs, {self.rejected} rejected")
            return next(p for p in self.posts if predicate(p))

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
