"""The WorkflowTemplate contract (ARCHITECTURE section 1), checked on every rendered template."""

from __future__ import annotations

from typing import Any

import pytest

JSON = dict[str, Any]
NAMES = ["gpuaas-on-admitted", "gpuaas-on-finished", "gpuaas-on-idle", "gpuaas-release-workers",
         "gpuaas-resume-workers", "gpuaas-provision-quota", "gpuaas-sweep"]
WORKLOAD_TEMPLATES = [n for n in NAMES if n not in ("gpuaas-provision-quota", "gpuaas-sweep")]


def _scripts(template: JSON) -> list[JSON]:
    return [t for t in template["spec"]["templates"] if "script" in t]


def _by_name(template: JSON, name: str) -> JSON:
    return next(t for t in template["spec"]["templates"] if t["name"] == name)


def _arguments(template: JSON) -> dict[str, JSON]:
    return {p["name"]: p for p in template["spec"]["arguments"]["parameters"]}


def test_the_seven_templates_exist(templates: dict[str, JSON]) -> None:
    assert sorted(templates) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_every_step_is_a_python_m_steps_script(templates: dict[str, JSON], name: str) -> None:
    for script in _scripts(templates[name]):
        body = script["script"]
        assert body["command"][:3] == ["python", "-m", "steps"] and len(body["command"]) == 4
        assert body["source"] == "{{inputs.parameters}}"
        assert body["image"] == "gpuaas-step"
        env = {e["name"]: e for e in body["env"]}
        assert env["GPUAAS_OUTPUTS_DIR"]["value"] == "/tmp/gpuaas/outputs"
        assert env["GPUAAS_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
        outputs = {p["name"]: p["valueFrom"] for p in script["outputs"]["parameters"]}
        assert {"outcome", "plan", "record"} <= set(outputs)
        for output_name, value_from in outputs.items():
            assert value_from["path"] == f"/tmp/gpuaas/outputs/{output_name}"
            assert "default" in value_from, f"{name}/{script['name']} output {output_name} has no default"
        context = body["securityContext"]
        assert context["runAsNonRoot"] is True and context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"] and "runAsUser" not in context


# (lastRetry.exitCode, lastRetry.status, lastRetry.message, retried?) as Argo's controller sees an attempt.
RETRY_CASES = [
    ("75", "Failed", "Error (exit code 75)", True),                          # transient failure, recorded
    (None, "Error", "pod deleted", True),                                    # pod gone before it exited
    (None, "Failed", "The node was low on resource: memory. Threshold quantity: 100Mi", True),  # evicted
    (None, "Error", "Pod failed before main container starts due to ContainerCreating: ", True),
    ("1", "Failed", "Error (exit code 1)", False),                           # permanent failure, recorded
    ("137", "Failed", "OOMKilled (exit code 137)", False),
    ("2", "Failed", "Error (exit code 2)", False),
]


@pytest.mark.parametrize("name", NAMES)
def test_retries_transient_failures_and_attempts_without_an_exit_code(templates: dict[str, JSON], name: str) -> None:
    """Issue 10 item 5: evaluated by Argo Workflows' own code (the pinned module's argoexpr over the
    scope processNodeRetries builds, where an attempt without an exit code has exitCode "-1")."""
    from tests.support.argo_retry import retry_verdicts

    for script in _scripts(templates[name]):
        retry = script["retryStrategy"]
        assert int(retry["limit"]) >= 1 and retry["backoff"]["duration"] and retry["retryPolicy"] == "Always"
        assert "maxDuration" not in retry["backoff"]  # the attempt number alone decides (see the outcome counter)
        cases = [{"expression": retry["expression"], "exitCode": code, "status": status, "message": message,
                  "duration": "3", "retries": "0"} for code, status, message, _ in RETRY_CASES]
        verdicts = retry_verdicts(cases)
        assert [v.get("error") for v in verdicts] == [None] * len(cases), verdicts
        assert [v["retry"] for v in verdicts] == [wanted for *_, wanted in RETRY_CASES], (script["name"], retry)


def _emissions(attempts: list[dict[str, str] | None], limit: int) -> list[dict[str, str] | None]:
    """The outputs each emission of a template-level metric sees, by Argo's rules (v4.0.5
    workflow/controller/operator.go executeTemplate): a Retry node emits once for each child that
    is retried ("retry node has not completed and last child node has completed") and once more
    when the Retry node completes, with the last child's outputs. `None` = an attempt without
    outputs (pod deleted)."""
    retried = attempts[:-1][:limit]
    return [*retried, attempts[len(retried)]]


def _attempt_outputs(exit_code: int, outcome: str, attempt: int, limit: int) -> dict[str, str]:
    from steps.entrypoint import final_attempt

    env = {"GPUAAS_ATTEMPT": str(attempt), "GPUAAS_RETRY_LIMIT": str(limit)}
    return {"outcome": outcome, "final": "true" if final_attempt(exit_code, env) else "false"}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("history", "counted"), [
    ([(0, "applied")], ["applied"]),
    ([(75, "failed"), (75, "failed"), (0, "applied")], ["applied"]),
    ([(75, "failed")] * 5, ["failed"]),                 # retries exhausted: the run is counted once, failed
    ([None, (0, "no-op")], ["no-op"]),                  # evicted (no exit code, no outputs), then retried
    ([(1, "failed")], ["failed"]),
])
def test_the_outcome_counter_counts_once_per_reaction(templates: dict[str, JSON], name: str,
                                                      history: list, counted: list[str]) -> None:
    """Issue 10 item 5: not once per attempt. The step writes `final` (false only when Argo will run
    another attempt); the counter's `when` keeps the retried attempts out."""
    from engine.expressions import evaluate, substitute

    for script in _scripts(templates[name]):
        limit = int(script["retryStrategy"]["limit"])
        counter = next((m for m in (script.get("metrics") or {}).get("prometheus", [])
                        if m["name"] == "gpuaas_reaction_outcomes"), None)
        if counter is None:
            continue
        attempts = [None if h is None else _attempt_outputs(h[0], h[1], i, limit) for i, h in enumerate(history)]
        increments = []
        for outputs in _emissions(attempts, limit):
            if outputs is None:
                continue  # Argo cannot substitute {{outputs.parameters.*}}: no emission (a MetricsError condition)
            scope = {f"outputs.parameters.{k}": v for k, v in outputs.items()}
            when = substitute(counter.get("when", ""), scope)
            if not when or evaluate(when, {}, bare_words_are_strings=True):
                label = next(lb["value"] for lb in counter["labels"] if lb["key"] == "outcome")
                increments.append(substitute(label, scope))
        assert increments == counted, (script["name"], history)


