"""Warn, then release, as a whole step against the real parts: the local API server and a real Prometheus scraping
the DCGM-like exporters (the world of test_on_idle_observe: team-a/nb-idle holds two idle GPUs of Job finetune,
team-a/nb-busy's GPU is at 70%). The tenant's webhook is a real HTTP server on a local port."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from steps.gateways import resources as R
from steps.gateways.errors import Conflict
from steps.plan import ReactionRequest
from steps.policy import Policy
from steps.warning import WARNING_ANNOTATION
from tests.observability import test_on_idle_observe as base
from tests.observability.cluster_objects import ref
from tests.observability.conftest import WINDOW_S, GpuStack
from tests.observability.test_on_idle_observe import SETTINGS, World, run_step
from tests.observability.test_on_idle_observe import params as alert_params

world = base.world
"""The world of test_on_idle_observe (its fixture, used here by name)."""

WORKLOAD = "job-finetune-5c6d7"
GRACE = replace(SETTINGS, warn_seconds=4.0)
"""Long enough that the re-send below comes within it on a loaded machine (a step takes about 0.2 s)."""


def params(ns: str, pod: str, episode: str = "idle@2026-12-01T00:00:00Z") -> dict[str, str]:
    """The item idle-alerts hands on-idle: the alert with its workload's episode (the earliest startsAt)."""
    p = alert_params(ns, pod)
    p["alert"] = json.dumps({**json.loads(p["alert"]), "episode": episode})
    return p


def annotations(world: World, name: str = WORKLOAD) -> dict[str, str]:
    return world.cluster.store.get(R.WORKLOAD, name, "team-a")["metadata"].get("annotations") or {}


def warning(world: World, name: str = WORKLOAD) -> dict[str, Any]:
    return json.loads(annotations(world, name)[WARNING_ANNOTATION])


def events(world: World, reason: str) -> list[dict[str, Any]]:
    return [e for e in world.cluster.store.list(R.EVENT, "team-a") if e.get("reason") == reason]


@pytest.fixture
def webhook() -> Iterator[list[dict[str, Any]]]:
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    received.append({"url": f"http://127.0.0.1:{server.server_address[1]}/hook/{{namespace}}"})
    yield received
    server.shutdown()
    server.server_close()


def test_warn_then_a_re_send_is_a_repeat_then_the_release_links_the_warning(world: World, tmp_path: Path,
                                                                           webhook: list[dict[str, Any]]) -> None:
    settings = replace(GRACE, warn_webhook=webhook.pop(0)["url"])
    code, outputs, record = run_step(world, tmp_path, params("team-a", "nb-idle"), settings)
    assert code == 0 and outputs["outcome"] == "applied", record["data"]["errors"]
    warned = warning(world)
    assert warned["state"] == "warned" and warned["episode"] == "idle@2026-12-01T00:00:00Z"
    assert workload_active(world) and "gpuaas.io/release" not in annotations(world)
    [event] = events(world, "GPUIdleWarning")
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "Job"
    assert event["involvedObject"]["name"] == "finetune" and warned["releaseAfter"] in event["message"]
    assert outputs["gpus-released"] == "0"
    [notice] = webhook
    assert notice["kind"] == "GPUIdleWarning" and notice["workload"] == f"team-a/{WORKLOAD}"
    assert notice["releaseAfter"] == warned["releaseAfter"] and notice["gpus"] == 2
    assert [a["action"] for a in record["data"]["actions"]][-1] == "notify-webhook"

    # Alertmanager re-sends within the grace: nothing is written, nobody is told twice.
    writes = world.api.write_count
    code, outputs, record = run_step(world, tmp_path, params("team-a", "nb-idle"), settings)
    assert code == 0 and outputs["outcome"] == "no-op" and world.api.write_count == writes
    assert "within the grace period" in record["data"]["plan"]["reasons"][0] and len(webhook) == 1

    time.sleep(4.2)
    code, outputs, record = run_step(world, tmp_path, params("team-a", "nb-idle"), settings)
    assert code == 0 and outputs["outcome"] == "applied" and outputs["gpus-released"] == "2"
    assert not workload_active(world)
    release = json.loads(annotations(world)["gpuaas.io/release"])
    assert f"by run {warned['run']}" in release["reason"] and warned["warnedAt"] in release["reason"]
    after = warning(world)
    assert after["state"] == "released" and after["warnedAt"] == warned["warnedAt"]
    assert record["data"]["observed"]["idle"]["warning"]["state"] == "warned"
    assert len(events(world, "GPUIdleWarning")) == 1 and len(webhook) == 1

    writes = world.api.write_count
    code, outputs, _ = run_step(world, tmp_path, params("team-a", "nb-idle"), settings)
    assert code == 0 and outputs["outcome"] == "no-op" and world.api.write_count == writes


