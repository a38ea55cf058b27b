"""provision-quota in both modes, through the official client against the local API server.

Every scenario runs the reaction twice: the second run must be a `no-op` that writes nothing.
Objects the reaction creates are validated strictly against Kueue's CRD schemas.
"""

from __future__ import annotations

import json

import pytest

from engine.apiserver import ApiServer
from engine.kueue import KueueController
from steps.cluster_queue import LENT_ANNOTATION, gpu_quotas, read_loans, return_loan_patch
from steps.gateways import resources as R
from steps.gateways.kubernetes import KubernetesGateway
from steps.reactions.provision_quota import run
from tests.quota import kueue_objects as K
from tests.support.kueue_schema import kueue_schema_errors

POLICY = {"quota": {"cohort": "gpuaas"},
          "tenants": {"team-a": {"quota": {"weight": 2}}, "team-b": {"quota": {"weight": 1, "guaranteedGpus": 2}}}}


def hand(**params: str) -> dict[str, str]:
    return {"mode": "hand", "dry-run": "false", **params}


def assert_valid_kueue(obj: dict) -> None:
    body = {k: v for k, v in obj.items() if k != "status"}
    body["metadata"] = {k: v for k, v in obj["metadata"].items() if k in ("name", "namespace", "labels", "annotations")}
    assert kueue_schema_errors(body) == []
    for group in (obj.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group["flavors"]:  # Kueue's CEL rule: flavors list the covered resources, in order
            assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]


def node(name: str, flavor: str, gpus: int, ready: bool = True, cordoned: bool = False) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"gpuaas.io/flavor": flavor}},
            "spec": {"unschedulable": True} if cordoned else {},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_hand_creates_cluster_queue_and_local_queue_then_no_op(gateway: KubernetesGateway, server: ApiServer) -> None:
    gateway.create(R.RESOURCE_FLAVOR, K.resource_flavor("a100"))
    result = run(gateway, hand(tenant="team-a", namespace="team-a", flavor="a100", gpus="8"), POLICY)
    assert result.outcome == "applied", result.errors
    assert [r.action for r in result.results] == ["create-cluster-queue", "create-local-queue"]
    cq = gateway.get(R.CLUSTER_QUEUE, "team-a")
    assert cq["spec"]["cohortName"] == "gpuaas" and gpu_quotas(cq) == {"a100": 8}
    assert_valid_kueue(cq)
    lq = gateway.get(R.LOCAL_QUEUE, "team-a", "team-a")
    assert lq["spec"] == {"clusterQueue": "team-a"}
    assert_valid_kueue(lq)

    [event] = [e for e in gateway.list(R.EVENT, "default") if e["involvedObject"]["kind"] == "ClusterQueue"]
    assert (event["reason"], event["involvedObject"]["name"]) == ("GPUaaSQuotaProvisioned", "team-a")
    assert "create it in cohort gpuaas with 8 GPU(s) of a100" in event["message"]

    server.reset_counters()
    again = run(gateway, hand(tenant="team-a", namespace="team-a", flavor="a100", gpus="8"), POLICY)
    assert again.outcome == "no-op" and again.results == []
    assert server.write_count == 0


def test_hand_covers_cpu_and_memory_when_the_policy_says(gateway: KubernetesGateway) -> None:
    gateway.create(R.RESOURCE_FLAVOR, K.resource_flavor("a100"))
    policy = {"quota": {"cpuPerGpu": "8", "memoryPerGpu": "64Gi"}}
    assert run(gateway, hand(tenant="t", namespace="t", flavor="a100", gpus="4"), policy).outcome == "applied"
    cq = gateway.get(R.CLUSTER_QUEUE, "t")
    assert cq["spec"]["resourceGroups"][0]["coveredResources"] == ["nvidia.com/gpu", "cpu", "memory"]
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1:] == [
        {"name": "cpu", "nominalQuota": "32"}, {"name": "memory", "nominalQuota": "256Gi"}]
    assert_valid_kueue(cq)


def test_hand_resize_records_before_and_after_and_adds_a_new_flavor(gateway: KubernetesGateway) -> None:
    gateway.create(R.RESOURCE_FLAVOR, K.resource_flavor("a100"))
    gateway.create(R.RESOURCE_FLAVOR, K.resource_flavor("h100"))
    run(gateway, hand(tenant="team-a", namespace="team-a", flavor="a100", gpus="8"), POLICY)
    resized = run(gateway, hand(tenant="team-a", flavor="a100", gpus="12"), POLICY)
    assert resized.outcome == "applied"
    assert [(r.before, r.after) for r in resized.results] == [({"a100": 8}, {"a100": 12})]
    added = run(gateway, hand(tenant="team-a", flavor="h100", gpus="2"), POLICY)
    assert added.outcome == "applied"
    cq = gateway.get(R.CLUSTER_QUEUE, "team-a")
    assert gpu_quotas(cq) == {"a100": 12, "h100": 2}
    assert_valid_kueue(cq)


