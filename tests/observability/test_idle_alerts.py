"""idle-alerts: which alerts of a group become on-idle items, and pod -> Workload resolution against
the local API server for every kind's owner chain."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

from steps.plan import RejectedInput
from steps.reactions import idle_alerts as ia
from tests.observability.cluster_objects import Cluster
from tests.support.apiserver import gateway_for, running_apiserver


def alert(ns: str, pod: str, status: str = "firing", name: str = "GPUWorkloadIdle", fp: str = "") -> dict[str, Any]:
    return {"status": status, "labels": {"alertname": name, "namespace": ns, "pod": pod, "severity": "warning"},
            "annotations": {"summary": "idle"}, "startsAt": "2026-12-01T00:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus/graph", "fingerprint": fp or f"{ns}-{pod}"}


def group(*alerts: dict[str, Any], status: str = "firing") -> dict[str, Any]:
    return {"version": "4", "groupKey": '{}:{alertname="GPUWorkloadIdle"}', "truncatedAlerts": 0, "status": status,
            "receiver": "gpuaas-idle-webhook", "groupLabels": {"alertname": "GPUWorkloadIdle"}, "commonLabels": {},
            "commonAnnotations": {}, "externalURL": "http://alertmanager", "alerts": list(alerts)}


# -- the event: every shape the Sensor may deliver -------------------------------------------------
BODY = group(alert("team-a", "nb-0"))
WEBHOOK_DATA = {"header": {"Content-Type": ["application/json"]}, "body": BODY, "metadata": {}}


@pytest.mark.parametrize("event", [
    BODY,
    WEBHOOK_DATA,
    {"context": {"id": "e1", "type": "webhook", "source": "gpuaas-alertmanager"}, "data": WEBHOOK_DATA},
    {"context": {"id": "e2", "type": "webhook"}, "data": base64.b64encode(json.dumps(WEBHOOK_DATA).encode()).decode()},
    json.dumps({"context": {"id": "e3"}, "data": WEBHOOK_DATA}),
    {"header": {}, "body": json.dumps(BODY)},
], ids=["bare-body", "webhook-data", "event-object", "event-base64", "event-json-text", "body-as-text"])
def test_alertmanager_body_from_any_event_shape(event: Any) -> None:
    assert ia.alertmanager_body(event)["alerts"][0]["labels"]["pod"] == "nb-0"


@pytest.mark.parametrize(("event", "field"), [
    ("", "event"),
    ("not json", "event"),
    ({"context": {"id": "e1"}, "data": {"header": {}, "body": {"status": "firing"}}}, "event.data.body.alerts"),
    ({"header": {}, "body": "{not json"}, "event.data.body"),
    ({"version": "3", "alerts": []}, "event.data.body.version"),
    ({"context": {"id": "e1"}, "data": "%%%"}, "event.data"),
    ({"context": {"type": "webhook"}, "data": WEBHOOK_DATA}, "event.context.id"),   # no invented id (issue 10)
])
def test_bad_events_name_the_field(event: Any, field: str) -> None:
    with pytest.raises(RejectedInput) as caught:
        ia.alertmanager_body(event)
    assert caught.value.field == field, str(caught.value)


def test_cloudevent_structured_mode_is_accepted() -> None:
    event = {"specversion": "1.0", "id": "abc", "source": "gpuaas-alertmanager", "type": "webhook",
             "subject": "idle", "datacontenttype": "application/json", "data": WEBHOOK_DATA}
    assert ia.alertmanager_body(event)["alerts"][0]["labels"]["namespace"] == "team-a"


# -- which alerts count (pure) ---------------------------------------------------------------------
def test_only_firing_idle_alerts_with_pod_labels_are_candidates() -> None:
    no_pod = alert("team-a", "")
    keep, skipped, _ = ia.candidate_alerts(group(
        alert("team-a", "nb-0"), alert("team-a", "nb-1", status="resolved"), alert("team-a", "x", name="KubePodCrashLooping"),
        no_pod, alert("team-a", "nb-0", fp="again")))
    assert [(a.namespace, a.pod) for a in keep] == [("team-a", "nb-0")]
    reasons = [s.reason for s in skipped]
    assert reasons == ["alert status is resolved, not firing", "alert KubePodCrashLooping is not GPUWorkloadIdle",
                       "alert has no namespace/pod labels (check the rule's `by (namespace, pod)`)",
                       "duplicate alert for pod team-a/nb-0 in the same group"]


def test_split_gives_one_item_per_workload() -> None:
    wl = {"metadata": {"name": "raycluster-demo-1a2b3", "namespace": "team-a"}}
    alerts, _, _ = ia.candidate_alerts(group(alert("team-a", "w-0"), alert("team-a", "w-1"), alert("team-a", "gone")))
    resolved = {("team-a", "w-0"): ia.PodWorkload("team-a", "w-0", True, workload=wl),
                ("team-a", "w-1"): ia.PodWorkload("team-a", "w-1", True, workload=wl),
                ("team-a", "gone"): ia.PodWorkload("team-a", "gone", False, reason="pod team-a/gone no longer exists")}
    split = ia.split_alerts(alerts, resolved)
    assert [(i["namespace"], i["workload"], i["pod"]) for i in split.items] == [("team-a", "raycluster-demo-1a2b3", "w-0")]
    assert split.items[0]["alert"]["labels"]["pod"] == "w-0"
    assert [s.alert.pod for s in split.skipped] == ["w-1", "gone"]
    assert "already has an item" in split.skipped[0].reason
    assert split.skipped[1].reason == "pod team-a/gone no longer exists"


def test_annotation_only_owner_matches_statefulset_workload() -> None:
    chain = (ia.OwnerLink("v1", "Pod", "nb-0", "u-pod"), ia.OwnerLink("apps/v1", "StatefulSet", "nb", "u-sts"))
    wl = {"metadata": {"name": "statefulset-nb-0a1b2", "annotations": {
        "kueue.x-k8s.io/job-owner-gvk": "apps/v1, Kind=StatefulSet", "kueue.x-k8s.io/job-owner-name": "nb"}}}
    other = {"metadata": {"name": "other", "annotations": {
        "kueue.x-k8s.io/job-owner-gvk": "leaderworkerset.x-k8s.io/v1, Kind=LeaderWorkerSet",
        "kueue.x-k8s.io/job-owner-name": "nb"}}}
    assert ia.workload_for_chain([other, wl], chain) is wl


# -- pod -> Workload against the API server ------------------------------------------------------------
@pytest.fixture
def cluster() -> Iterator[tuple[Cluster, Any]]:
    with running_apiserver() as api:
        yield Cluster(api.store), gateway_for(api)


def test_resolution_for_every_owner_chain(cluster: tuple[Cluster, Any]) -> None:
    c, kube = cluster
    _, ray_wl, ray_pods = c.ray_cluster("team-a", "demo", workers=2)
    _, dep_wl, dep_pod = c.deployment_pod_workload("team-b", "infer")
    _, job_wl, job_pod = c.job("team-a", "train")
    _, sts_wl, sts_pod = c.stateful_set("team-c", "notebook")
    stray = c.pod("team-a", "debug-shell", None)
    cases = [(ray_pods[1], ray_wl), (dep_pod, dep_wl), (job_pod, job_wl), (sts_pod, sts_wl)]
    for pod, workload in cases:
        found = ia.resolve_pod_workload(kube, pod["metadata"]["namespace"], pod["metadata"]["name"])
        assert found.workload_name == workload["metadata"]["name"], found
    unowned = ia.resolve_pod_workload(kube, "team-a", stray["metadata"]["name"])
    assert unowned.pod_found and unowned.workload is None and "belongs to no Kueue Workload" in unowned.reason
    gone = ia.resolve_pod_workload(kube, "team-a", "vanished-0")
    assert not gone.pod_found and "no longer exists" in gone.reason


def test_pods_of_a_workload_are_all_its_running_pods(cluster: tuple[Cluster, Any]) -> None:
    c, kube = cluster
    _, ray_wl, pods = c.ray_cluster("team-a", "demo", workers=3)
    c.ray_cluster("team-a", "other", workers=1)
    c.pod("team-a", "demo-worker-gpu-old", c.created[0], phase="Failed")
    assert ia.pods_of_workload(kube, ray_wl) == sorted(p["metadata"]["name"] for p in pods)
    _, dep_wl, dep_pod = c.deployment_pod_workload("team-a", "infer")
    assert ia.pods_of_workload(kube, dep_wl) == [dep_pod["metadata"]["name"]]


def test_group_to_items_against_the_api_server(cluster: tuple[Cluster, Any]) -> None:
    c, kube = cluster
    _, ray_wl, ray_pods = c.ray_cluster("team-a", "demo", workers=2)
    _, job_wl, job_pod = c.job("team-b", "train")
    c.pod("team-a", "debug-shell", None)
    event = {"context": {"id": "e1", "type": "webhook"}, "data": {"header": {}, "body": group(
        alert("team-a", ray_pods[1]["metadata"]["name"]), alert("team-a", ray_pods[2]["metadata"]["name"]),
        alert("team-b", job_pod["metadata"]["name"]), alert("team-a", "debug-shell"),
        alert("team-a", "nb-0", status="resolved"), alert("team-a", "vanished-0"))}}
    state = ia.observe(kube, event)
    split = ia.plan(state)
    assert [(i["namespace"], i["workload"]) for i in split.items] == [
        ("team-a", ray_wl["metadata"]["name"]), ("team-b", job_wl["metadata"]["name"])]
    reasons = {s.alert.pod: s.reason for s in split.skipped}
    assert set(reasons) == {ray_pods[2]["metadata"]["name"], "debug-shell", "nb-0", "vanished-0"}
    assert "belongs to no Kueue Workload" in reasons["debug-shell"]
    assert "no longer exists" in reasons["vanished-0"]
    assert state.observed()["alerts"] == 6


def _run_step(api_url: str, tmp_path: Any, reaction: str, params: dict[str, str]) -> tuple[int, dict[str, str]]:
    from steps.entrypoint import main

    params_file = tmp_path / "params.json"
    params_file.write_text(json.dumps([{"name": k, "value": v} for k, v in params.items()]))
    out = tmp_path / "outputs"
    code = main([reaction, str(params_file)], outputs_dir=str(out), environ={"GPUAAS_KUBE_URL": api_url})
    return code, {p.name: p.read_text() for p in out.iterdir()}


def test_step_writes_the_alerts_output_and_a_record(tmp_path: Any) -> None:
    with running_apiserver() as api:
        c = Cluster(api.store)
        _, ray_wl, ray_pods = c.ray_cluster("team-a", "demo", workers=2)
        event = {"context": {"id": "e1", "type": "webhook", "source": "gpuaas-alertmanager", "subject": "alertmanager"},
                 "data": base64.b64encode(json.dumps({"header": {}, "body": group(
                     alert("team-a", ray_pods[1]["metadata"]["name"]), alert("team-a", "x", status="resolved"))})
                     .encode()).decode()}
        writes_before = api.write_count
        code, outputs = _run_step(api.url, tmp_path, "idle-alerts", {"event": json.dumps(event), "dry-run": "false"})
        assert api.write_count == writes_before
    assert code == 0 and outputs["outcome"] == "applied"
    items = json.loads(outputs["alerts"])
    assert [(i["namespace"], i["workload"], i["pod"]) for i in items] == [
        ("team-a", ray_wl["metadata"]["name"], ray_pods[1]["metadata"]["name"])]
    record = json.loads(outputs["record"])
    assert record["type"] == "io.gpuaas.reaction.idle-alerts"
    assert record["data"]["observed"]["skipped"][0]["reason"] == "alert status is resolved, not firing"


@pytest.mark.parametrize(("event", "field"), [("", "event"), ('{"version": "4", "status": "firing"}', "event.data.body.alerts")])
def test_step_rejects_bad_events_without_writes(tmp_path: Any, event: str, field: str) -> None:
    with running_apiserver() as api:
        code, outputs = _run_step(api.url, tmp_path, "idle-alerts", {"event": event})
        assert api.write_count == 0
    assert code == 0 and outputs["outcome"] == "rejected-input"
    assert json.loads(outputs["record"])["data"]["errors"][0].startswith(f"{field}: expected")


def test_hand_submission_with_a_workload_yields_that_workload(tmp_path: Any) -> None:
    with running_apiserver() as api:
        c = Cluster(api.store)
        _, job_wl, _ = c.job("team-a", "train")
        name = job_wl["metadata"]["name"]
        writes = api.write_count
        code, outputs = _run_step(api.url, tmp_path, "idle-alerts", {"namespace": "team-a", "workload": name, "event": ""})
        assert code == 0 and outputs["outcome"] == "applied"
        assert json.loads(outputs["alerts"]) == [{"namespace": "team-a", "workload": name, "pod": "", "alert": ""}]
        code, outputs = _run_step(api.url, tmp_path, "idle-alerts", {"namespace": "team-a", "workload": "nope", "event": ""})
        assert outputs["outcome"] == "no-op" and outputs["alerts"] == "[]"
        assert api.write_count == writes


MALFORMED_ALERTS = [
    ("labels-a-list", {"status": "firing", "labels": ["GPUWorkloadIdle", "team-a"]}, "labels"),
    ("labels-a-string", {"status": "firing", "labels": "alertname=GPUWorkloadIdle"}, "labels"),
    ("alert-a-string", "GPUWorkloadIdle team-a/nb-0", "an object"),
    ("label-value-not-text", {"status": "firing", "labels": {"alertname": "GPUWorkloadIdle", "namespace": "team-a",
                                                             "pod": ["a", "b"]}}, "labels.pod"),
    ("pod-not-a-dns-name", {"status": "firing", "labels": {"alertname": "GPUWorkloadIdle", "namespace": "team-a",
                                                           "pod": "Nb_0!"}}, "labels.pod"),
    ("namespace-non-ascii", {"status": "firing", "labels": {"alertname": "GPUWorkloadIdle", "namespace": "tëam-a",
                                                            "pod": "nb-0"}}, "labels.namespace"),
    ("status-not-text", {"status": {"state": "firing"}, "labels": {"alertname": "GPUWorkloadIdle"}}, "status"),
]


@pytest.mark.parametrize(("bad", "field"), [m[1:] for m in MALFORMED_ALERTS], ids=[m[0] for m in MALFORMED_ALERTS])
def test_one_malformed_alert_is_rejected_and_the_rest_fan_out(tmp_path: Any, bad: Any, field: str) -> None:
    """Issue 10 item 9: a malformed alert is rejected in the record; the good alerts of the same
    group still become on-idle items (the step does not fail the whole group)."""
    with running_apiserver() as api:
        c = Cluster(api.store)
        _, job_wl, job_pod = c.job("team-b", "train")
        body = group(alert("team-b", job_pod["metadata"]["name"]), bad)
        code, outputs = _run_step(api.url, tmp_path, "idle-alerts", {"event": json.dumps({"header": {}, "body": body})})
    record = json.loads(outputs["record"])
    assert code == 0 and outputs["outcome"] == "applied", record["data"]["errors"]
    assert [i["workload"] for i in json.loads(outputs["alerts"])] == [job_wl["metadata"]["name"]]
    [rejected] = record["data"]["observed"]["rejected"]
    assert rejected["index"] == 1 and rejected["reason"].startswith("event.data.body.alerts[1]"), rejected
    assert field in rejected["reason"].split(": found")[0], rejected
    assert any(e.startswith("event.data.body.alerts[1]") for e in record["data"]["errors"])


def test_a_group_of_only_malformed_alerts_is_rejected_input(tmp_path: Any) -> None:
    with running_apiserver() as api:
        body = group({"status": "firing", "labels": ["x"]}, "not an alert")
        code, outputs = _run_step(api.url, tmp_path, "idle-alerts", {"event": json.dumps(body)})
    record = json.loads(outputs["record"])
    assert code == 0 and outputs["outcome"] == "rejected-input" and outputs["alerts"] == "[]"
    assert len(record["data"]["observed"]["rejected"]) == 2


def test_an_item_reaches_on_idle_as_an_alert_it_can_read_after_argos_item_expansion() -> None:
    """The on-idle child's `alert` is `{{item.alert}}` of idle-alerts' item. Argo hands a string value
    of an item on JSON-escaped (engine.expressions.item_scope), so the alert must be an object in the
    item; seen on the real stack: every child was rejected-input 'alert: expected JSON'."""
    from engine.expressions import item_scope
    from steps.reactions.on_idle import parse_request

    wl = {"metadata": {"name": "job-train-1a2b3", "namespace": "team-a"}}
    alerts, _, _ = ia.candidate_alerts(group(alert("team-a", "w-0")))
    [item] = ia.split_alerts(alerts, {("team-a", "w-0"): ia.PodWorkload("team-a", "w-0", True, workload=wl)}).items
    items = json.loads(json.dumps([item]))  # the `alerts` output, as withParam reads it
    scope = item_scope(items[0])
    request = parse_request({"namespace": scope["item.namespace"], "workload": scope["item.workload"],
                             "pod": scope["item.pod"], "alert": scope["item.alert"], "dry-run": "false"})
    assert request.alert is not None and request.alert.pod == "w-0" and request.workload == "job-train-1a2b3"
