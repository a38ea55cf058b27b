"""Least privilege, proven from kube-apiserver's audit log: every grant of the product's rendered RBAC
(manifests/base/rbac.yaml, per ServiceAccount, verb and resource) is needed by some request the
product made as that ServiceAccount, nothing it asked was denied, and no grant is wider than its uses
need (a ClusterRole that Roles could replace, a grant `resourceNames` could narrow) unless the RBAC
records why (gpuaas.manifests.rbac.NARROWER_SCOPE_NOT_APPLIED).

The audit log (gpuaas.cluster.audit, `<state>/logs/audit.log`) records every request of the
ServiceAccounts in namespace gpuaas as the authorizer saw it, with the pod a bound token belongs to.
Two judges, each of the grants only the real product code exercises there:

- `test_the_real_event_path_uses_every_grant_it_has_and_is_never_denied` (the Argo cluster, `gpuaas
  cluster up --with events`, after every other Argo test of the session): the requests of the real
  EventSources, Sensors and step pods, told from a test acting as their ServiceAccount by the token
  being bound to a pod. It judges the grants of gpuaas-eventsources (Argo Events' resource informers),
  gpuaas-sensors (the Sensors' argoWorkflow trigger and the argo CLI it execs) and gpuaas-steps' Role
  (the policy read, argoexec's WorkflowTaskResults), and that no product request of the session was
  denied. It drives one admission of its own first, so the path has run in the session whatever else did.
- `test_every_grant_of_the_rendered_rbac_is_used_and_nothing_is_denied` (the control plane): the reaction
  steps' ClusterRole, through `python -m steps REACTION` as gpuaas-steps (tests.support.real_steps: the
  step image's code, as its pod runs it, on real Kueue), one workload per kind, each submitted by
  tenant team-b and released with its kind's strategy: a Job (released, resumed and released again,
  so its GPUaaSWorkersReleased Event is counted up), an elastic Job (workers scaled down), a
  RayCluster and a RayJob through KubeRay (each once plain, deactivated, and once elastic, its
  worker groups scaled down), a PyTorchJob through the training-operator (deactivated), a
  LeaderWorkerSet (its controller does not run here; its Workloads are made, and deleted at 0
  replicas, by Kueue's LWS integration, which does run: released, then resumed by name), a
  KEDA-scaled Deployment (on-admitted makes its ScaledObject, which real KEDA's webhook admits;
  idle-alerts and on-idle on an Alertmanager group naming its pod; release pauses KEDA, resume by the
  ScaledObject's name brings the replicas back; another whose pod fails and which is deleted with
  `--cascade=orphan`: on-finished removes the ScaledObject left behind), a StatefulSet (scaled to 0), a Notebook and a
  raw-deployment InferenceService (their controllers do not run here: the test makes the
  StatefulSet and Deployment they would, owned by them, as test_reactions_per_kind does);
  provision-quota for a new tenant by hand, a resize, and the capacity split in dry-run.

Neither counts the tests' own calls as use: no watcher of the project's emulation runs as an EventSource's
account, and no test lists or submits as the Sensors' account here (test_sensor_submission does, on the
other judge's cluster, for its negative tests; those accounts are not the product's).

A grant nobody used fails its judge, unless it is in NOT_EXERCISED with the reason; an entry there
that was used fails it too (the table only shrinks).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from gpuaas.cluster import audit
from gpuaas.manifests import platform
from gpuaas.manifests.rbac import NARROWER_SCOPE_NOT_APPLIED
from steps.gateways import resources as R
from steps.model.owners import JOB_OWNER_NAME
from steps.strategies import RELEASE_ANNOTATION
from tests.realstack.argo_product import PRODUCT_NAMESPACE, gpu_job, install, workload_of
from tests.support.real_cluster import RealCluster, eventually
from tests.support.real_steps import RealSteps
from tests.support.real_workloads import (
    ELASTIC,
    KINDS,
    QUEUE_LABEL,
    Kind,
    RealWorkloads,
    Submitted,
    condition,
    container,
    job,
    pod_template,
    pytorch_job,
    ray_cluster,
    ray_job,
)
from tests.support.run_attribution import expect_sensor, finished_run, resource_condition

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "manifests" / "base"
PRODUCT = [BASE / name for name in ("namespace.yaml", "rbac.yaml", "policy.yaml")]
TENANTS = ROOT / "manifests" / "examples" / "tenants"
IDLE_GROUP = ROOT / "examples" / "events" / "idle-alert-group.json"
TENANT = "team-b"
NEW_TENANT = "team-lp"
JSON = dict[str, Any]

NOT_EXERCISED: dict[tuple[str, str, str], str] = {
    # (account, "group/resource", verb) -> why no request here needs it. Each is a gap of the tier,
    # not a proof: the table must shrink, and an entry that was used fails the test.
    ("gpuaas-steps", "apps/deployments", "list"):
        "steps/model/state.py _predictor_of looks for a KServe predictor when an InferenceService is in a "
        "Workload's owner chain without its Deployment; the chain of every Workload Kueue makes for a predictor "
        "pod climbs Pod -> ReplicaSet -> Deployment -> InferenceService, so it is not reached here",
}


def _objects(path: Path) -> list[JSON]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _account(user: str) -> str:
    return user.rsplit(":", 1)[-1]


def _sized(name: str, build: Callable[..., JSON], **size: int) -> Kind:
    """A row of the kind table with smaller workloads (one GPU per pod), so the steps' quota stays small."""
    return dataclasses.replace(KINDS[name], build=lambda n, ns, q: build(n, ns, q, **size))


