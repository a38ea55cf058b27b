"""Selection semantics the doctor must reproduce exactly (pure): Kubernetes label selectors and
Alertmanager's routing tree.

Label selectors (`metav1.LabelSelector`): `matchLabels` and `matchExpressions` (In, NotIn, Exists,
DoesNotExist), all ANDed; `{}` selects everything. What a `null` selector means is the caller's
business, because components differ: the Prometheus Operator's `ruleSelector: null` selects NO rule
(`metav1.LabelSelectorAsSelector(nil)` is `labels.Nothing()`, prometheus-operator v0.93
pkg/operator/rules.go), while a `null` namespace selector means the object's own namespace
(pkg/operator/operator.go SelectNamespacesFromCache; pkg/alertmanager/operator.go).

Routing (Alertmanager's `dispatch.Route.Match`): an alert enters at the root; children are tried in
order, a matching child is descended into, and unless it has `continue: true` the search stops at the
first matching child; a node none of whose children match delivers to its own receiver. Matchers come
as `matchers: ['name="v"', ...]` (or one `{a="b", c=~"d"}` list), or the older `match`/`match_re`
maps; regex matchers are anchored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a (non-null) label selector matches `labels`; a null selector matches nothing here (the same
    evaluation as the stack's monitoring profiles: gpuaas.cluster.profiles.matches)."""
    from gpuaas.cluster.profiles import matches

    return matches(selector, labels)


def describe_selector(selector: Mapping[str, Any] | None) -> str:
    """`release=kps, tier in (a,b)`; `{}` is "every object", null "none"."""
    if selector is None:
        return "null"
    parts = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    for e in selector.get("matchExpressions") or []:
        op, values = e.get("operator"), ",".join(e.get("values") or [])
        parts.append({"In": f"{e.get('key')} in ({values})", "NotIn": f"{e.get('key')} notin ({values})",
                      "Exists": str(e.get("key")), "DoesNotExist": f"!{e.get('key')}"}.get(str(op), str(e)))
    return ", ".join(parts) if parts else "{} (everything)"


def labels_that_satisfy(selector: Mapping[str, Any] | None) -> dict[str, str] | None:
    """Labels that make an object match `selector` when it has none of them (matchLabels, and `In` with
    one value); None when no plain labelling can (NotIn / DoesNotExist on labels it may have, or null)."""
    if selector is None:
        return None
    wanted = dict(selector.get("matchLabels") or {})
    for e in selector.get("matchExpressions") or []:
        if e.get("operator") == "In" and e.get("values"):
            wanted[str(e["key"])] = str(e["values"][0])
        elif e.get("operator") == "Exists":
            wanted[str(e["key"])] = "true"
        elif e.get("operator") in ("NotIn", "DoesNotExist"):
            continue
    return wanted


# -- Alertmanager matchers and routes ---------------------------------------------------------------
_MATCHER = re.compile(r'^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(?:"((?:[^"\\]|\\.)*)"|([^,]*?))\s*$')


@dataclass(frozen=True)
class Matcher:
    name: str
    op: str
    value: str

    def matches(self, labels: Mapping[str, str]) -> bool:
        got = labels.get(self.name, "")
        if self.op == "=":
            return got == self.value
        if self.op == "!=":
            return got != self.value
        found = re.fullmatch(self.value, got) is not None
        return found if self.op == "=~" else not found

    def __str__(self) -> str:
        return f'{self.name}{self.op}"{self.value}"'


def _split_outside_quotes(text: str) -> list[str]:
    parts, current, quoted, escaped = [], "", False, False
    for char in text:
        if escaped:
            current += char
            escaped = False
        elif char == "\\":
            current += char
            escaped = True
        elif char == '"':
            current += char
            quoted = not quoted
        elif char == "," and not quoted:
            parts.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current)
    return parts


def parse_matchers(text: str) -> list[Matcher]:
    """One entry of a route's `matchers:`: `a="b"`, or `{a="b", c=~"d"}`. ValueError names what is wrong."""
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    out = []
    for part in _split_outside_quotes(body):
        found = _MATCHER.match(part)
        if found is None:
            raise ValueError(f"expected an Alertmanager matcher such as alertname=\"X\", found {part.strip()!r}")
        name, op, quoted, bare = found.groups()
        value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else (bare or "").strip()
        out.append(Matcher(name, op, value))
    return out


@dataclass
class Route:
    receiver: str
    matchers: tuple[Matcher, ...] = ()
    continue_: bool = False
    routes: list[Route] = field(default_factory=list)

    @classmethod
    def parse(cls, raw: Mapping[str, Any], inherited_receiver: str = "") -> Route:
        matchers: list[Matcher] = []
        for entry in raw.get("matchers") or []:
            matchers += parse_matchers(str(entry))
        matchers += [Matcher(str(k), "=", str(v)) for k, v in (raw.get("match") or {}).items()]
        matchers += [Matcher(str(k), "=~", str(v)) for k, v in (raw.get("match_re") or {}).items()]
        receiver = str(raw.get("receiver") or inherited_receiver)
        return cls(receiver, tuple(matchers), bool(raw.get("continue")),
                   [cls.parse(child, receiver) for child in raw.get("routes") or []])

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(m.matches(labels) for m in self.matchers)


def deliveries(root: Route, labels: Mapping[str, str]) -> list[str]:
    """The receivers an alert with `labels` is delivered to (Alertmanager's routing), in order."""
    def walk(route: Route) -> list[str]:
        found: list[str] = []
        for child in route.routes:
            if child.matches(labels):
                found += walk(child)
                if not child.continue_:
                    break
        return found or [route.receiver]
    return walk(root)


def paths_to(root: Route, receiver: str) -> list[list[Route]]:
    """Every path from the root to a route whose receiver is `receiver` (and that has no child of its own
    delivering elsewhere first): the matchers an alert must pass to get there."""
    found: list[list[Route]] = []

    def walk(route: Route, path: list[Route]) -> None:
        here = [*path, route]
        if route.receiver == receiver and route is not root:
            found.append(here)
        for child in route.routes:
            walk(child, here)
    walk(root, [])
    return found


def blocking_matchers(path: list[Route], labels: Mapping[str, str]) -> list[Matcher]:
    """The matchers along `path` that `labels` fail (why an alert does not get there)."""
    return [m for route in path for m in route.matchers if not m.matches(labels)]
