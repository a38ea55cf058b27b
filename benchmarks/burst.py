"""A burst of Kueue Workloads on the real stack, and the count of their reactions.

Shared by `benchmarks/scale.py` (`make bench-scale`) and the fault tier
(tests/realstack/test_catchup_faults.py): both submit many workloads of mixed kinds at once, let
Kueue admit them on KWOK GPU nodes, end them, and then check every transition against the reaction
runs Argo holds.

    tenant = BurstTenant("burst", gpus=1200, namespaces=3)
    apply(api, tenant.objects(kwok_nodes=...))           # flavor, ClusterQueue, namespaces, LocalQueues
    burst = Burst(api, tenant)
    watch = TransitionWatch(api, tenant.namespace_names()); watch.start()
    burst.submit(Mix(jobs=700, pytorchjobs=100, deployments=20, pods_per_deployment=5, statefulsets=100))
    burst.finish()                                        # jobs' pods exit 0; servers are deleted
    tally = Tally.of(watch.transitions(), reaction_runs(api))   # live; or from the Argo Server's archive:
    tally = Tally.of(watch.transitions(), archived_reaction_runs(server, archived_reaction_uids(server)))
    tally.lost, tally.doubled, tally.duplicates_recorded, tally.latencies

What counts as one transition: `steps.delivery`'s key (an admission: the Admitted condition's
lastTransitionTime and the evictions before it; a finish: Finished's lastTransitionTime), seen by a
watch of the Workloads from before the burst and read again from the final objects. What counts as
its reaction: a run of gpuaas-on-admitted / -on-finished whose record says it handled that key
(`delivery.marked`, or a run the sweep recorded without a pod); a run whose record says duplicate
is counted apart (a duplicate recorded as such is what the product promises, not a double).
Imports only the kubernetes client and `steps` (benchmarks may not import gpuaas: ARCHITECTURE.md).
"""

from __future__ import annotations

import concurrent.futures
import json
import statistics
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubernetes import client, watch

from steps.delivery import (
    TRACKED,
    Marker,
    admitted_transition,
    finished_transition,
    read_marker,
    recorded_run_record,
)

JSON = dict[str, Any]
GPU = "nvidia.com/gpu"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
COMPLETE_JITTER = "pod-complete.stage.kwok.x-k8s.io/jitter-delay"
RUNNING = {COMPLETE_DELAY: "2h", COMPLETE_JITTER: "3h"}
"""KWOK keeps such a pod running (docs/real-stack.md: both annotations, the jitter longer than the delay)."""
FINISH_NOW = {COMPLETE_DELAY: "0s", COMPLETE_JITTER: "1s"}
IDLE_ANNOTATION = "gpuaas.io/emulated-gpu-utilization"
REACTIONS = ("on-admitted", "on-finished")
FINISHED_PHASES = ("Succeeded", "Failed", "Error")
BURST_LABEL = "gpuaas.io/burst"


def seconds(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.fromisoformat(text).timestamp()


# -- the tenant ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BurstTenant:
    """A ClusterQueue big enough for the burst (outside the examples' cohort), its flavor and namespaces."""

    name: str
    gpus: int
    namespaces: int = 3
    flavor_selector: tuple[str, str] = ("gpuaas.io/burst-pool", "true")

    def namespace_names(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.namespaces)]

    def objects(self) -> list[JSON]:
        flavor = f"{self.name}-gpu"
        out: list[JSON] = [
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor},
             "spec": {"nodeLabels": dict([self.flavor_selector]),
                      "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]}},
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": self.name},
             "spec": {"namespaceSelector": {"matchLabels": {BURST_LABEL: self.name}},
                      "resourceGroups": [{"coveredResources": ["cpu", "memory", GPU], "flavors": [{
                          "name": flavor, "resources": [
                              {"name": "cpu", "nominalQuota": str(self.gpus * 2)},
                              {"name": "memory", "nominalQuota": f"{self.gpus * 2}Gi"},
                              {"name": GPU, "nominalQuota": str(self.gpus)}]}]}]}},
        ]
        for namespace in self.namespace_names():
            out.append({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": namespace, "labels": {BURST_LABEL: self.name}}})
            out.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                        "metadata": {"name": namespace, "namespace": namespace}, "spec": {"clusterQueue": self.name}})
        return out


