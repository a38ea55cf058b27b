"""Trigger parameters against params.go: keys, templates, defaults, whole event, dest/operation,
and dependency conditions (&&, ||) as the JetStream trigger connection applies them."""

from __future__ import annotations

import base64
import json
from typing import Any

from tests.routing.builders import EVENT, SOURCE, cloudevent, params_of, router, sensor, workflow_resource

DATA = {"type": "UPDATE",
        "body": {"metadata": {"name": "w1", "namespace": "team-a",
                              "labels": {"kueue.x-k8s.io/queue-name": "team-a-gpus"}},
                 "spec": {"podSets": [{"name": "main", "count": 4}]},
                 "status": {"admission": {"clusterQueue": "team-a"}, "ratio": 0.5, "ok": True, "gone": None}}}


def param(dest: str, **src: Any) -> dict[str, Any]:
    src.setdefault("dependencyName", "dep")
    return {"src": src, "dest": dest}


def route(*parameters: dict[str, Any], data: Any = DATA, **event: Any) -> Any:
    return router(sensor(parameters=list(parameters))).route(cloudevent(data, **event))


class TestResolution:
    def test_data_key_string_number_and_object(self) -> None:
        result = route(param("spec.arguments.parameters.0.value", dataKey="body.metadata.name"),
                       param("spec.arguments.parameters.1.value", dataKey="body.spec.podSets.0.count"),
                       param("spec.arguments.parameters.2.value", dataKey="body.status.admission"))
        assert params_of(result) == ["w1", "4", '{"clusterQueue":"team-a"}']

    def test_escaped_key(self) -> None:
        result = route(param("spec.arguments.parameters.0.value",
                             dataKey="body.metadata.labels.kueue\\.x-k8s\\.io/queue-name"))
        assert params_of(result)[0] == "team-a-gpus"

    def test_use_raw_data_keeps_json_types(self) -> None:
        result = route(param("spec.arguments.parameters.0.value", dataKey="body.spec.podSets.0.count", useRawData=True),
                       param("spec.arguments.parameters.1.value", dataKey="body.status.admission", useRawData=True),
                       param("spec.arguments.parameters.2.value", dataKey="body.status.ok", useRawData=True))
        assert params_of(result) == [4, {"clusterQueue": "team-a"}, True]

    def test_null_key_resolves_to_null_text(self) -> None:
        result = route(param("spec.arguments.parameters.0.value", dataKey="body.status.gone"))
        assert params_of(result)[0] == "null"

    def test_template_over_the_data_with_go_number_printing(self) -> None:
        template = ('{{ .Input.body.metadata.namespace }}/{{ .Input.body.metadata.name }} '
                    'gpus={{ (index .Input.body.spec.podSets 0).count }} ratio={{ .Input.body.status.ratio }}')
        result = route(param("spec.arguments.parameters.0.value", dataTemplate=template))
        assert params_of(result)[0] == "team-a/w1 gpus=4 ratio=0.5"

    def test_template_with_sprig_functions(self) -> None:
        template = ('{{ index .Input.body.metadata.labels "kueue.x-k8s.io/queue-name" | upper }}'
                    '-{{ .Input.body.missing | default "none" }}-{{ toJson .Input.body.status.admission }}')
        result = route(param("spec.arguments.parameters.0.value", dataTemplate=template))
        assert params_of(result)[0] == 'TEAM-A-GPUS-none-{"clusterQueue":"team-a"}'

    def test_template_printing_no_value_falls_back_to_key_then_default(self) -> None:
        result = route(
            param("spec.arguments.parameters.0.value", dataTemplate="{{ .Input.body.nope }}", dataKey="body.metadata.name"),
            param("spec.arguments.parameters.1.value", dataTemplate="{{ .Input.body.nope.deeper }}", value="fallback"),
        )
        assert params_of(result)[:2] == ["w1", "fallback"]

    def test_partly_missing_template_is_accepted_silently_like_the_sensor(self) -> None:
        result = route(param("spec.arguments.parameters.0.value", dataTemplate="{{ .Input.body.metadata.name }}/{{ .Input.nope }}"))
        assert params_of(result)[0] == "w1/<no value>"

    def test_template_is_tried_before_key(self) -> None:
        result = route(param("spec.arguments.parameters.0.value", dataKey="type", dataTemplate="tpl-{{ .Input.type }}"))
        assert params_of(result)[0] == "tpl-UPDATE"

    def test_context_key_and_template(self) -> None:
        event = cloudevent(DATA)
        result = router(sensor(parameters=[
            param("spec.arguments.parameters.0.value", contextKey="subject"),
            param("spec.arguments.parameters.1.value", contextTemplate="{{ .Input.source }}@{{ .Input.time }}"),
        ])).route(event)
        assert params_of(result)[:2] == [EVENT, f"{SOURCE}@2026-12-01T09:30:00Z"]

    def test_data_key_wins_over_context_key(self) -> None:
        result = route(param("spec.arguments.parameters.0.value", contextKey="subject", dataKey="type"))
        assert params_of(result)[0] == "UPDATE"

    def test_default_when_key_missing(self) -> None:
        result = route(param("spec.arguments.parameters.0.value", dataKey="body.nope", value="dflt"))
        assert params_of(result)[0] == "dflt"

    def test_value_alone_is_a_constant(self) -> None:
        result = route(param("spec.arguments.parameters.0.value", value="constant"))
        assert params_of(result)[0] == "constant"

    def test_unresolved_without_default_fails_the_trigger_with_a_reason(self) -> None:
        result = route(param("spec.arguments.parameters.0.value", dataKey="body.status.conditions"))
        assert result.triggered == []
        (skip,) = result.skipped
        assert skip.trigger == "run"
        assert "parameter 1 (dest spec.arguments.parameters.0.value)" in skip.reason
        assert "key 'body.status.conditions' does not exist" in skip.reason

    def test_non_json_content_type_cannot_feed_a_data_key(self) -> None:
        result = route(param("spec.arguments.parameters.0.value", dataKey="type"), datacontenttype="text/plain")
        assert result.triggered == [] and "unsupported event content type: text/plain" in result.skipped[0].reason


