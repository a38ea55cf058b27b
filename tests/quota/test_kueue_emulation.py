"""Kueue emulation scenarios over a real API server, through the official client.

Each test builds queues and workloads with plain API calls, runs `reconcile()` (what the engine
does after every change) and reads back what Kueue would have written.
"""

from __future__ import annotations

import hashlib

from engine.apiserver import ApiServer
from engine.kueue import KueueController, workload_name
from engine.kueue.controller import wait_until
from steps.gateways import resources as R
from steps.gateways.kubernetes import KubernetesGateway
from tests.quota import kueue_objects as K


def condition(obj: dict, kind: str) -> tuple[str, str, str] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return c["status"], c["reason"], c["message"]
    return None


def setup_tenants(gw: KubernetesGateway, a: int = 4, b: int = 4, **queue_options) -> None:
    gw.create(R.RESOURCE_FLAVOR, K.resource_flavor("a100"))
    for tenant, gpus in (("team-a", a), ("team-b", b)):
        options = queue_options.get(tenant.replace("-", "_"), {})
        gw.create(R.CLUSTER_QUEUE, K.cluster_queue(tenant, gpus, **options))
        gw.create(R.LOCAL_QUEUE, K.local_queue(tenant, tenant))


def wl(gw: KubernetesGateway, namespace: str, name: str) -> dict:
    obj = gw.get(R.WORKLOAD, name, namespace)
    assert obj is not None, f"Workload {namespace}/{name} missing"
    return obj


def gpu_usage(gw: KubernetesGateway, cq: str) -> tuple[str, str]:
    status = gw.get(R.CLUSTER_QUEUE, cq)["status"]
    entry = status["flavorsUsage"][0]["resources"][0]
    return entry["total"], entry["borrowed"]


def test_admission_writes_kueue_status_and_second_pass_is_quiet(gateway, kueue, server: ApiServer) -> None:
    setup_tenants(gateway)
    gateway.create(R.WORKLOAD, K.workload("team-a", "train", gpus=2, count=2))
    kueue.reconcile()
    obj = wl(gateway, "team-a", "train")
    assert obj["status"]["admission"] == {"clusterQueue": "team-a", "podSetAssignments": [
        {"name": "main", "flavors": {"nvidia.com/gpu": "a100"}, "resourceUsage": {"nvidia.com/gpu": "4"}, "count": 2}]}
    assert condition(obj, "QuotaReserved") == ("True", "QuotaReserved", "Quota reserved in ClusterQueue team-a")
    assert condition(obj, "Admitted") == ("True", "Admitted", "The workload is admitted")
    cq = gateway.get(R.CLUSTER_QUEUE, "team-a")["status"]
    assert (cq["reservingWorkloads"], cq["admittedWorkloads"], cq["pendingWorkloads"]) == (1, 1, 0)
    assert cq["flavorsReservation"] == cq["flavorsUsage"]
    lq = gateway.get(R.LOCAL_QUEUE, "gpu", "team-a")["status"]
    assert lq["admittedWorkloads"] == 1 and lq["flavorsUsage"][0]["resources"][0]["total"] == "4"

    server.reset_counters()
    assert kueue.reconcile() == []
    assert server.write_count == 0, "a pass over an unchanged cluster writes nothing"


def test_cohort_borrowing_and_its_limits(gateway, kueue) -> None:
    setup_tenants(gateway, team_a={"borrowing_limit": 3}, team_b={"lending_limit": 2})
    gateway.create(R.WORKLOAD, K.workload("team-a", "big", gpus=6))
    gateway.create(R.WORKLOAD, K.workload("team-a", "bigger", gpus=8))
    kueue.reconcile()
    assert condition(wl(gateway, "team-a", "big"), "Admitted")[0] == "True"
    assert gpu_usage(gateway, "team-a") == ("6", "2"), "2 GPUs borrowed from team-b"
    # team-b lends at most 2 and keeps 2 guaranteed: a request for 2 more must wait.
    pending = condition(wl(gateway, "team-a", "bigger"), "QuotaReserved")
    assert pending[:2] == ("False", "Pending")
    assert "insufficient unused quota for nvidia.com/gpu in flavor a100" in pending[2]
    gateway.create(R.WORKLOAD, K.workload("team-b", "own", gpus=2))
    kueue.reconcile()
    assert condition(wl(gateway, "team-b", "own"), "Admitted")[0] == "True", "the guaranteed part stays available"
    gateway.create(R.WORKLOAD, K.workload("team-b", "more", gpus=1))
    kueue.reconcile()
    assert condition(wl(gateway, "team-b", "more"), "QuotaReserved") == (
        "False", "Pending", ("couldn't assign flavors to pod set main: insufficient unused quota for "
        "nvidia.com/gpu in flavor a100, 1 more needed"))


