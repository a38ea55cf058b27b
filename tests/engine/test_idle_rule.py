"""The no-Prometheus fallback: the idle rule evaluated against the exporter reaches the webhook
intake as an Alertmanager v4 group with the bearer token, once per new firing set."""

from __future__ import annotations

import json

from engine.exporter import DcgmExporter
from engine.idle_rule import InProcessIdleRule
from engine.webhook import WebhookEndpoint, WebhookIntake

EVENT_SOURCE = {"apiVersion": "argoproj.io/v1alpha1", "kind": "EventSource", "metadata": {"name": "gpuaas-alertmanager"},
                "spec": {"webhook": {"idle": {"endpoint": "/alertmanager", "method": "POST", "port": "12000",
                                              "authSecret": {"name": "s", "key": "token"}}}}}


def test_idle_pod_fires_once_busy_pod_never(monkeypatch) -> None:
    exporter = DcgmExporter()
    idle = exporter.add_gpu("node-1", 0)
    busy = exporter.add_gpu("node-1", 1)
    exporter.assign(idle.uuid, namespace="team-a", pod="idle-0")
    exporter.assign(busy.uuid, namespace="team-a", pod="busy-0")
    exporter.set_utilization(idle.uuid, 1)
    exporter.set_utilization(busy.uuid, 80)
    clock = [1000.0]
    monkeypatch.setattr("engine.idle_rule.time.monotonic", lambda: clock[0])
    received: list[dict] = []
    with WebhookIntake(WebhookEndpoint.from_event_source(EVENT_SOURCE), token="t0k", sink=received.append) as intake:
        rule = InProcessIdleRule(exporter, intake.url_for(), "t0k", threshold_percent=5, for_seconds=10)
        rule.evaluate()
        clock[0] += 9
        rule.evaluate()
        assert received == []  # idle, but not for long enough yet
        clock[0] += 2
        rule.evaluate()
        rule.evaluate()  # same firing set: no second notification
        assert len(received) == 1
        body = received[0]["data"]["body"]
        assert body["version"] == "4" and body["status"] == "firing"
        assert [(a["labels"]["alertname"], a["labels"]["pod"]) for a in body["alerts"]] == \
            [("GPUWorkloadIdle", "idle-0")]
        assert json.loads(json.dumps(received[0]))["source"] == "gpuaas-alertmanager"

        exporter.unassign(idle.uuid)  # the pod went away: the alert resolves
        rule.evaluate()
        assert [e["data"]["body"]["status"] for e in received] == ["firing", "resolved"]


def test_a_mig_slice_never_looks_idle_to_the_fallback_rule() -> None:
    """MIG does not report GPU_UTIL (it reads 0 on a slice): the in-process rule, which reads only GPU_UTIL,
    must not take that 0 for idle (steps.gpu_key)."""
    from engine.exporter import DcgmExporter
    from engine.idle_rule import InProcessIdleRule

    exporter = DcgmExporter()
    busy_slice = exporter.add_gpu("node-m", 0, mig_instance="3", mig_profile="3g.40gb")
    exporter.assign(busy_slice.key, namespace="team-a", pod="mig-0")
    exporter.set_utilization(busy_slice.key, 80)
    rule = InProcessIdleRule(exporter, "http://127.0.0.1:9/alertmanager", "t", for_seconds=0.0)
    rule.evaluate()
    rule.evaluate()
    assert rule.notifications == 0 and not rule._idle_since
