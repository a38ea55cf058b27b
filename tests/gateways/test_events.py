"""Contract: Kubernetes Events on the Workload, deduplicated like client-go's correlator."""

from __future__ import annotations

from steps.gateways import resources as R
from steps.gateways.kubernetes import KubernetesGateway


def test_record_event_creates_a_core_event_on_the_object(kube: KubernetesGateway) -> None:
    workload = kube.create(R.WORKLOAD, {"metadata": {"name": "raycluster-a", "namespace": "team-a"}, "spec": {}})
    event = kube.record_event(workload, "GPUaaSWorkersReleased", "Released 4 GPUs after 30m idle.",
                              action="Release")
    assert event["involvedObject"] == {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": "raycluster-a", "namespace": "team-a",
        "uid": workload["metadata"]["uid"], "resourceVersion": workload["metadata"]["resourceVersion"]}
    assert (event["reason"], event["type"], event["action"], event["count"]) == (
        "GPUaaSWorkersReleased", "Normal", "Release", 1)
    assert event["source"] == {"component": "gpuaas"} and event["metadata"]["namespace"] == "team-a"
    found = kube.list(R.EVENT, "team-a", field_selector="involvedObject.name=raycluster-a")
    assert [e["metadata"]["name"] for e in found] == [event["metadata"]["name"]]


def test_repeating_an_event_bumps_its_count(kube: KubernetesGateway) -> None:
    ref = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": "w", "namespace": "n", "uid": "u1"}
    first = kube.record_event(ref, "GPUaaSReactionFailed", "Prometheus unavailable.", type="Warning")
    again = kube.record_event(ref, "GPUaaSReactionFailed", "Prometheus unavailable.", type="Warning")
    other = kube.record_event(ref, "GPUaaSReactionFailed", "API unavailable.", type="Warning")
    assert again["metadata"]["name"] == first["metadata"]["name"] and again["count"] == 2
    assert other["metadata"]["name"] != first["metadata"]["name"] and other["count"] == 1
    assert len(kube.list(R.EVENT, "n")) == 2


def test_events_of_cluster_scoped_objects_go_to_default(kube: KubernetesGateway) -> None:
    queue = kube.create(R.CLUSTER_QUEUE, {"metadata": {"name": "tenant-a"}, "spec": {}})
    event = kube.record_event(queue, "GPUaaSQuotaProvisioned", "nominalQuota 8 -> 16.")
    assert event["metadata"]["namespace"] == "default" and "namespace" not in event["involvedObject"]
