"""Upstream install objects rewritten for loopback: only what a pod network would provide changes."""

from __future__ import annotations

import base64

from gpuaas.cluster.objects import on_loopback, split_crds

PORTS = {("kueue-system", "kueue-webhook-service"): 41000, ("keda", "keda-metrics-apiserver"): 42000}


def _service(namespace: str, name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
            "spec": {"ports": [{"port": 443, "targetPort": 9443}], "selector": {"app": name}}}


def test_services_become_external_names_on_the_process_port() -> None:
    out = on_loopback([_service("kueue-system", "kueue-webhook-service"), _service("other", "untouched")], PORTS)
    assert out[0]["spec"] == {"type": "ExternalName", "externalName": "localhost",
                              "ports": [{"name": "https", "port": 41000, "protocol": "TCP"}]}
    assert out[1]["spec"]["selector"] == {"app": "untouched"}


def test_webhooks_crd_conversion_and_api_services_point_at_the_port_with_the_ca() -> None:
    webhook = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
               "metadata": {"name": "w"}, "webhooks": [{"name": "a", "clientConfig": {"service": {
                   "name": "kueue-webhook-service", "namespace": "kueue-system", "path": "/validate"}}}]}
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "c"},
           "spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"service": {
               "name": "kueue-webhook-service", "namespace": "kueue-system", "path": "/convert"}}}}}}
    api = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v1beta1.external"},
           "spec": {"service": {"name": "keda-metrics-apiserver", "namespace": "keda"}}}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "keda"}}

    out = on_loopback([webhook, crd, api, deployment], PORTS, ca_bundle=b"PEM")

    assert [o["kind"] for o in out] == ["ValidatingWebhookConfiguration", "CustomResourceDefinition", "APIService"]
    encoded = base64.b64encode(b"PEM").decode()
    assert out[0]["webhooks"][0]["clientConfig"] == {"service": {
        "name": "kueue-webhook-service", "namespace": "kueue-system", "path": "/validate", "port": 41000},
        "caBundle": encoded}
    assert out[1]["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["port"] == 41000
    assert out[2]["spec"]["service"]["port"] == 42000 and out[2]["spec"]["caBundle"] == encoded
    assert "port" not in webhook["webhooks"][0]["clientConfig"]["service"]  # the input is not modified


def test_crds_and_namespaces_go_first() -> None:
    first, rest = split_crds([{"kind": "Role"}, {"kind": "Namespace"}, {"kind": "CustomResourceDefinition"}])
    assert [o["kind"] for o in first] == ["Namespace", "CustomResourceDefinition"]
    assert [o["kind"] for o in rest] == ["Role"]
