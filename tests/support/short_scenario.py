"""One short scenario, run the same way on the emulation (engine/) and on the real stack.

    tenant team-b (manifests/examples) submits a 2-pod, 1-GPU-each batch Job to its LocalQueue
    -> Kueue admits it                                  -> on-admitted
    -> release-workers (deactivate-workload)            -> Kueue evicts it, the Job is suspended
    -> resume-workers                                   -> Kueue admits it again
    -> the Job's pods complete                          -> Kueue marks the Workload Finished
    -> on-finished

Each step is `python -m steps REACTION` (as the template's ServiceAccount on the real stack, through
the engine's unauthenticated API server on the emulation). The Workload's watch stream is recorded
by the engine's resource watcher configured from the rendered EventSource `gpuaas-workloads`
(as the EventSource's ServiceAccount on the real stack), so the stream is what Argo Events would
publish. After each reaction the objects are read back and reduced to what the product and Kueue
decide (`Snapshot`): names, uids, times and resourceVersions differ between the two by nature.

The two backends differ only where a stand-in is unavoidable:
- real: kube-apiserver, Kueue v0.19.2, the Job controller, the scheduler and KWOK's pods; the pods
  complete when the test sets KWOK's completion delay to 0 (the program exiting);
- emulation: engine.apiserver, engine.kueue; no Job controller, so "the pods complete" is the
  Job's status `Complete=True` written by the test (what the Job controller would write).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import kubernetes
import yaml

from engine.resource_watcher import ResourceWatcher, WatchedResource
from steps.gateways import resources as R
from steps.gateways.kubernetes import KubernetesGateway
from tests.support.real_steps import StepRun
from tests.support.real_workloads import FINISH_NOW, RUNNING, queue_gpus

ROOT = Path(__file__).resolve().parents[2]
EVENT_SOURCE = ROOT / "manifests" / "base" / "events" / "eventsource-gpuaas-workloads.yaml"
TENANTS = ROOT / "manifests" / "examples" / "tenants" / "tenants.yaml"
PRODUCT = [ROOT / "manifests" / "base" / name for name in ("namespace.yaml", "rbac.yaml", "policy.yaml")]
NAMESPACE = "team-b"
JOB_NAME = "compare-train"
GPU = "nvidia.com/gpu"
JSON = dict[str, Any]


def job() -> JSON:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": JOB_NAME, "namespace": NAMESPACE, "labels": {"kueue.x-k8s.io/queue-name": NAMESPACE}},
            "spec": {"parallelism": 2, "completions": 2, "suspend": True, "template": {
                "metadata": {"annotations": dict(RUNNING)},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "train", "image": "registry.invalid/gpuaas-test:1",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi", GPU: "1"}, "limits": {GPU: "1"}}}]}}}}


def event_source() -> JSON:
    return yaml.safe_load(EVENT_SOURCE.read_text())


def conditions_of(workload: JSON) -> tuple[tuple[str, str, str], ...]:
    """(type, status, reason) of every condition, by type: what changed, not when."""
    items = (workload.get("status") or {}).get("conditions") or []
    return tuple(sorted((c["type"], c["status"], c.get("reason", "")) for c in items))


@dataclass(frozen=True)
class Snapshot:
    """The objects after one step, reduced to what Kueue and the product decided."""

    step: str
    workload_active: bool
    conditions: tuple[tuple[str, str, str], ...]
    admitted_to: str | None
    gpus_assigned: float
    release_record: JSON | None
    job_suspended: bool
    job_annotations: tuple[str, ...]
    queue_gpus_reserved: float

    def as_dict(self) -> JSON:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def snapshot(step: str, workload: JSON, job_object: JSON, cluster_queue: JSON) -> Snapshot:
    status = workload.get("status") or {}
    admission = status.get("admission") or {}
    gpus = 0.0
    for assignment in admission.get("podSetAssignments") or []:
        gpus += float((assignment.get("resourceUsage") or {}).get(GPU, "0"))
    annotations = workload["metadata"].get("annotations") or {}
    record = json.loads(annotations["gpuaas.io/release"]) if "gpuaas.io/release" in annotations else None
    if record:
        record = {k: record[k] for k in ("strategy", "tenant", "gpus", "by", "target", "previous") if k in record}
    job_annotations = tuple(sorted(k for k in (job_object["metadata"].get("annotations") or {})
                                   if k.startswith("gpuaas.io/")))
    return Snapshot(step, (workload.get("spec") or {}).get("active", True) is not False, conditions_of(workload),
                    admission.get("clusterQueue"), gpus, record, bool(job_object["spec"].get("suspend")),
                    job_annotations, queue_gpus(cluster_queue))


class Backend(Protocol):
    name: str
    api: kubernetes.client.ApiClient

    def watcher_configuration(self) -> tuple[str, kubernetes.client.Configuration | None]: ...
    def run_step(self, reaction: str, **params: str) -> StepRun: ...
    def complete_job(self) -> None: ...


@dataclass
class Recorded:
    """What one run of the scenario saw."""

    backend: str
    events: list[JSON] = field(default_factory=list)
    snapshots: list[Snapshot] = field(default_factory=list)
    steps: list[StepRun] = field(default_factory=list)
    workload: str = ""

    def workload_events(self) -> list[JSON]:
        return [e for e in self.events
                if ((e["data"].get("body") or {}).get("metadata") or {}).get("name") == self.workload]

    def condition_sequence(self) -> list[tuple[tuple[str, str, str], ...]]:
        """The Workload's conditions after each event, consecutive repeats folded (time-free)."""
        sequence: list[tuple[tuple[str, str, str], ...]] = []
        for event in self.workload_events():
            current = conditions_of(event["data"]["body"])
            if not sequence or sequence[-1] != current:
                sequence.append(current)
        return sequence


