"""Go's strconv.ParseFloat and strconv.Quote, which filters and their error messages rely on.

Python's float() is more lenient than Go's ParseFloat (" 4", "1_000", "infinity " pass in
Python, fail in Go) and has no range error ("1e400" is inf in Python, an error in Go), so a
number data filter value like " 4" would match in Python where the sensor logs an error.
"""

from __future__ import annotations

import math
import re

_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_HEX = re.compile(r"([+-]?)0[xX]((?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+))[pP]([+-]?[0-9]+)")
_SPECIAL = re.compile(r"([+-]?)(inf|infinity)|nan", re.IGNORECASE)


class GoNumberError(ValueError):
    """strconv.ParseFloat's error; `value` is what ParseFloat returns alongside it (0 or ±Inf)."""

    def __init__(self, message: str, value: float) -> None:
        super().__init__(message)
        self.value = value


def go_quote(text: str) -> str:
    """strconv.Quote for the text a filter holds (printable characters kept, others escaped)."""
    out = ['"']
    for char in text:
        if char == '"' or char == "\\":
            out.append("\\" + char)
        elif char.isprintable():
            out.append(char)
        elif char in "\a\b\f\n\r\t\v":
            out.append({"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
                        "\v": "\\v"}[char])
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append('"')
    return "".join(out)


def parse_float(text: str) -> float:
    """strconv.ParseFloat(text, 64); raises GoNumberError with Go's message."""
    special = _SPECIAL.fullmatch(text)
    if special:
        if text.lower() == "nan":
            return math.nan
        return -math.inf if special.group(1) == "-" else math.inf
    plain = text.replace("_", "")
    if plain != text and not _underscores_ok(text):
        raise GoNumberError(f"strconv.ParseFloat: parsing {go_quote(text)}: invalid syntax", 0.0)
    if _DECIMAL.fullmatch(plain):
        value = float(plain)
    else:
        hex_match = _HEX.fullmatch(plain)
        if not hex_match:
            raise GoNumberError(f"strconv.ParseFloat: parsing {go_quote(text)}: invalid syntax", 0.0)
        sign, mantissa, exponent = hex_match.groups()
        whole, _, fraction = mantissa.partition(".")
        digits = int((whole + fraction) or "0", 16)
        try:
            value = math.ldexp(float(digits), int(exponent) - 4 * len(fraction))
        except OverflowError:
            value = math.inf
        value = -value if sign == "-" else value
    if math.isinf(value):
        raise GoNumberError(f"strconv.ParseFloat: parsing {go_quote(text)}: value out of range", value)
    return value


def _underscores_ok(text: str) -> bool:
    """strconv's underscoreOK: an underscore only between digits, or after a base prefix."""
    body = text[1:] if text[:1] in "+-" else text
    saw, i, hex_digits = "^", 0, False
    if len(body) >= 2 and body[0] == "0" and body[1].lower() in "box":
        i, saw, hex_digits = 2, "0", body[1].lower() == "x"
    for char in body[i:]:
        if "0" <= char <= "9" or (hex_digits and "a" <= char.lower() <= "f"):
            saw = "0"
        elif char == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
    return saw != "_"


def lenient_float(text: str) -> float:
    """ParseFloat with the error ignored, as gjson's Result.Float() does: 0 or ±Inf on error."""
    try:
        return parse_float(text)
    except GoNumberError as exc:
        return exc.value
