"""Services with fixed ClusterIPs for what runs on this machine's loopback, so pods on the real node reach it.

Why fixed addresses: pods have no cluster DNS here, and kube-proxy has nothing to route to (the
programs listen on 127.0.0.1, for which Kubernetes publishes no endpoints). So each such program
gets a selectorless Service with a ClusterIP chosen here, in the static band of the Service range
(the first /24, which the API server's allocator leaves to explicit requests), and the node's
stand-in for kube-proxy (gpuaas.cluster.node.ServiceForwarder) forwards that address to the
program's loopback port. The addresses are constants because the product as it runs on this stack
names them (gpuaas.cluster.product): NATS for the EventBus, Prometheus for the steps'
GPUAAS_PROMETHEUS_URL.

Prometheus' Service is `gpuaas-stack-prometheus`, not the `prometheus-operated` the base's URL names: with
a monitoring profile (`up --monitoring`) the Prometheus Operator makes `prometheus-operated` itself, headless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]


@dataclass(frozen=True)
class LocalService:
    """A Service in front of one program of the stack that listens on 127.0.0.1."""

    namespace: str
    name: str
    cluster_ip: str
    port: int
    state_port: str
    """The program's port name in the cluster's state (ClusterState.port)."""
    part: str
    """The part of `gpuaas cluster up` that runs the program ("" = always)."""

    @property
    def url_host(self) -> str:
        return f"{self.cluster_ip}:{self.port}"

    def service(self) -> JSON:
        return {"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "labels": {"app.kubernetes.io/managed-by": "gpuaas-cluster"},
                             "annotations": {"gpuaas.io/forwarded-to": "a program on the machine's loopback, by the "
                                             "node's stand-in for kube-proxy (gpuaas.cluster.services)"}},
                "spec": {"type": "ClusterIP", "clusterIP": self.cluster_ip,
                         "ports": [{"name": "main", "port": self.port, "protocol": "TCP"}]}}


PROMETHEUS = LocalService("monitoring", "gpuaas-stack-prometheus", "10.96.0.90", 9090, "prometheus", "")
NATS = LocalService("argo-events", "eventbus-nats", "10.96.0.42", 4222, "nats", "events")
SERVICES = (PROMETHEUS, NATS)


def for_parts(parts: set[str] | frozenset[str]) -> list[LocalService]:
    """The Services of what runs with these parts."""
    return [service for service in SERVICES if not service.part or service.part in parts]