def gateway(api: kubernetes.client.ApiClient) -> KubernetesGateway:
    """The steps' own gateway (dicts in and out) over a copy of the client's configuration."""
    return KubernetesGateway(copy.copy(api.configuration), component="gpuaas-tests")


def wait_for(check: Callable[[], Any], what: str, timeout_s: float = 120) -> Any:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"expected {what} within {timeout_s:g}s; last seen {last!r}")


@contextmanager
def recording(backend: Backend, sink: list[JSON]) -> Iterator[None]:
    """The rendered EventSource's Workload watch, as the engine's resource watcher runs it."""
    lock = threading.Lock()

    def collect(event: JSON) -> None:
        with lock:
            sink.append(event)

    url, configuration = backend.watcher_configuration()
    watchers = [ResourceWatcher(url, watched, collect, configuration=configuration, watch_timeout_seconds=30)
                for watched in WatchedResource.from_event_source(event_source())]
    for watcher in watchers:
        watcher.start()
    try:
        for watcher in watchers:
            if not watcher.ready.wait(30):
                raise AssertionError(f"the watch of {watcher.watched.path()} did not list within 30s")
        yield
    finally:
        time.sleep(1.0)  # the last status writes reach the stream
        for watcher in watchers:
            watcher.stop()


def run(backend: Backend) -> Recorded:
    """The scenario on one backend; every step's outcome is asserted on the way."""
    api = gateway(backend.api)
    recorded = Recorded(backend.name)

    def workload_of(uid: str) -> JSON | None:
        found = [w for w in api.list(R.WORKLOAD, NAMESPACE)
                 if any(ref.get("uid") == uid for ref in w["metadata"].get("ownerReferences") or [])]
        return found[0] if len(found) == 1 else None

    def condition(workload: JSON | None, kind: str) -> str | None:
        for item in ((workload or {}).get("status") or {}).get("conditions") or []:
            if item["type"] == kind:
                return item["status"]
        return None

    def take(step: str) -> None:
        """The objects once Kueue's writes for the last change are done: the ClusterQueue's status counts
        what the Workload holds (written after the Workload's, asynchronously) and an admitted Workload
        carries PodsReady (the job reconciler's write after the scheduler's); wait_for fails if not."""
        def settled() -> Snapshot | None:
            taken = snapshot(step, api.get(R.WORKLOAD, recorded.workload, NAMESPACE) or {},
                             api.get(R.JOB, JOB_NAME, NAMESPACE) or {}, api.get(R.CLUSTER_QUEUE, NAMESPACE) or {})
            states = {(c[0], c[1]) for c in taken.conditions}
            reserved = ("QuotaReserved", "True") in states and ("Finished", "True") not in states
            if ("Admitted", "True") in states and not any(c[0] == "PodsReady" for c in taken.conditions):
                return None  # Kueue's job reconciler writes PodsReady right after an admission
            return taken if taken.queue_gpus_reserved == (taken.gpus_assigned if reserved else 0.0) else None
        recorded.snapshots.append(wait_for(settled, f"{backend.name}: ClusterQueue {NAMESPACE}'s status after {step}",
                                           timeout_s=60))

    def step(reaction: str, outcome: str, actions: tuple[str, ...], **params: str) -> StepRun:
        """One reaction; its outcome and planned actions must be exactly these (a batch Job: on-admitted and
        on-finished plan nothing but the handled-transition marker (steps.delivery), the release deactivates the
        Workload and the resume reactivates it)."""
        done = backend.run_step(reaction, namespace=NAMESPACE, workload=recorded.workload, event="", **params)
        recorded.steps.append(done)
        planned = tuple(a["action"] for a in done.plan.get("actions") or [])
        assert (done.outcome, planned) == (outcome, actions), (
            f"{backend.name}: {reaction}: expected {outcome} planning {list(actions)}, found {done.outcome} planning "
            f"{list(planned)}\n{done.describe()}")
        return done

    with recording(backend, recorded.events):
        created = api.create(R.JOB, job(), NAMESPACE)
        uid = created["metadata"]["uid"]
        admitted = wait_for(lambda: (w := workload_of(uid)) and condition(w, "Admitted") == "True" and w,
                            f"{backend.name}: the Job's Workload admitted")
        recorded.workload = admitted["metadata"]["name"]
        take("admitted")
        step("on-admitted", "no-op", ("mark-handled",))
        take("on-admitted")
        step("release-workers", "applied", ("deactivate-workload",))
        wait_for(lambda: condition(api.get(R.WORKLOAD, recorded.workload, NAMESPACE), "QuotaReserved") == "False",
                 f"{backend.name}: the Workload's quota released")
        wait_for(lambda: (api.get(R.JOB, JOB_NAME, NAMESPACE) or {}).get("spec", {}).get("suspend") is True,
                 f"{backend.name}: the Job suspended")
        take("release-workers")
        step("resume-workers", "applied", ("reactivate-workload",))
        wait_for(lambda: condition(api.get(R.WORKLOAD, recorded.workload, NAMESPACE), "Admitted") == "True",
                 f"{backend.name}: the Workload admitted again")
        wait_for(lambda: (api.get(R.JOB, JOB_NAME, NAMESPACE) or {}).get("spec", {}).get("suspend") is False,
                 f"{backend.name}: the Job running again")
        take("resume-workers")
        backend.complete_job()
        wait_for(lambda: condition(api.get(R.WORKLOAD, recorded.workload, NAMESPACE), "Finished") == "True",
                 f"{backend.name}: the Workload Finished")
        wait_for(lambda: queue_gpus(api.get(R.CLUSTER_QUEUE, NAMESPACE) or {}) == 0,
                 f"{backend.name}: the ClusterQueue holding nothing")
        take("finished")
        step("on-finished", "no-op", ("mark-handled",))
        take("on-finished")
    return recorded


