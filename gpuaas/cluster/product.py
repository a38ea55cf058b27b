"""The product as it runs on this stack (`gpuaas cluster up --with events`): the chart's values for it.

This machine is a site like any other: `stack_values()` is its values file (what an admin writes for
theirs, docs/install.md), and the product is what the chart builds for it (gpuaas/manifests/site.py):
`helm install -f` of these values (tests/realstack/test_readme_install.py) and the server-side apply
of `stack_objects()` (gpuaas.cluster.install) install the same objects. What differs from the defaults:
- the EventBus is `jetstreamExotic` on the stack's NATS (gpuaas.cluster.argo_events: no registry for
  upstream's `nats` image, no volume provisioner for its claims);
- the EventSources' and Sensors' pods select and tolerate the real node (`events.podTemplate`), as the
  workflows' pods do through the workflow-controller's workflowDefaults: KWOK's untainted CPU node
  would otherwise take them and report them Running without running anything;
- the step image is the one built here (`gpuaas.local/gpuaas-step:dev`, gpuaas.cluster.images), never
  pulled: the node has it imported;
- the steps' Prometheus (`prometheus.url`, which the chart writes into ConfigMap gpuaas-prometheus, every
  step's environment) is the stack's Prometheus at its fixed ClusterIP (gpuaas.cluster.services), and the
  node's stand-in for kube-proxy forwards that address to the Prometheus of `gpuaas cluster up` on the
  machine's loopback (a monitoring profile's install keeps its documented URL instead: its names resolve
  through the stack's stand-in for cluster DNS, gpuaas.cluster.argo_workflows);
- the Namespace is part of the install (`namespace.create`), as in the overlays.
Everything else (each EventSource's and Sensor's spec, WorkflowTemplate, RBAC rule, policy) is the default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuaas.cluster import services
from gpuaas.cluster.argo_events import exotic_event_bus
from gpuaas.cluster.argo_workflows import node_placement
from gpuaas.cluster.images import STEP_IMAGE

BASE = Path(__file__).resolve().parents[2] / "manifests" / "base"

JSON = dict[str, Any]


def stack_values(create_namespace: bool = True) -> JSON:
    """The values of this stack (see the module docstring), over the chart's defaults."""
    repository, _, tag = STEP_IMAGE.rpartition(":")
    return {"image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
            "namespace": {"create": create_namespace},
            "prometheus": {"url": f"http://{services.PROMETHEUS.url_host}"},
            "eventBus": {"spec": exotic_event_bus()["spec"]},
            "events": {"podTemplate": node_placement()}}


def stack_objects() -> list[JSON]:
    """The product (no tenants, no node pool) for this stack's values, in the release namespace gpuaas."""
    from gpuaas.manifests import site, values

    return site.product_objects(values.load(overrides=stack_values()), "gpuaas")
