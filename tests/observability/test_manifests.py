"""The rendered observability objects validate STRICTLY against the upstream Prometheus Operator CRDs
(unknown keys are errors: the operator would silently drop them), and say what the product relies on."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from engine.monitoring import availability
from gpuaas.manifests import observability as obs
from gpuaas.manifests.validation import PROMETHEUS_OPERATOR
from gpuaas.upstream import upstream_file

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


def test_alert_routes_to_the_webhook_eventsource_with_bearer_secret() -> None:
    spec = by_kind("AlertmanagerConfig")["spec"]
    assert spec["route"]["matchers"] == [{"name": "alertname", "value": "GPUWorkloadIdle", "matchType": "="}]
    (receiver,) = spec["receivers"]
    (webhook,) = receiver["webhookConfigs"]
    assert receiver["name"] == spec["route"]["receiver"]
    assert webhook["url"] == "http://gpuaas-alertmanager-eventsource-svc.gpuaas.svc:12000/alertmanager"
    assert webhook["httpConfig"]["authorization"] == {
        "type": "Bearer", "credentials": {"name": "gpuaas-alertmanager-webhook", "key": "token"}}


def test_alert_has_for_severity_and_annotations() -> None:
    (group,) = by_kind("PrometheusRule")["spec"]["groups"]
    (alert,) = [r for r in group["rules"] if "alert" in r]
    assert alert["alert"] == "GPUWorkloadIdle" and alert["for"] == "5m"
    assert alert["labels"]["severity"] == "warning"
    assert {"summary", "description", "runbook_url"} <= set(alert["annotations"])
    assert "[30m]" in alert["expr"] and "offset 30m" in alert["expr"]


def test_plain_rule_file_is_the_spec_of_the_prometheus_rule() -> None:
    assert by_kind("PrometheusRule")["spec"] == obs.rule_groups()


@pytest.mark.parametrize(("window", "for_"), [("30m", "5m"), ("4s", "2s")])
def test_promtool_accepts_the_rule_file(tmp_path: Path, window: str, for_: str) -> None:
    found = availability()
    if not found.promtool:
        pytest.skip(found.reason)
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(obs.rule_groups(window, for_)))
    result = subprocess.run([found.promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 8 rules found" in result.stdout


def test_plain_alertmanager_config_is_accepted_by_amtool(tmp_path: Path) -> None:
    amtool = subprocess.run(["which", "amtool"], capture_output=True, text=True, check=False).stdout.strip()
    if not amtool:
        pytest.skip("amtool not installed (Debian package prometheus-alertmanager)")
    token = tmp_path / "token"
    token.write_text("secret")
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(obs.alertmanager_config("http://127.0.0.1:9/alertmanager", str(token))))
    result = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_configmap_has_the_required_panels() -> None:
    cm = by_kind("ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    model = json.loads(cm["data"]["gpuaas-gpu.json"])
    titles = [p["title"] for p in model["panels"]]
    for wanted in ("GPU utilization per tenant", "GPU utilization per project (namespace)", "GPU utilization per GPU",
                   "Idle GPU-hours reclaimed (dashboard range)", "Queue wait before admission (p90) per tenant"):
        assert wanted in titles
    exprs = " ".join(t["expr"] for p in model["panels"] for t in p["targets"])
    for metric in (obs.TENANT_UTILIZATION, obs.NAMESPACE_UTILIZATION, obs.GPU_ACTIVITY, obs.TENANT_ALLOCATED,
                   obs.TENANT_QUEUE_WAIT_P90, "argo_workflows_gpuaas_gpu_hours_reclaimed"):
        assert metric in exprs
    assert len({p["id"] for p in model["panels"]}) == len(model["panels"])


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
