"""Contract: the /status and /scale subresources."""

from __future__ import annotations

import pytest

from engine.apiserver import ApiServer
from steps.gateways import resources as R
from steps.gateways.errors import Conflict, NotFound, PermanentError
from steps.gateways.kubernetes import KubernetesGateway

ADMITTED = {"conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted"}],
            "admission": {"clusterQueue": "tenant-a"}}


def test_create_over_http_drops_status_as_the_api_server_does(kube: KubernetesGateway) -> None:
    created = kube.create(R.WORKLOAD, {"metadata": {"name": "a", "namespace": "n"}, "spec": {}, "status": ADMITTED})
    assert "status" not in created


def test_the_in_process_store_keeps_status_on_create(api: ApiServer, kube: KubernetesGateway) -> None:
    api.store.create(R.WORKLOAD, {"metadata": {"name": "a", "namespace": "n"}, "spec": {}, "status": ADMITTED})
    assert kube.get(R.WORKLOAD, "a", "n")["status"] == ADMITTED


def test_main_resource_writes_ignore_status(kube: KubernetesGateway) -> None:
    kube.create(R.WORKLOAD, {"metadata": {"name": "a", "namespace": "n"}, "spec": {"active": True}})
    kube.merge_patch(R.WORKLOAD, "a", {"status": ADMITTED}, "n", subresource="status")
    patched = kube.merge_patch(R.WORKLOAD, "a", {"spec": {"active": False}, "status": {"admission": None}}, "n")
    assert patched["spec"]["active"] is False and patched["status"] == ADMITTED
    whole = kube.get(R.WORKLOAD, "a", "n")
    whole["status"] = {}
    whole["spec"]["active"] = True
    replaced = kube.replace(R.WORKLOAD, whole)
    assert replaced["spec"]["active"] is True and replaced["status"] == ADMITTED


def test_status_writes_change_status_only(kube: KubernetesGateway) -> None:
    kube.create(R.WORKLOAD, {"metadata": {"name": "a", "namespace": "n", "labels": {"x": "1"}},
                             "spec": {"active": True}})
    patched = kube.merge_patch(R.WORKLOAD, "a", {"metadata": {"labels": {"x": "2"}}, "spec": {"active": False},
                                                 "status": ADMITTED}, "n", subresource="status")
    assert patched["status"] == ADMITTED
    assert patched["spec"] == {"active": True} and patched["metadata"]["labels"] == {"x": "1"}
    json_patched = kube.json_patch(R.WORKLOAD, "a", [{"op": "replace", "path": "/status/admission/clusterQueue",
                                                      "value": "tenant-b"}], "n", subresource="status")
    assert json_patched["status"]["admission"] == {"clusterQueue": "tenant-b"}


def test_status_writes_are_conditional_on_resource_version(kube: KubernetesGateway) -> None:
    created = kube.create(R.WORKLOAD, {"metadata": {"name": "a", "namespace": "n"}, "spec": {}})
    kube.merge_patch(R.WORKLOAD, "a", {"spec": {"active": False}}, "n")
    with pytest.raises(Conflict):
        kube.merge_patch(R.WORKLOAD, "a", {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
                                           "status": ADMITTED}, "n", subresource="status")


def test_kinds_without_a_status_subresource_have_no_status_path(kube: KubernetesGateway) -> None:
    kube.create(R.CONFIG_MAP, {"metadata": {"name": "c", "namespace": "n"}, "data": {}})
    with pytest.raises(NotFound):
        kube.merge_patch(R.CONFIG_MAP, "c", {"status": {}}, "n", subresource="status")


@pytest.mark.parametrize("resource", [R.DEPLOYMENT, R.STATEFUL_SET, R.MACHINE_SET])
def test_scale_reads_and_writes_spec_replicas(kube: KubernetesGateway, resource: R.Resource) -> None:
    kube.create(resource, {"metadata": {"name": "s", "namespace": "n"},
                           "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "s"}}}})
    kube.merge_patch(resource, "s", {"status": {"replicas": 3}}, "n", subresource="status")
    scale = kube.get(resource, "s", "n", subresource="scale")
    assert scale["apiVersion"] == "autoscaling/v1" and scale["kind"] == "Scale"
    assert scale["spec"] == {"replicas": 3}
    assert scale["status"] == {"replicas": 3, "selector": "app=s"}
    scaled = kube.merge_patch(resource, "s", {"spec": {"replicas": 0}}, "n", subresource="scale")
    assert scaled["kind"] == "Scale" and scaled["spec"]["replicas"] == 0
    owner = kube.get(resource, "s", "n")
    assert owner["spec"]["replicas"] == 0 and owner["metadata"]["generation"] == 2
    assert owner["metadata"]["resourceVersion"] == scaled["metadata"]["resourceVersion"]


def test_scale_write_with_stale_version_conflicts_and_bad_replicas_are_invalid(kube: KubernetesGateway) -> None:
    kube.create(R.DEPLOYMENT, {"metadata": {"name": "d", "namespace": "n"}, "spec": {"replicas": 1}})
    scale = kube.get(R.DEPLOYMENT, "d", "n", subresource="scale")
    kube.merge_patch(R.DEPLOYMENT, "d", {"metadata": {"labels": {"x": "y"}}}, "n")
    scale["spec"]["replicas"] = 2
    with pytest.raises(Conflict):
        kube.replace(R.DEPLOYMENT, scale, subresource="scale")
    with pytest.raises(PermanentError) as caught:
        kube.merge_patch(R.DEPLOYMENT, "d", {"spec": {"replicas": -1}}, "n", subresource="scale")
    assert caught.value.status == 422


def test_kinds_without_scale_answer_404(kube: KubernetesGateway) -> None:
    kube.create(R.RAY_CLUSTER, {"metadata": {"name": "r", "namespace": "n"}, "spec": {}})
    with pytest.raises(NotFound):
        kube.merge_patch(R.RAY_CLUSTER, "r", {"spec": {"replicas": 0}}, "n", subresource="scale")