def test_dry_run_plans_but_writes_nothing(gateway: KubernetesGateway, server: ApiServer) -> None:
    gateway.create(R.RESOURCE_FLAVOR, K.resource_flavor("a100"))
    server.reset_counters()
    result = run(gateway, hand(tenant="team-a", namespace="team-a", flavor="a100", gpus="8", **{"dry-run": "true"}),
                 POLICY)
    assert [r.result for r in result.results] == ["dry-run", "dry-run"]
    assert result.plan.actions[0].body["spec"]["cohortName"] == "gpuaas"
    assert server.write_count == 0


BAD_INPUT = [
    (hand(tenant="team-a", namespace="team-a", flavor="a100", gpus="eight"), "gpus: expected a whole number"),
    (hand(tenant="team-a", namespace="team-a", flavor="a100", gpus="-1"), "gpus: expected a whole number"),
    (hand(tenant="Team_A", namespace="team-a", flavor="a100", gpus="1"), "tenant: expected a ClusterQueue name"),
    (hand(namespace="team-a", flavor="a100", gpus="1"), "tenant: expected a value in mode=hand"),
    (hand(tenant="team-a", namespace="team-a", gpus="1"), "flavor: expected a value"),
    (hand(tenant="team-a", namespace="team-a", flavor="v100", gpus="1"), "flavor: expected an existing ResourceFlavor"),
    (hand(tenant="team-b", flavor="a100", gpus="1"), "namespace: expected the tenant's namespace"),
    (hand(tenant="team-a", flavor="a100", gpus="1", cohort="other"), "cohort: expected cohort gpuaas"),
    (hand(tenant="team-a", flavor="a100", gpus="1"), "gpus: expected >= 3"),
    (hand(tenant="team-a", flavor="a100", gpus="1", workload="ghost"), "namespace: expected the Workload's namespace"),
    (hand(tenant="team-a", namespace="team-a", flavor="a100", gpus="1", workload="ghost"),
     "workload: expected an existing Workload"),
    ({"mode": "sideways"}, "mode: expected hand or capacity"),
    ({"mode": "capacity", "gpus": "4"}, "gpus: expected empty in mode=capacity"),
    ({"mode": "capacity", "dry-run": "maybe"}, "dry-run: expected"),
    (hand(tenant="team-a", flavor="a100", gpus="4", **{"borrowing-limit": "two"}), "borrowing-limit: expected a whole"),
    (hand(tenant="team-a", flavor="a100", gpus="4", **{"lending-limit": "6"}), "lending-limit: expected <= gpus (4)"),
    ({"mode": "capacity", "lending-limit": "1"}, "lending-limit: expected empty in mode=capacity"),
]


@pytest.mark.parametrize(("params", "message"), BAD_INPUT, ids=[m.split(":")[0] + str(i) for i, (_, m) in
                                                                 enumerate(BAD_INPUT)])
def test_bad_input_is_rejected_with_no_write(params: dict, message: str, gateway: KubernetesGateway,
                                             server: ApiServer, kueue: KueueController) -> None:
    gateway.create(R.RESOURCE_FLAVOR, K.resource_flavor("a100"))
    gateway.create(R.CLUSTER_QUEUE, K.cluster_queue("team-a", 4))
    gateway.create(R.LOCAL_QUEUE, K.local_queue("team-a", "team-a"))
    gateway.create(R.WORKLOAD, K.workload("team-a", "running", gpus=3))
    kueue.reconcile()
    server.reset_counters()
    result = run(gateway, params, POLICY)
    assert result.outcome == "rejected-input"
    assert message in result.errors[0], result.errors
    assert server.write_count == 0


def test_bad_policy_is_rejected(gateway: KubernetesGateway) -> None:
    result = run(gateway, {"mode": "capacity"}, {"tenants": {"a": {"quota": {"weight": "-2"}}}})
    assert result.outcome == "rejected-input" and "policy.tenants.a.quota.weight" in result.errors[0]


