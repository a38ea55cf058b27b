"""Sensor `gpuaas-provision-quota`: capacity tracking, `gpuaas-provision-quota` with mode=capacity.

Two inputs, one trigger each (`conditions` names its dependency, so neither waits for the other):
- `gpu-node-changed`: a GPU Node was added or deleted, or its allocatable `nvidia.com/gpu` changed.
  Node UPDATEs arrive for heartbeats and condition changes; the `exprs` filter keeps only capacity
  changes (both paths exist on GPU nodes; a Node without the resource fails the filter, as it should).
- `capacity-reconcile`: the calendar source, every 10 minutes, as a safety net.
The template holds a single mutex, so capacity runs never overlap.
"""

from __future__ import annotations

from sensors import event_sources as sources
from sensors.trigger import FromEvent, sensor, workflow_trigger

NAME = "gpuaas-provision-quota"
TEMPLATE = "gpuaas-provision-quota"
NODE_ADDED_OR_DELETED = "gpu-node-added-or-deleted"
NODE_CAPACITY_CHANGED = "gpu-node-capacity-changed"
RECONCILE = "capacity-reconcile"
GPU_ALLOCATABLE = r"status.allocatable.nvidia\.com/gpu"


def _arguments() -> dict[str, str]:
    return {"mode": "capacity", "tenant": "", "namespace": "", "workload": "", "flavor": "", "gpus": "",
            "cohort": "", "dry-run": "false", "event": ""}


def build() -> dict:
    dependencies = [
        {"name": NODE_ADDED_OR_DELETED, "eventSourceName": sources.GPU_NODES, "eventName": sources.GPU_NODES_EVENT,
         "filters": {"data": [{"path": "type", "type": "string", "value": ["^ADD$", "^DELETE$"]}]}},
        {"name": NODE_CAPACITY_CHANGED, "eventSourceName": sources.GPU_NODES, "eventName": sources.GPU_NODES_EVENT,
         "filters": {
             "data": [{"path": "type", "type": "string", "value": ["^UPDATE$"]}],
             "exprs": [{"expr": "now != before",
                        "fields": [{"name": "now", "path": f"body.{GPU_ALLOCATABLE}"},
                                   {"name": "before", "path": f"oldBody.{GPU_ALLOCATABLE}"}]}],
         }},
        {"name": RECONCILE, "eventSourceName": sources.CAPACITY_CLOCK, "eventName": sources.CAPACITY_CLOCK_EVENT},
    ]
    triggers = [
        workflow_trigger(f"capacity-on-{dep}", TEMPLATE, "provision-quota", dep, _arguments(),
                         [FromEvent("event")], conditions=dep, requests_per_second=1)
        for dep in (NODE_ADDED_OR_DELETED, NODE_CAPACITY_CHANGED, RECONCILE)
    ]
    return sensor(NAME, dependencies, triggers, __doc__.splitlines()[0])
