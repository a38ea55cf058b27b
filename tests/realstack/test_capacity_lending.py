"""Capacity tracking (provision-quota mode=capacity) and a ClusterQueue's lendingLimit, on real Kueue.

Kueue's ClusterQueue webhook refuses a lendingLimit above the nominalQuota
(pkg/webhooks/clusterqueue_webhook.go `validateLendingLimit`), on update too. When the capacity
split lowers a tenant's nominalQuota below the lendingLimit it already has, the step lowers the
limit with the quota in the same patch (a limit at the quota lends the same GPUs: all of them) and
remembers the limit the queue had, so it comes back once the quota grows past it again.

The flavor here selects one KWOK node (4 GPUs) so the capacity does not depend on other tests.
The step runs as a process (`python -m steps provision-quota PARAMS`), as in its pod, as the
WorkflowTemplate's ServiceAccount gpuaas-steps with the rendered RBAC (tests.support.real_steps: a
denial in the audit log fails it), so it reads the product's policy ConfigMap in namespace gpuaas (the
only one its Role names): the test adds its two ClusterQueues' weights there and puts the ConfigMap
back as it found it afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from steps.cluster_queue import LENT_ANNOTATION
from steps.gateways import resources as R
from tests.support.real_cluster import RealCluster, eventually
from tests.support.real_steps import RealSteps
from tests.support.real_workloads import Kind, RealWorkloads, condition, job

ROOT = Path(__file__).resolve().parents[2]
FLAVOR = "lending-check"
COHORT = "lending-check"
GPU = "nvidia.com/gpu"
JSON = dict[str, Any]


def _cluster_queue(name: str, nominal: int, lending_limit: int | None) -> JSON:
    gpu: JSON = {"name": GPU, "nominalQuota": nominal}
    if lending_limit is not None:
        gpu["lendingLimit"] = lending_limit
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"cohortName": COHORT, "namespaceSelector": {},
                     "resourceGroups": [{"coveredResources": [GPU], "flavors": [{"name": FLAVOR, "resources": [gpu]}]}]}}


PRODUCT = [ROOT / "manifests" / "base" / name for name in ("namespace.yaml", "rbac.yaml")]
POLICY_NAMESPACE = "gpuaas"


@contextmanager
def _product_policy(real_cluster: RealCluster) -> Iterator[client.CoreV1Api]:
    """The product's policy ConfigMap as this test sets it (`_set_weights`), put back (or removed) after."""
    core = client.CoreV1Api(real_cluster.admin)
    try:
        saved = core.read_namespaced_config_map("gpuaas-policy", POLICY_NAMESPACE).data
    except client.ApiException as error:
        if error.status != 404:
            raise
        saved = None
    try:
        yield core
    finally:
        if saved is None:
            core.delete_namespaced_config_map("gpuaas-policy", POLICY_NAMESPACE)
        else:
            core.replace_namespaced_config_map("gpuaas-policy", POLICY_NAMESPACE, {
                "metadata": {"name": "gpuaas-policy"}, "data": saved})


def _set_weights(real_cluster: RealCluster, weights: dict[str, int]) -> None:
    """ConfigMap gpuaas-policy in gpuaas with this cohort and per-ClusterQueue quota weights."""
    document = {"quota": {"cohort": COHORT}, "tenants": {name: {"quota": {"weight": w}} for name, w in weights.items()}}
    real_cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=gpuaas-tests", "-f", "-",
                         input_text=yaml.safe_dump({
                             "apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "gpuaas-policy", "namespace": POLICY_NAMESPACE},
                             "data": {"policy.yaml": yaml.safe_dump(document)}}))


def _run_capacity(steps: RealSteps) -> tuple[str, JSON]:
    done = steps.run("provision-quota", mode="capacity", flavor=FLAVOR, cohort=COHORT)
    assert done.account == "gpuaas-steps", done.account
    return done.outcome, done.record


def _gpu(real_cluster: RealCluster, name: str) -> JSON:
    cq = client.CustomObjectsApi(real_cluster.admin).get_cluster_custom_object(
        "kueue.x-k8s.io", "v1beta2", "clusterqueues", name)
    return cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]


