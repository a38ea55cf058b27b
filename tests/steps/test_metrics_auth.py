"""The metrics gateway against a Prometheus behind TLS and a bearer token (OpenShift's thanos-querier):
the token is read from its file at each connection, and the server's certificate is checked against the
configured CA (the service CA), never skipped."""

from __future__ import annotations

import datetime
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from steps.gateways.metrics import MetricsGateway, MetricsUnavailable


def _pair(tmp: Path) -> tuple[Path, Path, Path]:
    """A CA and a serving certificate for 127.0.0.1 signed by it: (ca.crt, tls.crt, tls.key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-service-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(hours=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    import ipaddress
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "querier")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False).sign(ca_key, hashes.SHA256()))
    paths = tmp / "ca.crt", tmp / "tls.crt", tmp / "tls.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


@pytest.fixture
def querier(tmp_path: Path) -> Iterator[tuple[str, Path, list[str]]]:
    ca, cert, key = _pair(tmp_path)
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization") or "")
            if self.headers.get("Authorization") != "Bearer sa-token":
                self.send_response(401)
                self.end_headers()
                return
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
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}", ca, seen
    server.shutdown()


def test_the_token_and_the_ca_reach_a_tls_querier(querier: tuple[str, Path, list[str]], tmp_path: Path) -> None:
    url, ca, seen = querier
    token = tmp_path / "token"
    token.write_text("sa-token\n")
    assert MetricsGateway(url, token_file=str(token), ca_file=str(ca), retries=0).query("vector(1)") == []
    assert seen == ["Bearer sa-token"]


def test_an_unknown_certificate_is_refused_not_skipped(querier: tuple[str, Path, list[str]], tmp_path: Path) -> None:
    url, _ca, seen = querier
    token = tmp_path / "token"
    token.write_text("sa-token")
    with pytest.raises(MetricsUnavailable, match="unreachable"):
        MetricsGateway(url, token_file=str(token), retries=0).query("vector(1)")
    assert seen == []


def test_a_missing_token_file_says_which_setting(tmp_path: Path) -> None:
    with pytest.raises(MetricsUnavailable, match="GPUAAS_PROMETHEUS_TOKEN_FILE"):
        MetricsGateway("https://127.0.0.1:1", token_file=str(tmp_path / "absent"), retries=0).query("vector(1)")
