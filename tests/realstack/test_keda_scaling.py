"""Real KEDA scales a Deployment from a real Prometheus query, through the aggregation layer.

The path a production ScaledObject takes: KEDA's operator creates an HPA, the controller-manager's
HPA controller reads `external.metrics.k8s.io` from kube-apiserver, which proxies to KEDA's metrics
API server, which asks the operator over gRPC, which queries Prometheus.
"""

from __future__ import annotations

import json
import secrets

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


def test_kedas_admission_webhook_is_reached_by_the_apiserver_and_judges(real_cluster: RealCluster) -> None:
    # KEDA's webhooks are `failurePolicy: Ignore` (upstream config/webhooks): an apiserver that cannot
    # reach them admits everything silently. A ScaledObject that only the webhook refuses (its target
    # already has an HPA of its own: verifyHpas, not a CRD schema rule) proves the path.
    namespace = f"keda-webhook-check-{secrets.token_hex(3)}"  # a reused cluster may hold an earlier run's objects
    real_cluster.kubectl("create", "namespace", namespace)
    client.AppsV1Api(real_cluster.admin).create_namespaced_deployment(namespace, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "server"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "server"}}, "template": {
            "metadata": {"labels": {"app": "server"}},
            "spec": {"containers": [{"name": "main", "image": "registry.invalid/server:1"}]}}}})
    client.AutoscalingV2Api(real_cluster.admin).create_namespaced_horizontal_pod_autoscaler(namespace, {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "by-hand"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "server"},
                 "minReplicas": 1, "maxReplicas": 2,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                     "type": "Utilization", "averageUtilization": 80}}}]}})
    scaled_object = {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "server", "namespace": namespace},
        "spec": {"scaleTargetRef": {"name": "server"}, "minReplicaCount": 1, "maxReplicaCount": 3,
                 "triggers": [{"type": "prometheus", "metadata": {"serverAddress": "http://127.0.0.1:1",
                                                                   "query": "vector(1)", "threshold": "1"}}]}}
    done = real_cluster.kubectl("create", "--dry-run=server", "-f", "-", input_text=json.dumps(scaled_object),
                                check=False)
    assert done.returncode != 0, f"expected KEDA's webhook to refuse a second autoscaler: {done.stdout}"
    assert 'admission webhook "vscaledobject.kb.io" denied the request' in done.stderr, done.stderr
    assert "is already managed by the hpa 'by-hand'" in done.stderr, done.stderr
