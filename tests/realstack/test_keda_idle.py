"""gpuaas' idle ScaledObject on real KEDA, Kueue-admitted GPU servers and the stack's Prometheus.

Issue 10 items 2 and 3. The steps run as processes (`python -m steps <reaction> PARAMS`), as in their
pods, with the rendered RBAC's gpuaas-steps ServiceAccount, against the real apiserver (tests.support.real_steps:
a request the audit log shows denied fails the step's test, as in the other step tests):
- `on-admitted` makes the ScaledObject for a Deployment whose pods Kueue admitted (the product's own
  object, nothing overridden): KEDA takes an idle server to 0 no sooner than its
  initialCooldownPeriod (the old object: at its first poll with data; the idle server's pods have
  reported for the whole window and minimum runtime before the ScaledObject is made, so its query
  has a value from the first poll and only the initialCooldownPeriod holds them), and holds a busy server at
  its recorded size (its HPA has min = max; the old one resized 3 -> ceil(0.06 / 0.05) = 2);
- `resume-workers target=Deployment/<name>` brings the server back to its size, and KEDA leaves
  the resumed pods alone until they have reported for a whole idle window and run for the minimum
  runtime (the first query judged them at their first sample, the next one after one window: KEDA's
  cooldowns count from the ScaledObject's creation and its last activity, both long past);
- after a release (`pause-keda`: paused-replicas "0"), `resume-workers` brings the recorded replicas
  back (removing the pause alone leaves the Deployment at 0);
- a Deployment an HPA already scales: KEDA's webhook refuses a ScaledObject for it, and
  `on-admitted` makes none.

The GPU activity comes from the stack's DCGM-like exporter (its one stand-in): a pod's utilization
is its annotation `gpuaas.io/emulated-gpu-utilization`. The tenant's idle policy (ConfigMap
gpuaas-policy in namespace gpuaas) has a 30 s window, threshold 0.05 and a 75 s minimum runtime,
longer than the window by more than KEDA's 30 s polling so that "too soon" is told apart from a late poll. When the server
went to 0 is read from the Deployment controller's own Events ("Scaled down replica set ... to 0").
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from gpuaas.manifests import platform, rbac
from steps.reactions.on_admitted import activity_query
from tests.support.real_cluster import RealCluster, eventually
from tests.support.real_steps import RealSteps

pytestmark = pytest.mark.real_shard("keda-idle")
"""A plain cluster of its own, beside the `cluster` shard's (tests/support/real_shards.py): about 9 minutes of
KEDA cooldowns and idle windows, mostly waiting, that would otherwise lengthen the longest shard."""

ROOT = Path(__file__).resolve().parents[2]
TENANTS = ROOT / "manifests" / "examples" / "tenants"
NAMESPACE = "team-a"
WINDOW_S = 30
MIN_RUNTIME_S = 75
UTILIZATION = "gpuaas.io/emulated-gpu-utilization"
JSON = dict[str, Any]


def _apply(real_cluster: RealCluster, objects: list[JSON]) -> None:
    real_cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=gpuaas-tests", "-f", "-",
                         input_text=yaml.safe_dump_all(objects))


def _policy() -> JSON:
    document = {"tenants": {NAMESPACE: {"idle": {"window": f"{WINDOW_S}s", "threshold": 0.05,
                                                 "minRuntime": f"{MIN_RUNTIME_S}s", "minCoverage": 0.5}}}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gpuaas-policy", "namespace": "gpuaas"},
            "data": {"policy.yaml": yaml.safe_dump(document)}}


@pytest.fixture(scope="module")
def steps_kubeconfig(real_cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The rendered RBAC of the steps, the example tenants, this test's idle policy; a kubeconfig of gpuaas-steps."""
    real_cluster.kubectl("create", "namespace", "gpuaas", check=False)
    real_cluster.kubectl("apply", "--server-side", "--field-manager=gpuaas-tests", "-k", str(TENANTS))
    _apply(real_cluster, [*platform.service_accounts(), *rbac.objects(), _policy()])
    path = real_cluster.service_account_kubeconfig("gpuaas", platform.STEPS_ACCOUNT,
                                                   tmp_path_factory.mktemp("steps") / "kubeconfig")
    try:
        yield path
    finally:
        real_cluster.kubectl("delete", "configmap", "gpuaas-policy", "-n", "gpuaas", "--ignore-not-found")


