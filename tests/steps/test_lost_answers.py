"""Writes committed while their answer was lost: the record and the Kubernetes Event say what is true.

The local API server's `commit_then_fail` fault commits a write and then answers 504, or hangs up
with no answer at all (status 0). The gateway retries: a conditional patch meets 409 (its own commit
moved the resourceVersion), a create meets AlreadyExists. Either way the write happened, so the
record must say `applied` with the action, the Kubernetes Event must be written once, and the
per-tenant hourly release limit (which counts GPUaaSWorkersReleased Events) must count it.
When the API keeps failing past the gateway's retries the step exits 75; Argo's retry of the same
run (same workflow uid, GPUAAS_RUN_ID) recognises the release it made and records it then.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from engine.apiserver import ApiServer
from steps.gateways import resources as R
from steps.reactions.on_idle import releases_in_last_hour
from tests.steps.objects import NS, Scene
from tests.support.apiserver import gateway_for

RELEASED = "GPUaaSWorkersReleased"


def run(api: ApiServer, tmp: Path, reaction: str, run_id: str = "wf-uid-1", **params: str) -> tuple[int, dict]:
    """`python -m steps REACTION FILE` in-process, as one attempt of the Argo run `run_id`."""
    from steps.entrypoint import main

    tmp.mkdir(parents=True, exist_ok=True)
    index = len(list(tmp.glob("params-*.json")))
    params_file = tmp / f"params-{index}.json"
    params_file.write_text(json.dumps([{"name": k.replace("_", "-"), "value": v} for k, v in params.items()]))
    out = tmp / f"out-{index}"
    env = {"GPUAAS_KUBE_URL": api.url, "GPUAAS_NAMESPACE": "gpuaas", "GPUAAS_RUN_ID": run_id,
           "GPUAAS_PROMETHEUS_URL": "http://prometheus.test:9090"}
    code = main([reaction, str(params_file)], outputs_dir=str(out), environ=env)
    outputs: dict[str, Any] = {p.name: p.read_text() for p in out.iterdir()}
    outputs["record"] = json.loads(outputs["record"])
    return code, outputs


def events(api: ApiServer, reason: str) -> list[dict]:
    return [e for e in api.store.list(R.EVENT, NS) if e.get("reason") == reason]


def workload_name(scene: Scene) -> str:
    return scene.workload["metadata"]["name"]


# (kind, the plural whose PATCH loses its answer, the action that wrote it)
RELEASES = [
    ("Job", "/workloads/", "deactivate-workload", 2.0),
    ("StatefulSet", "/statefulsets/", "scale-to-zero", 2.0),
    ("Notebook", "/notebooks/", "stop-notebook", 2.0),
    ("Deployment", "/scaledobjects/", "pause-keda", 1.0),     # one Workload (one GPU) per pod
]


@pytest.mark.parametrize("answer", [504, 0], ids=["504-after-commit", "connection-dropped"])
@pytest.mark.parametrize(("kind", "path", "action", "gpus"), RELEASES, ids=[r[0] for r in RELEASES])
def test_a_release_whose_answer_was_lost_is_recorded_with_its_event(api: ApiServer, tmp_path: Path, kind: str,
                                                                    path: str, action: str, gpus: float,
                                                                    answer: int) -> None:
    scene = Scene.of(kind, workers=2)
    scene.seed(api.store)
    if kind == "Deployment":  # KEDA scales it: on-admitted creates the ScaledObject first
        assert run(api, tmp_path, "on-admitted", namespace=NS, workload=workload_name(scene))[0] == 0
    api.faults.commit_then_fail(1, status=answer, method="PATCH", path=path)
    code, out = run(api, tmp_path, "release-workers", namespace=NS, workload=workload_name(scene))
    data = out["record"]["data"]
    assert code == 0 and out["outcome"] == "applied", data
    first = data["actions"][0]
    assert (first["action"], first["result"]) == (action, "applied")
    assert "answer was lost" in first["note"]
    assert data["metrics"]["gpusReleased"] == gpus and float(out["gpus-released"]) == gpus
    [event] = events(api, RELEASED)
    assert event["count"] == 1
    wl = api.store.get(scene.workload_resource, workload_name(scene), NS)
    assert "gpuaas.io/release" in wl["metadata"]["annotations"]       # the mirror was completed too
    assert releases_in_last_hour(gateway_for(api), "team-a", datetime.now(UTC)) == 1


def test_a_scaled_object_create_whose_answer_was_lost_is_recorded(api: ApiServer, tmp_path: Path) -> None:
    scene = Scene.of("Deployment")
    scene.seed(api.store)
    api.faults.commit_then_fail(1, status=0, method="POST", path="/scaledobjects")
    code, out = run(api, tmp_path, "on-admitted", namespace=NS, workload=workload_name(scene))
    data = out["record"]["data"]
    assert code == 0 and out["outcome"] == "applied", data
    assert [(a["action"], a["result"]) for a in data["actions"] if not a.get("bookkeeping")] == [("create-scaled-object", "applied")]
    assert len(events(api, "GPUaaSIdleHandlingPrepared")) == 1
    assert len(api.store.list(R.SCALED_OBJECT, NS)) == 1


def test_a_loan_return_whose_answer_was_lost_is_recorded(api: ApiServer, tmp_path: Path) -> None:
    scene = Scene.of("Job", status="finished", workers=2, gpus_per_pod=2)
    scene.seed(api.store)
    key = f"{NS}/{workload_name(scene)}"
    uid = api.store.get(R.WORKLOAD, workload_name(scene), NS)["metadata"]["uid"]
    api.store.patch(R.CLUSTER_QUEUE, "team-a", {"metadata": {"annotations": {"gpuaas.io/lent-gpus": json.dumps(
        {key: {"flavor": "a100", "gpus": 2, "uid": uid, "lentAt": "2026-01-01T12:00:00Z"}})}}})
    api.faults.commit_then_fail(1, status=504, method="PATCH", path="/clusterqueues/")
    code, out = run(api, tmp_path, "on-finished", namespace=NS, workload=workload_name(scene))
    data = out["record"]["data"]
    assert code == 0 and out["outcome"] == "applied", data
    assert [(a["action"], a["result"]) for a in data["actions"] if not a.get("bookkeeping")] == [("return-lent-quota", "applied")]
    assert data["metrics"]["gpusReturned"] == 2.0
    assert len(events(api, "GPUaaSResourcesReleased")) == 1


def test_an_event_whose_answer_was_lost_is_counted_once(api: ApiServer, tmp_path: Path) -> None:
    scene = Scene.of("Job")
    scene.seed(api.store)
    api.faults.commit_then_fail(1, status=0, method="POST", path="/events")
    code, out = run(api, tmp_path, "release-workers", namespace=NS, workload=workload_name(scene))
    assert code == 0 and out["outcome"] == "applied"
    [event] = events(api, RELEASED)
    assert event["count"] == 1
    assert releases_in_last_hour(gateway_for(api), "team-a", datetime.now(UTC)) == 1


def test_the_retry_of_the_same_run_records_the_release_the_lost_answer_hid(api: ApiServer, tmp_path: Path) -> None:
    """The API commits the release, then fails every request for longer than the gateway's patience:
    the attempt exits 75 without knowing. Argo's retry (same run) finds its own release and records
    it, with the Event, once; another run finds a release it did not make: no-op."""
    scene = Scene.of("StatefulSet", workers=2)
    scene.seed(api.store)
    api.faults.commit_then_fail(1, status=504, method="PATCH", path="/statefulsets/", then_unavailable=1000)
    code, out = run(api, tmp_path, "release-workers", namespace=NS, workload=workload_name(scene))
    assert code == 75 and out["outcome"] == "failed"
    assert api.store.get(R.STATEFUL_SET, "train", NS)["spec"]["replicas"] == 0   # it did happen
    api.faults.clear()
    code, out = run(api, tmp_path, "release-workers", namespace=NS, workload=workload_name(scene))
    data = out["record"]["data"]
    assert code == 0 and out["outcome"] == "applied", data
    results = {a["action"]: a for a in data["actions"]}
    assert results["scale-to-zero"]["result"] == "applied" and "earlier attempt" in results["scale-to-zero"]["note"]
    assert results["record-release-on-workload"]["result"] == "applied"
    assert data["metrics"]["gpusReleased"] == 2.0 and out["gpus-released"] == "2"
    assert [e["count"] for e in events(api, RELEASED)] == [1]
    # Argo retries once more (say the pod was evicted after writing its outputs): nothing new, counted once.
    code, out = run(api, tmp_path, "release-workers", namespace=NS, workload=workload_name(scene))
    assert code == 0 and [e["count"] for e in events(api, RELEASED)] == [1]
    # Another run (a later hand submission) did not make this release: it is only "already released".
    code, out = run(api, tmp_path, "release-workers", run_id="wf-uid-2", namespace=NS, workload=workload_name(scene))
    assert code == 0 and out["outcome"] == "no-op" and out["gpus-released"] == "0"
    assert releases_in_last_hour(gateway_for(api), "team-a", datetime.now(UTC)) == 1


def test_a_release_event_that_cannot_be_written_makes_the_step_retry(api: ApiServer, tmp_path: Path) -> None:
    """The release is applied but its Event cannot be written: without the Event the hourly limit
    would not count it, so the step exits 75 and the retry of the same run writes it."""
    scene = Scene.of("Job")
    scene.seed(api.store)
    api.faults.fail_next(1000, status=503, path="/events")
    code, out = run(api, tmp_path, "release-workers", namespace=NS, workload=workload_name(scene))
    assert code == 75 and out["outcome"] == "applied"
    assert any("Kubernetes Event GPUaaSWorkersReleased not recorded" in e for e in out["record"]["data"]["errors"])
    api.faults.clear()
    code, out = run(api, tmp_path, "release-workers", namespace=NS, workload=workload_name(scene))
    assert code == 0 and out["outcome"] == "applied"
    assert [e["count"] for e in events(api, RELEASED)] == [1]


@pytest.mark.parametrize(("attempt", "final"), [("0", "false"), ("3", "false"), ("4", "true"), ("", "true")])
def test_the_final_output_says_whether_argo_retries_this_attempt(api: ApiServer, tmp_path: Path, attempt: str,
                                                                 final: str) -> None:
    """`final` feeds the outcome counter's `when` (workflows/reaction.py): false only for an attempt
    that exits 75 with attempts left (Argo's {{retries}} below the limit 4)."""
    from steps.entrypoint import main

    scene = Scene.of("Job")
    scene.seed(api.store)
    api.faults.fail_next(1000, status=503)
    params_file = tmp_path / "params.json"
    params_file.write_text(json.dumps([{"name": "namespace", "value": NS},
                                       {"name": "workload", "value": workload_name(scene)}]))
    env = {"GPUAAS_KUBE_URL": api.url, "GPUAAS_ATTEMPT": attempt, "GPUAAS_RETRY_LIMIT": "4"}
    code = main(["release-workers", str(params_file)], outputs_dir=str(tmp_path / "out"), environ=env)
    assert code == 75 and (tmp_path / "out" / "final").read_text() == final
    api.faults.clear()
    code = main(["release-workers", str(params_file)], outputs_dir=str(tmp_path / "ok"), environ=env)
    assert code == 0 and (tmp_path / "ok" / "final").read_text() == "true"


def test_the_retry_of_the_same_run_records_the_scaled_object_it_created(api: ApiServer, tmp_path: Path) -> None:
    scene = Scene.of("Deployment")
    scene.seed(api.store)
    api.faults.commit_then_fail(1, status=504, method="POST", path="/scaledobjects", then_unavailable=1000)
    code, out = run(api, tmp_path, "on-admitted", namespace=NS, workload=workload_name(scene))
    assert code == 75 and len(api.store.list(R.SCALED_OBJECT, NS)) == 1
    api.faults.clear()
    code, out = run(api, tmp_path, "on-admitted", namespace=NS, workload=workload_name(scene))
    data = out["record"]["data"]
    assert code == 0 and out["outcome"] == "applied", data
    assert [(a["action"], a["result"]) for a in data["actions"] if not a.get("bookkeeping")] == [("create-scaled-object", "applied")]
    assert "earlier attempt" in data["actions"][0]["note"]
    assert [e["count"] for e in events(api, "GPUaaSIdleHandlingPrepared")] == [1]
    code, out = run(api, tmp_path, "on-admitted", run_id="wf-uid-2", namespace=NS, workload=workload_name(scene))
    assert code == 0 and out["outcome"] == "no-op"
