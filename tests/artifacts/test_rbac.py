"""RBAC is least privilege AND sufficient: every gateway call the steps make is granted, nothing more
than a named list of verbs is, and every rule names the code that needs it."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from steps.gateways import resources

JSON = dict[str, Any]
STEPS = Path(__file__).resolve().parents[2] / "steps"
SWEEP = STEPS / "reactions" / "sweep.py"
HOOK = STEPS / "install_hook.py"
CALL = re.compile(r"\.(get|list|list_pages|create|merge_patch|json_patch|replace|delete|watch|update_with_retry)\(\s*"
                  r"(?:R\.|resources\.)?([A-Z][A-Z_0-9]+)\b")
VERB = {"get": "get", "list": "list", "list_pages": "list", "create": "create", "merge_patch": "patch", "json_patch": "patch",
        "update_with_retry": "patch", "replace": "update", "delete": "delete", "watch": "watch"}


ACTION_VERB = {"create": "create", "delete": "delete", "merge-patch": "patch", "json-patch": "patch",
               "none": None, "already-applied": None}


def _steps_calls() -> set[tuple[str, str, str]]:
    """(group, plural, verb) of every API call the steps can make: gateway calls naming a resources.py
    constant, the writes of every planned `Action` (steps.reactions.apply_actions performs them), and
    the reads whose kind comes from data, bounded by the code's own tables (owner chains:
    OWNER_KINDS; release targets: STRATEGY_KINDS; resume by target: TARGET_KINDS)."""
    from steps.model.owners import OWNER_KINDS
    from steps.reactions.resume_workers import TARGET_KINDS
    from steps.strategies import STRATEGY_KINDS

    calls = set()
    for path in STEPS.rglob("*.py"):
        if "gateways" in path.parts or path in (SWEEP, HOOK):
            continue  # the sweep and the chart's install hook run as ServiceAccounts of their own (tests below)
        text = path.read_text()
        for method, constant in CALL.findall(text):
            resource = getattr(resources, constant, None)
            if isinstance(resource, resources.Resource):
                calls.add((resource.group, resource.plural, VERB[method]))
        for resource, verb in _action_writes(ast.parse(text)):
            calls.add((resource.group, resource.plural, verb))

    def by_kind(kinds: object, verb: str) -> set[tuple[str, str, str]]:
        return {(r.group, r.plural, verb) for r in resources.ALL if r.kind in kinds}  # type: ignore[operator]

    calls |= by_kind(OWNER_KINDS, "get")
    calls |= by_kind({k for kinds in STRATEGY_KINDS.values() for k in kinds}, "get")
    calls |= by_kind(TARGET_KINDS, "get")
    # the gateway's own record_event (steps/entrypoint.py calls it for every reaction)
    calls |= {("", "events", "get"), ("", "events", "create"), ("", "events", "patch")}
    return calls


def _action_writes(tree: ast.AST) -> Iterator[tuple[resources.Resource, str]]:
    """(Resource, verb) of every `Action(name, resource, ...)` built in a module. The resource is a
    resources.py constant, `_resource(target, STRATEGY)` (the kinds STRATEGY_KINDS allows), or a
    local variable assigned from those in the same function."""
    from steps import strategies

    def resolve(node: ast.AST, scope: dict[str, ast.AST]) -> list[resources.Resource]:
        if isinstance(node, ast.Attribute):
            node = ast.Name(node.attr)
        if isinstance(node, ast.IfExp):
            return resolve(node.body, scope) + resolve(node.orelse, scope)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "_resource":
            kinds = strategies.STRATEGY_KINDS[getattr(strategies, node.args[1].id)]  # type: ignore[attr-defined]
            return [r for r in resources.ALL if r.kind in kinds]
        if isinstance(node, ast.Name):
            constant = getattr(resources, node.id, None)
            if isinstance(constant, resources.Resource):
                return [constant]
            if node.id in scope:
                return resolve(scope[node.id], scope)
        raise AssertionError(f"cannot tell which resource an Action writes: {ast.unparse(node)}; name a "
                             "resources.py constant or use strategies._resource(target, STRATEGY)")

    for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        scope = {t.id: a.value for a in ast.walk(function) if isinstance(a, ast.Assign)
                 for t in a.targets if isinstance(t, ast.Name)}
        for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
            if getattr(call.func, "id", "") != "Action" or len(call.args) < 2:
                continue
            operation = next((k.value.value for k in call.keywords if k.arg == "operation"
                              and isinstance(k.value, ast.Constant)), "merge-patch")
            verb = ACTION_VERB[operation]
            if verb is not None:
                yield from ((r, verb) for r in resolve(call.args[1], scope))


def _granted(objects: list[JSON], account: str) -> set[tuple[str, str, str]]:
    bound = {b["roleRef"]["name"] for b in objects if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
             and any(s["name"] == account for s in b["subjects"])}
    grants = set()
    for role in objects:
        if role["kind"] in ("Role", "ClusterRole") and role["metadata"]["name"] in bound:
            for rule in role["rules"]:
                for group in rule["apiGroups"]:
                    for plural in rule["resources"]:
                        grants |= {(group, plural, verb) for verb in rule["verbs"]}
    return grants


@pytest.fixture(scope="module")
def rbac_objects() -> list[JSON]:
    from gpuaas.manifests import platform, rbac

    return [*platform.service_accounts(), *rbac.objects()]


ARGO_EXECUTOR = {("argoproj.io", "workflowtaskresults", "create"), ("argoproj.io", "workflowtaskresults", "patch")}
"""Not steps' code: Argo's executor in every step pod reports outputs with the pod's ServiceAccount."""