def pods_ready(api: KubernetesGateway) -> bool:
    """Kueue counted the Job's pods ready: its Workload's PodsReady is True."""
    for workload in api.list(R.WORKLOAD, NAMESPACE):
        if any(ref.get("name") == JOB_NAME and ref.get("kind") == "Job"
               for ref in workload["metadata"].get("ownerReferences") or []):
            return ("PodsReady", "True") in {(c[0], c[1]) for c in conditions_of(workload)}
    return False


def route(events: list[JSON], workdir: Path) -> list[JSON]:
    """`gpuaas route` on the recorded events with the rendered Sensors: one answer per event."""
    path = workdir / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    done = subprocess.run([str(Path(sys.executable).parent / "gpuaas"), "route", "--manifests", str(ROOT / "manifests"),
                           "--events", str(path), "--output", "json"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    decoder = json.JSONDecoder()
    answers, text, index = [], done.stdout, 0
    while index < len(text):
        while index < len(text) and text[index].isspace():
            index += 1
        if index >= len(text):
            break
        answer, index = decoder.raw_decode(text, index)
        answers.append(answer)
    assert len(answers) == len(events), f"expected one answer per event, got {len(answers)} for {len(events)}"
    return answers


def fired(answer: JSON) -> list[str]:
    """The sensors that would submit a workflow for this event."""
    return sorted(t["sensor"] for t in answer.get("triggered") or [])


# -- the two backends ------------------------------------------------------------------------------


def _objects(path: Path) -> list[JSON]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


class EmulatedBackend:
    """engine.apiserver + engine.kueue; steps through GPUAAS_KUBE_URL (no authentication there)."""

    name = "emulation"

    def __init__(self, workdir: Path) -> None:
        from engine.apiserver import ApiServer
        from engine.kueue import KueueController

        self.workdir = workdir
        self.server = ApiServer()
        self.url = self.server.start()
        configuration = kubernetes.client.Configuration()
        configuration.host = self.url
        self.api = kubernetes.client.ApiClient(configuration)
        api = gateway(self.api)
        objects = [o for path in (*PRODUCT, TENANTS) for o in _objects(path)]
        by_kind = {r.kind: r for r in vars(R).values() if isinstance(r, R.Resource)}
        for obj in sorted(objects, key=lambda o: o["kind"] != "Namespace"):
            if obj["kind"] in by_kind:  # RBAC means nothing to the emulation: no authentication there
                api.create(by_kind[obj["kind"]], obj, obj["metadata"].get("namespace"))
        self.kueue = KueueController.over_url(self.url)
        self.kueue.start()
        self.runs = 0

    def close(self) -> None:
        self.kueue.stop()
        self.server.stop()

    def watcher_configuration(self) -> tuple[str, kubernetes.client.Configuration | None]:
        return self.url, None

    def run_step(self, reaction: str, **params: str) -> StepRun:
        self.runs += 1
        params = {"dry-run": "false", **params}
        params_file = self.workdir / f"{self.runs:03d}-{reaction}.params.json"
        params_file.write_text(json.dumps([{"name": k, "value": v} for k, v in params.items()]))
        outputs = self.workdir / f"{self.runs:03d}-{reaction}.outputs"
        outputs.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUAAS_") and k != "KUBECONFIG"}
        env.update({"GPUAAS_KUBE_URL": self.url, "GPUAAS_OUTPUTS_DIR": str(outputs), "GPUAAS_NAMESPACE": "gpuaas",
                    "PYTHONPATH": str(ROOT)})
        done = subprocess.run([sys.executable, "-m", "steps", reaction, str(params_file)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        files = {p.name: p.read_text() for p in outputs.iterdir() if p.is_file()}
        record = json.loads(files["record"]) if files.get("record") else {}
        return StepRun(reaction, params, done.returncode, files.get("outcome", "").strip(), record, done.stdout,
                       done.stderr, "", files)

    def complete_job(self) -> None:
        """What the Job controller writes (there is none in the emulation): its 2 pods ready, then, once
        Kueue counted them (PodsReady), both succeeded."""
        api = gateway(self.api)
        api.merge_patch(R.JOB, JOB_NAME, {"status": {"active": 2, "ready": 2}}, NAMESPACE, subresource="status")
        wait_for(lambda: pods_ready(api), "emulation: the Workload PodsReady")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        gateway(self.api).merge_patch(R.JOB, JOB_NAME, {"status": {"ready": 0,
            "succeeded": 2, "active": 0, "completionTime": now,
            "conditions": [{"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now},
                           {"type": "Complete", "status": "True", "lastTransitionTime": now}]}},
            NAMESPACE, subresource="status")


class RealBackend:
    """The real stack (tests.support.real_cluster): steps as their templates' ServiceAccounts, the watch
    as the EventSource's ServiceAccount, the pods run by KWOK."""

    name = "real"

    def __init__(self, real_cluster: Any, workdir: Path) -> None:
        from tests.support.real_steps import RealSteps

        self.cluster = real_cluster
        self.api = real_cluster.admin
        for path in (*PRODUCT, TENANTS):
            real_cluster.kubectl("apply", "--server-side", "--field-manager=gpuaas-tests", "-f", str(path))
        self.steps = RealSteps(real_cluster, workdir)
        api = gateway(self.api)
        if api.get(R.JOB, JOB_NAME, NAMESPACE) is not None:  # a previous run on a reused cluster
            api.delete(R.JOB, JOB_NAME, NAMESPACE)
            wait_for(lambda: api.get(R.JOB, JOB_NAME, NAMESPACE) is None, "the previous run's Job deleted")

    def close(self) -> None:
        api = gateway(self.api)
        if api.get(R.JOB, JOB_NAME, NAMESPACE) is not None:
            api.delete(R.JOB, JOB_NAME, NAMESPACE)

    def watcher_configuration(self) -> tuple[str, kubernetes.client.Configuration | None]:
        account = event_source()["spec"]["template"]["serviceAccountName"]
        configuration = kubernetes.client.Configuration()
        configuration.host = self.cluster.server
        configuration.ssl_ca_cert = self.cluster.ca_file
        configuration.api_key = {"authorization": self.cluster.service_account_token("gpuaas", account)}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        return self.cluster.server, configuration

    def run_step(self, reaction: str, **params: str) -> StepRun:
        return self.steps.run(reaction, **params)

    def complete_job(self) -> None:
        """The Job's programs exit 0: KWOK completes its running pods at once (delay 0)."""
        core = kubernetes.client.CoreV1Api(self.api)

        def running() -> list[Any]:
            return [p for p in core.list_namespaced_pod(NAMESPACE, label_selector=f"job-name={JOB_NAME}").items
                    if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]

        pods = wait_for(lambda: len(running()) == 2 and running(), "the Job's 2 pods running")
        wait_for(lambda: pods_ready(gateway(self.api)), "real: the Workload PodsReady")
        for pod in pods:
            core.patch_namespaced_pod(pod.metadata.name, NAMESPACE,
                                      {"metadata": {"annotations": dict(FINISH_NOW)}})
