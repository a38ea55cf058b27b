"""Exactly once per transition (steps.delivery) and the catch-up sweep (steps.reactions.sweep), over HTTP.

The step runs as Argo runs it (steps.entrypoint.main, a params file, GPUAAS_RUN_ID) against the
engine's Kubernetes-API-compatible server; every answer is read back from the server and the record.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from engine.apiserver import ApiServer
from steps import delivery
from steps.gateways import resources as R
from steps.reactions import sweep
from steps.warning import read_warning
from tests.steps.objects import NS, Scene, ts

JSON = dict[str, Any]


class Runner:
    """`python -m steps REACTION FILE` in-process, with the run id Argo gives each Workflow."""

    def __init__(self, api: ApiServer, tmp: Path) -> None:
        self.api, self.tmp, self.runs = api, tmp, 0

    def __call__(self, reaction: str, run: str = "", **params: str) -> tuple[int, JSON]:
        from steps.entrypoint import main

        self.runs += 1
        file = self.tmp / f"params-{self.runs}.json"
        file.write_text(json.dumps([{"name": k.replace("_", "-"), "value": v} for k, v in params.items()]))
        out = self.tmp / f"out-{self.runs}"
        env = {"GPUAAS_KUBE_URL": self.api.url, "GPUAAS_NAMESPACE": "gpuaas",
               "GPUAAS_PROMETHEUS_URL": "http://prometheus.test:9090", "GPUAAS_RUN_ID": run}
        code = main([reaction, str(file)], outputs_dir=str(out), environ=env)
        outputs: JSON = {p.name: p.read_text() for p in out.iterdir()}
        outputs["record"] = json.loads(outputs["record"])
        return code, outputs


@pytest.fixture
def step(api: ApiServer, tmp_path: Path) -> Runner:
    return Runner(api, tmp_path)


def seed(api: ApiServer, *scenes: Scene) -> None:
    """Several scenes in one store: the tenant's queues once."""
    from engine.apiserver import ApiError

    for scene in scenes:
        for resource, obj in scene.objects():
            try:
                api.store.create(resource, obj, obj["metadata"].get("namespace"))
            except ApiError as error:
                if error.code != 409:
                    raise


def name_of(scene: Scene) -> str:
    return scene.workload["metadata"]["name"]


def live(api: ApiServer, scene: Scene) -> JSON:
    return api.store.get(R.WORKLOAD, name_of(scene), NS)


def resource_event(body: JSON, source: str = "gpuaas-workloads") -> str:
    return json.dumps({"context": {"id": "e-1", "source": source, "type": "resource", "subject": "workloads"},
                       "data": {"type": "UPDATE", "body": body}})


# -- the keys -----------------------------------------------------------------------------------------
def test_an_admission_is_keyed_by_its_time_and_the_evictions_before_it() -> None:
    workload = Scene.of("Job").workload
    assert delivery.admitted_transition(workload).key == f"admitted@{ts(60)}#0"
    evicted_twice = copy.deepcopy(workload)
    evicted_twice["status"]["schedulingStats"] = {"evictions": [{"reason": "Preempted", "count": 1},
                                                                {"reason": "Deactivated", "count": 1}]}
    # Re-admitted within the same second: a new key all the same.
    assert delivery.admitted_transition(evicted_twice).key == f"admitted@{ts(60)}#2"
    assert delivery.admitted_transition(Scene.of("Job", status="pending").workload) is None
    # Kueue only adds Finished: the admission of a finished Workload is still there to answer.
    assert delivery.admitted_transition(Scene.of("Job", status="finished").workload).key == f"admitted@{ts(60)}#0"


def test_a_finish_is_keyed_by_its_time_and_a_replaced_slice_is_no_finish() -> None:
    finished = Scene.of("Job", status="finished").workload
    assert delivery.finished_transition(finished).key == f"finished@{ts(7260)}"
    replaced = copy.deepcopy(finished)
    for condition in replaced["status"]["conditions"]:
        if condition["type"] == "Finished":
            condition["reason"] = "WorkloadSliceReplaced"
    assert delivery.finished_transition(replaced) is None


def test_an_idle_episode_is_the_earliest_start_of_the_workloads_alerts() -> None:
    assert delivery.idle_episode(["2026-01-01T12:05:00Z", "2026-01-01T12:01:00Z", "not a time"]) == \
        "idle@2026-01-01T12:01:00Z"
    assert delivery.idle_episode([]) is None


# -- the rule, pure -------------------------------------------------------------------------------------
NOW = datetime(2026, 1, 1, 12, 30, tzinfo=UTC)


def marked(workload: JSON, reaction: str, key: str, run: str = "run-1") -> JSON:
    out = copy.deepcopy(workload)
    patch = delivery.marker_patch(reaction, key, run, NOW - timedelta(minutes=20), "event")
    out["metadata"].setdefault("annotations", {}).update(patch["metadata"]["annotations"])
    return out