@pytest.mark.parametrize("name", NAMES)
def test_parameters_have_descriptions_and_submittable_defaults(templates: dict[str, JSON], name: str) -> None:
    arguments = _arguments(templates[name])
    for parameter in arguments.values():
        assert parameter.get("description"), f"{name}: parameter {parameter['name']} has no description"
        assert "value" in parameter, f"{name}: parameter {parameter['name']} has no default"
        if "enum" in parameter:
            assert parameter["value"] in parameter["enum"]
    assert arguments["dry-run"]["enum"] == ["false", "true"] and arguments["dry-run"]["value"] == "false"
    if name == "gpuaas-sweep":  # not about one Workload: its pass's settings
        assert set(arguments) == {"grace", "max-per-pass", "page-size", "installed-at", "dry-run"}
    else:
        assert {"event", "tenant", "namespace", "workload"} <= set(arguments)


@pytest.mark.parametrize("name", WORKLOAD_TEMPLATES)
def test_workload_templates_take_the_workload_contract(templates: dict[str, JSON], name: str) -> None:
    extra = {"gpuaas-resume-workers": ["target"], "gpuaas-on-admitted": ["recorded-by", "record"],
             "gpuaas-on-finished": ["recorded-by", "record"]}.get(name, [])
    assert list(_arguments(templates[name])) == ["namespace", "workload", "event", "dry-run", "tenant", *extra]