class TestWholeEvent:
    def test_no_key_no_template_gives_the_whole_event_with_base64_data(self) -> None:
        event = cloudevent(DATA, id="abc123")
        result = router(sensor(parameters=[param("spec.arguments.parameters.0.value")])).route(event)
        whole = json.loads(params_of(result)[0])
        assert list(whole) == ["context", "data"]
        assert whole["context"] == {"id": "abc123", "source": SOURCE, "specversion": "1.0", "type": "resource",
                                    "datacontenttype": "application/json", "subject": EVENT,
                                    "time": "2026-12-01T09:30:00Z"}
        decoded = json.loads(base64.b64decode(whole["data"]))
        assert (decoded["type"], decoded["body"]) == (DATA["type"], DATA["body"])

    def test_data_bytes_are_go_compact_json_with_html_escaping(self) -> None:
        data = {"b": "<x> & y", "a": 1}
        result = router(sensor(parameters=[param("spec.arguments.parameters.0.value")])).route(cloudevent(data))
        raw = base64.b64decode(json.loads(params_of(result)[0])["data"]).decode()
        assert raw == '{"b":"\\u003cx\\u003e \\u0026 y","a":1}'

    def test_data_base64_is_delivered_verbatim(self) -> None:
        raw = b'{"type": "ADD",  "body": {}}'
        event = cloudevent(None, data_base64=base64.b64encode(raw).decode())
        del event["data"]
        result = router(sensor(parameters=[param("spec.arguments.parameters.0.value")])).route(event)
        assert base64.b64decode(json.loads(params_of(result)[0])["data"]) == raw


class TestDestination:
    def test_dest_creates_missing_keys_and_escaped_label_keys(self) -> None:
        result = route(param("metadata.labels.gpuaas\\.io/workload", dataKey="body.metadata.name"),
                       param("spec.arguments.parameters.-1", dataKey="body.status.admission", useRawData=True))
        workflow = result.workflows[0]
        assert workflow["metadata"]["labels"]["gpuaas.io/workload"] == "w1"
        assert workflow["spec"]["arguments"]["parameters"][-1] == {"clusterQueue": "team-a"}

    def test_append_and_prepend(self) -> None:
        resource = workflow_resource(["p0"])
        resource["metadata"]["generateName"] = "run-"
        resource["spec"]["arguments"]["parameters"][0]["value"] = "mid"
        s = sensor(resource=resource, parameters=[
            {**param("metadata.generateName", dataKey="body.metadata.name"), "operation": "append"},
            {**param("spec.arguments.parameters.0.value", value="pre-"), "operation": "prepend"},
        ])
        workflow = router(s).route(cloudevent(DATA)).workflows[0]
        assert workflow["metadata"]["generateName"] == "run-w1"
        assert workflow["spec"]["arguments"]["parameters"][0]["value"] == "pre-mid"

    def test_submitted_workflow_gets_the_sensor_labels_and_namespace(self) -> None:
        workflow = route().workflows[0]
        assert workflow["metadata"]["namespace"] == "gpuaas"
        assert workflow["metadata"]["labels"] == {
            "events.argoproj.io/sensor": "demo", "events.argoproj.io/trigger": "run",
            "events.argoproj.io/action-timestamp": "1796000000000"}

    def test_workflow_without_name_or_generate_name_fails(self) -> None:
        resource = workflow_resource([])
        resource["metadata"] = {}
        result = router(sensor(resource=resource)).route(cloudevent(DATA))
        assert result.triggered == [] and "neither name nor generateName" in result.skipped[0].reason


