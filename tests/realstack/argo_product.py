"""The product installed on the real Argo stack, shared by every module that runs the whole loop.

Why one place: the modules that drive the product through real Argo (the admission loop, the idle
loop, audit against the Argo Server) all need the same thing first: the rendered base applied with
this stack's EventBus and step image, the example tenants, and the EventSource and Sensor pods not
just Running but listening (see `install`). Installing is idempotent (server-side apply), so each
module asks for it and the second ask costs a few seconds.
"""

from __future__ import annotations

import yaml
from kubernetes import client

from gpuaas.cluster.binaries import program
from gpuaas.cluster.product import stack_objects
from tests.realstack.test_kueue_admission import TENANTS
from tests.support.real_cluster import RealCluster, eventually

PRODUCT_NAMESPACE = "gpuaas"

LISTENING = (("eventsource-name=gpuaas-workloads", "listening to resource events"),
             ("sensor-name=gpuaas-on-admitted", "started subscribing to events"),
             ("sensor-name=gpuaas-on-finished", "started subscribing to events"))
"""Upstream's log lines that mark an EventSource's informer running and a Sensor subscribed."""


def apply(cluster: RealCluster, objects: list[dict]) -> None:
    namespaces = [o for o in objects if o["kind"] == "Namespace"]
    rest = [o for o in objects if o["kind"] != "Namespace"]
    for batch in (namespaces, rest):
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=gpuaas-tests", "-f", "-",
                        input_text=yaml.safe_dump_all(batch, sort_keys=False))


def running_pod(core: client.CoreV1Api, label: str) -> client.V1Pod | None:
    pods = core.list_namespaced_pod(PRODUCT_NAMESPACE, label_selector=label).items
    for pod in pods:
        statuses = pod.status.container_statuses or []
        if pod.status.phase == "Running" and statuses and all(s.ready for s in statuses):
            return pod
    return None


def logs(core: client.CoreV1Api, label: str, tail_lines: int | None = 40) -> str:
    out = []
    for pod in core.list_namespaced_pod(PRODUCT_NAMESPACE, label_selector=label).items:
        try:
            out.append(f"--- {pod.metadata.name}\n" + core.read_namespaced_pod_log(
                pod.metadata.name, PRODUCT_NAMESPACE, tail_lines=tail_lines))
        except client.ApiException as error:
            out.append(f"--- {pod.metadata.name}: no log ({error.status})")
    return "\n".join(out)


def install(cluster: RealCluster, listening: tuple[tuple[str, str], ...] = LISTENING) -> RealCluster:
    """The product and the example tenants on the cluster, with the named pods listening."""
    apply(cluster, stack_objects(program("kubernetes", "kubectl")))
    # --force-conflicts: on a reused cluster the product's gpuaas-provision-quota (run by the capacity-clock
    # EventSource) has since set the ClusterQueues' quotas as field manager "gpuaas".
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=gpuaas-tests", "-k",
                    str(TENANTS))
    core = client.CoreV1Api(cluster.admin)
    for label, _ in listening:
        try:
            pod = eventually(lambda label=label: running_pod(core, label), timeout_s=240,
                             what=f"the pod with {label} Running and ready")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{logs(core, label)}") from None
        assert pod.spec.node_name == "gpuaas-node"
    # Running is not listening: the EventSource's informer lists after leader election and the EventBus
    # connection, and a Sensor only gets what is published after it subscribed. A Job admitted before
    # then comes to the informer already admitted (an ADD), and no Sensor fires (seen: a run whose Job
    # was admitted 1 s before the informer started). Upstream's log lines mark both moments.
    for label, line in listening:
        try:
            eventually(lambda label=label, line=line: line in logs(core, label, tail_lines=None), timeout_s=120,
                       what=f"the pod with {label} logging {line!r}")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{logs(core, label)}") from None
    return cluster


def gpu_job(namespace: str, *, name: str | None = None, generate_name: str | None = None, pods: int = 1,
            gpus_per_pod: int = 1, annotations: dict[str, str] | None = None) -> dict:
    """A suspended batch Job for the LocalQueue named as its namespace (the example tenants' and the
    tests' own), `pods` pods of `gpus_per_pod` GPUs. KWOK runs and completes its pods at once unless
    the pod annotations say otherwise (gpuaas.cluster.kwok)."""
    metadata: dict = {"namespace": namespace, "labels": {"kueue.x-k8s.io/queue-name": namespace},
                      **({"name": name} if name else {"generateName": generate_name})}
    template: dict = {"spec": {"restartPolicy": "Never", "containers": [{
        "name": "main", "image": "registry.invalid/train:1", "resources": {
            "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus_per_pod)},
            "limits": {"nvidia.com/gpu": str(gpus_per_pod)}}}]}}
    if annotations:
        template["metadata"] = {"annotations": annotations}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
            "spec": {"parallelism": pods, "completions": pods, "suspend": True, "template": template}}


def workload_of(custom: client.CustomObjectsApi, namespace: str, uid: str) -> dict | None:
    """Kueue's Workload for the job with this uid, once Kueue has made it."""
    items = custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "workloads",
                                                 label_selector=f"kueue.x-k8s.io/job-uid={uid}")["items"]
    return items[0] if items else None
