"""kube-apiserver's audit log of the product's own identities: what each ServiceAccount really did.

Why: "least privilege" is a claim about two sets, the rules a Role grants and the requests the code
makes. The apiserver's audit log is the record of the second set as the authorizer saw it (user,
verb, resource, subresource, namespace, name, HTTP code, and the RBAC decision), so the real-stack
tier compares it with the rendered Roles instead of trusting a list kept by hand.

The policy logs at `Metadata` level (no bodies) the requests of ServiceAccounts in the product's
namespace (`system:serviceaccounts:gpuaas`: the steps, the sensors, the event sources) once the
response is complete, and nothing else: the controllers' own traffic would be most of the log and
tell nothing about the product. The log is JSON lines at `<state>/logs/audit.log`
(`gpuaas cluster status` lists it), written synchronously (`--audit-log-mode=blocking`, the
default), so a request is in the file when its answer arrives.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PRODUCT_NAMESPACE = "gpuaas"


def policy(namespace: str = PRODUCT_NAMESPACE) -> dict[str, Any]:
    """The audit Policy (audit.k8s.io/v1) `gpuaas cluster up` hands to kube-apiserver."""
    return {
        "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "Metadata", "userGroups": [f"system:serviceaccounts:{namespace}"]},
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
            yield Request(user=who, verb=event.get("verb", ""), group=ref.get("apiGroup", ""),
                          resource=ref.get("resource", ""), subresource=ref.get("subresource", ""),
                          namespace=ref.get("namespace", ""), name=ref.get("name", ""),
                          code=int((event.get("responseStatus") or {}).get("code") or 0),
                          decision=(event.get("annotations") or {}).get("authorization.k8s.io/decision", ""),
                          uri=event.get("requestURI", ""))
