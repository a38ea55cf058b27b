"""RBAC is least privilege AND sufficient: every gateway call the steps make is granted, nothing more
than a named list of verbs is, and every rule names the code that needs it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from steps.gateways import resources

JSON = dict[str, Any]
STEPS = Path(__file__).resolve().parents[2] / "steps"
CALL = re.compile(r"\.(get|list|create|merge_patch|json_patch|replace|delete|watch|update_with_retry)\(\s*"
                  r"(?:R\.|resources\.)?([A-Z][A-Z_0-9]+)\b")
VERB = {"get": "get", "list": "list", "create": "create", "merge_patch": "patch", "json_patch": "patch",
        "update_with_retry": "patch", "replace": "update", "delete": "delete", "watch": "watch"}


def _steps_calls() -> set[tuple[str, str, str]]:
    """(group, plural, verb) of every gateway call in steps/ that names a resources.py constant."""
    calls = set()
    for path in STEPS.rglob("*.py"):
        if "gateways" in path.parts:
            continue
        for method, constant in CALL.findall(path.read_text()):
            resource = getattr(resources, constant, None)
            if isinstance(resource, resources.Resource):
                calls.add((resource.group, resource.plural, VERB[method]))
    # the gateway's own record_event (steps/entrypoint.py calls it for every reaction)
    calls |= {("", "events", "get"), ("", "events", "create"), ("", "events", "patch")}
    return calls


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


def test_every_gateway_call_in_steps_is_granted(rbac_objects: list[JSON]) -> None:
    calls = _steps_calls()
    assert ("kueue.x-k8s.io", "clusterqueues", "create") in calls      # the scan sees real code
    missing = sorted(calls - _granted(rbac_objects, "gpuaas-steps"))
    assert missing == [], f"steps call these without RBAC: {missing}"


def test_steps_may_never_delete_a_tenants_workload_or_owner(rbac_objects: list[JSON]) -> None:
    granted = _granted(rbac_objects, "gpuaas-steps")
    deletable = sorted((g, p) for g, p, v in granted if v in ("delete", "deletecollection"))
    assert deletable == [("keda.sh", "scaledobjects")]


def test_sensors_only_create_workflows_and_sources_only_read(rbac_objects: list[JSON]) -> None:
    assert _granted(rbac_objects, "gpuaas-sensors") == {("argoproj.io", "workflows", "create")}
    assert {v for _g, _p, v in _granted(rbac_objects, "gpuaas-eventsources")} == {"get", "list", "watch"}


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
