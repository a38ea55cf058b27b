"""kube-apiserver's audit log of the product's own identities: what each ServiceAccount really did.

Why: "least privilege" is a claim about two sets, the rules a Role grants and the requests the code
makes. The apiserver's audit log is the record of the second set as the authorizer saw it (user,
verb, resource, subresource, namespace, name, HTTP code, and the RBAC decision), so the real-stack
tier compares it with the rendered Roles instead of trusting a list kept by hand.

The policy logs at `Metadata` level (no bodies) the requests of ServiceAccounts in the product's
namespace (`system:serviceaccounts:gpuaas`: the steps, the sensors, the event sources, the sweep)
once the response is complete; and, for what one reaction costs the control plane (benchmarks/scale.py
counts API calls per 1,000 admissions), the requests of the programs that run reactions: Argo
Workflows (`system:serviceaccounts:argo`), Argo Events (`system:serviceaccounts:argo-events`), the
real node's kubelet (`system:nodes`, the step pods' status) and the scheduler (binding those pods).
Kueue's, KWOK's and the other controllers' traffic is left out: it is the workloads', not the
product's. The log is JSON lines at `<state>/logs/audit.log`
(`gpuaas cluster status` lists it), written synchronously (`--audit-log-mode=blocking`, the
default), so a request is in the file when its answer arrives.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PRODUCT_NAMESPACE = "gpuaas"
REACTION_RUNNERS = ("system:serviceaccounts:argo", "system:serviceaccounts:argo-events", "system:nodes")
"""The groups of the programs that run a reaction besides the product's own ServiceAccounts."""
POD_NAME = "authentication.kubernetes.io/pod-name"
"""The `user.extra` key kube-apiserver fills from a token bound to a pod (the projected token a kubelet
mounts); a token from the TokenRequest API without a pod (what the tests use to act as a ServiceAccount)
has none. It is what tells a real component's request from a test's."""
NAMEABLE_VERBS = frozenset({"get", "update", "patch", "delete"})
"""Verbs whose request names its object in the URL, so RBAC's `resourceNames` can restrict them (create and
deletecollection never can; list and watch only with a metadata.name field selector, which nothing here uses)."""


def policy(namespace: str = PRODUCT_NAMESPACE) -> dict[str, Any]:
    """The audit Policy (audit.k8s.io/v1) `gpuaas cluster up` hands to kube-apiserver."""
    return {
        "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "Metadata", "userGroups": [f"system:serviceaccounts:{namespace}", *REACTION_RUNNERS]},
            {"level": "Metadata", "users": ["system:kube-scheduler"], "resources": [
                {"group": "", "resources": ["pods/binding"]}]},
            {"level": "None"},
        ],
    }