def kwok_gpu_nodes(prefix: str, count: int, gpus: int, selector: tuple[str, str]) -> list[JSON]:
    """KWOK GPU nodes for the burst: the stack's labels and taint (gpuaas.cluster.kwok) plus the tenant's
    flavor label, and room for many pods."""
    capacity = {"cpu": str(gpus * 4), "memory": f"{gpus * 8}Gi", "pods": str(max(110, gpus * 2)), GPU: str(gpus)}
    nodes = []
    for i in range(count):
        name = f"{prefix}-{i}"
        nodes.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
                         "labels": {"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                                    "nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": str(gpus),
                                    selector[0]: selector[1]}},
            "spec": {"taints": [{"key": GPU, "value": "present", "effect": "NoSchedule"}]},
            "status": {"allocatable": capacity, "capacity": capacity,
                       "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "fake",
                                    "kubeProxyVersion": "fake", "machineID": name, "systemUUID": name,
                                    "bootID": name, "kernelVersion": "kwok", "osImage": "kwok",
                                    "containerRuntimeVersion": "kwok"}}})
    return nodes


# -- the workloads ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Mix:
    """How many of each kind. Jobs and PyTorchJobs end on their own when told (`Burst.finish`); the
    servers (a Deployment's pods, StatefulSets) and RayClusters are deleted instead, as a tenant would."""

    jobs: int = 0
    pytorchjobs: int = 0
    deployments: int = 0
    pods_per_deployment: int = 1
    statefulsets: int = 0
    rayclusters: int = 0
    idle: bool = False
    """Pods report 0% GPU activity (the stack's DCGM-like exporter reads the annotation): an idle storm."""

    @property
    def workloads(self) -> int:
        return (self.jobs + self.pytorchjobs + self.deployments * self.pods_per_deployment + self.statefulsets
                + self.rayclusters)

    def scaled(self, factor: float) -> Mix:
        def n(value: int) -> int:
            return max(1, round(value * factor)) if value else 0
        return Mix(n(self.jobs), n(self.pytorchjobs), n(self.deployments), self.pods_per_deployment,
                   n(self.statefulsets), n(self.rayclusters), self.idle)


def _container(gpus: int, name: str = "main") -> JSON:
    resources: JSON = {"requests": {"cpu": "1", "memory": "1Gi"}}
    if gpus:
        resources["requests"][GPU] = str(gpus)
        resources["limits"] = {GPU: str(gpus)}
    return {"name": name, "image": "registry.invalid/burst:1", "resources": resources}


def _template(gpus: int, idle: bool, labels: JSON | None = None, restart: str | None = "Never",
              container: str = "main") -> JSON:
    annotations = dict(RUNNING)
    if idle:
        annotations[IDLE_ANNOTATION] = "0"
    spec: JSON = {"containers": [_container(gpus, container)]}
    if restart:
        spec["restartPolicy"] = restart
    return {"metadata": {"annotations": annotations, "labels": dict(labels or {})}, "spec": spec}


def server(namespace: str, name: str, *, queue: str | None = None, replicas: int = 1, gpus: int = 1,
           idle: bool = False) -> JSON:
    """A StatefulSet for a LocalQueue (a model server): its admission is the Sensor's (a step may write for it)."""
    queue = queue or namespace
    selector = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue}},
            "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": selector},
                     "template": _template(gpus, idle, {**selector, QUEUE_LABEL: queue}, restart=None)}}


@dataclass
class Submitted:
    kind: str
    namespace: str
    name: str


