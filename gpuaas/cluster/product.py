"""The product's rendered manifests as they run on this stack (`gpuaas cluster up --with events`).

`manifests/base` rendered with the kustomize built into the pinned kubectl, with the changes an
overlay for this machine makes (and nothing else):
- the EventBus becomes `jetstreamExotic` on the stack's NATS (gpuaas.cluster.argo_events: no
  registry for upstream's `nats` image, no volume provisioner for its claims);
- the EventSources' and Sensors' pods select and tolerate the real node (`spec.template`), as the
  workflows' pods do through the workflow-controller's workflowDefaults: KWOK's untainted CPU node
  would otherwise take them and report them Running without running anything;
- the step image `gpuaas-step` becomes the one built here (`gpuaas.local/gpuaas-step:dev`,
  gpuaas.cluster.images), as the overlays' kustomize `images:` rename it for a registry; the node
  has it imported, so it is never pulled;
- the steps' Prometheus address (GPUAAS_PROMETHEUS_URL of ConfigMap gpuaas-prometheus, which every step
  takes as its environment; `prometheus-operated.monitoring.svc` in the base) becomes the stack's
  Prometheus at its fixed ClusterIP (gpuaas.cluster.services): pods on
  the real node have no cluster DNS, and the node's stand-in for kube-proxy forwards that address to
  the Prometheus of `gpuaas cluster up` on the machine's loopback;
- the catch-up sweep (CronWorkflow `gpuaas-sweep`) runs every minute with a grace of one minute
  (rendered: every 2 minutes, grace 5 minutes), so that on this stack a lost transition is caught up
  within about two minutes, as the fault tier checks (the idle window is shortened for the same reason).
Everything else (each EventSource's and Sensor's spec, WorkflowTemplate, RBAC rule, policy) is applied
as rendered.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuaas.cluster import services
from gpuaas.cluster.argo_events import exotic_event_bus
from gpuaas.cluster.argo_workflows import node_placement
from gpuaas.cluster.images import STEP_IMAGE
from gpuaas.cluster.objects import kustomize

BASE = Path(__file__).resolve().parents[2] / "manifests" / "base"
SWEEP_SCHEDULE = "* * * * *"
SWEEP_GRACE = "1m"
RENDERED_STEP_IMAGE = "gpuaas-step"
PROMETHEUS_ENV = "GPUAAS_PROMETHEUS_URL"
PROMETHEUS_CONFIGMAP = "gpuaas-prometheus"

JSON = dict[str, Any]


def _each_mapping(node: Any) -> Iterator[JSON]:
    """Every mapping in a rendered object, depth first: containers and env entries sit at different
    depths in Sensors, EventSources and WorkflowTemplates."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _each_mapping(value)
    elif isinstance(node, list):
        for value in node:
            yield from _each_mapping(value)


def _for_this_node(objects: list[JSON]) -> None:
    """The step image built here (never pulled) and the steps' Prometheus at the stack's fixed ClusterIP."""
    for node in _each_mapping(objects):
        if node.get("image") == RENDERED_STEP_IMAGE:
            node["image"] = STEP_IMAGE
            node["imagePullPolicy"] = "Never"
        if node.get("kind") == "ConfigMap" and node.get("metadata", {}).get("name") == PROMETHEUS_CONFIGMAP:
            node["data"][PROMETHEUS_ENV] = f"http://{services.PROMETHEUS.url_host}"


def stack_objects(kubectl: Path, base: Path = BASE) -> list[JSON]:
    """The rendered base with this stack's EventBus and step image (see the module docstring)."""
    return for_this_stack(kustomize(kubectl, base))


def for_this_stack(rendered: list[JSON]) -> list[JSON]:
    """The overlay of the module docstring applied to rendered objects (copies; the input is unchanged)."""
    rendered = copy.deepcopy(rendered)
    buses = [obj for obj in rendered if obj["kind"] == "EventBus"]
    if len(buses) != 1:
        raise ValueError(f"expected one EventBus in the rendered base, found {len(buses)}")
    objects = [exotic_event_bus(buses[0]["metadata"]["name"]) if obj["kind"] == "EventBus" else obj
               for obj in rendered]
    for obj in objects:
        if obj["kind"] in ("EventSource", "Sensor"):
            obj["spec"].setdefault("template", {}).update(node_placement())
        if obj["kind"] == "CronWorkflow" and obj["metadata"]["name"] == "gpuaas-sweep":
            obj["spec"]["schedules"] = [SWEEP_SCHEDULE]
            obj["spec"]["workflowSpec"]["arguments"] = {"parameters": [{"name": "grace", "value": SWEEP_GRACE}]}
    _for_this_node(objects)
    return objects
