"""The govaluate expression language that Argo Events `exprs` filters use: a port of
Knetic/govaluate at the version argo-events v1.9.11 pins (v3.0.1-0.20171022003610-9aa49832a739).

No `eval()`: an expression is tokenised, checked and planned into a tree once (when the Sensor is
loaded) and evaluated per event against the named fields. The port keeps govaluate's own steps,
because its quirks are what the sensor does:

* the lexer reads runes: variables start with a letter and hold letters, digits, `_` and `.` (a
  `.` makes an accessor, which needs a struct and fails on event data); `[any name]` is a
  variable; a backslash escapes the next character; numbers are digits and dots (`1e3` is the
  number 1 followed by a variable); a run of symbol characters is ONE token, so `a&&!b` is the
  invalid token `&&!`; a quoted string that parses as a date (`'2026-12-01'`, RFC 3339, Kitchen,
  ...) becomes a TIME, evaluated as float64 Unix seconds;
* tokens must follow govaluate's transition table ("Cannot transition token types from ...");
* the planner builds right-leaning trees and then mirrors runs of equal precedence, exactly as
  govaluate's reorderStages does (including where that differs from textbook associativity);
* evaluation: numbers are float64, `==` is reflect.DeepEqual (`"1" == 1` is false), `+`
  concatenates when either side is a string (Go's %v), comparisons need two numbers or two
  strings, `&&`/`||`/`?:`/`??` short-circuit on the left value, type errors use govaluate's
  messages, `in` needs a list.
An error is an evaluation error, which makes the filter fail (as in the sensor).
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from routing.gofmt import go_sprint
from routing.goregexp import GoRegexpError, GoRegexpUnsupported, compile_go_regexp


class ExpressionError(ValueError):
    """The expression does not parse, or a value has the wrong type for an operator."""


class ExpressionPanic(ExpressionError):
    """govaluate panics here (the sensor process would crash rather than log an error)."""


# token kinds
UNKNOWN, PREFIX, NUMERIC, BOOLEAN, STRING, PATTERN, TIME, VARIABLE, FUNCTION, SEPARATOR, ACCESSOR, COMPARATOR, \
    LOGICALOP, MODIFIER, CLAUSE, CLAUSE_CLOSE, TERNARY = range(17)
_KIND_NAMES = ("UNKNOWN", "PREFIX", "NUMERIC", "BOOLEAN", "STRING", "PATTERN", "TIME", "VARIABLE", "FUNCTION",
               "SEPARATOR", "ACCESSOR", "COMPARATOR", "LOGICALOP", "MODIFIER", "CLAUSE", "CLAUSE_CLOSE", "TERNARY")

_VALUE_KINDS = (PREFIX, NUMERIC, BOOLEAN, VARIABLE, PATTERN, FUNCTION, ACCESSOR, STRING, TIME, CLAUSE)
# kind -> (is EOF-able, is nullable, valid next kinds): lexerState.go
_STATES: dict[int, tuple[bool, bool, tuple[int, ...]]] = {
    UNKNOWN: (False, True, _VALUE_KINDS),
    CLAUSE: (False, True, (*_VALUE_KINDS, CLAUSE_CLOSE)),
    CLAUSE_CLOSE: (True, True, (COMPARATOR, MODIFIER, NUMERIC, BOOLEAN, VARIABLE, STRING, PATTERN, TIME, CLAUSE,
                                CLAUSE_CLOSE, LOGICALOP, TERNARY, SEPARATOR)),
    NUMERIC: (True, False, (MODIFIER, COMPARATOR, LOGICALOP, CLAUSE_CLOSE, TERNARY, SEPARATOR)),
    BOOLEAN: (True, False, (MODIFIER, COMPARATOR, LOGICALOP, CLAUSE_CLOSE, TERNARY, SEPARATOR)),
    STRING: (True, False, (MODIFIER, COMPARATOR, LOGICALOP, CLAUSE_CLOSE, TERNARY, SEPARATOR)),
    TIME: (True, False, (MODIFIER, COMPARATOR, LOGICALOP, CLAUSE_CLOSE, SEPARATOR)),
    PATTERN: (True, False, (MODIFIER, COMPARATOR, LOGICALOP, CLAUSE_CLOSE, SEPARATOR)),
    VARIABLE: (True, False, (MODIFIER, COMPARATOR, LOGICALOP, CLAUSE_CLOSE, TERNARY, SEPARATOR)),
    MODIFIER: (False, False, (PREFIX, NUMERIC, VARIABLE, FUNCTION, ACCESSOR, STRING, BOOLEAN, CLAUSE, CLAUSE_CLOSE)),
    COMPARATOR: (False, False, (PREFIX, NUMERIC, BOOLEAN, VARIABLE, FUNCTION, ACCESSOR, STRING, TIME, CLAUSE,
                                CLAUSE_CLOSE, PATTERN)),
    LOGICALOP: (False, False, (PREFIX, NUMERIC, BOOLEAN, VARIABLE, FUNCTION, ACCESSOR, STRING, TIME, CLAUSE,
                               CLAUSE_CLOSE)),
    PREFIX: (False, False, (NUMERIC, BOOLEAN, VARIABLE, FUNCTION, ACCESSOR, CLAUSE, CLAUSE_CLOSE)),
    TERNARY: (False, False, (PREFIX, NUMERIC, BOOLEAN, STRING, TIME, VARIABLE, FUNCTION, ACCESSOR, CLAUSE, SEPARATOR)),
    FUNCTION: (False, False, (CLAUSE,)),
    ACCESSOR: (True, False, (CLAUSE, MODIFIER, COMPARATOR, LOGICALOP, CLAUSE_CLOSE, TERNARY, SEPARATOR)),
    SEPARATOR: (False, True, (PREFIX, NUMERIC, BOOLEAN, STRING, TIME, VARIABLE, FUNCTION, ACCESSOR, CLAUSE)),
}

_COMPARATORS = {"==": "EQ", "!=": "NEQ", ">": "GT", ">=": "GTE", "<": "LT", "<=": "LTE", "=~": "REQ", "!~": "NREQ",
                "in": "IN"}
_LOGICAL = {"&&": "AND", "||": "OR"}
_MODIFIERS = {"+": "PLUS", "-": "MINUS", "*": "MULTIPLY", "/": "DIVIDE", "%": "MODULUS", "**": "EXPONENT",
              "&": "BITWISE_AND", "|": "BITWISE_OR", "^": "BITWISE_XOR", ">>": "BITWISE_RSHIFT",
              "<<": "BITWISE_LSHIFT"}
_PREFIXES = {"-": "NEGATE", "!": "INVERT", "~": "BITWISE_NOT"}
_TERNARIES = {"?": "TERNARY_TRUE", ":": "TERNARY_FALSE", "??": "COALESCE"}
_SYMBOL_TEXT = {"EQ": "=", "NEQ": "!=", "GT": ">", "LT": "<", "GTE": ">=", "LTE": "<=", "REQ": "=~", "NREQ": "!~",
                "AND": "&&", "OR": "||", "IN": "in", "BITWISE_AND": "&", "BITWISE_OR": "|", "BITWISE_XOR": "^",
                "BITWISE_LSHIFT": "<<", "BITWISE_RSHIFT": ">>", "PLUS": "+", "MINUS": "-", "MULTIPLY": "*",
                "DIVIDE": "/", "MODULUS": "%", "EXPONENT": "**", "NEGATE": "-", "INVERT": "!", "BITWISE_NOT": "~",
                "TERNARY_TRUE": "?", "TERNARY_FALSE": ":", "COALESCE": "??", "NOOP": "NOOP", "VALUE": "VALUE"}
_PRECEDENCE = {"NOOP": 0, "VALUE": 1, "LITERAL": 1, "FUNCTIONAL": 2, "ACCESS": 2, "NEGATE": 3, "INVERT": 3,
               "BITWISE_NOT": 3, "EXPONENT": 4, "PLUS": 5, "MINUS": 5, "BITWISE_AND": 6, "BITWISE_OR": 6,
               "BITWISE_XOR": 6, "BITWISE_LSHIFT": 7, "BITWISE_RSHIFT": 7, "MULTIPLY": 8, "DIVIDE": 8,
               "MODULUS": 8, "EQ": 9, "NEQ": 9, "GT": 9, "LT": 9, "GTE": 9, "LTE": 9, "REQ": 9, "NREQ": 9,
               "IN": 9, "TERNARY_TRUE": 10, "TERNARY_FALSE": 10, "COALESCE": 10, "AND": 11, "OR": 12,
               "SEPARATE": 13}
_LOGICAL_FORMAT = "Value '%s' cannot be used with the logical operator '%s', it is not a bool"
_MODIFIER_FORMAT = "Value '%s' cannot be used with the modifier '%s', it is not a number"
_COMPARATOR_FORMAT = "Value '%s' cannot be used with the comparator '%s', it is not a number"
_TERNARY_FORMAT = "Value '%s' cannot be used with the ternary operator '%s', it is not a bool"
_PREFIX_FORMAT = "Value '%s' cannot be used with the prefix '%s'"


@dataclass
class _Token:
    kind: int
    value: Any


# ---------------------------------------------------------------------------------------------
# lexer (parsing.go)


def _is_space(char: str) -> bool:
    return char in "\t\n\v\f\r \x85\xa0" or (ord(char) > 0xFF and unicodedata.category(char) in ("Zs", "Zl", "Zp"))


def _is_letter(char: str) -> bool:
    return unicodedata.category(char).startswith("L")


def _is_digit(char: str) -> bool:
    return unicodedata.category(char) == "Nd"


def _is_numeric(char: str) -> bool:
    return _is_digit(char) or char == "."


def _is_variable_name(char: str) -> bool:
    return _is_letter(char) or _is_digit(char) or char in "_."


def _is_not_quote(char: str) -> bool:
    return char != "'" and char != '"'


def _is_not_alphanumeric(char: str) -> bool:
    return not (_is_digit(char) or _is_letter(char) or char in "()[]" or not _is_not_quote(char))


class _Stream:
    def __init__(self, text: str) -> None:
        self.source = text
        self.position = 0

    def can_read(self) -> bool:
        return self.position < len(self.source)

    def read(self) -> str:
        if self.position >= len(self.source):
            raise ExpressionPanic("runtime error: index out of range (govaluate reads past the end of the "
                                  "expression after a trailing backslash)")
        char = self.source[self.position]
        self.position += 1
        return char

    def rewind(self, amount: int) -> None:
        self.position -= amount


def _read_until_false(stream: _Stream, include_whitespace: bool, break_whitespace: bool, allow_escaping: bool,
                      condition: Any) -> tuple[str, bool]:
    buffer: list[str] = []
    conditioned = False
    while stream.can_read():
        char = stream.read()
        if allow_escaping and char == "\\":
            buffer.append(stream.read())
            continue
        if _is_space(char):
            if break_whitespace and buffer:
                conditioned = True
                break
            if not include_whitespace:
                continue
        if condition(char):
            buffer.append(char)
        else:
            conditioned = True
            stream.rewind(1)
            break
    return "".join(buffer), conditioned


def _read_token_until_false(stream: _Stream, condition: Any) -> str:
    stream.rewind(1)
    return _read_until_false(stream, False, True, True, condition)[0]


def _read_token(stream: _Stream, state: int) -> _Token | None:
    while stream.can_read():
        char = stream.read()
        if _is_space(char):
            continue
        if _is_numeric(char):
            if stream.can_read() and char == "0":
                char = stream.read()
                if stream.can_read() and char == "x":
                    text = _read_until_false(stream, False, True, True,
                                             lambda c: _is_digit(c.lower()) or c.lower() in "abcdef")[0]
                    if not re.fullmatch(r"[0-9a-fA-F]{1,16}", text.lstrip("0") or "0"):
                        raise ExpressionError(f"Unable to parse hex value '{text}' to uint64\n")
                    return _Token(NUMERIC, float(int(text, 16)))
                stream.rewind(1)
            text = _read_token_until_false(stream, _is_numeric)
            try:
                return _Token(NUMERIC, _go_parse_float(text))
            except ValueError:
                raise ExpressionError(f"Unable to parse numeric value '{text}' to float64\n") from None
        if char == ",":
            return _Token(SEPARATOR, ",")
        if char == "[":
            text, completed = _read_until_false(stream, True, False, True, lambda c: c != "]")
            if not completed:
                raise ExpressionError("Unclosed parameter bracket")
            stream.rewind(-1)
            return _Token(VARIABLE, text)
        if _is_letter(char):
            text = _read_token_until_false(stream, _is_variable_name)
            if text == "true":
                return _Token(BOOLEAN, True)
            if text == "false":
                return _Token(BOOLEAN, False)
            if text in ("in", "IN"):
                return _Token(COMPARATOR, "in")
            index = text.find(".")
            if index > 0:
                if text.endswith("."):
                    raise ExpressionError(f"Hanging accessor on token '{text}'")
                parts = text.split(".")
                for part in parts[1:]:
                    first = part[:1]
                    if first.upper() != first:
                        raise ExpressionError(f"Unable to access unexported field '{part}' in token '{text}'")
                return _Token(ACCESSOR, parts)
            return _Token(VARIABLE, text)
        if not _is_not_quote(char):
            text, completed = _read_until_false(stream, True, False, True, _is_not_quote)
            if not completed:
                raise ExpressionError("Unclosed string literal")
            stream.rewind(-1)
            moment = _try_parse_time(text)
            if moment is not None:
                return _Token(TIME, moment)
            return _Token(STRING, text)
        if char == "(":
            return _Token(CLAUSE, "(")
        if char == ")":
            return _Token(CLAUSE_CLOSE, ")")
        text = _read_token_until_false(stream, _is_not_alphanumeric)
        if PREFIX in _STATES[state][2] and text in _PREFIXES:
            return _Token(PREFIX, text)
        if text in _MODIFIERS:
            return _Token(MODIFIER, text)
        if text in _LOGICAL:
            return _Token(LOGICALOP, text)
        if text in _COMPARATORS:
            return _Token(COMPARATOR, text)
        if text in _TERNARIES:
            return _Token(TERNARY, text)
        raise ExpressionError(f"Invalid token: '{text}'")
    return None


def _go_parse_float(text: str) -> float:
    """strconv.ParseFloat on a run of digits and dots."""
    if not re.fullmatch(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)", text):
        raise ValueError(text)
    return float(text)


def _tokenize(text: str) -> list[_Token]:
    stream = _Stream(text)
    tokens: list[_Token] = []
    state = UNKNOWN
    while stream.can_read():
        token = _read_token(stream, state)
        if token is None:
            break
        state = token.kind
        tokens.append(token)
    depth = 0
    for token in tokens:
        depth += 1 if token.kind == CLAUSE else -1 if token.kind == CLAUSE_CLOSE else 0
    if depth != 0:
        raise ExpressionError("Unbalanced parenthesis")
    return tokens


def _check_syntax(tokens: list[_Token]) -> None:
    """checkExpressionSyntax: every token must be a valid successor of the previous one."""
    state = UNKNOWN
    last: _Token | None = None
    for token in tokens:
        if token.kind not in _STATES[state][2]:
            if last is not None and last.kind == VARIABLE and token.kind == CLAUSE:
                raise ExpressionError(f"Undefined function {last.value}")
            raise ExpressionError(f"Cannot transition token types from {_KIND_NAMES[state]} "
                                  f"[{_show(last.value) if last else '<nil>'}] to {_KIND_NAMES[token.kind]} "
                                  f"[{_show(token.value)}]")
        state = token.kind
        last = token
    if not _STATES[state][0]:
        raise ExpressionError("Unexpected end of expression")


def _show(value: Any) -> str:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "[" + " ".join(value) + "]"
    return go_sprint(value)


# ---------------------------------------------------------------------------------------------
# date literals (tryParseTime, in the sensor pod's Local zone: UTC)

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_FRACTION = r"(?:[.,]([0-9]+))?"
_ZONE_Z = r"(Z|[+-][0-9]{2}:[0-9]{2})"
_ZONE_Z4 = r"(Z|[+-][0-9]{4})"
_DAY_NAME = "(?:" + "|".join(_DAYS) + ")"
_MONTH_NAME = "(" + "|".join(_MONTHS) + ")"
_TIME_LAYOUTS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((name, re.compile(pattern)) for name, pattern in (
    ("ansic", rf"{_DAY_NAME} {_MONTH_NAME} (?: ?([0-9]{{1,2}})) ([0-9]{{1,2}}):([0-9]{{2}}):([0-9]{{2}}){_FRACTION} ([0-9]{{4}})"),
    ("unix", (rf"{_DAY_NAME} {_MONTH_NAME} (?: ?([0-9]{{1,2}})) ([0-9]{{1,2}}):([0-9]{{2}}):([0-9]{{2}}){_FRACTION} "
              r"([A-Z]{3,5}|GMT[+-][0-9]{1,2}) ([0-9]{4})")),
    ("ruby", (rf"{_DAY_NAME} {_MONTH_NAME} ([0-9]{{2}}) ([0-9]{{1,2}}):([0-9]{{2}}):([0-9]{{2}}){_FRACTION} "
              r"([+-][0-9]{4}) ([0-9]{4})")),
    ("kitchen", r"([0-9]{1,2}):([0-9]{2})(AM|PM)"),
    ("rfc3339", rf"([0-9]{{4}})-([0-9]{{2}})-([0-9]{{2}})T([0-9]{{1,2}}):([0-9]{{2}}):([0-9]{{2}}){_FRACTION}{_ZONE_Z}"),
    ("date", r"([0-9]{4})-([0-9]{2})-([0-9]{2})"),
    ("minutes", r"([0-9]{4})-([0-9]{2})-([0-9]{2}) ([0-9]{1,2}):([0-9]{2})"),
    ("seconds", rf"([0-9]{{4}})-([0-9]{{2}})-([0-9]{{2}}) ([0-9]{{1,2}}):([0-9]{{2}}):([0-9]{{2}}){_FRACTION}"),
    ("seconds_zone", (rf"([0-9]{{4}})-([0-9]{{2}})-([0-9]{{2}}) ([0-9]{{1,2}}):([0-9]{{2}}):([0-9]{{2}}){_FRACTION}"
                      r"([+-][0-9]{2}:[0-9]{2})")),
    ("iso_hour", rf"([0-9]{{4}})-([0-9]{{2}})-([0-9]{{2}})T([0-9]{{1,2}}){_ZONE_Z4}"),
    ("iso_minutes", rf"([0-9]{{4}})-([0-9]{{2}})-([0-9]{{2}})T([0-9]{{1,2}}):([0-9]{{2}}){_ZONE_Z4}"),
    ("iso_seconds", rf"([0-9]{{4}})-([0-9]{{2}})-([0-9]{{2}})T([0-9]{{1,2}}):([0-9]{{2}}):([0-9]{{2}}){_FRACTION}{_ZONE_Z4}"),
))


def _try_parse_time(text: str) -> float | None:
    """The Unix seconds of a string literal govaluate reads as a date, else None."""
    for name, pattern in _TIME_LAYOUTS:
        match = pattern.fullmatch(text)
        if match:
            try:
                return _unix_seconds(name, match.groups())
            except ValueError:
                continue
    return None


def _offset(zone: str | None) -> int:
    if not zone or zone == "Z":
        return 0
    if zone.startswith("GMT"):
        return int(zone[3:]) * 3600
    if zone[0] not in "+-":
        return 0  # an abbreviation Go does not know: a made-up zone with offset 0
    digits = zone[1:].replace(":", "")
    seconds = int(digits[:2]) * 3600 + int(digits[2:4]) * 60
    return -seconds if zone[0] == "-" else seconds


def _unix_seconds(layout: str, groups: tuple[str | None, ...]) -> float:
    g = list(groups)
    zone: str | None = None
    year, month, day, hour, minute, second = 0, 1, 1, 0, 0, 0
    if layout in ("ansic", "unix", "ruby"):
        month = _MONTHS.index(g[0]) + 1
        day, hour, minute, second = int(g[1]), int(g[2]), int(g[3]), int(g[4])  # type: ignore[arg-type]
        if layout == "ansic":
            year = int(g[6])  # type: ignore[arg-type]
        else:
            zone, year = g[6], int(g[7])  # type: ignore[arg-type]
    elif layout == "kitchen":
        hour, minute = int(g[0]), int(g[1])  # type: ignore[arg-type]
        if hour > 12:
            raise ValueError("hour out of range")
        if g[2] == "PM" and hour < 12:
            hour += 12
        elif g[2] == "AM" and hour == 12:
            hour = 0
    else:
        year, month, day = int(g[0]), int(g[1]), int(g[2])  # type: ignore[arg-type]
        if layout in ("minutes", "iso_minutes", "rfc3339", "seconds", "seconds_zone", "iso_seconds", "iso_hour"):
            hour = int(g[3])  # type: ignore[arg-type]
        if layout in ("minutes", "iso_minutes", "rfc3339", "seconds", "seconds_zone", "iso_seconds"):
            minute = int(g[4])  # type: ignore[arg-type]
        if layout in ("rfc3339", "seconds", "seconds_zone", "iso_seconds"):
            second = int(g[5])  # type: ignore[arg-type]
        zone = {"rfc3339": g[-1], "seconds_zone": g[-1], "iso_seconds": g[-1], "iso_hour": g[-1],
                "iso_minutes": g[-1]}.get(layout)
    if hour >= 24 or minute >= 60 or second >= 60 or not 1 <= month <= 12:
        raise ValueError("out of range")
    if year == 0:
        base = datetime(1, 1, 1, tzinfo=UTC) - timedelta(days=366)  # year 0, a leap year
        if (month, day) != (1, 1):
            raise ValueError("year 0 only for Kitchen")
        moment = base + timedelta(hours=hour, minutes=minute, seconds=second)
    else:
        moment = datetime(year, month, day, hour, minute, second, tzinfo=UTC)  # validates the day
    seconds = (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(seconds=1)
    return float(seconds - _offset(zone))


# ---------------------------------------------------------------------------------------------
# planner (stagePlanner.go)


@dataclass
class _Stage:
    symbol: str
    left: _Stage | None = None
    right: _Stage | None = None
    value: Any = None  # literal value, parameter name, accessor parts
    kind: str = ""  # "literal", "parameter", "accessor", "operator"
    format: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def swap_with(self, other: _Stage) -> None:
        for name in ("symbol", "value", "kind", "format"):
            mine, theirs = getattr(self, name), getattr(other, name)
            setattr(self, name, theirs)
            setattr(other, name, mine)


class _TokenStream:
    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.index = 0

    def has_next(self) -> bool:
        return self.index < len(self.tokens)

    def next(self) -> _Token:
        if self.index >= len(self.tokens):
            raise ExpressionPanic("runtime error: index out of range (govaluate's planner reads past the end)")
        token = self.tokens[self.index]
        self.index += 1
        return token

    def rewind(self) -> None:
        self.index -= 1


_LEVELS: list[tuple[dict[str, str], tuple[int, ...], str]] = [
    ({",": "SEPARATE"}, (SEPARATOR,), ""),
    (_TERNARIES, (TERNARY,), _TERNARY_FORMAT),
    ({"||": "OR"}, (LOGICALOP,), _LOGICAL_FORMAT),
    ({"&&": "AND"}, (LOGICALOP,), _LOGICAL_FORMAT),
    (_COMPARATORS, (COMPARATOR,), _COMPARATOR_FORMAT),
    ({"^": "BITWISE_XOR", "&": "BITWISE_AND", "|": "BITWISE_OR"}, (MODIFIER,), _MODIFIER_FORMAT),
    ({">>": "BITWISE_RSHIFT", "<<": "BITWISE_LSHIFT"}, (MODIFIER,), _MODIFIER_FORMAT),
    ({"+": "PLUS", "-": "MINUS"}, (MODIFIER,), _MODIFIER_FORMAT),
    ({"*": "MULTIPLY", "/": "DIVIDE", "%": "MODULUS"}, (MODIFIER,), _MODIFIER_FORMAT),
    ({"**": "EXPONENT"}, (MODIFIER,), _MODIFIER_FORMAT),
]


def _plan_level(stream: _TokenStream, level: int) -> _Stage | None:
    """planPrecedenceLevel: left from the next level, then (operator, right from this same level)."""
    if level == len(_LEVELS):
        return _plan_value(stream)
    symbols, kinds, error_format = _LEVELS[level]
    left = _plan_level(stream, level + 1)
    while stream.has_next():
        token = stream.next()
        if token.kind not in kinds or not isinstance(token.value, str) or token.value not in symbols:
            break
        symbol = symbols[token.value]
        right = _plan_level(stream, level)
        return _Stage(symbol, left, right, kind="operator", format=error_format)
    stream.rewind()
    return left


def _plan_prefix(stream: _TokenStream) -> _Stage | None:
    left = None
    while stream.has_next():
        token = stream.next()
        if token.kind != PREFIX or token.value not in _PREFIXES:
            break
        right = _plan_accessor(stream)
        return _Stage(_PREFIXES[token.value], left, right, kind="operator", format=_PREFIX_FORMAT)
    stream.rewind()
    return left


def _plan_accessor(stream: _TokenStream) -> _Stage | None:
    if not stream.has_next():
        return None
    token = stream.next()
    if token.kind != ACCESSOR:
        stream.rewind()
        return _plan_value(stream)
    right = None
    if stream.has_next():
        other = stream.next()
        stream.rewind()
        if other.kind == CLAUSE:
            right = _plan_level(stream, 0)
    return _Stage("ACCESS", None, right, value=token.value, kind="accessor",
                  format="Unable to access parameter field or method '%s': %s")


def _plan_value(stream: _TokenStream) -> _Stage | None:
    if not stream.has_next():
        return None
    token = stream.next()
    if token.kind == CLAUSE:
        inner = _plan_level(stream, 0)
        stream.next()
        return _Stage("NOOP", None, inner, kind="noop")
    if token.kind == CLAUSE_CLOSE:
        stream.rewind()
        return None
    if token.kind == VARIABLE:
        return _Stage("VALUE", value=token.value, kind="parameter")
    if token.kind in (NUMERIC, STRING, PATTERN, BOOLEAN, TIME):
        return _Stage("LITERAL", value=token.value, kind="literal")
    if token.kind == PREFIX:
        stream.rewind()
        return _plan_prefix(stream)
    if token.kind == ACCESSOR:  # planFunction -> planAccessor (reached from the top)
        stream.rewind()
        return _plan_accessor(stream)
    raise ExpressionError(f"Unable to plan token kind: '{_KIND_NAMES[token.kind]}', value: '{_show(token.value)}'")


def _reorder(root: _Stage | None) -> None:
    """reorderStages: mirror runs of equal precedence down the right side."""
    if root is None:
        return
    identical: list[_Stage] = []
    next_stage: _Stage | None = root
    precedence = _PRECEDENCE.get(root.symbol, 1)
    while next_stage is not None:
        current = next_stage
        next_stage = current.right
        if current.left is not None:
            _reorder(current.left)
        current_precedence = _PRECEDENCE.get(current.symbol, 1)
        if current_precedence == precedence:
            identical.append(current)
            continue
        if len(identical) > 1:
            _mirror(identical)
        identical = [current]
        precedence = current_precedence
    if len(identical) > 1:
        _mirror(identical)


def _mirror(stages: list[_Stage]) -> None:
    """mirrorStageSubtree, line for line."""
    for front in stages:
        front.right, front.left = front.left, front.right
    root, front = stages[0], stages[-1]
    carry = front.left
    front.left = root.right
    root.right = carry
    count = len(stages)
    for i in range((count - 2) // 2 + 1):
        front, inverse = stages[i + 1], stages[count - i - 1]
        front.right, inverse.right = inverse.right, front.right
    for i in range(count // 2):
        stages[i].swap_with(stages[count - i - 1])


# ---------------------------------------------------------------------------------------------
# evaluation (evaluationStage.go, EvaluableExpression.go)


_SHORT_CIRCUIT = object()


def _is_string(value: Any) -> bool:
    return isinstance(value, str)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_float(value: Any) -> bool:
    return isinstance(value, float) and not isinstance(value, bool)


def _is_array(value: Any) -> bool:
    return isinstance(value, list)


def _type_error(format_text: str, value: Any, symbol: str) -> ExpressionError:
    return ExpressionError(format_text % (go_sprint(value), _SYMBOL_TEXT.get(symbol, "")))


_LEFT_RIGHT_CHECKS: dict[str, tuple[Any, Any]] = {
    "REQ": (_is_string, lambda v: isinstance(v, (str, _Pattern))), "NREQ": (_is_string, lambda v: isinstance(v, (str, _Pattern))),
    "AND": (_is_bool, _is_bool), "OR": (_is_bool, _is_bool), "IN": (None, _is_array),
    "BITWISE_LSHIFT": (_is_float, _is_float), "BITWISE_RSHIFT": (_is_float, _is_float),
    "BITWISE_OR": (_is_float, _is_float), "BITWISE_AND": (_is_float, _is_float),
    "BITWISE_XOR": (_is_float, _is_float), "MINUS": (_is_float, _is_float), "MULTIPLY": (_is_float, _is_float),
    "DIVIDE": (_is_float, _is_float), "MODULUS": (_is_float, _is_float), "EXPONENT": (_is_float, _is_float),
    "NEGATE": (None, _is_float), "INVERT": (None, _is_bool), "BITWISE_NOT": (None, _is_float),
    "TERNARY_TRUE": (_is_bool, None),
}


def _comparator_check(left: Any, right: Any) -> bool:
    return (_is_float(left) and _is_float(right)) or (_is_string(left) and _is_string(right))


def _addition_check(left: Any, right: Any) -> bool:
    if _is_float(left) and _is_float(right):
        return True
    return _is_string(left) or _is_string(right)


_COMBINED_CHECKS = {"GT": _comparator_check, "LT": _comparator_check, "GTE": _comparator_check,
                    "LTE": _comparator_check, "PLUS": _addition_check}


@dataclass(frozen=True)
class _Pattern:
    """A regexp compiled at parse time (optimizeTokens: `=~ 'literal'`)."""

    pattern: Any


def _deep_equal(a: Any, b: Any) -> bool:
    """reflect.DeepEqual on decoded JSON values (types must match; NaN is not equal to itself)."""
    if _is_bool(a) or _is_bool(b):
        return _is_bool(a) and _is_bool(b) and a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_deep_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_deep_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _interface_equal(a: Any, b: Any) -> bool:
    """Go's == on two interface{} values: panics when both hold the same uncomparable type."""
    if isinstance(a, (dict, list)) and type(a) is type(b):
        kind = "map[string]interface {}" if isinstance(a, dict) else "[]interface {}"
        raise ExpressionPanic(f"runtime error: comparing uncomparable type {kind}")
    if _is_bool(a) or _is_bool(b):
        return _is_bool(a) and _is_bool(b) and a == b
    if type(a) is not type(b):
        return False
    return bool(a == b)


