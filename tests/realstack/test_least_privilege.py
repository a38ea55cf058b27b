"""Least privilege, proven from kube-apiserver's audit log: every grant of the product's rendered RBAC
(manifests/base/rbac.yaml, per ServiceAccount, verb and resource) is needed by some request the
tier made as that ServiceAccount, and nothing the product asked was denied.

The audit log (gpuaas.cluster.audit, `<state>/logs/audit.log`) records every request of the
ServiceAccounts in namespace gpuaas as the authorizer saw it; the requests of this session count (a
cluster reused through GPUAAS_REAL_CLUSTER keeps older ones). This test runs after every other test
of the tier (tests/realstack/conftest.py orders it last: it judges the whole tier's traffic, so run
the tier, not this file alone). Before judging, it drives the product's paths the kind tests do
not: provision-quota (a new tenant by hand, a resize, a capacity split in dry-run), idle-alerts and
on-idle on an Alertmanager group naming a running pod, the GPU-node EventSource's watch, and the
Sensors' submissions (what the argoWorkflow trigger creates, as the Sensors' ServiceAccount,
server-side dry run).

A grant nobody used fails the test, unless it is in NOT_EXERCISED with the reason and where it is
proven instead; an entry there that the tier did use fails it too (the table must shrink).
"""

from __future__ import annotations

import copy
import json
import threading
from pathlib import Path

import yaml
from kubernetes import client

from engine.resource_watcher import ResourceWatcher, WatchedResource
from gpuaas.cluster import audit
from tests.support.real_cluster import RealCluster, eventually
from tests.support.real_steps import RealSteps
from tests.support.real_workloads import KINDS, RealWorkloads

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "manifests" / "base"
PRODUCT = [BASE / name for name in ("namespace.yaml", "rbac.yaml", "policy.yaml")]
TENANTS = ROOT / "manifests" / "examples" / "tenants"
IDLE_GROUP = ROOT / "examples" / "events" / "idle-alert-group.json"

NOT_EXERCISED: dict[tuple[str, str, str], str] = {
    # (account, "group/resource", verb) -> why this tier does not use it yet. Each is a gap of the tier,
    # not a proof: the table must shrink, and an entry the tier does use fails the test.
    ("gpuaas-steps", "argoproj.io/workflowtaskresults", "create"):
        "Argo's executor (argoexec) in each step pod writes it; the step pods run on the pod tier's own "
        "control plane (docs/real-stack-pods.md), which this cluster does not join yet",
    ("gpuaas-steps", "argoproj.io/workflowtaskresults", "patch"): "as above (argoexec)",
    ("gpuaas-steps", "leaderworkerset.x-k8s.io/leaderworkersets", "get"):
        "no LeaderWorkerSet controller runs in the stack (its CRD only): no LWS pods, no Workload to release",
    ("gpuaas-steps", "leaderworkerset.x-k8s.io/leaderworkersets", "patch"): "as above (LeaderWorkerSet)",
    ("gpuaas-steps", "ray.io/rayclusters", "patch"):
        "scale-worker-groups of an elastic RayCluster, and on-finished scaling down a finished RayJob's kept "
        "RayCluster: neither is in the kind table yet (the non-elastic Ray kinds are deactivated)",
    ("gpuaas-steps", "ray.io/rayjobs", "patch"): "scale-worker-groups of an elastic RayJob: not in the kind table yet",
    ("gpuaas-steps", "keda.sh/scaledobjects", "delete"):
        "on-finished deletes a ScaledObject gpuaas made once its owner is gone: a KEDA scenario, not run here",
    ("gpuaas-steps", "/events", "patch"):
        "raising an Event's count needs the same reason recorded twice on one object (a second release of "
        "a Workload): no scenario here releases a Workload twice",
    ("gpuaas-steps", "/events", "list"):
        "on-idle counts a tenant's releases (maxReleasesPerHour) only when it is about to release an idle "
        "workload, which needs a policy window of samples (30m by default) the tier does not wait for",
}


def _objects(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _account(user: str) -> str:
    return user.rsplit(":", 1)[-1]


def _drive_provision_quota(steps: RealSteps, cluster: RealCluster) -> None:
    cluster.kubectl("apply", "--server-side", "--field-manager=gpuaas-tests", "-f", "-", input_text=json.dumps({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "team-lp", "labels": {"gpuaas.io/tenant": "team-lp"}}}))
    made = steps.run("provision-quota", namespace="team-lp", workload="", tenant="team-lp", flavor="gpu-a100",
                     gpus="1", mode="hand")
    assert made.outcome in ("applied", "no-op"), made.describe()
    resized = steps.run("provision-quota", namespace="team-lp", workload="", tenant="team-lp", flavor="gpu-a100",
                        gpus="2", mode="hand")
    assert resized.outcome in ("applied", "no-op"), resized.describe()
    split = steps.run("provision-quota", mode="capacity", dry_run="true")
    assert split.outcome in ("applied", "no-op"), split.describe()


