"""A trigger's dependency `conditions` ("(dep-a || dep-b) && dep-c").

Semantics from argo-events `pkg/sensors/listener.go` and the JetStream trigger connection:
no `conditions` = every dependency of the Sensor AND-ed. If the expression has no `&`, every
dependency that passes its filters fires the trigger on its own (so one event matching two
dependencies under `||` fires it twice). With `&`, passing events are remembered per
dependency (the latest wins) until the expression is true; then the trigger fires with all
remembered events and the memory is cleared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(r"\s*(?:(?P<op>&&|\|\||[()])|(?P<name>[A-Za-z0-9_.\-]+))")


class ConditionsError(ValueError):
    """The conditions expression does not parse or names an unknown dependency."""


@dataclass(frozen=True)
class Conditions:
    text: str
    tree: tuple
    names: tuple[str, ...]
    requires_and: bool

    def satisfied(self, present: set[str] | frozenset[str]) -> bool:
        return _eval(self.tree, present)

    def missing(self, present: set[str] | frozenset[str]) -> list[str]:
        """Dependencies not yet received (for an explanation)."""
        return [n for n in self.names if n not in present]


def parse_conditions(text: str, known: list[str]) -> Conditions:
    tokens: list[tuple[str, str]] = []
    pos = 0
    stripped = text.strip()
    while pos < len(stripped):
        m = _TOKEN.match(stripped, pos)
        if not m or m.end() == pos:
            raise ConditionsError(f"conditions {text!r}: unexpected {stripped[pos:pos + 10]!r}")
        kind = "op" if m.group("op") else "name"
        tokens.append((kind, m.group(kind)))
        pos = m.end()
        while pos < len(stripped) and stripped[pos].isspace():
            pos += 1
    parser = _Parser(tokens, text)
    tree = parser.expression()
    if parser.i != len(tokens):
        raise ConditionsError(f"conditions {text!r}: unexpected {tokens[parser.i][1]!r}")
    names = tuple(dict.fromkeys(_names(tree)))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConditionsError(
            f"conditions {text!r} name {', '.join(unknown)}, which is not a dependency of this Sensor "
            f"(known: {', '.join(known)}); the sensor logs 'Dependency expression and dependency list do not "
            f"match' and never runs this trigger"
        )
    return Conditions(text=text, tree=tree, names=names, requires_and="&" in text)


def all_dependencies(names: list[str]) -> Conditions:
    """No `conditions`: all dependencies AND-ed."""
    tree: tuple = ("name", names[0]) if len(names) == 1 else ("and", tuple(("name", n) for n in names))
    return Conditions(text=" && ".join(names), tree=tree, names=tuple(names), requires_and=len(names) > 1)


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]], text: str) -> None:
        self.tokens, self.text, self.i = tokens, text, 0

    def _accept(self, value: str) -> bool:
        if self.i < len(self.tokens) and self.tokens[self.i] == ("op", value):
            self.i += 1
            return True
        return False

    def expression(self) -> tuple:
        items = [self.conjunction()]
        while self._accept("||"):
            items.append(self.conjunction())
        return items[0] if len(items) == 1 else ("or", tuple(items))

    def conjunction(self) -> tuple:
        items = [self.atom()]
        while self._accept("&&"):
            items.append(self.atom())
        return items[0] if len(items) == 1 else ("and", tuple(items))

    def atom(self) -> tuple:
        if self._accept("("):
            inner = self.expression()
            if not self._accept(")"):
                raise ConditionsError(f"conditions {self.text!r}: missing )")
            return inner
        if self.i < len(self.tokens) and self.tokens[self.i][0] == "name":
            self.i += 1
            return ("name", self.tokens[self.i - 1][1])
        raise ConditionsError(f"conditions {self.text!r}: expected a dependency name")


def _eval(tree: tuple, present: set[str] | frozenset[str]) -> bool:
    kind = tree[0]
    if kind == "name":
        return tree[1] in present
    if kind == "and":
        return all(_eval(t, present) for t in tree[1])
    return any(_eval(t, present) for t in tree[1])


def _names(tree: tuple) -> list[str]:
    if tree[0] == "name":
        return [tree[1]]
    return [n for t in tree[1] for n in _names(t)]
