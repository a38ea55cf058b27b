"""The Workload model, owner resolution and tenancy over both Kueue API versions (pure)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from steps.model.owners import OwnerChain, owner_reference, parse_gvk
from steps.model.tenancy import cohort_of
from steps.model.workload import Workload, is_workload, quantity, template_request
from tests.steps.objects import KINDS, VERSIONS, Scene, conditions, pod_template


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("status", "expected", "admitted", "finished", "has_quota"), [
    ("pending", "pending", False, False, False),
    ("quota-reserved", "quota-reserved", False, False, True),
    ("admitted", "admitted", True, False, True),
    # Finished only ADDS a condition: Admitted=True and the admission remain, Finished wins.
    ("finished", "finished", False, True, False),
    ("finished-unadmitted", "finished", False, True, False),
    ("evicted", "pending", False, False, False),
])
def test_status_follows_kueue_precedence(version: str, status: str, expected: str, admitted: bool, finished: bool,
                                         has_quota: bool) -> None:
    wl = Workload(Scene.of("Job", version=version, status=status).workload)
    assert (wl.status(), wl.is_admitted, wl.is_finished, wl.has_quota) == (expected, admitted, finished, has_quota)
    assert is_workload(wl.obj) and wl.version == version


def test_finished_workload_keeps_its_admission_for_gpu_hours() -> None:
    wl = Workload(Scene.of("Job", status="finished", workers=3, gpus_per_pod=2).workload)
    assert wl.admission is not None and wl.gpus_admitted == Decimal(6)
    assert wl.finished_reason == "Succeeded"
    assert (wl.finished_at - wl.admitted_at).total_seconds() == 7200


def test_evicted_by_deactivation() -> None:
    wl = Workload(Scene.of("Job", status="evicted").workload)
    assert wl.deactivated and not wl.active and wl.evicted is not None and wl.evicted.reason == "Deactivated"


def test_queue_wait_is_creation_to_quota_reservation() -> None:
    assert Workload(Scene.of("Job").workload).queue_wait_seconds == 60
    assert Workload(Scene.of("Job", status="pending").workload).queue_wait_seconds is None


def test_gpus_per_pod_set_containers_summed_init_containers_max() -> None:
    tpl = pod_template(2, init_gpus=3)
    tpl["spec"]["containers"].append({"name": "side", "resources": {"limits": {"nvidia.com/gpu": 2}}})
    assert template_request(tpl) == Decimal(4)          # 2 + 2 > init 3
    tpl["spec"]["initContainers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "5"
    assert template_request(tpl) == Decimal(5)          # the larger init container wins
    assert template_request({"spec": {"containers": [{"name": "cpu"}]}}) == 0


def test_resource_usage_wins_over_template() -> None:
    obj = Scene.of("RayCluster", workers=3, gpus_per_pod=2).workload
    assert Workload(obj).gpus_admitted == Decimal(6)      # head 0 + 3 x 2
    obj["status"]["admission"]["podSetAssignments"][1]["resourceUsage"] = {"nvidia.com/gpu": "4"}
    assert Workload(obj).gpus_admitted == Decimal(4)      # partial admission: what Kueue counted


@pytest.mark.parametrize(("text", "value"), [("2", 2), ("500m", Decimal("0.5")), ("1Gi", 2**30), ("", 0),
                                             ("bogus", 0), (3, 3)])
def test_quantity(text: object, value: object) -> None:
    assert quantity(text) == Decimal(value)


def test_unknown_fields_are_tolerated() -> None:
    obj = Scene.of("Job").workload
    obj["spec"]["futureField"] = {"x": 1}
    obj["status"]["conditions"].append({"type": "SomethingNew", "status": "True"})
    assert Workload(obj).status() == "admitted"


@pytest.mark.parametrize(("kind", "via", "owner_kind"), [
    ("RayCluster", "controller", "RayCluster"), ("Job", "controller", "Job"), ("PyTorchJob", "controller", "PyTorchJob"),
    ("StatefulSet", "annotations", "StatefulSet"), ("Notebook", "annotations", "StatefulSet"),
    ("Deployment", "pod", "Pod"), ("Pod", "pod", "Pod")])
def test_owner_reference(kind: str, via: str, owner_kind: str) -> None:
    ref = owner_reference(Scene.of(kind).workload)
    assert ref is not None and (ref.via, ref.kind) == (via, owner_kind)


def test_pod_group_owner() -> None:
    obj = Scene.of("Pod").workload
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": f"p-{i}", "uid": f"u{i}"}
                                          for i in range(3)]
    obj["metadata"]["annotations"] = {"kueue.x-k8s.io/is-group-workload": "true"}
    ref = owner_reference(obj)
    assert ref is not None and ref.via == "pod-group" and ref.name == "p-0"


def test_no_owner() -> None:
    assert owner_reference(Scene.of("none").workload) is None


@pytest.mark.parametrize(("text", "parsed"), [("apps/v1, Kind=StatefulSet", ("apps/v1", "StatefulSet")),
                                              ("leaderworkerset.x-k8s.io/v1, Kind=LeaderWorkerSet",
                                               ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")),
                                              ("StatefulSet", None), ("apps/v1, Kind=", None)])
def test_parse_gvk(text: str, parsed: object) -> None:
    assert parse_gvk(text) == parsed


@pytest.mark.parametrize("version", VERSIONS)
def test_cohort_in_both_versions(version: str) -> None:
    cq = next(o for r, o in Scene.of("Job", version=version).objects() if o["kind"] == "ClusterQueue")
    assert cohort_of(cq) == "gpuaas"
    assert cohort_of({"spec": {}}) is None


@pytest.mark.parametrize("kind", KINDS)
def test_scene_chain_is_nearest_first(kind: str) -> None:
    scene = Scene.of(kind)
    chain = OwnerChain(owner_reference(scene.workload), tuple(scene.chain()))
    if kind == "none":
        assert chain.top is None
    else:
        assert chain.direct["metadata"]["name"] == owner_reference(scene.workload).name


def test_conditions_fixture_is_consistent() -> None:
    assert [c["type"] for c in conditions("finished")] == ["QuotaReserved", "Admitted", "Finished"]


def test_statefulset_pod_group_workload_resolves_to_the_statefulset() -> None:
    """Kueue >= 0.16 shape: group workload, non-controller refs to the StatefulSet AND its pods."""
    obj = Scene.of("StatefulSet").workload
    obj["metadata"]["annotations"]["kueue.x-k8s.io/is-group-workload"] = "true"
    obj["metadata"]["ownerReferences"].append({"apiVersion": "v1", "kind": "Pod", "name": "train-0", "uid": "p0"})
    ref = owner_reference(obj)
    assert ref is not None and (ref.kind, ref.name, ref.uid, ref.via) == ("StatefulSet", "train", "uid-sts",
                                                                         "annotations")
