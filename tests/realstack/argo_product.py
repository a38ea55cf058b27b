"""The product installed on the real Argo stack, shared by every module that runs the whole loop.

The installing itself is product code (gpuaas.cluster.install: `gpuaas demo --stack real` needs it too);
this module gives the tests its names with a RealCluster, and the tests' own helpers (a GPU Job, its Workload).
Installing is idempotent (server-side apply), so each module asks for it and the second ask costs a few seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from kubernetes import client

from gpuaas.cluster import install as product_install
from gpuaas.cluster.install import IDLE_LISTENING, LISTENING, PRODUCT_NAMESPACE, logs, running_pod
from tests.support.real_cluster import RealCluster, eventually

__all__ = ["IDLE_LISTENING", "LISTENING", "PRODUCT_NAMESPACE", "apply", "gpu_job", "install", "logs", "own_tenant",
           "policy_with", "product_with_tenant", "reaction_run", "remove_tenant", "running_pod", "tenant_policy", "workload_of"]


def apply(cluster: RealCluster, objects: list[dict]) -> None:
    product_install.apply(cluster.kubeconfig, objects, field_manager="gpuaas-tests")


def own_tenant(name: str, gpus: int = 2, flavor: str = "gpu-a100") -> list[dict]:
    """A test module's own tenant: its namespace, a ClusterQueue outside the cohort with `gpus` GPUs (so no
    other Job takes its quota and provision-quota, which splits the cohort, leaves it alone), its LocalQueue."""
    labels = {"app.kubernetes.io/part-of": "gpuaas-tests"}
    return [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": name, "labels": {**labels, "gpuaas.io/tenant": name}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": {"name": name, "labels": labels},
         "spec": {"namespaceSelector": {"matchLabels": {"gpuaas.io/tenant": name}},
                  "queueingStrategy": "BestEffortFIFO",
                  "resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"], "flavors": [
                      {"name": flavor, "resources": [{"name": "cpu", "nominalQuota": "8"},
                                                     {"name": "memory", "nominalQuota": "32Gi"},
                                                     {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": name, "namespace": name, "labels": labels}, "spec": {"clusterQueue": name}},
    ]


def remove_tenant(cluster: RealCluster, name: str, *, timeout_s: float = 180.0) -> None:
    """Delete the tenant's namespace and ClusterQueue, and wait until the ClusterQueue is gone: Kueue keeps a
    deleted one, inactive (reason Terminating), while an admitted Workload holds its quota, and the next module
    on the shared cluster must not find it so (CI run ciE: test_doctor right after test_argo_warn, whose Job
    `keep` was still admitted, found it and blocked). The namespace's deletion removes those Workloads."""
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
    cluster.kubectl("delete", "clusterqueue", name, "--wait=false", check=False)

    def gone() -> bool:
        found = cluster.kubectl("get", "clusterqueue", name, "--ignore-not-found", "-o", "name", check=False)
        return found.returncode == 0 and not found.stdout.strip()

    eventually(gone, timeout_s=timeout_s, poll_s=1.0,
               what=f"ClusterQueue {name} deleted (Kueue keeps it while a Workload admitted to it is left: "
                    f"kubectl get workloads -n {name})")


def policy_with(text: str, section: str) -> str:
    """The policy document with a tenant's `section` added under `tenants:`, which must be its last section."""
    if not text.rstrip().splitlines()[-1].startswith(" ") or "\ntenants:" not in text:
        raise AssertionError(f"expected the policy's last section to be `tenants:`, found:\n{text}")
    return text.rstrip("\n") + section


@contextmanager
def tenant_policy(cluster: RealCluster, section: str, added: Callable[[str], str]) -> Iterator[None]:
    """A tenant's `section` in the product's policy ConfigMap while the block runs, removed after. `added(text)`
    is the document with the section added (and checked). The section is put back each second whenever it is
    gone: on a shared cluster another module's `install` re-applies the rendered policy (seen: the on-idle step
    then judged the tenant by the defaults, minimum runtime 1 h)."""
    from steps.policy import CONFIG_MAP, KEY

    core = client.CoreV1Api(cluster.admin)

    def keep(stop: threading.Event | None) -> None:
        while True:
            current = core.read_namespaced_config_map(CONFIG_MAP, PRODUCT_NAMESPACE).data[KEY]
            if section not in current:
                core.patch_namespaced_config_map(CONFIG_MAP, PRODUCT_NAMESPACE, {"data": {KEY: added(current)}})
            if stop is None or stop.wait(1.0):
                return

    stop = threading.Event()
    keeper = threading.Thread(target=keep, args=(stop,), daemon=True)
    keep(None)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join(timeout=10)
        current = core.read_namespaced_config_map(CONFIG_MAP, PRODUCT_NAMESPACE).data[KEY]
        if section in current:
            core.patch_namespaced_config_map(CONFIG_MAP, PRODUCT_NAMESPACE,
                                             {"data": {KEY: current.replace(section, "\n")}})