def test_borrowing_limit_caps_a_queue(gateway, kueue) -> None:
    setup_tenants(gateway, team_a={"borrowing_limit": 1})
    gateway.create(R.WORKLOAD, K.workload("team-a", "w", gpus=6))
    kueue.reconcile()
    assert condition(wl(gateway, "team-a", "w"), "QuotaReserved")[:2] == ("False", "Pending")


def test_no_cohort_means_no_borrowing(gateway, kueue) -> None:
    setup_tenants(gateway, team_a={"cohort": None})
    gateway.create(R.WORKLOAD, K.workload("team-a", "w", gpus=5))
    kueue.reconcile()
    assert condition(wl(gateway, "team-a", "w"), "QuotaReserved")[:2] == ("False", "Pending")


def test_strict_fifo_blocks_behind_the_head_best_effort_does_not(gateway, kueue, clock) -> None:
    setup_tenants(gateway, team_a={"strategy": "StrictFIFO", "cohort": None},
                  team_b={"strategy": "BestEffortFIFO", "cohort": None})
    for ns in ("team-a", "team-b"):
        for name, gpus in (("first", 3), ("second", 2), ("third", 1)):
            gateway.create(R.WORKLOAD, K.workload(ns, name, gpus=gpus))
            clock.advance(1)
    kueue.reconcile()
    admitted = {(ns, n): condition(wl(gateway, ns, n), "Admitted") is not None
                for ns in ("team-a", "team-b") for n in ("first", "second", "third")}
    assert admitted == {("team-a", "first"): True, ("team-a", "second"): False, ("team-a", "third"): False,
                        ("team-b", "first"): True, ("team-b", "second"): False, ("team-b", "third"): True}
    # StrictFIFO only attempts the head: the one behind it carries no condition at all.
    assert condition(wl(gateway, "team-a", "third"), "QuotaReserved") is None
    assert gateway.get(R.CLUSTER_QUEUE, "team-a")["status"]["pendingWorkloads"] == 2


def test_priority_then_creation_order(gateway, kueue) -> None:
    setup_tenants(gateway, team_a={"cohort": None})
    gateway.create(R.WORKLOAD, K.workload("team-a", "early", gpus=4))
    urgent = K.workload("team-a", "urgent", gpus=4)
    urgent["spec"]["priority"] = 100
    gateway.create(R.WORKLOAD, urgent)
    kueue.reconcile()
    assert condition(wl(gateway, "team-a", "urgent"), "Admitted")[0] == "True"
    assert condition(wl(gateway, "team-a", "early"), "Admitted") is None


