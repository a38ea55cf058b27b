"""The GPU node pool's ScaledObject on real KEDA, real Kueue metrics and the stack's Prometheus.

The product's node-pool ScaledObject (gpuaas/manifests/node_pool.py, rendered into every overlay)
targets a Cluster API MachineDeployment through its `/scale` subresource. Here the pool starts
with no nodes; a ClusterQueue whose GPU flavor is the pool's has no quota yet, so a Job's GPUs
queue and real Kueue reports them in `kueue_cluster_queue_resource_pending`, which the stack's
Prometheus scrapes. KEDA must grow the MachineDeployment from 0 to the nodes the queued GPUs need,
and never shrink it by itself when the demand goes away: judged only after the demand is seen gone (the
ScaledObject's query at 0, KEDA's trigger inactive), for KEDA's cooldown and four polls.

Stand-in: no Cluster API controller runs, so the test writes the MachineDeployment's
`status.selector` (the HPA controller refuses a scale target without one) as that controller
would. Nothing turns the replicas into nodes here.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from typing import Any

import yaml
from kubernetes import client

from gpuaas.manifests import node_pool
from tests.support.real_cluster import RealCluster, eventually

NAMESPACE = "node-pool-check"
POOL = "gpu-workers"
FLAVOR = "pool-check"
GPU = "nvidia.com/gpu"
SELECTOR = f"cluster.x-k8s.io/deployment-name={POOL}"
JSON = dict[str, Any]


def _apply(real_cluster: RealCluster, objects: list[JSON]) -> None:
    real_cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=gpuaas-tests", "-f", "-",
                         input_text=yaml.safe_dump_all(objects))


def _machine_deployment() -> JSON:
    return {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment",
            "metadata": {"name": POOL, "namespace": NAMESPACE},
            "spec": {"clusterName": "gpu-cluster", "replicas": 0,
                     "selector": {"matchLabels": {"cluster.x-k8s.io/deployment-name": POOL}},
                     "template": {"metadata": {"labels": {"cluster.x-k8s.io/deployment-name": POOL}},
                                  "spec": {"clusterName": "gpu-cluster", "bootstrap": {"dataSecretName": "none"},
                                           "infrastructureRef": {"kind": "DockerMachineTemplate", "name": "gpu"}}}}}


def _kueue_objects() -> list[JSON]:
    """A flavor for the pool's nodes (none exist yet) and a ClusterQueue with no GPU quota on it."""
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR},
         "spec": {"nodeLabels": {"gpuaas.io/node-pool": POOL}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": FLAVOR},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{
             "coveredResources": ["cpu", GPU],
             "flavors": [{"name": FLAVOR, "resources": [{"name": "cpu", "nominalQuota": 100},
                                                         {"name": GPU, "nominalQuota": 0}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": FLAVOR,
                                                                                   "namespace": NAMESPACE},
         "spec": {"clusterQueue": FLAVOR}},
    ]


def _job(gpus_per_pod: int, pods: int) -> JSON:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "needs-nodes", "namespace": NAMESPACE, "labels": {"kueue.x-k8s.io/queue-name": FLAVOR}},
            "spec": {"parallelism": pods, "completions": pods, "suspend": True, "template": {"spec": {
                "restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "registry.invalid/train:1",
                    "resources": {"requests": {"cpu": "1", GPU: str(gpus_per_pod)},
                                  "limits": {GPU: str(gpus_per_pod)}}}]}}}}


def _scaled_object(real_cluster: RealCluster) -> JSON:
    """The product's ScaledObject for the Kubernetes overlay's pool, for this test's pool and ClusterQueue
    (other tests' pending GPUs do not count), at the stack's Prometheus (the rendered in-cluster address
    does not resolve here), polling faster. The stack has no kube-state-metrics: the pool's nodes read
    as none, which is what a pool at 0 nodes reads anyway."""
    (rendered,) = [o for o in node_pool.kubernetes() if o["kind"] == "ScaledObject"]
    pool = node_pool.NodePool(rendered["spec"]["scaleTargetRef"]["apiVersion"], "MachineDeployment", POOL, NAMESPACE,
                              real_cluster.endpoint("prometheus"), cluster_queues=FLAVOR)
    scaled = node_pool.scaled_object(pool)
    assert scaled["metadata"]["annotations"] == rendered["metadata"]["annotations"]
    assert {k: v for k, v in scaled["spec"].items() if k not in ("scaleTargetRef", "triggers")} == {
        k: v for k, v in rendered["spec"].items() if k not in ("scaleTargetRef", "triggers")}
    scaled["spec"]["pollingInterval"] = 10
    scaled["spec"]["cooldownPeriod"] = 20
    return scaled


def _replicas(custom: client.CustomObjectsApi) -> int:
    md = custom.get_namespaced_custom_object("cluster.x-k8s.io", "v1beta1", NAMESPACE, "machinedeployments", POOL)
    return int(md["spec"].get("replicas") or 0)


