"""The govaluate expression language that Argo Events `exprs` filters use, parsed safely.

No `eval()`: expressions are tokenised and parsed into a small tree once (when the Sensor is
loaded) and evaluated per event against the named fields. Semantics follow Knetic/govaluate:

* numbers are float64; `==`/`!=` compare type and value (so `"1" == 1` is false);
* `>`, `>=`, `<`, `<=` need two numbers or two strings; `+` adds numbers or concatenates when
  either side is a string; `-`, `*`, `/`, `%`, `**` need numbers;
* `&&`, `||`, `!` need booleans (a string "true" is an error, not true), with short-circuit;
* `=~` / `!~` match the left string against a Go regexp (unanchored);
* `? :` ternary, `??` null-coalescence, `in` over `(a, b, c)`, bitwise `& | ^ << >> ~`;
* a string LITERAL that looks like a date (`'2026-12-01'`, RFC 3339, ...) becomes float64 Unix
  seconds, as govaluate's lexer does (so `created > '2026-12-01'` needs a numeric field);
* precedence (low to high): ternary, `||`, `&&`, bitwise, shift, comparison, additive,
  multiplicative, `**`, prefix.
A type error is an evaluation error, which makes the filter fail (as in the sensor).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from routing.gofmt import go_sprint
from routing.goregexp import GoRegexpError, compile_go_regexp


class ExpressionError(ValueError):
    """The expression does not parse, or a value has the wrong type for an operator."""


_TOKEN = re.compile(
    r"""\s*(?:
    (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)|
    (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|
    (?P<bracket>\[[^\]]+\])|
    (?P<op>\*\*|&&|\|\||==|!=|>=|<=|=~|!~|<<|>>|\?\?|[-+*/%<>!&|^~?:(),])|
    (?P<ident>[A-Za-z_][\w.]*)
    )""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Node:
    op: str
    args: tuple
    value: Any = None


