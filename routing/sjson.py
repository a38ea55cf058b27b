"""Setting a value at a tidwall/sjson path, as Argo Events applies a trigger parameter's `dest`.

Path syntax (sjson): keys separated by `.`, `\\.` escapes a dot inside a key, a number indexes an
array (`spec.arguments.parameters.0.value`), `-1` appends to an array, a `:` prefix forces an
object key (`labels.:0`). Missing parents are created: objects for keys, arrays (padded with
null) for numeric parts. The document is a decoded JSON value (dicts and lists), changed in place.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

_SIMPLE_NUMBER = re.compile(r"-?[0-9]+")


class SjsonError(ValueError):
    """The dest path cannot be set on this document (e.g. a key into a string)."""


@lru_cache(maxsize=1024)
def split_path(path: str) -> tuple[tuple[str, bool], ...]:
    """Split an sjson path into (part, forced_key) tuples (cached: dests repeat per event)."""
    if not path:
        raise SjsonError("path cannot be empty")
    parts: list[tuple[str, bool]] = []
    current: list[str] = []
    i = 0
    while i < len(path):
        c = path[i]
        if c == "\\" and i + 1 < len(path):
            current.append(path[i + 1])
            i += 2
            continue
        if c == ".":
            parts.append(_part("".join(current)))
            current = []
            i += 1
            continue
        if c in "*?":
            raise SjsonError(f"path {path!r}: wildcard characters are not allowed in sjson paths")
        current.append(c)
        i += 1
    parts.append(_part("".join(current)))
    return tuple(parts)


def _part(text: str) -> tuple[str, bool]:
    if text.startswith(":"):
        return text[1:], True
    return text, False


def set_path(document: Any, path: str, value: Any) -> Any:
    """Set `value` at `path` inside `document`; returns the (possibly new) root."""
    parts = split_path(path)
    if document is None:
        document = _new_container(parts[0])
    _set(document, parts, value, path)
    return document


def _new_container(part: tuple[str, bool]) -> Any:
    key, forced = part
    return [] if (not forced and _SIMPLE_NUMBER.fullmatch(key)) else {}


def _set(node: Any, parts: tuple[tuple[str, bool], ...], value: Any, path: str) -> None:
    key, forced = parts[0]
    last = len(parts) == 1
    if isinstance(node, dict):
        if last:
            node[key] = value
            return
        child = node.get(key)
        if not isinstance(child, (dict, list)):
            child = _new_container(parts[1])
            node[key] = child
        _set(child, parts[1:], value, path)
        return
    if isinstance(node, list):
        if forced or not _SIMPLE_NUMBER.fullmatch(key):
            raise SjsonError(f"path {path!r}: {key!r} is not an array index")
        index = int(key)
        if index == -1:
            index = len(node)
        if index < 0:
            raise SjsonError(f"path {path!r}: negative array index {key}")
        while len(node) <= index:
            node.append(None)
        if last:
            node[index] = value
            return
        child = node[index]
        if not isinstance(child, (dict, list)):
            child = _new_container(parts[1])
            node[index] = child
        _set(child, parts[1:], value, path)
        return
    raise SjsonError(f"path {path!r}: cannot set {key!r} inside a {type(node).__name__}")