def test_deactivation_evicts_suspends_and_frees_quota_then_reactivation_requeues(gateway, kueue, clock) -> None:
    setup_tenants(gateway, team_a={"cohort": None})
    gateway.create(R.JOB, K.job("team-a", "trainer", gpus=4))
    kueue.reconcile()
    name = next(w["metadata"]["name"] for w in gateway.list(R.WORKLOAD, "team-a"))
    assert gateway.get(R.JOB, "trainer", "team-a")["spec"]["suspend"] is False, "admission unsuspends the job"
    clock.advance(10)
    gateway.create(R.WORKLOAD, K.workload("team-a", "waiting", gpus=4))
    kueue.reconcile()
    assert condition(wl(gateway, "team-a", "waiting"), "QuotaReserved")[:2] == ("False", "Pending")

    clock.advance(10)
    gateway.merge_patch(R.WORKLOAD, name, {"spec": {"active": False}}, "team-a")
    kueue.reconcile()
    # Kueue's first step (its workload controller): Evicted, the reservation kept until the job stops
    evicted = wl(gateway, "team-a", name)
    assert condition(evicted, "Evicted") == ("True", "Deactivated", "The workload is deactivated")
    assert condition(evicted, "QuotaReserved")[0] == "True"
    assert gateway.get(R.JOB, "trainer", "team-a")["spec"]["suspend"] is True
    kueue.reconcile()
    # the second (its job reconciler, the job no longer active): the reservation goes, Requeued=False
    evicted = wl(gateway, "team-a", name)
    assert condition(evicted, "Requeued") == ("False", "Deactivated", "The workload is deactivated")
    assert condition(evicted, "QuotaReserved") == ("False", "Pending", "The workload is deactivated")
    assert condition(evicted, "Admitted") == ("False", "NoReservation", "The workload has no reservation")
    assert not evicted["status"].get("admission")
    assert gateway.get(R.JOB, "trainer", "team-a")["spec"]["suspend"] is True
    assert condition(wl(gateway, "team-a", "waiting"), "Admitted")[0] == "True", "freed quota admits the queue"

    clock.advance(10)
    gateway.merge_patch(R.WORKLOAD, name, {"spec": {"active": True}}, "team-a")
    kueue.reconcile()
    requeued = wl(gateway, "team-a", name)
    assert condition(requeued, "Requeued") == ("True", "Reactivated", "The workload was reactivated")
    assert condition(requeued, "QuotaReserved")[:2] == ("False", "Pending")

    gateway.merge_patch(R.WORKLOAD, "waiting", {"status": {"conditions": wl(gateway, "team-a", "waiting")["status"][
        "conditions"] + [{"type": "Finished", "status": "True", "reason": "Succeeded", "message": "done",
                          "lastTransitionTime": "2026-01-01T12:01:00Z"}]}}, "team-a", subresource="status")
    kueue.reconcile()
    readmitted = wl(gateway, "team-a", name)
    assert condition(readmitted, "Admitted")[0] == "True"
    assert condition(readmitted, "Evicted")[:2] == ("False", "QuotaReserved")
    # Admission leaves Requeued as it is (Kueue v0.19.2 workload.SetQuotaReservation resets Evicted and
    # Preempted only); its lastTransitionTime is when the wait for this admission began.
    assert condition(readmitted, "Requeued") == ("True", "Reactivated", "The workload was reactivated")
    assert gateway.get(R.JOB, "trainer", "team-a")["spec"]["suspend"] is False


def test_finished_keeps_admission_and_releases_quota(gateway, kueue) -> None:
    setup_tenants(gateway, team_a={"cohort": None})
    gateway.create(R.WORKLOAD, K.workload("team-a", "done", gpus=4))
    gateway.create(R.WORKLOAD, K.workload("team-a", "next", gpus=4))
    kueue.reconcile()
    done = wl(gateway, "team-a", "done")
    gateway.merge_patch(R.WORKLOAD, "done", {"status": {"conditions": done["status"]["conditions"] + [
        {"type": "Finished", "status": "True", "reason": "Succeeded", "message": "Job finished successfully",
         "lastTransitionTime": "2026-01-01T12:05:00Z"}]}}, "team-a", subresource="status")
    kueue.reconcile()
    done = wl(gateway, "team-a", "done")
    assert done["status"]["admission"]["clusterQueue"] == "team-a", "finishing only adds a condition"
    assert condition(done, "Admitted")[0] == "True" and condition(done, "Finished")[1] == "Succeeded"
    assert condition(wl(gateway, "team-a", "next"), "Admitted")[0] == "True"
    assert gpu_usage(gateway, "team-a") == ("4", "0")


