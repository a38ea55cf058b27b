"""tidwall/gjson v1.19.0 (the version argo-events v1.9.11 pins), ported to Python function by function.

Argo Events reads every data filter `path`, `dataKey` and `contextKey`, and every expr field,
with gjson.GetBytes/Get; the port keeps gjson's own scanner over the raw JSON text (not a
decoded tree) because its results depend on it: the first of duplicate keys wins, objects and
arrays come back as the exact raw text, queries (`#(...)`, `#(...)#`) compare with gjson's
rules (a string `""`, `%` wildcards, numbers parsed leniently), `#` counts, `..` reads JSON
lines, `[a,b]`/`{a,b}` build new JSON, `!true` is a literal, `|` pipes, and the modifiers
@this, @ugly, @reverse, @flatten, @join, @valid, @keys, @values, @tostr, @fromstr, @group and
@dig behave as gjson's. Only @pretty (which needs tidwall/pretty's layout rules) is not ported.

Python strings index code points where Go indexes bytes; the scanner only compares ASCII
structure characters, and every non-ASCII code point sorts above them as its UTF-8 bytes do, so
the results are the same.
"""

from __future__ import annotations

import dataclasses
import functools
import json as _json
import math
import re
from dataclasses import dataclass
from decimal import Decimal

from routing.gostrconv import lenient_float

NULL, FALSE, NUMBER, STRING, TRUE, JSON = range(6)
TYPE_NAMES = ("Null", "False", "Number", "String", "True", "JSON")


class UnportedModifier(ValueError):
    """The path uses a gjson feature this port does not reproduce (@pretty)."""


@dataclass
class Result:
    """gjson.Result (Index and Indexes left out: nothing in the sensor reads them)."""

    type: int = NULL
    raw: str = ""
    str: str = ""
    num: float = 0.0

    def exists(self) -> bool:
        return self.type != NULL or len(self.raw) != 0

    def get(self, path: str) -> Result:
        return get(self.raw, path)

    def is_object(self) -> bool:
        return self.type == JSON and len(self.raw) > 0 and self.raw[0] == "{"

    def is_array(self) -> bool:
        return self.type == JSON and len(self.raw) > 0 and self.raw[0] == "["


@dataclass
class _Context:
    json: str
    value: Result
    pipe: str = ""
    piped: bool = False
    calcd: bool = False
    lines: bool = False


# ---------------------------------------------------------------------------------------------
# scanning primitives

_STRING_TAIL = re.compile(r'(?:[^"\\]|\\[\s\S])*"')


def _string_end(json: str, i: int) -> tuple[int, bool, bool]:
    """From just after an opening quote: (index after the closing quote, escaped?, closed?)."""
    quote = json.find('"', i)
    if quote >= 0 and json.find("\\", i, quote) < 0:  # the common case: no escapes
        return quote + 1, False, True
    match = _STRING_TAIL.match(json, i)
    if match is None:
        return len(json), "\\" in json[i:], False
    end = match.end()
    return end, True, True


def _parse_string(json: str, i: int) -> tuple[int, str, bool, bool]:
    """parseString: i is just after the opening quote."""
    start = i
    end, escaped, closed = _string_end(json, i)
    if not closed:
        return end, json[start - 1:], False, False
    return end, json[start - 1:end], escaped, True


def _parse_number(json: str, i: int) -> tuple[int, str]:
    start = i
    i += 1
    while i < len(json):
        c = json[i]
        if c <= " " or c in ",]}":
            return i, json[start:i]
        i += 1
    return i, json[start:]


def _parse_literal(json: str, i: int) -> tuple[int, str]:
    start = i
    i += 1
    while i < len(json):
        if not "a" <= json[i] <= "z":
            return i, json[start:i]
        i += 1
    return i, json[start:]


_SQUASH_SKIP = re.compile(r'(?:[^"{}\[\]()]+|"(?:[^"\\]|\\[\s\S])*")*')


def _parse_squash(json: str, i: int) -> tuple[int, str]:
    """parseSquash: json[i] opens a value ('[', '{' or '('); skip to its matching close. Brackets
    inside strings do not count; an unterminated string runs to the end."""
    start = i
    i += 1
    depth = 1
    n = len(json)
    while True:
        i = _SQUASH_SKIP.match(json, i).end()  # type: ignore[union-attr]
        if i >= n or json[i] == '"':
            return n, json[start:]
        depth += 1 if json[i] in "{[(" else -1
        i += 1
        if depth == 0:
            return i, json[start:i]


def _squash(json: str) -> str:
    """squash: the leading value ('[', '{', '(' or '"') of json."""
    if json[0] == '"':
        end, _, closed = _string_end(json, 1)
        return json[:end] if closed else json
    end, raw = _parse_squash(json, 0)
    return raw


def _tonum(json: str) -> tuple[str, float]:
    for i in range(1, len(json)):
        c = json[i]
        if c <= "-":
            if c <= " " or c == ",":
                return json[:i], _parse_float(json[:i])
        elif c in "]}":
            return json[:i], _parse_float(json[:i])
    return json, _parse_float(json)


def _tolit(json: str) -> str:
    for i in range(1, len(json)):
        if not "a" <= json[i] <= "z":
            return json[:i]
    return json


def _tostr(json: str) -> tuple[str, str]:
    end, escaped, closed = _string_end(json, 1)
    if closed:
        body = json[1:end - 1]
        return json[:end], unescape(body) if escaped else body
    if "\\" in json[1:]:
        return json, unescape(json[1:])
    return json, json[1:]


def _parse_float(text: str) -> float:
    """strconv.ParseFloat with the error ignored."""
    return lenient_float(text)


