"""The least-privilege arithmetic on kube-apiserver's audit log (gpuaas.cluster.audit): which grants
of the rendered RBAC a set of audited requests needed."""

from __future__ import annotations

import dataclasses
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


def test_a_request_made_with_a_pod_bound_token_names_its_pod(tmp_path: Path) -> None:
    """A kubelet-mounted token carries its pod in `user.extra`; a TokenRequest token without a pod (how the
    tests act as a ServiceAccount) does not: only the first is a real component's request."""
    log = tmp_path / "audit.log"
    bound = json.loads(_line(STEPS, "get", "configmaps", namespace="gpuaas", name="gpuaas-policy"))
    bound["user"]["extra"] = {audit.POD_NAME: ["gpuaas-on-admitted-x7-on-admitted-123"]}
    bound["userAgent"] = "python-kubernetes/1.0"
    log.write_text(json.dumps(bound) + "\n" + _line(STEPS, "get", "configmaps", namespace="gpuaas",
                                                    name="gpuaas-policy") + "\n")
    pod, test = audit.requests(log)
    assert (pod.from_pod, pod.pod, pod.user_agent) == (True, "gpuaas-on-admitted-x7-on-admitted-123",
                                                       "python-kubernetes/1.0")
    assert not test.from_pod


def test_narrowings_name_the_roles_or_resource_names_every_use_would_allow(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text("\n".join([
        _line(STEPS, "get", "workloads", group="kueue.x-k8s.io", namespace="team-b", name="w1"),
        _line(STEPS, "get", "workloads", group="kueue.x-k8s.io", namespace="team-c", name="w2"),
        _line(STEPS, "list", "workloads", group="kueue.x-k8s.io", namespace="team-b"),
        _line(STEPS, "list", "nodes"),                                                   # cluster-scoped
        _line(STEPS, "get", "configmaps", namespace="gpuaas", name="gpuaas-policy"),
    ]) + "\n")
    seen = list(audit.requests(log))
    granted = {(g.resource, g.verb): g for g in audit.grants(rendered_rbac()) if g.user == STEPS}

    def found(resource: str, verb: str) -> dict[str, str]:
        grant = granted[(resource, verb)]
        return {n.kind: n.detail for n in audit.narrowings(grant, audit.uses(grant, seen))}

    # a ClusterRole used in two namespaces by name: Roles there, or the two names, would do
    assert found("workloads", "get") == {"namespace": "Roles in team-b, team-c", "names": "resourceNames ['w1', 'w2']"}
    # a list names no object: only the namespace scope could narrow it
    assert found("workloads", "list") == {"namespace": "Roles in team-b"}
    # a cluster-scoped kind needs the cluster scope
    assert found("nodes", "list") == {}
    # already a Role with resourceNames: nothing narrower
    assert found("configmaps", "get") == {}
    # unused: nothing to judge
    assert found("pods", "get") == {}


def test_each_resource_name_of_a_grant_must_be_named_by_a_use(tmp_path: Path) -> None:
    """A grant of resourceNames [a, b, c] is used as a whole once any one name is (`unused` says nothing), yet a
    name no request named is a grant the product does not need: `unused_names` lists it. Only allowed requests
    of the grant's own account, verb, resource and namespace name a name."""
    sensors = "system:serviceaccount:gpuaas:gpuaas-sensors"
    grant = audit.Grant(sensors, "Role/gpuaas/gpuaas-sensors", "gpuaas", "argoproj.io", "workflowtemplates", "get",
                        ("gpuaas-on-admitted", "gpuaas-on-finished", "gpuaas-on-idle"))
    log = tmp_path / "audit.log"
    log.write_text("\n".join([
        _line(sensors, "get", "workflowtemplates", group="argoproj.io", namespace="gpuaas", name="gpuaas-on-admitted"),
        _line(sensors, "get", "workflowtemplates", group="argoproj.io", namespace="gpuaas",
              name="gpuaas-on-idle", code=403, decision="forbid"),                              # denied: names nothing
        _line(STEPS, "get", "workflowtemplates", group="argoproj.io", namespace="gpuaas",
              name="gpuaas-on-finished"),                                                       # another account
        _line(sensors, "list", "workflowtemplates", group="argoproj.io", namespace="gpuaas",
              name="gpuaas-on-finished"),                                                       # another verb
        _line(sensors, "get", "workflowtemplates", group="argoproj.io", namespace="team-a",
              name="gpuaas-on-finished"),                                                       # another namespace
    ]) + "\n")
    seen = list(audit.requests(log))
    assert audit.unused([grant], seen) == []
    assert audit.unused_names(grant, seen) == ("gpuaas-on-finished", "gpuaas-on-idle")
    assert audit.unused_names(grant, seen[:1] + [dataclasses.replace(seen[0], name=n) for n in grant.resource_names]) == ()
    assert audit.unused_names(grant, []) == grant.resource_names
    # no resourceNames: no name to leave unused
    assert audit.unused_names(dataclasses.replace(grant, resource_names=()), []) == ()


def test_every_recorded_reason_for_a_wider_grant_names_a_rendered_grant() -> None:
    """gpuaas.manifests.rbac.NARROWER_SCOPE_NOT_APPLIED is keyed by (account, resource.group, kind): a typo
    would explain nothing, and the real tier would then fail on the narrowing it meant to explain."""
    from gpuaas.manifests.rbac import NARROWER_SCOPE_NOT_APPLIED

    rendered = {(g.user.rsplit(":", 1)[-1], f"{g.resource}.{g.group}" if g.group else g.resource,
                 g.namespace is None) for g in audit.grants(rendered_rbac())}
    for account, resource, kind in NARROWER_SCOPE_NOT_APPLIED:
        assert kind in ("namespace", "names"), kind
        cluster_wide = {wide for a, r, wide in rendered if (a, r) == (account, resource)}
        assert cluster_wide, f"{(account, resource)} is granted nothing in the rendered RBAC"
        if kind == "namespace":
            assert True in cluster_wide, f"{(account, resource)}: a Role already; no namespace reason needed"