def test_every_gateway_call_in_steps_is_granted(rbac_objects: list[JSON]) -> None:
    calls = _steps_calls()
    assert ("kueue.x-k8s.io", "clusterqueues", "create") in calls      # the scan sees real code
    assert ("apps", "statefulsets", "patch") in calls                  # ... and the strategies' writes
    missing = sorted(calls - _granted(rbac_objects, "gpuaas-steps"))
    assert missing == [], f"steps call these without RBAC: {missing}"


def test_the_sweep_is_granted_its_calls_and_writes_only_markers_and_runs(rbac_objects: list[JSON]) -> None:
    """gpuaas-sweep (steps/reactions/sweep.py) lists Workloads and runs, creates runs and writes the
    handled-transition marker; everything else it reads is the job kinds' observe path, read-only
    (tests/realstack/test_least_privilege.py drives it as that account and finds every grant used)."""
    calls = {(r.group, r.plural, VERB[m]) for m, c in CALL.findall(SWEEP.read_text())
             if isinstance(r := getattr(resources, c, None), resources.Resource)}
    granted = _granted(rbac_objects, "gpuaas-sweep")
    assert calls == {("kueue.x-k8s.io", "workloads", "list"), ("kueue.x-k8s.io", "workloads", "patch"),
                     ("kueue.x-k8s.io", "workloads", "get"),    # re-read after a marker conflict
                     ("argoproj.io", "workflows", "list"), ("argoproj.io", "workflows", "create"),
                     ("argoproj.io", "workflows", "get"),
                     ("argoproj.io", "cronworkflows", "get")}  # the install time (adoption)
    assert calls <= granted
    writes = sorted((g, p, v) for g, p, v in granted if v not in ("get", "list", "watch"))
    assert writes == [("argoproj.io", "workflows", "create"), ("argoproj.io", "workflowtaskresults", "create"),
                      ("argoproj.io", "workflowtaskresults", "patch"), ("kueue.x-k8s.io", "workloads", "patch")]


