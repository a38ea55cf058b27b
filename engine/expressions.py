"""Argo Workflows' two small languages: `{{tag}}` substitution and retry/when expressions.

Argo substitutes `{{inputs.parameters.x}}`, `{{workflow.parameters.x}}`, `{{item}}`,
`{{steps.X.outputs.parameters.Y}}`, `{{workflow.status}}`... in one pass over the template's
strings; substituted values are never scanned again (a parameter that holds `{{...}}` text stays
literal). `retryStrategy.expression` is an expr-lang expression over `lastRetry.{exitCode, status,
duration, message}`; `when` is a govaluate expression over already-substituted text. Only the
subset the rendered templates use is implemented; anything else raises `UnsupportedExpression`
naming the expression, so the engine never silently diverges from Argo.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

TAG = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")


class UnresolvedTag(ValueError):
    """A `{{tag}}` that names nothing in scope: Argo fails the node the same way."""


class UnsupportedExpression(ValueError):
    """An expression outside the subset the engine implements."""


def substitute(value: Any, scope: Mapping[str, str], *, strict_prefixes: tuple[str, ...] = ()) -> Any:
    """Replace every `{{tag}}` in strings inside `value` (dicts and lists walked) from `scope`.

    Tags not in scope are left as they are, unless they start with one of `strict_prefixes`
    (for example `inputs.`), which Argo would refuse to run with; then `UnresolvedTag` is raised.
    """
    if isinstance(value, str):
        def replace(match: re.Match[str]) -> str:
            tag = match.group(1)
            if tag in scope:
                return scope[tag]
            if tag.startswith("="):
                raise UnsupportedExpression(f"expression tag {{{{{tag}}}}}: `{{{{=...}}}}` templates are "
                                            "not supported by the local engine; use plain tags")
            if strict_prefixes and tag.startswith(strict_prefixes):
                raise UnresolvedTag(f"{{{{{tag}}}}}: nothing of that name is in scope here "
                                    f"(known: {', '.join(sorted(k for k in scope if k.startswith(strict_prefixes)))})")
            return match.group(0)
        return TAG.sub(replace, value)
    if isinstance(value, list):
        return [substitute(item, scope, strict_prefixes=strict_prefixes) for item in value]
    if isinstance(value, dict):
        return {key: substitute(item, scope, strict_prefixes=strict_prefixes) for key, item in value.items()}
    return value


def item_scope(item: Any) -> dict[str, str]:
    """Tags for one fan-out item: `{{item}}` and, for objects, `{{item.key}}`.

    As Argo v4.0.5 makes them (workflow/controller/operator.go processItem, Item.String in
    pkg/apis/workflow/v1alpha1/item.go): a string item is itself; a value inside an object item is
    its JSON encoding, with the surrounding quotes of a string removed and nothing unescaped, so
    a string holding JSON arrives with its quotes escaped (`{\\"a\\":1}`) and is no longer JSON.
    Pass structured values as objects, never as JSON text."""
    scope = {"item": item if isinstance(item, str) else _argo_whole(item)}
    if isinstance(item, dict):
        for key, value in item.items():
            scope[f"item.{key}"] = item_string(value)
    return scope


def item_string(value: Any) -> str:
    """Item.String of a value (v4.0.5 pkg/apis/workflow/v1alpha1/item.go): compact JSON, a string without
    its quotes, `<`, `>`, `&` as they are (jsonutil.Fix)."""
    if isinstance(value, str):
        return _argo_string(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _argo_string(value: str) -> str:
    """Item.String of a string: Go's json.Marshal without the quotes (`<`, `>`, `&` left as they are)."""
    encoded = json.dumps(value, ensure_ascii=False)[1:-1]
    return encoded.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")  # Go escapes these two


def _argo_whole(item: Any) -> str:
    """`{{item}}` of a non-string item (processItem): a number or bool as Item.String gives it; an object is
    Go's json.Marshal of the map of its values (top-level keys sorted, nested values as they came) and a
    list json.Marshal of its values, both with `<`, `>`, `&` (and U+2028, U+2029) escaped: no jsonutil.Fix."""
    if isinstance(item, dict):
        item = dict(sorted(item.items()))
    elif not isinstance(item, list):
        return json.dumps(item, ensure_ascii=False)
    encoded = json.dumps(item, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                          ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        encoded = encoded.replace(char, escaped)
    return encoded


# --- expressions -------------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<number>\d+(?:\.\d+)?)
  | (?P<op>==|!=|<=|>=|&&|\|\||[<>!()\[\],+\-])
  | (?P<name>[A-Za-z_][A-Za-z0-9_.\-/]*)
""", re.VERBOSE)

_KEYWORDS = {"and": "and", "or": "or", "not": "not", "in": "in", "true": "True", "false": "False",
             "nil": "None", "True": "True", "False": "False"}
def _sprig_trunc(length: int, text: str) -> str:
    """sprig trunc: the first `length` characters; a negative length keeps the last ones."""
    return text[:length] if length >= 0 else text[length:]


def _sprig_trim_all(cut: str, text: str) -> str:
    """sprig trimAll: Go strings.Trim(text, cut)."""
    return text.strip(cut)


_FUNCTIONS = {"asInt": int, "asFloat": float, "string": str, "int": int, "float": float, "len": len,
              "sprig.trunc": _sprig_trunc, "sprig.trimAll": _sprig_trim_all}


def _function_name(name: str) -> str:
    return "_f_" + name.replace(".", "_")


def evaluate(expression: str, variables: Mapping[str, Any], *, bare_words_are_strings: bool = False) -> Any:
    """Evaluate an Argo retry/when expression.

    `variables` maps dotted names (`lastRetry.exitCode`) to values. With `bare_words_are_strings`
    (govaluate `when` after substitution: `applied == applied`), unknown names are string literals.
    """
    python: list[str] = []
    position = 0
    while position < len(expression):
        match = _TOKEN.match(expression, position)
        if not match:
            raise UnsupportedExpression(f"expression {expression!r}: cannot read {expression[position:]!r}")
        position = match.end()
        kind, text = match.lastgroup, match.group(0)
        if kind == "space":
            continue
        if kind in ("string", "number"):
            python.append(text)
        elif kind == "op":
            python.append({"&&": " and ", "||": " or ", "!": " not "}.get(text, text))
        elif text in _KEYWORDS:
            python.append(f" {_KEYWORDS[text]} ")
        elif text in _FUNCTIONS:
            python.append(_function_name(text))
        elif text in variables:
            python.append(f"_v[{text!r}]")
        elif bare_words_are_strings:
            python.append(repr(text))
        else:
            raise UnsupportedExpression(f"expression {expression!r}: unknown name {text!r} "
                                        f"(known: {', '.join(sorted(variables))})")
    namespace: dict[str, Any] = {"_v": dict(variables), "__builtins__": {}}
    namespace.update({_function_name(name): function for name, function in _FUNCTIONS.items()})
    try:
        return eval("".join(python), namespace)  # tokens are whitelisted above
    except Exception as error:  # a type error in the expression is the expression's fault
        raise UnsupportedExpression(f"expression {expression!r} failed: {error}") from error


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(value: Any) -> float:
    """Go duration (`"5s"`, `"1m30s"`) or a bare number of seconds, as Argo accepts in backoff."""
    if value is None or value == "":
        return 0.0
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return float(text)
    parts = _DURATION.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise ValueError(f"duration {value!r}: expected a Go duration such as 10s or 1m30s")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)
