"""The least-privilege arithmetic on kube-apiserver's audit log (gpuaas.cluster.audit): which grants
of the rendered RBAC a set of audited requests needed."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from gpuaas.cluster import audit

ROOT = Path(__file__).resolve().parents[2]
STEPS = "system:serviceaccount:gpuaas:gpuaas-steps"


def _line(user: str, verb: str, resource: str, *, group: str = "", namespace: str = "", name: str = "",
          subresource: str = "", code: int = 200, decision: str = "allow") -> str:
    ref = {"resource": resource, "apiGroup": group, "namespace": namespace, "name": name, "subresource": subresource}
    return json.dumps({"kind": "Event", "stage": "ResponseComplete", "verb": verb, "user": {"username": user},
                       "objectRef": {k: v for k, v in ref.items() if v}, "responseStatus": {"code": code},
                       "annotations": {"authorization.k8s.io/decision": decision}, "requestURI": "/x"})


def rendered_rbac() -> list[dict]:
    return [d for d in yaml.safe_load_all((ROOT / "manifests" / "base" / "rbac.yaml").read_text()) if d]


def test_grants_expand_every_rule_of_every_bound_role_per_verb() -> None:
    granted = audit.grants(rendered_rbac())
    steps = [g for g in granted if g.user == STEPS]
    assert audit.Grant(STEPS, "ClusterRole/gpuaas-steps", None, "kueue.x-k8s.io", "workloads", "patch") in steps
    policy = [g for g in steps if g.resource == "configmaps"]
    assert policy == [audit.Grant(STEPS, "Role/gpuaas/gpuaas-steps", "gpuaas", "", "configmaps", "get",
                                  ("gpuaas-policy",))]
    users = {g.user for g in granted}
    assert users == {STEPS, "system:serviceaccount:gpuaas:gpuaas-sensors",
                     "system:serviceaccount:gpuaas:gpuaas-eventsources", "system:serviceaccount:gpuaas:gpuaas-sweep"}


def test_a_grant_is_used_only_by_an_allowed_request_it_covers(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text("\n".join([
        _line(STEPS, "patch", "workloads", group="kueue.x-k8s.io", namespace="team-b", name="w"),
        _line(STEPS, "get", "configmaps", namespace="gpuaas", name="other"),            # not the named one
        _line(STEPS, "get", "configmaps", namespace="team-b", name="gpuaas-policy"),    # not the Role's namespace
        _line(STEPS, "list", "nodes", code=403, decision="forbid"),                     # denied: uses nothing
        _line("system:serviceaccount:gpuaas:other", "get", "pods", namespace="team-b"),  # another account
    ]) + "\n")
    seen = list(audit.requests(log))
    assert [r.denied for r in seen] == [False, False, False, True, False]
    granted = [g for g in audit.grants(rendered_rbac()) if g.user == STEPS]
    left = audit.unused(granted, seen)
    assert audit.Grant(STEPS, "ClusterRole/gpuaas-steps", None, "kueue.x-k8s.io", "workloads", "patch") not in left
    assert {(g.resource, g.verb) for g in granted} - {(g.resource, g.verb) for g in left} == {("workloads", "patch")}


def test_requests_reads_a_subresource_as_rbac_spells_it(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text(_line(STEPS, "patch", "deployments", group="apps", namespace="a", name="d", subresource="scale"))
    [request] = audit.requests(log)
    assert request.rbac_resource == "deployments/scale"