def install(cluster: RealCluster, listening: tuple[tuple[str, str], ...] = LISTENING) -> RealCluster:
    """The product and the example tenants on the cluster, with the named pods listening."""
    try:
        product_install.install(cluster.kubeconfig, cluster.admin, listening, field_manager="gpuaas-tests")
    except product_install.InstallError as error:
        raise AssertionError(str(error)) from None
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


def admitted_workload_of_owner(custom: client.CustomObjectsApi, namespace: str, owner: str) -> dict | None:
    """Kueue's admitted Workload whose ownerReferences name `owner` (a StatefulSet's pod group), or None."""
    for workload in custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "workloads")["items"]:
        owned = any(r.get("name") == owner for r in workload["metadata"].get("ownerReferences") or [])
        admitted = any(c["type"] == "Admitted" and c["status"] == "True"
                       for c in (workload.get("status") or {}).get("conditions") or [])
        if owned and admitted:
            return workload
    return None


def sensor_run(custom: client.CustomObjectsApi, core: client.CoreV1Api, namespace: str, workload: str,
               timeout_s: float = 120) -> dict:
    """The gpuaas-on-admitted Workflow the Sensor submits for this admitted Workload; else an AssertionError with
    the EventSource's and the Sensor's logs (where the event stopped)."""
    try:
        return eventually(lambda: reaction_run(custom, "on-admitted", namespace, workload), timeout_s=timeout_s,
                          what=f"a gpuaas-on-admitted Workflow for Workload {workload}")
    except AssertionError as error:
        raise AssertionError(f"{error}\nEventSource:\n{logs(core, 'eventsource-name=gpuaas-workloads')}\n"
                             f"Sensor:\n{logs(core, 'sensor-name=gpuaas-on-admitted')}") from None


def reaction_runs(custom: client.CustomObjectsApi, reaction: str, namespace: str, workload: str) -> list[dict]:
    """The Workflows of `reaction` (label gpuaas.io/reaction) whose parameters name this Workload."""
    items = custom.list_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows",
                                                 label_selector=f"gpuaas.io/reaction={reaction}")["items"]
    def names_it(item: dict) -> bool:
        parameters = {p["name"]: p.get("value") for p in item["spec"]["arguments"]["parameters"]}
        return parameters.get("workload") == workload and parameters.get("namespace") == namespace
    return [item for item in items if names_it(item)]


def finished_workflow(custom: client.CustomObjectsApi, name: str, timeout_s: float = 300) -> dict:
    """The product's Workflow `name` once it has finished (Succeeded, Failed or Error)."""
    return eventually(lambda: (w := custom.get_namespaced_custom_object(
        "argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows", name)).get("status", {}).get("phase")
        in ("Succeeded", "Failed", "Error") and w, timeout_s=timeout_s, what=f"Workflow {name} finished")


def reaction_run(custom: client.CustomObjectsApi, reaction: str, namespace: str, workload: str) -> dict | None:
    """The first Workflow of `reaction` whose parameters name this Workload, once made."""
    return next(iter(reaction_runs(custom, reaction, namespace, workload)), None)


@contextmanager
def product_with_tenant(argo_cluster: RealCluster, tenant: str, section: str, added: Callable[[str], str], *,
                        flavor: str = "gpu-a100") -> Iterator[RealCluster]:
    """The product installed (idle listening), a module's own tenant (`own_tenant`) and its policy `section`
    (`tenant_policy`) while the block runs; the tenant removed after."""
    cluster = install(argo_cluster, IDLE_LISTENING)
    apply(cluster, own_tenant(tenant, flavor=flavor))
    try:
        with tenant_policy(cluster, section, added):
            yield cluster
    finally:
        remove_tenant(cluster, tenant)
