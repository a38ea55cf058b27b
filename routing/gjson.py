"""GJSON paths evaluated the way Go's tidwall/gjson (used by Argo Events) evaluates them.

Argo Events reads every `path`, `dataKey` and `contextKey` with Go's gjson and then converts
the result with `Result.String()`, `.Bool()`, `.Float()` or `.Value()`. Those conversions have
their own rules (a float prints without exponent, `"t"` is a true bool, a string that is not a
number is the float 0, null prints as the empty string), so a filter that looks right can still
compare something unexpected. This module uses `pygjson` (a binding of the Rust port, which
supports nested queries and `#(...)#`) for the path syntax and re-implements the Go conversions
on top, so the router sees exactly the values the sensor sees.

Go gjson modifiers that the Rust port lacks (`@keys`, `@values`, `@tostr`, `@fromstr`, `@group`,
`@dig`) and quoted member names in `{...}` multipaths (rendered differently by the Rust port) are
rejected with `UnsupportedPath` instead of silently evaluating differently.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pygjson

from routing.gostrconv import lenient_float

# Go gjson modifiers missing from gjson.rs (checked against pygjson 0.0.10).
_UNSUPPORTED_MODIFIERS = ("keys", "values", "tostr", "fromstr", "group", "dig")
_UNSUPPORTED_RE = re.compile(r"(?:^|[.|])@(" + "|".join(_UNSUPPORTED_MODIFIERS) + r")\b")
_INTEGER_RAW = re.compile(r"-?[0-9]+")
_QUOTED_MULTIPATH_NAME = re.compile(r'[{,]\s*"[^"]*"\s*:')


class UnsupportedPath(ValueError):
    """A path uses Go gjson syntax this evaluator cannot reproduce faithfully."""


@dataclass(frozen=True)
class GjsonPath:
    """A compiled path: compile once when the Sensor is loaded, evaluate per event."""

    text: str
    compiled: Any

    def get(self, document: Document) -> Result:
        return Result(document.root.get(self.compiled))


def compile_path(text: str) -> GjsonPath:
    """Compile a gjson path, refusing modifiers that would evaluate differently from Go."""
    unescaped = re.sub(r"\\.", "__", text)
    match = _UNSUPPORTED_RE.search(unescaped)
    if match:
        raise UnsupportedPath(
            f"path {text!r} uses the gjson modifier @{match.group(1)}, which this evaluator does not "
            f"support (supported: @this, @reverse, @ugly, @pretty, @valid, @flatten, @join)"
        )
    if _QUOTED_MULTIPATH_NAME.search(unescaped):
        raise UnsupportedPath(
            f'path {text!r} names a multipath member with a quoted key ({{"name":path}}), which gjson.rs renders '
            f"differently from Go gjson; use an unquoted path (its last key becomes the name)"
        )
    return GjsonPath(text=text, compiled=pygjson.compile(text))


def go_json(value: Any) -> str:
    """Serialise like Go's encoding/json: compact, UTF-8, with <, > and & escaped as Go does."""
    return go_json_text(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def go_json_text(text: str) -> str:
    """Apply Go's HTML escaping to compact JSON text (<, >, & and U+2028/9 only occur in strings)."""
    if "<" in text or ">" in text or "&" in text or "\u2028" in text or "\u2029" in text:
        text = (
            text.replace("<", "\\u003c")
            .replace(">", "\\u003e")
            .replace("&", "\\u0026")
            .replace("\u2028", "\\u2028")
            .replace("\u2029", "\\u2029")
        )
    return text


class Document:
    """One JSON document (an event's data or context), parsed once for many path look-ups."""

    __slots__ = ("_value", "root", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.root = pygjson.parse(text)
        self._value: Any = _UNSET

    @property
    def value(self) -> Any:
        """The whole document as Go's `gjson.Parse(...).Value()` returns it (numbers are floats)."""
        if self._value is _UNSET:
            self._value = go_value_of_json(self.text)
        return self._value

    def get(self, path: GjsonPath | str) -> Result:
        if isinstance(path, str):
            path = compile_path(path)
        return path.get(self)


_UNSET = object()


def valid_json(text: str) -> bool:
    return bool(pygjson.validate(text))


def go_value_of_json(text: str) -> Any:
    """Decode JSON as Go's gjson `Value()` does: every number becomes a float64."""
    return json.loads(text, parse_int=float, parse_constant=float)


class Result:
    """A gjson result with Go's conversion rules (`String`, `Bool`, `Float`, `Value`, `Raw`)."""

    __slots__ = ("_r", "_type")

    def __init__(self, result: Any) -> None:
        self._r = result
        self._type = result.type_ if result.exists() else _MISSING

    def exists(self) -> bool:
        return self._type is not _MISSING

    @property
    def kind(self) -> str:
        """Go's `Result.Type.String()`: Null, False, Number, String, True or JSON."""
        t = self._type
        if t is _MISSING or t is None:
            return "Null"
        if t is bool:
            return "True" if self._r.to_bool() else "False"
        if t is int or t is float:
            return "Number"
        if t is str:
            return "String"
        return "JSON"

    @property
    def raw(self) -> str:
        """The raw JSON text of the value ("" when missing)."""
        t = self._type
        if t is _MISSING:
            return ""
        if t is None:
            return "null"
        if t is str:
            return json.dumps(self._r.to_str(), ensure_ascii=False)
        return self._r.to_str()

    def string(self) -> str:
        """Go `Result.String()`: what a string data filter matches its regexps against."""
        t = self._type
        if t is _MISSING or t is None:
            return ""
        if t is bool:
            return "true" if self._r.to_bool() else "false"
        if t is int or t is float:
            return go_number_string(self._r.to_str())
        return self._r.to_str()

    def bool(self) -> bool:
        """Go `Result.Bool()`: true, a non-zero number, or a string that lower-cased ParseBool's as true."""
        t = self._type
        if t is bool:
            return bool(self._r.to_bool())
        if t is int or t is float:
            return self.float() != 0
        if t is str:
            return go_string_bool(self._r.to_str())
        return False

    def float(self) -> float:
        """Go `Result.Float()`: numbers, true=1, a numeric string, else 0."""
        t = self._type
        if t is bool:
            return 1.0 if self._r.to_bool() else 0.0
        if t is int or t is float:
            return float(self._r.to_str())
        if t is str:
            return go_parse_float(self._r.to_str())
        return 0.0

    def value(self) -> Any:
        """Go `Result.Value()`: float64 numbers, str, bool, None, dict, list."""
        t = self._type
        if t is _MISSING or t is None:
            return None
        if t is bool:
            return bool(self._r.to_bool())
        if t is int or t is float:
            return float(self._r.to_str())
        if t is str:
            return self._r.to_str()
        return go_value_of_json(self._r.to_str())

    def __repr__(self) -> str:
        return f"Result({self.kind}, {self.raw!r})"


_MISSING = object()


def go_string_bool(text: str) -> bool:
    """gjson: `strconv.ParseBool(strings.ToLower(str))` with the error ignored."""
    return text.lower() in ("1", "t", "true")


def go_number_string(raw: str) -> str:
    """Go gjson prints an integer literal verbatim and any other number with FormatFloat('f', -1)."""
    if _INTEGER_RAW.fullmatch(raw):
        return raw
    return go_format_float_f(float(raw))


def go_format_float_f(value: float) -> str:
    """strconv.FormatFloat(v, 'f', -1, 64): shortest round-trip digits, never an exponent."""
    if math.isnan(value):
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    text = format(Decimal(repr(value)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def go_parse_float(text: str) -> float:
    """strconv.ParseFloat with the error ignored (gjson does that): 0, or ±Inf out of range."""
    return lenient_float(text)