def seed_capacity(gateway: KubernetesGateway, server: ApiServer) -> None:
    gateway.create(R.RESOURCE_FLAVOR, K.resource_flavor("a100"))
    for tenant in ("team-a", "team-b", "team-c"):
        cohort = "elsewhere" if tenant == "team-c" else "gpuaas"
        gateway.create(R.CLUSTER_QUEUE, K.cluster_queue(tenant, 1, cohort=cohort))
        gateway.create(R.LOCAL_QUEUE, K.local_queue(tenant, tenant))
    for body in (node("n1", "a100", 8), node("n2", "a100", 8), node("n3", "a100", 8, ready=False),
                 node("n4", "a100", 8, cordoned=True), node("n5", "h100", 8)):
        server.store.create(R.NODE, body)


def test_capacity_splits_by_weight_and_second_run_is_no_op(gateway: KubernetesGateway, server: ApiServer) -> None:
    seed_capacity(gateway, server)
    result = run(gateway, {"mode": "capacity"}, POLICY)
    assert result.outcome == "applied", result.errors
    assert result.plan.observed["flavors"]["a100"]["capacity"] == 16
    assert result.plan.observed["flavors"]["a100"]["nodes"] == ["n1", "n2"]
    quotas = {name: gpu_quotas(gateway.get(R.CLUSTER_QUEUE, name)) for name in ("team-a", "team-b", "team-c")}
    assert quotas == {"team-a": {"a100": 11}, "team-b": {"a100": 5}, "team-c": {"a100": 1}}, \
        "weights 2:1 over 16 GPUs; team-c is in another cohort"
    assert {r.target["name"]: (r.before, r.after) for r in result.results} == {
        "team-a": ({"a100": 1}, {"a100": 11}), "team-b": ({"a100": 1}, {"a100": 5})}
    assert_valid_kueue(gateway.get(R.CLUSTER_QUEUE, "team-a"))

    server.reset_counters()
    again = run(gateway, {"mode": "capacity"}, POLICY)
    assert again.outcome == "no-op" and server.write_count == 0
    assert any("unchanged" in reason for reason in again.plan.reasons)


def test_capacity_never_goes_below_usage(gateway: KubernetesGateway, server: ApiServer, kueue: KueueController) -> None:
    seed_capacity(gateway, server)
    run(gateway, {"mode": "capacity"}, POLICY)
    gateway.create(R.WORKLOAD, K.workload("team-b", "big", gpus=9))  # 5 own + 4 borrowed from team-a
    kueue.reconcile()
    assert gateway.get(R.CLUSTER_QUEUE, "team-b")["status"]["flavorsUsage"][0]["resources"][0]["total"] == "9"
    server.store.patch(R.NODE, "n2", {"spec": {"unschedulable": True}})  # capacity drops to 8
    result = run(gateway, {"mode": "capacity"}, POLICY)
    quotas = {name: gpu_quotas(gateway.get(R.CLUSTER_QUEUE, name))["a100"] for name in ("team-a", "team-b")}
    assert quotas == {"team-a": 0, "team-b": 9}, "team-b keeps what it uses; nothing else is left"
    assert any("in use" in r for r in result.plan.reasons)


def test_capacity_adds_a_new_flavor_to_every_queue(gateway: KubernetesGateway, server: ApiServer) -> None:
    seed_capacity(gateway, server)
    run(gateway, {"mode": "capacity"}, POLICY)
    gateway.create(R.RESOURCE_FLAVOR, K.resource_flavor("h100"))
    result = run(gateway, {"mode": "capacity"}, POLICY)
    assert result.outcome == "applied"
    assert gpu_quotas(gateway.get(R.CLUSTER_QUEUE, "team-a")) == {"a100": 11, "h100": 5}
    assert gpu_quotas(gateway.get(R.CLUSTER_QUEUE, "team-b")) == {"a100": 5, "h100": 3}, "guarantee 2 < share"
    assert_valid_kueue(gateway.get(R.CLUSTER_QUEUE, "team-b"))


def test_capacity_retries_after_a_conflict(gateway: KubernetesGateway, server: ApiServer) -> None:
    seed_capacity(gateway, server)
    server.faults.fail_next(1, status=409, method="PATCH")
    result = run(gateway, {"mode": "capacity"}, POLICY)
    assert result.outcome == "applied" and result.attempts == 2
    assert gpu_quotas(gateway.get(R.CLUSTER_QUEUE, "team-a")) == {"a100": 11}


