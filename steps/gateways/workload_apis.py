"""The APIs the workload kinds already have, read for their own evidence that the work is done.

- **Jupyter** (notebooks): `GET {base}/api/kernels` and `GET {base}/api/status`, where `{base}` is the
  notebook server's URL. The default is the Service the Kubeflow notebook controller makes and its
  culler reads, `http://{name}.{namespace}.svc.{domain}/notebook/{namespace}/{name}`
  (kubeflow/notebooks, components/notebook-controller/controllers/culling_controller.go); the policy's
  `signalUrl` overrides it (OpenShift AI workbenches, other images). `no_track_activity=1` keeps our
  own reads from counting as activity (jupyter_server's APIHandler records the last API activity of
  every authenticated request unless it is passed; `/api/status` records none).
- **Ray** (clusters): Ray's job API on the head's dashboard, `GET {base}/api/jobs/`, as KubeRay's
  dashboard client lists jobs (ray-operator/controllers/ray/utils/dashboardclient); the default base
  is the head Service KubeRay makes, `http://{name}-head-svc.{namespace}.svc.{domain}:8265` (or
  `spec.headGroupSpec.headService.metadata.name`, KubeRay's GenerateHeadServiceName), or `signalUrl`.

Reads are single GETs with a short timeout and no retry: an unreachable API is missing evidence (the
policy's `withoutSignal` decides), never a reason to fail the step. Network policies must let the
step's pod reach these Services (docs/reactions.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

JUPYTER_URL = "http://{name}.{namespace}.svc.{domain}/notebook/{namespace}/{name}"
RAY_DASHBOARD_URL = "http://{head}.{namespace}.svc.{domain}:8265"
DASHBOARD_PORT = 8265


class WorkloadApiError(Exception):
    """The API could not be read; the message says what and why."""


def cluster_domain() -> str:
    return os.environ.get("GPUAAS_CLUSTER_DOMAIN", "cluster.local")


def jupyter_url(owner: Mapping[str, Any], template: str = "") -> str:
    meta = owner.get("metadata") or {}
    return (template or JUPYTER_URL).format(name=meta.get("name", ""), namespace=meta.get("namespace", ""),
                                            domain=cluster_domain()).rstrip("/")


def ray_dashboard_url(owner: Mapping[str, Any], template: str = "") -> str:
    meta = owner.get("metadata") or {}
    name, namespace = meta.get("name", ""), meta.get("namespace", "")
    if template:
        return template.format(name=name, namespace=namespace, domain=cluster_domain()).rstrip("/")
    spec = owner.get("spec") or {}
    if owner.get("kind") == "RayJob":
        spec = spec.get("rayClusterSpec") or {}
        dashboard = (owner.get("status") or {}).get("dashboardURL")
        if dashboard:
            return dashboard if str(dashboard).startswith("http") else f"http://{dashboard}"
        name = (owner.get("status") or {}).get("rayClusterName") or name
    head = ((((spec.get("headGroupSpec") or {}).get("headService") or {}).get("metadata") or {}).get("name")
            or f"{name}-head-svc")
    return RAY_DASHBOARD_URL.format(head=head, namespace=namespace, domain=cluster_domain())


class WorkloadApis:
    """HTTP reads of the kinds' own APIs (urllib3, which the Kubernetes client brings)."""

    def __init__(self, timeout_seconds: float = 5.0) -> None:
        self.timeout_seconds = timeout_seconds
        self._pool: Any = None

    def _get(self, url: str) -> Any:
        import urllib3

        if self._pool is None:
            self._pool = urllib3.PoolManager(timeout=urllib3.Timeout(total=self.timeout_seconds), retries=False)
        try:
            response = self._pool.request("GET", url, headers={"Accept": "application/json"})
        except urllib3.exceptions.HTTPError as error:
            raise WorkloadApiError(f"GET {url} failed ({type(error).__name__}: {error})") from None
        if response.status != 200:
            raise WorkloadApiError(f"GET {url} answered {response.status}")
        try:
            return json.loads(response.data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise WorkloadApiError(f"GET {url} answered something that is not JSON") from None

    def jupyter(self, base: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """(kernels, status) of a Jupyter server; status None when only /api/kernels answers."""
        kernels = self._get(f"{base}/api/kernels?no_track_activity=1")
        if not isinstance(kernels, list):
            raise WorkloadApiError(f"GET {base}/api/kernels answered {type(kernels).__name__}, not a list of kernels")
        try:
            status = self._get(f"{base}/api/status")
        except WorkloadApiError:
            status = None
        return [k for k in kernels if isinstance(k, dict)], status if isinstance(status, dict) else None

    def ray_jobs(self, base: str) -> list[dict[str, Any]]:
        """Ray's job list (`/api/jobs/`)."""
        jobs = self._get(f"{base}/api/jobs/")
        if not isinstance(jobs, list):
            raise WorkloadApiError(f"GET {base}/api/jobs/ answered {type(jobs).__name__}, not a list of jobs")
        return [j for j in jobs if isinstance(j, dict)]
