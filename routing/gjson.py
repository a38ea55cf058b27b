"""GJSON paths evaluated the way Go's tidwall/gjson (used by Argo Events) evaluates them.

Argo Events reads every `path`, `dataKey` and `contextKey` with Go's gjson and then converts
the result with `Result.String()`, `.Bool()`, `.Float()` or `.Value()`. Those conversions have
their own rules (a float prints without exponent, `"t"` is a true bool, a string that is not a
number is the float 0, null prints as the empty string), so a filter that looks right can still
compare something unexpected. The path syntax is evaluated by `routing.gjsonport`, a port of the
gjson version argo-events v1.9.11 pins, and this module wraps its results with the Go
conversions, so the router sees exactly the values the sensor sees.

The one gjson feature not ported, the @pretty modifier, is refused with `UnsupportedPath`
instead of being evaluated differently.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from routing import gjsonport
from routing.gjsonport import format_float_f as go_format_float_f  # noqa: F401  (re-exported)
from routing.gostrconv import lenient_float

_PRETTY = re.compile(r"(?:^|[.|])@pretty(?:$|[.|:])")


class UnsupportedPath(ValueError):
    """A path uses Go gjson syntax this evaluator cannot reproduce faithfully."""


@dataclass(frozen=True)
class GjsonPath:
    """A checked path: compile once when the Sensor is loaded, evaluate per event."""

    text: str

    def get(self, document: Document) -> Result:
        try:
            return Result(gjsonport.get(document.text, self.text))
        except gjsonport.UnportedModifier as exc:
            raise UnsupportedPath(f"path {self.text!r}: {exc}") from None


def compile_path(text: str) -> GjsonPath:
    """Check a gjson path, refusing the @pretty modifier (evaluated differently here)."""
    unescaped = re.sub(r"\\.", "__", text)
    if _PRETTY.search(unescaped):
        raise UnsupportedPath(
            f"path {text!r} uses the gjson modifier @pretty, which this evaluator does not support "
            f"(supported: @this, @reverse, @ugly, @valid, @flatten, @join, @keys, @values, @tostr, @fromstr, "
            f"@group, @dig)"
        )
    return GjsonPath(text=text)


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
    """One JSON document (an event's data or context), kept as text: gjson scans the raw text."""

    __slots__ = ("_value", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._value: Any = _UNSET

    @property
    def value(self) -> Any:
        """The whole document as Go's `gjson.Parse(...).Value()` returns it (numbers are floats)."""
        if self._value is _UNSET:
            self._value = gjsonport.value_of(gjsonport.parse(self.text))
        return self._value

    def get(self, path: GjsonPath | str) -> Result:
        if isinstance(path, str):
            path = compile_path(path)
        return path.get(self)


_UNSET = object()


def valid_json(text: str) -> bool:
    """gjson.Valid."""
    return gjsonport.valid(text)


def go_value_of_json(text: str) -> Any:
    """Decode JSON as Go's gjson `Value()` does: every number a float64, the first duplicate key wins."""
    return gjsonport.value_of(gjsonport.parse(text))


class Result:
    """A gjson result with Go's conversion rules (`String`, `Bool`, `Float`, `Value`, `Raw`)."""

    __slots__ = ("_r",)

    def __init__(self, result: gjsonport.Result) -> None:
        self._r = result

    def exists(self) -> bool:
        return self._r.exists()

    @property
    def kind(self) -> str:
        """Go's `Result.Type.String()`: Null, False, Number, String, True or JSON."""
        return gjsonport.TYPE_NAMES[self._r.type]

    @property
    def raw(self) -> str:
        """The raw JSON text of the value ("" when missing)."""
        return self._r.raw

    def string(self) -> str:
        """Go `Result.String()`: what a string data filter matches its regexps against."""
        return gjsonport.result_string(self._r)

    def bool(self) -> bool:
        """Go `Result.Bool()`: true, a non-zero number, or a string that lower-cased ParseBool's as true."""
        r = self._r
        if r.type == gjsonport.TRUE:
            return True
        if r.type == gjsonport.STRING:
            return go_string_bool(r.str)
        if r.type == gjsonport.NUMBER:
            return r.num != 0
        return False

    def float(self) -> float:
        """Go `Result.Float()`: numbers, true=1, a numeric string, else 0."""
        r = self._r
        if r.type == gjsonport.TRUE:
            return 1.0
        if r.type == gjsonport.STRING:
            return lenient_float(r.str)
        if r.type == gjsonport.NUMBER:
            return r.num
        return 0.0

    def value(self) -> Any:
        """Go `Result.Value()`: float64 numbers, str, bool, None, dict, list."""
        return gjsonport.value_of(self._r)

    def __repr__(self) -> str:
        return f"Result({self.kind}, {self.raw!r})"


def go_string_bool(text: str) -> bool:
    """gjson: `strconv.ParseBool(strings.ToLower(str))` with the error ignored."""
    return text.lower() in ("1", "t", "true")


def go_number_string(raw: str) -> str:
    """Go gjson prints an integer literal verbatim and any other number with FormatFloat('f', -1)."""
    return gjsonport.result_string(gjsonport.Result(gjsonport.NUMBER, raw, num=lenient_float(raw)))


def go_parse_float(text: str) -> float:
    """strconv.ParseFloat with the error ignored (gjson does that): 0, or ±Inf out of range."""
    return lenient_float(text)
