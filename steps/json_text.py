"""JSON from untrusted input (step parameters, events, alerts), read so that bad input is rejected.

    load(where, text, hint="") -> value        # RejectedInput naming `where` on anything unusable
    check(where, value, hint="") -> value       # the same limits for an already-parsed object

WHY not plain `json.loads`: it raises RecursionError on JSON nested ~1,000 deep, ValueError on an
integer of more than 4,300 digits, and happily returns strings holding lone surrogates ("\\ud800"),
which later crash whoever writes them as UTF-8 (the outputs, the record, stderr). Each of these
ended a step as `failed` with a traceback. Here every one is `RejectedInput` with a one-line reason.

Limits: nesting at most MAX_DEPTH levels (Kubernetes objects and Alertmanager bodies use about 10),
text must be UTF-8 and every string valid Unicode, numbers finite and integers within 64 bits (what
Kubernetes and Go's encoding/json read; `NaN`, which Python's json accepts, is not JSON).
"""

from __future__ import annotations

import json
import math
from typing import Any

from steps.plan import RejectedInput

MAX_DEPTH = 64


def load(where: str, text: str | bytes, hint: str = "") -> Any:
    """Parse JSON text (or UTF-8 bytes) within the limits; RejectedInput otherwise."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as error:
            raise RejectedInput(where, "UTF-8 JSON text", f"bytes that are not UTF-8 (byte {error.start}: "
                                f"{bytes(text)[error.start:error.start + 1]!r})", hint) from None
    try:
        value = json.loads(text)
    except RecursionError:
        raise RejectedInput(where, f"JSON nested at most {MAX_DEPTH} levels deep", "deeper nesting", hint) from None
    except json.JSONDecodeError as error:
        raise RejectedInput(where, "JSON", f"invalid JSON at line {error.lineno} column {error.colno} ({error.msg})",
                            hint) from None
    except ValueError as error:  # e.g. an integer longer than Python's 4,300-digit limit
        raise RejectedInput(where, "JSON with ordinary numbers", f"unreadable JSON ({_first_line(error)})",
                            hint) from None
    return check(where, value, hint)


def check(where: str, value: Any, hint: str = "") -> Any:
    """`value` if it nests at most MAX_DEPTH levels and every string is valid Unicode; else RejectedInput."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_text(where, item, hint)
            continue
        if isinstance(item, bool) or item is None:
            continue
        if isinstance(item, int) and not -(2**63) <= item < 2**64:
            raise RejectedInput(where, "integers within 64 bits", f"an integer of {item.bit_length()} bits", hint)
        if isinstance(item, float) and not math.isfinite(item):
            raise RejectedInput(where, "finite numbers (JSON has no NaN or Infinity)", repr(item), hint)
        if not isinstance(item, (dict, list, tuple)):
            continue
        if depth > MAX_DEPTH:
            raise RejectedInput(where, f"JSON nested at most {MAX_DEPTH} levels deep", "deeper nesting", hint)
        if isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str):
                    _check_text(where, key, hint)
                stack.append((child, depth + 1))
        else:
            stack.extend((child, depth + 1) for child in item)
    return value


def _check_text(where: str, text: str, hint: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise RejectedInput(where, "valid Unicode text", f"a lone surrogate {text[error.start]!r} at character "
                            f"{error.start} of a string", hint) from None


def _first_line(error: Exception) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__