def _elastic(build: Callable[..., JSON]) -> Callable[..., JSON]:
    """The object with `kueue.x-k8s.io/elastic-job: "true"`: released by scaling its worker groups down."""
    def elastic(*args: str, **size: int) -> JSON:
        obj = build(*args, **size)
        obj["metadata"].setdefault("annotations", {})[ELASTIC] = "true"
        return obj
    return elastic


def _controlled_by(owner: JSON) -> JSON:
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": False}


def _gone(tenant: RealWorkloads, *made: Submitted) -> None:
    for item in made:
        tenant.delete(item)
    eventually(lambda: tenant.reserved_gpus(TENANT) == 0, timeout_s=120,
               what=f"ClusterQueue {TENANT} to hold nothing once the workloads are deleted")


def _release(steps: RealSteps, workload: str) -> None:
    released = steps.run("release-workers", namespace=TENANT, workload=workload)
    assert released.outcome == "applied", released.describe()


def _drive_job_kinds(steps: RealSteps, tenant: RealWorkloads) -> None:
    """Job (released twice: the Event's count goes up), elastic Job, RayCluster, RayJob, PyTorchJob."""
    plain = tenant.submit(_sized("Job", job, pods=1), "lp-job")
    try:
        workload = tenant.admitted(plain)["metadata"]["name"]
        _release(steps, workload)
        resumed = steps.run("resume-workers", namespace=TENANT, workload=workload)
        assert resumed.outcome == "applied", resumed.describe()
        eventually(lambda: condition(tenant.get_workload(workload) or {}, "Admitted") == "True", timeout_s=90,
                   what=f"Workload {workload} admitted again after resume-workers")
        _release(steps, workload)
    finally:
        _gone(tenant, plain)
    for name, kind in (("lp-elastic", _sized("elastic Job", lambda n, ns, q, **k: job(n, ns, q, elastic=True, **k),
                                             pods=2)),
                       ("lp-raycluster", _sized("RayCluster", ray_cluster, workers=1)),
                       ("lp-elastic-raycluster", _sized("RayCluster", _elastic(ray_cluster), workers=1)),
                       ("lp-elastic-rayjob", _sized("RayJob", _elastic(ray_job), workers=1)),
                       ("lp-rayjob", _sized("RayJob", ray_job, workers=1)),
                       ("lp-pytorch", _sized("PyTorchJob", pytorch_job, workers=1))):
        made = tenant.submit(kind, name)
        try:
            released = steps.run("release-workers", namespace=TENANT, workload=tenant.admitted(made)["metadata"]["name"])
            assert released.outcome == "applied", released.describe()
            if name.startswith("lp-elastic"):
                assert any(a in released.applied for a in ("scale-workers", "scale-worker-groups")), released.describe()
        finally:
            _gone(tenant, made)