def test_capacity_mode_lowers_a_lending_limit_with_the_quota_and_restores_it(real_cluster: RealCluster,
                                                                            tmp_path: Path) -> None:
    for path in PRODUCT:
        real_cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=gpuaas-tests", "-f",
                             str(path))
    objects = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR},
         "spec": {"nodeLabels": {"kubernetes.io/hostname": "gpu-node-1"}}},
        _cluster_queue("lend-a", 4, 3), _cluster_queue("lend-b", 0, None),
    ]
    real_cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=gpuaas-tests", "-f", "-",
                         input_text=yaml.safe_dump_all(objects))
    try:
        _lend(real_cluster, tmp_path)
    finally:
        # the session's other tests share the cluster: a flavor left here entered test_least_privilege's capacity
        # split (a sharded CI run: every ClusterQueue of cohort gpuaas planned a lending-check quota)
        real_cluster.kubectl("delete", "clusterqueue", "lend-a", "lend-b", "--ignore-not-found")
        real_cluster.kubectl("delete", "resourceflavor", FLAVOR, "--ignore-not-found")


def _lend(real_cluster: RealCluster, tmp_path: Path) -> None:
    steps = RealSteps(real_cluster, tmp_path)
    with _product_policy(real_cluster):
        _set_weights(real_cluster, {"lend-a": 1, "lend-b": 1})

        # 4 GPUs split 1:1 -> lend-a 2, below its lendingLimit 3: the limit comes down with the quota.
        outcome, record = _run_capacity(steps)
        assert outcome == "applied", record.get("data", {}).get("errors")
        assert _gpu(real_cluster, "lend-a") == {"name": GPU, "nominalQuota": 2, "lendingLimit": 2}
        assert _gpu(real_cluster, "lend-b")["nominalQuota"] == 2
        reasons = " ".join(a["reason"] for a in record["data"]["plan"]["actions"])
        assert "lendingLimit 3 -> 2" in reasons, reasons

        # Nothing changed: nothing to write.
        outcome, _ = _run_capacity(steps)
        assert outcome == "no-op"

        # 4 GPUs split 3:1 -> lend-a 3: the lendingLimit it had (3) is back.
        _set_weights(real_cluster, {"lend-a": 3, "lend-b": 1})
        outcome, record = _run_capacity(steps)
        assert outcome == "applied", record.get("data", {}).get("errors")
        assert _gpu(real_cluster, "lend-a") == {"name": GPU, "nominalQuota": 3, "lendingLimit": 3}
        assert _gpu(real_cluster, "lend-b")["nominalQuota"] == 1


LOAN_FLAVOR = LOAN_QUEUE = LOAN_NAMESPACE = "loan-check"


def test_a_loan_returned_after_its_quota_was_declared_again_leaves_the_declared_quota(real_cluster: RealCluster,
                                                                                      tmp_path: Path) -> None:
    """A loan on real Kueue, through the steps as their pods run them: a Job asking 3 GPUs waits in a queue of 2;
    provision-quota lends it 1 (quota 3, the loan and the quota gpuaas wrote recorded on the ClusterQueue) and
    Kueue admits it. An admin then declares the queue's quota again (2: a re-applied overlay, a hand edit), the Job
    finishes, and on-finished returns the loan: the quota stays the declared 2 (before the record, the return
    lowered it by the loan, to 1, for good)."""
    for path in PRODUCT:
        real_cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=gpuaas-tests", "-f",
                             str(path))
    # the flavor tolerates the KWOK GPU node's taints, as the stack's tenants' flavor does
    node = client.CoreV1Api(real_cluster.admin).read_node("gpu-node-2")
    tolerations = [{"key": t.key, "operator": "Equal", "value": t.value or "", "effect": t.effect}
                   for t in node.spec.taints or []]
    # cpu and memory covered too (the Job's pod asks for them: a resource no group covers makes it inadmissible)
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": LOAN_QUEUE},
             "spec": {"cohortName": LOAN_QUEUE, "namespaceSelector": {}, "resourceGroups": [{
                 "coveredResources": ["cpu", "memory", GPU], "flavors": [{"name": LOAN_FLAVOR, "resources": [
                     {"name": "cpu", "nominalQuota": "8"}, {"name": "memory", "nominalQuota": "32Gi"},
                     {"name": GPU, "nominalQuota": 2}]}]}]}}
    objects = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": LOAN_FLAVOR},
         "spec": {"nodeLabels": {"kubernetes.io/hostname": "gpu-node-2"}, "tolerations": tolerations}},
        queue,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LOAN_NAMESPACE}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": LOAN_QUEUE, "namespace": LOAN_NAMESPACE}, "spec": {"clusterQueue": LOAN_QUEUE}},
    ]
    real_cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=gpuaas-tests", "-f", "-",
                         input_text=yaml.safe_dump_all(objects))
    try:
        _lend_declare_return(real_cluster, tmp_path)
    finally:
        real_cluster.kubectl("delete", "namespace", LOAN_NAMESPACE, "--ignore-not-found", "--wait=true")
        real_cluster.kubectl("delete", "clusterqueue", LOAN_QUEUE, "--ignore-not-found")
        real_cluster.kubectl("delete", "resourceflavor", LOAN_FLAVOR, "--ignore-not-found")


