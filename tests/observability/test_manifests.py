"""The rendered observability objects validate STRICTLY against the upstream Prometheus Operator CRDs
(unknown keys are errors: the operator would silently drop them), and say what the product relies on."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gpuaas.manifests import dashboard, gpu_health
from gpuaas.manifests import observability as obs
from gpuaas.manifests.validation import PROMETHEUS_OPERATOR
from gpuaas.upstream import upstream_file
from tests.support.prometheus import require_monitoring

REPO = Path(__file__).resolve().parents[2]


class _CrdLoader(yaml.SafeLoader):
    """The CRDs contain a bare `=` (an enum value), which YAML 1.1 reads as the `value` tag."""


_CrdLoader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


def strict(schema: Any) -> Any:
    """Copy of an OpenAPI v3 schema where objects with declared properties reject unknown keys."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def crd_schema(file: str, api_version: str) -> dict[str, Any]:
    path = upstream_file(PROMETHEUS_OPERATOR, f"example/prometheus-operator-crd/monitoring.coreos.com_{file}")
    crd = yaml.load(path.read_text(), Loader=_CrdLoader)
    version = api_version.split("/")[1]
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            return strict(served["schema"]["openAPIV3Schema"])
    raise AssertionError(f"{file} serves no version {version}")


def validate(obj: dict[str, Any], file: str) -> None:
    jsonschema.Draft7Validator(crd_schema(file, obj["apiVersion"])).validate(obj)


def by_kind(kind: str) -> dict[str, Any]:
    return next(o for o in obs.objects() if o["kind"] == kind)


def test_objects_are_the_three_kinds_in_the_product_namespace() -> None:
    assert [(o["kind"], o["metadata"]["namespace"]) for o in obs.objects()] == [
        ("PrometheusRule", "gpuaas"), ("AlertmanagerConfig", "gpuaas"), ("ConfigMap", "gpuaas")]


def test_prometheus_rule_validates_strictly() -> None:
    validate(by_kind("PrometheusRule"), "prometheusrules.yaml")


def test_alertmanager_config_validates_strictly() -> None:
    validate(by_kind("AlertmanagerConfig"), "alertmanagerconfigs.yaml")


def test_strict_validation_rejects_a_misspelt_key() -> None:
    """The check can fail: `groupby` (lower case) is exactly the typo the operator would ignore."""
    bad = copy.deepcopy(by_kind("AlertmanagerConfig"))
    bad["spec"]["route"]["groupby"] = bad["spec"]["route"].pop("groupBy")
    with pytest.raises(jsonschema.ValidationError, match="groupby"):
        validate(bad, "alertmanagerconfigs.yaml")
    bad_rule = copy.deepcopy(by_kind("PrometheusRule"))
    bad_rule["spec"]["groups"][0]["rules"][-1]["fore"] = "5m"
    with pytest.raises(jsonschema.ValidationError, match="fore"):
        validate(bad_rule, "prometheusrules.yaml")


def test_alert_routes_idle_to_the_webhook_and_health_to_the_admins() -> None:
    spec = by_kind("AlertmanagerConfig")["spec"]
    top = spec["route"]
    assert top["matchers"] == [{"name": "alertname", "matchType": "=~",
                                "value": "|".join(["GPUWorkloadIdle", *gpu_health.ALERTS])}]
    assert top["receiver"] == obs.ADMINS_RECEIVER  # the fallback is never the idle webhook
    idle, admins = top["routes"]
    assert idle["receiver"] == obs.RECEIVER
    assert idle["matchers"] == [{"name": "alertname", "value": "GPUWorkloadIdle", "matchType": "="}]
    assert admins["receiver"] == obs.ADMINS_RECEIVER
    assert admins["matchers"] == [{"name": "gpuaas_notify", "value": "gpu-admins", "matchType": "="}]
    receivers = {r["name"]: r for r in spec["receivers"]}
    (webhook,) = receivers[obs.RECEIVER]["webhookConfigs"]
    assert webhook["url"] == "http://gpuaas-alertmanager-eventsource-svc.gpuaas.svc:12000/alertmanager"
    assert webhook["httpConfig"]["authorization"] == {
        "type": "Bearer", "credentials": {"name": "gpuaas-alertmanager-webhook", "key": "token"}}
    (admin_hook,) = receivers[obs.ADMINS_RECEIVER]["webhookConfigs"]
    assert admin_hook == {"urlSecret": {"name": "gpuaas-admin-alerts", "key": "url"}, "sendResolved": True}


def test_child_routes_validate_strictly_against_the_route_schema() -> None:
    """The CRD leaves `routes[]` unchecked (preserve-unknown-fields); check each child as a route."""
    schema = crd_schema("alertmanagerconfigs.yaml", "monitoring.coreos.com/v1alpha1")
    route_schema = schema["properties"]["spec"]["properties"]["route"]
    for child in by_kind("AlertmanagerConfig")["spec"]["route"]["routes"]:
        jsonschema.Draft7Validator(route_schema).validate(child)


def test_health_alerts_never_carry_the_idle_reaction_label() -> None:
    rules = [r for g in obs.rule_groups()["groups"] for r in g["rules"] if "alert" in r]
    for rule in rules:
        if rule["alert"] == obs.ALERT_NAME:
            assert rule["labels"]["gpuaas_reaction"] == "on-idle" and "gpuaas_notify" not in rule["labels"]
        else:
            assert rule["alert"] in gpu_health.ALERTS
            assert rule["labels"]["gpuaas_notify"] == "gpu-admins" and "gpuaas_reaction" not in rule["labels"]
            assert {"summary", "description", "runbook", "runbook_url"} <= set(rule["annotations"])
    assert {r["alert"] for r in rules} == {obs.ALERT_NAME, *gpu_health.ALERTS}