def test_provision_quota_takes_the_quota_parameters(templates: dict[str, JSON]) -> None:
    arguments = _arguments(templates["gpuaas-provision-quota"])
    assert set(arguments) == {"mode", "tenant", "namespace", "workload", "flavor", "gpus", "cohort",
                              "borrowing-limit", "lending-limit", "dry-run", "event"}
    assert arguments["mode"]["enum"] == ["", "hand", "capacity"]
    assert templates["gpuaas-provision-quota"]["spec"]["synchronization"] == {
        "mutexes": [{"name": "gpuaas-provision-quota"}]}


@pytest.mark.parametrize("name", [n for n in WORKLOAD_TEMPLATES if n != "gpuaas-on-idle"])
def test_one_mutex_per_workload(templates: dict[str, JSON], name: str) -> None:
    sync = templates[name]["spec"]["synchronization"]
    assert "mutex" not in sync and "semaphore" not in sync
    assert sync["mutexes"] == [
        {"name": "gpuaas-workload-{{workflow.parameters.namespace}}-{{workflow.parameters.workload}}"}]


def test_on_idle_fans_out_one_locked_child_per_alert(templates: dict[str, JSON]) -> None:
    template = templates["gpuaas-on-idle"]
    assert "synchronization" not in template["spec"]
    main = _by_name(template, "main")["steps"]
    assert [group[0]["name"] for group in main] == ["idle-alerts", "on-idle"]
    fan_out = main[1][0]
    assert fan_out["withParam"] == "{{steps.idle-alerts.outputs.parameters.alerts}}"
    given = {p["name"]: p["value"] for p in fan_out["arguments"]["parameters"]}
    assert given["workload"] == "{{item.workload}}" and given["namespace"] == "{{item.namespace}}"
    child = _by_name(template, "on-idle")
    assert child["script"]["command"] == ["python", "-m", "steps", "on-idle"]
    assert child["synchronization"]["mutexes"] == [
        {"name": "gpuaas-workload-{{inputs.parameters.namespace}}-{{inputs.parameters.workload}}"}]
    # the child's lock is the very lock the other workload templates take at workflow level
    other = templates["gpuaas-release-workers"]["spec"]["synchronization"]["mutexes"][0]["name"]
    assert other.replace("workflow.parameters", "inputs.parameters") == child["synchronization"]["mutexes"][0]["name"]
    assert _by_name(template, "idle-alerts")["outputs"]["parameters"][-1]["name"] == "alerts"


@pytest.mark.parametrize("name", NAMES)
def test_exit_handler_records_the_outcome_with_status_and_failures(templates: dict[str, JSON], name: str) -> None:
    spec = templates[name]["spec"]
    handler = _by_name(templates[name], spec["onExit"])
    step = handler["steps"][0][0]
    given = {p["name"]: p["value"] for p in step["arguments"]["parameters"]}
    assert given["status"] == "{{workflow.status}}" and given["failures"] == "{{workflow.failures}}"
    assert given["reaction"] == templates[name]["metadata"]["labels"]["gpuaas.io/reaction"]
    recorder = _by_name(templates[name], step["template"])
    assert recorder["script"]["command"] == ["python", "-m", "steps", "record-outcome"]
    declared = {p["name"] for p in recorder["inputs"]["parameters"]}
    assert set(given) == declared