def _drive_leader_worker_set(steps: RealSteps, tenant: RealWorkloads) -> None:
    """A LeaderWorkerSet in the tenant's queue: Kueue's LWS integration makes its Workload (the LWS
    controller itself does not run here, so no pods); release-workers scales it to 0."""
    template = pod_template("lws", 1, restart=None)
    lws = tenant.gateway.create(R.LEADER_WORKER_SET, {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "lp-lws", "labels": {QUEUE_LABEL: TENANT}},
        # what the LWS controller's defaulting webhook would add (it does not run here)
        "spec": {"replicas": 1, "startupPolicy": "LeaderCreated",
                 "rolloutStrategy": {"type": "RollingUpdate",
                                     "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}},
                 "leaderWorkerTemplate": {"size": 1, "restartPolicy": "RecreateGroupOnPodRestart",
                                          "workerTemplate": template}}}, TENANT)
    made = Submitted(dataclasses.replace(KINDS["StatefulSet"], name="LeaderWorkerSet", resource=R.LEADER_WORKER_SET),
                     TENANT, "lp-lws", lws["metadata"]["uid"])
    try:
        workload = eventually(lambda: [w for w in tenant.workloads(made) if condition(w, "Admitted") == "True"],
                              timeout_s=90, what="the LeaderWorkerSet's Workload, made and admitted by Kueue")[0]
        assert (workload["metadata"].get("annotations") or {}).get(JOB_OWNER_NAME) == "lp-lws" or any(
            ref.get("uid") == made.uid for ref in workload["metadata"].get("ownerReferences") or []), workload
        _release(steps, workload["metadata"]["name"])
        released = tenant.get(R.LEADER_WORKER_SET, "lp-lws") or {}
        assert released["spec"]["replicas"] == 0
        assert RELEASE_ANNOTATION in (released["metadata"].get("annotations") or {})
        # Kueue deletes the Workload of every group at or beyond spec.replicas: resumed by name
        eventually(lambda: not tenant.workloads(made), timeout_s=60, what="Kueue deleting the released set's Workload")
        resumed = steps.run("resume-workers", namespace=TENANT, workload="", target="LeaderWorkerSet/lp-lws")
        assert resumed.outcome == "applied", resumed.describe()
        assert (tenant.get(R.LEADER_WORKER_SET, "lp-lws") or {})["spec"]["replicas"] == 1
        eventually(lambda: [w for w in tenant.workloads(made) if condition(w, "Admitted") == "True"], timeout_s=90,
                   what="the resumed set's Workload, made again and admitted by Kueue")
    finally:
        _gone(tenant, made)


def _drive_idle_alert(steps: RealSteps, pod: str) -> None:
    """A firing GPUWorkloadIdle group naming the pod: idle-alerts resolves it, on-idle judges it."""
    text = IDLE_GROUP.read_text().replace("team-a", TENANT).replace("llm-finetune-7c9f2-0", pod)
    alerts = steps.run("idle-alerts", namespace="", workload="", event=text)
    items = json.loads(alerts.outputs.get("alerts") or "[]")
    assert [i["pod"] for i in items] == [pod], alerts.describe()
    item = items[0]
    judged = steps.run("on-idle", namespace=item["namespace"], workload=item["workload"], pod=item["pod"],
                       alert=json.dumps(item["alert"]), event="")
    assert judged.outcome in ("no-op", "skipped-by-policy", "applied"), judged.describe()