class Burst:
    """Submits a Mix into the tenant's namespaces (round robin) from a few threads, and ends it."""

    def __init__(self, api: client.ApiClient, tenant: BurstTenant, prefix: str = "b", threads: int = 8) -> None:
        self.api, self.tenant, self.prefix, self.threads = api, tenant, prefix, threads
        self.submitted: list[Submitted] = []
        self.errors: list[str] = []

    def _one(self, kind: str, index: int, mix: Mix) -> Submitted | None:
        namespaces = self.tenant.namespace_names()
        namespace = namespaces[index % len(namespaces)]
        name = f"{self.prefix}-{kind}-{index}"
        labels = {QUEUE_LABEL: namespace}
        meta = {"name": name, "namespace": namespace, "labels": labels}
        try:
            if kind == "job":
                client.BatchV1Api(self.api).create_namespaced_job(namespace, {
                    "apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                    "spec": {"suspend": True, "backoffLimit": 0, "template": _template(1, mix.idle)}})
            elif kind == "pytorchjob":
                client.CustomObjectsApi(self.api).create_namespaced_custom_object(
                    "kubeflow.org", "v1", namespace, "pytorchjobs", {
                        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
                        "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {"Master": {
                            "replicas": 1, "restartPolicy": "Never",
                            "template": _template(1, mix.idle, restart=None, container="pytorch")}}}})
            elif kind == "deployment":
                selector = {"app": name}
                client.AppsV1Api(self.api).create_namespaced_deployment(namespace, {
                    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
                    "spec": {"replicas": mix.pods_per_deployment, "selector": {"matchLabels": selector},
                             "template": _template(1, mix.idle, {**selector, QUEUE_LABEL: namespace}, restart=None)}})
            elif kind == "statefulset":
                client.AppsV1Api(self.api).create_namespaced_stateful_set(
                    namespace, server(namespace, name, idle=mix.idle))
            elif kind == "raycluster":
                client.CustomObjectsApi(self.api).create_namespaced_custom_object(
                    "ray.io", "v1", namespace, "rayclusters", {
                        "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta,
                        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": _template(0, mix.idle, restart=None)},
                                 "workerGroupSpecs": [{"groupName": "gpu", "replicas": 1, "minReplicas": 1,
                                                       "maxReplicas": 1, "rayStartParams": {},
                                                       "template": _template(1, mix.idle, restart=None)}]}})
            else:
                raise ValueError(kind)
        except client.ApiException as error:
            self.errors.append(f"{kind} {namespace}/{name}: {error.status} {error.reason} {str(error.body)[:300]}")
            return None
        return Submitted(kind, namespace, name)

    def submit(self, mix: Mix) -> list[Submitted]:
        """Create every object of the mix (in parallel); returns what was created."""
        plan = ([("job", mix.jobs), ("pytorchjob", mix.pytorchjobs), ("deployment", mix.deployments),
                 ("statefulset", mix.statefulsets), ("raycluster", mix.rayclusters)])
        work = [(kind, i) for kind, n in plan for i in range(n)]
        with concurrent.futures.ThreadPoolExecutor(self.threads) as pool:
            made = [s for s in pool.map(lambda item: self._one(item[0], item[1], mix), work) if s is not None]
        self.submitted += made
        return made

    def finish(self, servers: bool = False) -> None:
        """End the burst as its programs would: the job kinds' pods exit 0 (KWOK completes them). With
        `servers`, also delete the servers and Ray clusters, as their tenants would (after their admissions
        were answered: a Workload deleted before its reaction ran leaves nothing to answer)."""
        core = client.CoreV1Api(self.api)
        patch = {"metadata": {"annotations": FINISH_NOW}}

        def end(item: Submitted) -> None:
            if (item.kind in ("job", "pytorchjob")) == servers:
                return
            try:
                if item.kind in ("job", "pytorchjob"):
                    pods = core.list_namespaced_pod(item.namespace, label_selector=(
                        f"job-name={item.name}" if item.kind == "job"
                        else f"training.kubeflow.org/job-name={item.name}")).items
                    for pod in pods:
                        core.patch_namespaced_pod(pod.metadata.name, item.namespace, patch)
                elif item.kind == "deployment":
                    client.AppsV1Api(self.api).delete_namespaced_deployment(item.name, item.namespace)
                elif item.kind == "statefulset":
                    client.AppsV1Api(self.api).delete_namespaced_stateful_set(item.name, item.namespace)
                elif item.kind == "raycluster":
                    client.CustomObjectsApi(self.api).delete_namespaced_custom_object(
                        "ray.io", "v1", item.namespace, "rayclusters", item.name)
            except client.ApiException as error:
                if error.status != 404:
                    self.errors.append(f"finish {item.kind} {item.namespace}/{item.name}: {error.status}")

        with concurrent.futures.ThreadPoolExecutor(self.threads) as pool:
            list(pool.map(end, self.submitted))