def test_the_first_delivery_handles_the_transition_and_later_ones_are_duplicates() -> None:
    workload = Scene.of("Deployment").workload
    key = delivery.admitted_transition(workload).key
    first = delivery.judge_delivery("on-admitted", via="event", live=workload, delivered_body=workload, now=NOW,
                                    run="run-1")
    assert first.marked and first.duplicate_of is None and first.late and "backlog" in first.why_late
    again = delivery.judge_delivery("on-admitted", via="event", live=marked(workload, "on-admitted", key),
                                    delivered_body=workload, now=NOW, run="run-2")
    assert not again.marked and again.duplicate_of.run == "run-1"
    assert "duplicate delivery" in again.reasons()[0]
    retry = delivery.judge_delivery("on-admitted", via="event", live=marked(workload, "on-admitted", key),
                                    delivered_body=workload, now=NOW, run="run-1")
    assert retry.marked and retry.duplicate_of is None  # Argo's retry of the same run: its own marker


def test_a_delivery_for_an_earlier_admission_is_superseded() -> None:
    earlier = Scene.of("Deployment").workload
    now_admitted = copy.deepcopy(earlier)
    now_admitted["status"]["schedulingStats"] = {"evictions": [{"reason": "Deactivated", "count": 1}]}
    judged = delivery.judge_delivery("on-admitted", via="event", live=now_admitted, delivered_body=earlier, now=NOW,
                                     run="r")
    assert judged.superseded and not judged.marked and "stale or superseded" in judged.reasons()[0]
    gone = delivery.judge_delivery("on-admitted", via="event", live=Scene.of("Deployment", status="evicted").workload,
                                   delivered_body=earlier, now=NOW, run="r")
    assert gone.superseded and gone.transition is None


def test_a_hand_submission_re_applies_and_is_never_late() -> None:
    workload = Scene.of("Deployment").workload
    key = delivery.admitted_transition(workload).key
    judged = delivery.judge_delivery("on-admitted", via="hand", live=marked(workload, "on-admitted", key),
                                     delivered_body=None, now=NOW, run="r")
    assert judged.duplicate_of is not None and not judged.marked and judged.late_seconds is None
    assert "re-applied by hand" in judged.reasons()[0]


def test_a_sweep_delivery_says_why_it_is_late() -> None:
    workload = Scene.of("Deployment").workload
    judged = delivery.judge_delivery("on-admitted", via="sweep", live=workload, delivered_body=workload, now=NOW,
                                     run="r", sweep_reason="lost on the event path")
    assert judged.late and judged.why_late == "lost on the event path" and judged.to_dict()["late"] is True
    by_design = delivery.judge_delivery("on-admitted", via="sweep", live=workload, delivered_body=workload, now=NOW,
                                        run="r")
    assert not by_design.late and by_design.late_seconds == 1740.0


# -- the steps over HTTP ----------------------------------------------------------------------------------
def test_a_duplicate_delivery_changes_nothing_and_is_recorded_as_such(api: ApiServer, step: Runner) -> None:
    scene = Scene.of("Deployment")
    scene.seed(api.store)
    event = resource_event(live(api, scene))
    code, first = step("on-admitted", run="wf-1", namespace=NS, workload=name_of(scene), event=event)
    assert code == 0 and first["outcome"] == "applied"
    marker = delivery.read_marker(live(api, scene), "on-admitted")
    assert (marker.run, marker.via, marker.transition) == ("wf-1", "event", f"admitted@{ts(60)}#0")
    api.reset_counters()
    code, second = step("on-admitted", run="wf-2", namespace=NS, workload=name_of(scene), event=event)
    data = second["record"]["data"]
    assert code == 0 and second["outcome"] == "no-op" and api.write_count == 0
    assert data["delivery"]["duplicateOf"]["run"] == "wf-1" and data["actions"] == []
    assert any("duplicate delivery" in r for r in data["plan"]["reasons"])


def test_the_marker_is_written_in_a_policy_dry_run_but_not_with_dry_run_true(api: ApiServer, step: Runner) -> None:
    scene = Scene.of("Deployment")
    scene.seed(api.store)
    api.store.create(R.CONFIG_MAP, {"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": "gpuaas-policy", "namespace": "gpuaas"},
                                    "data": {"policy.yaml": "idle: {mode: dry-run}"}}, "gpuaas")
    code, out = step("on-admitted", run="wf-1", namespace=NS, workload=name_of(scene), dry_run="true")
    assert code == 0 and out["outcome"] == "applied"      # dry-run=true: planned, written nothing, not marked
    assert delivery.read_marker(live(api, scene), "on-admitted") is None
    code, out = step("on-admitted", run="wf-2", namespace=NS, workload=name_of(scene),
                     event=resource_event(live(api, scene)))
    assert code == 0 and out["record"]["data"]["delivery"]["marked"]
    assert api.store.list(R.SCALED_OBJECT, NS) == []   # policy dry-run: no ScaledObject
    assert delivery.read_marker(live(api, scene), "on-admitted").run == "wf-2"


def test_an_event_of_an_earlier_workload_of_the_same_name_is_superseded(api: ApiServer, step: Runner) -> None:
    scene = Scene.of("Deployment")
    scene.seed(api.store)
    earlier = copy.deepcopy(live(api, scene))
    earlier["metadata"]["uid"] = "uid-of-a-deleted-workload"
    api.reset_counters()
    code, out = step("on-admitted", run="wf-8", namespace=NS, workload=name_of(scene), event=resource_event(earlier))
    data = out["record"]["data"]
    assert code == 0 and out["outcome"] == "no-op" and api.write_count == 0
    assert data["delivery"]["superseded"] and "uid-of-a-deleted-workload" in data["delivery"]["delivered"]