def unescape(json: str) -> str:
    """gjson's unescape: JSON escapes decoded; it stops at a control character or a bad escape."""
    out: list[str] = []
    i = 0
    n = len(json)
    while i < n:
        c = json[i]
        if c < " ":
            break
        if c != "\\":
            out.append(c)
            i += 1
            continue
        i += 1
        if i >= n:
            break
        e = json[i]
        if e in '\\/"':
            out.append(e)
        elif e in "bfnrt":
            out.append({"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}[e])
        elif e == "u":
            if i + 5 > n:
                break
            code = _hex4(json[i + 1:i + 5])
            i += 5
            if 0xD800 <= code < 0xE000 and json[i:i + 2] == "\\u" and len(json) - i >= 6:
                low = _hex4(json[i + 2:i + 6])
                if 0xD800 <= code < 0xDC00 and 0xDC00 <= low < 0xE000:
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                else:
                    code = 0xFFFD
                i += 6
            elif 0xD800 <= code < 0xE000:
                code = 0xFFFD
            out.append(chr(code))
            continue
        else:
            break
        i += 1
    return "".join(out)


def _hex4(text: str) -> int:
    try:
        return int(text[:4], 16) if re.fullmatch(r"[0-9A-Fa-f]{4}", text[:4]) else 0
    except ValueError:
        return 0


def _parse_uint(text: str) -> int | None:
    if not text or not all("0" <= c <= "9" for c in text):
        return None
    return int(text) & (2 ** 64 - 1)


# ---------------------------------------------------------------------------------------------
# Parse and Result conversions


def parse(json: str) -> Result:
    for i, c in enumerate(json):
        if c in "{[":
            return Result(JSON, json[i:])
        if c <= " ":
            continue
        if c in "+-0123456789iIN" or (c == "n" and i + 1 < len(json) and json[i + 1] != "u"):
            raw, num = _tonum(json[i:])
            return Result(NUMBER, raw, num=num)
        if c == "n":
            return Result(NULL, _tolit(json[i:]))
        if c == "t":
            return Result(TRUE, _tolit(json[i:]))
        if c == "f":
            return Result(FALSE, _tolit(json[i:]))
        if c == '"':
            raw, text = _tostr(json[i:])
            return Result(STRING, raw, text)
        return Result()
    return Result()


def result_string(r: Result) -> str:
    """Result.String()."""
    if r.type == FALSE:
        return "false"
    if r.type == TRUE:
        return "true"
    if r.type == STRING:
        return r.str
    if r.type == JSON:
        return r.raw
    if r.type == NUMBER:
        raw = r.raw
        if not raw:
            return format_float_f(r.num)
        digits = raw[1:] if raw[0] == "-" else raw
        if any(not "0" <= c <= "9" for c in digits):
            return format_float_f(r.num)
        return raw
    return ""


def format_float_f(value: float) -> str:
    """strconv.FormatFloat(v, 'f', -1, 64): shortest round-trip digits, never an exponent."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = format(Decimal(repr(value)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def for_each(r: Result) -> list[tuple[Result, Result]]:
    """Result.ForEach, as a list of (key, value)."""
    out: list[tuple[Result, Result]] = []
    if not r.exists():
        return out
    if r.type != JSON:
        return [(Result(), r)]
    json = r.raw
    n = len(json)
    i = 0
    obj = False
    while i < n:
        if json[i] == "{":
            obj = True
            i += 1
            break
        if json[i] == "[":
            i += 1
            break
        if json[i] > " ":
            return out
        i += 1
    index = -1
    while i < n:
        if obj:
            if json[i] != '"':
                i += 1
                continue
            i, raw, escaped, ok = _parse_string(json, i + 1)
            if not ok:
                return out
            key = Result(STRING, raw, unescape(raw[1:-1]) if escaped else raw[1:-1])
        else:
            index += 1
            key = Result(NUMBER, num=float(index))
        while i < n and (json[i] <= " " or json[i] in ",:"):
            i += 1
        i, value, ok = _parse_any(json, i, True)
        if not ok:
            return out
        out.append((key, value))
        i += 1
    return out


def _array_or_map(r: Result, valueize: bool) -> object:
    """arrayOrMap(0, valueize=True) as Value() uses it: the first of duplicate keys wins."""
    json = r.raw
    i = 0
    kind = ""
    while i < len(json):
        if json[i] in "{[":
            kind = json[i]
            i += 1
            break
        if json[i] > " ":
            return None
        i += 1
    if not kind:
        return None
    items: list[object] = []
    mapping: dict[str, object] = {}
    count = 0
    key: Result | None = None
    while i < len(json):
        c = json[i]
        if c <= " ":
            i += 1
            continue
        if c in "]}":
            break
        if "0" <= c <= "9" or c == "-":
            raw, num = _tonum(json[i:])
            value = Result(NUMBER, raw, num=num)
        elif c in "{[":
            value = Result(JSON, _squash(json[i:]))
        elif c == "n":
            value = Result(NULL, _tolit(json[i:]))
        elif c == "t":
            value = Result(TRUE, _tolit(json[i:]))
        elif c == "f":
            value = Result(FALSE, _tolit(json[i:]))
        elif c == '"':
            raw, text = _tostr(json[i:])
            value = Result(STRING, raw, text)
        else:
            i += 1
            continue
        i += len(value.raw)
        if kind == "{":
            if count % 2 == 0:
                key = value
            elif key is not None and key.str not in mapping:
                mapping[key.str] = value_of(value)
            count += 1
        else:
            items.append(value_of(value))
    return mapping if kind == "{" else items


def value_of(r: Result) -> object:
    """Result.Value(): float64 numbers, str, bool, None, dict, list."""
    if r.type == STRING:
        return r.str
    if r.type == FALSE:
        return False
    if r.type == TRUE:
        return True
    if r.type == NUMBER:
        return r.num
    if r.type == JSON:
        fast = _decoded(r.raw)
        return fast if fast is not _NOT_DECODED else _array_or_map(r, True)
    return None


_NOT_DECODED = object()
_LONE_SURROGATE = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])|(?<![89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F]")


def _first_key_wins(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out


def _decoded(raw: str) -> object:
    """Value() through Python's decoder where that gives the same: valid JSON, numbers as floats, the
    first of duplicate keys, and no lone surrogate escapes (gjson turns those into U+FFFD)."""
    if "\\u" in raw and _LONE_SURROGATE.search(raw):
        return _NOT_DECODED
    try:
        return _json.loads(raw, parse_int=float, parse_float=float, parse_constant=_refuse,
                           object_pairs_hook=_first_key_wins)
    except (ValueError, RecursionError):
        return _NOT_DECODED


# ---------------------------------------------------------------------------------------------
# paths


@dataclass
class _ArrayPath:
    part: str = ""
    path: str = ""
    pipe: str = ""
    piped: bool = False
    more: bool = False
    alogok: bool = False
    arrch: bool = False
    alogkey: str = ""
    query_on: bool = False
    query_all: bool = False
    query_path: str = ""
    query_op: str = ""
    query_value: str = ""


def _parse_array_path(path: str) -> _ArrayPath:
    """parseArrayPath; parsed once per path, copied per use (the array scanner mutates it)."""
    return dataclasses.replace(_parse_array_path_cached(path))


@functools.lru_cache(maxsize=4096)
def _parse_array_path_cached(path: str) -> _ArrayPath:
    r = _ArrayPath()
    i = 0
    while i < len(path):
        c = path[i]
        if c == "|":
            r.part, r.pipe, r.piped = path[:i], path[i + 1:], True
            return r
        if c == ".":
            r.part = path[:i]
            if not r.arrch and i < len(path) - 1 and _is_dot_piper_char(path[i + 1:]):
                r.pipe, r.piped = path[i + 1:], True
            else:
                r.path, r.more = path[i + 1:], True
            return r
        if c == "#":
            r.arrch = True
            if i == 0 and len(path) > 1:
                if path[1] == ".":
                    r.alogok, r.alogkey, r.path = True, path[2:], path[:1]
                elif path[1] in "[(":
                    r.query_on = True
                    qpath, op, value, _, fi, vesc, ok = _parse_query(path[i:])
                    if not ok:
                        break
                    if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
                        value = value[1:-1]
                        if vesc:
                            value = unescape(value)
                    r.query_path, r.query_op, r.query_value = qpath, op, value
                    i = fi - 1
                    if i + 1 < len(path) and path[i + 1] == "#":
                        r.query_all = True
        i += 1
    r.part = path
    r.path = ""
    return r


def _parse_query(query: str) -> tuple[str, str, str, str, int, bool, bool]:
    if len(query) < 2 or query[0] != "#" or query[1] not in "([":
        return "", "", "", "", 0, False, False
    i = 2
    j = 0
    depth = 1
    vesc = False
    while i < len(query):
        c = query[i]
        if depth == 1 and j == 0 and c in "!=<>%":
            j = i
            i += 1
            continue
        if c == "\\":
            i += 1
        elif c in "[(":
            depth += 1
        elif c in "])":
            depth -= 1
            if depth == 0:
                break
        elif c == '"':
            i += 1
            while i < len(query):
                if query[i] == "\\":
                    vesc = True
                    i += 1
                elif query[i] == '"':
                    break
                i += 1
        i += 1
    if depth > 0:
        return "", "", "", "", i, False, False
    if j > 0:
        path = _trim(query[2:j])
        value = _trim(query[j:i])
        remain = query[i + 1:]
        size = 0
        if len(value) == 1:
            size = 1
        elif value[:2] in ("!=", "!%", "<=", ">="):
            size = 2
        elif value[:2] == "==":
            value = value[1:]
            size = 1
        elif value[0] in "<>=%":
            size = 1
        op = value[:size]
        value = _trim(value[size:])
    else:
        path, op, value = _trim(query[2:i]), "", ""
        remain = query[i + 1:]
    return path, op, value, remain, i + 1, vesc, True


def _trim(text: str) -> str:
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


_MODIFIERS = ("pretty", "ugly", "reverse", "this", "flatten", "join", "valid", "keys", "values", "tostr", "fromstr",
              "group", "dig")


def _is_dot_piper_char(text: str) -> bool:
    c = text[0]
    if c == "@":
        i = 1
        while i < len(text) and text[i] not in ".|:":
            i += 1
        return text[1:i] in _MODIFIERS
    return c in "[{"


@dataclass
class _ObjectPath:
    part: str = ""
    path: str = ""
    pipe: str = ""
    piped: bool = False
    wild: bool = False
    more: bool = False


@functools.lru_cache(maxsize=4096)
def _parse_object_path(path: str) -> _ObjectPath:
    """parseObjectPath (cached: the same paths are read for every event; the result is not mutated)."""
    r = _ObjectPath()
    i = 0
    while i < len(path):
        c = path[i]
        if c == "|":
            r.part, r.pipe, r.piped = path[:i], path[i + 1:], True
            return r
        if c == ".":
            r.part = path[:i]
            if i < len(path) - 1 and _is_dot_piper_char(path[i + 1:]):
                r.pipe, r.piped = path[i + 1:], True
            else:
                r.path, r.more = path[i + 1:], True
            return r
        if c in "*?":
            r.wild = True
            i += 1
            continue
        if c == "\\":
            epart = list(path[:i])
            i += 1
            if i < len(path):
                epart.append(path[i])
                i += 1
                while i < len(path):
                    c = path[i]
                    if c == "\\":
                        i += 1
                        if i < len(path):
                            epart.append(path[i])
                        i += 1
                        continue
                    if c == ".":
                        r.part = "".join(epart)
                        if i < len(path) - 1 and _is_dot_piper_char(path[i + 1:]):
                            r.pipe, r.piped = path[i + 1:], True
                        else:
                            r.path, r.more = path[i + 1:], True
                        return r
                    if c == "|":
                        r.part, r.pipe, r.piped = "".join(epart), path[i + 1:], True
                        return r
                    if c in "*?":
                        r.wild = True
                    epart.append(c)
                    i += 1
            r.part = "".join(epart)
            return r
        i += 1
    r.part = path
    return r


# ---------------------------------------------------------------------------------------------
# the scanner: parseObject, parseArray


_KEY_OR_END = re.compile(r'["}]')
_SEPARATORS = re.compile(r'[^"{\[ntf+\-0-9iIN]*')


def _parse_object(c: _Context, i: int, path: str) -> tuple[int, bool]:
    rp = _parse_object_path(path)
    if not rp.more and rp.piped:
        c.pipe, c.piped = rp.pipe, True
    json = c.json
    n = len(json)
    while i < n:
        key = ""
        kesc = False
        ok = False
        found = _KEY_OR_END.search(json, i)  # the next key's quote, or the object's end
        if found is None:
            i = n
        elif found.group() == "}":
            return found.end(), False
        else:
            start = found.end()
            end, kesc, ok = _string_end(json, start)
            key = json[start:end - 1] if ok else json[start:]
            i = end
        if not ok:
            return i, False
        key_text = unescape(key) if kesc else key
        pmatch = match_limit(key_text, rp.part) if rp.wild else rp.part == key_text
        hit = pmatch and not rp.more
        while i < n:
            i = _SEPARATORS.match(json, i).end()  # type: ignore[union-attr]  # ':' and blanks before the value
            if i >= n:
                break
            ch = json[i]
            num = False
            if ch == '"':
                i, val, vesc, ok = _parse_string(json, i + 1)
                if not ok:
                    return i, False
                if hit:
                    c.value = Result(STRING, val, unescape(val[1:-1]) if vesc else val[1:-1])
                    return i, True
            elif ch == "{":
                if pmatch and not hit:
                    i, hit = _parse_object(c, i + 1, rp.path)
                    if hit:
                        return i, True
                else:
                    i, val = _parse_squash(json, i)
                    if hit:
                        c.value = Result(JSON, val)
                        return i, True
            elif ch == "[":
                if pmatch and not hit:
                    i, hit = _parse_array(c, i + 1, rp.path)
                    if hit:
                        return i, True
                else:
                    i, val = _parse_squash(json, i)
                    if hit:
                        c.value = Result(JSON, val)
                        return i, True
            elif ch == "n" and i + 1 < n and json[i + 1] != "u":
                num = True
            elif ch in "ntf":
                i, val = _parse_literal(json, i)
                if hit:
                    c.value = Result(TRUE if ch == "t" else FALSE if ch == "f" else NULL, val)
                    return i, True
            elif ch in "+-0123456789iIN":
                num = True
            else:
                i += 1
                continue
            if num:
                i, val = _parse_number(json, i)
                if hit:
                    c.value = Result(NUMBER, val, num=_parse_float(val))
                    return i, True
            break
    return i, False


def _query_matches(rp: _ArrayPath, value: Result) -> bool:
    rpv = rp.query_value
    if rpv and rpv[0] == "~":
        rpv = rpv[1:]
        ish: bool | None = None
        if rpv == "*":
            ish = value.exists()
        elif rpv == "null":
            ish = value.type == NULL
        elif rpv == "true":
            ish = _trueish(value)
        elif rpv == "false":
            ish = _falseish(value)
        if ish is not None:
            rpv = "true"
            value = Result(TRUE if ish else FALSE)
        else:
            rpv = ""
            value = Result()
    if not value.exists():
        return False
    op = rp.query_op
    if op == "":
        return True
    if value.type == STRING:
        s = value.str
        if op == "=":
            return s == rpv
        if op == "!=":
            return s != rpv
        if op == "<":
            return s < rpv
        if op == "<=":
            return s <= rpv
        if op == ">":
            return s > rpv
        if op == ">=":
            return s >= rpv
        if op == "%":
            return match_limit(s, rpv)
        if op == "!%":
            return not match_limit(s, rpv)
    elif value.type == NUMBER:
        rpvn = _parse_float(rpv)
        num = value.num
        return {"=": num == rpvn, "!=": num != rpvn, "<": num < rpvn, "<=": num <= rpvn, ">": num > rpvn,
                ">=": num >= rpvn}.get(op, False)
    elif value.type == TRUE:
        return {"=": rpv == "true", "!=": rpv != "true", ">": rpv == "false", ">=": True}.get(op, False)
    elif value.type == FALSE:
        return {"=": rpv == "false", "!=": rpv != "false", "<": rpv == "true", "<=": True}.get(op, False)
    return False


def _go_parse_bool_lower(text: str) -> bool | None:
    lowered = text.lower()
    if lowered in ("1", "t", "true"):
        return True
    if lowered in ("0", "f", "false"):
        return False
    return None


def _falseish(r: Result) -> bool:
    if r.type in (NULL, FALSE):
        return True
    if r.type == STRING:
        parsed = _go_parse_bool_lower(r.str)
        return parsed is False
    if r.type == NUMBER:
        return r.num == 0
    return False


def _trueish(r: Result) -> bool:
    if r.type == TRUE:
        return True
    if r.type == STRING:
        return _go_parse_bool_lower(r.str) is True
    if r.type == NUMBER:
        return r.num != 0
    return False


def _parse_array(c: _Context, i: int, path: str) -> tuple[int, bool]:
    rp = _parse_array_path(path)
    partidx = -1
    if not rp.arrch:
        parsed = _parse_uint(rp.part)
        partidx = -1 if parsed is None else parsed
    if not rp.more and rp.piped:
        c.pipe, c.piped = rp.pipe, True
    json = c.json
    n = len(json)
    h = 0
    alog: list[int] = []
    multires: list[str] = []
    state = {"hit": False}

    def proc_query(qval: Result) -> bool:
        if rp.query_all and not multires:
            multires.append("[")
        if qval.type == JSON:
            res = qval.get(rp.query_path)
        else:
            if rp.query_path != "":
                return False
            res = qval
        if _query_matches(rp, res):
            if rp.more:
                left, right, ok = _split_possible_pipe(rp.path)
                if ok:
                    rp.path = left
                    c.pipe, c.piped = right, True
                res = qval.get(rp.path)
            else:
                res = qval
            if rp.query_all:
                raw = res.raw if res.raw else result_string(res)
                if raw != "":
                    if len(multires) > 1:
                        multires.append(",")
                    multires.append(raw)
            else:
                c.value = res
                return True
        return False

    pmatch = False
    while i < n + 1:
        if not rp.arrch:
            pmatch = partidx == h
            state["hit"] = pmatch and not rp.more
        h += 1
        if rp.alogok:
            alog.append(i)
        while True:
            if i > n:
                break
            ch = "]" if i == n else json[i]
            num = False
            hit = state["hit"]
            if ch == '"':
                i, val, vesc, ok = _parse_string(json, i + 1)
                if not ok:
                    return i, False
                if rp.query_on:
                    qval = Result(STRING, val, unescape(val[1:-1]) if vesc else val[1:-1])
                    if proc_query(qval):
                        return i, True
                elif hit:
                    if rp.alogok:
                        break
                    c.value = Result(STRING, val, unescape(val[1:-1]) if vesc else val[1:-1])
                    return i, True
            elif ch in "{[":
                if pmatch and not hit:
                    if ch == "{":
                        i, hit = _parse_object(c, i + 1, rp.path)
                    else:
                        i, hit = _parse_array(c, i + 1, rp.path)
                    state["hit"] = hit
                    if hit:
                        if rp.alogok:
                            break
                        return i, True
                else:
                    i, val = _parse_squash(json, i)
                    if rp.query_on:
                        if proc_query(Result(JSON, val)):
                            return i, True
                    elif hit:
                        if rp.alogok:
                            break
                        c.value = Result(JSON, val)
                        return i, True
            elif ch == "n" and i + 1 < n and json[i + 1] != "u":
                num = True
            elif ch in "ntf":
                i, val = _parse_literal(json, i)
                kind = TRUE if ch == "t" else FALSE if ch == "f" else NULL
                if rp.query_on:
                    if proc_query(Result(kind, val)):
                        return i, True
                elif hit:
                    if rp.alogok:
                        break
                    c.value = Result(kind, val)
                    return i, True
            elif ch in "+-0123456789iIN":
                num = True
            elif ch == "]":
                if rp.arrch and rp.part == "#":
                    if rp.alogok:
                        left, right, ok = _split_possible_pipe(rp.alogkey)
                        if ok:
                            rp.alogkey = left
                            c.pipe, c.piped = right, True
                        parts: list[str] = []
                        for idx in alog:
                            while idx < n and json[idx] in " \t\r\n":
                                idx += 1
                            if idx < n and json[idx] != "]":
                                _, res, ok = _parse_any(json, idx, True)
                                if ok:
                                    res = res.get(rp.alogkey)
                                    if res.exists():
                                        parts.append(res.raw if res.raw else result_string(res))
                        c.value = Result(JSON, "[" + ",".join(parts) + "]")
                        return i + 1, True
                    if rp.alogok:
                        break
                    c.value = Result(NUMBER, str(h - 1), num=float(h - 1))
                    c.calcd = True
                    return i + 1, True
                if not c.value.exists():
                    if multires:
                        c.value = Result(JSON, "".join(multires) + "]")
                    elif rp.query_all:
                        c.value = Result(JSON, "[]")
                return i + 1, False
            else:
                i += 1
                continue
            if num:
                i, val = _parse_number(json, i)
                if rp.query_on:
                    if proc_query(Result(NUMBER, val, num=_parse_float(val))):
                        return i, True
                elif hit:
                    if rp.alogok:
                        break
                    c.value = Result(NUMBER, val, num=_parse_float(val))
                    return i, True
            break
    return i, False


def _split_possible_pipe(path: str) -> tuple[str, str, bool]:
    if "|" not in path:
        return "", "", False
    if path and path[0] == "{":
        squashed = _squash(path[1:])
        if len(squashed) < len(path) - 1:
            squashed = path[:len(squashed) + 1]
            remain = path[len(squashed):]
            if remain[0] == "|":
                return squashed, remain[1:], True
        return "", "", False
    i = 0
    while i < len(path):
        ch = path[i]
        if ch == "\\":
            i += 1
        elif ch == ".":
            if i == len(path) - 1:
                return "", "", False
            if path[i + 1] == "#":
                i += 2
                if i == len(path):
                    return "", "", False
                if path[i] in "[(":
                    start, end = ("[", "]") if path[i] == "[" else ("(", ")")
                    i += 1
                    depth = 1
                    while i < len(path):
                        if path[i] == "\\":
                            i += 1
                        elif path[i] == start:
                            depth += 1
                        elif path[i] == end:
                            depth -= 1
                            if depth == 0:
                                break
                        elif path[i] == '"':
                            i += 1
                            while i < len(path):
                                if path[i] == "\\":
                                    i += 1
                                elif path[i] == '"':
                                    break
                                i += 1
                        i += 1
        elif ch == "|":
            return path[:i], path[i + 1:], True
        i += 1
    return "", "", False


def _parse_any(json: str, i: int, hit: bool) -> tuple[int, Result, bool]:
    n = len(json)
    while i < n:
        ch = json[i]
        if ch in "{[":
            i, val = _parse_squash(json, i)
            return i, Result(JSON, val) if hit else Result(), True
        if ch <= " ":
            i += 1
            continue
        if ch == '"':
            i, val, vesc, ok = _parse_string(json, i + 1)
            if not ok:
                return i, Result(), False
            return i, Result(STRING, val, unescape(val[1:-1]) if vesc else val[1:-1]), True
        if ch == "n" and i + 1 < n and json[i + 1] != "u":
            i, val = _parse_number(json, i)
            return i, Result(NUMBER, val, num=_parse_float(val)), True
        if ch in "ntf":
            i, val = _parse_literal(json, i)
            if hit:
                return i, Result(TRUE if ch == "t" else FALSE if ch == "f" else NULL, val), True
            continue
        if ch in "+-0123456789iIN":
            i, val = _parse_number(json, i)
            return i, Result(NUMBER, val, num=_parse_float(val)), True
        i += 1
    return i, Result(), False


# ---------------------------------------------------------------------------------------------
# Get


@functools.lru_cache(maxsize=4096)
def _parse_sub_selectors(path: str) -> tuple[tuple[tuple[str, str], ...], str, bool]:
    """parseSubSelectors (cached: a pure function of the path)."""
    sels, rest, ok = _parse_sub_selectors_uncached(path)
    return tuple(sels), rest, ok


def _parse_sub_selectors_uncached(path: str) -> tuple[list[tuple[str, str]], str, bool]:
    sels: list[tuple[str, str]] = []
    modifier = 0
    depth = 1
    colon = 0
    start = 1
    i = 1

    def push() -> None:
        nonlocal colon, modifier, start
        if colon == 0:
            sels.append(("", path[start:i]))
        else:
            sels.append((path[start:colon], path[colon + 1:i]))
        colon = 0
        modifier = 0
        start = i + 1

    while i < len(path):
        ch = path[i]
        if ch == "\\":
            i += 1
        elif ch == "@":
            if modifier == 0 and i > 0 and path[i - 1] in ".|":
                modifier = i
        elif ch == ":":
            if modifier == 0 and colon == 0 and depth == 1:
                colon = i
        elif ch == ",":
            if depth == 1:
                push()
        elif ch == '"':
            i += 1
            while i < len(path):
                if path[i] == "\\":
                    i += 1
                elif path[i] == '"':
                    break
                i += 1
        elif ch in "[({":
            depth += 1
        elif ch in "])}":
            depth -= 1
            if depth == 0:
                push()
                return sels, path[i + 1:], True
        i += 1
    return sels, "", False


def _name_of_last(path: str) -> str:
    for i in range(len(path) - 1, -1, -1):
        if path[i] in "|.":
            if i > 0 and path[i - 1] == "\\":
                continue
            return path[i + 1:]
    return path


def _is_simple_name(component: str) -> bool:
    return not any(ch < " " or ch in "[]{}()#|!" for ch in component)


def append_json_string(text: str) -> str:
    """AppendJSONString (HTML characters escaped, U+2028/9 escaped)."""
    out = ['"']
    for ch in text:
        if ch < " ":
            out.append({"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch, f"\\u{ord(ch):04x}"))
        elif ch in "<>&":
            out.append(f"\\u{ord(ch):04x}")
        elif ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch in "\u2028\u2029":
            out.append(f"\\u{ord(ch):04x}")
        elif 0xD800 <= ord(ch) < 0xE000:
            out.append("\\ufffd")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def get(json: str, path: str) -> Result:
    """gjson.Get."""
    if len(path) > 1:
        if path[0] in "@!":
            if path[0] == "@":
                npath, rjson, ok = _exec_modifier(json, path)
            else:
                npath, rjson, ok = _exec_static(path)
            if ok:
                if npath and npath[0] in "|.":
                    return get(rjson, npath[1:])
                return parse(rjson)
        if path[0] in "[{":
            kind = path[0]
            subs, path, ok = _parse_sub_selectors(path)
            rest = path
            if ok and (not rest or rest[0] in "|."):
                parts: list[str] = []
                for name, sub_path in subs:
                    res = get(json, sub_path)
                    if not res.exists():
                        continue
                    member = ""
                    if kind == "{":
                        if name:
                            member = name if name[0] == '"' and valid(name) else append_json_string(name)
                        else:
                            last = _name_of_last(sub_path)
                            member = append_json_string(last if _is_simple_name(last) else "_")
                        member += ":"
                    raw = res.raw
                    if not raw:
                        raw = result_string(res) or "null"
                    parts.append(member + raw)
                result = Result(JSON, kind + ",".join(parts) + ("]" if kind == "[" else "}"))
                if rest:
                    result = result.get(rest[1:])
                return result
    c = _Context(json, Result())
    if len(path) >= 2 and path[0] == "." and path[1] == ".":
        c.lines = True
        _parse_array(c, 0, path[2:])
    else:
        for i, ch in enumerate(json):
            if ch == "{":
                _parse_object(c, i + 1, path)
                break
            if ch == "[":
                _parse_array(c, i + 1, path)
                break
    if c.piped:
        return c.value.get(c.pipe)
    return c.value


def _exec_static(path: str) -> tuple[str, str, bool]:
    name = path[1:]
    if name and name[0] in '{["+-0123456789':
        _, res = _parse_squash(name, 0)
        return name[len(res):], res, True
    out = ""
    for i in range(1, len(path)):
        if path[i] in "|.":
            out = path[i:]
            name = path[1:i]
            break
    if name.lower() in ("true", "false", "null", "nan", "inf"):
        return out, name, True
    return out, "", False


def _exec_modifier(json: str, path: str) -> tuple[str, str, bool]:
    name = path[1:]
    out = ""
    has_args = False
    for i in range(1, len(path)):
        if path[i] == ":":
            out = path[i + 1:]
            name = path[1:i]
            has_args = len(out) > 0
            break
        if path[i] in "|.":
            out = path[i:]
            name = path[1:i]
            break
    if name not in _MODIFIERS:
        return out, "", False
    args = ""
    if has_args:
        parsed = False
        if out[0] in '{["' and parse(out).exists():
            args = _squash(out)
            out = out[len(args):]
            parsed = True
        if not parsed:
            i = 0
            while i < len(out):
                if out[i] == "|":
                    break
                if out[i] in '{["(':
                    i += len(_squash(out[i:])) - 1
                i += 1
            args, out = out[:i], out[i:]
    return out, _MODIFIER_FUNCTIONS[name](json, args), True


# ---------------------------------------------------------------------------------------------
# modifiers


def _ugly(json: str) -> str:
    out: list[str] = []
    i = 0
    n = len(json)
    while i < n:
        ch = json[i]
        if ch > " ":
            if ch == '"':
                end, _, _ = _string_end(json, i + 1)
                out.append(json[i:end])
                i = end
                continue
            out.append(ch)
        i += 1
    return "".join(out)


def _unwrap(json: str) -> str:
    json = _trim(json)
    if len(json) >= 2 and json[0] in "[{":
        json = json[1:-1]
    return json


def _mod_pretty(json: str, arg: str) -> str:
    raise UnportedModifier("the gjson modifier @pretty is not evaluated by gpuaas route (its layout comes from "
                           "tidwall/pretty, which is not ported)")


def _mod_reverse(json: str, arg: str) -> str:
    res = parse(json)
    if res.is_array():
        values = [v.raw for _, v in for_each(res)]
        return "[" + ",".join(reversed(values)) + "]"
    if res.is_object():
        pairs = [f"{k.raw}:{v.raw}" for k, v in for_each(res)]
        return "{" + ",".join(reversed(pairs)) + "}"
    return json


def _bool_arg(arg: str, name: str) -> bool:
    flag = False
    if arg:
        for key, value in for_each(parse(arg)):
            if result_string(key) == name:
                flag = _result_bool(value)
    return flag


def _result_bool(r: Result) -> bool:
    if r.type == TRUE:
        return True
    if r.type == STRING:
        return _go_parse_bool_lower(r.str) is True
    if r.type == NUMBER:
        return r.num != 0
    return False


def _mod_flatten(json: str, arg: str) -> str:
    res = parse(json)
    if not res.is_array():
        return json
    deep = _bool_arg(arg, "deep")
    parts: list[str] = []
    for _, value in for_each(res):
        if value.is_array():
            raw = _unwrap(_mod_flatten(value.raw, arg)) if deep else _unwrap(value.raw)
        else:
            raw = value.raw
        raw = raw.strip()
        if raw:
            parts.append(raw)
    return "[" + ",".join(parts) + "]"


def _mod_keys(json: str, arg: str) -> str:
    v = parse(json)
    if not v.exists():
        return "[]"
    is_object = v.is_object()
    return "[" + ",".join(k.raw if is_object else "null" for k, _ in for_each(v)) + "]"


def _mod_values(json: str, arg: str) -> str:
    v = parse(json)
    if not v.exists():
        return "[]"
    if v.is_array():
        return json
    return "[" + ",".join(value.raw for _, value in for_each(v)) + "]"


def _mod_join(json: str, arg: str) -> str:
    res = parse(json)
    if not res.is_array():
        return json
    preserve = _bool_arg(arg, "preserve")
    if preserve:
        return "{" + ",".join(_unwrap(v.raw) for _, v in for_each(res) if v.is_object()) + "}"
    keys: list[Result] = []
    values: dict[str, Result] = {}
    for _, value in for_each(res):
        if not value.is_object():
            continue
        for key, item in for_each(value):
            name = result_string(key)
            if name not in values:
                keys.append(key)
            values[name] = item
    return "{" + ",".join(f"{k.raw}:{values[result_string(k)].raw}" for k in keys) + "}"


def _mod_valid(json: str, arg: str) -> str:
    return json if valid(json) else ""


def _mod_fromstr(json: str, arg: str) -> str:
    if not valid(json):
        return ""
    return result_string(parse(json))


def _mod_tostr(json: str, arg: str) -> str:
    return append_json_string(json)


def _mod_group(json: str, arg: str) -> str:
    res = parse(json)
    if not res.is_object():
        return ""
    groups: list[list[str]] = []
    for key, value in for_each(res):
        if not value.is_array():
            continue
        for index, (_, item) in enumerate(for_each(value)):
            if index == len(groups):
                groups.append([])
            groups[index].append(f"{key.raw}:{item.raw}")
    return "[" + ",".join("{" + ",".join(g) + "}" for g in groups) + "]"


def _mod_dig(json: str, arg: str) -> str:
    found: list[str] = []

    def descend(parent: Result) -> None:
        res = parent.get(arg)
        if res.exists():
            found.append(res.raw)
        if parent.is_array() or parent.is_object():
            for _, value in for_each(parent):
                descend(value)

    descend(parse(json))
    return "[" + ",".join(found) + "]"


_MODIFIER_FUNCTIONS = {
    "pretty": _mod_pretty, "ugly": lambda json, arg: _ugly(json), "reverse": _mod_reverse,
    "this": lambda json, arg: json, "flatten": _mod_flatten, "join": _mod_join, "valid": _mod_valid,
    "keys": _mod_keys, "values": _mod_values, "tostr": _mod_tostr, "fromstr": _mod_fromstr,
    "group": _mod_group, "dig": _mod_dig,
}


def match_limit(text: str, pattern: str) -> bool:
    """tidwall/match.MatchLimit(str, pattern, 10000): `*` and `?` wildcards, `\\` escapes."""
    if pattern == "*":
        return True
    return _match(text, pattern, len(text.encode("utf-8")), [0], 10000) == _MATCH


_NO_MATCH, _MATCH, _STOP = 0, 1, 2


def _match(text: str, pattern: str, slen: int, counter: list[int], maxcomp: int) -> int:
    if counter[0] > slen * maxcomp:
        return _STOP
    counter[0] += 1
    while pattern:
        wild = False
        pc = pattern[0]
        size = 1 if text else 0
        if pc == "?":
            if size == 0:
                return _NO_MATCH
        elif pc == "*":
            while len(pattern) > 1 and pattern[1] == "*":
                pattern = pattern[1:]
            if len(pattern) == 1:
                return _MATCH
            text, pattern, ok = _match_trim_suffix(text, pattern)
            if not ok:
                return _NO_MATCH
            if len(pattern) == 1:
                return _MATCH
            result = _match(text, pattern[1:], slen, counter, maxcomp)
            if result != _NO_MATCH:
                return result
            if not text:
                return _NO_MATCH
            wild = True
        else:
            if size == 0:
                return _NO_MATCH
            if pc == "\\":
                pattern = pattern[1:]
                if not pattern:
                    return _NO_MATCH
                pc = pattern[0]
            if text[0] != pc:
                return _NO_MATCH
        text = text[size:]
        if not wild:
            pattern = pattern[1:]
    return _MATCH if not text else _NO_MATCH


def _match_trim_suffix(text: str, pattern: str) -> tuple[str, str, bool]:
    matched = True
    while text and len(pattern) > 1:
        pc = pattern[-1]
        size = 1
        escaped = False
        i = 0
        while True:
            index = len(pattern) - size - i - 1
            if index < 0 or pattern[index] != "\\":
                if i & 1 == 1:
                    escaped = True
                    size += 1
                break
            i += 1
        if pc == "*" and not escaped:
            matched = True
            break
        if not ((pc == "?" and not escaped) or pc == text[-1]):
            matched = False
            break
        text = text[:-1]
        pattern = pattern[:-size]
    return text, pattern, matched


# ---------------------------------------------------------------------------------------------
# Valid


def valid(json: str) -> bool:
    """gjson.Valid. Strict JSON, which is what Python's decoder checks too once NaN and Infinity are
    refused; the ported validator decides what the decoder cannot (nesting deeper than its stack)."""
    try:
        _json.loads(json, parse_constant=_refuse)
        return True
    except ValueError:
        return False
    except RecursionError:
        _, ok = _valid_payload(json, 0)
        return ok


def _refuse(name: str) -> None:
    raise ValueError(name)


_WS = " \t\n\r"


def _valid_payload(data: str, i: int) -> tuple[int, bool]:
    n = len(data)
    while i < n:
        if data[i] in _WS:
            i += 1
            continue
        i, ok = _valid_any(data, i)
        if not ok:
            return i, False
        while i < n:
            if data[i] not in _WS:
                return i, False
            i += 1
        return i, True
    return i, False


def _valid_any(data: str, i: int) -> tuple[int, bool]:
    n = len(data)
    while i < n:
        ch = data[i]
        if ch in _WS:
            i += 1
            continue
        if ch == "{":
            return _valid_object(data, i + 1)
        if ch == "[":
            return _valid_array(data, i + 1)
        if ch == '"':
            return _valid_string(data, i + 1)
        if ch in "-0123456789":
            return _valid_number(data, i + 1)
        if ch == "t":
            return (i + 4, True) if data[i + 1:i + 4] == "rue" else (i + 1, False)
        if ch == "f":
            return (i + 5, True) if data[i + 1:i + 5] == "alse" else (i + 1, False)
        if ch == "n":
            return (i + 4, True) if data[i + 1:i + 4] == "ull" else (i + 1, False)
        return i, False
    return i, False


def _valid_object(data: str, i: int) -> tuple[int, bool]:
    n = len(data)
    while i < n:
        ch = data[i]
        if ch in _WS:
            i += 1
            continue
        if ch == "}":
            return i + 1, True
        if ch != '"':
            return i, False
        while True:
            i, ok = _valid_string(data, i + 1)
            if not ok:
                return i, False
            i, ok = _valid_separator(data, i, ":")
            if not ok:
                return i, False
            i, ok = _valid_any(data, i)
            if not ok:
                return i, False
            i, ok = _valid_comma(data, i, "}")
            if not ok:
                return i, False
            if data[i] == "}":
                return i + 1, True
            i += 1
            while i < n and data[i] in _WS:
                i += 1
            if i >= n or data[i] != '"':
                return i, False
    return i, False


def _valid_separator(data: str, i: int, separator: str) -> tuple[int, bool]:
    n = len(data)
    while i < n:
        if data[i] in _WS:
            i += 1
            continue
        if data[i] == separator:
            return i + 1, True
        return i, False
    return i, False


def _valid_comma(data: str, i: int, end: str) -> tuple[int, bool]:
    n = len(data)
    while i < n:
        if data[i] in _WS:
            i += 1
            continue
        if data[i] == "," or data[i] == end:
            return i, True
        return i, False
    return i, False


def _valid_array(data: str, i: int) -> tuple[int, bool]:
    n = len(data)
    while i < n:
        ch = data[i]
        if ch in _WS:
            i += 1
            continue
        if ch == "]":
            return i + 1, True
        while i < n:
            i, ok = _valid_any(data, i)
            if not ok:
                return i, False
            i, ok = _valid_comma(data, i, "]")
            if not ok:
                return i, False
            if data[i] == "]":
                return i + 1, True
            i += 1
        return i, False
    return i, False


_VALID_STRING = re.compile(r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9A-Fa-f]{4})*"')


def _valid_string(data: str, i: int) -> tuple[int, bool]:
    match = _VALID_STRING.match(data, i)
    if match is None:
        return i, False
    return match.end(), True


_VALID_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def _valid_number(data: str, i: int) -> tuple[int, bool]:
    match = _VALID_NUMBER.match(data, i - 1)
    if match is None:
        return i, False
    end = match.end()
    # gjson accepts "0" followed by digits as the number 0 and then fails on the next character
    return end, True
