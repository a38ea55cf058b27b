"""Contract: create, read, optimistic concurrency, patches, errors, over real HTTP."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest

from engine.apiserver import ApiServer
from steps.gateways import resources as R
from steps.gateways.errors import AlreadyExists, Conflict, NotFound, PermanentError
from steps.gateways.kubernetes import KubernetesGateway


def raw(api: ApiServer, method: str, path: str, body: object = None,
        content_type: str = "application/json") -> tuple[int, dict]:
    """One request with http.client, to check status codes and wire shapes the gateway hides."""
    conn = http.client.HTTPConnection(urlsplit(api.url).netloc, timeout=5)
    data = None if body is None else json.dumps(body)
    conn.request(method, path, body=data, headers={"Content-Type": content_type})
    response = conn.getresponse()
    payload = json.loads(response.read() or b"{}")
    conn.close()
    return response.status, payload


def workload(name: str | None = None, namespace: str = "team-a", **labels: str) -> dict:
    meta: dict = {"namespace": namespace, "labels": labels}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = "job-train-"
    return {"metadata": meta, "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 2}]}}


def test_create_answers_201_and_fills_server_side_metadata(api: ApiServer) -> None:
    status, obj = raw(api, "POST", R.WORKLOAD.path("team-a"), {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", **workload()})
    assert status == 201
    meta = obj["metadata"]
    assert meta["name"].startswith("job-train-") and len(meta["name"]) == len("job-train-") + 5
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert meta["generation"] == 1 and meta["namespace"] == "team-a"
    assert int(meta["resourceVersion"]) == api.store.resource_version


def test_resource_versions_are_one_global_counter(kube: KubernetesGateway) -> None:
    first = kube.create(R.WORKLOAD, workload("a"))
    second = kube.create(R.CLUSTER_QUEUE, {"metadata": {"name": "tenant-a"}, "spec": {}})
    assert int(second["metadata"]["resourceVersion"]) == int(first["metadata"]["resourceVersion"]) + 1


def test_create_of_a_taken_name_is_409_already_exists(api: ApiServer, kube: KubernetesGateway) -> None:
    kube.create(R.WORKLOAD, workload("a"))
    with pytest.raises(AlreadyExists) as caught:
        kube.create(R.WORKLOAD, workload("a"))
    assert caught.value.status == 409 and caught.value.reason == "AlreadyExists"
    assert 'workloads.kueue.x-k8s.io "a" already exists' in caught.value.message
    status, body = raw(api, "POST", R.WORKLOAD.path("team-a"), workload("a"))
    assert (status, body["kind"], body["code"], body["reason"]) == (409, "Status", 409, "AlreadyExists")


def test_get_of_a_missing_object_is_none_and_writes_raise_not_found(api: ApiServer,
                                                                    kube: KubernetesGateway) -> None:
    assert kube.get(R.WORKLOAD, "ghost", "team-a") is None
    with pytest.raises(NotFound) as caught:
        kube.merge_patch(R.WORKLOAD, "ghost", {"spec": {"active": False}}, "team-a")
    assert caught.value.status == 404 and '"ghost" not found' in caught.value.message
    status, body = raw(api, "GET", R.WORKLOAD.path("team-a", "ghost"))
    assert status == 404
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": 'workloads.kueue.x-k8s.io "ghost" not found', "reason": "NotFound",
                    "details": {"name": "ghost", "group": "kueue.x-k8s.io", "kind": "workloads"}, "code": 404}


def test_stale_resource_version_is_409_on_put_and_patch(kube: KubernetesGateway) -> None:
    created = kube.create(R.WORKLOAD, workload("a"))
    stale = created["metadata"]["resourceVersion"]
    kube.merge_patch(R.WORKLOAD, "a", {"metadata": {"labels": {"x": "1"}}}, "team-a")
    with pytest.raises(Conflict) as caught:
        kube.merge_patch(R.WORKLOAD, "a", {"metadata": {"resourceVersion": stale}, "spec": {"active": False}},
                         "team-a")
    assert caught.value.reason == "Conflict" and "the object has been modified" in caught.value.message
    with pytest.raises(Conflict):
        kube.replace(R.WORKLOAD, created)  # carries the stale resourceVersion
    with pytest.raises(Conflict):
        kube.json_patch(R.WORKLOAD, "a", [{"op": "replace", "path": "/metadata/resourceVersion", "value": stale},
                                          {"op": "add", "path": "/spec/active", "value": False}], "team-a")
    assert kube.get(R.WORKLOAD, "a", "team-a")["spec"].get("active") is None


def test_generation_counts_spec_changes_only(kube: KubernetesGateway) -> None:
    kube.create(R.WORKLOAD, workload("a"))
    after_label = kube.merge_patch(R.WORKLOAD, "a", {"metadata": {"labels": {"x": "1"}}}, "team-a")
    after_status = kube.merge_patch(R.WORKLOAD, "a", {"status": {"conditions": []}}, "team-a", "status")
    after_spec = kube.merge_patch(R.WORKLOAD, "a", {"spec": {"active": False}}, "team-a")
    assert [o["metadata"]["generation"] for o in (after_label, after_status, after_spec)] == [1, 1, 2]


def test_a_write_that_changes_nothing_keeps_the_resource_version(kube: KubernetesGateway) -> None:
    created = kube.create(R.WORKLOAD, workload("a", tier="gold"))
    same = kube.merge_patch(R.WORKLOAD, "a", {"metadata": {"labels": {"tier": "gold"}}}, "team-a")
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_merge_patch_follows_rfc_7386(kube: KubernetesGateway) -> None:
    kube.create(R.CONFIG_MAP, {"metadata": {"name": "policy", "namespace": "gpuaas",
                                            "annotations": {"keep": "1", "drop": "2"}},
                               "data": {"a": "1", "b": "2"}})
    patched = kube.merge_patch(R.CONFIG_MAP, "policy", {"metadata": {"annotations": {"drop": None}},
                                                        "data": {"b": None, "c": "3"}}, "gpuaas")
    assert patched["metadata"]["annotations"] == {"keep": "1"}
    assert patched["data"] == {"a": "1", "c": "3"}


def test_json_patch_operations_and_failed_test_is_422(api: ApiServer, kube: KubernetesGateway) -> None:
    kube.create(R.WORKLOAD, workload("a"))
    patched = kube.json_patch(R.WORKLOAD, "a", [
        {"op": "test", "path": "/spec/podSets/0/count", "value": 2},
        {"op": "replace", "path": "/spec/podSets/0/count", "value": 4},
        {"op": "add", "path": "/spec/podSets/-", "value": {"name": "worker", "count": 1}},
        {"op": "copy", "from": "/spec/queueName", "path": "/metadata/annotations"},
        {"op": "remove", "path": "/metadata/annotations"},
        {"op": "move", "from": "/spec/queueName", "path": "/spec/queue"},
        {"op": "add", "path": "/metadata/labels/gpuaas.io~1tenant", "value": "a"},
    ], "team-a")
    assert patched["spec"]["podSets"] == [{"name": "main", "count": 4}, {"name": "worker", "count": 1}]
    assert patched["spec"]["queue"] == "lq" and "queueName" not in patched["spec"]
    assert patched["metadata"]["labels"] == {"gpuaas.io/tenant": "a"}
    with pytest.raises(PermanentError) as caught:
        kube.json_patch(R.WORKLOAD, "a", [{"op": "test", "path": "/spec/podSets/0/count", "value": 2},
                                          {"op": "replace", "path": "/spec/queue", "value": "other"}], "team-a")
    assert caught.value.status == 422 and caught.value.reason == "Invalid"
    assert kube.get(R.WORKLOAD, "a", "team-a")["spec"]["queue"] == "lq"
    status, body = raw(api, "PATCH", R.WORKLOAD.path("team-a", "a"),
                       [{"op": "remove", "path": "/spec/nothing"}], "application/json-patch+json")
    assert (status, body["kind"], body["code"], body["reason"]) == (422, "Status", 422, "Invalid")
    assert "/spec/nothing" in body["message"]


def test_strategic_merge_patch_is_applied_as_a_merge_patch(api: ApiServer, kube: KubernetesGateway) -> None:
    kube.create(R.DEPLOYMENT, {"metadata": {"name": "d", "namespace": "n"}, "spec": {"replicas": 1}})
    status, body = raw(api, "PATCH", R.DEPLOYMENT.path("n", "d"), {"spec": {"replicas": 3}},
                       "application/strategic-merge-patch+json")
    assert status == 200 and body["spec"]["replicas"] == 3
    status, body = raw(api, "PATCH", R.DEPLOYMENT.path("n", "d"), {"spec": {}}, "application/apply-patch+yaml")
    assert status == 415 and body["reason"] == "UnsupportedMediaType"


def test_versions_of_a_group_share_storage(kube: KubernetesGateway) -> None:
    kube.create(R.WORKLOAD, workload("a"))
    old = kube.get(R.WORKLOAD_V1BETA1, "a", "team-a")
    assert old["apiVersion"] == "kueue.x-k8s.io/v1beta1" and old["spec"]["queueName"] == "lq"


def test_cluster_scoped_and_namespaced_paths(api: ApiServer, kube: KubernetesGateway) -> None:
    kube.create(R.CLUSTER_QUEUE, {"metadata": {"name": "tenant-a"}, "spec": {"cohortName": "gpus"}})
    kube.create(R.NODE, {"metadata": {"name": "gpu-1"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}})
    assert kube.get(R.CLUSTER_QUEUE, "tenant-a")["spec"]["cohortName"] == "gpus"
    assert kube.get(R.NODE, "gpu-1")["status"]["allocatable"] == {"nvidia.com/gpu": "8"}  # Nodes keep status
    assert "namespace" not in kube.get(R.CLUSTER_QUEUE, "tenant-a")["metadata"]
    kube.create(R.WORKLOAD, workload("a", namespace="team-a"))
    kube.create(R.WORKLOAD, workload("b", namespace="team-b"))
    assert [w["metadata"]["name"] for w in kube.list(R.WORKLOAD)] == ["a", "b"]
    assert [w["metadata"]["name"] for w in kube.list(R.WORKLOAD, "team-b")] == ["b"]
    status, _ = raw(api, "GET", "/apis/kueue.x-k8s.io/v1beta2/workloads/a")  # namespaced kind, no namespace
    assert status == 404


def test_list_items_carry_kind_and_the_collection_a_resource_version(api: ApiServer,
                                                                     kube: KubernetesGateway) -> None:
    kube.create(R.WORKLOAD, workload("a"))
    status, body = raw(api, "GET", R.WORKLOAD.path())
    assert status == 200 and body["kind"] == "WorkloadList"
    assert body["metadata"]["resourceVersion"] == str(api.store.resource_version)
    assert "kind" not in body["items"][0]  # as the real API server answers
    items, rv = kube.list_with_version(R.WORKLOAD)
    assert items[0]["kind"] == "Workload" and items[0]["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert rv == str(api.store.resource_version)


def test_unknown_plurals_are_served_as_custom_resources(kube: KubernetesGateway) -> None:
    widget = R.Resource("example.com", "v1", "widgets", "Widget")
    kube.create(widget, {"metadata": {"name": "w", "namespace": "n"}, "spec": {"size": 1}})
    assert kube.get(widget, "w", "n")["kind"] == "Widget"


def test_bad_input_is_a_permanent_error_naming_the_problem(kube: KubernetesGateway) -> None:
    with pytest.raises(PermanentError) as caught:
        kube.create(R.WORKLOAD, {"metadata": {"namespace": "team-a"}, "spec": {}})
    assert caught.value.status == 422 and "name or generateName is required" in caught.value.message
    with pytest.raises(PermanentError) as caught:
        kube.list(R.WORKLOAD, label_selector="a in (b")
    assert caught.value.status == 400


def test_discovery_lists_registered_kinds_and_their_subresources(api: ApiServer) -> None:
    status, groups = raw(api, "GET", "/apis")
    kueue = next(g for g in groups["groups"] if g["name"] == "kueue.x-k8s.io")
    assert status == 200 and kueue["preferredVersion"]["version"] == "v1beta2"
    assert {v["version"] for v in kueue["versions"]} == {"v1beta1", "v1beta2"}
    _, apps = raw(api, "GET", "/apis/apps/v1")
    by_name = {r["name"]: r for r in apps["resources"]}
    assert by_name["deployments"]["kind"] == "Deployment" and by_name["deployments"]["namespaced"] is True
    assert by_name["deployments/scale"]["kind"] == "Scale" and "statefulsets/status" in by_name
    _, core = raw(api, "GET", "/api/v1")
    nodes = next(r for r in core["resources"] if r["name"] == "nodes")
    assert (nodes["kind"], nodes["namespaced"]) == ("Node", False)


def test_non_json_bodies_are_415(api: ApiServer) -> None:
    status, body = raw(api, "POST", R.CONFIG_MAP.path("n"), {"metadata": {"name": "c"}},
                       "application/vnd.kubernetes.protobuf")
    assert status == 415 and body["reason"] == "UnsupportedMediaType"