# -- the transitions the apiserver shows -----------------------------------------------------------------
@dataclass(frozen=True)
class Seen:
    """One transition as the apiserver showed it."""

    uid: str
    namespace: str
    name: str
    reaction: str
    key: str
    at: float | None
    """The condition's lastTransitionTime (seconds since the epoch)."""
    owner: str


class TransitionWatch:
    """Watches every Workload of the given namespaces (list, then watch; re-lists when a watch breaks,
    as an informer does) and records each admission and finish it sees, plus the final objects."""

    def __init__(self, api: client.ApiClient, namespaces: Iterable[str]) -> None:
        self.api = api
        self.namespaces = set(namespaces)
        self.objects: dict[str, JSON] = {}
        self.seen: dict[tuple[str, str, str], Seen] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True, name="transition-watch")
        self.relists = 0

    def start(self) -> TransitionWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _note(self, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        if meta.get("namespace") not in self.namespaces:
            return
        owner = ",".join(r.get("kind", "") for r in meta.get("ownerReferences") or [])
        with self._lock:
            self.objects[str(meta.get("uid"))] = obj
            for transition in (admitted_transition(obj), finished_transition(obj)):
                if transition is None:
                    continue
                key = (str(meta.get("uid")), transition.reaction, transition.key)
                if key not in self.seen:
                    self.seen[key] = Seen(key[0], str(meta.get("namespace")), str(meta.get("name")),
                                          transition.reaction, transition.key,
                                          transition.at.timestamp() if transition.at else None, owner)

    def _run(self) -> None:
        custom = client.CustomObjectsApi(self.api)
        while not self._stop.is_set():
            try:
                listed = custom.list_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "workloads")
                for obj in listed.get("items") or []:
                    self._note(obj)
                version = listed["metadata"]["resourceVersion"]
                stream = watch.Watch()
                for event in stream.stream(custom.list_cluster_custom_object, "kueue.x-k8s.io", "v1beta2",
                                           "workloads", resource_version=version, timeout_seconds=30):
                    if self._stop.is_set():
                        stream.stop()
                        break
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._note(event["object"])
            except Exception:  # noqa: BLE001 - the apiserver restarts in the fault tier: list again
                self.relists += 1
                time.sleep(1)

    def markers(self) -> dict[tuple[str, str], Marker]:
        """The marker each Workload carries now (as last seen), by (Workload uid, reaction)."""
        with self._lock:
            objects = list(self.objects.values())
        out: dict[tuple[str, str], Marker] = {}
        for obj in objects:
            for reaction in TRACKED:
                marker = read_marker(obj, reaction)
                if marker is not None:
                    out[(str((obj.get("metadata") or {}).get("uid")), reaction)] = marker
        return out

    def transitions(self, api: client.ApiClient | None = None) -> list[Seen]:
        """Every transition seen, plus those of the final objects (read now, when `api` is given)."""
        if api is not None:
            listed = client.CustomObjectsApi(api).list_cluster_custom_object("kueue.x-k8s.io", "v1beta2",
                                                                             "workloads")
            for obj in listed.get("items") or []:
                self._note(obj)
        with self._lock:
            return list(self.seen.values())


# -- the reactions Argo holds ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReactionRun:
    """One run of a Workload reaction, as Argo holds it, with what its record says it handled."""

    name: str
    uid: str
    reaction: str
    phase: str
    created: float | None
    finished: float | None
    workload_uid: str
    transition: str | None
    marked: bool
    duplicate: bool
    superseded: bool
    recorded_by_sweep: bool
    via: str
    late: bool
    pods: int
    outcome: str
    mark_applied: bool = False
    """The record says its marker write (mark-handled) was applied: the run answered the transition."""


