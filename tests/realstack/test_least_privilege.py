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
  EventSources, Sensors, step pods and catch-up sweep pods, told from a test acting as their ServiceAccount
  by the token being bound to a pod. It judges the grants of gpuaas-eventsources (Argo Events' resource
  informers), gpuaas-sensors (the Sensors' argoWorkflow trigger and the argo CLI it execs), gpuaas-steps' Role
  (the policy read, argoexec's WorkflowTaskResults) and gpuaas-sweep's WorkflowTaskResults (argoexec in the
  CronWorkflow's pods), and that no product request of the session was denied. Use is counted from the test's
  own start, never from the log's beginning (a reused cluster's log holds earlier sessions' requests): the test
  restarts the resource EventSources' pods (their informers list and watch again; the GPU nodes' ADDs make
  Sensor gpuaas-provision-quota submit), then a model server of its own is admitted (gpuaas-on-admitted), an
  idle alert for its pod is posted to the webhook EventSource (gpuaas-on-idle) and its pod fails
  (gpuaas-on-finished), each run attributed to its Sensor and event; and it waits for a sweep pass made since.
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
  provision-quota for a new tenant by hand, a resize, and the capacity split in dry-run; and the catch-up
  sweep's ClusterRole and Role (but its WorkflowTaskResults) through `python -m steps sweep` as gpuaas-sweep:
  a Job, a RayCluster, a RayJob and a PyTorchJob admitted, the Job finished, two passes.

Neither counts the tests' own calls as use: no watcher of the project's emulation runs as an EventSource's
account, and no test lists or submits as the Sensors' account here (test_sensor_submission does, on the
other judge's cluster, for its negative tests; those accounts are not the product's).

A grant nobody used fails its judge, unless it is in NOT_EXERCISED with the reason; an entry there
that was used fails it too (the table only shrinks). A used grant with `resourceNames` has each name judged
alone (gpuaas.cluster.audit.unused_names): a name no request named fails, unless NAMES_NOT_EXERCISED says why.
Every step the control-plane judge runs must end with the exact outcome and planned actions its kind and state
call for (as test_reactions_per_kind requires), so a wrong decision cannot pass as "some use".
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime
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
from tests.realstack.argo_product import IDLE_LISTENING, PRODUCT_NAMESPACE, install
from tests.support.real_cluster import RealCluster, audited_since, eventually
from tests.support.real_steps import RealSteps, StepRun
from tests.support.real_workloads import (
    ELASTIC,
    KINDS,
    QUEUE_LABEL,
    Kind,
    RealWorkloads,
    Submitted,
    condition,
    container,
    deployment,
    job,
    pod_template,
    pytorch_job,
    ray_cluster,
    ray_job,
)
from tests.support.run_attribution import (
    FINISHED,
    EventCheck,
    alert_group,
    expect_sensor,
    parameters,
    resource_condition,
)

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "manifests" / "base"
PRODUCT = [BASE / name for name in ("namespace.yaml", "rbac.yaml", "policy.yaml")]
TENANTS = ROOT / "manifests" / "examples" / "tenants"
IDLE_GROUP = ROOT / "examples" / "events" / "idle-alert-group.json"
TENANT = "team-b"
NEW_TENANT = "team-lp"
JSON = dict[str, Any]

NOT_EXERCISED: dict[tuple[str, str, str], str] = {
    # (account, "group/resource", verb) -> why no request here needs it. Each would be a gap of the tier, not a
    # proof: the table only shrinks, and an entry that was used fails the test. Empty: the two it held went with
    # their grants. gpuaas-steps' `list deployments` (steps/model/state.py _predictor_of reads the predictor by
    # the names KServe gives it); gpuaas-sweep's `get localqueues` (steps/reactions/sweep.py delivers a job
    # kind's Workload without an admission to a step: NO_ADMISSION).
}


MAYBE_EXERCISED: dict[tuple[str, str, str], str] = {
    # (account, "group/resource", verb) -> why a drive here may or may not need it: used or unused, both pass.
    ("gpuaas-sweep", "kueue.x-k8s.io/workloads", "get"):
        "steps/reactions/sweep.py re-reads a Workload when its conditional marker write conflicts (Kueue changed "
        "the Workload between the pass's list and its write: at a real stack's pace, sometimes); observe_workload's "
        "read is served from the pass's primed cache (CachedReads.prime). Seen used once and unused in other runs",
}


NAMES_NOT_EXERCISED: dict[tuple[str, str, str, str], str] = {
    # (account, "group/resource", verb, name) -> why no request here names it, for a grant with `resourceNames`
    # that was used by another of its names (gpuaas.cluster.audit.unused_names). Empty: every name of every
    # such grant is named by a request of the judge that judges it. An entry whose name was named fails.
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


def _planned(done: StepRun) -> tuple[str, ...]:
    return tuple(a["action"] for a in done.plan.get("actions") or [])


def _expect(done: StepRun, outcome: str, *actions: str) -> StepRun:
    """The step's outcome and the names of the actions it planned are exactly these (as test_reactions_per_kind
    requires of each kind): a step that wrote where it should plan nothing, or planned something else, fails."""
    assert (done.outcome, _planned(done)) == (outcome, actions), (
        f"{done.reaction}: expected outcome {outcome} planning {list(actions)}, found {done.outcome} planning "
        f"{list(_planned(done))}\n{done.describe()}")
    return done


CLAIM, HAND = "claim", "mark-handled"
"""What a hand submission (event "") plans around its effects on an unmarked transition (steps.delivery): the
claim, a conditional write of the marker before the first effect, and the marker written last. Both are
bookkeeping, not effects; a plan with nothing to write plans the marker alone."""


def _release(steps: RealSteps, workload: str, *actions: str) -> StepRun:
    return _expect(steps.run("release-workers", namespace=TENANT, workload=workload), "applied", *actions)


def _drive_job_kinds(steps: RealSteps, tenant: RealWorkloads) -> None:
    """Job (released twice: the Event's count goes up), elastic Job, RayCluster, RayJob, PyTorchJob."""
    plain = tenant.submit(_sized("Job", job, pods=1), "lp-job")
    try:
        workload = tenant.admitted(plain)["metadata"]["name"]
        _release(steps, workload, "deactivate-workload")
        _expect(steps.run("resume-workers", namespace=TENANT, workload=workload), "applied", "reactivate-workload")
        eventually(lambda: condition(tenant.get_workload(workload) or {}, "Admitted") == "True", timeout_s=90,
                   what=f"Workload {workload} admitted again after resume-workers")
        _release(steps, workload, "deactivate-workload")
    finally:
        _gone(tenant, plain)
    # (name, kind, what release-workers plans: a Workload deactivated, or an elastic job's workers scaled down and
    # the release record mirrored on its Workload; steps.strategies.release_actions)
    deactivated, scaled_groups = ("deactivate-workload",), ("scale-worker-groups", "record-release-on-workload")
    for name, kind, actions in (
            ("lp-elastic", _sized("elastic Job", lambda n, ns, q, **k: job(n, ns, q, elastic=True, **k), pods=2),
             ("scale-workers", "record-release-on-workload")),
            ("lp-raycluster", _sized("RayCluster", ray_cluster, workers=1), deactivated),
            ("lp-elastic-raycluster", _sized("RayCluster", _elastic(ray_cluster), workers=1), scaled_groups),
            ("lp-elastic-rayjob", _sized("RayJob", _elastic(ray_job), workers=1), scaled_groups),
            ("lp-rayjob", _sized("RayJob", ray_job, workers=1), deactivated),
            ("lp-pytorch", _sized("PyTorchJob", pytorch_job, workers=1), deactivated)):
        made = tenant.submit(kind, name)
        try:
            _release(steps, tenant.admitted(made)["metadata"]["name"], *actions)
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
        # its Workloads go at 0 replicas (steps.strategies.WORKLOADS_GONE_AT_ZERO): no record mirrored on one
        _release(steps, workload["metadata"]["name"], "scale-to-zero")
        released = tenant.get(R.LEADER_WORKER_SET, "lp-lws") or {}
        assert released["spec"]["replicas"] == 0
        assert RELEASE_ANNOTATION in (released["metadata"].get("annotations") or {})
        # Kueue deletes the Workload of every group at or beyond spec.replicas: resumed by name
        eventually(lambda: not tenant.workloads(made), timeout_s=60, what="Kueue deleting the released set's Workload")
        _expect(steps.run("resume-workers", namespace=TENANT, workload="", target="LeaderWorkerSet/lp-lws"), "applied",
                "restore-replicas")
        assert (tenant.get(R.LEADER_WORKER_SET, "lp-lws") or {})["spec"]["replicas"] == 1
        eventually(lambda: [w for w in tenant.workloads(made) if condition(w, "Admitted") == "True"], timeout_s=90,
                   what="the resumed set's Workload, made again and admitted by Kueue")
    finally:
        _gone(tenant, made)


def rendered_min_runtime_s(tenant: str) -> float:
    """The idle minimum runtime the rendered policy (manifests/base/policy.yaml, the ConfigMap this test applies)
    gives `tenant`, read from the YAML here rather than through steps.policy (whose reading is what is judged).
    The rendered policy writes it as `<n>h`; another spelling fails here, to be read by hand."""
    configmap = next(o for o in _objects(BASE / "policy.yaml") if o.get("kind") == "ConfigMap")
    document = yaml.safe_load(configmap["data"]["policy.yaml"])
    override = ((document.get("tenants") or {}).get(tenant) or {}).get("idle") or {}
    written = str(override.get("minRuntime", document["idle"]["minRuntime"]))
    assert written.endswith("h") and written[:-1].isdigit(), f"expected minRuntime as <n>h, found {written!r}"
    return int(written[:-1]) * 3600.0


def _drive_idle_alert(steps: RealSteps, pod: str, workload: str) -> None:
    """A firing GPUWorkloadIdle group naming the pod: idle-alerts resolves it, on-idle judges it. The tenant
    (team-b) has the rendered policy's defaults, minimum runtime 1h: a server admitted a minute ago is judged too
    young (steps/reactions/on_idle.py `judge`, gate too-young), skipped by policy with nothing planned, whatever
    its GPUs did; a step that released it, or judged it on its metrics (no-op), fails here."""
    text = IDLE_GROUP.read_text().replace("team-a", TENANT).replace("llm-finetune-7c9f2-0", pod)
    alerts = steps.run("idle-alerts", namespace="", workload="", event=text)
    items = json.loads(alerts.outputs.get("alerts") or "[]")
    assert [i["pod"] for i in items] == [pod], alerts.describe()
    item = items[0]
    judged = _expect(steps.run("on-idle", namespace=item["namespace"], workload=item["workload"], pod=item["pod"],
                               alert=json.dumps(item["alert"]), event=""), "skipped-by-policy")
    minimum = rendered_min_runtime_s(TENANT)
    runtime = judged.data["observed"]["idle"]["runtimeSeconds"]
    assert minimum == 3600 and runtime < minimum, (minimum, judged.describe())
    too_young = (f"workload {TENANT}/{workload} has run {runtime:.0f}s since admission, less than the minimum "
                 f"runtime {minimum:g}s")
    assert judged.reasons == [too_young], judged.describe()


def _drive_orphaned_scaled_object(steps: RealSteps, tenant: RealWorkloads) -> None:
    """on-finished removes the ScaledObject gpuaas made for a Deployment deleted with `--cascade=orphan`
    (the garbage collector then only drops its ownerReference). The Workload of a Deployment's pod
    finishes when the pod fails: its phase is set to Failed as a node evicting it would (KWOK stands in
    for the kubelet)."""
    server = tenant.submit(KINDS["Deployment"], "lp-orphan")
    try:
        workload = tenant.admitted(server)["metadata"]["name"]
        prepared = _expect(steps.run("on-admitted", namespace=TENANT, workload=workload, event=""), "applied",
                           CLAIM, "create-scaled-object", HAND)
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
        _expect(steps.run("on-finished", namespace=TENANT, workload=workload, event=""), "applied",
                CLAIM, "delete-scaled-object", HAND)
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
        # a hand submission (event ""): its claim, the ScaledObject, then the admission's marker (steps.delivery)
        prepared = _expect(steps.run("on-admitted", namespace=TENANT, workload=workload, event=""), "applied",
                           CLAIM, "create-scaled-object", HAND)
        pod = eventually(lambda: [p for p in tenant.live_pods(server) if p.status.phase == "Running"],
                         timeout_s=90, what="the Deployment's pod running")[0]
        _drive_idle_alert(steps, pod.metadata.name, workload)
        # KEDA scales it: the ScaledObject paused at 0, the record mirrored on the Workload
        _release(steps, workload, "pause-keda", "record-release-on-workload")
        eventually(lambda: not tenant.live_pods(server), timeout_s=90, what="the server's pods gone after pause-keda")
        scaled_object = next(a["target"]["name"] for a in prepared.actions if a["action"] == "create-scaled-object")
        # by the ScaledObject's name, as an operator may (the kind test resumes by the Deployment's): the pause
        # removed, the Deployment back at its recorded size (KEDA cannot from 0); its Workload went with its pod
        _expect(steps.run("resume-workers", namespace=TENANT, workload="", target=f"ScaledObject/{scaled_object}"),
                "applied", "unpause-keda", "restore-replicas")
    finally:
        _gone(tenant, server)

    _drive_orphaned_scaled_object(steps, tenant)

    stateful = tenant.submit(KINDS["StatefulSet"], "lp-stateful")
    try:
        _release(steps, tenant.admitted(stateful)["metadata"]["name"], "scale-to-zero", "record-release-on-workload")
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
        _release(steps, workload, "stop-notebook", "record-release-on-workload")
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
        # KServe's predictor Deployment is KEDA's target (steps/reactions/on_admitted.py plan_transition): its
        # ScaledObject planned, in dry-run (outcome applied: it would write; the dry-run parameter writes no marker)
        prepared = _expect(steps.run("on-admitted", namespace=TENANT, workload=workload, event="", dry_run="true"),
                           "applied", "create-scaled-object")
        assert [a.get("result") for a in prepared.actions] == ["dry-run"], prepared.describe()
        # never released: its strategy is none (an InferenceService without KEDA's pause)
        _expect(steps.run("release-workers", namespace=TENANT, workload=workload), "skipped-by-policy")
    finally:
        _gone(tenant, isvc_made, serving)


def _drive_provision_quota(steps: RealSteps, cluster: RealCluster) -> None:
    cluster.kubectl("apply", "--server-side", "--field-manager=gpuaas-tests", "-f", "-", input_text=json.dumps({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": NEW_TENANT, "labels": {"gpuaas.io/tenant": NEW_TENANT}}}))
    _expect(steps.run("provision-quota", namespace=NEW_TENANT, workload="", tenant=NEW_TENANT, flavor="gpu-a100",
                      gpus="1", mode="hand"), "applied", "create-cluster-queue", "create-local-queue")
    resized = _expect(steps.run("provision-quota", namespace=NEW_TENANT, workload="", tenant=NEW_TENANT,
                                flavor="gpu-a100", gpus="2", mode="hand"), "applied", "patch-cluster-queue")
    assert [(a["before"], a["after"]) for a in resized.plan["actions"]] == [({"gpu-a100": 1}, {"gpu-a100": 2})], \
        resized.describe()
    _expect_capacity_split(steps.run("provision-quota", mode="capacity", dry_run="true"))


CAPACITY_SPLIT = {"team-a": 6, "team-b": 3, NEW_TENANT: 3}
"""What the capacity split gives the cohort's three ClusterQueues (steps/capacity.py), worked out by hand: the
stack's 12 A100s (3 KWOK GPU nodes of 4), nothing in use, team-a's guarantee of 4 below its share, weights
team-a 2 (manifests/base/policy.yaml), team-b and team-lp 1 (the defaults): 12 x 2/4, 12 x 1/4, 12 x 1/4."""


def _expect_capacity_split(split: StepRun) -> None:
    """The capacity split in dry-run, on the state the test made: each ClusterQueue whose quota differs from its
    share (team-a 4, team-b 4, team-lp 2 as provisioned) planned a patch to its share, none written; outcome
    applied (a dry-run counts what it would write). The state is checked first, so a cluster another test left
    different fails with what it found, not with an unexplained plan."""
    observed = split.data["observed"]
    state = (observed.get("clusterQueues"), sorted(observed.get("flavors", {})),
             observed.get("flavors", {}).get("gpu-a100", {}).get("capacity"))
    assert state == (sorted(CAPACITY_SPLIT), ["gpu-a100"], 12), (
        f"expected cohort gpuaas to hold {sorted(CAPACITY_SPLIT)} on 12 A100s, the only flavor (this test's tenants "
        f"on the stack's KWOK nodes), found {state}: a test before this one left ClusterQueues, flavors or nodes\n"
        f"{split.describe()}")
    _expect(split, "applied", *["patch-cluster-queue"] * 3)
    planned = {a["target"]["name"]: (a["before"], a["after"]) for a in split.plan["actions"]}
    assert planned == {"team-a": ({"gpu-a100": 4}, {"gpu-a100": 6}), "team-b": ({"gpu-a100": 4}, {"gpu-a100": 3}),
                       NEW_TENANT: ({"gpu-a100": 2}, {"gpu-a100": 3})}, split.describe()
    assert {name: after["gpu-a100"] for name, (_, after) in planned.items()} == CAPACITY_SPLIT
    assert [a.get("result") for a in split.actions] == ["dry-run"] * 3, split.describe()


def _drop_new_tenant(cluster: RealCluster) -> None:
    """The tenant provision-quota made takes no part in the other tests' cohort."""
    cluster.kubectl("delete", "namespace", NEW_TENANT, "--ignore-not-found", "--wait=false")
    cluster.kubectl("delete", "clusterqueue", NEW_TENANT, "--ignore-not-found")


SWEPT = re.compile(r"^(on-admitted|on-finished) for (\S+)/(\S+) \(")
"""steps/reactions/sweep.py: the reason of each run a pass plans names the reaction and the Workload (a pass
sweeps every namespace: other tests' Workloads on the shared cluster are in it too)."""


def _swept(done: StepRun, workloads: list[str]) -> list[tuple[str, str, str]]:
    """(action, reaction, Workload) of each run the pass planned for one of `workloads` of TENANT, sorted."""
    found = []
    for action in done.plan.get("actions") or []:
        matched = SWEPT.match(action.get("reason", ""))
        assert matched, f"expected a sweep run's reason to name its reaction and Workload, found {action}"
        if matched.group(2) == TENANT and matched.group(3) in workloads:
            found.append((action["action"], matched.group(1), matched.group(3)))
    return sorted(found)


def _drive_sweep(steps: RealSteps, tenant: RealWorkloads, cluster: RealCluster) -> None:
    """The catch-up sweep as gpuaas-sweep: a Job, a RayCluster, a RayJob and a PyTorchJob admitted with
    no marker (no Sensor runs here); the pass plans each with its reaction's observe and plan, records it
    (creates the run, marks the Workload); the Job then finishes (its finish recorded too). A second pass
    after the Job's marker is removed finds its run by name (get) instead of creating a second."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=gpuaas-tests", "-f",
                    str(BASE / "workflows" / "gpuaas-on-admitted.yaml"))
    made = [tenant.submit(_sized("Job", job, pods=1), "lp-sweep-job"),
            tenant.submit(_sized("RayCluster", ray_cluster, workers=1), "lp-sweep-ray"),
            tenant.submit(_sized("RayJob", ray_job, workers=1), "lp-sweep-rayjob"),
            tenant.submit(_sized("PyTorchJob", pytorch_job, workers=1), "lp-sweep-pytorch")]
    try:
        workloads = [tenant.admitted(m)["metadata"]["name"] for m in made]
        # admitted is not running: a pod still Pending (a loaded machine) is not told to finish, and never does
        eventually(lambda: tenant.finish_pods(made[0]) > 0, timeout_s=90, what="the sweep Job's pod Running, told "
                                                                                 "to finish")
        eventually(lambda: condition(tenant.get_workload(workloads[0]) or {}, "Finished") == "True", timeout_s=120,
                   what=f"Workload {workloads[0]} finished")
        # Every transition of these job kinds writes nothing (their reactions plan no action), so the pass
        # records each as a run without a pod: the four admissions and the Job's finish, nothing delivered.
        # Other Workloads on a shared cluster may be swept too; these five must be, exactly so.
        first = steps.run("sweep", grace="0s")
        assert first.outcome == "applied", first.describe()
        assert _swept(first, workloads) == sorted(
            [("record-run", "on-admitted", w) for w in workloads] + [("record-run", "on-finished", workloads[0])]), \
            first.describe()
        custom = client.CustomObjectsApi(cluster.admin)
        # No workflow-controller runs here: the recorded run (its one step skipped) is labelled completed by the
        # test as the controller would label it, or every later pass would count it in flight and skip it.
        job_run = next(a["target"]["name"] for a in first.plan["actions"]
                       if SWEPT.match(a["reason"]).groups() == ("on-admitted", TENANT, workloads[0]))
        custom.patch_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows", job_run,
                                              {"metadata": {"labels": {"workflows.argoproj.io/completed": "true"}}})
        custom.patch_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", TENANT, "workloads", workloads[0],
                                              {"metadata": {"annotations": {"gpuaas.io/handled-on-admitted": None}}})
        # the Job's admission unmarked again (a pass that died between its run and its marker): the next pass's
        # create of the same name conflicts, it finds the run by name (get) and only marks it: nothing made
        again = steps.run("sweep", grace="0s")
        assert again.outcome == "no-op", again.describe()
        assert again.record["data"]["observed"]["counts"].get("run existed (an earlier pass)") == 1, again.describe()
        assert _swept(again, workloads) == [("record-run", "on-admitted", workloads[0])], again.describe()
        assert [a["after"] for a in again.actions if a["target"]["name"] == job_run] == [
            {"run": custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows",
                                                        job_run)["metadata"]["uid"]}], again.describe()
    finally:
        _gone(tenant, *made)
        # every run a pass made (recorded or delivered: no workflow-controller runs them here)
        client.CustomObjectsApi(cluster.admin).delete_collection_namespaced_custom_object(
            "argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows", label_selector="gpuaas.io/workload-uid")


def _judged_on_the_event_path(grant: audit.Grant) -> bool:
    """The grants only the real event path exercises: the EventSources' and the Sensors' (their programs are
    Argo Events' and the argo CLI, which run only on the Argo cluster), the steps' Role in gpuaas (the
    policy read, which both judges see, and argoexec's WorkflowTaskResults, which only step pods write), and
    the sweep's WorkflowTaskResults (argoexec in the pods of CronWorkflow gpuaas-sweep)."""
    account = _account(grant.user)
    return account in (platform.EVENT_SOURCES_ACCOUNT, platform.SENSORS_ACCOUNT) or (
        account == platform.STEPS_ACCOUNT and grant.namespace == PRODUCT_NAMESPACE) or (
        account == platform.SWEEP_ACCOUNT and grant.resource == "workflowtaskresults")


def _kubectl_resource(grant: audit.Grant) -> str:
    return f"{grant.resource}.{grant.group}" if grant.group else grant.resource


def _scope_problems(granted: list[audit.Grant], seen: list[audit.Request],
                    weighs: Callable[[audit.Grant], bool] = lambda grant: True) -> tuple[list[str], list[str]]:
    """(narrowings neither applied nor explained, explanations no use calls for) over the grants used in `seen`.
    An explanation is keyed by (account, resource, kind) and covers every verb of that resource; it is stale when
    a grant of that resource that could take that kind of narrowing (a ClusterRole's, for `namespace`; a nameable
    verb's without resourceNames, for `names`) was used and not one such grant's uses allowed it. Staleness is
    judged only for the grants `weighs` picks: those whose every path the judge drives (an explanation holds for
    uses a judge that sees only some of a grant's paths never makes)."""
    unexplained, found, weighed = [], set(), set()
    for grant in granted:
        used = audit.uses(grant, seen)
        if not used:
            continue
        account, resource = _account(grant.user), _kubectl_resource(grant)
        if grant.namespace is None and weighs(grant):
            weighed.add((account, resource, "namespace"))
        if grant.verb in audit.NAMEABLE_VERBS and not grant.resource_names and weighs(grant):
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


def _assert_every_name_used(granted: list[audit.Grant], seen: list[audit.Request]) -> None:
    """Each name of a used grant's `resourceNames` was named by a use: a grant of [a, b] used only for `a` is a
    broader grant than the product needs (Grant.allows counts it used as a whole). A grant nobody used at all is
    the unused-grant check's, not this one's."""
    used = [g for g in granted if g.resource_names and audit.uses(g, seen)]
    left = {(_account(g.user), f"{g.group}/{g.resource}", g.verb, name): g
            for g in used for name in audit.unused_names(g, seen)}
    unexplained = sorted(f"{g.describe()}: no request named {key[3]!r}" for key, g in left.items()
                         if key not in NAMES_NOT_EXERCISED)
    assert not unexplained, ("resourceNames no request named (take the name out of gpuaas/manifests/rbac.py and "
                             "re-render, or drive the path that needs it):\n  " + "\n  ".join(unexplained))
    judged = {(_account(g.user), f"{g.group}/{g.resource}", g.verb, name) for g in used for name in g.resource_names}
    stale = sorted(key for key in NAMES_NOT_EXERCISED if key in judged and key not in left)
    assert not stale, f"NAMES_NOT_EXERCISED lists names a request named (remove them from the table): {stale}"


def _assert_scope(granted: list[audit.Grant], seen: list[audit.Request],
                  weighs: Callable[[audit.Grant], bool] = lambda grant: True) -> None:
    unexplained, stale = _scope_problems(granted, seen, weighs)
    assert not unexplained, ("grants wider than every use needs: narrow them in gpuaas/manifests/rbac.py (and re-render) "
                             "or record why in NARROWER_SCOPE_NOT_APPLIED:\n  " + "\n  ".join(unexplained))
    assert not stale, ("NARROWER_SCOPE_NOT_APPLIED explains narrowings no use allows (remove them):\n  "
                       + "\n  ".join(stale))


def test_every_grant_of_the_rendered_rbac_is_used_and_nothing_is_denied(real_cluster: RealCluster,
                                                                         tmp_path: Path) -> None:
    log = real_cluster.cluster.audit_log
    start = _audited(log)  # this test's requests only: a reused cluster (GPUAAS_REAL_CLUSTER) keeps older ones
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
    _drive_sweep(steps, tenant, real_cluster)

    rendered = _objects(BASE / "rbac.yaml")
    everything = audit.grants(rendered)
    product_users = {g.user for g in everything}
    seen = audited_since(log, start)
    denied = sorted({(r.user, r.verb, r.rbac_resource, r.namespace, r.name) for r in seen
                     if r.user in product_users and r.denied})
    assert not denied, f"kube-apiserver denied the product's ServiceAccounts: {denied}"
    # the steps' and the sweep's ClusterRoles (and the policy reads, the sweep's runs), by their own code; the
    # event path's grants are the Argo cluster's to judge (test_the_real_event_path_uses_every_grant_it_has_and_is_never_denied)
    granted = [g for g in everything if not _judged_on_the_event_path(g) or g.resource == "configmaps"]
    _assert_scope(granted, seen)
    _assert_every_name_used(granted, seen)

    left = audit.unused(granted, seen)
    keyed = {(_account(g.user), f"{g.group}/{g.resource}", g.verb): g for g in left}
    unexplained = sorted(g.describe() for key, g in keyed.items() if key not in NOT_EXERCISED
                         and key not in MAYBE_EXERCISED)
    assert not unexplained, ("grants of the rendered RBAC no request needed (remove them, or drive the path "
                             "that needs them):\n  " + "\n  ".join(unexplained))
    stale = sorted(set(NOT_EXERCISED) - set(keyed))
    assert not stale, f"NOT_EXERCISED lists grants that were used (remove them from the table): {stale}"


EVENT_PATH_TENANT = "team-a"
RESOURCE_EVENT_SOURCES = ("gpuaas-workloads", "gpuaas-gpu-nodes")
"""The EventSources whose pods call the API (resource informers); the webhook and the calendar ones call none."""


def _audited(log: Path) -> int:
    """How many requests the audit log holds now: a later `audited_since(log, n)` reads only what came after."""
    return sum(1 for _ in audit.requests(log))


def _product_runs(custom: client.CustomObjectsApi, reaction: str, after: float) -> list[JSON]:
    """The product's runs of `reaction` created after `after` (epoch seconds; creationTimestamp has whole seconds,
    so a run of that very second is not counted: it may have begun before)."""
    return [r for r in custom.list_namespaced_custom_object(
        "argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows", label_selector=f"gpuaas.io/reaction={reaction}")[
        "items"] if _epoch(r["metadata"]["creationTimestamp"]) > after]


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def _step_outcome(run: JSON, template: str) -> list[str]:
    """The `outcome` output of each pod of `template` in the run."""
    return [next((p.get("value") for p in (n.get("outputs") or {}).get("parameters") or [] if p["name"] == "outcome"),
                 None) for n in run["status"]["nodes"].values() if n.get("templateName") == template
            and n["type"] == "Pod"]


def _restart_event_sources(cluster: RealCluster) -> None:
    """The resource EventSources' pods deleted; their Deployments make new ones, whose informers list and watch
    now. Why: on a reused cluster (GPUAAS_REAL_ARGO_CLUSTER) the running pods listed when they started, in an
    earlier session, and an earlier session's request is never this test's evidence. The gpu-nodes informer's
    re-list delivers an ADD per GPU node, on which Sensor gpuaas-provision-quota submits its template (the
    Workloads' ADDs start nothing: sensors/workload_transition.py)."""
    core = client.CoreV1Api(cluster.admin)
    for name in RESOURCE_EVENT_SOURCES:
        label = f"eventsource-name={name}"
        old = {p.metadata.uid for p in core.list_namespaced_pod(PRODUCT_NAMESPACE, label_selector=label).items}
        assert old, f"expected a pod of EventSource {name} in {PRODUCT_NAMESPACE}, found none"
        core.delete_collection_namespaced_pod(PRODUCT_NAMESPACE, label_selector=label, grace_period_seconds=1)
        eventually(lambda label=label, old=old: (pods := core.list_namespaced_pod(
            PRODUCT_NAMESPACE, label_selector=label).items) and not {p.metadata.uid for p in pods} & old,
            timeout_s=120, what=f"the pods of EventSource {name} replaced")
    install(cluster, (*IDLE_LISTENING, ("eventsource-name=gpuaas-gpu-nodes", "listening to resource events")))


def _node_added(event: JSON, _run: JSON) -> str:
    """EventCheck (tests.support.run_attribution): the gpu-nodes EventSource's ADD of a GPU Node."""
    context, data = event["context"], event["data"] or {}
    body = data.get("body") or {}
    if context.get("type") != "resource" or context.get("source") != "gpuaas-gpu-nodes":
        return f"expected a resource event of EventSource gpuaas-gpu-nodes, found {context}"
    if data.get("type") != "ADD" or body.get("kind") != "Node" or \
            (body.get("metadata") or {}).get("labels", {}).get("nvidia.com/gpu.present") != "true":
        return f"expected the ADD of a GPU Node, found {data.get('type')} {body.get('kind')} " \
               f"{(body.get('metadata') or {}).get('name')}"
    return ""


def _finished_by_sensor(custom: client.CustomObjectsApi, reaction: str, after: float, sensor: str,
                        check: EventCheck, wanted: Callable[[JSON], bool] = lambda run: True) -> JSON:
    """The first run of `reaction` made after `after` that `wanted` picks, once finished: Succeeded, submitted by
    `sensor` for the event `check` accepts (tests.support.run_attribution)."""
    def done() -> JSON | None:
        runs = sorted((r for r in _product_runs(custom, reaction, after) if wanted(r)),
                      key=lambda r: r["metadata"]["creationTimestamp"])
        return runs[0] if runs and (runs[0].get("status") or {}).get("phase") in FINISHED else None
    run = eventually(done, timeout_s=300, what=f"a run of gpuaas-{reaction} made after the test began, finished")
    assert run["status"]["phase"] == "Succeeded", (run["metadata"]["name"], run["status"].get("message"))
    problems = expect_sensor(run, sensor, check)
    assert not problems, problems
    return run


def _post_idle_group(cluster: RealCluster, pod: str) -> None:
    """What Alertmanager POSTs for a firing GPUWorkloadIdle group naming the pod, to the webhook EventSource with
    its token (Alertmanager stands in here: the least-privilege question is what the Sensor and steps then ask)."""
    endpoints = cluster.cluster.status()["endpoints"]
    body = json.loads(IDLE_GROUP.read_text().replace("llm-finetune-7c9f2-0", pod))["data"]["body"]
    token = Path(endpoints["webhook-token-file"]).read_text().strip()
    request = urllib.request.Request(endpoints["webhook/gpuaas/gpuaas-alertmanager/idle"],
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 200, answer.status
    except urllib.error.HTTPError as error:  # seen once (401, a sharded CI run): say what the webhook had to go on
        core = client.CoreV1Api(cluster.admin)
        secret = core.read_namespaced_secret("gpuaas-alertmanager-webhook", PRODUCT_NAMESPACE)
        in_secret = base64.b64decode((secret.data or {}).get("token", "")).decode().strip()
        pods = [(p.metadata.name, p.status.phase, p.metadata.creation_timestamp) for p in core.list_namespaced_pod(
            PRODUCT_NAMESPACE, label_selector="eventsource-name=gpuaas-alertmanager").items]
        raise AssertionError(f"webhook answered {error.code}: the stack's token file and Secret "
                             f"gpuaas-alertmanager-webhook {'agree' if in_secret == token else 'DIFFER'} (Secret "
                             f"made {secret.metadata.creation_timestamp}); EventSource pods {pods}") from error


def _drive_the_event_path(cluster: RealCluster, began: float) -> list[str]:
    """Every template the Sensors submit, each once, through the real EventSources and Sensors, in this test: a
    model server (a Deployment of the example tenant) admitted (gpuaas-on-admitted: its ScaledObject), an idle
    alert for its pod (gpuaas-on-idle: too young to release, team-a's minimum runtime is the default 1h), its pod
    failed as a node evicting it would, so its Workload finishes (gpuaas-on-finished: nothing to remove, its
    ScaledObject's owner lives on); and the GPU nodes' ADDs of the restarted gpu-nodes informer
    (gpuaas-provision-quota). A batch Job would not do: its transitions write nothing, so no Sensor starts a run
    for them (the sweep records them: docs/catch-up.md). Returns the runs' names."""
    apps, core, custom = client.AppsV1Api(cluster.admin), client.CoreV1Api(cluster.admin), client.CustomObjectsApi(
        cluster.admin)
    name = f"lp-path-{int(time.time()) % 100000}"
    made = apps.create_namespaced_deployment(EVENT_PATH_TENANT, deployment(name, EVENT_PATH_TENANT, EVENT_PATH_TENANT))
    try:
        def first_pod() -> Any:
            pods = [p for p in core.list_namespaced_pod(EVENT_PATH_TENANT, label_selector=f"app={name}").items
                    if p.status.phase == "Running"]
            return pods[0] if pods else None
        pod = eventually(first_pod, timeout_s=120, what=f"the pod of Deployment {name} running").metadata.name

        def workload_of_pod() -> JSON | None:
            return next((w for w in custom.list_namespaced_custom_object(
                "kueue.x-k8s.io", "v1beta2", EVENT_PATH_TENANT, "workloads")["items"] if any(
                r.get("name") == pod for r in w["metadata"].get("ownerReferences") or [])
                and condition(w, "Admitted") == "True"), None)
        workload = eventually(workload_of_pod, timeout_s=120, what=f"the Workload of pod {pod} admitted")["metadata"][
            "name"]

        def of_workload(run: JSON) -> bool:
            return parameters(run).get("workload") == workload
        admitted = _finished_by_sensor(custom, "on-admitted", began, "gpuaas-on-admitted",
                                       resource_condition("Admitted"), of_workload)
        assert _step_outcome(admitted, "on-admitted") == ["applied"], admitted["status"]["nodes"]

        _post_idle_group(cluster, pod)
        idle = _finished_by_sensor(custom, "on-idle", began, "gpuaas-on-idle",
                                   alert_group("GPUWorkloadIdle", EVENT_PATH_TENANT, pod))
        assert _step_outcome(idle, "on-idle") == ["skipped-by-policy"], idle["status"]["nodes"]

        core.patch_namespaced_pod_status(pod, EVENT_PATH_TENANT, {"status": {
            "phase": "Failed", "reason": "Evicted", "message": "evicted by the test, as a node under pressure would"}})
        finished = _finished_by_sensor(custom, "on-finished", began, "gpuaas-on-finished",
                                       resource_condition("Finished"), of_workload)
        assert _step_outcome(finished, "on-finished") == ["no-op"], finished["status"]["nodes"]
    finally:
        apps.delete_namespaced_deployment(made.metadata.name, EVENT_PATH_TENANT, propagation_policy="Background")
    quota = _finished_by_sensor(custom, "provision-quota", began, "gpuaas-provision-quota", _node_added)
    return [r["metadata"]["name"] for r in (admitted, idle, finished, quota)]


def _a_sweep_pass(cluster: RealCluster, after: float) -> str:
    """A pass of CronWorkflow gpuaas-sweep (its pod's argoexec writes the sweep's WorkflowTaskResults) made after
    the test began that Succeeded on this cluster (one every 2 minutes as rendered)."""
    custom = client.CustomObjectsApi(cluster.admin)

    def passed() -> str | None:
        runs = custom.list_namespaced_custom_object(
            "argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows",
            label_selector="workflows.argoproj.io/cron-workflow=gpuaas-sweep")["items"]
        done = sorted((r["metadata"]["creationTimestamp"], r["metadata"]["name"]) for r in runs
                      if (r.get("status") or {}).get("phase") == "Succeeded"
                      and _epoch(r["metadata"]["creationTimestamp"]) > after)
        return done[-1][1] if done else None
    return eventually(passed, timeout_s=300, what="a pass of CronWorkflow gpuaas-sweep made after the test began "
                                                  "Succeeded")


def test_the_real_event_path_uses_every_grant_it_has_and_is_never_denied(argo_cluster: RealCluster) -> None:
    """Runs after every other Argo test of the session (conftest orders it so): none of their requests may be
    denied. Use is counted from this test's start only: the test drives every part of the event path itself, so
    an earlier session's requests on a reused cluster (or an earlier test's) never stand in for a grant's use."""
    cluster = install(argo_cluster, IDLE_LISTENING)
    log = cluster.cluster.audit_log
    began_at, began = time.time(), _audited(log)
    _restart_event_sources(cluster)
    runs = _drive_the_event_path(cluster, began_at)
    swept = _a_sweep_pass(cluster, began_at)
    granted = audit.grants(_objects(BASE / "rbac.yaml"))
    product_users = {g.user for g in granted}

    # Nothing the product asked in this session was denied, pod or not; its namespace's `default` account too (a
    # product pod left without serviceAccountName would run as it, granted nothing). Accounts the tests make in that
    # namespace (test_doctor's, denied on purpose) are not the product's.
    judged_users = product_users | {f"system:serviceaccount:{PRODUCT_NAMESPACE}:default"}
    denied = sorted({(r.user, r.verb, r.rbac_resource, r.namespace, r.name, r.pod, r.user_agent)
                     for r in audited_since(log, cluster.audit_start) if r.user in judged_users and r.denied})
    assert not denied, f"kube-apiserver denied the product's ServiceAccounts on the Argo cluster: {denied}"

    # Use: only requests made in this test with a token bound to a pod (the EventSources', Sensors' and step pods'
    # own).
    real = [r for r in audited_since(log, began) if r.from_pod and r.user in product_users]
    judged = [g for g in granted if _judged_on_the_event_path(g)]
    evidence = []
    for grant in judged:
        used = audit.uses(grant, real)
        agents = sorted({r.user_agent.split(" ")[0] for r in used})
        pods = sorted({r.pod.rsplit("-", 1)[0] for r in used})
        names = sorted({r.name for r in used}) if grant.resource_names else []
        evidence.append(f"{len(used):5d}  {grant.describe()}  by {agents} in pods {pods[:4]}"
                        + (f" naming {names}" if names else ""))
    print(f"\nthe event path's grants and their uses on the Argo cluster since the test began (runs {runs}, sweep "
          f"{swept}):\n" + "\n".join(evidence))
    unused = [g.describe() for g in judged if not audit.uses(g, real)]
    assert not unused, ("grants of the event path no real component's request in this test needed (remove them, or "
                        "find the path that needs them):\n  " + "\n  ".join(unused))
    _assert_every_name_used(judged, real)
    # Scope, for every grant a pod used here (the steps' and the sweep's ClusterRoles included: their pods' own
    # requests): a narrowing a use allows must be applied or explained. Whether an explanation is stale is judged
    # for this judge's own grants only: the pods here take a few of the ClusterRoles' paths (an idle check lists
    # LocalQueues across namespaces; a sweep pass with nothing to mark only lists), and the control-plane judge
    # drives all of them.
    _assert_scope(granted, real, weighs=_judged_on_the_event_path)
