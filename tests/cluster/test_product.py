"""The product as it runs on this stack (gpuaas.cluster.product): what this machine's values change."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpuaas.cluster import services
from gpuaas.cluster.images import STEP_IMAGE
from gpuaas.cluster.product import BASE, SWEEP_GRACE, SWEEP_SCHEDULE, for_this_stack, stack_objects

REPO = Path(__file__).resolve().parents[2]


def _base() -> list[dict]:
    """The rendered base's files as they are (the same objects kustomize emits: no transformers change them)."""
    listed = yaml.safe_load((BASE / "kustomization.yaml").read_text())["resources"]
    return [doc for name in listed for doc in yaml.safe_load_all((BASE / name).read_text()) if doc]


def _urls(objects: list[dict]) -> list[str]:
    """GPUAAS_PROMETHEUS_URL of ConfigMap gpuaas-prometheus (every step's envFrom: workflows/reaction.py)."""
    return [o["data"]["GPUAAS_PROMETHEUS_URL"] for o in objects
            if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "gpuaas-prometheus"]


def _by_key(objects: list[dict]) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def test_the_steps_reach_prometheus_at_the_fixed_cluster_ip_the_node_forwards() -> None:
    """Pods on the real node have no cluster DNS: `prometheus-operated.monitoring.svc` resolves to nothing
    there, so the on-idle step could never read the evidence. The stack's Prometheus has a Service with a
    fixed ClusterIP that the node's stand-in for kube-proxy forwards (gpuaas.cluster.services)."""
    base = _base()
    assert _urls(base), "the base has no ConfigMap gpuaas-prometheus: test is stale"
    templates = [o for o in base if o["kind"] == "WorkflowTemplate"]
    assert templates and all({"configMapRef": {"name": "gpuaas-prometheus", "optional": True}} in s["script"]["envFrom"]
                             for o in templates for s in o["spec"]["templates"] if "script" in s), "a step lacks envFrom"
    assert _urls(stack_objects()) == [f"http://{services.PROMETHEUS.url_host}"], _urls(stack_objects())


def test_the_values_change_only_the_event_bus_placement_image_prometheus_address_and_sweep() -> None:
    base, stack = _by_key(_base()), _by_key(stack_objects())
    assert sorted(stack) == sorted(base)
    changed = sorted(key for key in base if base[key] != stack[key])
    assert {kind for kind, _ in changed} == {"EventBus", "EventSource", "Sensor", "WorkflowTemplate", "ConfigMap",
                                             "CronWorkflow"}, changed
    assert [key for key in changed if key[0] == "ConfigMap"] == [("ConfigMap", "gpuaas-prometheus")], changed
    assert stack[("ConfigMap", "gpuaas-policy")] == base[("ConfigMap", "gpuaas-policy")]
    assert list(stack[("EventBus", "default")]["spec"]) == ["jetstreamExotic"]
    for key in changed:
        if key[0] in ("EventSource", "Sensor"):
            template = stack[key]["spec"]["template"]
            assert template["nodeSelector"] and template["tolerations"], key
    images = {c["image"] for t in stack.values() if t["kind"] == "WorkflowTemplate" for c in
              (s["script"] for s in t["spec"]["templates"] if "script" in s)}
    assert images == {STEP_IMAGE}
    sweep = stack[("CronWorkflow", "gpuaas-sweep")]["spec"]
    assert sweep["schedules"] == [SWEEP_SCHEDULE], sweep
    assert sweep["workflowSpec"]["arguments"]["parameters"] == [{"name": "grace", "value": SWEEP_GRACE}], sweep


def test_an_earlier_releases_base_gets_the_same_changes_as_this_checkouts_values() -> None:
    """benchmarks/scale.py --before-base installs an earlier release's rendered base: for_this_stack must make the
    changes stack_values() makes, or the "before" figures would measure another configuration."""
    base = _base()
    assert _by_key(for_this_stack(base)) == _by_key(stack_objects())
    assert _urls(base)[0].startswith("http://prometheus-operated"), "base changed in place"


def test_the_admins_values_file_is_the_stacks_settings_without_namespace_or_node_pool(tmp_path: Path) -> None:
    """`gpuaas cluster up --with events` writes it for `helm install -f YOURS -f it`: the stack's settings, the
    webhook Secret it made, no Namespace, no node pool; the other bus forms nulled; a profile keeps its URL."""
    from gpuaas.cluster.product import OTHER_BUS_FORMS, admin_values, stack_values, write_admin_values

    plain = admin_values()
    stack = stack_values()
    assert plain["namespace"] == {"create": False} and plain["nodePool"] == {"enabled": False}
    assert plain["secrets"] == {"webhookToken": {"name": "gpuaas-alertmanager-webhook", "key": "token"}}
    assert plain["eventBus"]["spec"] == {**{form: None for form in OTHER_BUS_FORMS}, **stack["eventBus"]["spec"]}
    assert {k: plain[k] for k in ("image", "prometheus", "events", "sweep")} == \
        {k: stack[k] for k in ("image", "prometheus", "events", "sweep")}
    assert "prometheus" not in admin_values("openshift")
    path = write_admin_values(tmp_path, "plain")
    text = path.read_text()
    assert yaml.safe_load(text) == plain
    assert f"-f YOURS.yaml -f {path} --server-side=false" in text.splitlines()[1]


def test_helm_with_a_site_file_then_the_stacks_file_renders_the_stacks_bus_and_token(tmp_path: Path) -> None:
    """The printed line with examples/values/site.yaml as the admin's file (it sets a native jetstream bus with a
    storage class, and another webhook Secret): the real helm renders one bus form, the stack's, and the
    EventSource reads the Secret `cluster up` made (a review found both merged before the nulls)."""
    from gpuaas.cluster.product import write_admin_values
    from tests.support.helm import template

    objects = template([REPO / "examples" / "values" / "site.yaml", write_admin_values(tmp_path, "plain")], "gpuaas",
                       tmp_path / "helm", hooks=False)
    (bus,) = [o for o in objects if o["kind"] == "EventBus"]
    assert [form for form, value in bus["spec"].items() if value is not None] == ["jetstreamExotic"], bus["spec"]
    webhook = next(o for o in objects if o["kind"] == "EventSource" and "webhook" in o["spec"])
    secrets = {e["authSecret"]["name"] for e in webhook["spec"]["webhook"].values()}
    assert secrets == {"gpuaas-alertmanager-webhook"}, secrets