def test_a_stale_event_after_a_re_admission_is_superseded(api: ApiServer, step: Runner) -> None:
    scene = Scene.of("Job", status="finished")
    scene.seed(api.store)
    stale = copy.deepcopy(live(api, scene))
    for condition in stale["status"]["conditions"]:
        condition["lastTransitionTime"] = ts(1)
    api.reset_counters()
    code, out = step("on-finished", run="wf-9", namespace=NS, workload=name_of(scene), event=resource_event(stale))
    assert code == 0 and out["outcome"] == "no-op" and api.write_count == 0
    assert out["record"]["data"]["delivery"]["superseded"] is True


# -- the sweep ------------------------------------------------------------------------------------------------
def sweep_runs(api: ApiServer) -> dict[str, JSON]:
    return {w["metadata"]["name"]: w for w in api.store.list(R.WORKFLOW, "gpuaas")}


def parameters(workflow: JSON) -> dict[str, str]:
    return {p["name"]: p["value"] for p in workflow["spec"]["arguments"]["parameters"]}


def test_the_sweep_records_job_kinds_without_a_pod_and_delivers_what_the_event_path_lost(
        api: ApiServer, step: Runner) -> None:
    job = Scene.of("Job", name="batch")                      # admitted: the Sensor starts no run for a Job
    done = Scene.of("PyTorchJob", status="finished", name="pt")  # admitted and finished, nothing recorded
    lost = Scene.of("StatefulSet", name="srv")               # the Sensor's run never came (an hour ago)
    seed(api, job, done, lost)
    code, out = step("sweep", run="sweep-1", grace="5m")
    data = out["record"]["data"]
    assert code == 0 and out["outcome"] == "applied", data
    runs = sweep_runs(api)
    assert len(runs) == 4, sorted(runs)
    by_key = {(w["metadata"]["labels"]["gpuaas.io/reaction"], parameters(w)["workload"]): w for w in runs.values()}
    recorded = [by_key[("on-admitted", name_of(job))], by_key[("on-admitted", name_of(done))],
                by_key[("on-finished", name_of(done))]]
    for run in recorded:
        params = parameters(run)
        assert params["recorded-by"] == "sweep" and run["metadata"]["labels"]["gpuaas.io/recorded-by"] == "sweep"
        record = delivery.recorded_run_record(params)
        assert record["data"]["outcome"] == "no-op" and record["data"]["delivery"]["via"] == "sweep"
        assert record["data"]["delivery"]["late"] is False   # recorded by the sweep by design, not late
    # The record is on-admitted's own plan for the Job: the queue wait, the release strategy it would use.
    job_record = delivery.recorded_run_record(parameters(by_key[("on-admitted", name_of(job))]))["data"]
    assert "queueWaitSeconds" in job_record["metrics"]
    assert any("release strategy: deactivate-workload" in r for r in job_record["plan"]["reasons"])
    delivered = parameters(by_key[("on-admitted", name_of(lost))])
    assert "recorded-by" not in delivered and "event path lost it" in json.loads(delivered["event"])["data"]["reason"]
    # The job kinds are marked handled now; the StatefulSet's run marks itself when its step runs.
    assert delivery.read_marker(live(api, job), "on-admitted").via == "sweep"
    assert delivery.read_marker(live(api, done), "on-finished").via == "sweep"
    assert delivery.read_marker(live(api, lost), "on-admitted") is None
    # A second pass finds the marks and the run in flight: it creates nothing.
    code, again = step("sweep", run="sweep-2", grace="5m")
    assert code == 0 and again["outcome"] == "no-op" and len(sweep_runs(api)) == 4
    assert again["record"]["data"]["observed"]["counts"]["run in flight"] == 1
    # The delivered run's step handles the transition once, and says it came late and why.
    code, caught = step("on-admitted", run="wf-c", namespace=NS, workload=name_of(lost), event=delivered["event"])
    assert code == 0, caught["record"]["data"]
    late = caught["record"]["data"]["delivery"]
    assert late["via"] == "sweep" and late["late"] and "event path lost it" in late["whyLate"] and late["marked"]


def test_the_sweep_delivers_a_finish_without_an_admission_and_reads_no_local_queue(api: ApiServer,
                                                                                   step: Runner) -> None:
    """A job kind's Workload that finished without an admission (a stopped job that still ended): its tenant
    would come from its LocalQueue, which gpuaas-sweep may not read (a GET of it is answered 403 here, as RBAC
    would). The sweep delivers it to a step instead of recording it, and reads no LocalQueue; the step, as
    gpuaas-steps, finds the tenant there."""
    scene = Scene.of("Job", status="finished-unadmitted", name="stopped")
    seed(api, scene)
    api.faults.fail_next(1000, status=403, method="GET", path="/localqueues/")
    code, out = step("sweep", run="sweep-1", grace="5m")
    data = out["record"]["data"]
    assert code == 0 and out["outcome"] == "applied" and data["errors"] == [], data
    assert api.faults.injected == 0
    [run] = sweep_runs(api).values()
    params = parameters(run)
    assert run["metadata"]["labels"]["gpuaas.io/reaction"] == "on-finished" and "recorded-by" not in params
    assert (json.loads(params["event"])["data"]["reason"], params["tenant"]) == (sweep.NO_ADMISSION, "")
    assert data["observed"]["counts"]["delivered to a step"] == 1
    assert delivery.read_marker(live(api, scene), "on-finished") is None
    api.faults.clear()
    code, done = step("on-finished", run="wf-d", namespace=NS, workload=name_of(scene), event=params["event"])
    record = done["record"]["data"]
    assert code == 0 and record["observed"]["tenant"] == {"clusterQueue": "team-a", "cohort": "gpuaas",
                                                         "localQueue": "team-a-queue", "source": "local-queue"}, record
    assert delivery.read_marker(live(api, scene), "on-finished").via == "sweep"


