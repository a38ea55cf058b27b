"""`gpuaas doctor` on the real stack: it passes, its probe goes through the real routing, each prerequisite
removed in turn is named (and only it) with its fix, and running the printed fix makes it pass again.

The session's Argo cluster (`gpuaas cluster up --with events`, today's plain monitoring: Prometheus loads
the rendered rule file, Alertmanager the rendered routing) with the product installed as the other Argo
tests install it. The doctor runs as an admin does: `gpuaas doctor --prometheus URL --alertmanager URL
--output json` in a subprocess, the stack's kubeconfig in $KUBECONFIG and its kubectl on $PATH (the
printed fixes are kubectl commands, run here by bash exactly as printed).

What the stack cannot pass, by construction (STACK_GAPS): it runs no kube-state-metrics, so the doctor
warns that per-tenant utilization reads nothing; that is the one finding that is not ok, and it does not
block.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from gpuaas.doctor.permissions import cluster_role
from tests.realstack.argo_product import IDLE_LISTENING, install
from tests.support.doctor import STACK_GAPS, Doctor, changed, finding, not_ok
from tests.support.real_cluster import RealCluster

NS = "gpuaas"

@pytest.fixture(scope="module")
def stack(argo_cluster: RealCluster) -> RealCluster:
    return install(argo_cluster, IDLE_LISTENING)


@pytest.fixture(scope="module")
def doctor(stack: RealCluster) -> Doctor:
    return Doctor(stack, stack.endpoint("prometheus"), stack.cluster.status()["endpoints"]["alertmanager"])


def test_the_doctor_passes_on_the_stack_and_its_probe_goes_through_the_real_routing(doctor: Doctor) -> None:
    code, report, seconds = doctor("--probe")
    print(f"gpuaas doctor --probe: {seconds:.1f}s, {report['counts']}")
    # tenants other tests of the session made are theirs to keep labelled; the example tenants must pass
    ours = {check: status for check, status in not_ok(report).items() if not check.startswith("tenant:")}
    assert ours == STACK_GAPS, json.dumps([f for f in report["findings"] if f["status"] != "ok"], indent=1)
    assert finding(report, "tenant:team-a")["status"] == finding(report, "tenant:team-b")["status"] == "ok"
    assert code == 0 and report["status"] == "warn" and not report["notChecked"] and not report["unreadable"]
    probe = finding(report, "probe")
    assert "nothing was released" in probe["summary"], probe
    assert any("gpuaas-on-idle" in d for d in probe["details"]), probe
    # what it proved on the way: the controllers, by what they did; the rules, by Prometheus itself
    details = " ".join(d for f in report["findings"] for d in f["details"])
    assert "its admission webhook answered a server-side dry run" in details  # Kueue and KEDA
    assert "group gpuaas-gpu:" in details and "health ok" in details


@dataclass(frozen=True)
class Removal:
    """One prerequisite taken away: `remove` breaks it, `check` names the finding that must say so (alone),
    `restore` puts the cluster back whatever happened (the printed fix is what the test runs first)."""

    name: str
    check: str
    status: str
    remove: Callable[[RealCluster], Any]
    restore: Callable[[RealCluster], None]
    words: str


def _kubectl(cluster: RealCluster, *args: str, input_text: str | None = None) -> Any:
    return cluster.kubectl(*args, input_text=input_text)


def _token(cluster: RealCluster) -> str:
    return cluster.kubectl("-n", NS, "get", "secret", "gpuaas-alertmanager-webhook", "-o",
                           "jsonpath={.data.token}").stdout


def _put_token(cluster: RealCluster, encoded: str) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "gpuaas-alertmanager-webhook", "namespace": NS},
              "type": "Opaque", "data": {"token": encoded}}
    cluster.kubectl("apply", "-f", "-", input_text=json.dumps(secret))


_TOKEN: dict[str, str] = {}


def _remove_token(cluster: RealCluster) -> None:
    _TOKEN["value"] = _token(cluster)
    cluster.kubectl("-n", NS, "delete", "secret", "gpuaas-alertmanager-webhook")


KSERVE_CONFIG = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "inferenceservice-config",
                                                                         "namespace": "kserve"},
                 "data": {"deploy": json.dumps({"defaultDeploymentMode": "Serverless"})}}

REMOVALS = [
    Removal("tenant label", "tenant:team-a", "warn",
            lambda c: _kubectl(c, "label", "namespace", "team-a", "gpuaas.io/tenant-"),
            lambda c: _kubectl(c, "label", "namespace", "team-a", "gpuaas.io/tenant=team-a", "--overwrite"),
            "lack the label gpuaas.io/tenant=team-a"),
    Removal("workflow-controller instanceID", "argo-workflows.namespace", "blocks",
            lambda c: _kubectl(c, "-n", "argo", "patch", "configmap", "workflow-controller-configmap", "--type=merge",
                               "-p", '{"data":{"instanceID":"someone-else"}}'),
            lambda c: c.kubectl("-n", "argo", "patch", "configmap", "workflow-controller-configmap", "--type=json",
                                "-p", '[{"op":"remove","path":"/data/instanceID"}]', check=False),
            "instanceID 'someone-else'"),
    Removal("webhook token Secret", "webhook.token", "blocks", _remove_token,
            lambda c: _put_token(c, _TOKEN["value"]) if "value" in _TOKEN else None,
            "does not exist"),
    Removal("catch-up sweep suspended", "sweep", "warn",
            lambda c: _kubectl(c, "-n", NS, "patch", "cronworkflow", "gpuaas-sweep", "--type=merge",
                               "-p", '{"spec":{"suspend":true}}'),
            lambda c: c.kubectl("-n", NS, "patch", "cronworkflow", "gpuaas-sweep", "--type=merge",
                                "-p", '{"spec":{"suspend":false}}', check=False),
            "is suspended"),
    Removal("Knative for KServe's Serverless default", "kserve", "warn",
            lambda c: (c.kubectl("create", "namespace", "kserve", check=False),
                       _kubectl(c, "apply", "-f", "-", input_text=json.dumps(KSERVE_CONFIG))),
            lambda c: c.kubectl("delete", "namespace", "kserve", "--wait=false", check=False),
            "Knative Serving's CRDs are missing"),
]


@pytest.fixture(scope="module")
def baseline(doctor: Doctor) -> dict[str, str]:
    code, report, _ = doctor()
    assert code == 0, not_ok(report)
    return not_ok(report)


@pytest.mark.parametrize("removal", REMOVALS, ids=[r.name for r in REMOVALS])
def test_each_prerequisite_removed_is_named_alone_and_its_printed_fix_restores_it(
        doctor: Doctor, stack: RealCluster, baseline: dict[str, str], removal: Removal) -> None:
    removal.remove(stack)
    try:
        code, report, seconds = doctor()
        assert changed(report, baseline) == {removal.check: removal.status}, json.dumps(
            [f for f in report["findings"] if f["check"] in changed(report, baseline)], indent=1)
        broken = finding(report, removal.check)
        assert removal.words in broken["summary"], broken
        assert code == (1 if removal.status == "blocks" else 0)
        print(f"{removal.name}: named by {removal.check} ({removal.status}) in {seconds:.1f}s; fix: {broken['fix']}")
        doctor.run_fix(broken["fix"])
        code, after, _ = doctor()
        assert not_ok(after) == baseline and code == 0, not_ok(after)
    finally:
        removal.restore(stack)


def test_the_doctor_needs_only_the_role_it_prints(doctor: Doctor, stack: RealCluster) -> None:
    """As a ServiceAccount bound to exactly `gpuaas doctor --print-role`'s ClusterRole: the same findings as
    the admin's, and nothing it could not read."""
    role = cluster_role("gpuaas-doctor-test")
    objects = [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "gpuaas-doctor", "namespace": NS}},
               role,
               {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "gpuaas-doctor-test"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gpuaas-doctor-test"},
                "subjects": [{"kind": "ServiceAccount", "name": "gpuaas-doctor", "namespace": NS}]}]
    stack.kubectl("apply", "-f", "-", input_text=yaml.safe_dump_all(objects))
    kubeconfig = stack.cluster.identity_kubeconfig("doctor-test", NS, "gpuaas-doctor")
    _, as_admin, _ = doctor()
    _, as_doctor, seconds = doctor(kubeconfig=kubeconfig)
    print(f"gpuaas doctor as the ServiceAccount: {seconds:.1f}s")
    assert not as_doctor["unreadable"], as_doctor["unreadable"]
    assert {f["check"]: f["status"] for f in as_doctor["findings"]} == \
        {f["check"]: f["status"] for f in as_admin["findings"]}
    # and a grant taken away is reported as unreadable, not as absent
    stack.kubectl("delete", "clusterrolebinding", "gpuaas-doctor-test")
    _, denied, _ = doctor(kubeconfig=kubeconfig)
    assert "HTTP 403" in json.dumps(denied["unreadable"]) and "--print-role" in json.dumps(denied["unreadable"])


@pytest.fixture(autouse=True)
def _no_leftovers(stack: RealCluster) -> Iterator[None]:
    yield
    stack.kubectl("delete", "clusterrolebinding,clusterrole", "gpuaas-doctor-test", "--ignore-not-found", check=False)