def _drive_orphaned_scaled_object(steps: RealSteps, tenant: RealWorkloads) -> None:
    """on-finished removes the ScaledObject gpuaas made for a Deployment deleted with `--cascade=orphan`
    (the garbage collector then only drops its ownerReference). The Workload of a Deployment's pod
    finishes when the pod fails: its phase is set to Failed as a node evicting it would (KWOK stands in
    for the kubelet)."""
    server = tenant.submit(KINDS["Deployment"], "lp-orphan")
    try:
        workload = tenant.admitted(server)["metadata"]["name"]
        prepared = steps.run("on-admitted", namespace=TENANT, workload=workload, event="")
        assert "create-scaled-object" in prepared.applied, prepared.describe()
        scaled_object = next(a["target"]["name"] for a in prepared.actions if a["action"] == "create-scaled-object")
        pod = eventually(lambda: [p for p in tenant.live_pods(server) if p.status.phase == "Running"],
                         timeout_s=90, what="the Deployment's pod running")[0]
        tenant.core.patch_namespaced_pod_status(pod.metadata.name, TENANT, {"status": {
            "phase": "Failed", "reason": "Evicted", "message": "evicted by the test, as a node under pressure would"}})
        eventually(lambda: condition(tenant.get_workload(workload) or {}, "Finished") == "True", timeout_s=90,
                   what=f"Workload {workload} Finished once its pod failed")
        tenant.cluster.kubectl("delete", "deployment", "lp-orphan", "-n", TENANT, "--cascade=orphan")
        eventually(lambda: not ((tenant.get(R.SCALED_OBJECT, scaled_object) or {"metadata": {"ownerReferences": [1]}})
                                ["metadata"].get("ownerReferences")), timeout_s=60,
                   what=f"ScaledObject {scaled_object} orphaned by the garbage collector")
        done = steps.run("on-finished", namespace=TENANT, workload=workload, event="")
        assert "delete-scaled-object" in done.applied, done.describe()
        assert tenant.get(R.SCALED_OBJECT, scaled_object) is None
    finally:
        tenant.cluster.kubectl("delete", "deployment,replicaset,pod", "-l", "app=lp-orphan", "-n", TENANT,
                               "--ignore-not-found", "--wait=false")
        _gone(tenant)


