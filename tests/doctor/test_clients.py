"""The doctor's HTTP edge against a real HTTPS server (the TLS querier of tests/steps/test_metrics_auth.py:
a certificate only its own CA verifies, 401 without `Bearer sa-token`): --ca-file and --bearer-token-file are
what it uses, whatever the environment says."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from gpuaas.doctor.clients import Http, Unreadable
from tests.steps.test_metrics_auth import querier  # noqa: F401 - the fixture, shared

Querier = tuple[str, Path, list[str]]


def test_the_ca_file_wins_over_requests_ca_bundle(querier: Querier, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """requests lets $REQUESTS_CA_BUNDLE override a session's own CA; the doctor passes it on every request
    (seen: an SSL error against thanos-querier's service-CA certificate on a machine that sets it)."""
    url, ca, seen = querier
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")
    http = Http.connect(url, token="sa-token", ca_file=str(ca))
    assert http.get_json("/api/v1/query?query=vector(1)")["status"] == "success"
    assert http.prometheus().custom_query("vector(1)") == []
    assert seen == ["Bearer sa-token", "Bearer sa-token"]


def test_no_ca_or_no_token_is_an_unreadable_with_the_reason(querier: Querier) -> None:  # noqa: F811
    url, ca, _ = querier
    with pytest.raises(Unreadable, match="SSLError"):
        Http.connect(url).get_json("/api/v1/query?query=vector(1)")
    with pytest.raises(Unreadable, match="HTTP 401"):
        Http.connect(url, ca_file=str(ca)).get_json("/api/v1/query?query=vector(1)")
