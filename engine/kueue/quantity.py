"""Kubernetes resource quantities ("8", "500m", "64Gi", 2) as exact fractions.

Admission compares sums of requests against quotas; doing that in floats would let "0.1 + 0.2"
exceed "300m". Fractions keep the arithmetic exact, and `format_quantity` writes values back in
the canonical short forms Kueue shows in `resourceUsage` and `flavorsUsage`.
"""

from __future__ import annotations

import re
from fractions import Fraction

_SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1), "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
    "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30), "Ti": Fraction(2**40),
    "Pi": Fraction(2**50), "Ei": Fraction(2**60),
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$")


def parse_quantity(value: object) -> Fraction:
    """A quantity as an exact Fraction; raises ValueError naming the bad value."""
    if isinstance(value, bool):
        raise ValueError(f"quantity expected, found boolean {value!r}")  # noqa: TRY004 - callers catch ValueError
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if not match:
        raise ValueError(f"quantity expected (like 8, 500m, 64Gi), found {value!r}")
    number, exponent, suffix = match.groups()
    amount = Fraction(number)
    if exponent:
        return amount * Fraction(10) ** int(exponent[1:])
    return amount * _SUFFIXES[suffix or ""]


def format_quantity(value: Fraction, resource: str = "") -> str:
    """Canonical text: integers plain, sub-units in milli, memory in the largest exact binary unit."""
    if value.denominator == 1:
        number = value.numerator
        if resource == "memory" or resource.endswith("storage"):
            for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
                unit = _SUFFIXES[suffix].numerator
                if number and number % unit == 0:
                    return f"{number // unit}{suffix}"
        return str(number)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return f"{(value * 10**9).__ceil__()}n"