def test_alert_has_for_severity_and_annotations() -> None:
    groups = by_kind("PrometheusRule")["spec"]["groups"]
    (alert,) = [r for g in groups for r in g["rules"] if r.get("alert") == "GPUWorkloadIdle"]
    assert alert["for"] == "5m"
    assert alert["labels"]["severity"] == "warning"
    assert {"summary", "description", "runbook_url"} <= set(alert["annotations"])
    assert "[30m]" in alert["expr"] and "offset 30m" in alert["expr"]


def test_plain_rule_file_is_the_spec_of_the_prometheus_rule() -> None:
    assert by_kind("PrometheusRule")["spec"] == obs.rule_groups()


@pytest.mark.parametrize(("window", "for_"), [("30m", "5m"), ("4s", "2s")])
def test_promtool_accepts_the_rule_file(tmp_path: Path, window: str, for_: str) -> None:
    found = require_monitoring()
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(obs.rule_groups(window, for_)))
    result = subprocess.run([found.promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    count = sum(len(g["rules"]) for g in obs.rule_groups()["groups"])
    assert f"SUCCESS: {count} rules found" in result.stdout


def _amtool() -> str:
    require_monitoring()
    amtool = shutil.which("amtool")
    assert amtool, "amtool missing: it comes with the Debian package prometheus-alertmanager (make setup)"
    return amtool


def _plain_config(tmp_path: Path) -> Path:
    token = tmp_path / "token"
    token.write_text("secret")
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(obs.alertmanager_config("http://127.0.0.1:9/alertmanager", str(token),
                                                           admins_url="http://127.0.0.1:9/admins")))
    return path


def test_plain_alertmanager_config_is_accepted_by_amtool(tmp_path: Path) -> None:
    result = subprocess.run([_amtool(), "check-config", str(_plain_config(tmp_path))], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("labels", "receiver"), [
    (["alertname=GPUWorkloadIdle", "namespace=team-a", "pod=nb-0", "gpuaas_reaction=on-idle"], obs.RECEIVER),
    *[([f"alertname={name}", "gpuaas_notify=gpu-admins", "node=gpu-node-1", "severity=critical"], obs.ADMINS_RECEIVER)
      for name in gpu_health.ALERTS],
    # a health alert that lost its notify label still never reaches the idle webhook
    (["alertname=GPUXidError"], obs.ADMINS_RECEIVER),
    (["alertname=KubePodCrashLooping", "namespace=team-a"], "discard"),
])
def test_alertmanager_routes_each_alert_to_its_receiver(tmp_path: Path, labels: list[str], receiver: str) -> None:
    """Alertmanager's own routing code (amtool config routes test) on the plain config the engine runs."""
    result = subprocess.run([_amtool(), "config", "routes", "test", f"--config.file={_plain_config(tmp_path)}",
                             *labels], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split() == [receiver]


def test_dashboard_configmap_is_the_sdk_model_with_every_row() -> None:
    cm = by_kind("ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    model = json.loads(cm["data"]["gpuaas-gpu.json"])
    assert model == dashboard.dashboard()  # what the SDK builds is what is shipped
    assert model["schemaVersion"] >= 41  # the SDK's model, not the hand-written one (39)
    rows = [p["title"] for p in model["panels"] if p["type"] == "row"]
    assert rows == ["Tenants (ClusterQueues)", "Projects (namespaces)", "GPUs", "Automation"]
    titles = [p["title"] for p in model["panels"]]
    for wanted in ("GPU utilization per tenant", "GPUs allocated vs nominal quota per tenant",
                   "GPUs borrowed from the cohort and GPUs waiting per tenant",
                   "Queue wait before admission (p90) per tenant", "Idle GPU-hours reclaimed (dashboard range)",
                   "GPU utilization per project", "GPU temperature", "GPU power draw", "Framebuffer memory used",
                   "Last XID error per GPU (0 = none)", "ECC and row-remap errors per GPU (per hour)",
                   "Reaction steps per outcome (per hour)", "Workloads idle now (GPUWorkloadIdle firing)"):
        assert wanted in titles
    exprs = " ".join(t["expr"] for p in model["panels"] for t in p.get("targets", []))
    for metric in (obs.TENANT_UTILIZATION, obs.NAMESPACE_UTILIZATION, obs.GPU_ACTIVITY, obs.TENANT_ALLOCATED,
                   obs.TENANT_QUEUE_WAIT_P90, obs.TENANT_BORROWED, gpu_health.TEMPERATURE, gpu_health.POWER,
                   gpu_health.XID_LAST, gpu_health.MEMORY_ERRORS, "argo_workflows_gpuaas_gpu_hours_reclaimed"):
        assert metric in exprs
    assert len({p["id"] for p in model["panels"]}) == len(model["panels"])
    for panel in model["panels"]:
        if panel["type"] != "row":
            assert panel["targets"] and all(t["refId"] and t["datasource"]["uid"] == "${datasource}"
                                            for t in panel["targets"])


def test_webhook_target_matches_the_rendered_event_source() -> None:
    """Cross-reference: the AlertmanagerConfig posts where the webhook EventSource listens, with its Secret."""
    from sensors import event_sources as es

    source = es.alertmanager()
    webhook = source["spec"]["webhook"][es.ALERTMANAGER_EVENT]
    (port,) = source["spec"]["service"]["ports"]
    amc = by_kind("AlertmanagerConfig")["spec"]["receivers"][0]["webhookConfigs"][0]
    service = f"{source['metadata']['name']}-eventsource-svc"  # the Service Argo Events creates
    assert amc["url"] == f"http://{service}.gpuaas.svc:{port['port']}{webhook['endpoint']}"
    assert amc["httpConfig"]["authorization"]["credentials"] == webhook["authSecret"]