def _to_int64(value: float) -> int:
    """float64 -> int64 as amd64 converts it (out of range and NaN give the minimum int64)."""
    if math.isnan(value) or math.isinf(value) or not -(2 ** 63) <= value < 2 ** 63:
        return -(2 ** 63)
    return int(value)


def _to_uint64(value: float) -> int:
    """float64 -> uint64 as amd64 converts it."""
    if math.isnan(value):
        return 2 ** 63
    if value < 2 ** 63:
        return _to_int64(value) & (2 ** 64 - 1)
    if value < 2 ** 64:
        return int(value)
    return 2 ** 63


def _go_mod(a: float, b: float) -> float:
    if b == 0 or math.isinf(a) or math.isnan(a) or math.isnan(b):
        return math.nan
    if math.isinf(b):
        return a
    return math.fmod(a, b)


def _go_div(a: float, b: float) -> float:
    if b == 0:
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _go_pow(a: float, b: float) -> float:
    """math.Pow's special cases where Python's math.pow raises instead."""
    try:
        return math.pow(a, b)
    except ValueError:
        if a == 0 and b < 0:
            odd = float(b).is_integer() and int(b) % 2 == 1
            return math.copysign(math.inf, a) if odd else math.inf
        return math.nan  # a negative base and a non-integer exponent
    except OverflowError:
        odd = float(b).is_integer() and int(b) % 2 == 1
        return -math.inf if a < 0 and odd else math.inf


