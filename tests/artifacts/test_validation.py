"""Every rendered object validates strictly, and the validator really is strict.

The negative tests plant the mistakes that pass a real API server silently (a misspelt key, hera's
nested groupVersionResource, a trigger naming a template that does not exist) and expect the
validator to name them.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuaas.manifests.validation import cross_reference_errors, schema_errors, validate_all

JSON = dict[str, Any]


def _find(objects: list[JSON], kind: str, name: str) -> JSON:
    return copy.deepcopy(next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name))


def test_every_rendered_object_is_valid(rendered_objects: list[JSON]) -> None:
    assert validate_all(rendered_objects) == []


def test_render_covers_every_kind_the_product_ships(rendered_objects: list[JSON]) -> None:
    kinds = {o["kind"] for o in rendered_objects}
    assert kinds >= {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                     "EventBus", "ConfigMap", "WorkflowTemplate", "EventSource", "Sensor", "ScaledObject",
                     "ClusterTriggerAuthentication", "ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue",
                     "PrometheusRule", "AlertmanagerConfig"}


@pytest.mark.parametrize(("kind", "name", "mutate", "expected"), [
    ("WorkflowTemplate", "gpuaas-on-admitted",
     lambda o: o["spec"].__setitem__("synchronization", {"mutex": {"name": "x"}}), "'mutex' was unexpected"),
    ("WorkflowTemplate", "gpuaas-on-idle",
     lambda o: o["spec"]["templates"][1]["script"].__setitem__("imagePullPolicyy", "x"), "imagePullPolicyy"),
    ("EventSource", "gpuaas-workloads",
     lambda o: o["spec"]["resource"]["workloads"].__setitem__(
         "groupVersionResource", {"group": "kueue.x-k8s.io", "version": "v1beta2", "resource": "workloads"}),
     "groupVersionResource"),
    ("EventSource", "gpuaas-alertmanager",
     lambda o: o["spec"]["webhook"]["idle"].__setitem__("webhookContext", {"endpoint": "/x"}), "webhookContext"),
    ("Sensor", "gpuaas-on-admitted",
     lambda o: o["spec"]["triggers"][0]["template"]["argoWorkflow"]["source"]["resource"]["spec"]
     .__setitem__("workflowTemplateRefs", {}), "embedded"),
    ("Sensor", "gpuaas-on-idle",
     lambda o: o["spec"]["dependencies"][0]["filters"]["data"][0].__setitem__("comparer", "="), "comparer"),
    ("ScaledObject", "gpuaas-gpu-node-pool",
     lambda o: o["spec"].__setitem__("maxReplicas", 3), "maxReplicas"),
    ("ClusterQueue", "team-a", lambda o: o["spec"].__setitem__("cohort", "gpuaas"), "'cohort' was unexpected"),
    ("ConfigMap", "gpuaas-policy", lambda o: o.__setitem__("date", {}), "date"),
    ("ClusterRole", "gpuaas-steps", lambda o: o["rules"][0].__setitem__("verb", ["get"]), "verb"),
])
def test_unknown_keys_are_errors(rendered_objects: list[JSON], kind: str, name: str, mutate: Any,
                                 expected: str) -> None:
    obj = _find(rendered_objects, kind, name)
    assert schema_errors(obj) == []
    mutate(obj)
    problems = schema_errors(obj)
    assert problems and any(expected in p for p in problems), problems


def test_a_crd_version_that_is_not_served_is_named(rendered_objects: list[JSON]) -> None:
    queue = _find(rendered_objects, "ClusterQueue", "team-a")
    queue["apiVersion"] = "kueue.x-k8s.io/v1alpha9"
    assert "not a served version" in schema_errors(queue)[0]


def _with(rendered_objects: list[JSON], kind: str, name: str, mutate: Any) -> list[str]:
    objects = copy.deepcopy(rendered_objects)
    target = next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)
    mutate(target)
    return cross_reference_errors(objects)


def test_cross_references_hold(rendered_objects: list[JSON]) -> None:
    assert cross_reference_errors(rendered_objects) == []


def test_trigger_to_a_missing_template_is_an_error(rendered_objects: list[JSON]) -> None:
    def mutate(sensor: JSON) -> None:
        sensor["spec"]["triggers"][0]["template"]["argoWorkflow"]["source"]["resource"]["spec"][
            "workflowTemplateRef"]["name"] = "gpuaas-on-admited"
    problems = _with(rendered_objects, "Sensor", "gpuaas-on-admitted", mutate)
    assert any("gpuaas-on-admited is not a rendered WorkflowTemplate" in p for p in problems)


def test_trigger_parameter_the_template_does_not_declare_is_an_error(rendered_objects: list[JSON]) -> None:
    def mutate(sensor: JSON) -> None:
        sensor["spec"]["triggers"][0]["template"]["argoWorkflow"]["source"]["resource"]["spec"]["arguments"][
            "parameters"].append({"name": "dryrun", "value": "true"})
    problems = _with(rendered_objects, "Sensor", "gpuaas-on-finished", mutate)
    assert any("'dryrun' is not declared" in p for p in problems)


def test_dependency_on_an_event_no_source_defines_is_an_error(rendered_objects: list[JSON]) -> None:
    problems = _with(rendered_objects, "Sensor", "gpuaas-on-idle",
                     lambda s: s["spec"]["dependencies"][0].__setitem__("eventName", "alerts"))
    assert any("names event 'alerts'" in p for p in problems)


def test_trigger_without_conditions_in_a_multi_dependency_sensor_is_an_error(rendered_objects: list[JSON]) -> None:
    problems = _with(rendered_objects, "Sensor", "gpuaas-provision-quota",
                     lambda s: s["spec"]["triggers"][0]["template"].pop("conditions"))
    assert any("waits for ALL" in p for p in problems)


def test_parameter_dest_past_the_arguments_is_an_error(rendered_objects: list[JSON]) -> None:
    problems = _with(rendered_objects, "Sensor", "gpuaas-on-admitted",
                     lambda s: s["spec"]["triggers"][0]["template"]["argoWorkflow"]["parameters"][0].__setitem__(
                         "dest", "spec.arguments.parameters.9.value"))
    assert any("points past" in p for p in problems)


def test_binding_to_a_missing_service_account_is_an_error(rendered_objects: list[JSON]) -> None:
    problems = _with(rendered_objects, "ClusterRoleBinding", "gpuaas-steps",
                     lambda b: b["subjects"][0].__setitem__("name", "gpuaas-step"))
    assert any("subject ServiceAccount gpuaas-step is not rendered" in p for p in problems)


def test_parameter_reading_an_unknown_dependency_is_an_error(rendered_objects: list[JSON]) -> None:
    problems = _with(rendered_objects, "Sensor", "gpuaas-on-idle",
                     lambda s: s["spec"]["triggers"][0]["template"]["argoWorkflow"]["parameters"][0]["src"]
                     .__setitem__("dependencyName", "idle"))
    assert any("parameter reads dependency 'idle'" in p for p in problems)


def test_rendered_policy_is_the_format_the_steps_parse(rendered_objects: list[JSON]) -> None:
    from steps.policy import parse_policy

    config_map = _find(rendered_objects, "ConfigMap", "gpuaas-policy")
    parse_policy(config_map["data"]["policy.yaml"])


def test_the_committed_tree_validates_as_applied() -> None:
    """What `kubectl apply -k` reads: the YAML files, not the Python objects."""
    from gpuaas.manifests.validation import load_tree, validate_tree
    from tests.artifacts.conftest import MANIFESTS

    assert len(load_tree(MANIFESTS)) >= 40
    assert validate_tree(MANIFESTS) == []