def two_dependency_sensor(conditions: str | None, params: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    deps = [
        {"name": "admitted", "eventSourceName": SOURCE, "eventName": EVENT,
         "filters": {"data": [{"path": "type", "type": "string", "value": ["^UPDATE$"]}]}},
        {"name": "alerted", "eventSourceName": SOURCE, "eventName": "other"},
    ]
    return sensor(dependencies=deps, conditions=conditions, parameters=params)


class TestConditions:
    def test_and_waits_for_both_then_fires_once_with_both_events(self) -> None:
        r = router(two_dependency_sensor("admitted && alerted", [
            param("spec.arguments.parameters.0.value", dependencyName="admitted", dataKey="body.metadata.name"),
            param("spec.arguments.parameters.1.value", dependencyName="alerted", dataKey="alert"),
        ]))
        first = r.route(cloudevent(DATA))
        assert first.triggered == []
        assert "not yet received: alerted" in first.skipped[0].reason
        second = r.route(cloudevent({"alert": "GPUWorkloadIdle"}, subject="other"))
        assert [t.dependencies for t in second.triggered] == [["admitted", "alerted"]]
        assert params_of(second)[:2] == ["w1", "GPUWorkloadIdle"]
        third = r.route(cloudevent({"alert": "again"}, subject="other"))
        assert third.triggered == []  # memory cleared after firing

    def test_no_conditions_means_all_dependencies(self) -> None:
        r = router(two_dependency_sensor(None))
        assert r.route(cloudevent(DATA)).triggered == []
        assert len(r.route(cloudevent({}, subject="other")).triggered) == 1

    def test_or_fires_per_dependency_and_missing_dependency_uses_default(self) -> None:
        r = router(two_dependency_sensor("admitted || alerted", [
            param("spec.arguments.parameters.0.value", dependencyName="alerted", dataKey="alert", value="none"),
        ]))
        result = r.route(cloudevent(DATA))
        assert [t.dependencies for t in result.triggered] == [["admitted"]]
        assert params_of(result)[0] == "none"

    def test_one_event_matching_two_or_dependencies_fires_twice(self) -> None:
        deps = [{"name": "a", "eventSourceName": SOURCE, "eventName": EVENT},
                {"name": "b", "eventSourceName": SOURCE, "eventName": EVENT}]
        result = router(sensor(dependencies=deps, conditions="a || b")).route(cloudevent(DATA))
        assert [t.dependencies for t in result.triggered] == [["a"], ["b"]]

    def test_dependency_failing_its_filter_is_not_remembered(self) -> None:
        r = router(two_dependency_sensor("admitted && alerted"))
        r.route(cloudevent({"type": "ADD"}))
        assert r.route(cloudevent({}, subject="other")).triggered == []

    def test_unknown_dependency_in_conditions_never_runs(self) -> None:
        result = router(two_dependency_sensor("admitted && nobody")).route(cloudevent(DATA))
        assert result.triggered == []
        assert any("nobody" in s.reason and "never runs" in s.reason for s in result.skipped)

    def test_parenthesised_conditions_with_dashes(self) -> None:
        deps = [{"name": n, "eventSourceName": SOURCE, "eventName": e}
                for n, e in (("dep-a", EVENT), ("dep-b", "b"), ("dep-c", "c"))]
        r = router(sensor(dependencies=deps, conditions="(dep-a || dep-b) && dep-c"))
        assert r.route(cloudevent({}, subject="b")).triggered == []
        assert [t.dependencies for t in r.route(cloudevent({}, subject="c")).triggered] == [["dep-b", "dep-c"]]

    def test_conditions_names_match_dependencies_up_to_dash_and_underscore(self) -> None:
        """listener.go getDependencyExpression maps every `-` in `conditions` to `_` and each
        dependency name likewise (listener_test.go: `dep-1a` names the dependency `dep_1a`)."""
        deps = [{"name": n, "eventSourceName": SOURCE, "eventName": e}
                for n, e in (("dep-1", EVENT), ("dep_1a", "b"), ("dep-3", "c"))]
        r = router(sensor(dependencies=deps, conditions="dep-1a && dep_3"))
        assert r.route(cloudevent({}, subject="b")).triggered == []
        assert [t.dependencies for t in r.route(cloudevent({}, subject="c")).triggered] == [["dep-3", "dep_1a"]]


class TestOtherTriggers:
    def test_k8s_create_trigger_labels_the_object_and_reports_the_operation(self) -> None:
        s = sensor(parameters=[])
        template = s["spec"]["triggers"][0]["template"]
        template["k8s"] = {"operation": "create", "source": {"inline": (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: seen-}\ndata: {name: ''}\n")},
            "parameters": [param("data.name", dataKey="body.metadata.name")]}
        del template["argoWorkflow"]
        result = router(s).route(cloudevent(DATA))
        (triggered,) = result.triggered
        assert (triggered.type, triggered.operation) == ("k8s", "create")
        assert triggered.workflow["data"] == {"name": "w1"}
        assert triggered.workflow["metadata"]["labels"]["events.argoproj.io/trigger"] == "run"

    def test_trigger_level_parameters_rewrite_the_template(self) -> None:
        s = sensor()
        s["spec"]["triggers"][0]["parameters"] = [
            param("argoWorkflow.source.resource.spec.workflowTemplateRef.name", dataTemplate="tpl-{{ .Input.type }}")]
        (workflow,) = router(s).route(cloudevent(DATA)).workflows
        assert workflow["spec"]["workflowTemplateRef"]["name"] == "tpl-UPDATE"

    def test_source_outside_the_sensor_is_reported(self) -> None:
        s = sensor()
        s["spec"]["triggers"][0]["template"]["argoWorkflow"]["source"] = {"s3": {"bucket": {"name": "b"}}}
        result = router(s).route(cloudevent(DATA))
        assert result.triggered == [] and "only evaluates source.resource and source.inline" in result.skipped[0].reason


def test_resource_event_bytes_are_laid_out_as_the_event_source_marshals_them() -> None:
    """ResourceEventData: struct field order, objects with sorted keys (unstructured -> Go map),
    empty metadata omitted; so the `event` parameter is byte-identical to the sensor's."""
    data = {"metadata": {}, "resource": "workloads", "version": "v1beta2", "group": "kueue.x-k8s.io",
            "oldBody": None, "body": {"status": {"b": 1, "a": 2}, "kind": "Workload"}, "type": "ADD"}
    result = router(sensor(parameters=[param("spec.arguments.parameters.0.value")])).route(cloudevent(data))
    raw = base64.b64decode(json.loads(params_of(result)[0])["data"]).decode()
    assert raw == ('{"type":"ADD","body":{"kind":"Workload","status":{"a":2,"b":1}},"oldBody":null,'
                   '"group":"kueue.x-k8s.io","version":"v1beta2","resource":"workloads"}')


class TestNotEvaluated:
    """What gpuaas route does not reproduce is reported as such, never replaced by a default."""

    def test_sprig_function_outside_the_evaluator_is_not_guessed(self) -> None:
        s = sensor(parameters=[param("spec.arguments.parameters.0.value", dataTemplate="{{ .Input.type | sortAlpha }}",
                                     value="fallback")])
        result = router(s).route(cloudevent(DATA))
        assert result.triggered == []
        (skip,) = [s for s in result.skipped if s.trigger]
        assert "'sortAlpha' is not evaluated by gpuaas route" in skip.reason

    def test_pretty_modifier_in_a_data_key_is_not_guessed(self) -> None:
        s = sensor(parameters=[param("spec.arguments.parameters.0.value", dataKey="body|@pretty", value="fallback")])
        result = router(s).route(cloudevent(DATA))
        assert result.triggered == [] and any("@pretty" in s.reason for s in result.skipped)
