"""Fallback when Prometheus/Alertmanager are not installed: the idle rule, evaluated in-process.

It reads the exporter's current series (no scrape, no TSDB), treats a pod whose GPUs all stayed
under the threshold for `for_seconds` as firing `GPUWorkloadIdle`, and POSTs Alertmanager v4
webhook bodies (one group, bearer token) to the webhook intake, as Alertmanager would. It is a
stand-in, labelled as such wherever it is used: the on-idle step's own confirmation still asks
Prometheus, which is absent, so those reactions are recorded as failed rather than faked.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger(__name__)

ALERT_NAME = "GPUWorkloadIdle"
UTIL_METRIC = "DCGM_FI_DEV_GPU_UTIL"


class InProcessIdleRule:
    """Evaluates the idle rule against the exporter and notifies the webhook like Alertmanager."""

    def __init__(self, exporter: Any, webhook_url: str, token: str, *, threshold_percent: float = 5.0,
                 for_seconds: float = 5.0, interval: float = 0.5) -> None:
        self.exporter = exporter
        self.webhook_url = webhook_url
        self.token = token
        self.threshold_percent = threshold_percent
        self.for_seconds = for_seconds
        self.interval = interval
        self._idle_since: dict[tuple[str, str], float] = {}
        self._firing: dict[tuple[str, str], str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.notifications = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="idle-rule", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.evaluate()

    def evaluate(self) -> None:
        now = time.monotonic()
        busiest: dict[tuple[str, str], float] = {}
        for sample in self.exporter.samples():
            if sample.name != UTIL_METRIC:
                continue
            pod = sample.labels.get("pod") or sample.labels.get("exported_pod")
            namespace = sample.labels.get("namespace") or sample.labels.get("exported_namespace")
            if pod and namespace:
                key = (namespace, pod)
                busiest[key] = max(busiest.get(key, 0.0), sample.value)
        for key in list(self._idle_since):
            if key not in busiest or busiest[key] >= self.threshold_percent:
                del self._idle_since[key]
        for key, value in busiest.items():
            if value < self.threshold_percent:
                self._idle_since.setdefault(key, now)
        firing = {key for key, since in self._idle_since.items() if now - since >= self.for_seconds}
        new = firing - set(self._firing)
        resolved = set(self._firing) - firing
        for key in new:
            self._firing[key] = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        if new:
            self._notify("firing", sorted(firing))
        if resolved:
            self._notify("resolved", sorted(resolved))
            for key in resolved:
                self._firing.pop(key, None)

    def _notify(self, status: str, keys: list[tuple[str, str]]) -> None:
        alerts = [{"status": status,
                   # as the product's rule labels them: its namespace, the workload's in workload_namespace
                   "labels": {"alertname": ALERT_NAME, "namespace": "gpuaas", "workload_namespace": ns, "pod": pod,
                              "severity": "info"},
                   "annotations": {"summary": f"GPUs of pod {ns}/{pod} idle (in-process rule)"},
                   "startsAt": self._firing.get((ns, pod), ""), "endsAt": "0001-01-01T00:00:00Z",
                   "generatorURL": "gpuaas-engine://in-process-idle-rule", "fingerprint": f"{ns}/{pod}"}
                  for ns, pod in keys]
        body = {"version": "4", "groupKey": '{}:{alertname="GPUWorkloadIdle"}', "truncatedAlerts": 0,
                "status": status, "receiver": "gpuaas-idle", "groupLabels": {"alertname": ALERT_NAME},
                "commonLabels": {"alertname": ALERT_NAME}, "commonAnnotations": {},
                "externalURL": "gpuaas-engine://in-process-idle-rule", "alerts": alerts}
        request = urllib.request.Request(self.webhook_url, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json",
                                                  "Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=10):
                self.notifications += 1
        except (urllib.error.URLError, OSError) as error:
            log.warning("in-process idle rule: webhook POST failed: %s", error)