def _drive_idle_alert(steps: RealSteps, cluster: RealCluster) -> None:
    """A firing GPUWorkloadIdle group for a running Deployment pod: idle-alerts resolves it, on-idle judges it."""
    tenant = RealWorkloads(cluster, "team-b")
    submitted = tenant.submit(KINDS["Deployment"], "lp-idle")
    try:
        workload = tenant.admitted(submitted)["metadata"]["name"]
        prepared = steps.run("on-admitted", namespace="team-b", workload=workload, event="")
        assert prepared.outcome in ("applied", "no-op"), prepared.describe()
        pod = eventually(lambda: [p for p in tenant.live_pods(submitted) if p.status.phase == "Running"],
                         timeout_s=90, what="the Deployment's pod running")[0]
        event = json.loads(IDLE_GROUP.read_text())
        text = json.dumps(event).replace("team-a", "team-b").replace("llm-finetune-7c9f2-0", pod.metadata.name)
        alerts = steps.run("idle-alerts", namespace="", workload="", event=text)
        items = json.loads(alerts.outputs.get("alerts") or "[]")
        assert [i["pod"] for i in items] == [pod.metadata.name], alerts.describe()
        item = items[0]
        judged = steps.run("on-idle", namespace=item["namespace"], workload=item["workload"], pod=item["pod"],
                           alert=item["alert"], event="")
        assert judged.outcome in ("no-op", "skipped-by-policy", "applied"), judged.describe()
    finally:
        tenant.delete(submitted)


def _drive_node_watch(cluster: RealCluster) -> None:
    """The GPU-node EventSource's list and watch, as its ServiceAccount."""
    source = yaml.safe_load((BASE / "events" / "eventsource-gpuaas-gpu-nodes.yaml").read_text())
    account = source["spec"]["template"]["serviceAccountName"]
    configuration = client.Configuration()
    configuration.host = cluster.server
    configuration.ssl_ca_cert = cluster.ca_file
    configuration.api_key = {"authorization": cluster.service_account_token("gpuaas", account)}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    seen: list[dict] = []
    lock = threading.Lock()

    def sink(event: dict) -> None:
        with lock:
            seen.append(event)
    watchers = [ResourceWatcher(cluster.server, watched, sink, configuration=configuration, watch_timeout_seconds=2)
                for watched in WatchedResource.from_event_source(source)]
    for watcher in watchers:
        watcher.start()
    try:
        for watcher in watchers:
            assert watcher.ready.wait(30), f"the watch of {watcher.watched.path()} did not list"
        eventually(lambda: any(r.verb == "watch" and r.resource == "nodes" and not r.denied
                               for r in audit.requests(cluster.cluster.audit_log,
                                                       f"system:serviceaccount:gpuaas:{account}")),
                   timeout_s=30, what="the node watch in the audit log")
    finally:
        for watcher in watchers:
            watcher.stop()


def _drive_sensor_submissions(cluster: RealCluster) -> None:
    """What each Sensor's argoWorkflow trigger creates, as the Sensors' ServiceAccount (dryRun=All)."""
    for path in sorted((BASE / "events").glob("sensor-*.yaml")):
        sensor = yaml.safe_load(path.read_text())
        account = sensor["spec"]["template"]["serviceAccountName"]
        api = client.CustomObjectsApi(cluster.service_account_client("gpuaas", account))
        for trigger in sensor["spec"]["triggers"]:
            workflow = copy.deepcopy(trigger["template"]["argoWorkflow"]["source"]["resource"])
            api.create_namespaced_custom_object("argoproj.io", "v1alpha1", "gpuaas", "workflows", workflow,
                                                dry_run="All")


def test_every_grant_of_the_rendered_rbac_is_used_and_nothing_is_denied(real_cluster: RealCluster,
                                                                         tmp_path: Path) -> None:
    for path in PRODUCT:
        real_cluster.kubectl("apply", "--server-side", "--field-manager=gpuaas-tests", "-f", str(path))
    real_cluster.kubectl("apply", "--server-side", "--field-manager=gpuaas-tests", "-k", str(TENANTS))
    steps = RealSteps(real_cluster, tmp_path)
    _drive_provision_quota(steps, real_cluster)
    _drive_idle_alert(steps, real_cluster)
    _drive_node_watch(real_cluster)
    _drive_sensor_submissions(real_cluster)

    seen = real_cluster.audited()
    product_users = {g.user for g in audit.grants(_objects(BASE / "rbac.yaml"))}
    denied = sorted({(r.user, r.verb, r.rbac_resource, r.namespace, r.name) for r in seen
                     if r.user in product_users and r.denied})
    assert not denied, f"kube-apiserver denied the product's ServiceAccounts: {denied}"

    granted = audit.grants(_objects(BASE / "rbac.yaml"))
    left = audit.unused(granted, seen)
    keyed = {(_account(g.user), f"{g.group}/{g.resource}", g.verb): g for g in left}
    unexplained = sorted(g.describe() for key, g in keyed.items() if key not in NOT_EXERCISED)
    assert not unexplained, ("grants of the rendered RBAC no request of the tier needed (remove them, or "
                             "exercise them):\n  " + "\n  ".join(unexplained))
    stale = sorted(set(NOT_EXERCISED) - set(keyed))
    assert not stale, f"NOT_EXERCISED lists grants the tier did use (remove them from the table): {stale}"