def test_the_sweep_leaves_a_fresh_transition_to_the_event_path(api: ApiServer, step: Runner) -> None:
    scene = Scene.of("Deployment", name="fresh")
    now = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    for condition in scene.workload["status"]["conditions"]:
        condition["lastTransitionTime"] = now
    scene.seed(api.store)
    code, out = step("sweep", run="s", grace="5m")
    counts = out["record"]["data"]["observed"]["counts"]
    assert code == 0 and sweep_runs(api) == {} and counts["left to the event path (within the grace period)"] == 1


def test_a_sweep_run_that_exists_already_is_not_created_twice(api: ApiServer, step: Runner) -> None:
    """A pass that created the run and died before marking it: the next pass finds the run by its name."""
    scene = Scene.of("Job", name="b")
    scene.seed(api.store)
    workload = live(api, scene)
    candidate = sweep.Candidate("on-admitted", workload, delivery.admitted_transition(workload), False)
    api.store.create(R.WORKFLOW, {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                                  "metadata": {"name": sweep.run_name(candidate), "namespace": "gpuaas",
                                               "labels": {"workflows.argoproj.io/completed": "true"}},
                                  "spec": {}}, "gpuaas")
    code, out = step("sweep", run="s", grace="5m")
    assert code == 0 and len(sweep_runs(api)) == 1
    assert out["record"]["data"]["observed"]["counts"]["run existed (an earlier pass)"] == 1
    assert delivery.read_marker(live(api, scene), "on-admitted") is not None


def test_the_sweep_in_dry_run_creates_and_marks_nothing(api: ApiServer, step: Runner) -> None:
    scene = Scene.of("Job", name="d")
    scene.seed(api.store)
    api.reset_counters()
    code, out = step("sweep", run="s", dry_run="true")
    assert code == 0 and api.write_count == 0 and out["record"]["data"]["observed"]["counts"]["would record"] == 1


def test_the_event_path_partition_is_the_sensors() -> None:
    """steps.delivery keeps its own copy of the kinds (steps/ imports no other folder of the project)."""
    from sensors import on_admitted, on_finished

    assert on_admitted.NO_ACTION_KINDS == delivery.NO_ADMISSION_ACTION_KINDS
    assert on_finished.NO_FINISH_ACTION_KINDS == delivery.NO_FINISH_ACTION_KINDS
    assert on_finished.FINISH_ACTION_ANNOTATIONS == delivery.FINISH_ACTION_ANNOTATIONS


def test_the_sweep_rejects_bad_settings(api: ApiServer, step: Runner) -> None:
    code, out = step("sweep", run="s", grace="soon")
    assert code == 0 and out["outcome"] == "rejected-input" and "grace" in out["record"]["data"]["errors"][0]
    code, out = step("sweep", run="s", max_per_pass="0")
    assert code == 0 and out["outcome"] == "rejected-input"


# -- two runs for one transition (D1: the mutex is not enough) ------------------------------------------------------
def _env(api: ApiServer, run: str) -> dict[str, str]:
    return {"GPUAAS_KUBE_URL": api.url, "GPUAAS_NAMESPACE": "gpuaas",
            "GPUAAS_PROMETHEUS_URL": "http://prometheus.test:9090", "GPUAAS_RUN_ID": run}


@pytest.mark.parametrize(("kind", "reaction", "status"), [("Deployment", "on-finished", "finished"),
                                                          ("Deployment", "on-admitted", "admitted")])
def test_two_overlapping_runs_for_one_transition_act_once(api: ApiServer, step: Runner, kind: str, reaction: str,
                                                          status: str) -> None:
    """Argo v4.0.5 does not rebuild the mutex of a workflowTemplateRef run after a controller restart
    (sync_manager.go Initialize; fixed in v4.0.6), so two runs for one Workload can overlap. Run A reads the
    Workload; run B runs whole (acts, marks); then A applies: A's claim must fail, A re-reads and records a
    duplicate of B, and the Workload still names B."""
    from steps.reactions import StepContext, load, run_planned

    scene = Scene.of(kind, status=status)
    scene.seed(api.store)
    event = resource_event(live(api, scene))
    module = load(reaction)
    params = {"namespace": NS, "workload": name_of(scene), "event": event, "dry-run": "false"}
    other: list[tuple[int, JSON]] = []

    def observe_then_let_b_run(context: Any, request: Any) -> Any:
        state = module.observe(context, request)
        if not other:
            other.append(step(reaction, run="wf-b", **{k.replace("-", "_"): v for k, v in params.items()}))
        return state

    report = run_planned(StepContext(reaction, params, _env(api, "wf-a")), observe=observe_then_let_b_run,
                         plan=module.plan, uses_policy=reaction == "on-admitted")
    code, b = other[0]
    assert code == 0 and b["record"]["data"]["delivery"]["marked"], b["record"]["data"]
    assert not report.delivery["marked"] and report.delivery["duplicateOf"]["run"] == "wf-b", report.delivery
    assert not any(r.result == "applied" and not r.bookkeeping for r in report.results), report.results
    assert delivery.read_marker(live(api, scene), reaction).run == "wf-b"
    if reaction == "on-admitted":
        assert len(api.store.list(R.SCALED_OBJECT, NS)) == 1


