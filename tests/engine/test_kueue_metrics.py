"""The engine's Kueue metrics (engine/kueue/metrics.py) measure admission wait as Kueue v0.19 does.

Kueue observes `kueue_admission_wait_time_seconds` from the Workload's creation, or from the last
transition of its `Requeued` condition when it has one (sigs.k8s.io/kueue v0.19.2
pkg/workload/workload.go QueuedWaitTime). A workload that ran, was released and re-queued hours
later waited only since the requeue, not since it was created.
"""

from __future__ import annotations

import re
from typing import Any

from engine.kueue.metrics import KueueMetrics


def _workload(conditions: list[dict[str, str]]) -> dict[str, Any]:
    return {"metadata": {"name": "raycluster-ray-vision", "namespace": "team-vision", "uid": "u-1",
                         "creationTimestamp": "2026-01-01T09:00:00Z"},
            "spec": {"queueName": "vision", "podSets": []},
            "status": {"conditions": conditions}}


def _objects(workload: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    cq = {"metadata": {"name": "vision"}, "spec": {"cohortName": "gpu-pool", "resourceGroups": []}}
    lq = {"metadata": {"name": "vision", "namespace": "team-vision"}, "spec": {"clusterQueue": "vision"}}
    return {"ClusterQueue": [cq], "LocalQueue": [lq], "Workload": [workload]}


def _observed(text: str) -> tuple[int, float]:
    count = re.search(r'^kueue_admission_wait_time_seconds_count\{cluster_queue="vision".*\} (\S+)$', text, re.MULTILINE)
    total = re.search(r'^kueue_admission_wait_time_seconds_sum\{cluster_queue="vision".*\} (\S+)$', text, re.MULTILINE)
    assert count and total, text
    return int(count.group(1)), float(total.group(1))


def test_first_admission_waits_since_creation() -> None:
    objects = _objects(_workload([{"type": "QuotaReserved", "status": "True", "lastTransitionTime": "2026-01-01T09:05:00Z"}]))
    assert _observed(KueueMetrics(lambda kind: objects[kind]).render()) == (1, 300.0)


def test_readmission_waits_since_the_requeue_not_since_creation() -> None:
    # created 09:00, ran, deactivated; reactivated (Requeued=True) at 12:00, admitted again at 12:10.
    objects = _objects(_workload([
        {"type": "Requeued", "status": "True", "reason": "Reactivated", "lastTransitionTime": "2026-01-01T12:00:00Z"},
        {"type": "QuotaReserved", "status": "True", "lastTransitionTime": "2026-01-01T12:10:00Z"}]))
    assert _observed(KueueMetrics(lambda kind: objects[kind]).render()) == (1, 600.0)