def workflow_nodes(workflow: JSON) -> dict[str, JSON]:
    """status.nodes, also when the workflow-controller stored them compressed: past Argo's size limit
    (1 MB) it writes status.compressedNodes (gzip, base64; argo-workflows v4 workflow/packer) instead."""
    status = workflow.get("status") or {}
    if status.get("nodes"):
        return status["nodes"]
    if status.get("compressedNodes"):
        import base64
        import gzip

        return json.loads(gzip.decompress(base64.b64decode(status["compressedNodes"])))
    return {}


def _reaction_node_record(workflow: JSON, reaction: str) -> JSON | None:
    """The reaction step's record (the last attempt's), or the sweep's record parameter."""
    parameters = {p.get("name"): p.get("value") for p in
                  ((workflow.get("spec") or {}).get("arguments") or {}).get("parameters") or []}
    meta = workflow.get("metadata") or {}
    swept = recorded_run_record(parameters, name=str(meta.get("name") or ""), labels=meta.get("labels") or {})
    if swept is not None:
        return swept
    best = None
    for node in workflow_nodes(workflow).values():
        if node.get("type") != "Pod" or node.get("templateName") != reaction:
            continue
        for output in (node.get("outputs") or {}).get("parameters") or []:
            if output.get("name") == "record" and output.get("value"):
                try:
                    record = json.loads(output["value"])
                except ValueError:
                    continue
                if best is None or (node.get("finishedAt") or "") >= best[0]:
                    best = (node.get("finishedAt") or "", record)
    return best[1] if best else None


def parse_run(workflow: JSON) -> ReactionRun | None:
    meta = workflow.get("metadata") or {}
    labels = meta.get("labels") or {}
    reaction = labels.get("gpuaas.io/reaction", "")
    if reaction not in REACTIONS:
        return None
    status = workflow.get("status") or {}
    record = _reaction_node_record(workflow, reaction) or {}
    data = record.get("data") or {}
    delivery = data.get("delivery") or {}
    transition = (delivery.get("transition") or {}).get("key")
    pods = sum(1 for n in workflow_nodes(workflow).values() if n.get("type") == "Pod")
    duplicate = bool(delivery.get("duplicateOf"))
    swept = labels.get("gpuaas.io/recorded-by") == "sweep" and not duplicate
    applied = swept or any(isinstance(a, dict) and a.get("action") == "mark-handled" and a.get("result") == "applied"
                           for a in data.get("actions") or [])
    return ReactionRun(
        name=str(meta.get("name")), uid=str(meta.get("uid")), reaction=reaction, phase=str(status.get("phase") or ""),
        created=seconds(meta.get("creationTimestamp")), finished=seconds(status.get("finishedAt")),
        workload_uid=str((data.get("workload") or {}).get("uid") or labels.get("gpuaas.io/workload-uid") or ""),
        transition=transition, marked=bool(delivery.get("marked")) or swept,
        duplicate=duplicate, superseded=bool(delivery.get("superseded")),
        recorded_by_sweep=swept, via=str(delivery.get("via") or ""), late=bool(delivery.get("late")), pods=pods,
        outcome=str(data.get("outcome") or ""), mark_applied=applied)


def reaction_runs(api: client.ApiClient, namespace: str = "gpuaas") -> list[ReactionRun]:
    """Every Workload reaction run the cluster holds (live Workflows, paged)."""
    custom = client.CustomObjectsApi(api)
    runs: list[ReactionRun] = []
    token = None
    while True:
        page = custom.list_namespaced_custom_object(
            "argoproj.io", "v1alpha1", namespace, "workflows", label_selector="gpuaas.io/reaction in (on-admitted,on-finished)",
            limit=200, **({"_continue": token} if token else {}))
        for item in page.get("items") or []:
            run = parse_run(item)
            if run is not None:
                runs.append(run)
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return runs


REACTION_SELECTOR = "gpuaas.io/reaction in (on-admitted,on-finished)"


def _get_json(url: str, timeout_s: float = 60.0) -> JSON:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        raise RuntimeError(f"GET {url}: HTTP {error.code}, expected 200 from the Argo Server's API: "
                           f"{error.read()[:300]!r}") from error


