"""Contract: DELETE with owner-reference garbage collection and finalizers."""

from __future__ import annotations

from engine.apiserver import ApiServer
from steps.gateways import resources as R
from steps.gateways.kubernetes import KubernetesGateway


def owned_by(*owners: dict) -> list[dict]:
    return [{"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"],
             "uid": o["metadata"]["uid"]} for o in owners]


def test_deleting_an_owner_collects_its_dependents_in_cascade(kube: KubernetesGateway) -> None:
    deployment = kube.create(R.DEPLOYMENT, {"metadata": {"name": "llm", "namespace": "n"}, "spec": {"replicas": 1}})
    scaled = kube.create(R.SCALED_OBJECT, {"metadata": {"name": "llm-idle", "namespace": "n",
                                                        "ownerReferences": owned_by(deployment)}, "spec": {}})
    replica_set = kube.create(R.REPLICA_SET, {"metadata": {"name": "llm-1", "namespace": "n",
                                                           "ownerReferences": owned_by(deployment)}})
    kube.create(R.POD, {"metadata": {"name": "llm-1-a", "namespace": "n", "ownerReferences": owned_by(replica_set)}})
    bystander = kube.create(R.CONFIG_MAP, {"metadata": {"name": "keep", "namespace": "n"}})
    assert scaled["metadata"]["ownerReferences"][0]["uid"] == deployment["metadata"]["uid"]
    kube.delete(R.DEPLOYMENT, "llm", "n")
    assert kube.get(R.SCALED_OBJECT, "llm-idle", "n") is None
    assert kube.get(R.REPLICA_SET, "llm-1", "n") is None
    assert kube.get(R.POD, "llm-1-a", "n") is None
    assert kube.get(R.CONFIG_MAP, "keep", "n")["metadata"]["uid"] == bystander["metadata"]["uid"]


def test_a_dependent_with_a_living_owner_is_kept(kube: KubernetesGateway) -> None:
    first = kube.create(R.CONFIG_MAP, {"metadata": {"name": "a", "namespace": "n"}})
    second = kube.create(R.CONFIG_MAP, {"metadata": {"name": "b", "namespace": "n"}})
    kube.create(R.CONFIG_MAP, {"metadata": {"name": "shared", "namespace": "n",
                                            "ownerReferences": owned_by(first, second)}})
    kube.delete(R.CONFIG_MAP, "a", "n")
    assert kube.get(R.CONFIG_MAP, "shared", "n") is not None
    kube.delete(R.CONFIG_MAP, "b", "n")
    assert kube.get(R.CONFIG_MAP, "shared", "n") is None


def test_orphan_propagation_keeps_dependents_and_drops_the_reference(kube: KubernetesGateway) -> None:
    owner = kube.create(R.STATEFUL_SET, {"metadata": {"name": "nb", "namespace": "n"}, "spec": {}})
    kube.create(R.POD, {"metadata": {"name": "nb-0", "namespace": "n", "ownerReferences": owned_by(owner)}})
    kube.delete(R.STATEFUL_SET, "nb", "n", propagation="Orphan")
    pod = kube.get(R.POD, "nb-0", "n")
    assert pod is not None and "ownerReferences" not in pod["metadata"]


def test_finalizers_hold_deletion_until_removed(kube: KubernetesGateway) -> None:
    kube.create(R.WORKLOAD, {"metadata": {"name": "w", "namespace": "n",
                                          "finalizers": ["kueue.x-k8s.io/resource-in-use"]}, "spec": {}})
    marked = kube.delete(R.WORKLOAD, "w", "n")
    assert marked["metadata"]["deletionTimestamp"]
    assert kube.get(R.WORKLOAD, "w", "n")["metadata"]["deletionTimestamp"] == marked["metadata"]["deletionTimestamp"]
    kube.merge_patch(R.WORKLOAD, "w", {"metadata": {"finalizers": None}}, "n")
    assert kube.get(R.WORKLOAD, "w", "n") is None


def test_delete_of_a_missing_object_is_none(kube: KubernetesGateway) -> None:
    assert kube.delete(R.WORKLOAD, "ghost", "n") is None


def test_deleting_a_namespace_deletes_what_is_in_it(api: ApiServer, kube: KubernetesGateway) -> None:
    kube.create(R.NAMESPACE, {"metadata": {"name": "team-a"}})
    kube.create(R.WORKLOAD, {"metadata": {"name": "w", "namespace": "team-a"}, "spec": {}})
    kube.create(R.WORKLOAD, {"metadata": {"name": "w", "namespace": "team-b"}, "spec": {}})
    kube.delete(R.NAMESPACE, "team-a")
    assert [w["metadata"]["namespace"] for w in kube.list(R.WORKLOAD)] == ["team-b"]
    assert api.store.get(R.NAMESPACE, "team-a") is None