def claimed(workload: JSON, reaction: str, key: str, run: str, at: datetime) -> JSON:
    out = copy.deepcopy(workload)
    value = delivery.marker_value(reaction, key, run, at, "event", state=delivery.CLAIMED)
    out["metadata"].setdefault("annotations", {})[delivery.marker_annotation(reaction)] = value
    return out


def test_a_claim_held_by_a_live_run_is_in_progress_and_a_stale_one_is_taken_over() -> None:
    workload = Scene.of("Deployment").workload
    key = delivery.admitted_transition(workload).key
    fresh = claimed(workload, "on-admitted", key, "wf-a", NOW - timedelta(seconds=30))
    judged = delivery.judge_delivery("on-admitted", via="event", live=fresh, delivered_body=workload, now=NOW,
                                     run="wf-b")
    assert not judged.marked and judged.duplicate_of.run == "wf-a" and judged.duplicate_of.state == "claimed"
    assert "in progress" in judged.reasons()[0]
    own = delivery.judge_delivery("on-admitted", via="event", live=fresh, delivered_body=workload, now=NOW, run="wf-a")
    assert own.marked and own.duplicate_of is None          # Argo's retry of the claiming run goes on
    stale = claimed(workload, "on-admitted", key, "wf-a", NOW - timedelta(seconds=delivery.CLAIM_LEASE_SECONDS + 1))
    taken = delivery.judge_delivery("on-admitted", via="sweep", live=stale, delivered_body=workload, now=NOW,
                                    run="wf-c", sweep_reason="its run failed")
    assert taken.marked and taken.duplicate_of is None and taken.took_over.run == "wf-a"
    assert any("took over" in r for r in taken.reasons())


def test_a_stale_claim_is_taken_over_over_http_and_a_live_one_blocks(api: ApiServer, step: Runner) -> None:
    scene = Scene.of("Deployment")
    scene.seed(api.store)
    workload = live(api, scene)
    key = delivery.admitted_transition(workload).key
    now = datetime.now(UTC)
    annotation = delivery.marker_annotation("on-admitted")
    api.store.patch(R.WORKLOAD, name_of(scene), {"metadata": {"annotations": {annotation: delivery.marker_value(
        "on-admitted", key, "wf-live", now - timedelta(seconds=20), "event", state=delivery.CLAIMED)}}}, NS)
    api.reset_counters()
    code, out = step("on-admitted", run="wf-2", namespace=NS, workload=name_of(scene),
                     event=resource_event(live(api, scene)))
    assert code == 0 and out["outcome"] == "no-op" and api.write_count == 0, out["record"]["data"]
    assert out["record"]["data"]["delivery"]["duplicateOf"]["state"] == "claimed"
    api.store.patch(R.WORKLOAD, name_of(scene), {"metadata": {"annotations": {annotation: delivery.marker_value(
        "on-admitted", key, "wf-dead", now - timedelta(hours=1), "event", state=delivery.CLAIMED)}}}, NS)
    code, out = step("on-admitted", run="wf-3", namespace=NS, workload=name_of(scene),
                     event=resource_event(live(api, scene)))
    assert code == 0 and out["outcome"] == "applied", out["record"]["data"]
    marker = delivery.read_marker(live(api, scene), "on-admitted")
    assert (marker.run, marker.state) == ("wf-3", "handled")
    actions = [a["action"] for a in out["record"]["data"]["actions"]]
    assert actions[0] == "claim" and actions[-1] == "mark-handled", actions


def _idle_state(workload: JSON, run: str, episode: str) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(request=SimpleNamespace(alert=SimpleNamespace(episode=episode)),
                           idle=SimpleNamespace(workload=workload, now=NOW),
                           workload_state=SimpleNamespace(run_id=run))


def test_an_idle_release_claims_its_episode_first_and_a_live_claim_makes_a_repeat() -> None:
    from steps.plan import Action, Plan
    from steps.reactions import on_idle

    workload = Scene.of("StatefulSet").workload
    episode = "idle@2026-01-01T12:10:00Z"
    release = Plan((Action("scale-to-zero", R.STATEFUL_SET, "train", NS, "idle", patch={"spec": {"replicas": 0}}),),
                   ("idle",))
    planned = on_idle._with_episode(release, _idle_state(workload, "wf-a", episode), False)
    assert [a.action for a in planned.actions] == ["claim", "scale-to-zero", "mark-handled"]
    claim = planned.actions[0]
    assert claim.operation == "json-patch" and claim.resource_version == workload["metadata"].get("resourceVersion")
    held = claimed(workload, "on-idle", episode, "wf-a", NOW - timedelta(seconds=10))
    assert "in progress" in on_idle._repeat(_idle_state(held, "wf-b", episode))
    assert on_idle._repeat(_idle_state(held, "wf-a", episode)) is None            # the claiming run's retry
    dead = claimed(workload, "on-idle", episode, "wf-a", NOW - timedelta(hours=1))
    assert on_idle._repeat(_idle_state(dead, "wf-b", episode)) is None             # a dead run's claim: taken over
    done = marked(workload, "on-idle", episode)
    assert "repeat of idle episode" in on_idle._repeat(_idle_state(done, "wf-b", episode))


