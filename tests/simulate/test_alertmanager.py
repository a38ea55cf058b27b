"""The replay's Alertmanager group model: by hand, then against a real Alertmanager 0.25.

The live test compresses time (group_wait 1s, group_interval 2s, repeat_interval 4s), posts
alerts to Alertmanager's API as Prometheus would, and compares when the webhook receives a
group with when the model (`AlertGroup`) says it is sent. It pins down the behaviour the
replay's timings rest on, including "a repeat exactly `repeat_interval` after the last
notification is not sent yet": the notification log's timestamp is written when the webhook has
answered, so a flush `repeat_interval` later finds it too recent and the group comes back one
`group_interval` later. That holds while the webhook's answer takes longer than the flush timer
drifts over those intervals (Go timers drift by microseconds a tick; an in-cluster HTTP answer
takes milliseconds). The test's receiver answers after 300 ms, as a slow webhook would; with an
instant answer on a loaded machine the drift can win and the repeat comes at exactly 4 s.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from engine.monitoring import AlertmanagerProcess, availability
from gpuaas.manifests import observability as obs
from gpuaas.simulate.alertmanager import AlertGroup, NotificationTimings

PRODUCTION = NotificationTimings(group_wait=30.0, group_interval=300.0, repeat_interval=3600.0)


def deliveries(group: AlertGroup, events: list[tuple[float, str, int]], until: float) -> list[tuple[float, list[int]]]:
    """Drive a group: events (time, "fire"|"resolve", alert), flushes as the group schedules them."""
    out: list[tuple[float, list[int]]] = []
    flush_at: float | None = None
    pending = sorted(events)
    while True:
        next_event = pending[0][0] if pending else None
        if flush_at is not None and (next_event is None or flush_at < next_event) and flush_at <= until:
            delivered, flush_at = group.flush(flush_at)
            if delivered:
                out.append((flush_at - group.timings.group_interval if flush_at else group.logged_at or 0.0,
                            sorted(delivered)))
            continue
        if next_event is None or next_event > until:
            return out
        when, kind, alert = pending.pop(0)
        if kind == "fire":
            created = group.fire(alert, when)
            flush_at = created if created is not None else flush_at
        else:
            group.resolve(alert)


def test_first_flush_after_group_wait_then_new_alerts_on_the_interval() -> None:
    group = AlertGroup("team-a", PRODUCTION)
    sent = deliveries(group, [(0.0, "fire", 1), (100.0, "fire", 2)], until=1000.0)
    assert [(t, a) for t, a in sent] == [(30.0, [1]), (330.0, [1, 2])]


def test_repeat_comes_one_group_interval_after_the_repeat_interval() -> None:
    group = AlertGroup("team-a", PRODUCTION)
    sent = deliveries(group, [(0.0, "fire", 1)], until=8000.0)
    assert [t for t, _ in sent] == [30.0, 30.0 + 3900.0, 30.0 + 2 * 3900.0]  # every 65 minutes


def test_all_resolved_clears_the_log_silently_and_a_new_group_waits_again() -> None:
    group = AlertGroup("team-a", PRODUCTION)
    first = deliveries(group, [(0.0, "fire", 1), (400.0, "resolve", 1)], until=1000.0)
    assert first == [(30.0, [1])]
    assert group.exists is False and group.logged_firing == frozenset()
    again = deliveries(group, [(2000.0, "fire", 1)], until=3000.0)
    assert again == [(2030.0, [1])]


def test_an_alert_that_fires_again_before_the_log_changes_waits_for_the_repeat() -> None:
    # 1 fires, is sent at 30, resolves at 100 while 2 keeps the group alive, fires again at 200:
    # the log still lists it, so nothing is new until the repeat at 30 + 3900.
    group = AlertGroup("team-a", PRODUCTION)
    sent = deliveries(group, [(0.0, "fire", 1), (0.0, "fire", 2), (100.0, "resolve", 1), (200.0, "fire", 1)],
                      until=5000.0)
    assert [t for t, _ in sent] == [30.0, 3930.0]


# -- the real Alertmanager ----------------------------------------------------------------------
class _Receiver:
    """Webhook receiver that records when each notification arrived and which pods it carried."""

    def __init__(self, token: str, answer_after: float = 0.3) -> None:
        self.received: list[tuple[float, list[str]]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                if self.headers.get("Authorization") == f"Bearer {token}":
                    pods = sorted(a["labels"]["pod"] for a in body["alerts"] if a["status"] == "firing")
                    receiver.received.append((time.monotonic(), pods))
                time.sleep(answer_after)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alertmanager"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _post(url: str, pod: str, resolved: bool = False, fired_at: datetime | None = None) -> datetime:
    """Send one alert as Prometheus does: startsAt is when it fired (FiredAt), endsAt when it resolved
    or the validity of a firing alert (rules/manager.go SendAlerts)."""
    now = datetime.now(UTC)
    alert = {"labels": {"alertname": obs.ALERT_NAME, "namespace": "team-a", "pod": pod, "severity": "warning"},
             "startsAt": (fired_at or now).isoformat(),
             "endsAt": (now if resolved else now + timedelta(hours=1)).isoformat()}
    request = urllib.request.Request(f"{url}/api/v2/alerts", data=json.dumps([alert]).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200
    return fired_at or now


def test_real_alertmanager_sends_when_the_model_says() -> None:
    found = availability()
    assert found.alertmanager, f"prometheus-alertmanager is needed (make setup installs it): {found.reason}"
    timings = NotificationTimings(group_wait=1.0, group_interval=2.0, repeat_interval=4.0)
    token = "t0k3n"
    receiver = _Receiver(token)
    with tempfile.TemporaryDirectory(prefix="gpuaas-am-") as tmp:
        workdir = Path(tmp)
        credentials = workdir / "token"
        credentials.write_text(token)
        config = obs.alertmanager_config(receiver.url, str(credentials), group_wait="1s", group_interval="2s",
                                         repeat_interval="4s")
        import yaml

        (workdir / "alertmanager.yml").write_text(yaml.safe_dump(config))
        process = AlertmanagerProcess(workdir, found.alertmanager)  # type: ignore[arg-type]
        process.start()
        try:
            start = time.monotonic()
            fired_a = _post(process.url, "a")
            time.sleep(max(0.0, start + 2.5 - time.monotonic()))
            fired_b = _post(process.url, "b")
            time.sleep(max(0.0, start + 9.5 - time.monotonic()))
            _post(process.url, "a", resolved=True, fired_at=fired_a)
            _post(process.url, "b", resolved=True, fired_at=fired_b)
            time.sleep(max(0.0, start + 13.0 - time.monotonic()))
        finally:
            process.stop()
            receiver.stop()
    observed = [(round(at - start, 1), pods) for at, pods in receiver.received]
    group = AlertGroup("team-a", timings)
    expected = deliveries(group, [(0.0, "fire", 0), (2.5, "fire", 1), (9.5, "resolve", 0), (9.5, "resolve", 1)],
                          until=13.0)
    names = {0: "a", 1: "b"}
    assert [[names[i] for i in alerts] for _, alerts in expected] == [pods for _, pods in observed], observed
    assert [t for t, _ in expected] == [1.0, 3.0, 9.0]
    for (model_time, _), (real_time, _) in zip(expected, observed, strict=True):
        assert abs(model_time - real_time) < 0.45, (expected, observed)