@pytest.mark.parametrize("name", NAMES)
def test_labels_metrics_gc_deadline_and_service_account(templates: dict[str, JSON], name: str) -> None:
    spec = templates[name]["spec"]
    reaction = templates[name]["metadata"]["labels"]["gpuaas.io/reaction"]
    assert spec["workflowMetadata"]["labels"] == {"gpuaas.io/reaction": reaction}
    if name != "gpuaas-sweep":  # a pass is about every Workload, not one
        assert spec["workflowMetadata"]["labelsFrom"] == {
            "gpuaas.io/workload": {"expression": 'sprig.trimAll("-.", sprig.trunc(63, workflow.parameters.workload))'},
            "gpuaas.io/tenant": {"expression": 'sprig.trimAll("-.", sprig.trunc(63, workflow.parameters.tenant))'}}
    metrics = {m["name"]: m for m in spec["metrics"]["prometheus"]}
    assert {"gpuaas_reaction_runs", "gpuaas_reaction_duration_seconds"} <= set(metrics)
    assert {"key": "status", "value": "{{workflow.status}}"} in metrics["gpuaas_reaction_runs"]["labels"]
    step_metrics = {m["name"] for s in _scripts(templates[name]) if s["name"] != "record-outcome"
                    for m in s["metrics"]["prometheus"]}
    assert "gpuaas_reaction_outcomes" in step_metrics
    assert spec["podGC"]["strategy"] == "OnPodSuccess" and spec["ttlStrategy"]["secondsAfterSuccess"] > 0
    account = "gpuaas-sweep" if name == "gpuaas-sweep" else "gpuaas-steps"
    assert 0 < spec["activeDeadlineSeconds"] <= 3600 and spec["serviceAccountName"] == account


@pytest.mark.parametrize(("name", "metric", "output"), [
    ("gpuaas-on-idle", "gpuaas_idle_gpus_released", "gpus-released"),
    ("gpuaas-on-finished", "gpuaas_gpu_hours_reclaimed", "gpu-hours-reclaimed"),
    ("gpuaas-resume-workers", "gpuaas_gpu_hours_reclaimed", "gpu-hours-reclaimed"),
])
def test_reclaim_metrics_count_the_step_outputs(templates: dict[str, JSON], name: str, metric: str,
                                                output: str) -> None:
    from gpuaas.manifests import observability

    assert metric in (observability.RECLAIMED_GPU_HOURS_METRIC, observability.RELEASED_GPUS_METRIC)
    step = next(s for s in _scripts(templates[name]) if any(m["name"] == metric
                                                            for m in (s.get("metrics") or {}).get("prometheus", [])))
    counter = next(m for m in step["metrics"]["prometheus"] if m["name"] == metric)
    assert counter["counter"]["value"] == f"{{{{outputs.parameters.{output}}}}}"
    assert counter["when"] == "{{status}} == Succeeded"
    outputs = {p["name"]: p["valueFrom"]["default"] for p in step["outputs"]["parameters"]}
    assert outputs[output] == "0" and outputs["tenant"] == "unknown"


@pytest.mark.parametrize(("name", "label"), [
    ("job-" + "a" * 63 + "-7c9f2", "job-" + "a" * 59),                    # a 63-char Job name
    ("job-" + "b" * 57 + "x.yz", "job-" + "b" * 57 + "x"),                 # cut right after ".", trimmed
    ("job-short-7c9f2", "job-short-7c9f2"),
])
def test_labels_from_long_workload_names_stay_valid(templates: JSON, name: str, label: str) -> None:
    """Evaluate the labelsFrom expression the way Argo does (sprig trunc, then trimAll) and check the label."""
    import re

    expression = templates["gpuaas-on-admitted"]["spec"]["workflowMetadata"]["labelsFrom"]["gpuaas.io/workload"][
        "expression"]
    match = re.fullmatch(r'sprig\.trimAll\("(.*)", sprig\.trunc\((\d+), workflow\.parameters\.workload\)\)', expression)
    assert match
    value = name[: int(match.group(2))].strip(match.group(1))
    assert value == label
    assert re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", value) and len(value) <= 63