def test_job_completion_marks_workload_finished(gateway, kueue) -> None:
    setup_tenants(gateway, team_a={"cohort": None})
    gateway.create(R.JOB, K.job("team-a", "short", gpus=1))
    kueue.reconcile()
    gateway.merge_patch(R.JOB, "short", {"status": {"conditions": [{"type": "Complete", "status": "True"}]}},
                        "team-a", subresource="status")
    kueue.reconcile()
    obj = gateway.list(R.WORKLOAD, "team-a")[0]
    assert condition(obj, "Finished") == ("True", "Succeeded", "Job finished successfully")
    assert gpu_usage(gateway, "team-a") == ("0", "0")


def test_statefulset_at_zero_is_on_hold_and_scaling_up_requeues(gateway, kueue) -> None:
    setup_tenants(gateway, team_a={"cohort": None})
    gateway.create(R.STATEFUL_SET, K.stateful_set("team-a", "notebook", gpus=1))
    kueue.reconcile()
    workload = gateway.list(R.WORKLOAD, "team-a")[0]
    name = workload["metadata"]["name"]
    assert name.startswith("statefulset-notebook-")
    assert workload["metadata"]["annotations"]["kueue.x-k8s.io/job-owner-name"] == "notebook"
    assert workload["metadata"]["ownerReferences"][0]["controller"] is False
    assert condition(workload, "Admitted")[0] == "True"

    gateway.merge_patch(R.STATEFUL_SET, "notebook", {"spec": {"replicas": 0}}, "team-a")
    kueue.reconcile()
    held = wl(gateway, "team-a", name)
    assert condition(held, "QuotaReserved")[:2] == ("False", "OnHold")
    assert not held["status"].get("admission") and gpu_usage(gateway, "team-a") == ("0", "0")
    assert gateway.get(R.CLUSTER_QUEUE, "team-a")["status"]["pendingWorkloads"] == 0, "on hold is not pending"

    gateway.merge_patch(R.STATEFUL_SET, "notebook", {"spec": {"replicas": 1}}, "team-a")
    kueue.reconcile()
    assert condition(wl(gateway, "team-a", name), "Admitted")[0] == "True"
    assert gpu_usage(gateway, "team-a") == ("1", "0")


def test_elastic_scale_down_shrinks_the_same_workload(gateway, kueue) -> None:
    setup_tenants(gateway, a=8, team_a={"cohort": None})
    gateway.create(R.RAY_CLUSTER, K.ray_cluster("team-a", "ray", workers=4, gpus_per_worker=2))
    kueue.reconcile()
    [workload] = gateway.list(R.WORKLOAD, "team-a")
    name = workload["metadata"]["name"]
    assert gpu_usage(gateway, "team-a") == ("8", "0")
    assert gateway.get(R.RAY_CLUSTER, "ray", "team-a")["spec"]["suspend"] is False
    ray = gateway.get(R.RAY_CLUSTER, "ray", "team-a")
    ray["spec"]["workerGroupSpecs"][0]["replicas"] = 1
    gateway.merge_patch(R.RAY_CLUSTER, "ray", {"spec": {"workerGroupSpecs": ray["spec"]["workerGroupSpecs"]}}, "team-a")
    kueue.reconcile()
    [after] = gateway.list(R.WORKLOAD, "team-a")
    assert after["metadata"]["name"] == name, "the same Workload is kept"
    workers = next(p for p in after["status"]["admission"]["podSetAssignments"] if p["name"] == "gpu-workers")
    assert workers["count"] == 1 and workers["resourceUsage"] == {"nvidia.com/gpu": "2"}
    assert gpu_usage(gateway, "team-a") == ("2", "0")


def test_missing_local_queue_is_inadmissible(gateway, kueue) -> None:
    setup_tenants(gateway)
    gateway.create(R.WORKLOAD, K.workload("team-a", "lost", gpus=1, queue="nope"))
    kueue.reconcile()
    assert condition(wl(gateway, "team-a", "lost"), "QuotaReserved") == (
        "False", "Inadmissible", "LocalQueue nope doesn't exist")