def workload_active(world: World, name: str = WORKLOAD) -> bool:
    return world.cluster.store.get(R.WORKLOAD, name, "team-a")["spec"].get("active", True) is not False


def test_activity_in_the_grace_cancels_and_a_new_episode_warns_again(world: World, tmp_path: Path) -> None:
    busy = "pod-nb-busy-1f2e3"
    # A warning given while the GPU was idle (by an earlier run, 10 s ago); now it is at 70%.
    now = datetime.now(UTC)
    warned_at = (now - timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    pending = {"episode": "idle@2026-12-01T00:00:00Z", "warnedAt": warned_at,
               "releaseAfter": (now + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"), "run": "wf-earlier",
               "state": "warned"}
    world.cluster.store.patch(R.WORKLOAD, busy,
                              {"metadata": {"annotations": {WARNING_ANNOTATION: json.dumps(pending)}}}, "team-a")
    code, outputs, record = run_step(world, tmp_path, params("team-a", "nb-busy"), GRACE)
    assert code == 0 and outputs["outcome"] == "applied", record["data"]
    cancelled = warning(world, busy)
    assert cancelled["state"] == "cancelled" and cancelled["reason"].startswith("activity: ")
    assert "reached 70%" in cancelled["reason"] and cancelled["warnedAt"] == warned_at
    assert "idle warning cancelled (activity" in record["data"]["plan"]["reasons"][0]
    [event] = events(world, "GPUIdleWarningCancelled")
    assert event["involvedObject"]["kind"] == "Deployment" and event["type"] == "Normal"
    writes = world.api.write_count
    code, outputs, _ = run_step(world, tmp_path, params("team-a", "nb-busy"), GRACE)
    assert outputs["outcome"] == "no-op" and world.api.write_count == writes  # cancelled once


def test_the_opt_out_annotation_cancels_a_pending_warning(world: World, tmp_path: Path) -> None:
    _, outputs, _ = run_step(world, tmp_path, params("team-a", "nb-idle"), GRACE)
    assert outputs["outcome"] == "applied" and warning(world)["state"] == "warned"
    world.cluster.store.patch(R.JOB, "finetune",
                              {"metadata": {"annotations": {"gpuaas.io/idle-policy": "exempt"}}}, "team-a")
    code, outputs, record = run_step(world, tmp_path, params("team-a", "nb-idle"), GRACE)
    assert code == 0 and outputs["outcome"] == "applied" and workload_active(world)
    assert warning(world)["state"] == "cancelled" and warning(world)["reason"].startswith("opt-out: Job finetune")
    assert record["data"]["outcome"] == "applied" and outputs["gpus-released"] == "0"


def test_dry_run_records_the_warning_it_would_give_and_writes_nothing(world: World, tmp_path: Path) -> None:
    writes = world.api.write_count
    code, outputs, record = run_step(world, tmp_path, params("team-a", "nb-idle"), replace(GRACE, mode="dry-run"))
    assert code == 0 and world.api.write_count == writes and WARNING_ANNOTATION not in annotations(world)
    assert outputs["outcome"] == "applied" and outputs["gpus-released"] == "0"  # applied as a dry-run: nothing written
    assert [a["action"] for a in record["data"]["actions"]] == ["idle-warning-warned", "event-GPUIdleWarning"]
    assert {a["result"] for a in record["data"]["actions"]} == {"dry-run"}
    assert "warning the owner" in record["data"]["plan"]["reasons"][0]


def test_the_sweeps_delivery_without_an_alert_releases_and_marks_the_warned_episode(world: World,
                                                                                    tmp_path: Path) -> None:
    _, outputs, _ = run_step(world, tmp_path, params("team-a", "nb-idle"), GRACE)
    assert outputs["outcome"] == "applied" and warning(world)["state"] == "warned"
    time.sleep(4.2)
    # what gpuaas-on-idle's hand path hands on-idle when the sweep submits it: namespace and workload, no alert
    by_hand = {"namespace": "team-a", "workload": WORKLOAD, "pod": "", "alert": "", "dry-run": "false", "event": "",
               "tenant": ""}
    code, outputs, record = run_step(world, tmp_path, by_hand, GRACE)
    assert code == 0 and outputs["outcome"] == "applied" and not workload_active(world)
    marker = json.loads(annotations(world)["gpuaas.io/handled-on-idle"])
    assert marker["transition"] == "idle@2026-12-01T00:00:00Z" and marker["state"] == "handled"
    assert marker["via"] == "hand"  # a run not named gpuaas-on-idle-w-... (this test's has no name)
    # Alertmanager re-sends the warned episode later: a repeat, nothing written
    writes = world.api.write_count
    _, outputs, record = run_step(world, tmp_path, params("team-a", "nb-idle"), GRACE)
    assert outputs["outcome"] == "no-op" and world.api.write_count == writes
    assert "repeat of idle episode" in record["data"]["plan"]["reasons"][0]


def test_a_webhook_that_fails_is_recorded_and_the_warning_stands(world: World, tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = replace(GRACE, warn_seconds=3600, warn_webhook=f"http://127.0.0.1:{port}/hook")
    code, outputs, record = run_step(world, tmp_path, params("team-a", "nb-idle"), settings)
    # the tenant was not told as its policy asks: an error of the run (gpuaas audit lists it), not a quiet note
    assert code == 1 and outputs["outcome"] == "failed" and warning(world)["state"] == "warned"
    notify = record["data"]["actions"][-1]
    assert notify["action"] == "notify-webhook" and notify["result"] == "failed"
    [error] = record["data"]["errors"]
    assert error.startswith(f"the webhook http://127.0.0.1:{port}/hook failed") and "the Event and the" in error
    assert [a["result"] for a in record["data"]["actions"][:-1]] == ["applied"] * 3  # the warning stands
    assert len(events(world, "GPUIdleWarning")) == 1
    # not retried: the owner was marked told (the Event); the next delivery tells nobody
    writes = world.api.write_count
    code, outputs, _ = run_step(world, tmp_path, params("team-a", "nb-idle"), settings)
    assert code == 0 and outputs["outcome"] == "no-op" and world.api.write_count == writes


def cut_warning(world: World) -> dict[str, str]:
    """A pending warning whose run wrote the annotation and stopped before it told the owner (no notifiedAt)."""
    now = datetime.now(UTC)
    pending = {"episode": "idle@2026-12-01T00:00:00Z", "warnedAt": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
               "releaseAfter": (now + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"), "run": "wf-cut",
               "state": "warned"}
    world.cluster.store.patch(R.WORKLOAD, WORKLOAD, {"metadata": {"annotations": {
        WARNING_ANNOTATION: json.dumps(pending)}}}, "team-a")
    return pending


def test_a_warning_whose_run_stopped_before_its_event_gets_the_event_at_the_next_delivery(
        world: World, tmp_path: Path, webhook: list[dict[str, Any]]) -> None:
    pending = cut_warning(world)
    settings = replace(GRACE, warn_webhook=webhook.pop(0)["url"])
    code, outputs, record = run_step(world, tmp_path, params("team-a", "nb-idle"), settings)
    assert code == 0 and outputs["outcome"] == "applied"
    assert [a["action"] for a in record["data"]["actions"]] == ["event-GPUIdleWarning", "idle-warning-notified",
                                                                "notify-webhook"]
    [event] = events(world, "GPUIdleWarning")
    assert pending["releaseAfter"] in event["message"]
    assert warning(world) == {**pending, "notifiedAt": warning(world)["notifiedAt"]}  # only the mark added
    assert [n["warnedAt"] for n in webhook] == [pending["warnedAt"]]
    writes = world.api.write_count
    _, outputs, _ = run_step(world, tmp_path, params("team-a", "nb-idle"), settings)
    assert outputs["outcome"] == "no-op" and world.api.write_count == writes and len(webhook) == 1


def stopped_after_the_event(world: World, tmp_path: Path) -> dict[str, Any]:
    """A pending warning with its Event, not marked notified: as if its run had stopped between the two."""
    cut_warning(world)
    run_step(world, tmp_path, params("team-a", "nb-idle"), GRACE)  # the Event, then the mark
    [event] = events(world, "GPUIdleWarning")
    text = json.dumps({k: v for k, v in warning(world).items() if k != "notifiedAt"})
    world.cluster.store.patch(R.WORKLOAD, WORKLOAD, {"metadata": {"annotations": {WARNING_ANNOTATION: text}}},
                              "team-a")
    return event


def test_a_warning_whose_run_stopped_after_its_event_is_marked_and_told_without_a_second_event(
        world: World, tmp_path: Path, webhook: list[dict[str, Any]]) -> None:
    settings = replace(GRACE, warn_webhook=webhook.pop(0)["url"])
    event = stopped_after_the_event(world, tmp_path)
    code, _, record = run_step(world, tmp_path, params("team-a", "nb-idle"), settings)
    assert code == 0 and [a["action"] for a in record["data"]["actions"]] == ["idle-warning-notified",
                                                                              "notify-webhook"]
    assert "its Event but no mark" in record["data"]["plan"]["reasons"][0]
    assert events(world, "GPUIdleWarning") == [event] and len(webhook) == 1 and warning(world)["notifiedAt"]


def test_of_two_runs_that_would_tell_the_owner_only_the_one_that_marks_posts(world: World, tmp_path: Path,
                                                                            webhook: list[dict[str, Any]]) -> None:
    # Two deliveries read the same unmarked warning; the second one's mark tests the text it read, which the first
    # one's mark changed: Conflict, read again, the mark is there, nothing more.
    from steps.reactions import StepContext
    from steps.reactions.on_idle import apply_with_notice, observe_step, plan_step

    stopped_after_the_event(world, tmp_path)
    settings = replace(GRACE, warn_webhook=webhook.pop(0)["url"])
    context = StepContext(reaction="on-idle", params=params("team-a", "nb-idle"), kube=world.kube,
                          metrics=world.metrics, policy=Policy(idle=settings))
    request = ReactionRequest.from_params("on-idle", context.params)
    first, second = (plan_step(request, observe_step(context, request), context.policy) for _ in range(2))
    assert [a.action for a in second.actions] == ["idle-warning-notified"]
    assert [r.result for r in apply_with_notice(world.kube, first, False)] == ["applied"] * 2
    with pytest.raises(Conflict):
        apply_with_notice(world.kube, second, False)
    assert len(webhook) == 1 and len(events(world, "GPUIdleWarning")) == 1


def test_the_opt_out_on_an_owner_above_the_direct_one_is_read_before_warning(world: World, tmp_path: Path) -> None:
    # A PyTorchJob above the Job (as a Notebook above its StatefulSet): the tenant annotates the object they know,
    # the top one. The judgement reads the whole owner chain, as release-workers does: no warning, nothing written.
    parent = world.cluster.create(R.PYTORCH_JOB, {"metadata": {"name": "ptj", "namespace": "team-a", "annotations": {
        "gpuaas.io/idle-policy": "exempt"}}, "spec": {}})
    world.cluster.store.patch(R.JOB, "finetune", {"metadata": {"ownerReferences": [ref(parent)]}}, "team-a")
    writes = world.api.write_count
    code, outputs, record = run_step(world, tmp_path, params("team-a", "nb-idle"), GRACE)
    assert code == 0 and outputs["outcome"] == "skipped-by-policy", record["data"]["plan"]["reasons"]
    assert record["data"]["observed"]["idle"]["exemptBy"] == "PyTorchJob ptj"
    assert world.api.write_count == writes and WARNING_ANNOTATION not in annotations(world)
    assert not events(world, "GPUIdleWarning")


def test_activity_since_the_warning_cancels_when_the_window_no_longer_shows_it(world: World, tmp_path: Path,
                                                                             gpu_stack: GpuStack) -> None:
    # A GPU of a new Job (its own pod, so the session's exporters are untouched for other tests): idle, warned, busy
    # for a moment in the grace, then idle for longer than the window. The due delivery (the sweep's, no alert) reads
    # the activity since the warning, not only the window: cancelled, nothing released.
    job = world.cluster.create(R.JOB, {"metadata": {"name": "gap", "namespace": "team-a"}, "spec": {"parallelism": 1}})
    world.cluster.workload("team-a", "job-gap-1a2b3", job, cluster_queue="tenant-a", gpus=1)
    world.cluster.pod("team-a", "gap-worker", job, gpus=1)
    device = gpu_stack.plain.add_gpu("node-a", 7)
    try:
        gpu_stack.plain.assign(device.key, namespace="team-a", pod="gap-worker")
        gpu_stack.plain.set_utilization(device.key, 0)
        time.sleep(1.5)
        warned_at = datetime.now(UTC)
        time.sleep(1.0)
        gpu_stack.plain.set_utilization(device.key, 80)
        time.sleep(1.5)
        gpu_stack.plain.set_utilization(device.key, 0)
        time.sleep(WINDOW_S + 1.5)  # the window is idle again: only the span since the warning shows the work
        pending = {"episode": "idle@2026-12-01T00:00:00Z", "warnedAt": warned_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                   "releaseAfter": (datetime.now(UTC) - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                   "run": "wf-warned", "state": "warned"}
        world.cluster.store.patch(R.WORKLOAD, "job-gap-1a2b3", {"metadata": {"annotations": {
            WARNING_ANNOTATION: json.dumps(pending)}}}, "team-a")
        by_hand = {"namespace": "team-a", "workload": "job-gap-1a2b3", "pod": "", "alert": "", "dry-run": "false",
                   "event": "", "tenant": ""}
        code, outputs, record = run_step(world, tmp_path, by_hand, replace(GRACE, signal="none"))
        assert code == 0 and outputs["gpus-released"] == "0", record["data"]["plan"]["reasons"]
        assert workload_active(world, "job-gap-1a2b3")
        cancelled = warning(world, "job-gap-1a2b3")
        assert cancelled["state"] == "cancelled" and "reached 80%" in cancelled["reason"], cancelled
        assert record["data"]["observed"]["idle"]["activity"]["windowSeconds"] > WINDOW_S + 1.5
    finally:
        gpu_stack.plain.remove_gpu(device.key)


def test_an_expired_warning_event_is_not_written_again_and_the_owner_is_told_once(world: World, tmp_path: Path,
                                                                                 webhook: list[dict[str, Any]]) -> None:
    # The apiserver deletes Events after --event-ttl (1 h upstream, 3 h on OpenShift): with a 2 h grace, Alertmanager's
    # re-send at +65 min finds no GPUIdleWarning Event. The warning says its owner was told: nothing again.
    settings = replace(GRACE, warn_seconds=7200, warn_webhook=webhook.pop(0)["url"])
    code, outputs, record = run_step(world, tmp_path, params("team-a", "nb-idle"), settings)
    assert code == 0 and outputs["outcome"] == "applied" and len(webhook) == 1, record["data"]["errors"]
    [event] = events(world, "GPUIdleWarning")
    world.cluster.store.delete(R.EVENT, event["metadata"]["name"], "team-a")  # expired
    writes = world.api.write_count
    code, outputs, record = run_step(world, tmp_path, params("team-a", "nb-idle"), settings)
    assert code == 0 and outputs["outcome"] == "no-op", record["data"]["plan"]["reasons"]
    assert world.api.write_count == writes and not events(world, "GPUIdleWarning") and len(webhook) == 1
    assert warning(world)["notifiedAt"] == warning(world)["warnedAt"]


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def admitted_at(world: World, moment: datetime) -> None:
    obj = world.cluster.store.get(R.WORKLOAD, WORKLOAD, "team-a")
    for condition in obj["status"]["conditions"]:
        condition["lastTransitionTime"] = stamp(moment)
    world.cluster.store.replace(R.WORKLOAD, obj, "team-a", subresource="status")


def by_hand(name: str = WORKLOAD) -> dict[str, str]:
    """What gpuaas-on-idle's hand path hands on-idle when the sweep submits it: namespace and workload, no alert."""
    return {"namespace": "team-a", "workload": name, "pod": "", "alert": "", "dry-run": "false", "event": "",
            "tenant": ""}


def test_a_due_warning_given_before_the_workload_was_admitted_again_lapses(world: World, tmp_path: Path) -> None:
    # Warned, then evicted and admitted again (or released and resumed) 2 s ago: the warning was about the run
    # before. The sweep's delivery records it lapsed and releases nothing (the new admission is younger than
    # the minimum runtime); the sweep stops delivering it.
    now = datetime.now(UTC)
    pending = {"episode": "idle@2026-12-01T00:00:00Z", "warnedAt": stamp(now - timedelta(seconds=3)),
               "releaseAfter": stamp(now - timedelta(seconds=1)), "run": "wf-warned", "state": "warned",
               "notifiedAt": stamp(now - timedelta(seconds=3))}
    admitted_at(world, now)
    world.cluster.store.patch(R.WORKLOAD, WORKLOAD, {"metadata": {"annotations": {
        WARNING_ANNOTATION: json.dumps(pending)}}}, "team-a")
    code, outputs, record = run_step(world, tmp_path, by_hand(), GRACE)
    assert code == 0 and outputs["gpus-released"] == "0" and workload_active(world), record["data"]["plan"]
    lapsed = warning(world)
    assert lapsed["state"] == "lapsed" and lapsed["reason"].startswith("the workload was admitted again at "), lapsed
    assert "idle warning lapsed (" in record["data"]["plan"]["reasons"][0]
    writes = world.api.write_count
    _, outputs, _ = run_step(world, tmp_path, by_hand(), GRACE)
    assert outputs["outcome"] != "applied" and world.api.write_count == writes


def test_a_warning_long_past_its_release_time_lapses_and_the_owner_is_warned_afresh(world: World,
                                                                                     tmp_path: Path) -> None:
    # A warning due 3 days ago, never released (the release waited for the budget, then the alert stopped): a
    # delivery without an episode (the sweep once the earlier run's TTL deleted it, a UI resubmit) warns afresh.
    now = datetime.now(UTC)
    old = {"episode": "idle@2026-12-01T00:00:00Z", "warnedAt": stamp(now - timedelta(days=3, hours=1)),
           "releaseAfter": stamp(now - timedelta(days=3)), "run": "wf-old", "state": "warned",
           "notifiedAt": stamp(now - timedelta(days=3, hours=1))}
    admitted_at(world, now - timedelta(days=4))
    world.cluster.store.patch(R.WORKLOAD, WORKLOAD, {"metadata": {"annotations": {
        WARNING_ANNOTATION: json.dumps(old)}}}, "team-a")
    code, outputs, record = run_step(world, tmp_path, by_hand(), GRACE)
    assert code == 0 and outputs["gpus-released"] == "0" and workload_active(world), record["data"]["plan"]
    fresh = warning(world)
    assert fresh["state"] == "warned" and fresh["warnedAt"] != old["warnedAt"] and fresh["notifiedAt"]
    reasons = " ".join(record["data"]["plan"]["reasons"])
    assert f"due since {old['releaseAfter']}, more than 2 h without a release" in reasons
    assert record["data"]["observed"]["idle"]["activity"]["windowSeconds"] == WINDOW_S  # the window, not 3 days
    assert len(events(world, "GPUIdleWarning")) == 1