@dataclass(frozen=True)
class Request:
    """One audited request, as RBAC sees it."""

    user: str
    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    decision: str
    """`allow` or `forbid` (the annotation `authorization.k8s.io/decision`)."""
    uri: str
    pod: str = ""
    """The pod whose bound token made the request (POD_NAME); empty for a token bound to no pod."""
    user_agent: str = ""

    @property
    def from_pod(self) -> bool:
        """Made by a program in a pod with the pod's own token: a real component, not a test acting as it."""
        return bool(self.pod)

    @property
    def denied(self) -> bool:
        return self.code == 403 or self.decision == "forbid"

    @property
    def rbac_resource(self) -> str:
        """`resource` or `resource/subresource`, the spelling of a Role's `resources`."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def requests(path: Path, user: str | None = None) -> Iterator[Request]:
    """The audited requests in the log (optionally of one user), in the order they completed."""
    if not path.is_file():
        return
    with path.open() as handle:
        for line in handle:
            if not line.strip():
                continue
            event = json.loads(line)
            who = (event.get("user") or {}).get("username", "")
            if user is not None and who != user:
                continue
            ref = event.get("objectRef") or {}
            extra = (event.get("user") or {}).get("extra") or {}
            yield Request(user=who, verb=event.get("verb", ""), group=ref.get("apiGroup", ""),
                          resource=ref.get("resource", ""), subresource=ref.get("subresource", ""),
                          namespace=ref.get("namespace", ""), name=ref.get("name", ""),
                          code=int((event.get("responseStatus") or {}).get("code") or 0),
                          decision=(event.get("annotations") or {}).get("authorization.k8s.io/decision", ""),
                          uri=event.get("requestURI", ""), pod=(extra.get(POD_NAME) or [""])[0],
                          user_agent=event.get("userAgent", ""))


@dataclass(frozen=True)
class Grant:
    """One (verb, resource) an RBAC rule gives one ServiceAccount, where it applies."""

    user: str
    """`system:serviceaccount:NS:NAME`"""
    role: str
    """`ClusterRole/NAME` or `Role/NS/NAME`"""
    namespace: str | None
    """The Role's namespace; None for a ClusterRole bound cluster-wide."""
    group: str
    resource: str
    """`resource` or `resource/subresource`"""
    verb: str
    resource_names: tuple[str, ...] = ()

    def allows(self, request: Request) -> bool:
        """Whether RBAC would authorize `request` by this grant (and only what the request says)."""
        return (request.user == self.user and request.group == self.group
                and request.rbac_resource == self.resource and request.verb == self.verb
                and (self.namespace is None or request.namespace == self.namespace)
                and (not self.resource_names or request.name in self.resource_names))

    def describe(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        names = f" {list(self.resource_names)}" if self.resource_names else ""
        group = self.group or "core"
        return f"{self.user}: {self.verb} {group}/{self.resource}{names}{where} ({self.role})"


def grants(objects: list[dict[str, Any]]) -> list[Grant]:
    """Every (ServiceAccount, verb, resource) the rendered Roles and ClusterRoles give through their
    bindings. Wildcards are kept as written (a `*` is never "used" by one request: it fails the
    least-privilege check, as it should)."""
    roles = {(o["kind"], (o["metadata"].get("namespace") or ""), o["metadata"]["name"]): o for o in objects
             if o.get("kind") in ("Role", "ClusterRole")}
    found: list[Grant] = []
    for binding in objects:
        if binding.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        namespace = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        ref = binding["roleRef"]
        role = roles.get((ref["kind"], (namespace or "") if ref["kind"] == "Role" else "", ref["name"]))
        if role is None:
            continue
        label = f"{ref['kind']}/{namespace + '/' if ref['kind'] == 'Role' else ''}{ref['name']}"
        for subject in binding.get("subjects") or []:
            if subject.get("kind") != "ServiceAccount":
                continue
            user = f"system:serviceaccount:{subject.get('namespace') or namespace}:{subject['name']}"
            for rule in role.get("rules") or []:
                for group in rule.get("apiGroups") or [""]:
                    for resource in rule.get("resources") or []:
                        for verb in rule.get("verbs") or []:
                            found.append(Grant(user, label, namespace, group, resource, verb,
                                               tuple(rule.get("resourceNames") or ())))
    return found


def unused(granted: list[Grant], seen: list[Request]) -> list[Grant]:
    """The grants no allowed request in `seen` needed."""
    allowed = [r for r in seen if not r.denied]
    return [g for g in granted if not any(g.allows(r) for r in allowed)]


def uses(grant: Grant, seen: Iterable[Request]) -> list[Request]:
    """The allowed requests in `seen` this grant covers."""
    return [r for r in seen if not r.denied and grant.allows(r)]


def unused_names(grant: Grant, seen: Iterable[Request]) -> tuple[str, ...]:
    """The names of the grant's `resourceNames` that no allowed request in `seen` named, in the grant's order.

    Why: `Grant.allows` (and so `unused`) counts a grant as used once any one of its names is used. A grant of
    [a, b] whose `b` nothing asked for authorizes more than the product needs, as much as an unused verb does:
    each name is a grant of its own. A grant without `resourceNames` has no names to leave unused (its width is
    `narrowings`' question)."""
    named = {r.name for r in uses(grant, seen)}
    return tuple(name for name in grant.resource_names if name not in named)


@dataclass(frozen=True)
class Narrowing:
    """A narrower grant that would still have authorized every use seen."""

    kind: str
    """`namespace` (Roles in the namespaces used instead of a ClusterRole) or `names` (`resourceNames`)."""
    detail: str


def narrowings(grant: Grant, used: list[Request]) -> list[Narrowing]:
    """What would still authorize `used` (the grant's uses) with less than `grant`.

    Why here and not in `Grant.allows`: allowing a request says a grant is needed, not that it is as small as it
    could be. Two narrowings are checked, the two RBAC has: a ClusterRole whose every use named a namespace could
    be Roles in those namespaces (a use with no namespace, a cluster-scoped object or a list across namespaces,
    needs the cluster scope); a grant of a verb that names its object (NAMEABLE_VERBS) whose every use named one
    could list them in `resourceNames`. Whether the names seen are the only ones the product will ever need is
    not in the log: the caller weighs each narrowing against the reasons the RBAC records."""
    if not used:
        return []
    found = []
    namespaces = sorted({r.namespace for r in used})
    if grant.namespace is None and "" not in namespaces:
        found.append(Narrowing("namespace", f"Roles in {', '.join(namespaces)}"))
    names = sorted({r.name for r in used})
    if not grant.resource_names and grant.verb in NAMEABLE_VERBS and "" not in names:
        found.append(Narrowing("names", f"resourceNames {names[:6]}{' ...' if len(names) > 6 else ''}"))
    return found
