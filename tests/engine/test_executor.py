"""The executor runs WorkflowTemplates as Argo does: fan-out, retries, exit handler, mutexes, outputs.

The templates here are small script templates (`python` + `source`, exactly Argo's script form) so
each feature is checked on its own; the end-to-end tests run the rendered gpuaas templates.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.archive import RunArchive
from engine.executor import ExecutorSettings, SubmissionRejected, WorkflowExecutor
from engine.step_runner import SubprocessStepRunner
from engine.timeline import reaction_outcomes

WRITE_OUTPUT = """
import json, os, pathlib, sys
params = {p["name"]: p["value"] for p in json.load(open(sys.argv[-1]))}
out = pathlib.Path(os.environ["GPUAAS_OUTPUTS_DIR"]); out.mkdir(parents=True, exist_ok=True)
"""


def script(name: str, body: str, inputs: list[str], outputs: list[str] = (), **extra) -> dict:
    return {
        "name": name,
        "inputs": {"parameters": [{"name": n} for n in inputs]},
        "outputs": {"parameters": [{"name": o, "valueFrom": {"path": f"/tmp/gpuaas/outputs/{o}"}}
                                   for o in outputs]},
        # the steps' own form: the program in `command`, the parameters in `source` (ARCHITECTURE §1)
        "script": {"image": "gpuaas-step", "command": ["python", "-c", WRITE_OUTPUT + body],
                   "source": "{{inputs.parameters}}"},
        **extra,
    }


def workflow_template(name: str, templates: list[dict], entrypoint: str, parameters: list[dict],
                      **spec) -> dict:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate",
            "metadata": {"name": name, "namespace": "gpuaas"},
            "spec": {"entrypoint": entrypoint, "arguments": {"parameters": parameters},
                     "templates": templates, **spec}}


def submit_of(template: str, **parameters: str) -> dict:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"generateName": f"{template}-"},
            "spec": {"workflowTemplateRef": {"name": template},
                     "arguments": {"parameters": [{"name": k, "value": v} for k, v in parameters.items()]}}}


@pytest.fixture
def executor_for(tmp_path: Path):
    def build(*templates: dict) -> WorkflowExecutor:
        return WorkflowExecutor({t["metadata"]["name"]: t for t in templates}, SubprocessStepRunner(),
                                archive=RunArchive(tmp_path / "runs.db"),
                                settings=ExecutorSettings(time_scale=1000.0))
    return build


def nodes_by_display(workflow: dict) -> dict[str, dict]:
    return {node["displayName"]: node for node in workflow["status"]["nodes"].values()}


def outputs_of(node: dict) -> dict[str, str]:
    return {p["name"]: p["value"] for p in node.get("outputs", {}).get("parameters", [])}


def test_fan_out_with_param_runs_one_child_per_item_and_aggregates_outputs(executor_for) -> None:
    template = workflow_template(
        "fan", entrypoint="main", parameters=[{"name": "group", "value": "[]"}],
        templates=[
            {"name": "main", "steps": [
                [{"name": "split", "template": "split",
                  "arguments": {"parameters": [{"name": "group", "value": "{{workflow.parameters.group}}"}]}}],
                [{"name": "child", "template": "child", "withParam": "{{steps.split.outputs.parameters.items}}",
                  "arguments": {"parameters": [{"name": "pod", "value": "{{item.pod}}"}]}}],
            ]},
            script("split", '(out / "items").write_text(params["group"])', ["group"], ["items"]),
            script("child", '(out / "outcome").write_text("released " + params["pod"])', ["pod"], ["outcome"]),
        ])
    executor = executor_for(template)
    run = executor.submit(submit_of("fan", group=json.dumps([{"pod": "a"}, {"pod": "b"}, {"pod": "c"}])))

    assert run["status"]["phase"] == "Succeeded"
    children = [n for n in run["status"]["nodes"].values() if n["displayName"].startswith("child(")]
    assert sorted(outputs_of(n)["outcome"] for n in children) == ["released a", "released b", "released c"]
    # Argo v4.0.5 generateNodeName (operator.go processItem): an object item is named by its sorted key:value pairs.
    assert {n["displayName"] for n in children} == {"child(0:pod:a)", "child(1:pod:b)", "child(2:pod:c)"}
    assert run["metadata"]["labels"]["workflows.argoproj.io/workflow-template"] == "fan"
    assert run["status"]["progress"] == "4/4"


def test_retries_only_on_exit_code_75_and_keeps_the_last_attempt(executor_for, tmp_path: Path) -> None:
    counter = tmp_path / "attempts"
    body = (f'p = pathlib.Path({str(counter)!r}); n = int(p.read_text()) + 1 if p.exists() else 1\n'
            'p.write_text(str(n)); codes = json.loads(params["codes"])\n'
            '(out / "outcome").write_text(f"attempt {n}")\nsys.exit(codes[min(n, len(codes)) - 1])')
    retry = {"limit": 3, "retryPolicy": "Always", "expression": "asInt(lastRetry.exitCode) == 75",
             "backoff": {"duration": "2s", "factor": 2, "maxDuration": "30s"}}
    template = workflow_template("retrying", entrypoint="step", parameters=[{"name": "codes"}],
                                 templates=[script("step", body, ["codes"], ["outcome"], retryStrategy=retry)])
    executor = executor_for(template)

    transient_then_ok = executor.submit(submit_of("retrying", codes="[75, 75, 0]"))
    assert transient_then_ok["status"]["phase"] == "Succeeded"
    attempts = [n for n in transient_then_ok["status"]["nodes"].values() if n["type"] == "Pod"]
    assert [n["outputs"]["exitCode"] for n in sorted(attempts, key=lambda n: n["displayName"])] == ["75", "75", "0"]
    retry_node = next(n for n in transient_then_ok["status"]["nodes"].values() if n["type"] == "Retry")
    assert outputs_of(retry_node) == {"outcome": "attempt 3"}
    assert reaction_outcomes(transient_then_ok) == ["attempt 3"]  # earlier attempts do not count

    counter.unlink()
    permanent = executor.submit(submit_of("retrying", codes="[1, 0]"))
    assert permanent["status"]["phase"] == "Failed"
    assert len([n for n in permanent["status"]["nodes"].values() if n["type"] == "Pod"]) == 1

    counter.unlink()
    exhausted = executor.submit(submit_of("retrying", codes="[75, 75, 75, 75, 75]"))
    assert exhausted["status"]["phase"] == "Failed"
    assert len([n for n in exhausted["status"]["nodes"].values() if n["type"] == "Pod"]) == 4  # 1 + limit 3


def test_exit_handler_runs_on_failure_and_sees_status_and_failures(executor_for) -> None:
    template = workflow_template(
        "with-exit", entrypoint="step", parameters=[{"name": "workload", "value": "wl-1"}], onExit="record",
        templates=[
            script("step", 'sys.exit(1)', ["workload"], [], ),
            script("record", '(out / "seen").write_text(params["status"] + " " + params["failures"])',
                   [], ["seen"]) | {"inputs": {"parameters": [
                       {"name": "status", "value": "{{workflow.status}}"},
                       {"name": "failures", "value": "{{workflow.failures}}"}]}},
        ])
    template["spec"]["templates"][0]["inputs"]["parameters"][0]["value"] = "{{workflow.parameters.workload}}"
    run = executor_for(template).submit(submit_of("with-exit"))

    assert run["status"]["phase"] == "Failed"
    seen = outputs_of(nodes_by_display(run)[f"{run['metadata']['name']}.onExit"])["seen"]
    status, failures = seen.split(" ", 1)
    assert status == "Failed"
    assert json.loads(failures)[0]["templateName"] == "step"
    assert json.loads(failures)[0]["message"] == "Error (exit code 1)"


def test_workload_mutex_serialises_runs_of_the_same_workload_only(executor_for, tmp_path: Path) -> None:
    log = tmp_path / "log"
    body = (f'import time\nwith open({str(log)!r}, "a") as f: f.write("start " + params["workload"] + "\\n")\n'
            'time.sleep(0.3)\n'
            f'with open({str(log)!r}, "a") as f: f.write("end " + params["workload"] + "\\n")')
    template = workflow_template(
        "locked", entrypoint="step", parameters=[{"name": "workload"}, {"name": "namespace", "value": "team-a"}],
        synchronization={"mutexes": [{"name": "gpuaas-{{workflow.parameters.namespace}}-"
                                              "{{workflow.parameters.workload}}"}]},
        templates=[script("step", body, ["workload"]) | {"inputs": {"parameters": [
            {"name": "workload", "value": "{{workflow.parameters.workload}}"}]}}])
    executor = executor_for(template)
    futures = [executor.submit_async(submit_of("locked", workload=w)) for w in ("wl-1", "wl-1", "wl-2")]
    runs = [f.result(timeout=30) for f in futures]

    assert [r["status"]["phase"] for r in runs] == ["Succeeded"] * 3
    lines = log.read_text().split("\n")
    same = [line for line in lines if line.endswith("wl-1")]
    assert same == ["start wl-1", "end wl-1", "start wl-1", "end wl-1"]
    keys = {key for key, _, _ in executor.mutexes.history}
    assert keys == {"gpuaas/Mutex/gpuaas-team-a-wl-1", "gpuaas/Mutex/gpuaas-team-a-wl-2"}


def test_outputs_missing_file_errors_and_archive_keeps_every_run(executor_for, tmp_path: Path) -> None:
    template = workflow_template(
        "outputs", entrypoint="step", parameters=[{"name": "write", "value": "yes", "enum": ["yes", "no"]}],
        workflowMetadata={"labels": {"gpuaas.io/reaction": "outputs", "gpuaas.io/workload":
                                     "{{workflow.parameters.write}}"}},
        templates=[script("step", 'if params["write"] == "yes": (out / "record").write_text("{}")',
                          ["write"], ["record"]) | {"inputs": {"parameters": [
                              {"name": "write", "value": "{{workflow.parameters.write}}"}]}}])
    executor = executor_for(template)
    good = executor.submit(submit_of("outputs", write="yes"))
    bad = executor.submit(submit_of("outputs", write="no"))
    with pytest.raises(SubmissionRejected, match="not in enum"):
        executor.submit(submit_of("outputs", write="maybe"))
    with pytest.raises(SubmissionRejected, match="not found"):
        executor.submit(submit_of("no-such-template"))

    assert good["status"]["phase"] == "Succeeded"
    assert bad["status"]["phase"] == "Error"
    assert "record" in bad["status"]["nodes"][next(iter(bad["status"]["nodes"]))]["message"]
    archive = RunArchive(tmp_path / "runs.db")
    assert len(archive) == 2
    [found] = archive.find({"gpuaas.io/workload": "yes"})
    assert found["metadata"]["uid"] == good["metadata"]["uid"]
    assert found["metadata"]["labels"]["workflows.argoproj.io/completed"] == "true"


def test_expressions_cover_what_the_rendered_templates_use() -> None:
    from engine.expressions import evaluate, substitute

    long_name = "job-" + "x" * 70 + "-abcde"
    variables = {"workflow.parameters.workload": long_name, "lastRetry.exitCode": "75"}
    label = evaluate('sprig.trimAll("-.", sprig.trunc(63, workflow.parameters.workload))', variables)
    assert label == ("job-" + "x" * 70)[:63]
    assert evaluate("asInt(lastRetry.exitCode) == 75", variables) is True
    assert evaluate("asInt(lastRetry.exitCode) == 75", {"lastRetry.exitCode": "1"}) is False
    assert evaluate("applied == applied && !(no-op == applied)", {}, bare_words_are_strings=True) is True
    # one pass: a substituted value is never scanned again
    assert substitute("{{inputs.parameters.event}}", {"inputs.parameters.event": "{{workflow.name}}",
                                                       "workflow.name": "wf"}) == "{{workflow.name}}"


def test_a_template_retaking_its_workflows_mutex_is_an_error_and_releases_it(executor_for) -> None:
    lock = {"mutexes": [{"name": "gpuaas-workload-{{workflow.parameters.workload}}"}]}
    template = workflow_template(
        "self-locking", entrypoint="step", parameters=[{"name": "workload", "value": "wl-1"}], synchronization=lock,
        templates=[script("step", "", []) | {"synchronization": {"mutexes": [{"name": "gpuaas-workload-wl-1"}]}}])
    executor = executor_for(template)
    first = executor.submit(submit_of("self-locking"))
    assert first["status"]["phase"] == "Error"
    assert "already held by workflow" in first["status"]["message"]
    second = executor.submit(submit_of("self-locking"))  # would hang if the first run kept the lock
    assert second["status"]["phase"] == "Error"
    assert executor.mutexes.holders == {}


def test_an_object_items_string_values_arrive_json_escaped_as_argo_makes_them(executor_for) -> None:
    """Argo v4.0.5 (operator.go processItem, Item.String): `{{item.key}}` of a string value is its JSON
    encoding without the quotes, so JSON text inside an item arrives with escaped quotes; an object
    value arrives as compact JSON. Seen on the real stack: on-idle got `{\\"fingerprint\\":...}`."""
    template = workflow_template(
        "items", entrypoint="main", parameters=[{"name": "group", "value": "[]"}],
        templates=[
            {"name": "main", "steps": [
                [{"name": "split", "template": "split",
                  "arguments": {"parameters": [{"name": "group", "value": "{{workflow.parameters.group}}"}]}}],
                [{"name": "child", "template": "child", "withParam": "{{steps.split.outputs.parameters.items}}",
                  "arguments": {"parameters": [{"name": "text", "value": "{{item.text}}"},
                                               {"name": "object", "value": "{{item.object}}"}]}}],
            ]},
            script("split", '(out / "items").write_text(params["group"])', ["group"], ["items"]),
            script("child", '(out / "seen").write_text(json.dumps([params["text"], params["object"]]))',
                   ["text", "object"], ["seen"]),
        ])
    run = executor_for(template).submit(submit_of("items", group=json.dumps(
        [{"text": json.dumps({"a": "b"}, separators=(",", ":")), "object": {"a": "b"}}])))
    assert run["status"]["phase"] == "Succeeded"
    [child] = [n for n in run["status"]["nodes"].values() if n["displayName"].startswith("child(")]
    assert json.loads(outputs_of(child)["seen"]) == ['{\\"a\\":\\"b\\"}', '{"a":"b"}']


def test_a_whole_object_or_list_item_is_json_as_argo_marshals_it() -> None:
    """Argo v4.0.5 (operator.go processItem): `{{item}}` of an object item is Go's json.Marshal of the
    map of its values: keys sorted at the top level (nested objects keep their order), `<`, `>`, `&`
    HTML-escaped (no jsonutil.Fix here, unlike `{{item.key}}`), other characters as they are; a list
    item is json.Marshal of its values, escaped the same way."""
    from engine.expressions import item_scope

    scope = item_scope({"b": "x<y", "a": {"z": 1, "y": "&"}, "c": "é"})
    assert scope["item"] == '{"a":{"z":1,"y":"\\u0026"},"b":"x\\u003cy","c":"é"}'
    assert scope["item.b"] == "x<y" and scope["item.a"] == '{"z":1,"y":"&"}'
    assert item_scope(["<", {"b": 1, "a": 2}])["item"] == '["\\u003c",{"b":1,"a":2}]'


def test_fan_out_children_are_named_as_argo_names_them() -> None:
    """Argo v4.0.5 processItem/generateNodeName: `name(index:label)`, the label fmt.Sprint of the item
    (Item.String: a string JSON-escaped without quotes; a list `[a b]`; an object its sorted `key:value`
    pairs joined by commas), with every parenthesis removed."""
    from engine.executor import item_label

    assert item_label('say "hi" (now)') == 'say \\"hi\\" now'
    assert item_label(3) == "3" and item_label(True) == "true"
    assert item_label(["a", 1, {"k": "<v>"}]) == '[a 1 {"k":"<v>"}]'
    assert item_label({"workload": "job-1", "alert": {"pod": "w-0"}, "n": "(x)"}) == \
        'alert:{"pod":"w-0"},n:x,workload:job-1'
