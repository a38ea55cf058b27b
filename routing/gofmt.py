"""How Go prints values: fmt's `%v` and encoding/json, as templates and parameters show them.

A trigger parameter built with `dataTemplate: "{{ .Input.body.spec.podSets.0.count }}"` receives
Go's rendering of a float64 (`4`, `1.5`, `1e+06`), not Python's (`4.0`, `1000000.0`); a map
prints as `map[a:1 b:2]`. The router must print the same text the sensor would submit.
"""

from __future__ import annotations

import json
import math
from typing import Any


def go_float_g(value: float) -> str:
    """strconv.FormatFloat(v, 'g', -1, 64), which is what fmt's %v prints for a float64."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    mantissa, exp = _shortest_digits(value)
    sign = "-" if value < 0 else ""
    if exp < -4 or exp >= 6:  # shortest formatting uses precision 6 for this decision
        # %e form with the shortest mantissa, exponent at least two digits
        head, tail = mantissa[0], mantissa[1:]
        body = head + ("." + tail if tail else "")
        return f"{sign}{body}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"
    return sign + _fixed(mantissa, exp)


def go_float_json(value: float) -> str:
    """encoding/json's float64 rendering: fixed unless the exponent is < -6 or >= 21."""
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"json: unsupported value: {value}")
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    mantissa, exp = _shortest_digits(value)
    sign = "-" if value < 0 else ""
    if exp < -6 or exp >= 21:
        head, tail = mantissa[0], mantissa[1:]
        body = head + ("." + tail if tail else "")
        return f"{sign}{body}e{'+' if exp >= 0 else '-'}{abs(exp)}"
    return sign + _fixed(mantissa, exp)


def _shortest_digits(value: float) -> tuple[str, int]:
    """Shortest round-trip decimal digits and the exponent of the first digit."""
    text = repr(abs(value))
    if "e" in text or "E" in text:
        mant, _, e = text.lower().partition("e")
        exp_base = int(e)
    else:
        mant, exp_base = text, 0
    int_part, _, frac_part = mant.partition(".")
    digits = (int_part + frac_part).lstrip("0")
    leading_zeros = len(int_part + frac_part) - len((int_part + frac_part).lstrip("0"))
    exp = len(int_part) - 1 - leading_zeros + exp_base
    digits = digits.rstrip("0") or "0"
    return digits, exp


def _fixed(digits: str, exp: int) -> str:
    if exp < 0:
        return "0." + "0" * (-exp - 1) + digits
    if len(digits) <= exp + 1:
        return digits + "0" * (exp + 1 - len(digits))
    return digits[: exp + 1] + "." + digits[exp + 1:]


def go_sprint(value: Any) -> str:
    """fmt.Sprint of one value (%v)."""
    if value is None:
        return "<nil>"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float):
        return go_float_g(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return "[" + " ".join(str(b) for b in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{go_sprint(k)}:{go_sprint(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(go_sprint(v) for v in value) + "]"
    return str(value)


def go_json_marshal(value: Any, indent: str | None = None, escape_html: bool = True) -> str:
    """encoding/json.Marshal of decoded JSON values: map keys sorted, Go float format."""
    text = _encode(value, indent, "")
    if escape_html:
        text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _encode(value: Any, indent: str | None, prefix: str) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float):
        return go_float_json(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bytes):
        import base64

        return json.dumps(base64.b64encode(value).decode())
    if isinstance(value, dict):
        if not value:
            return "{}"
        keys = sorted(value)
        if indent is None:
            return "{" + ",".join(json.dumps(str(k), ensure_ascii=False) + ":" + _encode(value[k], None, "")
                                  for k in keys) + "}"
        inner = prefix + indent
        parts = [inner + json.dumps(str(k), ensure_ascii=False) + ": " + _encode(value[k], indent, inner) for k in keys]
        return "{\n" + ",\n".join(parts) + "\n" + prefix + "}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        if indent is None:
            return "[" + ",".join(_encode(v, None, "") for v in value) + "]"
        inner = prefix + indent
        return "[\n" + ",\n".join(inner + _encode(v, indent, inner) for v in value) + "\n" + prefix + "]"
    raise TypeError(f"json: unsupported type: {type(value).__name__}")