def _operate(symbol: str, left: Any, right: Any) -> Any:
    if symbol == "NOOP":
        return right
    if symbol == "PLUS":
        if _is_string(left) or _is_string(right):
            return go_sprint(left) + go_sprint(right)
        return left + right
    if symbol == "MINUS":
        return left - right
    if symbol == "MULTIPLY":
        return left * right
    if symbol == "DIVIDE":
        return _go_div(left, right)
    if symbol == "EXPONENT":
        return _go_pow(left, right)
    if symbol == "MODULUS":
        return _go_mod(left, right)
    if symbol in ("GT", "GTE", "LT", "LTE"):
        if _is_string(left) and _is_string(right):
            a, b = left.encode("utf-8"), right.encode("utf-8")
        else:
            a, b = left, right
        return {"GT": a > b, "GTE": a >= b, "LT": a < b, "LTE": a <= b}[symbol]
    if symbol == "EQ":
        return _deep_equal(left, right)
    if symbol == "NEQ":
        return not _deep_equal(left, right)
    if symbol == "AND":
        return bool(left and right)
    if symbol == "OR":
        return bool(left or right)
    if symbol == "NEGATE":
        return -right
    if symbol == "INVERT":
        return not right
    if symbol == "BITWISE_NOT":
        return float(~_to_int64(right))
    if symbol == "TERNARY_TRUE":
        return right if left else None
    if symbol == "TERNARY_FALSE":
        return left if left is not None else right
    if symbol == "COALESCE":
        return left if left is not None else right
    if symbol in ("REQ", "NREQ"):
        if isinstance(right, _Pattern):
            pattern = right.pattern
        else:
            try:
                pattern = compile_go_regexp(right)
            except GoRegexpUnsupported:
                raise
            except GoRegexpError as exc:
                raise ExpressionError(f"Unable to compile regexp pattern '{right}': {exc}") from None
        matched = pattern.search(left) is not None
        return matched if symbol == "REQ" else not matched
    if symbol == "BITWISE_OR":
        return float(_to_int64(left) | _to_int64(right))
    if symbol == "BITWISE_AND":
        return float(_to_int64(left) & _to_int64(right))
    if symbol == "BITWISE_XOR":
        return float(_to_int64(left) ^ _to_int64(right))
    if symbol == "BITWISE_LSHIFT":
        count = _to_uint64(right)
        return float((_to_uint64(left) << count) & (2 ** 64 - 1)) if count < 64 else 0.0
    if symbol == "BITWISE_RSHIFT":
        count = _to_uint64(right)
        return float(_to_uint64(left) >> count) if count < 64 else 0.0
    if symbol == "SEPARATE":  # separatorStage appends to ANY list on the left, one from the event too
        return [*left, right] if isinstance(left, list) else [left, right]
    if symbol == "IN":
        return any(_interface_equal(left, value) for value in right)
    raise ExpressionError(f"unsupported operator {symbol}")


