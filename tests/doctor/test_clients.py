"""The doctor's HTTP edge against a real HTTPS server: --ca-file and --bearer-token-file are what it uses,
whatever the environment says."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpuaas.cluster.certificates import certificate_authority, issue
from gpuaas.doctor.clients import Http, Unreadable


@pytest.fixture
def https_server(tmp_path: Path) -> Iterator[tuple[str, Path, list[str]]]:
    """A Prometheus-shaped HTTPS endpoint whose certificate only its own CA verifies; records Authorization."""
    ca = certificate_authority(tmp_path, "ca", "doctor-test-ca")
    serving = issue(ca, tmp_path, "server", "localhost", server=True, dns_names=("localhost",),
                    ip_addresses=("127.0.0.1",))
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization") or "")
            body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(serving.cert, serving.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"https://localhost:{server.server_address[1]}", ca.cert, seen
    finally:
        server.shutdown()


def test_the_ca_file_wins_over_requests_ca_bundle(https_server: tuple[str, Path, list[str]],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """requests lets $REQUESTS_CA_BUNDLE override a session's own CA; the doctor passes it on every request
    (seen: an SSL error against thanos-querier's service-CA certificate on a machine that sets it)."""
    url, ca, seen = https_server
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")
    http = Http.connect(url, token="t0ken", ca_file=str(ca))
    assert http.get_json("/api/v1/query?query=vector(1)")["status"] == "success"
    assert http.prometheus().custom_query("vector(1)") == []
    assert seen == ["Bearer t0ken", "Bearer t0ken"]


def test_without_the_ca_the_answer_is_an_unreadable_with_the_reason(https_server: tuple[str, Path, list[str]]) -> None:
    url, _, _ = https_server
    with pytest.raises(Unreadable, match="SSLError"):
        Http.connect(url).get_json("/api/v1/query?query=vector(1)")
