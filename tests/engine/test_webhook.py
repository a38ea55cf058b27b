"""The webhook intake answers as Argo Events' webhook EventSource: 401 without the token, 413 over
1 MB, 200 only once the event is accepted, and the event is `{header, body, metadata}` in a CloudEvent."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from engine.webhook import WebhookEndpoint, WebhookIntake

EVENT_SOURCE = {
    "apiVersion": "argoproj.io/v1alpha1", "kind": "EventSource", "metadata": {"name": "gpuaas-alertmanager"},
    "spec": {"webhook": {"idle-alerts": {"endpoint": "/alerts", "method": "POST", "port": "12000",
                                         "authSecret": {"name": "gpuaas-webhook", "key": "token"}}}},
}
ALERT_GROUP = {"version": "4", "status": "firing", "receiver": "gpuaas", "groupKey": "{}:{}",
               "alerts": [{"status": "firing", "labels": {"alertname": "GPUWorkloadIdle", "pod": "p-0",
                                                          "namespace": "team-a"}}]}


def post(url: str, body: bytes, token: str | None) -> int:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.fixture
def intake():
    accepted: list[dict] = []
    endpoints = WebhookEndpoint.from_event_source(EVENT_SOURCE)
    with WebhookIntake(endpoints, token="s3cret", sink=accepted.append) as server:
        yield server, accepted


def test_token_is_required_and_only_accepted_events_are_emitted(intake) -> None:
    server, accepted = intake
    body = json.dumps(ALERT_GROUP).encode()
    assert post(server.url_for("/alerts"), body, token=None) == 401
    assert post(server.url_for("/alerts"), body, token="wrong") == 401
    assert accepted == []
    assert post(server.url_for("/alerts"), body, token="s3cret") == 200

    [event] = accepted
    assert (event["type"], event["source"], event["subject"]) == ("webhook", "gpuaas-alertmanager", "idle-alerts")
    assert event["datacontenttype"] == "application/json" and len(event["id"]) == 32
    assert event["data"]["body"] == ALERT_GROUP
    assert event["data"]["header"]["Authorization"] == ["*****"]
    assert event["data"]["header"]["Content-Type"] == ["application/json"]


def test_body_over_one_megabyte_is_refused_with_413(intake) -> None:
    server, accepted = intake
    padding = "x" * (1024 * 1024)
    oversize = json.dumps({**ALERT_GROUP, "commonAnnotations": {"padding": padding}}).encode()
    assert post(server.url_for("/alerts"), oversize, token="s3cret") == 413
    assert accepted == []


def test_an_event_the_runtime_refuses_is_answered_503_so_alertmanager_retries() -> None:
    def refuse(event: dict) -> None:
        raise RuntimeError("bus unavailable")

    endpoints = WebhookEndpoint.from_event_source(EVENT_SOURCE)
    with WebhookIntake(endpoints, token="s3cret", sink=refuse) as server:
        assert post(server.url_for("/alerts"), json.dumps(ALERT_GROUP).encode(), token="s3cret") == 503
        assert post(server.url + "/elsewhere", b"{}", token="s3cret") == 404


# -- issue 10 item 11: every request gets an HTTP answer ---------------------------------------------
def raw_request(url: str, request: bytes, timeout: float = 10.0) -> bytes:
    """Send bytes as they are (no client-side checks) and read the whole answer."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as connection:
        connection.sendall(request)
        answer = b""
        while True:
            chunk = connection.recv(65536)
            if not chunk:
                return answer
            answer += chunk
            if b"\r\n\r\n" in answer and b"Connection: close" in answer.split(b"\r\n\r\n")[0]:
                head, _, rest = answer.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                if len(rest) >= length:
                    return answer


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1."), answer[:80]
    return int(answer.split(b" ", 2)[1])


def headers(length: str, token: str = "s3cret") -> bytes:
    return (f"POST /alerts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Length: {length}\r\nConnection: close\r\n\r\n").encode()


@pytest.mark.parametrize("length", ["abc", "-1", "1e3", "0x10", "10, 10", "99999999999999999999999"])
def test_a_bad_content_length_is_answered_400_or_413(intake, length: str) -> None:
    server, accepted = intake
    answer = raw_request(server.url, headers(length) + b"{}")
    assert status_of(answer) in (400, 413), answer
    assert accepted == []


@pytest.mark.parametrize("depth", [100, 1000, 100_000])
def test_json_nested_too_deep_is_answered_400(intake, depth: int) -> None:
    server, accepted = intake
    body = b"[" * depth + b"]" * depth
    answer = raw_request(server.url, headers(str(len(body))) + body)
    assert status_of(answer) == 400 and b"nested" in answer, answer
    assert accepted == []


def test_a_client_that_stops_sending_is_answered_408_after_the_read_timeout() -> None:
    """Without a read timeout the server would wait for the rest of the body and the client's own
    10 s socket timeout would end the exchange with no answer (an OSError here)."""
    endpoints = WebhookEndpoint.from_event_source(EVENT_SOURCE)
    with WebhookIntake(endpoints, token="s3cret", sink=lambda event: None, read_timeout=1.0) as server:
        answer = raw_request(server.url, headers("100") + b'{"version": "4"', timeout=10)
        assert status_of(answer) == 408


def test_two_hundred_concurrent_posts_are_all_answered() -> None:
    """Alertmanager (or a storm of groups) posting at once: no connection is reset or left unanswered."""
    import concurrent.futures
    import threading
    import time

    lock = threading.Lock()
    accepted: list[dict] = []

    def slow_sink(event: dict) -> None:  # routing and submitting take a while
        time.sleep(0.05)
        with lock:
            accepted.append(event)

    endpoints = WebhookEndpoint.from_event_source(EVENT_SOURCE)
    body = json.dumps(ALERT_GROUP).encode()
    with WebhookIntake(endpoints, token="s3cret", sink=slow_sink) as server:
        start = threading.Barrier(200)

        def one(_: int) -> int | str:
            start.wait()
            try:
                return status_of(raw_request(server.url, headers(str(len(body))) + body, timeout=30))
            except OSError as error:
                return f"{type(error).__name__}: {error}"

        with concurrent.futures.ThreadPoolExecutor(max_workers=200) as pool:
            answers = list(pool.map(one, range(200)))
    assert answers == [200] * 200, sorted({str(a) for a in answers})
    assert len(accepted) == 200


def test_a_client_resetting_its_connection_prints_no_traceback(intake, capfd) -> None:
    """A client that closes with unread bytes (or drops) sends a reset; the handler thread, waiting for
    the next request on that kept-alive connection, meets ConnectionResetError and socketserver hands
    it to handle_error, which printed a traceback to stderr (into the demo's output): 1,000 concurrent
    clients that read only the status line left dozens. A peer going away is not an intake error."""
    server, _ = intake
    try:
        raise ConnectionResetError(104, "Connection reset by peer")
    except ConnectionResetError:  # what the handler thread meets; handle_error runs inside its except
        server._server.handle_error(None, ("127.0.0.1", 40000))
    assert "Traceback" not in capfd.readouterr().err
