"""The resource watcher emits what Argo Events' resource EventSource emits, over a real API server:
ADD for every existing object at (re)start, UPDATE on every resourceVersion change with oldBody,
DELETE, all in the CloudEvent envelope (id, type=resource, source=EventSource, subject=event)."""

from __future__ import annotations

import threading
import time

import pytest

from engine import apiserver
from engine.resource_watcher import ResourceWatcher, WatchedResource
from steps.gateways import resources as R
from steps.gateways.kubernetes import KubernetesGateway

EVENT_SOURCE = {
    "apiVersion": "argoproj.io/v1alpha1", "kind": "EventSource", "metadata": {"name": "gpuaas-kueue"},
    "spec": {"resource": {"workloads": {"group": "kueue.x-k8s.io", "version": "v1beta2", "resource": "workloads",
                                        "eventTypes": ["ADD", "UPDATE", "DELETE"]}}},
}


def workload(name: str) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"queueName": "a", "podSets": [{"name": "main", "count": 1,
                                                    "template": {"spec": {"containers": []}}}]}}


class Collected:
    def __init__(self) -> None:
        self.events: list[dict] = []
        self.lock = threading.Lock()

    def __call__(self, event: dict) -> None:
        with self.lock:
            self.events.append(event)

    def wait(self, count: int, timeout: float = 10.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.events) >= count:
                    return list(self.events)
            time.sleep(0.02)
        raise AssertionError(f"expected {count} events, got {len(self.events)}: "
                             f"{[e['data']['type'] for e in self.events]}")


@pytest.fixture
def server():
    api = apiserver.ApiServer()
    url = api.start()
    try:
        yield url
    finally:
        api.stop()


def test_add_update_with_old_body_delete_and_re_list_on_restart(server: str) -> None:
    gateway = KubernetesGateway(url=server)
    gateway.create(R.WORKLOAD, workload("existing"), namespace="team-a")
    [watched] = WatchedResource.from_event_source(EVENT_SOURCE)
    collected = Collected()
    watcher = ResourceWatcher(server, watched, collected, watch_timeout_seconds=2)
    watcher.start()
    try:
        first = collected.wait(1)[0]
        assert first["data"]["type"] == "ADD" and first["data"]["oldBody"] is None
        assert first["data"]["body"]["metadata"]["name"] == "existing"
        assert (first["type"], first["source"], first["subject"]) == ("resource", "gpuaas-kueue", "workloads")
        assert first["specversion"] == "1.0" and len(first["id"]) == 32
        assert (first["data"]["group"], first["data"]["version"], first["data"]["resource"]) == \
            ("kueue.x-k8s.io", "v1beta2", "workloads")

        gateway.create(R.WORKLOAD, workload("new"), namespace="team-a")
        gateway.merge_patch(R.WORKLOAD, "new", {"status": {"conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"}]}},
            namespace="team-a", subresource="status")
        gateway.delete(R.WORKLOAD, "new", namespace="team-a")
        events = collected.wait(4)
        kinds = [(e["data"]["type"], e["data"]["body"]["metadata"]["name"]) for e in events[1:4]]
        assert kinds == [("ADD", "new"), ("UPDATE", "new"), ("DELETE", "new")]
        update = events[2]["data"]
        assert update["oldBody"]["metadata"]["resourceVersion"] != update["body"]["metadata"]["resourceVersion"]
        assert "status" not in update["oldBody"] or not update["oldBody"]["status"].get("conditions")
        assert update["body"]["status"]["conditions"][0]["status"] == "True"
    finally:
        watcher.stop()

    restarted = Collected()
    again = ResourceWatcher(server, watched, restarted, watch_timeout_seconds=2)
    again.start()
    try:
        [add] = restarted.wait(1)
        assert (add["data"]["type"], add["data"]["body"]["metadata"]["name"]) == ("ADD", "existing")
        assert add["id"] != first["id"]
    finally:
        again.stop()
