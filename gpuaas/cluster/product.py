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
- the catch-up sweep (CronWorkflow `gpuaas-sweep`) runs every minute with a grace of one minute
  (`sweep.schedule`, `sweep.grace`; the defaults: every 2 minutes, grace 5 minutes), so that on this stack
  a lost transition is caught up within about two minutes, as the fault tier checks (the idle window is
  shortened for the same reason);
- the Namespace is part of the install (`namespace.create`), as in the overlays.
Everything else (each EventSource's and Sensor's spec, WorkflowTemplate, RBAC rule, policy) is the default.

An earlier release's rendered manifests/base (benchmarks/scale.py `--before-base`: the cost before and
after) comes without values for this chart: `release_objects` makes the same changes to its rendered
objects, as an overlay (`for_this_stack`); tests/cluster/test_product.py checks that the overlay over this
checkout's base and `stack_objects()` are the same objects.
"""

from __future__ import annotations

import copy
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

JSON = dict[str, Any]


def stack_values(create_namespace: bool = True) -> JSON:
    """The values of this stack (see the module docstring), over the chart's defaults."""
    repository, _, tag = STEP_IMAGE.rpartition(":")
    return {"image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
            "namespace": {"create": create_namespace},
            "prometheus": {"url": f"http://{services.PROMETHEUS.url_host}"},
            "eventBus": {"spec": exotic_event_bus()["spec"]},
            "events": {"podTemplate": node_placement()},
            "sweep": {"schedule": SWEEP_SCHEDULE, "grace": SWEEP_GRACE}}


ADMIN_VALUES = "values.yaml"
"""The file `gpuaas cluster up --with events` writes into its state dir for an admin's `helm install`."""


OTHER_BUS_FORMS = ("jetstream", "nats", "kafka")
"""EventBus forms besides the stack's jetstreamExotic: Helm merges maps key by key, and Argo Events v1.9.11
takes a native `jetstream` before `jetstreamExotic` (pkg/reconciler/eventbus/installer/installer.go getInstaller),
so an admin's file that sets one would bring back a bus the stack cannot run; null removes them (Helm drops a
key a later values file sets to null)."""


def admin_values(monitoring: str = "plain") -> JSON:
    """What an admin's `helm install` on this stack adds after their own values file (`-f theirs.yaml -f this`):
    stack_values()'s step image, EventBus, event pods' placement and sweep timing, and the webhook Secret `cluster
    up` made (its Alertmanager sends that token: a new one would break the alert path). A later values file wins
    key by key, but maps merge: the other EventBus forms are nulled here; the event pods' placement cannot be, so
    an admin's file for this stack sets no `events.podTemplate` (docs/real-stack.md). No Namespace (`cluster up`
    made it), no node pool (the examples' MachineSet or MachineDeployment does not exist here), and on a
    monitoring profile no Prometheus URL (the platform's values file has the documented one)."""
    from gpuaas.cluster.argo_events import WEBHOOK_SECRET

    values = stack_values(create_namespace=False)
    values["eventBus"] = {"spec": {**{form: None for form in OTHER_BUS_FORMS}, **values["eventBus"]["spec"]}}
    values["secrets"] = {"webhookToken": {"name": WEBHOOK_SECRET, "key": "token"}}
    values["nodePool"] = {"enabled": False}
    if monitoring != "plain":
        values.pop("prometheus")
    return values


def write_admin_values(state_dir: Path, monitoring: str = "plain") -> Path:
    """admin_values() as YAML in the state dir, with a header that says what it is for."""
    import yaml

    path = state_dir / ADMIN_VALUES
    path.write_text("# Written by `gpuaas cluster up`: this stack's settings for `helm install` (docs/real-stack.md).\n"
                    "# Give it after your own values file: helm install gpuaas charts/gpuaas -n gpuaas -f YOURS.yaml "
                    f"-f {path} --server-side=false\n"
                    "# Start YOURS from examples/values/kubernetes.yaml (tenants, policy); leave out eventBus, "
                    "events.podTemplate and image: this file sets them for this stack.\n"
                    + yaml.safe_dump(admin_values(monitoring), sort_keys=False))
    return path


def stack_objects() -> list[JSON]:
    """The product (no tenants, no node pool) for this stack's values, in the release namespace gpuaas."""
    from gpuaas.manifests import site, values

    return site.product_objects(values.load(overrides=stack_values()), "gpuaas")


def release_objects(kubectl: Path, base: Path) -> list[JSON]:
    """Another release's rendered manifests/base (`kubectl kustomize`) as it runs on this stack."""
    return for_this_stack(kustomize(kubectl, base))


def for_this_stack(rendered: list[JSON]) -> list[JSON]:
    """The changes of the module docstring made to rendered objects (copies; the input is unchanged)."""
    from gpuaas.manifests.site import PROMETHEUS_CONFIGMAP, each_mapping
    from gpuaas.manifests.site import STEP_IMAGE as RENDERED_STEP_IMAGE

    settings = stack_values()
    objects = copy.deepcopy(rendered)
    buses = [obj for obj in objects if obj["kind"] == "EventBus"]
    if len(buses) != 1:
        raise ValueError(f"expected one EventBus in the rendered base, found {len(buses)}")
    buses[0]["spec"] = settings["eventBus"]["spec"]
    for obj in objects:
        if obj["kind"] in ("EventSource", "Sensor"):
            obj["spec"].setdefault("template", {}).update(settings["events"]["podTemplate"])
        if obj["kind"] == "CronWorkflow" and obj["metadata"]["name"] == "gpuaas-sweep":
            obj["spec"]["schedules"] = [SWEEP_SCHEDULE]
            obj["spec"]["workflowSpec"]["arguments"] = {"parameters": [{"name": "grace", "value": SWEEP_GRACE}]}
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == PROMETHEUS_CONFIGMAP:
            obj["data"]["GPUAAS_PROMETHEUS_URL"] = settings["prometheus"]["url"]
    for node in each_mapping(objects):
        if node.get("image") == RENDERED_STEP_IMAGE:
            node["image"] = STEP_IMAGE
            node["imagePullPolicy"] = "Never"
    return objects