def _keda_state(custom: client.CustomObjectsApi, name: str) -> str:
    so = custom.get_namespaced_custom_object("keda.sh", "v1alpha1", NAMESPACE, "scaledobjects", name)
    return "; ".join(f"{c['type']}={c['status']} ({c.get('message', '')})" for c in so.get("status", {})
                     .get("conditions", []))


def _condition(custom: client.CustomObjectsApi, name: str, kind: str) -> str | None:
    so = custom.get_namespaced_custom_object("keda.sh", "v1alpha1", NAMESPACE, "scaledobjects", name)
    return next((c["status"] for c in so.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def _value(real_cluster: RealCluster, query: str) -> float | None:
    """The query's one value in the stack's Prometheus (what KEDA's prometheus scaler reads), or None."""
    url = f"{real_cluster.endpoint('prometheus')}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        result = json.loads(answer.read())["data"]["result"]
    return float(result[0]["value"][1]) if len(result) == 1 else None


def _wait_for_replicas(custom: client.CustomObjectsApi, name: str, wanted: int, timeout_s: float) -> None:
    try:
        eventually(lambda: _replicas(custom) == wanted, timeout_s=timeout_s, poll_s=2,
                   what=f"the MachineDeployment at {wanted} replica(s)")
    except AssertionError as error:
        raise AssertionError(f"{error}; KEDA says: {_keda_state(custom, name)}") from None


def _clean(real_cluster: RealCluster, custom: client.CustomObjectsApi, name: str) -> None:
    for delete in (lambda: client.BatchV1Api(real_cluster.admin).delete_namespaced_job(
                       "needs-nodes", NAMESPACE, propagation_policy="Background"),
                   lambda: custom.delete_namespaced_custom_object("keda.sh", "v1alpha1", NAMESPACE, "scaledobjects",
                                                                  name)):
        try:
            delete()
        except client.ApiException as error:
            if error.status != 404:
                raise


def test_the_gpu_pool_grows_from_zero_nodes_as_gpus_queue_and_never_shrinks_by_itself(
        real_cluster: RealCluster) -> None:
    real_cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    custom = client.CustomObjectsApi(real_cluster.admin)
    scaled = _scaled_object(real_cluster)
    name = scaled["metadata"]["name"]
    _clean(real_cluster, custom, name)
    _apply(real_cluster, [_machine_deployment(), *_kueue_objects()])
    custom.patch_namespaced_custom_object_status("cluster.x-k8s.io", "v1beta1", NAMESPACE, "machinedeployments", POOL,
                                                 {"status": {"selector": SELECTOR, "replicas": 0}})
    eventually(lambda: _replicas(custom) == 0, timeout_s=30, what="the pool at 0 nodes to start with")
    try:
        client.BatchV1Api(real_cluster.admin).create_namespaced_job(NAMESPACE, _job(gpus_per_pod=4, pods=3))
        _apply(real_cluster, [scaled])

        # 12 GPUs queue, 8 per node: the pool grows from 0 to 2 nodes.
        _wait_for_replicas(custom, name, 2, timeout_s=240)

        # The demand goes away: neither KEDA (after its cooldown) nor the HPA shrinks the pool. "Never
        # shrinks" is judged only once the absence of demand is seen where KEDA reads it: the ScaledObject's
        # own query at 0 in the stack's Prometheus, and KEDA's last poll finding the trigger inactive
        # (Active=False). Then its cooldown and 4 more polls pass (a stale metric would hold the pool too).
        client.BatchV1Api(real_cluster.admin).delete_namespaced_job("needs-nodes", NAMESPACE,
                                                                    propagation_policy="Background")
        query = scaled["spec"]["triggers"][0]["metadata"]["query"]
        eventually(lambda: _value(real_cluster, query) == 0.0, timeout_s=180, poll_s=2,
                   what=f"the pool's query at 0 once the Job is gone ({query})")
        eventually(lambda: _condition(custom, name, "Active") == "False", timeout_s=120, poll_s=2,
                   what="KEDA finding the pool's trigger inactive (ScaledObject Active=False)")
        inactive = time.monotonic()
        time.sleep(scaled["spec"]["cooldownPeriod"] + 4 * scaled["spec"]["pollingInterval"])
        assert _condition(custom, name, "Active") == "False", _keda_state(custom, name)
        assert _replicas(custom) == 2, (f"the pool shrank by itself {time.monotonic() - inactive:.0f}s after KEDA "
                                        f"found no demand (KEDA: {_keda_state(custom, name)})")
        hpa = client.AutoscalingV2Api(real_cluster.admin).read_namespaced_horizontal_pod_autoscaler(
            f"keda-hpa-{name}", NAMESPACE)
        assert hpa.spec.behavior.scale_down.select_policy == "Disabled"
    finally:
        _clean(real_cluster, custom, name)