def test_namespace_selector_matches_the_namespaces_own_labels(gateway, kueue) -> None:
    """As manifests/examples selects each tenant's namespace by `gpuaas.io/tenant` (not by name):
    Kueue matches the selector against the Namespace object's labels, plus the
    `kubernetes.io/metadata.name` label kube-apiserver sets on every Namespace."""
    setup_tenants(gateway)
    for namespace in ("team-a", "team-c"):
        gateway.create(R.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace",
                                     "metadata": {"name": namespace, "labels": {"gpuaas.io/tenant": namespace}}})
    gateway.create(R.LOCAL_QUEUE, K.local_queue("team-c", "team-a"))
    gateway.merge_patch(R.CLUSTER_QUEUE, "team-a",
                        {"spec": {"namespaceSelector": {"matchLabels": {"gpuaas.io/tenant": "team-a"}}}})
    gateway.merge_patch(R.CLUSTER_QUEUE, "team-b", {"spec": {"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a"]}]}}})
    gateway.create(R.LOCAL_QUEUE, K.local_queue("team-a", "team-b", name="b"))
    gateway.create(R.WORKLOAD, K.workload("team-a", "mine", gpus=1))
    gateway.create(R.WORKLOAD, K.workload("team-c", "other", gpus=1))
    gateway.create(R.WORKLOAD, K.workload("team-a", "by-name", gpus=1, queue="b"))
    kueue.reconcile()
    assert condition(wl(gateway, "team-a", "mine"), "QuotaReserved")[:2] == ("True", "QuotaReserved")
    assert condition(wl(gateway, "team-a", "by-name"), "QuotaReserved")[:2] == ("True", "QuotaReserved")
    assert condition(wl(gateway, "team-c", "other"), "QuotaReserved") == (
        "False", "Inadmissible", "Workload namespace doesn't match ClusterQueue selector")