def archived_reaction_uids(server: str, namespace: str = "gpuaas") -> set[str]:
    """The uids of the Workload reaction runs the Argo Server's archive holds, in one request: GET
    /api/v1/archived-workflows without a limit (Argo Server v4.0.5 then loads every selected row). Why not pages:
    the archive pages by offset over `ORDER BY startedat DESC` (persist/sqldb), whose one-second precision ties a
    burst's runs, and PostgreSQL keeps no stable order among ties from one LIMIT/OFFSET query to the next, so a
    row can fall between two pages."""
    query = {"namespace": namespace, "listOptions.labelSelector": REACTION_SELECTOR}
    page = _get_json(f"{server}/api/v1/archived-workflows?{urllib.parse.urlencode(query)}", timeout_s=300)
    return {str((item.get("metadata") or {}).get("uid")) for item in page.get("items") or []}


def _archived(server: str, uid: str) -> JSON | None:
    """GET /api/v1/archived-workflows/{uid}: the run as archived (the controller hydrates it before archiving, so
    it has status.nodes and their outputs), or None when the archive does not hold it."""
    try:
        return _get_json(f"{server}/api/v1/archived-workflows/{urllib.parse.quote(uid)}")
    except RuntimeError as error:
        if "HTTP 404" in str(error):
            return None
        raise


