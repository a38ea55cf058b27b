"""Real KEDA scales a Deployment from a real Prometheus query, through the aggregation layer.

The path a production ScaledObject takes: KEDA's operator creates an HPA, the controller-manager's
HPA controller reads `external.metrics.k8s.io` from kube-apiserver, which proxies to KEDA's metrics
API server, which asks the operator over gRPC, which queries Prometheus.
"""

from __future__ import annotations

from kubernetes import client

from tests.support.real_cluster import RealCluster, eventually


def test_keda_scales_a_deployment_on_a_prometheus_query(real_cluster: RealCluster) -> None:
    namespace = "keda-check"
    real_cluster.kubectl("create", "namespace", namespace, check=False)
    apps = client.AppsV1Api(real_cluster.admin)
    custom = client.CustomObjectsApi(real_cluster.admin)
    apps.create_namespaced_deployment(namespace, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "server"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "server"}}, "template": {
            "metadata": {"labels": {"app": "server"}},
            "spec": {"containers": [{"name": "main", "image": "registry.invalid/server:1",
                                     "resources": {"requests": {"cpu": "100m"}}}]}}}})
    custom.create_namespaced_custom_object("keda.sh", "v1alpha1", namespace, "scaledobjects", {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "server"},
        "spec": {"scaleTargetRef": {"name": "server"}, "pollingInterval": 2, "minReplicaCount": 1,
                 "maxReplicaCount": 5, "triggers": [{"type": "prometheus", "metadata": {
                     "serverAddress": real_cluster.endpoint("prometheus"),
                     "query": "vector(3)", "threshold": "1"}}]}})

    eventually(lambda: (s := custom.get_namespaced_custom_object("keda.sh", "v1alpha1", namespace, "scaledobjects",
                                                                 "server"))
               and any(c["type"] == "Ready" and c["status"] == "True" for c in s.get("status", {}).get("conditions", []))
               and s, timeout_s=60, what="the ScaledObject Ready")
    eventually(lambda: client.AutoscalingV2Api(real_cluster.admin).list_namespaced_horizontal_pod_autoscaler(
        namespace).items, timeout_s=30, what="KEDA's HPA")
    eventually(lambda: apps.read_namespaced_deployment("server", namespace).spec.replicas == 3, timeout_s=120,
               what="the Deployment scaled to 3 replicas (query 3 / threshold 1)")
