"""The rendered Sensors start a run exactly where steps.delivery.event_path_runs says a step may write.

The sweep (steps/reactions/sweep.py) records every other transition without a pod, and waits `grace`
only for the ones the Sensor takes: if the rendered filter and the Python rule disagreed, a
transition would get two runs (both took it) or wait for the sweep's catch-up (neither did). Each
case goes through `routing` (the evaluator `gpuaas route` and the engine use); the rendered Sensors
themselves go through Argo Events' own code in test_against_argo_events.py, whose lifecycle has
these owners too.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from routing import Router
from steps.delivery import event_path_runs
from tests.support import argo_events as events

ROOT = Path(__file__).resolve().parents[2]
OWNERS = (
    [("batch/v1", "Job")], [("ray.io/v1", "RayCluster")], [("ray.io/v1", "RayJob")],
    [("kubeflow.org/v1", "PyTorchJob")], [("jobset.x-k8s.io/v1alpha2", "JobSet")],
    [("v1", "Pod")], [("apps/v1", "StatefulSet")], [("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")],
    [("serving.kserve.io/v1beta1", "InferenceService")], [("example.com/v1", "Unknown")], [],
    [("batch/v1", "Job"), ("v1", "Pod")], [("batch/v1", "Job"), ("ray.io/v1", "RayCluster")],
)
ANNOTATIONS = ({}, {"gpuaas.io/release": '{"strategy": "deactivate-workload"}'}, {"gpuaas.io/lent-gpus": "{}"},
               {"gpuaas.io/handled-on-admitted": "{}", "other.io/x": "y"})


@pytest.fixture(scope="module")
def router() -> Any:
    return Router.from_manifests(ROOT / "manifests")


def _with(body: dict[str, Any], owners: list[tuple[str, str]], annotations: dict[str, str]) -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["metadata"]["ownerReferences"] = [{"apiVersion": v, "kind": k, "name": f"o{i}", "uid": f"u{i}",
                                           "controller": i == 0} for i, (v, k) in enumerate(owners)]
    if not owners:
        del body["metadata"]["ownerReferences"]
    if annotations:
        body["metadata"]["annotations"] = dict(annotations)
    return body


def _fired(router: Any, event: dict[str, Any]) -> set[str]:
    result = router.route(event)
    result = result.to_dict() if hasattr(result, "to_dict") else result
    return {t["sensor"] for t in result.get("triggered") or []}


@pytest.mark.parametrize("annotations", ANNOTATIONS, ids=lambda a: ",".join(a) or "none")
@pytest.mark.parametrize("owners", OWNERS, ids=lambda o: "+".join(k for _, k in o) or "no-owner")
def test_the_sensors_take_exactly_the_transitions_a_step_may_write_for(
        router: Any, owners: list[tuple[str, str]], annotations: dict[str, str]) -> None:
    pending = _with(events.workload(stage="quota-reserved"), owners, annotations)
    admitted = _with(events.workload(stage="admitted"), owners, annotations)
    finished = _with(events.workload(stage="finished-succeeded"), owners, annotations)
    admission = events.resource_event("gpuaas-workloads", "workloads", "UPDATE", admitted, pending)
    finish = events.resource_event("gpuaas-workloads", "workloads", "UPDATE", finished, admitted)
    assert ("gpuaas-on-admitted" in _fired(router, admission)) == event_path_runs("on-admitted", admitted)
    assert ("gpuaas-on-finished" in _fired(router, finish)) == event_path_runs("on-finished", finished)


def test_a_jobs_transitions_are_left_to_the_sweep_and_a_servers_are_not(router: Any) -> None:
    """The two cases the product relies on most, spelled out."""
    job = events.workload(stage="admitted")
    server = _with(job, [("v1", "Pod")], {})
    before = events.workload(stage="quota-reserved")
    assert _fired(router, events.resource_event("gpuaas-workloads", "workloads", "UPDATE", job, before)) == set()
    assert _fired(router, events.resource_event("gpuaas-workloads", "workloads", "UPDATE", server,
                                                _with(before, [("v1", "Pod")], {}))) == {"gpuaas-on-admitted"}