def archived_reaction_runs(server: str, uids: Iterable[str], threads: int = 8) -> list[ReactionRun]:
    """The archive's copy of each run of `uids`, parsed as the live ones are. A uid the archive lacks is left out."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool:
        found = list(pool.map(lambda uid: _archived(server, uid), sorted(uids)))
    return [run for run in (parse_run(w) for w in found if w is not None) if run is not None]


def wait_archived(server: str, expected: set[str], *, timeout_s: float, poll_s: float = 15.0,
                  progress: Any = None, threads: int = 8) -> set[str]:
    """Until the archive holds every run of `expected` (the controller archives a run when it completes, apart from
    its reconciliation), each asked for by uid: the uids of `expected` it holds then (all, or those at the timeout)."""
    deadline = time.monotonic() + timeout_s
    held: set[str] = set()
    while True:
        missing = sorted(expected - held)
        with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool:
            held |= {uid for uid, found in zip(missing, pool.map(lambda u: _archived(server, u), missing), strict=True)
                     if found is not None}
        if progress is not None:
            progress(len(held), len(expected))
        if held >= expected or time.monotonic() > deadline:
            return held
        time.sleep(poll_s)


# -- the tally -----------------------------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


@dataclass
class Tally:
    transitions: int = 0
    handled: int = 0
    lost: list[Seen] = field(default_factory=list)
    doubled: list[tuple[Seen, list[str]]] = field(default_factory=list)
    duplicates_recorded: int = 0
    superseded_recorded: int = 0
    pending: int = 0
    """Runs not finished yet."""
    latencies: dict[str, list[float]] = field(default_factory=dict)
    """Transition time -> the handling run's finishedAt, by path (event / sweep-recorded / sweep-delivered)."""
    by_path: dict[str, int] = field(default_factory=dict)
    pods: int = 0
    runs: int = 0
    late: int = 0
    failed_runs: int = 0
    """Runs that meant to answer a transition but did not finish Succeeded with their marker written."""
    unconfirmed: int = 0
    """Transitions whose answering run the Workload's marker does not name (counted lost)."""
    by_reaction: dict[str, int] = field(default_factory=dict)
    """Transitions seen, by reaction (on-admitted, on-finished)."""

    @classmethod
    def of(cls, seen: list[Seen], runs: list[ReactionRun],
           markers: dict[tuple[str, str], Marker] | None = None) -> Tally:
        """The transitions `seen` against the runs for their Workloads (other Workloads' runs are left out).

        A run answered a transition when it Succeeded and its record says its marker write was applied
        (or it is the sweep's own recorded run), and, where `markers` (the final Workloads' markers,
        TransitionWatch.markers) holds one for that very transition, the marker names it. Two runs that
        both answered one transition are a double; a run recorded as a duplicate is counted apart."""
        uids = {item.uid for item in seen}
        runs = [run for run in runs if run.workload_uid in uids]
        tally = cls(transitions=len(seen), runs=len(runs))
        handling: dict[tuple[str, str, str], list[ReactionRun]] = {}
        for run in runs:
            tally.pods += run.pods
            if run.phase not in FINISHED_PHASES:
                tally.pending += 1
            if run.duplicate:
                tally.duplicates_recorded += 1
                continue
            if run.superseded:
                tally.superseded_recorded += 1
                continue
            if run.marked and run.transition:
                handling.setdefault((run.workload_uid, run.reaction, run.transition), []).append(run)
        for item in seen:
            tally.by_reaction[item.reaction] = tally.by_reaction.get(item.reaction, 0) + 1
            found = handling.get((item.uid, item.reaction, item.key), [])
            acted = [r for r in found if r.phase == "Succeeded" and r.mark_applied]
            named = (markers or {}).get((item.uid, item.reaction))
            answer = [r for r in acted if r.uid == named.run] if named is not None and named.transition == item.key \
                else acted
            if len(found) > len(acted):
                tally.failed_runs += len(found) - len(acted)
            if not answer:
                tally.lost.append(item)
                if acted:
                    tally.unconfirmed += 1
                continue
            tally.handled += 1
            if len(acted) > 1:
                tally.doubled.append((item, [r.name for r in acted]))
            run = answer[0]
            path = "sweep-recorded" if run.recorded_by_sweep else ("sweep-delivered" if run.via == "sweep" else "event")
            tally.by_path[path] = tally.by_path.get(path, 0) + 1
            tally.late += run.late
            if run.finished is not None and item.at is not None:
                tally.latencies.setdefault(path, []).append(run.finished - item.at)
        return tally

    def latency_summary(self) -> dict[str, JSON]:
        out = {}
        every = [v for values in self.latencies.values() for v in values]
        for path, values in [("all", every), *sorted(self.latencies.items())]:
            out[path] = {"n": len(values), "p50": percentile(values, 50), "p95": percentile(values, 95),
                         "p99": percentile(values, 99), "max": max(values) if values else None,
                         "mean": statistics.fmean(values) if values else None}
        return out

    def to_dict(self) -> JSON:
        return {"transitions": self.transitions, "handled": self.handled, "lost": len(self.lost),
                "doubled": len(self.doubled), "duplicatesRecorded": self.duplicates_recorded,
                "supersededRecorded": self.superseded_recorded, "runs": self.runs, "pending": self.pending,
                "pods": self.pods, "late": self.late, "failedRuns": self.failed_runs,
                "unconfirmed": self.unconfirmed, "byReaction": dict(self.by_reaction), "byPath": dict(self.by_path),
                "latency": self.latency_summary(),
                "lostExamples": [f"{s.namespace}/{s.name} {s.reaction} {s.key}" for s in self.lost[:10]],
                "doubledExamples": [f"{s.namespace}/{s.name} {s.reaction} {s.key}: {names}"
                                    for s, names in self.doubled[:10]]}


def wait_for_reactions(api: client.ApiClient, watcher: TransitionWatch, *, timeout_s: float, quiet_s: float = 30.0,
                       progress: Any = None, stall_s: float | None = None) -> Tally:
    """Poll until every transition seen has its reaction and no run is pending (or the timeout): the tally.
    `stall_s`: also stop when no run is pending and nothing changed for that long (a product without the
    catch-up sweep never answers what its event path lost)."""
    deadline = time.monotonic() + timeout_s
    tally = Tally()
    last, since = (-1, -1), time.monotonic()
    while True:
        tally = Tally.of(watcher.transitions(api), reaction_runs(api), watcher.markers())
        if progress is not None:
            progress(tally)
        if (not tally.lost and not tally.pending) or time.monotonic() > deadline:
            return tally
        if (tally.handled, tally.runs) != last:
            last, since = (tally.handled, tally.runs), time.monotonic()
        elif stall_s is not None and not tally.pending and time.monotonic() - since > stall_s:
            return tally
        time.sleep(quiet_s)