def test_the_install_hook_is_granted_exactly_its_calls_on_the_charts_cronworkflows_and_their_templates() -> None:
    """gpuaas-install-hook (steps/install_hook.py, the chart's post-install/post-upgrade Job) gets and patches the
    chart's CronWorkflows and gets their WorkflowTemplates, by name, and nothing else; every rule names its code."""
    from gpuaas.manifests import site, values

    objects = site.objects(values.defaults())
    calls = {(r.group, r.plural, VERB[m]) for m, c in CALL.findall(HOOK.read_text())
             if isinstance(r := getattr(resources, c, None), resources.Resource)}
    assert calls == {("argoproj.io", "cronworkflows", "get"), ("argoproj.io", "cronworkflows", "patch"),
                     ("argoproj.io", "workflowtemplates", "get")}
    assert _granted(objects, site.INSTALL_HOOK) == calls
    crons = {o["metadata"]["name"]: o for o in objects if o["kind"] == "CronWorkflow"}
    role = next(o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == site.INSTALL_HOOK)
    names = {rule["resources"][0]: sorted(rule["resourceNames"]) for rule in role["rules"]}
    assert names == {"cronworkflows": sorted(crons), "workflowtemplates": sorted(
        {c["spec"]["workflowSpec"]["workflowTemplateRef"]["name"] for c in crons.values()})}
    test_no_wildcards_and_every_rule_names_its_code([role])
    (job,) = [o for o in objects if o["kind"] == "Job"]
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][3:] == sorted(crons)


def test_nothing_is_granted_to_steps_that_no_code_calls(rbac_objects: list[JSON]) -> None:
    """Least privilege, exactly: every grant is a call some code makes (issue 10: `patch pytorchjobs`
    was granted for a suspend no strategy performs)."""
    unused = sorted(_granted(rbac_objects, "gpuaas-steps") - _steps_calls() - ARGO_EXECUTOR)
    assert unused == [], f"granted to gpuaas-steps but never called: {unused}"


def test_steps_may_never_delete_a_tenants_workload_or_owner(rbac_objects: list[JSON]) -> None:
    granted = _granted(rbac_objects, "gpuaas-steps")
    deletable = sorted((g, p) for g, p, v in granted if v in ("delete", "deletecollection"))
    assert deletable == [("keda.sh", "scaledobjects")]


def test_sensors_only_submit_workflows_and_sources_only_read(rbac_objects: list[JSON]) -> None:
    """What Argo Events' argoWorkflow trigger does (tests/realstack/test_sensor_submission.py runs it):
    `argo submit` reads the referenced WorkflowTemplate and creates the Workflow; the trigger then
    lists Workflows by its labels. Reading templates is limited to the ones the Sensors submit."""
    import sensors

    assert _granted(rbac_objects, "gpuaas-sensors") == {("argoproj.io", "workflows", "create"),
                                                        ("argoproj.io", "workflows", "list"),
                                                        ("argoproj.io", "workflowtemplates", "get")}
    templates = {trigger["template"]["argoWorkflow"]["source"]["resource"]["spec"]["workflowTemplateRef"]["name"]
                 for sensor in sensors.all_sensors() for trigger in sensor["spec"]["triggers"]}
    role = next(o for o in rbac_objects if o["kind"] == "Role" and o["metadata"]["name"] == "gpuaas-sensors")
    rule = next(r for r in role["rules"] if r["resources"] == ["workflowtemplates"])
    assert sorted(rule["resourceNames"]) == sorted(templates)
    # a resource EventSource is an informer: list and watch only (no get, proven on the real stack by
    # tests/realstack/test_least_privilege.py)
    assert {v for _g, _p, v in _granted(rbac_objects, "gpuaas-eventsources")} == {"list", "watch"}


def test_event_source_accounts_cover_what_the_event_sources_watch(rbac_objects: list[JSON]) -> None:
    import sensors

    granted = _granted(rbac_objects, "gpuaas-eventsources")
    for source in sensors.all_event_sources():
        for block in (source["spec"].get("resource") or {}).values():
            for verb in ("list", "watch"):
                assert (block["group"], block["resource"], verb) in granted


def test_no_wildcards_and_every_rule_names_its_code(rbac_objects: list[JSON]) -> None:
    for role in rbac_objects:
        if role["kind"] not in ("Role", "ClusterRole"):
            continue
        for index, rule in enumerate(role["rules"]):
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
            why = role["metadata"]["annotations"][f"gpuaas.io/rule-{index}"]
            assert re.search(r"(steps|sensors)/[\w/*]+(\.py)?|Argo", why), why
