"""The product as it runs on this stack (gpuaas.cluster.product): what the machine's overlay changes."""

from __future__ import annotations

import yaml

from gpuaas.cluster import services
from gpuaas.cluster.product import BASE, for_this_stack


def _base() -> list[dict]:
    """The rendered base's files as they are (the same objects kustomize emits: no transformers change them)."""
    listed = yaml.safe_load((BASE / "kustomization.yaml").read_text())["resources"]
    return [doc for name in listed for doc in yaml.safe_load_all((BASE / name).read_text()) if doc]


def _urls(objects: list[dict]) -> list[str]:
    """GPUAAS_PROMETHEUS_URL of ConfigMap gpuaas-prometheus (every step's envFrom: workflows/reaction.py)."""
    return [o["data"]["GPUAAS_PROMETHEUS_URL"] for o in objects
            if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "gpuaas-prometheus"]


def test_the_steps_reach_prometheus_at_the_fixed_cluster_ip_the_node_forwards() -> None:
    """Pods on the real node have no cluster DNS: `prometheus-operated.monitoring.svc` resolves to nothing
    there, so the on-idle step could never read the evidence. The stack's Prometheus has a Service with a
    fixed ClusterIP that the node's stand-in for kube-proxy forwards (gpuaas.cluster.services)."""
    base = _base()
    assert _urls(base), "the base has no ConfigMap gpuaas-prometheus: test is stale"
    templates = [o for o in base if o["kind"] == "WorkflowTemplate"]
    assert templates and all({"configMapRef": {"name": "gpuaas-prometheus", "optional": True}} in s["script"]["envFrom"]
                             for o in templates for s in o["spec"]["templates"] if "script" in s), "a step lacks envFrom"
    objects = for_this_stack(base)
    assert _urls(objects) == [f"http://{services.PROMETHEUS.url_host}"], _urls(objects)
    assert _urls(base)[0].startswith("http://prometheus-operated"), "base changed in place"


def test_the_overlay_changes_only_the_event_bus_placement_image_and_prometheus_address() -> None:
    base = _base()
    objects = for_this_stack(base)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [(o["kind"], o["metadata"]["name"]) for o in base]
    policy = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "gpuaas-policy")
    assert policy == next(o for o in base if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "gpuaas-policy")

