"""`gpuaas demo --stack real`: the demo's story (engine/demo.py, the same code) on the real stack.

The stack is `gpuaas cluster up --with events`: real kube-apiserver, Kueue (admits), KubeRay and the
training-operator (run the Ray cluster and the PyTorchJob), KWOK GPU nodes (run the pods), the real
node running Argo Events' EventSources and Sensors and Argo Workflows' step pods, the stack's
Prometheus + Alertmanager with the product's alert rules, the Argo Server with its PostgreSQL archive.
`RealBackend` is how each step of the story is done there:

- objects are applied with the pinned kubectl (server-side apply), as a tenant would;
- STAND-INS: no Kubeflow Notebook or KServe controller runs on the stack, so the backend creates what
  they would (the StatefulSet / the predictor Deployment, controlled by the CR, the CR's labels copied
  as KServe propagates them); KWOK runs the pods; the stack's DCGM-like exporter reads each pod's
  utilization from its annotation `gpuaas.io/emulated-gpu-utilization` (set here: `set_activity`);
- a Job or PyTorchJob "completes" when its pods are told to (KWOK's pod-complete delay annotations);
- the admin's resume is the real argo CLI: `argo submit --from workflowtemplate/gpuaas-resume-workers`;
- every reaction is a real Workflow the real Sensors submitted; the report's runs are read back from
  the Argo Server (gpuaas.audit's client: live and archived, PostgreSQL) and written to runs.json.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from engine import demo_cluster as cluster
from engine.demo import (
    DemoOptions,
    DemoResult,
    DemoStalled,
    Sample,
    Scenario,
    build_summary,
    workflow_template,
)
from engine.timeline import summarize_outcome
from engine.workload_pods import holds_quota
from gpuaas.invocation import command

REAL_SPEED = 120.0
"""Demo seconds per wall second on the real stack: the story's pauses (210 demo minutes) take under two
wall minutes, and a reaction (20-35 s wall from event to Workflow Succeeded) still spans about an hour of
the demo clock, so each shows on the chart and the timeline."""
UTILIZATION_ANNOTATION = "gpuaas.io/emulated-gpu-utilization"
COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
COMPLETE_JITTER = "pod-complete.stage.kwok.x-k8s.io/jitter-delay"
"""KWOK completes a Job's (and, on this stack, a PyTorchJob's) pods after the delay, and waits the jitter-delay
whenever it is not longer than the delay: both are set (gpuaas.cluster.kwok)."""
RUNNING_FOR = "3600s"
KUEUE = ("kueue.x-k8s.io", "v1beta2")
ARGO = ("argoproj.io", "v1alpha1")
PRODUCT_NAMESPACE = "gpuaas"
REACTION_LABEL = "gpuaas.io/reaction"
SENSOR_LABEL = "events.argoproj.io/sensor"
"""What Argo Events' argoWorkflow trigger labels its submissions with: a run routed from an event has it, a
run submitted by hand (the resume) has not. `events_routed` counts these, not "every run but the resume"."""
DONE = ("Succeeded", "Failed", "Error")
QUIET_SECONDS = 8.0
"""settle(): no new run for this long (an event reaches `argo submit` in 1-6 s on this stack)."""
DEMO_NAMESPACES = frozenset(t.namespace for t in cluster.TENANTS)
FIELD_MANAGER = "gpuaas-demo"
DEMO_LABEL = "app.kubernetes.io/managed-by"
"""Set to FIELD_MANAGER on the demo's namespaces, ClusterQueues, flavor and LocalQueues: what a later demo may
delete (the namespaces) or apply over (the rest). An object of the same name without it stops the demo."""
CLAIMED_KINDS = ("Namespace", "ClusterQueue", "ResourceFlavor")
STAND_IN_OWNERS = ("Notebook", "InferenceService")
"""Kinds whose controller does not run here: their pods come from the StatefulSet / Deployment made for them."""
STAND_INS = (
    ("Kubeflow Notebook and KServe controllers (the demo creates the StatefulSet and predictor Deployment they "
     "would)"),
    "KWOK GPU nodes run the tenants' pods",
    "the stack's DCGM-like exporter (utilization from the pod annotation gpuaas.io/emulated-gpu-utilization)",
)


class StackNotReady(RuntimeError):
    """The --state-dir names no ready cluster with the events part: says what to do."""


def check_stack(state_dir: Path) -> dict[str, Any]:
    """`gpuaas cluster status` of the state dir, if ready with the events part; else StackNotReady."""
    from gpuaas.cluster.stack import Cluster

    if not state_dir.is_dir():
        raise StackNotReady(f"--state-dir {state_dir}: expected the folder of a cluster started with `{command()} cluster "
                            f"up --with events --state-dir {state_dir}`, found "
                            f"{'a file' if state_dir.exists() else 'no folder'}; start one, or leave out "
                            "--state-dir and the demo starts (and stops) its own")
    status = Cluster(state_dir).status()
    if status.get("phase") != "ready":
        raise StackNotReady(f"--state-dir {state_dir}: expected a ready cluster, found phase "
                            f"{status.get('phase', '?')}; start it with `{command()} cluster up --with events --state-dir "
                            f"{state_dir}` (or see `{command()} cluster status --state-dir {state_dir}`)")
    if "events" not in (status.get("parts") or []):
        raise StackNotReady(f"--state-dir {state_dir}: expected the events part (Argo Events, Argo Workflows, the "
                            f"alert path), found parts {status.get('parts') or []}; restart it with `{command()} cluster "
                            f"down --state-dir {state_dir}` then `{command()} cluster up --with events --state-dir "
                            f"{state_dir}`")
    return status


def demo_policy_tenants(window: str) -> str:
    """The demo tenants' idle settings, added under the policy's `tenants:`: the window the stack's
    GPUWorkloadIdle rule uses (`gpuaas cluster up --idle-window`), no minimum runtime, enforce."""
    lines = ["\n  # added by `gpuaas demo --stack real`: the demo's tenants, the stack's idle window"]
    for tenant in cluster.TENANTS:
        lines.append(f"  {tenant.name}:\n    idle:\n      window: {window}\n      minRuntime: 0s\n"
                     f"      mode: enforce\n      maxReleasesPerHour: 100")
    return "\n".join(lines) + "\n"


def with_demo_tenants(policy_text: str, window: str) -> str:
    """The policy document with the demo's tenants under `tenants:` (replacing an earlier demo's)."""
    from steps.policy import parse_policy

    marker = "\n  # added by `gpuaas demo --stack real`"
    base = policy_text.split(marker, 1)[0].rstrip("\n")
    if "\ntenants:" not in base or not base.splitlines()[-1].startswith(" "):
        raise StackNotReady(f"expected the product's policy to end with its `tenants:` section, found:\n{policy_text}")
    changed = base + "\n" + demo_policy_tenants(window)
    parsed = parse_policy(changed)
    for tenant in cluster.TENANTS:
        settings = parsed.idle_for(tenant.name)
        if settings.mode != "enforce":
            raise StackNotReady(f"the demo's policy for {tenant.name} did not parse as enforce: {settings}")
    return changed


def platform_objects() -> list[dict[str, Any]]:
    """The demo's tenants (engine/demo_cluster.py) for the stack: no Nodes (KWOK's are there), no policy
    ConfigMap (the product's is amended), the flavor tolerating the GPU nodes' taint as Kueue injects it;
    each labelled as the demo's (DEMO_LABEL)."""
    objects = []
    for obj in cluster.platform_objects(""):
        if obj["kind"] in ("Node", "ConfigMap"):
            continue
        if obj["kind"] == "Namespace" and obj["metadata"]["name"] == cluster.POLICY_NAMESPACE:
            continue
        if obj["kind"] == "ResourceFlavor":
            obj = {**obj, "spec": {**obj["spec"], "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}
        labels = {**(obj["metadata"].get("labels") or {}), DEMO_LABEL: FIELD_MANAGER}
        objects.append({**obj, "metadata": {**obj["metadata"], "labels": labels}})
    return objects


def _writers(obj: dict[str, Any]) -> list[str]:
    """Who wrote the object's spec and metadata (managedFields; status writers, e.g. Kueue's, left out)."""
    return sorted({f.get("manager", "?") for f in obj["metadata"].get("managedFields") or []
                   if not f.get("subresource")})


def not_the_demos(live: list[dict[str, Any]]) -> list[tuple[str, str, list[str]]]:
    """Of the live objects bearing the demo's names, those the demo did not make: (kind, name, writers).

    The demo's: labelled DEMO_LABEL=gpuaas-demo, or (made by a demo before that label) a namespace only the
    demo ever wrote, a ClusterQueue or flavor the demo applied. Anything else someone else made: the demo
    must neither delete it (namespaces) nor apply over it (--force-conflicts takes its fields)."""
    foreign = []
    for obj in live:
        writers = _writers(obj)
        if (obj["metadata"].get("labels") or {}).get(DEMO_LABEL) == FIELD_MANAGER:
            continue
        if writers == [FIELD_MANAGER] or (obj["kind"] != "Namespace" and FIELD_MANAGER in writers):
            continue
        foreign.append((obj["kind"], obj["metadata"]["name"], writers))
    return foreign


def existing_demo_objects(api_client: Any) -> list[dict[str, Any]]:
    """The live Namespaces, ClusterQueues and ResourceFlavors that have the demo's names (dicts as served)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    names = {(o["kind"], o["metadata"]["name"]) for o in platform_objects() if o["kind"] in CLAIMED_KINDS}
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    live = [{**api_client.sanitize_for_serialization(n), "kind": "Namespace"}  # a list's items carry no kind
            for n in core.list_namespace().items if ("Namespace", n.metadata.name) in names]
    for kind, plural in (("ClusterQueue", "clusterqueues"), ("ResourceFlavor", "resourceflavors")):
        for obj_kind, name in sorted(names):
            if obj_kind != kind:
                continue
            try:
                live.append({"kind": kind, **custom.get_cluster_custom_object(*KUEUE, plural, name)})
            except ApiException as error:
                if error.status != 404:
                    raise
    return live


def check_demo_names_free(api_client: Any) -> list[str]:
    """The demo's earlier namespaces (to delete), after checking nothing of its names is someone else's;
    StackNotReady naming what is not the demo's, before anything changes."""
    live = existing_demo_objects(api_client)
    foreign = not_the_demos(live)
    if foreign:
        found = "; ".join(f"{kind} {name} (written by {', '.join(writers) or '?'})" for kind, name, writers in foreign)
        raise StackNotReady(f"expected the demo's names free or made by an earlier demo (label {DEMO_LABEL}="
                            f"{FIELD_MANAGER}), found {found}: the demo would delete or overwrite them; nothing was "
                            "changed: run it on a cluster of its own (leave out --state-dir)")
    return [o["metadata"]["name"] for o in live if o["kind"] == "Namespace"]


def _pod_templates(node: Any) -> list[dict[str, Any]]:
    """Every pod template in an object (Deployment, StatefulSet, Job, RayCluster groups, PyTorchJob replicas)."""
    found = []
    if isinstance(node, dict):
        template = node.get("template")
        if isinstance(template, dict) and "containers" in (template.get("spec") or {}):
            found.append(template)
        for value in node.values():
            found += _pod_templates(value)
    elif isinstance(node, list):
        for value in node:
            found += _pod_templates(value)
    return found


def _time(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


class RealBackend:
    """The story's steps on the real stack (the module docstring)."""

    def __init__(self, kubeconfig: Path, api_client: Any, scenario: RealScenario) -> None:
        from kubernetes import client

        self.kubeconfig = kubeconfig
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.scenario = scenario
        self.activity: dict[tuple[str, str], float] = {}
        self.notes: list[tuple[float, str, str]] = []  # (epoch, event, outcome)

    # -- DemoBackend --------------------------------------------------------------------------------

    def note(self, event: str, outcome: str = "") -> None:
        self.notes.append((time.time(), event, outcome))
        self.scenario.say(f"  {self.scenario.clock.now().strftime('%H:%M:%S')}  {event}"
                          + (f" [{outcome}]" if outcome else ""))

    def apply(self, objects: list[dict[str, Any]], owner: str | None = None) -> None:
        from gpuaas.cluster.install import apply

        prepared = []
        for obj in objects:
            obj = json.loads(json.dumps(obj))
            name = owner or obj["metadata"]["name"]
            percent = self.activity.get((obj["metadata"].get("namespace", ""), name), 100)
            for template in [] if obj["kind"] in STAND_IN_OWNERS else _pod_templates(obj):
                annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
                annotations[UTILIZATION_ANNOTATION] = str(int(percent))
                if obj["kind"] in ("Job", "PyTorchJob"):  # run until finish() says otherwise
                    annotations[COMPLETE_DELAY] = annotations[COMPLETE_JITTER] = RUNNING_FOR
            prepared.append(obj)
        apply(self.kubeconfig, prepared, FIELD_MANAGER)

    def _live(self, obj: dict[str, Any]) -> dict[str, Any]:
        from gpuaas.cluster.install import kubectl

        group = obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else ""
        resource = f"{obj['kind'].lower()}.{group}" if group else obj["kind"].lower()
        done = kubectl(self.kubeconfig, "get", resource, obj["metadata"]["name"], "-n",
                       obj["metadata"]["namespace"], "-o", "json")
        return json.loads(done.stdout)

    def apply_owned(self, child: dict[str, Any], owner: dict[str, Any]) -> None:
        """STAND-IN for the owner's controller (Kubeflow Notebook, KServe: none runs on the stack)."""
        live = self._live(owner)
        child = cluster.owned_by(child, live)
        if child["kind"] == "Deployment":  # KServe propagates the InferenceService's labels (the queue name)
            labels = {**(owner["metadata"].get("labels") or {}), **child["metadata"].get("labels", {})}
            child = {**child, "metadata": {**child["metadata"], "labels": labels}}
        self.apply([child], owner=owner["metadata"]["name"])

    def _pods_of(self, namespace: str, owner: str) -> list[Any]:
        """The owner's pods: the demo's objects name their pods after themselves (nb-alice-0,
        llm-chat-predictor-..., ray-vision-head-..., train-llm-master-0, eval-batch-...)."""
        return [p for p in self.core.list_namespaced_pod(namespace).items
                if p.metadata.name.startswith(owner + "-") and not p.metadata.deletion_timestamp]

    def set_activity(self, namespace: str, owner: str, percent: float) -> None:
        self.activity[(namespace, owner)] = percent
        for pod in self._pods_of(namespace, owner):
            self.core.patch_namespaced_pod(pod.metadata.name, namespace, {"metadata": {"annotations": {
                UTILIZATION_ANNOTATION: str(int(percent))}}})

    def finish(self, obj: dict[str, Any]) -> None:
        """The pods complete (KWOK, told by their delay annotations); the Job's / training-operator's
        controller then marks the job succeeded and Kueue the Workload Finished."""
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]

        def told() -> bool:
            pods = self._pods_of(namespace, name)
            if not pods or any(p.status.phase == "Pending" for p in pods):
                return False
            for pod in pods:
                self.core.patch_namespaced_pod(pod.metadata.name, namespace, {"metadata": {"annotations": {
                    COMPLETE_DELAY: "1s", COMPLETE_JITTER: "1s"}}})
            return True
        self.scenario.wait_for(f"the pods of {obj['kind']} {namespace}/{name} running, to complete them", told,
                               seen=lambda: [(p.metadata.name, p.status.phase) for p in self._pods_of(namespace, name)])

    def workloads(self, namespace: str) -> list[dict[str, Any]]:
        return self.custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"]

    def workload_of(self, namespace: str, owner: str) -> dict[str, Any] | None:
        """Kueue's Workload owned by the object, or by one of its pods (Kueue's pod integration backs a
        Deployment: one Workload per pod, owned by the pod)."""
        candidates = []
        for workload in self.workloads(namespace):
            for reference in workload["metadata"].get("ownerReferences") or []:
                name = reference.get("name", "")
                if name == owner:
                    return workload
                if reference.get("kind") == "Pod" and name.startswith(owner + "-"):
                    candidates.append(workload)
        return candidates[-1] if candidates else None

    def _runs(self, template: str | None = None) -> list[dict[str, Any]]:
        """The live Workflows of the demo's tenants since the story began (Kubernetes, not the archive).
        By `spec.workflowTemplateRef`: a Sensor's submission carries no workflow-template label."""
        items = self.custom.list_namespaced_custom_object(*ARGO, PRODUCT_NAMESPACE, "workflows",
                                                          label_selector=REACTION_LABEL)["items"]
        return [i for i in items if self.scenario.ours(i) and template in (None, workflow_template(i))]

    def runs_of(self, template: str) -> list[dict[str, Any]]:
        return self._runs(template)

    def settle(self) -> None:
        """Every run of the demo's tenants finished, and no new one for QUIET_SECONDS."""
        state: dict[str, Any] = {"count": -1, "since": time.monotonic(), "open": []}

        def quiet() -> bool:
            runs = self._runs()
            state["open"] = [r["metadata"]["name"] for r in runs if (r.get("status") or {}).get("phase") not in DONE]
            if len(runs) != state["count"]:
                state["count"], state["since"] = len(runs), time.monotonic()
            return not state["open"] and time.monotonic() - state["since"] >= QUIET_SECONDS
        self.scenario.wait_for("the reactions so far finished (Workflows of the demo's tenants)", quiet,
                               timeout=self.scenario.options.wait_timeout,
                               seen=lambda: f"{state['count']} runs, unfinished: {state['open']}")

    def settle_handled(self) -> None:
        """Every transition of the demo's Workloads answered (its marker, steps.delivery): a job kind's is
        recorded by the catch-up sweep, up to a pass (a minute on this stack) after it; then settle()."""
        from steps.delivery import TRACKED, read_marker, transition_for

        state: dict[str, Any] = {"open": []}

        def answered() -> bool:
            state["open"] = []
            for namespace in DEMO_NAMESPACES:
                for workload in self.custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace,
                                                                          "workloads")["items"]:
                    for reaction in TRACKED:
                        transition = transition_for(reaction, workload)
                        marker = read_marker(workload, reaction)
                        if transition is not None and (marker is None or marker.transition != transition.key):
                            state["open"].append(f"{namespace}/{workload['metadata']['name']} {reaction}")
            return not state["open"]
        self.scenario.wait_for("every admission and finish of the demo's Workloads answered (the sweep records the "
                               "job kinds')", answered, timeout=self.scenario.options.wait_timeout,
                               seen=lambda: state["open"])
        self.settle()

    def submit_resume(self, namespace: str, workload: str) -> dict[str, Any]:
        """The admin's hand submission, with the real argo CLI from the WorkflowTemplate."""
        from gpuaas.cluster.binaries import program

        done = subprocess.run([str(program("argo-workflows", "argo")), f"--kubeconfig={self.kubeconfig}", "-n",
                               PRODUCT_NAMESPACE, "submit", "--from", "workflowtemplate/gpuaas-resume-workers",
                               "-p", f"namespace={namespace}", "-p", f"workload={workload}", "-o", "json"],
                              capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise DemoStalled(f"argo submit --from workflowtemplate/gpuaas-resume-workers failed "
                              f"({done.returncode}): {done.stderr.strip()}")
        name = json.loads(done.stdout)["metadata"]["name"]
        self.scenario.say(f"  {self.scenario.clock.now().strftime('%H:%M:%S')}  argo submit: {name}")
        found: dict[str, Any] = {}

        def finished() -> bool:
            found["run"] = self.custom.get_namespaced_custom_object(*ARGO, PRODUCT_NAMESPACE, "workflows", name)
            return (found["run"].get("status") or {}).get("phase") in DONE
        self.scenario.wait_for(f"Workflow {name} (gpuaas-resume-workers) finished", finished,
                               seen=lambda: (found.get("run", {}).get("status") or {}).get("phase"))
        return found["run"]

    def reaction_times(self, template: str) -> list[str]:
        return sorted(self.scenario.demo_time(_time(r["metadata"]["creationTimestamp"])).strftime("%H:%M:%S")
                      for r in self._runs(template))

    # -- the report's samples ---------------------------------------------------------------------------

    def sample(self) -> Sample:
        reserved = {t.name: 0 for t in cluster.TENANTS}
        held = {t.name: 0 for t in cluster.TENANTS}
        busy = {t.name: 0.0 for t in cluster.TENANTS}
        workloads: dict[str, dict[str, Any]] = {}
        from engine.demo import _workload_gpus

        for tenant in cluster.TENANTS:
            for workload in self.workloads(tenant.namespace):
                holds = holds_quota(workload)
                gpus = _workload_gpus(workload) if holds else 0
                workloads[f"{tenant.namespace}/{workload['metadata']['name']}"] = {
                    "gpus": gpus, "holds": holds, "active": (workload.get("spec") or {}).get("active", True) is not False}
                reserved[tenant.name] += gpus
            for pod in self.core.list_namespaced_pod(tenant.namespace, field_selector="status.phase=Running").items:
                gpus = sum(int(((c.resources.limits if c.resources else None) or {}).get(cluster.GPU) or 0)
                           for c in pod.spec.containers or [])
                percent = float((pod.metadata.annotations or {}).get(UTILIZATION_ANNOTATION, "100"))
                held[tenant.name] += gpus
                busy[tenant.name] = round(busy[tenant.name] + gpus * percent / 100.0, 3)
        return Sample(self.scenario.clock.hours(), reserved, held, busy, workloads)


class RealScenario(Scenario):
    """The story (Scenario._story, unchanged) on the stack in `state_dir`."""

    def __init__(self, options: DemoOptions, state_dir: Path, status: dict[str, Any]) -> None:
        super().__init__(options)
        self.state_dir = state_dir
        self.status = status
        self.epoch_start: float | None = None
        self.real: RealBackend | None = None
        self.metrics_urls = ("", "")

    def ours(self, run: dict[str, Any]) -> bool:
        """A run of the demo's tenants (its `namespace` argument) created since the story began."""
        parameters = {p["name"]: p.get("value") for p in
                      ((run.get("spec") or {}).get("arguments") or {}).get("parameters") or []}
        created = run["metadata"].get("creationTimestamp")
        return parameters.get("namespace") in DEMO_NAMESPACES and created is not None and \
            self.epoch_start is not None and _time(created) >= self.epoch_start - 1

    def demo_time(self, epoch: float) -> datetime:
        assert self.epoch_start is not None
        return self.clock.start + timedelta(seconds=(epoch - self.epoch_start) * self.options.speed)

    def _sample_loop(self) -> None:
        while not self._stop_sampling.wait(1.0):
            try:
                assert self.real is not None
                self.samples.append(self.real.sample())
            except Exception:  # noqa: BLE001, S112 - a missed sample must not stop the demo
                continue

    def _prepare(self, kubeconfig: Path, api_client: Any) -> None:
        """The product listening, the demo's tenants fresh (an earlier demo's deleted), the policy amended."""
        from kubernetes import client

        from gpuaas.cluster.install import IDLE_LISTENING, apply, install

        existing = check_demo_names_free(api_client)  # before anything changes
        self.say("installing the product on the stack (rendered base; EventSources and Sensors listening)")
        install(kubeconfig, api_client, IDLE_LISTENING, FIELD_MANAGER)
        core = client.CoreV1Api(api_client)
        if existing:
            self.say(f"deleting an earlier demo's namespaces (label {DEMO_LABEL}={FIELD_MANAGER}, or only the demo "
                     f"wrote them) with everything in them: {', '.join(existing)}")
            self.epoch_start = time.time()
            for namespace in existing:
                core.delete_namespace(namespace)
            self.wait_for(f"namespaces {existing} gone", lambda: not [
                n for n in core.list_namespace().items if n.metadata.name in existing], timeout=300,
                seen=lambda: [(n.metadata.name, n.status.phase) for n in core.list_namespace().items
                              if n.metadata.name in existing])
            # the deletion finishes Workloads (a deleted pod's), and the Sensors react: let those runs end
            # before the story, so none of them is counted in it or competes with it for the node
            assert self.real is not None
            self.real.settle()
        self.say("the demo's tenants: ClusterQueues research, vision, serving (4 GPUs each, cohort gpu-pool)")
        apply(kubeconfig, platform_objects(), FIELD_MANAGER)
        window = (self.status.get("idleRule") or {}).get("window", "30s")
        policy = core.read_namespaced_config_map("gpuaas-policy", PRODUCT_NAMESPACE)
        core.patch_namespaced_config_map("gpuaas-policy", PRODUCT_NAMESPACE, {"data": {
            "policy.yaml": with_demo_tenants(policy.data["policy.yaml"], window)}})
        self.say(f"policy: the demo's tenants idle after {window} (the stack's GPUWorkloadIdle window), enforce")
        custom = client.CustomObjectsApi(api_client)

        def active() -> bool:
            return all(any(c["type"] == "Active" and c["status"] == "True" for c in
                           (custom.get_cluster_custom_object(*KUEUE, "clusterqueues", t.name).get("status") or {})
                           .get("conditions") or []) for t in cluster.TENANTS)
        self.wait_for("the demo's ClusterQueues Active", active, timeout=120)

    def run(self) -> DemoResult:
        from kubernetes import config

        from gpuaas.audit.history import ArgoConnection, ArgoServerHistory

        options = self.options
        output = options.output_dir
        output.mkdir(parents=True, exist_ok=True)
        for name in ("runs.db", "cluster-snapshot.json"):  # an earlier fast demo's: not this run's
            (output / name).unlink(missing_ok=True)
        wall_started = time.monotonic()
        kubeconfig = Path(self.status["kubeconfig"])
        api_client = config.new_client_from_config(config_file=str(kubeconfig))
        self.real = RealBackend(kubeconfig, api_client, self)
        self._prepare(kubeconfig, api_client)
        self.backend = self.real
        endpoints = self.status["endpoints"]
        prometheus = next((c["endpoint"] for c in self.status.get("components") or [] if c["name"] == "prometheus"), "")
        self.metrics_urls = (prometheus, str(endpoints.get("alertmanager") or ""))
        self.metrics_mode = self.metrics_words(stopped=False)
        self.say(f"metrics: {self.metrics_mode}")
        self.say(f"demo time x{options.speed:g}: the story's pauses are short; a reaction (20-35 s wall) spans "
                 f"about {30 * options.speed / 3600:.1f} demo hours")
        sampler = threading.Thread(target=self._sample_loop, name="demo-sampler", daemon=True)
        self.clock.begin()
        self.epoch_start = time.time()
        sampler.start()
        try:
            self._story()
            assert self.real is not None
            self.real.settle_handled()
        finally:
            self._stop_sampling.set()
        server = endpoints["argo-server"]
        history = ArgoServerHistory(ArgoConnection(url=server, token=None, namespace=PRODUCT_NAMESPACE))
        self.say(f"reading the runs back from the Argo Server {server} (live and archived)")
        runs = [r.raw for r in history.runs(REACTION_LABEL) if self.ours(r.raw)]
        (output / "runs.json").write_text(json.dumps(runs, indent=1) + "\n")
        rows = self._timeline(runs)
        self._advise_real(prometheus, api_client)
        summary = build_summary(runs, self.samples, rows, speed=options.speed,
                                wall_seconds=time.monotonic() - wall_started, metrics_mode=self.metrics_mode,
                                step_mode="pods on the stack's real node (argoexec around the step image)",
                                events_routed=sum(1 for r in runs if (r["metadata"].get("labels") or {})
                                                  .get(SENSOR_LABEL)),
                                marks=self.marks, started=self.clock.start)
        summary.update({
            "stack": "real", "state_dir": str(self.state_dir),
            "story_started_at": datetime.fromtimestamp(self.epoch_start, UTC).isoformat(timespec="seconds"),
            "runs_source": f"Argo Server {server} (namespace {PRODUCT_NAMESPACE}; live and archived)",
            "stand_ins": list(STAND_INS),
            "files": {"runs": "runs.json", "report": "index.html",
                      "audit": f"{command()} audit --argo-server {server}"},
        })
        return self._result(summary, output)

    def metrics_words(self, *, stopped: bool) -> str:
        """summary.json's `metrics`: the stack's Prometheus and Alertmanager, at their URLs while the cluster runs
        (never a URL of a process the demo stopped)."""
        window = (self.status.get("idleRule") or {}).get("window", "30s")
        prometheus, alertmanager = self.metrics_urls
        where = ("Prometheus + Alertmanager (stopped with the demo's cluster)" if stopped
                 else f"Prometheus {prometheus} + Alertmanager {alertmanager}")
        return (f"the stack's {where} with the product's alert rules (idle window {window}); GPU utilization from "
                f"the stack's DCGM-like exporter (a stand-in: KWOK has no GPUs) reading each pod's annotation "
                f"{UTILIZATION_ANNOTATION}")

    def _advise_real(self, prometheus: str, api_client: Any) -> None:
        from kubernetes import client

        advisor = self.options.quota_advisor
        if advisor is None or not prometheus:
            self.quota_advice_error = "no quota advisor or no Prometheus on the stack"
            return
        try:
            queues = [client.CustomObjectsApi(api_client).get_cluster_custom_object(*KUEUE, "clusterqueues", t.name)
                      for t in cluster.TENANTS]
            self.quota_advice = advisor(prometheus, queues, self.clock.wall_seconds(), time.time())
        except Exception as error:  # noqa: BLE001 - the report says why instead of losing the whole run
            self.quota_advice_error = f"{type(error).__name__}: {error}"
            self.say(f"quota advice failed: {self.quota_advice_error}")

    def _timeline(self, runs: list[dict[str, Any]]) -> list[dict[str, str]]:
        """The story's notes and the runs (created, from the Argo Server), on the demo clock."""
        assert self.real is not None
        rows: list[tuple[float, dict[str, str]]] = []
        for epoch, event, outcome in self.real.notes:
            rows.append((epoch, {"time": self.demo_time(epoch).strftime("%H:%M:%S"), "event": event, "sensor": "",
                                 "workflow": "", "template": "", "outcome": outcome}))
        for run in runs:
            labels = run["metadata"].get("labels") or {}
            parameters = {p["name"]: p.get("value") for p in run["spec"]["arguments"].get("parameters") or []}
            epoch = _time(run["metadata"]["creationTimestamp"])
            what = parameters.get("workload") or "alert group"
            rows.append((epoch, {"time": self.demo_time(epoch).strftime("%H:%M:%S"),
                                 "event": f"{parameters.get('namespace', '')}/{what}",
                                 "sensor": labels.get(SENSOR_LABEL, "(by hand: argo submit)"),
                                 "workflow": run["metadata"]["name"], "template": workflow_template(run),
                                 "outcome": summarize_outcome(run)}))
        return [row for _, row in sorted(rows, key=lambda pair: pair[0])]


def run_real_demo(options: DemoOptions, state_dir: Path | None) -> DemoResult:
    """`gpuaas demo --stack real`: on the ready stack in state_dir, or on one started (and stopped) here."""
    from engine import report
    from gpuaas.cluster.stack import Cluster

    say = options.progress or (lambda _: None)
    started: Cluster | None = None
    try:
        if state_dir is None:
            from gpuaas.cluster.binaries import build_all

            # under /var/tmp: PostgreSQL's `postgres` user must traverse the archive's folder (tests/realstack/conftest.py)
            state_dir = Path(tempfile.mkdtemp(prefix="gpuaas-demo-stack-", dir="/var/tmp"))
            started = Cluster(state_dir, progress=say)  # from here the folder is removed however the run ends
            say(f"starting a cluster with the events part in {state_dir} (2-7 minutes; stopped at the end)")
            build_all(progress=say)
            started.up(timeout_s=1500, parts={"events"})
        status = check_stack(state_dir)
        scenario = RealScenario(options, state_dir, status)
        result = scenario.run()
    finally:
        if started is not None:
            say(f"stopping the cluster in {state_dir}")
            started.down(quiet=True)
            shutil.rmtree(started.state_dir, ignore_errors=True)
    if started is not None:  # its Argo Server is gone with it: say so instead of a stale audit command
        result.summary["files"]["audit"] = ("the demo's cluster was stopped: runs.json holds the runs; with "
                                            f"--state-dir the cluster stays for `{command()} audit --argo-server URL`")
        result.summary["state_dir"] = f"{state_dir} (started for the demo, stopped and removed)"
        result.summary["metrics"] = scenario.metrics_words(stopped=True)
    report.write(result.output_dir, result.summary, result.samples)
    (result.output_dir / "summary.json").write_text(json.dumps(result.summary, indent=2) + "\n")
    return result


__all__ = ["REAL_SPEED", "RealBackend", "RealScenario", "StackNotReady", "check_demo_names_free", "check_stack",
           "not_the_demos", "run_real_demo"]
