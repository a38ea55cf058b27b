"""The EventSources: what gpuaas listens to.

Built as plain dicts, not hera's `hera.events.models`: those models nest `groupVersionResource` and
`webhookContext`, while the controller reads `group`/`version`/`resource` and
`endpoint`/`method`/`port`/`authSecret` flat; the CRD keeps the wrong shape and the source then
silently watches nothing. Every object here is validated strictly against the Argo Events schema.

| EventSource           | type     | event name        | feeds Sensor            |
|-----------------------|----------|-------------------|-------------------------|
| gpuaas-workloads      | resource | workloads         | on-admitted, on-finished|
| gpuaas-alertmanager   | webhook  | idle              | on-idle                 |
| gpuaas-gpu-nodes      | resource | gpu-nodes         | provision-quota         |
| gpuaas-capacity-clock | calendar | capacity-reconcile| provision-quota         |
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]

SERVICE_ACCOUNT = "gpuaas-eventsources"
WORKLOADS = "gpuaas-workloads"
WORKLOADS_EVENT = "workloads"
ALERTMANAGER = "gpuaas-alertmanager"
ALERTMANAGER_EVENT = "idle"
ALERTMANAGER_PORT = 12000
ALERTMANAGER_ENDPOINT = "/alertmanager"
WEBHOOK_SECRET = "gpuaas-alertmanager-webhook"
WEBHOOK_SECRET_KEY = "token"
GPU_NODES = "gpuaas-gpu-nodes"
GPU_NODES_EVENT = "gpu-nodes"
GPU_NODE_LABEL = "nvidia.com/gpu.present"
"""Set to "true" by NVIDIA GPU Feature Discovery (GPU Operator) on every GPU node."""
CAPACITY_CLOCK = "gpuaas-capacity-clock"
CAPACITY_CLOCK_EVENT = "capacity-reconcile"
CAPACITY_INTERVAL = "10m"


def _event_source(name: str, spec: JSON) -> JSON:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "EventSource",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "gpuaas",
                                              "app.kubernetes.io/component": "event-source"}},
        "spec": {"template": {"serviceAccountName": SERVICE_ACCOUNT}, **spec},
    }


def workloads(version: str = "v1beta2") -> JSON:
    """Kueue Workloads in every namespace. ADD and UPDATE only: the Sensors react to status transitions,
    which arrive as UPDATE with `oldBody`; ADD is delivered for the re-list after a restart and the
    Sensors ignore it (see sensors/on_admitted.py). No `afterStart` filter: it judges UPDATE age from
    managedFields `Update` entries and Kueue writes status with server-side apply."""
    return _event_source(WORKLOADS, {"resource": {WORKLOADS_EVENT: {
        "group": "kueue.x-k8s.io", "version": version, "resource": "workloads",
        "eventTypes": ["ADD", "UPDATE"],
    }}})


def alertmanager() -> JSON:
    """The Alertmanager webhook receiver; the Service is `gpuaas-alertmanager-eventsource-svc:12000`.

    `authSecret`: Alertmanager must send `Authorization: Bearer <token>` from Secret
    `gpuaas-alertmanager-webhook` key `token` (create it before applying; README)."""
    return _event_source(ALERTMANAGER, {
        "service": {"ports": [{"name": "webhook", "port": ALERTMANAGER_PORT, "targetPort": ALERTMANAGER_PORT}]},
        "webhook": {ALERTMANAGER_EVENT: {
            "endpoint": ALERTMANAGER_ENDPOINT, "method": "POST", "port": str(ALERTMANAGER_PORT),
            "authSecret": {"name": WEBHOOK_SECRET, "key": WEBHOOK_SECRET_KEY},
        }},
    })


def gpu_nodes() -> JSON:
    """GPU Nodes (label nvidia.com/gpu.present=true, server-side selector): capacity for provision-quota."""
    return _event_source(GPU_NODES, {"resource": {GPU_NODES_EVENT: {
        "group": "", "version": "v1", "resource": "nodes",
        "eventTypes": ["ADD", "UPDATE", "DELETE"],
        "filter": {"labels": [{"key": GPU_NODE_LABEL, "operation": "==", "value": "true"}]},
    }}})


def capacity_clock(interval: str = CAPACITY_INTERVAL) -> JSON:
    """A periodic capacity re-split: catches what node events miss (cordons, a missed event, a restart)."""
    return _event_source(CAPACITY_CLOCK, {"calendar": {CAPACITY_CLOCK_EVENT: {"interval": interval}}})


def objects(workload_version: str = "v1beta2") -> list[JSON]:
    return [workloads(workload_version), alertmanager(), gpu_nodes(), capacity_clock()]