def test_uncovered_resource_is_inadmissible_unless_excluded(gateway, server, clock) -> None:
    setup_tenants(gateway)
    body = K.workload("team-a", "cpu", gpus=1)
    body["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    gateway.create(R.WORKLOAD, body)
    KueueController.over_url(server.url, clock=clock).reconcile()
    assert condition(wl(gateway, "team-a", "cpu"), "QuotaReserved") == (
        "False", "Inadmissible", "couldn't assign flavors to pod set main: resource cpu unavailable in ClusterQueue")
    KueueController.over_url(server.url, clock=clock, excluded_resource_prefixes=("cpu",)).reconcile()
    assert condition(wl(gateway, "team-a", "cpu"), "Admitted")[0] == "True"


def test_v1beta1_workload_is_admitted(gateway, kueue) -> None:
    setup_tenants(gateway)
    gateway.create(R.WORKLOAD_V1BETA1, K.workload("team-b", "old", gpus=1, api_version="kueue.x-k8s.io/v1beta1"))
    kueue.reconcile()
    old = gateway.get(R.WORKLOAD_V1BETA1, "old", "team-b")
    assert old["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert condition(old, "Admitted") == ("True", "Admitted", "The workload is admitted")


def test_workload_names_and_owners_follow_kueue(gateway, kueue) -> None:
    setup_tenants(gateway)
    job = gateway.create(R.JOB, K.job("team-a", "my-job", gpus=1))
    kueue.reconcile()
    [workload] = gateway.list(R.WORKLOAD, "team-a")
    uid = job["metadata"]["uid"]
    digest = hashlib.sha1(f"Job\nbatch\nmy-job\n{uid}".encode()).hexdigest()[:5]
    assert workload["metadata"]["name"] == f"job-my-job-{digest}" == workload_name("Job", "batch", "my-job", uid)
    assert workload["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == uid
    assert workload["metadata"]["ownerReferences"][0] | {} == {
        "apiVersion": "batch/v1", "kind": "Job", "name": "my-job", "uid": uid, "controller": True,
        "blockOwnerDeletion": True}
    assert workload["spec"]["queueName"] == "gpu"


def test_background_thread_over_the_store_reacts_to_changes(server: ApiServer, gateway, clock) -> None:
    setup_tenants(gateway)
    kueue = KueueController.over_store(server.store, clock=clock)
    kueue.start(interval=5)  # long tick: only the store subscription can make this fast
    try:
        gateway.create(R.JOB, K.job("team-b", "quick", gpus=1))
        assert wait_until(lambda: any(condition(w, "Admitted") for w in gateway.list(R.WORKLOAD, "team-b")),
                          timeout=3)
    finally:
        kueue.stop()
    assert kueue.last_error is None


def test_a_finished_condition_written_during_a_pass_is_never_lost(gateway, server: ApiServer, clock) -> None:
    """The engine (as job controller) writes Finished while a pass is running: our write conflicts."""
    from engine.kueue.cluster import GatewayCluster

    setup_tenants(gateway, team_a={"cohort": None})
    gateway.create(R.WORKLOAD, K.workload("team-a", "racer", gpus=1))
    KueueController.over_url(server.url, clock=clock).reconcile()
    gateway.merge_patch(R.WORKLOAD, "racer", {"spec": {"active": False}}, "team-a")

    class EngineWritesFirst(GatewayCluster):
        """Before our first Workload status write, someone else writes Finished (a real concurrent write)."""

        raced = False

        def merge_patch(self, resource, name, patch, namespace=None, subresource=None):
            if resource.kind == "Workload" and subresource == "status" and not self.raced:
                self.raced = True
                current = gateway.get(R.WORKLOAD, name, namespace)
                gateway.merge_patch(R.WORKLOAD, name, {"status": {"conditions": current["status"]["conditions"] + [
                    {"type": "Finished", "status": "True", "reason": "Succeeded", "message": "done",
                     "lastTransitionTime": "2026-01-01T12:00:30Z"}]}}, namespace, subresource="status")
            return super().merge_patch(resource, name, patch, namespace, subresource)

    racing = KueueController(EngineWritesFirst(gateway), clock=clock)
    racing.reconcile()
    racing.reconcile()
    obj = wl(gateway, "team-a", "racer")
    assert condition(obj, "Finished") == ("True", "Succeeded", "done")
    assert obj["status"]["admission"]["clusterQueue"] == "team-a", "a finished Workload keeps its admission"
    assert gpu_usage(gateway, "team-a") == ("0", "0")


def test_a_queue_using_its_own_quota_goes_before_an_older_borrower(gateway, kueue, clock) -> None:
    """Kueue's scheduler admits heads that fit in nominal quota before heads that need to borrow."""
    setup_tenants(gateway)
    gateway.create(R.WORKLOAD, K.workload("team-a", "a-running", gpus=4))
    gateway.create(R.WORKLOAD, K.workload("team-b", "b-running", gpus=4))
    kueue.reconcile()
    clock.advance(1)
    gateway.create(R.WORKLOAD, K.workload("team-a", "a-borrower", gpus=2))   # older, would borrow from team-b
    clock.advance(1)
    gateway.create(R.WORKLOAD, K.workload("team-b", "b-own", gpus=4))        # newer, fits in team-b's own quota
    kueue.reconcile()
    done = wl(gateway, "team-b", "b-running")
    gateway.merge_patch(R.WORKLOAD, "b-running", {"status": {"conditions": done["status"]["conditions"] + [
        {"type": "Finished", "status": "True", "reason": "Succeeded", "message": "done",
         "lastTransitionTime": "2026-01-01T12:00:05Z"}]}}, "team-b", subresource="status")
    kueue.reconcile()
    assert condition(wl(gateway, "team-b", "b-own"), "Admitted")[0] == "True"
    assert condition(wl(gateway, "team-a", "a-borrower"), "QuotaReserved")[:2] == ("False", "Pending")


def test_deleting_a_job_releases_its_quota_and_the_workload_goes(gateway, kueue) -> None:
    setup_tenants(gateway, team_a={"cohort": None})
    gateway.create(R.JOB, K.job("team-a", "gone", gpus=4))
    kueue.reconcile()
    [workload] = gateway.list(R.WORKLOAD, "team-a")
    assert workload["metadata"]["finalizers"] == ["kueue.x-k8s.io/resource-in-use"]
    gateway.create(R.WORKLOAD, K.workload("team-a", "next", gpus=4))
    kueue.reconcile()
    gateway.delete(R.JOB, "gone", "team-a")          # owner GC marks the Workload for deletion
    assert gateway.get(R.WORKLOAD, workload["metadata"]["name"], "team-a")["metadata"].get("deletionTimestamp")
    assert [t.what for t in kueue.reconcile()][:1] == ["deleted"]
    kueue.reconcile()
    assert [w["metadata"]["name"] for w in gateway.list(R.WORKLOAD, "team-a")] == ["next"]
    assert condition(wl(gateway, "team-a", "next"), "Admitted")[0] == "True"


def test_resizing_a_non_elastic_ray_cluster_recreates_its_workload_and_loses_the_reservation(gateway, kueue) -> None:
    """The facts: non-elastic RayCluster/PyTorchJob worker changes make Kueue stop the job and recreate the Workload."""
    setup_tenants(gateway, a=8, team_a={"cohort": None})
    gateway.create(R.RAY_CLUSTER, K.ray_cluster("team-a", "fixed", workers=4, gpus_per_worker=2, elastic=False))
    kueue.reconcile()
    [before] = gateway.list(R.WORKLOAD, "team-a")
    gateway.create(R.WORKLOAD, K.workload("team-a", "queued", gpus=8))
    kueue.reconcile()
    ray = gateway.get(R.RAY_CLUSTER, "fixed", "team-a")
    ray["spec"]["workerGroupSpecs"][0]["replicas"] = 1
    gateway.merge_patch(R.RAY_CLUSTER, "fixed", {"spec": {"workerGroupSpecs": ray["spec"]["workerGroupSpecs"]}},
                        "team-a")
    assert "recreated" in [t.what for t in kueue.reconcile()]
    after = wl(gateway, "team-a", before["metadata"]["name"])
    assert after["metadata"]["uid"] != before["metadata"]["uid"], "a new Workload with the same name"
    assert [p["count"] for p in after["spec"]["podSets"]] == [1, 1]
    assert gateway.get(R.RAY_CLUSTER, "fixed", "team-a")["spec"]["suspend"] is True
    assert condition(wl(gateway, "team-a", "queued"), "Admitted")[0] == "True", "the freed quota went to the queue"
    assert condition(after, "Admitted") is None, "the recreated Workload queues behind"
    assert condition(after, "QuotaReserved")[:2] == ("False", "Pending")


def test_stop_policy_hold_keeps_admitted_work_and_hold_and_drain_evicts_it(gateway, kueue) -> None:
    setup_tenants(gateway, team_a={"cohort": None})
    gateway.create(R.JOB, K.job("team-a", "running", gpus=2))
    kueue.reconcile()
    gateway.merge_patch(R.CLUSTER_QUEUE, "team-a", {"spec": {"stopPolicy": "Hold"}})
    gateway.create(R.WORKLOAD, K.workload("team-a", "new", gpus=1))
    kueue.reconcile()
    assert condition(wl(gateway, "team-a", "new"), "QuotaReserved") == (
        "False", "Inadmissible", "ClusterQueue team-a is inactive")
    [job_workload] = [w for w in gateway.list(R.WORKLOAD, "team-a") if w["metadata"]["name"].startswith("job-")]
    assert condition(job_workload, "Admitted")[0] == "True", "Hold only stops new admissions"

    gateway.merge_patch(R.CLUSTER_QUEUE, "team-a", {"spec": {"stopPolicy": "HoldAndDrain"}})
    kueue.reconcile()
    drained = wl(gateway, "team-a", job_workload["metadata"]["name"])
    assert condition(drained, "Evicted") == ("True", "ClusterQueueStopped", "The ClusterQueue is stopped")
    assert not drained["status"].get("admission")
    assert gateway.get(R.JOB, "running", "team-a")["spec"]["suspend"] is True

    gateway.merge_patch(R.CLUSTER_QUEUE, "team-a", {"spec": {"stopPolicy": "None"}})
    kueue.reconcile()
    assert condition(wl(gateway, "team-a", job_workload["metadata"]["name"]), "Admitted")[0] == "True"
    assert condition(wl(gateway, "team-a", "new"), "Admitted")[0] == "True"
