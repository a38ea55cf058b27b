"""Fuzz: the local webhook intake over real sockets, as Alertmanager (or anyone) reaches it
(issue 10 items 10 and 11): every request, however malformed, gets an HTTP answer, and only a
well-formed, authorised POST reaches the sensor runtime."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from hypothesis import given, settings

from engine.webhook import WebhookEndpoint, WebhookIntake
from tests.fuzz.inputs import TOKEN, http_requests, process_recursion_limit

EVENT_SOURCE = {
    "apiVersion": "argoproj.io/v1alpha1", "kind": "EventSource", "metadata": {"name": "gpuaas-alertmanager"},
    "spec": {"webhook": {"idle": {"endpoint": "/alerts", "method": "POST", "port": "12000",
                                  "authSecret": {"name": "gpuaas-webhook", "key": "token"}}}},
}
ANSWERS = {200, 400, 401, 404, 405, 408, 411, 413, 414, 431, 501, 505}


@pytest.fixture(scope="module")
def intake() -> Iterator[tuple[WebhookIntake, list[dict]]]:
    accepted: list[dict] = []
    lock = threading.Lock()

    def sink(event: dict) -> None:
        with lock:
            accepted.append(event)

    with WebhookIntake(WebhookEndpoint.from_event_source(EVENT_SOURCE), token=TOKEN, sink=sink,
                       read_timeout=2.0) as server:
        yield server, accepted


def exchange(port: int, request: bytes) -> bytes:
    """Send the request, close our side (a short body ends in EOF, not a wait), read the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        try:
            connection.sendall(request)
            connection.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may answer and close before reading everything (413, 401)
        answer = b""
        while len(answer) < 4096:
            try:
                chunk = connection.recv(4096)
            except ConnectionResetError:
                break
            if not chunk:
                break
            answer += chunk
        return answer


def test_the_webhook_intake(intake: tuple[WebhookIntake, list[dict]]) -> None:
    server, accepted = intake
    cases = 0

    @given(http_requests())
    def post(request: bytes) -> None:
        nonlocal cases
        cases += 1
        before = len(accepted)
        with process_recursion_limit():  # the limit is the interpreter's: the server's threads run with it
            answer = exchange(server.port, request)
        assert answer.startswith(b"HTTP/1."), (request[:200], answer[:200])
        status = int(answer.split(b" ", 2)[1])
        assert status in ANSWERS, answer[:200]
        if status == 200:
            assert len(accepted) == before + 1
            event = accepted[-1]
            assert event["data"]["header"]["Authorization"] == ["*****"] and event["id"]
        else:
            assert len(accepted) == before

    post()
    assert cases >= settings.default.max_examples, f"only {cases} cases ran"
