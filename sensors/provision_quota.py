r"""Sensor `gpuaas-provision-quota`: capacity tracking, `gpuaas-provision-quota` with mode=capacity.

One trigger per dependency (`conditions` names it, so none waits for another); the dependencies
are mutually exclusive, so one event starts at most one run:
- `gpu-node-added-or-deleted`: ADD or DELETE of a GPU Node (label nvidia.com/gpu.present=true).
- `gpu-node-capacity-changed`: UPDATE where allocatable `nvidia.com/gpu` differs between body and
  oldBody (an `exprs` filter; both paths must exist, so heartbeats and condition writes never pass).
- `gpu-node-capacity-appeared` / `-vanished`: UPDATE where the device plugin started (or stopped)
  reporting `nvidia.com/gpu` at all (a node joins before its device plugin registers). The multipath
  `[...allocatable.nvidia\.com/gpu]` is `[]` when absent, so a missing path is not an error.
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
CAPACITY_APPEARED = "gpu-node-capacity-appeared"
CAPACITY_VANISHED = "gpu-node-capacity-vanished"
RECONCILE = "capacity-reconcile"
GPU_ALLOCATABLE = r"status.allocatable.nvidia\.com/gpu"


def _arguments() -> dict[str, str]:
    return {"mode": "capacity", "tenant": "", "namespace": "", "workload": "", "flavor": "", "gpus": "",
            "cohort": "", "borrowing-limit": "", "lending-limit": "", "dry-run": "false", "event": ""}


def _gpus_reported(obj: str, reported: bool) -> dict:
    """`[<obj>.status.allocatable.nvidia\\.com/gpu]` is (not) the empty list."""
    return {"path": f"[{obj}.{GPU_ALLOCATABLE}]", "type": "string", "value": [r"^\[\]$"],
            **({"comparator": "!="} if reported else {})}


def build() -> dict:
    dependencies = [
        {"name": NODE_ADDED_OR_DELETED, "eventSourceName": sources.GPU_NODES, "eventName": sources.GPU_NODES_EVENT,
         "filters": {"data": [{"path": "type", "type": "string", "value": ["^(ADD|DELETE)$"]}]}},
        {"name": NODE_CAPACITY_CHANGED, "eventSourceName": sources.GPU_NODES, "eventName": sources.GPU_NODES_EVENT,
         "filters": {
             "data": [{"path": "type", "type": "string", "value": ["^UPDATE$"]}],
             "exprs": [{"expr": "now != before",
                        "fields": [{"name": "now", "path": f"body.{GPU_ALLOCATABLE}"},
                                   {"name": "before", "path": f"oldBody.{GPU_ALLOCATABLE}"}]}],
         }},
        {"name": CAPACITY_APPEARED, "eventSourceName": sources.GPU_NODES, "eventName": sources.GPU_NODES_EVENT,
         "filters": {"data": [{"path": "type", "type": "string", "value": ["^UPDATE$"]},
                              _gpus_reported("body", True), _gpus_reported("oldBody", False)]}},
        {"name": CAPACITY_VANISHED, "eventSourceName": sources.GPU_NODES, "eventName": sources.GPU_NODES_EVENT,
         "filters": {"data": [{"path": "type", "type": "string", "value": ["^UPDATE$"]},
                              _gpus_reported("body", False), _gpus_reported("oldBody", True)]}},
        {"name": RECONCILE, "eventSourceName": sources.CAPACITY_CLOCK, "eventName": sources.CAPACITY_CLOCK_EVENT},
    ]
    triggers = [
        workflow_trigger(f"capacity-on-{dep}", TEMPLATE, "provision-quota", dep, _arguments(),
                         [FromEvent("event")], conditions=dep, requests_per_second=1)
        for dep in (NODE_ADDED_OR_DELETED, NODE_CAPACITY_CHANGED, CAPACITY_APPEARED, CAPACITY_VANISHED, RECONCILE)
    ]
    return sensor(NAME, dependencies, triggers, __doc__.splitlines()[0])
