"""The Sensors' argoWorkflow trigger, as ServiceAccount gpuaas-sensors, with the real `argo` CLI.

Argo Events v1.9.11's trigger (pkg/sensors/triggers/argo-workflow/argo-workflow.go, operation
`submit`) writes the Workflow to a file, runs `argo -n <namespace> submit FILE` with the sensor
pod's ServiceAccount, then lists Workflows by the labels it added (`events.argoproj.io/sensor`,
`/trigger`, `/action-timestamp`) and fails when the list does. The `argo` CLI of the pinned Argo
Workflows (v4.0.5, built by `gpuaas cluster build`) in kube mode validates the Workflow against
the WorkflowTemplate it references before it creates it.

Here: the rendered RBAC (manifests/base/rbac.yaml) and WorkflowTemplates are applied to the real
apiserver; for one event per Sensor, `routing.Router` gives the Workflow the rendered Sensor would
submit; the CLI runs with a kubeconfig holding a TokenRequest token of gpuaas-sensors, and the
list runs as that ServiceAccount. No workflow-controller runs: the Workflows are stored, not run.
Then every granted verb is taken away in turn (a copy of the Role without it, bound to a
ServiceAccount of its own): the trigger must fail, and fail for that verb: kube-apiserver's audit log
must hold the denial of exactly that (account, verb, resource). Beside it, a control made the same way
a moment earlier, with the whole Role, must succeed: a fresh Role that fails for another reason (the
authorizer's cache not yet holding it, a token problem) proves nothing about the verb. Both accounts
are waited for until the authorizer answers a SubjectAccessReview for them as their Role says.

That the real Sensors use these grants is judged elsewhere, from their own requests on the Argo cluster
(tests/realstack/test_least_privilege.py): here the list after `argo submit` is this test's own call.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from gpuaas.cluster import audit
from gpuaas.cluster.binaries import program
from routing import Router
from tests.support.real_cluster import RealCluster, eventually

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "manifests" / "base"
NAMESPACE = "gpuaas"
SENSORS = "gpuaas-sensors"
TRIGGER_LABELS = ("events.argoproj.io/sensor", "events.argoproj.io/trigger", "events.argoproj.io/action-timestamp")
JSON = dict[str, Any]


def _rendered(path: Path) -> list[JSON]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _sensor_rbac() -> list[JSON]:
    """The ServiceAccount, Role(s) and binding(s) of gpuaas-sensors, as rendered."""
    out = []
    for obj in _rendered(BASE / "rbac.yaml"):
        subjects = obj.get("subjects") or []
        if obj["metadata"]["name"] == SENSORS or any(s.get("name") == SENSORS for s in subjects):
            out.append(obj)
    return out


def _apply(real_cluster: RealCluster, objects: list[JSON]) -> None:
    real_cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=gpuaas-tests", "-f", "-",
                         input_text=yaml.safe_dump_all(objects))


def _calendar_tick() -> JSON:
    return {"specversion": "1.0", "id": uuid.uuid4().hex, "source": "gpuaas-capacity-clock",
            "subject": "capacity-reconcile", "type": "calendar", "time": "2026-12-01T09:10:00Z",
            "datacontenttype": "application/json",
            "data": {"eventTime": "2026-12-01 09:10:00 +0000 UTC", "metadata": {}}}


def _submissions() -> list[JSON]:
    """One Workflow per rendered Sensor, as its trigger would submit it (labels and namespace included)."""
    router = Router.from_manifests(BASE)
    events = [json.loads((ROOT / "examples" / "events" / name).read_text())
              for name in ("workload-admitted.json", "workload-finished.json", "idle-alert-group.json")]
    by_sensor: dict[str, JSON] = {}
    for event in [*events, _calendar_tick()]:
        for triggered in router.route(event).triggered:
            by_sensor.setdefault(triggered.sensor, triggered.workflow)
    sensors = {obj["metadata"]["name"] for path in (BASE / "events").glob("sensor-*.yaml") for obj in _rendered(path)}
    assert set(by_sensor) == sensors, f"expected a submission for every Sensor {sorted(sensors)}, got {sorted(by_sensor)}"
    return [by_sensor[name] for name in sorted(by_sensor)]


def _trigger_as(real_cluster: RealCluster, account: str, workflow: JSON, tmp_path: Path) -> tuple[bool, str]:
    """What Execute does for operation submit: `argo -n NS submit FILE`, then list by its labels."""
    workflow = copy.deepcopy(workflow)
    workflow["metadata"]["labels"]["events.argoproj.io/action-timestamp"] = str(uuid.uuid4().int % 10**13)
    file = tmp_path / f"{workflow['metadata']['generateName']}{uuid.uuid4().hex[:6]}.json"
    file.write_text(json.dumps(workflow))
    kubeconfig = real_cluster.service_account_kubeconfig(NAMESPACE, account, tmp_path / f"kubeconfig-{account}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARGO_") and k != "KUBECONFIG"}
    env.update(KUBECONFIG=str(kubeconfig), HOME=str(tmp_path))
    done = subprocess.run([str(program("argo-workflows", "argo")), "-n", NAMESPACE, "submit", str(file)],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    if done.returncode != 0:
        return False, f"argo submit exited {done.returncode}: {(done.stderr or done.stdout).strip()[-600:]}"
    selector = ",".join(f"{key}={workflow['metadata']['labels'][key]}" for key in TRIGGER_LABELS)
    as_account = client.CustomObjectsApi(real_cluster.service_account_client(NAMESPACE, account))
    try:
        found = as_account.list_namespaced_custom_object("argoproj.io", "v1alpha1", NAMESPACE, "workflows",
                                                         label_selector=selector)["items"]
    except client.ApiException as error:
        return False, f"listing the submitted Workflow failed: {error.status} {error.reason}"
    if len(found) != 1:
        return False, f"expected exactly 1 Workflow labelled {selector}, found {len(found)}"
    return True, found[0]["metadata"]["name"]


@pytest.fixture(scope="module")
def sensor_setup(real_cluster: RealCluster) -> list[JSON]:
    real_cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    templates = [obj for path in sorted((BASE / "workflows").glob("*.yaml")) for obj in _rendered(path)]
    _apply(real_cluster, templates + _sensor_rbac())
    return _submissions()


def test_every_sensor_submits_its_workflow_with_the_rendered_grants(real_cluster: RealCluster, sensor_setup: list[JSON],
                                                                    tmp_path: Path) -> None:
    for workflow in sensor_setup:
        ok, detail = _trigger_as(real_cluster, SENSORS, workflow, tmp_path)
        template = workflow["spec"]["workflowTemplateRef"]["name"]
        assert ok, f"the Sensor's trigger for {template} failed as {SENSORS}: {detail}"
        stored = client.CustomObjectsApi(real_cluster.admin).get_namespaced_custom_object(
            "argoproj.io", "v1alpha1", NAMESPACE, "workflows", detail)
        assert stored["spec"]["workflowTemplateRef"]["name"] == template


def _granted() -> list[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of every rule the rendered Roles give gpuaas-sensors."""
    out = []
    for obj in _sensor_rbac():
        if obj["kind"] in ("Role", "ClusterRole"):
            for rule in obj["rules"]:
                out += [(group, resource, verb) for group in rule["apiGroups"] for resource in rule["resources"]
                        for verb in rule["verbs"]]
    return out