def _drive_serving_kinds(steps: RealSteps, tenant: RealWorkloads) -> None:
    """A KEDA-scaled Deployment, a StatefulSet, a Notebook and a raw-deployment InferenceService."""
    server = tenant.submit(KINDS["Deployment"], "lp-server")
    try:
        workload = tenant.admitted(server)["metadata"]["name"]
        prepared = steps.run("on-admitted", namespace=TENANT, workload=workload, event="")
        assert prepared.outcome == "applied" and "create-scaled-object" in prepared.applied, prepared.describe()
        pod = eventually(lambda: [p for p in tenant.live_pods(server) if p.status.phase == "Running"],
                         timeout_s=90, what="the Deployment's pod running")[0]
        _drive_idle_alert(steps, pod.metadata.name)
        released = steps.run("release-workers", namespace=TENANT, workload=workload)
        assert released.outcome == "applied" and "pause-keda" in released.applied, released.describe()
        eventually(lambda: not tenant.live_pods(server), timeout_s=90, what="the server's pods gone after pause-keda")
        scaled_object = next(a["target"]["name"] for a in prepared.actions if a["action"] == "create-scaled-object")
        # by the ScaledObject's name, as an operator may (the kind test resumes by the Deployment's)
        resumed = steps.run("resume-workers", namespace=TENANT, workload="", target=f"ScaledObject/{scaled_object}")
        assert resumed.outcome == "applied", resumed.describe()
    finally:
        _gone(tenant, server)

    _drive_orphaned_scaled_object(steps, tenant)

    stateful = tenant.submit(KINDS["StatefulSet"], "lp-stateful")
    try:
        _release(steps, tenant.admitted(stateful)["metadata"]["name"])
    finally:
        _gone(tenant, stateful)

    notebook = tenant.gateway.create(R.NOTEBOOK, {
        "apiVersion": "kubeflow.org/v1", "kind": "Notebook", "metadata": {"name": "lp-notebook"},
        "spec": {"template": {"spec": {"containers": [container("lp-notebook", 0)]}}}}, TENANT)
    owned = KINDS["StatefulSet"].build("lp-notebook", TENANT, TENANT)
    owned["metadata"]["ownerReferences"] = [_controlled_by(notebook)]
    created = tenant.gateway.create(R.STATEFUL_SET, owned, TENANT)
    notebook_set = Submitted(KINDS["StatefulSet"], TENANT, "lp-notebook", created["metadata"]["uid"])
    notebook_made = Submitted(dataclasses.replace(KINDS["StatefulSet"], name="Notebook", resource=R.NOTEBOOK),
                              TENANT, "lp-notebook", notebook["metadata"]["uid"])
    try:
        workload = tenant.admitted(notebook_set)["metadata"]["name"]
        released = steps.run("release-workers", namespace=TENANT, workload=workload)
        assert released.outcome == "applied" and "stop-notebook" in released.applied, released.describe()
    finally:
        _gone(tenant, notebook_made, notebook_set)

    isvc = tenant.gateway.create(R.INFERENCE_SERVICE, {
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "lp-isvc", "annotations": {"serving.kserve.io/deploymentMode": "RawDeployment"}},
        "spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"}, "storageUri": "pvc://models/x"}}}},
        TENANT)
    predictor = KINDS["Deployment"].build("lp-isvc-predictor", TENANT, TENANT)
    predictor["metadata"]["ownerReferences"] = [_controlled_by(isvc)]
    created = tenant.gateway.create(R.DEPLOYMENT, predictor, TENANT)
    serving = Submitted(KINDS["Deployment"], TENANT, "lp-isvc-predictor", created["metadata"]["uid"])
    isvc_made = Submitted(dataclasses.replace(KINDS["Deployment"], name="InferenceService",
                                              resource=R.INFERENCE_SERVICE), TENANT, "lp-isvc", isvc["metadata"]["uid"])
    try:
        workload = tenant.admitted(serving)["metadata"]["name"]
        prepared = steps.run("on-admitted", namespace=TENANT, workload=workload, event="", dry_run="true")
        assert prepared.outcome in ("applied", "no-op", "skipped-by-policy"), prepared.describe()
        skipped = steps.run("release-workers", namespace=TENANT, workload=workload)
        assert skipped.outcome == "skipped-by-policy", skipped.describe()
    finally:
        _gone(tenant, isvc_made, serving)