def test_lend_to_a_workload_and_return_it(gateway: KubernetesGateway, server: ApiServer,
                                          kueue: KueueController) -> None:
    seed_capacity(gateway, server)
    run(gateway, {"mode": "capacity"}, POLICY)                  # team-a 11, team-b 5
    gateway.create(R.WORKLOAD, K.workload("team-b", "burst", gpus=2))
    kueue.reconcile()
    params = hand(tenant="team-b", namespace="team-b", flavor="a100", gpus="2", workload="burst")
    lent = run(gateway, params, POLICY)
    assert lent.outcome == "applied", lent.errors
    cq = gateway.get(R.CLUSTER_QUEUE, "team-b")
    assert gpu_quotas(cq) == {"a100": 7}
    loan = read_loans(cq)["team-b/burst"]
    assert (loan.flavor, loan.gpus) == ("a100", 2) and loan.uid
    assert json.loads(cq["metadata"]["annotations"][LENT_ANNOTATION])["team-b/burst"]["gpus"] == 2
    assert run(gateway, params, POLICY).outcome == "no-op", "lending twice is idempotent"

    # Capacity tracking keeps the loan: 16 - 2 lent = 14 split 2:1 -> 9 / 5, plus 2 lent for team-b.
    tracked = run(gateway, {"mode": "capacity"}, POLICY)
    assert tracked.outcome == "applied"
    assert gpu_quotas(gateway.get(R.CLUSTER_QUEUE, "team-a"))["a100"] == 9
    assert gpu_quotas(gateway.get(R.CLUSTER_QUEUE, "team-b"))["a100"] == 7

    # on-finished's side of the contract: one conditional merge patch returns the loan.
    cq = gateway.get(R.CLUSTER_QUEUE, "team-b")
    patch = return_loan_patch(cq, "team-b/burst")
    gateway.merge_patch(R.CLUSTER_QUEUE, "team-b", patch)
    cq = gateway.get(R.CLUSTER_QUEUE, "team-b")
    assert gpu_quotas(cq) == {"a100": 5} and LENT_ANNOTATION not in (cq["metadata"].get("annotations") or {})
    assert return_loan_patch(cq, "team-b/burst") is None, "returning twice is a no-op"
    assert_valid_kueue(cq)


def test_step_entry_contract_builds_the_audit_record(gateway: KubernetesGateway, server: ApiServer,
                                                     kueue: KueueController) -> None:
    """What `python -m steps provision-quota FILE` calls: step(context) -> StepReport -> CloudEvent."""
    from steps.reactions import StepContext, load
    from steps.record import build_record

    seed_capacity(gateway, server)
    module = load("provision-quota")
    report = module.step(StepContext("provision-quota", {"mode": "capacity", "dry-run": "false", "event": ""},
                                     kube=gateway, policy=POLICY))
    assert report.code == 0
    record = build_record(report)
    data = record["data"]
    assert record["type"] == "io.gpuaas.reaction.provision-quota"
    assert (data["outcome"], data["cohort"], data["dryRun"]) == ("applied", "gpuaas", False)
    assert data["observed"]["flavors"]["a100"]["capacity"] == 16
    assert {a["target"]["name"]: (a["before"], a["after"], a["result"]) for a in data["actions"]} == {
        "team-a": ({"a100": 1}, {"a100": 11}, "applied"), "team-b": ({"a100": 1}, {"a100": 5}, "applied")}
    assert all("capacity tracking" in a["reason"] for a in data["plan"]["actions"])

    gateway.create(R.WORKLOAD, K.workload("team-b", "burst", gpus=1))
    kueue.reconcile()
    lend = module.step(StepContext("provision-quota", hand(tenant="team-b", namespace="team-b", flavor="a100",
                                                           gpus="1", workload="burst"), kube=gateway, policy=POLICY))
    record = build_record(lend)
    assert record["subject"] == "team-b/burst" and record["data"]["workload"]["uid"]
    assert lend.event[0] == "GPUaaSQuotaProvisioned"

    bad = module.step(StepContext("provision-quota", {"mode": "hand", "tenant": "x", "flavor": "a100", "gpus": "two"},
                                  kube=gateway, policy=POLICY))
    assert (str(bad.outcome), bad.code) == ("rejected-input", 0)
    assert "gpus: expected a whole number" in build_record(bad)["data"]["errors"][0]