def _bind(real_cluster: RealCluster, account: str, rules: list[JSON]) -> None:
    """A ServiceAccount of its own with a Role of these rules, and wait until the authorizer applies it:
    a SubjectAccessReview for every granted (verb, resource, name) answers allowed."""
    _apply(real_cluster, [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": account, "namespace": NAMESPACE}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": account, "namespace": NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
         "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]},
    ])
    reviews = client.AuthorizationV1Api(real_cluster.admin)
    user = f"system:serviceaccount:{NAMESPACE}:{account}"

    def allowed(group: str, resource: str, verb: str, name: str) -> bool:
        return reviews.create_subject_access_review({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"],
                     "resourceAttributes": {"namespace": NAMESPACE, "group": group, "resource": resource,
                                            "verb": verb, "name": name}}}).status.allowed
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or [""]:
                        eventually(lambda g=group, r=resource, v=verb, n=name: allowed(g, r, v, n), timeout_s=30,
                                   what=f"the authorizer allowing {user} {verb} {resource} {name}".rstrip())


def _without(taken: tuple[str, str, str]) -> list[JSON]:
    """The rendered Role's rules less one verb of one resource."""
    group, resource, verb = taken
    rules = []
    for obj in _sensor_rbac():
        if obj["kind"] == "Role":
            for rule in obj["rules"]:
                verbs = [v for v in rule["verbs"]
                         if not (v == verb and resource in rule["resources"] and group in rule["apiGroups"])]
                if verbs:
                    rules.append({**rule, "verbs": verbs})
    return rules


@pytest.mark.parametrize("taken", _granted(), ids=lambda t: f"{t[2]}-{t[1]}")
def test_the_trigger_fails_without_any_one_granted_verb(real_cluster: RealCluster, sensor_setup: list[JSON],
                                                        tmp_path: Path, taken: tuple[str, str, str]) -> None:
    _, resource, verb = taken
    suffix = uuid.uuid4().hex[:5]
    account, control = f"sensor-without-{verb}-{resource}"[:57] + f"-{suffix}", f"sensor-full-{suffix}"
    full = [rule for obj in _sensor_rbac() if obj["kind"] == "Role" for rule in obj["rules"]]
    try:
        _bind(real_cluster, control, full)
        _bind(real_cluster, account, _without(taken))
        _judge(real_cluster, sensor_setup[0], tmp_path, taken, account, control)
    finally:
        for name in (account, control):
            real_cluster.kubectl("delete", "rolebinding,role,serviceaccount", name, "-n", NAMESPACE,
                                 "--ignore-not-found", check=False)


def _judge(real_cluster: RealCluster, workflow: JSON, tmp_path: Path, taken: tuple[str, str, str], account: str,
           control: str) -> None:
    """The control succeeds; the account without `taken` fails, and its one denial is `taken`."""
    group, resource, verb = taken
    log = real_cluster.cluster.audit_log
    before = sum(1 for _ in audit.requests(log))
    ok, detail = _trigger_as(real_cluster, control, workflow, tmp_path)
    assert ok, f"the control, a Role made the same way with every granted verb, failed ({detail}): no verdict"
    ok, detail = _trigger_as(real_cluster, account, workflow, tmp_path)
    assert not ok, f"the trigger still worked without {verb} {resource} ({detail}): that grant is not needed"
    user = f"system:serviceaccount:{NAMESPACE}:{account}"
    deadline = time.monotonic() + 10

    def denials() -> list[audit.Request]:
        return [r for r in list(audit.requests(log))[before:] if r.user == user and r.denied]
    while not denials() and time.monotonic() < deadline:
        time.sleep(0.5)  # the audit log is written as each response completes; argo may still be closing
    found = denials()
    assert [(r.group, r.rbac_resource, r.verb) for r in found][:1] == [(group, resource, verb)], (
        f"expected the failure to be kube-apiserver denying {user} {verb} {group}/{resource}, found denials "
        f"{[(r.verb, r.group, r.rbac_resource, r.name) for r in found]}: {detail}")
    assert {(r.group, r.rbac_resource, r.verb) for r in found} == {(group, resource, verb)}, found
