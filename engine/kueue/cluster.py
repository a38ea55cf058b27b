"""Where the emulation reads and writes objects: the API server over HTTP, or its store in-process.

The controller only needs list, create and merge patch (main resource or /status). Going through
the project's Kubernetes gateway (the official client over real HTTP) is the faithful path, the
one a real controller takes; the in-process store adapter skips HTTP for the demo's fast path.
"""

from __future__ import annotations

from typing import Any, Protocol

from steps.gateways.resources import Resource

JSON = dict[str, Any]


class Cluster(Protocol):
    def list(self, resource: Resource) -> list[JSON]: ...

    def create(self, resource: Resource, body: JSON) -> JSON: ...

    def merge_patch(self, resource: Resource, name: str, patch: JSON, namespace: str | None = None,
                    subresource: str | None = None) -> JSON: ...

    def delete(self, resource: Resource, name: str, namespace: str | None = None) -> None: ...


class GatewayCluster:
    """The API server over HTTP through `steps.gateways.kubernetes.KubernetesGateway`."""

    def __init__(self, gateway: Any) -> None:
        self.gateway = gateway

    @classmethod
    def over_url(cls, url: str) -> GatewayCluster:
        from steps.gateways.kubernetes import KubernetesGateway

        return cls(KubernetesGateway(url=url, component="kueue-emulation"))

    def list(self, resource: Resource) -> list[JSON]:
        return self.gateway.list(resource)

    def create(self, resource: Resource, body: JSON) -> JSON:
        return self.gateway.create(resource, body)

    def merge_patch(self, resource: Resource, name: str, patch: JSON, namespace: str | None = None,
                    subresource: str | None = None) -> JSON:
        return self.gateway.merge_patch(resource, name, patch, namespace=namespace, subresource=subresource)

    def delete(self, resource: Resource, name: str, namespace: str | None = None) -> None:
        self.gateway.delete(resource, name, namespace)