def test_as_argo_runs_it_a_fresh_process_with_a_params_file(tmp_path, gateway: KubernetesGateway,
                                                            server: ApiServer) -> None:
    """`python -m steps provision-quota FILE` with GPUAAS_KUBE_URL, policy from the ConfigMap; twice."""
    import os
    import subprocess
    import sys

    import yaml

    seed_capacity(gateway, server)
    gateway.create(R.CONFIG_MAP, {"metadata": {"name": "gpuaas-policy", "namespace": "gpuaas"},
                                  "data": {"policy.yaml": yaml.safe_dump(POLICY)}})
    params = tmp_path / "script"
    params.write_text(json.dumps([{"name": "mode", "value": "capacity"}, {"name": "tenant", "value": ""},
                                  {"name": "namespace", "value": ""}, {"name": "workload", "value": ""},
                                  {"name": "flavor", "value": ""}, {"name": "gpus", "value": ""},
                                  {"name": "cohort", "value": ""}, {"name": "dry-run", "value": "false"},
                                  {"name": "event", "value": ""}]))
    env = {**os.environ, "GPUAAS_KUBE_URL": server.url, "GPUAAS_OUTPUTS_DIR": str(tmp_path / "out")}
    outcomes = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-m", "steps", "provision-quota", str(params)], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        outcomes.append((tmp_path / "out" / "outcome").read_text().strip())
        record = json.loads((tmp_path / "out" / "record").read_text())
        assert record["data"]["reaction"] == "provision-quota"
    assert outcomes == ["applied", "no-op"]
    assert gpu_quotas(gateway.get(R.CLUSTER_QUEUE, "team-a")) == {"a100": 11}


