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

Names, with a monitoring profile: the product installed for a platform queries the URL its values file
documents (`http://prometheus-operated.monitoring.svc:9090`, `https://thanos-querier.openshift-monitoring.svc:9091`),
and pods on the real node have no cluster DNS. `host_aliases(profile)` is this stack's STAND-IN for it: each
such name -> the fixed ClusterIP forwarded to the program behind it, given to every workflow pod by the
workflow-controller's `workflowDefaults` (`spec.hostAliases`, gpuaas.cluster.argo_workflows); the name
itself stays in the URL, so TLS checks the serving certificate against it as in a cluster.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
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
    profile: str = ""
    """The monitoring profile that runs the program ("" = every profile)."""

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


SERVICE_RANGE = ipaddress.ip_network("10.97.0.0/16")
"""The stack's Service range (kube-apiserver's --service-cluster-ip-range). Not Kubernetes' usual 10.96.0.0/16:
the nodes of earlier versions of this stack listen on that range's addresses on every device, which a
node of this version (listening on its bridge only) and they would refuse each other; on another
range they run side by side (docs/real-stack-pods.md)."""
KUBERNETES = str(SERVICE_RANGE.network_address + 1)
"""The `kubernetes` Service's ClusterIP: the range's first address, as the API server allocates it."""


def _address(host: int) -> str:
    return str(SERVICE_RANGE.network_address + host)


PROMETHEUS = LocalService("monitoring", "gpuaas-stack-prometheus", _address(90), 9090, "prometheus", "")
NATS = LocalService("argo-events", "eventbus-nats", _address(42), 4222, "nats", "events")
THANOS_QUERIER = LocalService("openshift-monitoring", "gpuaas-stack-thanos-querier", _address(91), 9091,
                              "thanos-querier", "", profile="openshift")
"""thanos-querier's kube-rbac-proxy (gpuaas.cluster.prometheus_operator), forwarded as TCP: TLS ends at the proxy."""
SERVICES = (PROMETHEUS, NATS, THANOS_QUERIER)


def for_parts(parts: set[str] | frozenset[str], profile: str = "plain") -> list[LocalService]:
    """The Services of what runs with these parts and this monitoring profile."""
    return [service for service in SERVICES
            if (not service.part or service.part in parts) and (not service.profile or service.profile == profile)]


def host_aliases(profile: Any) -> list[JSON]:
    """Pod `hostAliases` for the name in a monitoring profile's query URL (see the module docstring): OpenShift's
    thanos-querier -> THANOS_QUERIER, kube-prometheus-stack's `prometheus-operated.monitoring.svc` -> PROMETHEUS
    (which the stack forwards to the profile's Prometheus)."""
    if not profile.operator_managed:
        return []
    host = urllib.parse.urlsplit(profile.query.url).hostname
    service = THANOS_QUERIER if profile.name == THANOS_QUERIER.profile else PROMETHEUS
    return [{"ip": service.cluster_ip, "hostnames": [host]}]