# -- the sweep: failed runs, pages, install (D2, D7, D5, D6) ----------------------------------------------------------
def _end(api: ApiServer, name: str, phase: str, finished: datetime) -> None:
    api.store.patch(R.WORKFLOW, name, {"metadata": {"labels": {"workflows.argoproj.io/completed": "true",
                                                               "workflows.argoproj.io/phase": phase}}}, "gpuaas")
    api.store.patch(R.WORKFLOW, name, {"status": {"phase": phase, "finishedAt": finished.isoformat().replace(
        "+00:00", "Z")}}, "gpuaas", subresource="status")


def test_transitions_whose_sweep_run_failed_never_starve_the_fresh_ones(api: ApiServer, step: Runner) -> None:
    """Review D2's probe: 3 transitions whose sweep runs ended Failed and 1 fresh lost one, max-per-pass=3. Before:
    outcome no-op, 'run existed: 3', the fresh one 'left for the next pass', the errors hidden."""
    stuck = [Scene.of("StatefulSet", name=f"stuck-{i}") for i in range(3)]
    seed(api, *stuck)
    code, out = step("sweep", run="s-1", grace="5m", max_per_pass="3")
    assert code == 0 and out["record"]["data"]["observed"]["counts"]["delivered to a step"] == 3
    now = datetime.now(UTC)
    for name in sweep_runs(api):
        _end(api, name, "Failed", now - timedelta(seconds=30))
    fresh = Scene.of("StatefulSet", name="fresh-lost")
    seed(api, fresh)
    code, out = step("sweep", run="s-2", grace="5m", max_per_pass="3")
    counts = out["record"]["data"]["observed"]["counts"]
    assert code == 0 and out["outcome"] == "applied", counts
    assert counts["delivered to a step"] == 1 and counts["waiting to retry (back-off)"] == 3, counts
    assert "left for the next pass (max-per-pass)" not in counts
    runs = sweep_runs(api)
    assert any(parameters(w)["workload"] == name_of(fresh) for w in runs.values())
    # After the back-off, attempt 2 of each stuck transition, with the reason in its event.
    for name, workflow in runs.items():
        if workflow["metadata"]["labels"].get("gpuaas.io/sweep-attempt") == "1" and \
                parameters(workflow)["workload"] != name_of(fresh):
            _end(api, name, "Failed", now - timedelta(minutes=10))
    code, out = step("sweep", run="s-3", grace="5m", max_per_pass="3")
    counts = out["record"]["data"]["observed"]["counts"]
    assert counts["retried (an earlier sweep run failed)"] == 3, counts
    retries = [w for n, w in sweep_runs(api).items() if n.endswith("-2")]
    assert len(retries) == 3 and all(w["metadata"]["labels"]["gpuaas.io/sweep-attempt"] == "2" for w in retries)
    reason = json.loads(parameters(retries[0])["event"])["data"]["reason"]
    assert "attempt 2 of" in reason and "sweep attempt 1 ended Failed" in reason


def test_a_transition_whose_attempts_are_exhausted_fails_the_pass_and_audit_shows_it(api: ApiServer,
                                                                                     step: Runner) -> None:
    scene = Scene.of("StatefulSet", name="hopeless")
    seed(api, scene)
    workload = live(api, scene)
    candidate = sweep.Candidate("on-admitted", workload, delivery.admitted_transition(workload), True)
    long_ago = datetime.now(UTC) - timedelta(hours=5)
    for attempt in range(1, sweep.MAX_ATTEMPTS + 1):
        body = sweep.workflow_body(dataclasses_replace(candidate, attempt=attempt), "gpuaas", {}, record=None)
        api.store.create(R.WORKFLOW, body, "gpuaas")
        _end(api, body["metadata"]["name"], "Failed", long_ago)
    code, out = step("sweep", run="s", grace="5m")
    data = out["record"]["data"]
    assert code == 1 and out["outcome"] == "failed", data["observed"]   # exit 1: the pass's Workflow fails
    assert data["observed"]["counts"]["gave up (attempts exhausted)"] == 1
    assert "submit the reaction by hand" in data["errors"][0]
    from gpuaas.audit.filters import RunFilter
    from gpuaas.audit.run import parse_workflow

    run = parse_workflow({"metadata": {"name": "gpuaas-sweep-1", "labels": {"gpuaas.io/reaction": "sweep"}},
                          "status": {"phase": "Succeeded", "nodes": {"n": {
                              "type": "Pod", "templateName": "sweep", "displayName": "sweep", "phase": "Succeeded",
                              "outputs": {"parameters": [{"name": "outcome", "value": out["outcome"]},
                                                         {"name": "record", "value": json.dumps(out["record"])}]}}}}})
    assert run.outcome == "failed" and RunFilter().matches(run)


