"""ServiceAccount clients from the TokenRequest API act as that ServiceAccount, judged by real RBAC."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from tests.support.real_cluster import RealCluster


def test_a_token_request_client_is_the_service_account_and_rbac_denies_it_the_rest(real_cluster: RealCluster) -> None:
    core = client.CoreV1Api(real_cluster.admin)
    namespace = "identity-check"
    real_cluster.kubectl("create", "namespace", namespace, check=False)
    real_cluster.kubectl("create", "serviceaccount", "reader", "-n", namespace, check=False)
    real_cluster.kubectl("create", "role", "pod-reader", "-n", namespace, "--verb=list", "--resource=pods", check=False)
    real_cluster.kubectl("create", "rolebinding", "reader", "-n", namespace, "--role=pod-reader",
                         f"--serviceaccount={namespace}:reader", check=False)

    as_reader = real_cluster.service_account_client(namespace, "reader")
    review = client.AuthenticationV1Api(as_reader).create_self_subject_review(
        client.V1SelfSubjectReview(api_version="authentication.k8s.io/v1", kind="SelfSubjectReview"))
    assert review.status.user_info.username == f"system:serviceaccount:{namespace}:reader"

    client.CoreV1Api(as_reader).list_namespaced_pod(namespace)  # granted by the Role
    with pytest.raises(ApiException) as denied:
        client.CoreV1Api(as_reader).list_namespaced_config_map(namespace)
    assert denied.value.status == 403
    with pytest.raises(ApiException) as elsewhere:
        client.CoreV1Api(as_reader).list_namespaced_pod("kube-system")
    assert elsewhere.value.status == 403
    assert core.read_namespace(namespace).metadata.name == namespace