def test_a_second_namespace_widens_the_selector_and_its_workloads_are_admitted(
        gateway: KubernetesGateway, kueue: KueueController) -> None:
    gateway.create(R.RESOURCE_FLAVOR, K.resource_flavor("a100"))
    run(gateway, hand(tenant="team-a", namespace="team-a", flavor="a100", gpus="4"), POLICY)
    result = run(gateway, hand(tenant="team-a", namespace="team-a-dev", flavor="a100", gpus="4"), POLICY)
    assert [r.action for r in result.results] == ["patch-cluster-queue", "create-local-queue"]
    cq = gateway.get(R.CLUSTER_QUEUE, "team-a")
    assert cq["spec"]["namespaceSelector"] == {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-a-dev"]}]}
    assert_valid_kueue(cq)
    gateway.create(R.WORKLOAD, K.workload("team-a-dev", "dev", gpus=1, queue="team-a"))
    kueue.reconcile()
    assert gateway.get(R.WORKLOAD, "dev", "team-a-dev")["status"]["admission"]["clusterQueue"] == "team-a"
    assert run(gateway, hand(tenant="team-a", namespace="team-a-dev", flavor="a100", gpus="4"), POLICY).outcome == "no-op"


@pytest.mark.parametrize(("selector", "expected"), [
    ({}, {}),
    ({"matchLabels": {"kubernetes.io/metadata.name": "b"}},
     {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a", "b"]}]}),
    ({"matchLabels": {"team": "x"}}, None),
    (None, {"matchLabels": {"kubernetes.io/metadata.name": "a"}}),
])
def test_admit_namespace(selector: dict | None, expected: dict | None) -> None:
    from steps.cluster_queue import admit_namespace

    assert admit_namespace(selector, "a") == expected


def test_capacity_includes_a_v1beta1_cluster_queue_with_spec_cohort(gateway: KubernetesGateway,
                                                                    server: ApiServer) -> None:
    seed_capacity(gateway, server)
    legacy = K.cluster_queue("team-old", 1, cohort=None)
    legacy["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    legacy["spec"]["cohort"] = "gpuaas"          # v1beta1 spelling of cohortName
    assert kueue_schema_errors(legacy) == []
    gateway.create(R.CLUSTER_QUEUE_V1BETA1, legacy)
    result = run(gateway, {"mode": "capacity"}, POLICY)
    assert result.plan.observed["clusterQueues"] == ["team-a", "team-b", "team-old"]
    quotas = {name: gpu_quotas(gateway.get(R.CLUSTER_QUEUE, name))["a100"] for name in ("team-a", "team-b", "team-old")}
    assert quotas == {"team-a": 8, "team-b": 4, "team-old": 4}, "weights 2:1:1 (default weight 1) over 16"


def test_hand_sets_borrowing_and_lending_limits_then_no_op(gateway: KubernetesGateway, server: ApiServer) -> None:
    """What `gpuaas quota advise` submits for limits: set on the GPU quota, kept on a later resize."""
    gateway.create(R.RESOURCE_FLAVOR, K.resource_flavor("a100"))
    gateway.create(R.CLUSTER_QUEUE, K.cluster_queue("team-a", 4))
    params = hand(tenant="team-a", flavor="a100", gpus="4", **{"borrowing-limit": "0", "lending-limit": "2"})
    result = run(gateway, params, POLICY)
    assert result.outcome == "applied", result.errors
    cq = gateway.get(R.CLUSTER_QUEUE, "team-a")
    (resource,) = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert resource == {"name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 0, "lendingLimit": 2}
    assert_valid_kueue(cq)
    server.reset_counters()
    assert run(gateway, params, POLICY).outcome == "no-op" and server.write_count == 0
    assert run(gateway, hand(tenant="team-a", flavor="a100", gpus="6"), POLICY).outcome == "applied"
    (resource,) = gateway.get(R.CLUSTER_QUEUE, "team-a")["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert resource == {"name": "nvidia.com/gpu", "nominalQuota": 6, "borrowingLimit": 0, "lendingLimit": 2}


def test_hand_lowering_below_the_queue_lending_limit_is_refused_before_kueue_would(
        gateway: KubernetesGateway, server: ApiServer) -> None:
    """Kueue's ClusterQueue webhook rejects lendingLimit > nominalQuota on update too (v0.19.2
    pkg/webhooks/clusterqueue_webhook.go validateLendingLimit). Lowering `gpus` under the lendingLimit
    the queue already has would be an API error mid-run: refuse it up front and say what to pass."""
    gateway.create(R.RESOURCE_FLAVOR, K.resource_flavor("a100"))
    gateway.create(R.CLUSTER_QUEUE, K.cluster_queue("team-a", 8, lending_limit=6))
    server.reset_counters()
    refused = run(gateway, hand(tenant="team-a", flavor="a100", gpus="4"), POLICY)
    assert refused.outcome == "rejected-input" and server.write_count == 0
    assert "lending-limit" in refused.errors[0] and "lendingLimit 6" in refused.errors[0]
    assert "lending-limit=4" in refused.errors[0], "says what to pass"
    applied = run(gateway, hand(tenant="team-a", flavor="a100", gpus="4", **{"lending-limit": "4"}), POLICY)
    assert applied.outcome == "applied", applied.errors
    (resource,) = gateway.get(R.CLUSTER_QUEUE, "team-a")["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert resource == {"name": "nvidia.com/gpu", "nominalQuota": 4, "lendingLimit": 4}


def _gpu_resource(gateway: KubernetesGateway, name: str) -> dict:
    (resource,) = gateway.get(R.CLUSTER_QUEUE, name)["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    return resource


def test_capacity_lowers_a_lending_limit_with_the_quota_then_gives_it_back(gateway: KubernetesGateway,
                                                                          server: ApiServer) -> None:
    """Capacity mode must not write a nominalQuota under the queue's lendingLimit (Kueue's webhook
    refuses it: tests/realstack/test_capacity_lending.py shows it on real Kueue). The limit comes
    down with the quota, the plan says so, and the limit the queue had comes back later."""
    gateway.create(R.RESOURCE_FLAVOR, K.resource_flavor("a100"))
    gateway.create(R.CLUSTER_QUEUE, K.cluster_queue("team-a", 14, lending_limit=12))
    gateway.create(R.CLUSTER_QUEUE, K.cluster_queue("team-b", 2))
    for body in (node("n1", "a100", 8), node("n2", "a100", 8)):
        server.store.create(R.NODE, body)
    result = run(gateway, {"mode": "capacity"}, POLICY)
    assert result.outcome == "applied", result.errors
    assert _gpu_resource(gateway, "team-a") == {"name": "nvidia.com/gpu", "nominalQuota": 11, "lendingLimit": 11}
    assert "a100 lendingLimit 12 -> 11 with the quota" in result.plan.actions[0].reason
    assert json.loads(gateway.get(R.CLUSTER_QUEUE, "team-a")["metadata"]["annotations"]["gpuaas.io/lending-limits"]) \
        == {"a100": {"configured": 12, "set": 11}}
    assert_valid_kueue(gateway.get(R.CLUSTER_QUEUE, "team-a"))

    server.reset_counters()
    assert run(gateway, {"mode": "capacity"}, POLICY).outcome == "no-op" and server.write_count == 0

    server.store.create(R.NODE, node("n3", "a100", 8))  # 24 GPUs: team-a 16 >= 12
    grown = run(gateway, {"mode": "capacity"}, POLICY)
    assert grown.outcome == "applied", grown.errors
    assert _gpu_resource(gateway, "team-a") == {"name": "nvidia.com/gpu", "nominalQuota": 16, "lendingLimit": 12}
    assert "gpuaas.io/lending-limits" not in (gateway.get(R.CLUSTER_QUEUE, "team-a")["metadata"].get("annotations") or {})


@pytest.mark.parametrize(("nominal", "current", "remembered", "limit", "kept"), [
    (8, None, None, None, None),                                  # no limit: none is invented
    (8, 6, None, 6, None),                                        # fits: untouched
    (4, 6, None, 4, {"configured": 6, "set": 4}),                 # lowered with the quota, 6 remembered
    (5, 4, {"configured": 6, "set": 4}, 5, {"configured": 6, "set": 5}),  # partly back
    (9, 4, {"configured": 6, "set": 4}, 6, None),                 # all the way back, memory dropped
    (9, 3, {"configured": 6, "set": 4}, 3, None),                 # an admin set 3 since: 3 counts
    (2, 3, {"configured": 6, "set": 4}, 2, {"configured": 3, "set": 2}),
    (0, 5, None, 0, {"configured": 5, "set": 0}),
])
def test_fit_lending_limit(nominal: int, current: int | None, remembered: dict | None, limit: int | None,
                           kept: dict | None) -> None:
    from steps.cluster_queue import fit_lending_limit

    fit = fit_lending_limit(nominal, current, remembered)
    assert (fit.limit, fit.remembered) == (limit, kept)
    assert fit.limit is None or fit.limit <= nominal
    assert bool(fit.note) == (fit.limit != current)


def test_returning_a_loan_lowers_a_lending_limit_above_the_returned_quota() -> None:
    """on-finished's loan return lowers nominalQuota too: never under the queue's lendingLimit."""
    cq = K.cluster_queue("team-a", 10, lending_limit=8)
    cq["metadata"]["annotations"] = {LENT_ANNOTATION: json.dumps(
        {"team-a/job": {"flavor": "a100", "gpus": 4, "uid": "u", "lentAt": "2026-01-01T00:00:00Z"}})}
    patch = return_loan_patch(cq, "team-a/job")
    (resource,) = patch["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert resource == {"name": "nvidia.com/gpu", "nominalQuota": 6, "lendingLimit": 6}
    assert json.loads(patch["metadata"]["annotations"]["gpuaas.io/lending-limits"]) == {
        "a100": {"configured": 8, "set": 6}}


def _declare(gateway: KubernetesGateway, name: str, gpus: int) -> None:
    """Write the GPU quota as a chart upgrade, `kubectl apply -k` or a hand edit does: the declared number (it knows
    nothing of loans), the product's annotations left as they are."""
    cq = gateway.get(R.CLUSTER_QUEUE, name)
    groups = cq["spec"]["resourceGroups"]
    for group in groups:
        for flavor in group["flavors"]:
            for resource in flavor["resources"]:
                if resource["name"] == "nvidia.com/gpu":
                    resource["nominalQuota"] = gpus
    gateway.merge_patch(R.CLUSTER_QUEUE, name, {"spec": {"resourceGroups": groups}})


@pytest.mark.parametrize("declared", [5, 8])
def test_a_loan_returned_after_the_quota_was_declared_again_leaves_the_declared_quota(
        declared: int, gateway: KubernetesGateway, kueue: KueueController) -> None:
    """Re-applying a kustomize overlay (or a Helm upgrade that changes the tenant, or a hand edit) puts the declared
    quota back while a loan is out: the live quota no longer holds the loan. Its return must then leave the declared
    quota, not lower it by the loan (which took GPUs from the tenant for good)."""
    gateway.create(R.RESOURCE_FLAVOR, K.resource_flavor("a100"))
    assert run(gateway, hand(tenant="team-b", namespace="team-b", flavor="a100", gpus="5"), POLICY).outcome == "applied"
    gateway.create(R.WORKLOAD, K.workload("team-b", "burst", gpus=2))
    kueue.reconcile()
    lent = run(gateway, hand(tenant="team-b", namespace="team-b", flavor="a100", gpus="2", workload="burst"), POLICY)
    assert lent.outcome == "applied", lent.errors
    assert gpu_quotas(gateway.get(R.CLUSTER_QUEUE, "team-b")) == {"a100": 7}

    _declare(gateway, "team-b", declared)
    patch = return_loan_patch(gateway.get(R.CLUSTER_QUEUE, "team-b"), "team-b/burst")
    gateway.merge_patch(R.CLUSTER_QUEUE, "team-b", patch)
    cq = gateway.get(R.CLUSTER_QUEUE, "team-b")
    assert gpu_quotas(cq) == {"a100": declared}, "the declared quota stays: the loan was no longer in it"
    assert LENT_ANNOTATION not in (cq["metadata"].get("annotations") or {})
    assert_valid_kueue(cq)


def test_a_loan_made_after_the_quota_was_declared_again_adds_every_outstanding_loan(
        gateway: KubernetesGateway, kueue: KueueController) -> None:
    """A second loan after a re-declaration: the quota becomes the declared one plus both loans, and returning
    them one by one comes back to the declared quota."""
    gateway.create(R.RESOURCE_FLAVOR, K.resource_flavor("a100"))
    run(gateway, hand(tenant="team-b", namespace="team-b", flavor="a100", gpus="5"), POLICY)
    for name in ("first", "second"):
        gateway.create(R.WORKLOAD, K.workload("team-b", name, gpus=1))
    kueue.reconcile()
    run(gateway, hand(tenant="team-b", namespace="team-b", flavor="a100", gpus="2", workload="first"), POLICY)
    _declare(gateway, "team-b", 5)
    second = run(gateway, hand(tenant="team-b", namespace="team-b", flavor="a100", gpus="1", workload="second"),
                 POLICY)
    assert second.outcome == "applied", second.errors
    assert gpu_quotas(gateway.get(R.CLUSTER_QUEUE, "team-b")) == {"a100": 8}
    for key, left in (("team-b/first", 6), ("team-b/second", 5)):
        gateway.merge_patch(R.CLUSTER_QUEUE, "team-b", return_loan_patch(gateway.get(R.CLUSTER_QUEUE, "team-b"), key))
        assert gpu_quotas(gateway.get(R.CLUSTER_QUEUE, "team-b")) == {"a100": left}, key


def test_a_write_of_another_flavor_does_not_hide_a_quota_declared_again(gateway: KubernetesGateway,
                                                                          kueue: KueueController) -> None:
    """Review F3: gpuaas records only the flavors it writes. Recording every flavor's live quota on an h100 write
    would take the a100 quota declared again (5) for one holding its loan, and the loan's return would lower it."""
    for flavor in ("a100", "h100"):
        gateway.create(R.RESOURCE_FLAVOR, K.resource_flavor(flavor))
    _lend_two_of_five(gateway, kueue)
    _declare(gateway, "team-b", 5)
    added = run(gateway, hand(tenant="team-b", namespace="team-b", flavor="h100", gpus="4"), POLICY)
    assert added.outcome == "applied", added.errors
    _return(gateway, "team-b/burst")
    assert gpu_quotas(gateway.get(R.CLUSTER_QUEUE, "team-b")) == {"a100": 5, "h100": 4}


def test_a_hand_resize_to_the_live_quota_records_it_for_the_loans_return(gateway: KubernetesGateway,
                                                                         kueue: KueueController) -> None:
    """Review F4: 5 declared + 2 lent = 7; someone declares 3; the admin then asks for 1 by hand, which with the
    loan is the live 3: nothing to resize, but the record must say gpuaas holds it at 3, or the return leaves 3
    instead of the 1 asked for."""
    gateway.create(R.RESOURCE_FLAVOR, K.resource_flavor("a100"))
    _lend_two_of_five(gateway, kueue)
    _declare(gateway, "team-b", 3)
    resized = run(gateway, hand(tenant="team-b", namespace="team-b", flavor="a100", gpus="1"), POLICY)
    assert resized.outcome == "applied", resized.errors
    assert gpu_quotas(gateway.get(R.CLUSTER_QUEUE, "team-b")) == {"a100": 3}
    _return(gateway, "team-b/burst")
    assert gpu_quotas(gateway.get(R.CLUSTER_QUEUE, "team-b")) == {"a100": 1}


def _lend_two_of_five(gateway: KubernetesGateway, kueue: KueueController) -> None:
    """team-b with 5 GPUs of a100 (by hand), and 2 of them lent to its Workload `burst`: 7."""
    run(gateway, hand(tenant="team-b", namespace="team-b", flavor="a100", gpus="5"), POLICY)
    gateway.create(R.WORKLOAD, K.workload("team-b", "burst", gpus=2))
    kueue.reconcile()
    run(gateway, hand(tenant="team-b", namespace="team-b", flavor="a100", gpus="2", workload="burst"), POLICY)


def _return(gateway: KubernetesGateway, key: str) -> None:
    """on-finished's return of loan `key` to team-b, as one merge patch."""
    gateway.merge_patch(R.CLUSTER_QUEUE, "team-b", return_loan_patch(gateway.get(R.CLUSTER_QUEUE, "team-b"), key))