def _tokenize(text: str) -> list[tuple[str, Any]]:
    tokens: list[tuple[str, Any]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ExpressionError(f"Invalid token: {text[pos:].strip()[:20]!r}")
        kind = m.lastgroup
        raw = m.group(kind)
        if kind == "num":
            tokens.append(("value", float(raw)))
        elif kind == "str":
            literal = _unquote(raw)
            moment = _as_date(literal)
            tokens.append(("value", literal if moment is None else moment))
        elif kind == "bracket":
            tokens.append(("var", raw[1:-1]))
        elif kind == "ident":
            if raw == "true" or raw == "false":
                tokens.append(("value", raw == "true"))
            elif raw == "in":
                tokens.append(("op", "in"))
            else:
                tokens.append(("var", raw))
        else:
            tokens.append(("op", raw))
        pos = m.end()
    return tokens


_DATE_FORMATS = [
    (re.compile(r"\d{4}-\d{2}-\d{2}"), "%Y-%m-%d"),
    (re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}"), "%Y-%m-%d %H:%M"),
    (re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}"), "%Y-%m-%d %H:%M:%S"),
    (re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}[+-]\d{2}:\d{2}"), "%Y-%m-%d %H:%M:%S%z"),
    (re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})"), "rfc3339"),
    (re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}(Z|[+-]\d{4})"), "%Y-%m-%dT%H%z"),
    (re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(Z|[+-]\d{4})"), "%Y-%m-%dT%H:%M%z"),
    (re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{4})"), "iso"),
]


def _as_date(text: str) -> float | None:
    """govaluate turns a string LITERAL that parses as a date into float64 Unix seconds."""
    from datetime import datetime

    for pattern, fmt in _DATE_FORMATS:
        if not pattern.fullmatch(text):
            continue
        value = text.replace("Z", "+00:00") if fmt in ("rfc3339", "iso") or fmt.endswith("%z") else text
        try:
            if fmt in ("rfc3339", "iso"):
                head, _, frac_zone = value.partition(".")
                if frac_zone:
                    digits = re.match(r"\d+", frac_zone).group(0)  # type: ignore[union-attr]
                    value = f"{head}.{digits[:6].ljust(6, '0')}{frac_zone[len(digits):]}"
                moment = datetime.fromisoformat(value)
            else:
                moment = datetime.strptime(value.replace("+00:00", "+0000"), fmt)
        except ValueError:
            continue
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return float(int(moment.timestamp()))
    return None


def _unquote(raw: str) -> str:
    body = raw[1:-1]
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t", "r": "\r"}.get(m.group(1), m.group(1)), body)


_BINARY_LEVELS: list[tuple[str, ...]] = [
    ("||",),
    ("&&",),
    ("&", "|", "^"),
    ("<<", ">>"),
    ("==", "!=", ">", ">=", "<", "<=", "=~", "!~", "in"),
    ("+", "-"),
    ("*", "/", "%"),
    ("**",),
]


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0

    def parse(self) -> _Node:
        if not self.tokens:
            raise ExpressionError("Unexpected end of expression")
        node = self._ternary()
        if self.i != len(self.tokens):
            raise ExpressionError(f"Unexpected token {self.tokens[self.i][1]!r} in {self.text!r}")
        return node

    def _peek(self) -> tuple[str, Any] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _accept(self, *ops: str) -> str | None:
        tok = self._peek()
        if tok and tok[0] == "op" and tok[1] in ops:
            self.i += 1
            return tok[1]
        return None

    def _ternary(self) -> _Node:
        cond = self._binary(0)
        if self._accept("?"):
            then = self._ternary()
            if self._accept(":"):
                return _Node("?:", (cond, then, self._ternary()))
            return _Node("?", (cond, then))
        if self._accept("??"):
            return _Node("??", (cond, self._ternary()))
        return cond

    def _binary(self, level: int) -> _Node:
        if level == len(_BINARY_LEVELS):
            return self._prefix()
        left = self._binary(level + 1)
        while True:
            op = self._accept(*_BINARY_LEVELS[level])
            if not op:
                return left
            right = self._binary(level + 1)
            left = _Node(op, (left, right))

    def _prefix(self) -> _Node:
        op = self._accept("!", "-", "~")
        if op:
            return _Node("neg" if op == "-" else op, (self._prefix(),))
        return self._value()

    def _value(self) -> _Node:
        tok = self._peek()
        if tok is None:
            raise ExpressionError(f"Unexpected end of expression {self.text!r}")
        self.i += 1
        kind, value = tok
        if kind == "value":
            return _Node("lit", (), value)
        if kind == "var":
            return _Node("var", (), value)
        if value == "(":
            items = [self._ternary()]
            while self._accept(","):
                items.append(self._ternary())
            if not self._accept(")"):
                raise ExpressionError(f"Unbalanced parenthesis in {self.text!r}")
            return items[0] if len(items) == 1 else _Node("list", tuple(items))
        raise ExpressionError(f"Unexpected token {value!r} in {self.text!r}")


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "other"


def _need(value: Any, kind: str, op: str, what: str) -> None:
    if _kind(value) != kind:
        raise ExpressionError(f"Value '{go_sprint(value)}' cannot be used with the {what} '{op}', it is not a {kind}")


def _numeric(op: str, fn: Callable[[float, float], Any], what: str = "modifier") -> Callable[[Any, Any], Any]:
    def apply(a: Any, b: Any) -> Any:
        _need(a, "number", op, what)
        _need(b, "number", op, what)
        return fn(float(a), float(b))

    return apply


def _ordered(op: str, fn: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def apply(a: Any, b: Any) -> bool:
        if _kind(a) == "string" and _kind(b) == "string":
            return fn(a, b)
        _need(a, "number", op, "comparator")
        _need(b, "number", op, "comparator")
        return fn(float(a), float(b))

    return apply


def _add(a: Any, b: Any) -> Any:
    if _kind(a) == "string" or _kind(b) == "string":
        return go_sprint(a) + go_sprint(b)
    _need(a, "number", "+", "modifier")
    _need(b, "number", "+", "modifier")
    return float(a) + float(b)


def _equal(a: Any, b: Any) -> bool:
    if _kind(a) != _kind(b):
        return False
    if _kind(a) == "number":
        return float(a) == float(b)
    return a == b


def _regex(op: str, negate: bool) -> Callable[[Any, Any], bool]:
    def apply(a: Any, b: Any) -> bool:
        _need(a, "string", op, "comparator")
        _need(b, "string", op, "comparator")
        try:
            matched = compile_go_regexp(b).search(a) is not None
        except GoRegexpError as exc:
            raise ExpressionError(f"Unable to compile regexp pattern '{b}': {exc}") from None
        return matched != negate

    return apply


def _int_op(op: str, fn: Callable[[int, int], int]) -> Callable[[Any, Any], float]:
    def apply(a: Any, b: Any) -> float:
        _need(a, "number", op, "modifier")
        _need(b, "number", op, "modifier")
        return float(fn(int(a), int(b)))

    return apply


def _go_mod(a: float, b: float) -> float:
    if b == 0:
        return math.nan
    return math.fmod(a, b)


def _div(a: float, b: float) -> float:
    if b == 0:
        return math.copysign(math.inf, a) if a else math.nan
    return a / b


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "==": _equal,
    "!=": lambda a, b: not _equal(a, b),
    ">": _ordered(">", lambda a, b: a > b),
    ">=": _ordered(">=", lambda a, b: a >= b),
    "<": _ordered("<", lambda a, b: a < b),
    "<=": _ordered("<=", lambda a, b: a <= b),
    "=~": _regex("=~", negate=False),
    "!~": _regex("!~", negate=True),
    "+": _add,
    "-": _numeric("-", lambda a, b: a - b),
    "*": _numeric("*", lambda a, b: a * b),
    "/": _numeric("/", _div),
    "%": _numeric("%", _go_mod),
    "**": _numeric("**", lambda a, b: math.pow(a, b)),
    "&": _int_op("&", lambda a, b: a & b),
    "|": _int_op("|", lambda a, b: a | b),
    "^": _int_op("^", lambda a, b: a ^ b),
    "<<": _int_op("<<", lambda a, b: a << b),
    ">>": _int_op(">>", lambda a, b: a >> b),
}


class Expression:
    """A parsed govaluate expression; `evaluate(parameters)` per event."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.root = _Parser(text).parse()
        self.variables = sorted(_variables(self.root))

    def evaluate(self, parameters: dict[str, Any]) -> Any:
        return self._eval(self.root, parameters)

    def _eval(self, node: _Node, params: dict[str, Any]) -> Any:
        op = node.op
        if op == "lit":
            return node.value
        if op == "var":
            if node.value not in params:
                raise ExpressionError(f"No parameter '{node.value}' found.")
            return params[node.value]
        if op == "&&" or op == "||":
            left = self._eval(node.args[0], params)
            _need(left, "bool", op, "logical operator")
            if (op == "&&" and not left) or (op == "||" and left):
                return left
            right = self._eval(node.args[1], params)
            _need(right, "bool", op, "logical operator")
            return right
        if op == "!":
            value = self._eval(node.args[0], params)
            _need(value, "bool", "!", "prefix")
            return not value
        if op == "neg":
            value = self._eval(node.args[0], params)
            _need(value, "number", "-", "prefix")
            return -float(value)
        if op == "~":
            value = self._eval(node.args[0], params)
            _need(value, "number", "~", "prefix")
            return float(~int(value))
        if op == "?:" or op == "?":
            cond = self._eval(node.args[0], params)
            _need(cond, "bool", "?", "ternary")
            if cond:
                return self._eval(node.args[1], params)
            return self._eval(node.args[2], params) if op == "?:" else None
        if op == "??":
            left = self._eval(node.args[0], params)
            return left if left is not None else self._eval(node.args[1], params)
        if op == "list":
            return [self._eval(a, params) for a in node.args]
        if op == "in":
            left = self._eval(node.args[0], params)
            right = self._eval(node.args[1], params)
            if not isinstance(right, list):
                right = [right]
            return any(_equal(left, r) for r in right)
        fn = _BINARY[op]
        return fn(self._eval(node.args[0], params), self._eval(node.args[1], params))


def _variables(node: _Node) -> set[str]:
    if node.op == "var":
        return {node.value}
    found: set[str] = set()
    for arg in node.args:
        found |= _variables(arg)
    return found