def _drive_provision_quota(steps: RealSteps, cluster: RealCluster) -> None:
    cluster.kubectl("apply", "--server-side", "--field-manager=gpuaas-tests", "-f", "-", input_text=json.dumps({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": NEW_TENANT, "labels": {"gpuaas.io/tenant": NEW_TENANT}}}))
    made = steps.run("provision-quota", namespace=NEW_TENANT, workload="", tenant=NEW_TENANT, flavor="gpu-a100",
                     gpus="1", mode="hand")
    assert made.outcome == "applied", made.describe()
    resized = steps.run("provision-quota", namespace=NEW_TENANT, workload="", tenant=NEW_TENANT, flavor="gpu-a100",
                        gpus="2", mode="hand")
    assert resized.outcome == "applied", resized.describe()
    split = steps.run("provision-quota", mode="capacity", dry_run="true")
    assert split.outcome != "failed", split.describe()


def _drop_new_tenant(cluster: RealCluster) -> None:
    """The tenant provision-quota made takes no part in the other tests' cohort."""
    cluster.kubectl("delete", "namespace", NEW_TENANT, "--ignore-not-found", "--wait=false")
    cluster.kubectl("delete", "clusterqueue", NEW_TENANT, "--ignore-not-found")


def _judged_on_the_event_path(grant: audit.Grant) -> bool:
    """The grants only the real event path exercises: the EventSources' and the Sensors' (their programs are
    Argo Events' and the argo CLI, which run only on the Argo cluster), and the steps' Role in gpuaas (the
    policy read, which both judges see, and argoexec's WorkflowTaskResults, which only step pods write)."""
    return _account(grant.user) in (platform.EVENT_SOURCES_ACCOUNT, platform.SENSORS_ACCOUNT) or (
        _account(grant.user) == platform.STEPS_ACCOUNT and grant.namespace == PRODUCT_NAMESPACE)


def _kubectl_resource(grant: audit.Grant) -> str:
    return f"{grant.resource}.{grant.group}" if grant.group else grant.resource


def _scope_problems(granted: list[audit.Grant], seen: list[audit.Request]) -> tuple[list[str], list[str]]:
    """(narrowings neither applied nor explained, explanations no use calls for) over the grants used in `seen`.
    An explanation is keyed by (account, resource, kind) and covers every verb of that resource; it is stale when
    a grant of that resource that could take that kind of narrowing (a ClusterRole's, for `namespace`; a nameable
    verb's without resourceNames, for `names`) was used and not one such grant's uses allowed it."""
    unexplained, found, weighed = [], set(), set()
    for grant in granted:
        used = audit.uses(grant, seen)
        if not used:
            continue
        account, resource = _account(grant.user), _kubectl_resource(grant)
        if grant.namespace is None:
            weighed.add((account, resource, "namespace"))
        if grant.verb in audit.NAMEABLE_VERBS and not grant.resource_names:
            weighed.add((account, resource, "names"))
        for narrowing in audit.narrowings(grant, used):
            key = (account, resource, narrowing.kind)
            found.add(key)
            if key not in NARROWER_SCOPE_NOT_APPLIED:
                unexplained.append(f"{grant.describe()}: {narrowing.detail} would do for its {len(used)} use(s) "
                                   f"(e.g. {used[0].verb} {used[0].uri})")
    stale = [f"{key}: used, and no use of it allowed that narrowing" for key in NARROWER_SCOPE_NOT_APPLIED
             if key in weighed and key not in found]
    return unexplained, sorted(stale)


def _assert_scope(granted: list[audit.Grant], seen: list[audit.Request]) -> None:
    unexplained, stale = _scope_problems(granted, seen)
    assert not unexplained, ("grants wider than every use needs: narrow them in gpuaas/manifests/rbac.py (and re-render) "
                             "or record why in NARROWER_SCOPE_NOT_APPLIED:\n  " + "\n  ".join(unexplained))
    assert not stale, ("NARROWER_SCOPE_NOT_APPLIED explains narrowings no use allows (remove them):\n  "
                       + "\n  ".join(stale))


def test_every_grant_of_the_rendered_rbac_is_used_and_nothing_is_denied(real_cluster: RealCluster,
                                                                         tmp_path: Path) -> None:
    log = real_cluster.cluster.audit_log
    start = sum(1 for _ in audit.requests(log))
    for path in PRODUCT:
        real_cluster.kubectl("apply", "--server-side", "--field-manager=gpuaas-tests", "-f", str(path))
    real_cluster.kubectl("apply", "--server-side", "--field-manager=gpuaas-tests", "-k", str(TENANTS))
    steps = RealSteps(real_cluster, tmp_path / "steps")
    tenant = RealWorkloads(real_cluster, TENANT)
    try:
        _drive_provision_quota(steps, real_cluster)
    finally:
        _drop_new_tenant(real_cluster)
    _drive_job_kinds(steps, tenant)
    _drive_leader_worker_set(steps, tenant)
    _drive_serving_kinds(steps, tenant)

    rendered = _objects(BASE / "rbac.yaml")
    everything = audit.grants(rendered)
    product_users = {g.user for g in everything}
    seen = list(audit.requests(log))[start:]
    denied = sorted({(r.user, r.verb, r.rbac_resource, r.namespace, r.name) for r in seen
                     if r.user in product_users and r.denied})
    assert not denied, f"kube-apiserver denied the product's ServiceAccounts: {denied}"
    # the steps' ClusterRole (and the policy read), by the steps' own code; the event path's grants are the
    # Argo cluster's to judge (test_the_real_event_path_uses_every_grant_it_has_and_is_never_denied)
    granted = [g for g in everything if not _judged_on_the_event_path(g) or g.resource == "configmaps"]
    _assert_scope(granted, seen)

    left = audit.unused(granted, seen)
    keyed = {(_account(g.user), f"{g.group}/{g.resource}", g.verb): g for g in left}
    unexplained = sorted(g.describe() for key, g in keyed.items() if key not in NOT_EXERCISED)
    assert not unexplained, ("grants of the rendered RBAC no request needed (remove them, or drive the path "
                             "that needs them):\n  " + "\n  ".join(unexplained))
    stale = sorted(set(NOT_EXERCISED) - set(keyed))
    assert not stale, f"NOT_EXERCISED lists grants that were used (remove them from the table): {stale}"


EVENT_PATH_TENANT = "team-a"


def _own_admission(cluster: RealCluster) -> str:
    """A batch Job of the example tenant, admitted by Kueue; the real EventSource and Sensor submit
    gpuaas-on-admitted for it and its step pod runs on the real node: the whole event path once, in this
    session. Returns the run's name once it Succeeded."""
    batch, custom = client.BatchV1Api(cluster.admin), client.CustomObjectsApi(cluster.admin)
    job_object = batch.create_namespaced_job(EVENT_PATH_TENANT, gpu_job(EVENT_PATH_TENANT, generate_name="lp-path-"))
    try:
        workload = eventually(lambda: (w := workload_of(custom, EVENT_PATH_TENANT, job_object.metadata.uid)) and any(
            c["type"] == "Admitted" and c["status"] == "True" for c in (w.get("status") or {}).get("conditions") or [])
            and w, timeout_s=120, what=f"the Workload of Job {job_object.metadata.name} admitted")["metadata"]["name"]

        run = eventually(lambda: finished_run(custom, "on-admitted", workload), timeout_s=300,
                         what=f"gpuaas-on-admitted for {workload} finished")
        assert run["status"]["phase"] == "Succeeded", run["status"].get("message")
        problems = expect_sensor(run, "gpuaas-on-admitted", resource_condition("Admitted"))
        assert not problems, problems
        return run["metadata"]["name"]
    finally:
        batch.delete_namespaced_job(job_object.metadata.name, EVENT_PATH_TENANT, propagation_policy="Background")


def test_the_real_event_path_uses_every_grant_it_has_and_is_never_denied(argo_cluster: RealCluster) -> None:
    """Runs after every other Argo test of the session (conftest orders it so): their requests count too."""
    cluster = install(argo_cluster)
    run = _own_admission(cluster)
    log = cluster.cluster.audit_log
    every = list(audit.requests(log))
    granted = audit.grants(_objects(BASE / "rbac.yaml"))
    product_users = {g.user for g in granted}

    # Nothing the product asked in this session was denied, pod or not.
    denied = sorted({(r.user, r.verb, r.rbac_resource, r.namespace, r.name, r.pod, r.user_agent)
                     for r in every[cluster.audit_start:] if r.user in product_users and r.denied})
    assert not denied, f"kube-apiserver denied the product's ServiceAccounts on the Argo cluster: {denied}"

    # Use: only requests made with a token bound to a pod (the EventSources', Sensors' and step pods' own), at
    # any time of this cluster (a reused cluster's EventSources listed when their pods started, maybe before
    # this session; a fresh one's all fall in it).
    real = [r for r in every if r.from_pod and r.user in product_users]
    judged = [g for g in granted if _judged_on_the_event_path(g)]
    evidence = []
    for grant in judged:
        used = audit.uses(grant, real)
        agents = sorted({r.user_agent.split(" ")[0] for r in used})
        pods = sorted({r.pod.rsplit("-", 1)[0] for r in used})
        evidence.append(f"{len(used):5d}  {grant.describe()}  by {agents} in pods {pods[:4]}")
    print(f"\nthe event path's grants and their uses on the Argo cluster (this module's run {run}):\n"
          + "\n".join(evidence))
    unused = [g.describe() for g in judged if not audit.uses(g, real)]
    assert not unused, ("grants of the event path no real component's request needed (remove them, or find the "
                        "path that needs them):\n  " + "\n  ".join(unused))
    # Scope, for every grant a pod used here (the steps' ClusterRole included: the step pods' own requests).
    _assert_scope(granted, real)