def _step(real_cluster: RealCluster, kubeconfig: Path, tmp_path: Path, reaction: str, expected: tuple[str, ...],
          **params: str) -> JSON:
    """One step as its pod runs it, as its template's ServiceAccount (gpuaas-steps, whose token `kubeconfig` holds),
    through tests.support.real_steps: a transient failure (exit 75) is retried as the template's retryStrategy
    does, and a request kube-apiserver's audit log shows denied fails the test whatever the outcome. `expected`:
    the outcome, then the names of the actions it must plan, exactly. Returns the record."""
    done = RealSteps(real_cluster, tmp_path / f"steps-{time.monotonic_ns()}").run(reaction, **params)
    planned = tuple(a["action"] for a in done.plan.get("actions") or [])
    assert done.account == platform.STEPS_ACCOUNT and (done.outcome, *planned) == expected, (
        f"expected {reaction} to end {expected[0]} planning {list(expected[1:])}, found {done.outcome} planning "
        f"{list(planned)}\n{done.describe()}")
    return done.record


def _deployment(name: str, replicas: int, utilization: str) -> JSON:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"kueue.x-k8s.io/queue-name": NAMESPACE}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}, "annotations": {UTILIZATION: utilization}},
                "spec": {"containers": [{"name": "server", "image": "registry.invalid/llm-server:1",
                                         "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                                                       "limits": {"nvidia.com/gpu": "1"}}}]}}}}


def _running_pods(real_cluster: RealCluster, name: str) -> list[Any]:
    pods = client.CoreV1Api(real_cluster.admin).list_namespaced_pod(NAMESPACE, label_selector=f"app={name}").items
    return [p for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]


def _workload_of(real_cluster: RealCluster, pod_names: set[str]) -> str:
    """An admitted Workload of one of the pods (Kueue's pod integration: one Workload per pod)."""
    items = client.CustomObjectsApi(real_cluster.admin).list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", NAMESPACE, "workloads")["items"]
    for wl in items:
        owners = {o["name"] for o in wl["metadata"].get("ownerReferences") or [] if o["kind"] == "Pod"}
        admitted = any(c["type"] == "Admitted" and c["status"] == "True"
                       for c in (wl.get("status") or {}).get("conditions") or [])
        if owners & pod_names and admitted:
            return wl["metadata"]["name"]
    return ""


def _replicas(real_cluster: RealCluster, name: str) -> int:
    return int(client.AppsV1Api(real_cluster.admin).read_namespaced_deployment(name, NAMESPACE).spec.replicas or 0)


class ReplicaWatch:
    """Every spec.replicas value the Deployment showed while the test polled it."""

    def __init__(self, real_cluster: RealCluster, name: str) -> None:
        self.real_cluster, self.name, self.seen = real_cluster, name, set()

    def until(self, wanted: int, timeout_s: float, what: str) -> None:
        def check() -> bool:
            value = _replicas(self.real_cluster, self.name)
            self.seen.add(value)
            return value == wanted
        eventually(check, timeout_s=timeout_s, poll_s=1, what=f"{what} ({self.name} at {wanted}; seen {self.seen})")

    def hold(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.seen.add(_replicas(self.real_cluster, self.name))
            time.sleep(1)


def _scaled_to_zero(real_cluster: RealCluster, name: str) -> Any:
    """The Deployment controller's Event for scaling the server's ReplicaSet to 0 (count and
    lastTimestamp grow when it happens again, as the same ReplicaSet is scaled down again)."""
    uid = client.AppsV1Api(real_cluster.admin).read_namespaced_deployment(name, NAMESPACE).metadata.uid
    events = client.CoreV1Api(real_cluster.admin).list_namespaced_event(
        NAMESPACE, field_selector=f"involvedObject.uid={uid}").items
    down = [e for e in events if e.reason == "ScalingReplicaSet" and e.message.endswith(" to 0")]
    assert len(down) == 1, [e.message for e in events]
    return down[0]


def _scaled_object(real_cluster: RealCluster, name: str) -> JSON:
    return client.CustomObjectsApi(real_cluster.admin).get_namespaced_custom_object(
        "keda.sh", "v1alpha1", NAMESPACE, "scaledobjects", name)


def _judged(real_cluster: RealCluster, name: str) -> bool:
    """The query on-admitted puts in the Deployment's ScaledObject has a value in the stack's Prometheus:
    its pods have reported for max(window, minimum runtime)."""
    query = activity_query(NAMESPACE, {"kind": "Deployment", "metadata": {"name": name}}, WINDOW_S, MIN_RUNTIME_S)
    url = f"{real_cluster.endpoint('prometheus')}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return bool(json.loads(answer.read())["data"]["result"])


def _start(real_cluster: RealCluster, steps_kubeconfig: Path, tmp_path: Path, name: str, replicas: int,
           utilization: str, judged_first: bool = False) -> str:
    """The Deployment, admitted by Kueue and Running; on-admitted for one of its pods' Workloads
    (`judged_first`: once the ScaledObject's query has a value, so that KEDA's cooldown alone holds it)."""
    apps = client.AppsV1Api(real_cluster.admin)
    _delete(real_cluster, name)
    apps.create_namespaced_deployment(NAMESPACE, _deployment(name, replicas, utilization))
    pods = eventually(lambda: len(p := _running_pods(real_cluster, name)) == replicas and p, timeout_s=120,
                      what=f"{replicas} pods of {name} admitted by Kueue and Running")
    workload = eventually(lambda: _workload_of(real_cluster, {p.metadata.name for p in pods}), timeout_s=60,
                          what=f"an admitted Workload of a pod of {name}")
    if judged_first:
        eventually(lambda: _judged(real_cluster, name), timeout_s=MIN_RUNTIME_S + 120, poll_s=2,
                   what=f"the activity query of {name}'s pods with a value (reported for {MIN_RUNTIME_S}s)")
    # a hand submission (no event): its claim on the admission, the ScaledObject, then the marker (steps.delivery)
    _step(real_cluster, steps_kubeconfig, tmp_path, "on-admitted",
          ("applied", "claim", "create-scaled-object", "mark-handled"),
          namespace=NAMESPACE, workload=workload)
    return f"gpuaas-{name}"


def _delete(real_cluster: RealCluster, name: str) -> None:
    try:
        client.AppsV1Api(real_cluster.admin).delete_namespaced_deployment(name, NAMESPACE,
                                                                          propagation_policy="Foreground")
    except client.ApiException as error:
        if error.status != 404:
            raise
    eventually(lambda: not client.CoreV1Api(real_cluster.admin).list_namespaced_pod(
        NAMESPACE, label_selector=f"app={name}").items, timeout_s=120, what=f"the pods of {name} gone")


def test_an_idle_server_goes_to_zero_no_sooner_than_its_cooldown_and_comes_back_by_hand(
        real_cluster: RealCluster, steps_kubeconfig: Path, tmp_path: Path) -> None:
    name = "idle-server"
    try:
        scaled = _start(real_cluster, steps_kubeconfig, tmp_path, name, replicas=2, utilization="0",
                        judged_first=True)
        watch = ReplicaWatch(real_cluster, name)
        so = _scaled_object(real_cluster, scaled)
        spec = so["spec"]
        assert (spec["idleReplicaCount"], spec["minReplicaCount"], spec["maxReplicaCount"]) == (0, 2, 2)
        assert spec["initialCooldownPeriod"] == spec["cooldownPeriod"] == max(WINDOW_S, MIN_RUNTIME_S)

        # Idle from the start and its query judging it from KEDA's first poll: to 0, but not before
        # initialCooldownPeriod after the ScaledObject was made (KEDA v2.20.2 scaleToZeroOrIdle: no
        # lastActiveTime, creation + initialCooldownPeriod).
        watch.until(0, timeout_s=300, what="the idle server scaled to 0 by KEDA")
        assert watch.seen <= {2, 0}, f"KEDA scaled to another size: {watch.seen}"
        created = datetime.fromisoformat(so["metadata"]["creationTimestamp"])
        first = _scaled_to_zero(real_cluster, name)
        assert (first.first_timestamp - created).total_seconds() >= spec["initialCooldownPeriod"], (
            f"scaled to 0 at {first.first_timestamp}, ScaledObject made at {created}")

        # By hand: resume-workers names the Deployment (its pods, hence its Workloads, are gone); KEDA, not gpuaas,
        # took it to 0, so there is no pause to remove: only the replicas KEDA cannot bring back from 0.
        _step(real_cluster, steps_kubeconfig, tmp_path, "resume-workers", ("applied", "restore-replicas"),
              namespace=NAMESPACE, target=f"Deployment/{name}")
        watch.until(2, timeout_s=10, what="the server back at its recorded size")
        pods = eventually(lambda: len(p := _running_pods(real_cluster, name)) == 2 and p, timeout_s=120,
                          what="the resumed pods Running")
        # Still idle: back to 0, but only once the resumed pods have reported for a whole window and
        # run for the minimum runtime.
        watch.until(0, timeout_s=360, what="the resumed, idle server back to 0")
        started = max(p.status.start_time for p in pods)
        # The Deployment shows 0 before its controller has scaled the ReplicaSet and counted the Event again.
        again = eventually(lambda: (event := _scaled_to_zero(real_cluster, name)).count == 2 and event, timeout_s=60,
                           what="the Deployment controller's Event of scaling to 0 counted a second time")
        held = max(WINDOW_S, MIN_RUNTIME_S)
        assert (again.last_timestamp - started).total_seconds() >= held, (
            f"the resumed server went to 0 at {again.last_timestamp}, before {held}s (window {WINDOW_S}s, "
            f"minimum runtime {MIN_RUNTIME_S}s) after {started}")
        assert watch.seen <= {2, 0}
    finally:
        _delete(real_cluster, name)


def test_a_busy_server_keeps_its_size_and_resume_after_a_pause_brings_it_back(
        real_cluster: RealCluster, steps_kubeconfig: Path, tmp_path: Path) -> None:
    name = "busy-server"
    try:
        scaled = _start(real_cluster, steps_kubeconfig, tmp_path, name, replicas=3, utilization="6")
        watch = ReplicaWatch(real_cluster, name)
        # Busy at 6% (threshold 5%): KEDA's HPA reads the activity and wants the recorded 3, nothing else.
        autoscaling = client.AutoscalingV2Api(real_cluster.admin)
        def computed() -> bool:
            hpa = autoscaling.read_namespaced_horizontal_pod_autoscaler(f"keda-hpa-{scaled}", NAMESPACE)
            watch.seen.add(_replicas(real_cluster, name))
            return any(c.type == "ScalingActive" and c.status == "True" and c.reason == "ValidMetricFound"
                       for c in hpa.status.conditions or [])
        # The query is empty until the pods have reported for a whole window and the minimum runtime;
        # then the HPA has a value.
        eventually(computed, timeout_s=300, poll_s=2, what="KEDA's HPA reading the activity (ValidMetricFound)")
        watch.hold(30)
        hpa = autoscaling.read_namespaced_horizontal_pod_autoscaler(f"keda-hpa-{scaled}", NAMESPACE)
        assert (hpa.spec.min_replicas, hpa.spec.max_replicas, hpa.status.desired_replicas) == (3, 3, 3)
        assert watch.seen == {3}, f"a busy server was resized: {watch.seen}"

        # Released (pause-keda), then resumed: the recorded 3 come back, not just the pause removed.
        pods = {p.metadata.name for p in _running_pods(real_cluster, name)}
        _step(real_cluster, steps_kubeconfig, tmp_path, "release-workers",
              ("applied", "pause-keda", "record-release-on-workload"), namespace=NAMESPACE,
              workload=_workload_of(real_cluster, pods))
        watch.until(0, timeout_s=120, what="KEDA holding the paused server at 0")
        eventually(lambda: not _running_pods(real_cluster, name), timeout_s=120, what="the paused server's pods gone")

        _step(real_cluster, steps_kubeconfig, tmp_path, "resume-workers", ("applied", "unpause-keda", "restore-replicas"),
              namespace=NAMESPACE, target=f"Deployment/{name}")
        annotations = _scaled_object(real_cluster, scaled)["metadata"].get("annotations") or {}
        assert "autoscaling.keda.sh/paused-replicas" not in annotations
        watch.until(3, timeout_s=10, what="the Deployment back at its recorded replicas")
        eventually(lambda: len(_running_pods(real_cluster, name)) == 3, timeout_s=120, what="3 pods Running again")
        watch.hold(30)
        assert _replicas(real_cluster, name) == 3, f"KEDA undid the resume: {watch.seen}"
    finally:
        _delete(real_cluster, name)


def test_a_deployment_an_hpa_scales_gets_no_scaled_object(
        real_cluster: RealCluster, steps_kubeconfig: Path, tmp_path: Path) -> None:
    name = "hpa-server"
    autoscaling = client.AutoscalingV2Api(real_cluster.admin)
    custom = client.CustomObjectsApi(real_cluster.admin)
    try:
        _delete(real_cluster, name)
        client.AppsV1Api(real_cluster.admin).create_namespaced_deployment(NAMESPACE, _deployment(name, 1, "0"))
        autoscaling.create_namespaced_horizontal_pod_autoscaler(NAMESPACE, {
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": name},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                     "minReplicas": 1, "maxReplicas": 2,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                         "type": "Utilization", "averageUtilization": 80}}}]}})
        # KEDA's webhook refuses a second autoscaler for the target. It lists HPAs through its manager's
        # cached client (KEDA v2.20 apis/keda/v1alpha1/scaledobject_webhook.go: kc = mgr.GetClient(),
        # verifyHpas -> kc.List), so an HPA made a moment ago may not be in its cache yet: a probe the
        # webhook let through is deleted and tried again until the cache has the HPA.
        def refusal() -> str | None:
            probe = f"probe-{name}"
            try:
                custom.create_namespaced_custom_object("keda.sh", "v1alpha1", NAMESPACE, "scaledobjects", {
                    "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": probe},
                    "spec": {"scaleTargetRef": {"name": name}, "triggers": [{"type": "prometheus", "metadata": {
                        "serverAddress": real_cluster.endpoint("prometheus"), "query": "vector(1)",
                        "threshold": "1"}}]}})
            except client.ApiException as refused:
                return refused.body
            custom.delete_namespaced_custom_object("keda.sh", "v1alpha1", NAMESPACE, "scaledobjects", probe)
            return None

        body = eventually(refusal, timeout_s=60, poll_s=2, what="KEDA's webhook refusing the probe ScaledObject")
        assert f"already managed by the hpa '{name}'" in body
        pods = eventually(lambda: _running_pods(real_cluster, name), timeout_s=120, what=f"the pod of {name} Running")
        workload = eventually(lambda: _workload_of(real_cluster, {p.metadata.name for p in pods}), timeout_s=60,
                              what=f"the admitted Workload of {name}'s pod")
        # no ScaledObject (someone else autoscales it); only the admission's marker, bookkeeping (outcome no-op)
        record = _step(real_cluster, steps_kubeconfig, tmp_path, "on-admitted", ("no-op", "mark-handled"),
                       namespace=NAMESPACE, workload=workload)
        assert f"HorizontalPodAutoscaler {name} already scales Deployment {name}" in " ".join(
            record["data"]["plan"]["reasons"])
        assert not [so for so in custom.list_namespaced_custom_object("keda.sh", "v1alpha1", NAMESPACE,
                                                                      "scaledobjects")["items"]
                    if so["spec"]["scaleTargetRef"]["name"] == name]
    finally:
        try:
            autoscaling.delete_namespaced_horizontal_pod_autoscaler(name, NAMESPACE)
        except client.ApiException as error:
            if error.status != 404:
                raise
        _delete(real_cluster, name)