def _evaluate(stage: _Stage, parameters: dict[str, Any]) -> Any:
    left: Any = None
    right: Any = None
    if stage.left is not None:
        left = _evaluate(stage.left, parameters)
    symbol = stage.symbol
    if symbol == "AND" and left is False:
        return False
    if symbol == "OR" and left is True:
        return True
    if symbol == "COALESCE" and left is not None:
        return left
    if (symbol == "TERNARY_TRUE" and left is False) or (symbol == "TERNARY_FALSE" and left is not None):
        right = _SHORT_CIRCUIT
    if right is not _SHORT_CIRCUIT and stage.right is not None:
        right = _evaluate(stage.right, parameters)
    if stage.kind == "literal":
        return stage.value
    if stage.kind == "parameter":
        if stage.value not in parameters:
            raise ExpressionError(f"No parameter '{stage.value}' found.")
        return parameters[stage.value]
    if stage.kind == "accessor":
        head = stage.value[0]
        if head not in parameters:
            raise ExpressionError(f"No parameter '{head}' found.")
        raise ExpressionError(f"Unable to access '{stage.value[1]}', '{head}' is not a struct")
    combined = _COMBINED_CHECKS.get(symbol)
    if combined is not None:
        if not combined(left, right):
            raise _type_error(stage.format, left, symbol)
    else:
        left_check, right_check = _LEFT_RIGHT_CHECKS.get(symbol, (None, None))
        if left_check is not None and not left_check(left):
            raise _type_error(stage.format, left, symbol)
        if right_check is not None and not right_check(right):
            raise _type_error(stage.format, right, symbol)
    return _operate(symbol, left, right)


class Expression:
    """A parsed govaluate expression; `evaluate(parameters)` per event."""

    def __init__(self, text: str) -> None:
        self.text = text
        tokens = _tokenize(text)
        _check_syntax(tokens)
        for i, token in enumerate(tokens):  # optimizeTokens: `=~ 'literal'` is compiled now
            if token.kind == COMPARATOR and token.value in ("=~", "!~") and i + 1 < len(tokens) \
                    and tokens[i + 1].kind == STRING:
                try:
                    tokens[i + 1] = _Token(PATTERN, _Pattern(compile_go_regexp(tokens[i + 1].value)))
                except GoRegexpUnsupported:
                    raise
                except GoRegexpError as exc:
                    raise ExpressionError(str(exc)) from None
        self.variables = [t.value for t in tokens if t.kind == VARIABLE]
        stream = _TokenStream(tokens)
        self.root = _plan_level(stream, 0) if stream.has_next() else None
        _reorder(self.root)

    def evaluate(self, parameters: dict[str, Any]) -> Any:
        if self.root is None:
            return None
        return _evaluate(self.root, parameters)