def dataclasses_replace(obj: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(obj, **changes)


def test_the_sweep_reads_workloads_page_by_page(api: ApiServer, step: Runner) -> None:
    scenes = [Scene.of("Job", name=f"paged-{i}") for i in range(5)]
    seed(api, *scenes)
    api.reset_counters()
    code, out = step("sweep", run="s", page_size="2")
    counts = out["record"]["data"]["observed"]["counts"]
    assert code == 0 and counts["workloads"] == 5 and counts["recorded without a pod"] == 5, counts
    from tests.support.apiserver import gateway_for

    pages = list(gateway_for(api).list_pages(R.WORKLOAD, limit=2))
    assert [len(p) for p in pages] == [2, 2, 1]


def test_transitions_older_than_the_install_are_adopted_not_answered(api: ApiServer, step: Runner) -> None:
    """Review D6: on the first pass after install every existing admission counted as lost (up to 500 runs, each
    'the event path lost it'). The install is the CronWorkflow gpuaas-sweep's creationTimestamp."""
    import time as clock

    old = Scene.of("StatefulSet", name="before-install")         # admitted 2026-01-01, long before the install
    seed(api, old)
    api.store.create(R.CRON_WORKFLOW, {"apiVersion": "argoproj.io/v1alpha1", "kind": "CronWorkflow",
                                       "metadata": {"name": "gpuaas-sweep", "namespace": "gpuaas"},
                                       "spec": {"schedules": ["*/2 * * * *"]}}, "gpuaas")
    clock.sleep(1.1)
    after = Scene.of("Job", name="after-install")
    stamp = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    for condition in after.workload["status"]["conditions"]:
        condition["lastTransitionTime"] = stamp
    seed(api, after)
    code, out = step("sweep", run="s", grace="5m")
    counts = out["record"]["data"]["observed"]["counts"]
    assert code == 0 and counts["adopted (before install)"] == 1 and counts["recorded without a pod"] == 1, counts
    assert [parameters(w)["workload"] for w in sweep_runs(api).values()] == [name_of(after)]
    marker = delivery.read_marker(live(api, old), "on-admitted")
    assert marker.via == "adopted" and marker.run == "" and marker.state == "handled"
    code, again = step("sweep", run="s-2", grace="5m")
    assert again["outcome"] == "no-op" and again["record"]["data"]["observed"]["counts"]["handled"] == 2


def test_a_transition_the_sweep_already_tried_is_retried_not_adopted_when_the_cronworkflow_is_recreated(
        api: ApiServer, step: Runner) -> None:
    """Review of the merge (S4): re-creating CronWorkflow gpuaas-sweep (uninstall and
    reinstall, a GitOps replace) moves the install time the sweep adopts before. A transition the sweep had already
    delivered, whose run failed, was then adopted (marked handled, no run): its retries were silently dropped. Its
    history says the product saw it after all, so it is retried as before."""
    scene = Scene.of("StatefulSet", name="tried-before-replace")   # admitted 2026-01-01
    seed(api, scene)
    workload = live(api, scene)
    candidate = sweep.Candidate("on-admitted", workload, delivery.admitted_transition(workload), True)
    body = sweep.workflow_body(candidate, "gpuaas", {}, record=None)
    api.store.create(R.WORKFLOW, body, "gpuaas")
    _end(api, body["metadata"]["name"], "Failed", datetime.now(UTC) - timedelta(hours=1))
    api.store.create(R.CRON_WORKFLOW, {"apiVersion": "argoproj.io/v1alpha1", "kind": "CronWorkflow",
                                       "metadata": {"name": "gpuaas-sweep", "namespace": "gpuaas"},
                                       "spec": {"schedules": ["*/2 * * * *"]}}, "gpuaas")   # re-created now
    code, out = step("sweep", run="s", grace="5m")
    counts = out["record"]["data"]["observed"]["counts"]
    assert code == 0 and counts.get("retried (an earlier sweep run failed)") == 1, counts
    assert "adopted (before install)" not in counts, counts
    marker = delivery.read_marker(live(api, scene), "on-admitted")
    assert marker is None or marker.via != "adopted", marker


# -- idle warnings whose grace is over (steps.warning) ----------------------------------------------------
def _warned(api: ApiServer, scene: Scene, release_after: datetime, state: str = "warned") -> None:
    warning = {"episode": "idle@2026-12-01T00:00:00Z", "warnedAt": "2026-12-01T00:05:00Z",
               "releaseAfter": release_after.strftime("%Y-%m-%dT%H:%M:%SZ"), "run": "wf-warn", "state": state}
    api.store.patch(R.WORKLOAD, name_of(scene), {"metadata": {"annotations": {
        "gpuaas.io/idle-warning": json.dumps(warning)}}}, NS)


def test_the_sweep_delivers_each_due_idle_warning_once_to_gpuaas_on_idle(api: ApiServer, step: Runner) -> None:
    due, early, done = Scene.of("Job", name="due"), Scene.of("Job", name="early"), Scene.of("Job", name="done")
    seed(api, due, early, done)
    now = datetime.now(UTC)
    _warned(api, due, now - timedelta(seconds=30))
    _warned(api, early, now + timedelta(hours=1))
    _warned(api, done, now - timedelta(hours=1), state="cancelled")
    code, out = step("sweep", run="s1", installed_at="2020-01-01T00:00:00Z")
    assert code == 0, out["record"]["data"]["errors"]
    runs = [w for w in api.store.list(R.WORKFLOW, "gpuaas") if w["spec"]["workflowTemplateRef"]["name"] == "gpuaas-on-idle"]
    assert len(runs) == 1 and runs[0]["metadata"]["labels"]["gpuaas.io/reaction"] == "on-idle"
    assert {p["name"]: p["value"] for p in runs[0]["spec"]["arguments"]["parameters"]} == {
        "namespace": NS, "workload": name_of(due), "event": "", "dry-run": "false",
        "tenant": due.workload["status"]["admission"]["clusterQueue"]}
    assert out["record"]["data"]["observed"]["counts"]["idle warning delivered"] == 1
    # the next pass finds the run (its name is the warning's) in the list it reads: no second one, and no create
    # tried (the step may leave the warning pending: the budget, no demand; a failing create every pass is noise)
    api.reset_counters()
    code, out = step("sweep", run="s2", installed_at="2020-01-01T00:00:00Z")
    assert out["record"]["data"]["observed"]["counts"]["idle warning run existed (an earlier pass)"] == 1
    assert len([w for w in api.store.list(R.WORKFLOW, "gpuaas")
                if w["spec"]["workflowTemplateRef"]["name"] == "gpuaas-on-idle"]) == 1
    assert api.write_count == 0 and not out["record"]["data"]["errors"]


def test_the_sweep_delivers_a_warning_again_once_it_is_past_its_lapse(api: ApiServer, step: Runner) -> None:
    # Delivered at releaseAfter and left pending by the step (the release waited); 2 h later it lapses
    # (steps.warning.LAPSE_AFTER_DUE_SECONDS), and the sweep delivers it a second time so the step records that,
    # even when no alert is re-sent. Never a third time.
    due = Scene.of("Job", name="due")
    seed(api, due)
    now = datetime.now(UTC)
    _warned(api, due, now - timedelta(hours=3))
    workload = live(api, due)
    api.store.create(R.WORKFLOW, sweep.warning_run_body(workload, read_warning(workload), "gpuaas", now - timedelta(
        hours=2, minutes=58)), "gpuaas")  # the delivery at releaseAfter, by an earlier pass; the step left it pending
    code, out = step("sweep", run="s1", installed_at="2020-01-01T00:00:00Z")
    assert code == 0 and out["record"]["data"]["observed"]["counts"]["idle warning delivered"] == 1
    runs = sorted(w["metadata"]["name"] for w in api.store.list(R.WORKFLOW, "gpuaas")
                  if w["spec"]["workflowTemplateRef"]["name"] == "gpuaas-on-idle")
    assert len(runs) == 2 and runs[1] == runs[0] + "-lapse", runs
    code, out = step("sweep", run="s2", installed_at="2020-01-01T00:00:00Z")
    assert out["record"]["data"]["observed"]["counts"]["idle warning run existed (an earlier pass)"] == 1


def test_the_sweep_in_dry_run_lists_the_due_warning_and_creates_nothing(api: ApiServer, step: Runner) -> None:
    due = Scene.of("Job", name="due")
    seed(api, due)
    _warned(api, due, datetime.now(UTC) - timedelta(seconds=1))
    api.reset_counters()
    code, out = step("sweep", run="s", dry_run="true", installed_at="2020-01-01T00:00:00Z")
    assert code == 0 and api.write_count == 0
    assert out["record"]["data"]["observed"]["counts"]["would deliver idle warning"] == 1


def test_an_admission_being_evicted_is_no_new_transition() -> None:
    """Real Kueue v0.19 (the real demo, a RayCluster released by on-idle): right after deactivation the Workload
    had Evicted=True (Deactivated) and schedulingStats.evictions count 1 while Admitted stayed True with its old
    time; the key's eviction count made that a new admission (#1) and the sweep recorded a run for it, a third
    on-admitted for one Ray cluster admitted twice. An admission under eviction is none; the re-admission
    (Admitted at a new time, Evicted=False) is the next transition."""
    workload = Scene.of("Job").workload
    being_evicted = copy.deepcopy(workload)
    being_evicted["status"]["conditions"].append({"type": "Evicted", "status": "True", "reason": "Deactivated",
                                                  "lastTransitionTime": ts(120), "message": "The workload is deactivated"})
    being_evicted["status"]["schedulingStats"] = {"evictions": [{"reason": "Deactivated", "count": 1}]}
    assert delivery.admitted_transition(being_evicted) is None
    readmitted = copy.deepcopy(being_evicted)
    for condition in readmitted["status"]["conditions"]:
        if condition["type"] == "Evicted":
            condition.update(status="False", reason="QuotaReserved", lastTransitionTime=ts(300))
        if condition["type"] == "Admitted":
            condition["lastTransitionTime"] = ts(300)
    assert delivery.admitted_transition(readmitted).key == f"admitted@{ts(300)}#1"