def _lend_declare_return(real_cluster: RealCluster, tmp_path: Path) -> None:
    steps = RealSteps(real_cluster, tmp_path)
    custom = client.CustomObjectsApi(real_cluster.admin)
    tenant = RealWorkloads(real_cluster, LOAN_NAMESPACE)
    submitted = tenant.submit(Kind("Job", R.JOB, lambda name, ns, q: job(name, ns, LOAN_QUEUE, pods=1, gpus=3),
                                   3, "deactivate"), "wide")
    pending = eventually(lambda: (w := tenant.workload(submitted)) and GPU in _quota_message(w) and w, timeout_s=60,
                         what="the Job's Workload waiting for GPU quota (3 GPUs in a queue of 2, a cohort of one)")
    assert condition(pending, "Admitted") != "True", pending.get("status")

    lent = steps.run("provision-quota", mode="hand", tenant=LOAN_QUEUE, namespace=LOAN_NAMESPACE,
                     flavor=LOAN_FLAVOR, gpus="1", workload=pending["metadata"]["name"])
    assert lent.outcome == "applied", lent.describe()
    assert _loan_gpus(custom) == 3
    admitted = tenant.admitted(submitted, timeout_s=120)

    # The admin declares the queue's quota again: 2, as their files say (field manager of their own).
    queue = custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", LOAN_QUEUE)
    groups = queue["spec"]["resourceGroups"]
    for resource in groups[0]["flavors"][0]["resources"]:
        if resource["name"] == GPU:
            resource["nominalQuota"] = 2
    custom.patch_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", LOAN_QUEUE,
                                       {"spec": {"resourceGroups": groups}}, field_manager="admin-files")

    eventually(lambda: tenant.finish_pods(submitted) >= 0 and condition(
        tenant.get_workload(admitted["metadata"]["name"]) or {}, "Finished") == "True",
        timeout_s=180, what="the Job's Workload Finished")
    returned = steps.run("on-finished", namespace=LOAN_NAMESPACE, workload=admitted["metadata"]["name"], event="")
    assert returned.outcome == "applied", returned.describe()
    actions = [a["action"] for a in returned.plan.get("actions") or []]
    assert "return-lent-quota" in actions, actions
    reasons = " ".join(returned.plan.get("reasons") or [])
    assert "declared again since gpuaas wrote 3" in reasons, reasons
    queue = custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", LOAN_QUEUE)
    assert _loan_gpus(custom) == 2, queue["spec"]
    assert LENT_ANNOTATION not in (queue["metadata"].get("annotations") or {}), queue["metadata"]["annotations"]


def _loan_gpus(custom: client.CustomObjectsApi) -> int:
    queue = custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", LOAN_QUEUE)
    (gpu,) = [r for r in queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"] if r["name"] == GPU]
    return int(gpu["nominalQuota"])


def _quota_message(workload: JSON) -> str:
    """Why Kueue has not reserved quota for the Workload (its QuotaReserved condition), or ""."""
    for item in (workload.get("status") or {}).get("conditions") or []:
        if item.get("type") == "QuotaReserved" and item.get("status") != "True":
            return item.get("message") or ""
    return ""
