"""Go (RE2) regular expressions translated to Python's `re`, matched the way Go matches them.

A string data filter value is a Go regexp matched with `regexp.Match` (UNANCHORED: `True`
matches `NotTrue`). The two dialects disagree in places that matter for filters:

* `$` in Go (without the `m` flag) is the end of the text; in Python it also matches before a
  final newline. It is translated to `\\Z`. Go's `\\z` is Python's `\\Z`.
* `\\d`, `\\w`, `\\s`, `\\b` are ASCII-only in Go: compiled with `re.ASCII`.
* POSIX classes (`[[:alpha:]]`), `\\x{...}`, `\\Q...\\E` and `(?<name>...)` exist only in Go.
* Back-references and look-arounds do not exist in RE2: Go refuses to compile them, so the
  filter errors. They raise `GoRegexpError` here too instead of quietly matching.
"""

from __future__ import annotations

import re
from functools import lru_cache

_POSIX_CLASSES = {
    "alnum": "0-9A-Za-z", "alpha": "A-Za-z", "ascii": "\\x00-\\x7f", "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f", "digit": "0-9", "graph": "!-~", "lower": "a-z",
    "print": " -~", "punct": "!-/:-@\\[-`{-~", "space": "\\t\\n\\v\\f\\r ", "upper": "A-Z",
    "word": "0-9A-Za-z_", "xdigit": "0-9A-Fa-f",
}
_GO_PERL_ESCAPES = set("dDsSwWbB")
_SIMPLE_ESCAPES = set("afnrtv")


class GoRegexpError(ValueError):
    """The pattern is not a valid Go regexp (Go's regexp.Compile would fail too)."""


@lru_cache(maxsize=4096)
def compile_go_regexp(pattern: str) -> re.Pattern[str]:
    """Compile a Go regexp into an equivalent Python pattern (use `.search` for Go's `Match`)."""
    translated = _translate(pattern)
    try:
        return re.compile(translated, re.ASCII)
    except re.error as exc:
        raise GoRegexpError(f"error parsing regexp {pattern!r}: {exc}") from None


def go_match(pattern: str, text: str) -> bool:
    """Go `regexp.MustCompile(pattern).MatchString(text)`: true if the pattern occurs anywhere."""
    return compile_go_regexp(pattern).search(text) is not None


def _translate(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    multiline = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            piece, i = _escape(pattern, i, in_class=False)
            out.append(piece)
            continue
        if c == "[":
            piece, i = _char_class(pattern, i)
            out.append(piece)
            continue
        if c == "(" and pattern.startswith("(?", i):
            rest = pattern[i + 2:]
            if rest.startswith(("=", "!", "<=", "<!")):
                raise GoRegexpError(f"error parsing regexp {pattern!r}: look-around is not supported by Go (RE2)")
            if rest.startswith("P<"):
                out.append("(?P<")
                i += 4
                continue
            if rest.startswith("<"):
                out.append("(?P<")
                i += 3
                continue
            flags = re.match(r"([a-zA-Z-]*)([:)])", rest)
            if flags:
                letters = flags.group(1)
                if "U" in letters:
                    raise GoRegexpError(f"regexp {pattern!r}: the Go flag U (ungreedy) has no Python equivalent")
                if "m" in letters.split("-")[0]:
                    multiline = True
                out.append("(?" + letters + flags.group(2))
                i += 2 + len(flags.group(0))
                continue
        if c == "$" and not multiline:
            out.append(r"\Z")  # end of text only, like Go's $ without the m flag
            i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _escape(pattern: str, i: int, in_class: bool) -> tuple[str, int]:
    if i + 1 >= len(pattern):
        raise GoRegexpError(f"error parsing regexp {pattern!r}: trailing backslash at end of expression")
    e = pattern[i + 1]
    if e.isdigit() and e != "0":
        raise GoRegexpError(f"error parsing regexp {pattern!r}: back-references (\\{e}) are not supported by Go")
    if e == "z":
        return (r"\Z", i + 2) if not in_class else ("z", i + 2)
    if e == "A":
        return (r"\A", i + 2)
    if e == "Z":
        raise GoRegexpError(f"error parsing regexp {pattern!r}: invalid escape sequence \\Z")
    if e == "Q":
        end = pattern.find("\\E", i + 2)
        literal = pattern[i + 2:] if end < 0 else pattern[i + 2:end]
        return re.escape(literal), (len(pattern) if end < 0 else end + 2)
    if e == "x" and pattern.startswith("{", i + 2):
        end = pattern.find("}", i + 3)
        if end < 0:
            raise GoRegexpError(f"error parsing regexp {pattern!r}: invalid escape sequence")
        code = int(pattern[i + 3:end], 16)
        return f"\\U{code:08x}", end + 1
    if e in ("p", "P"):
        raise GoRegexpError(f"regexp {pattern!r}: Unicode classes (\\{e}) are not supported by this evaluator")
    if e in _GO_PERL_ESCAPES or e in _SIMPLE_ESCAPES or e == "x" or e == "0":
        return pattern[i:i + 2], i + 2
    if e.isalnum():
        raise GoRegexpError(f"error parsing regexp {pattern!r}: invalid escape sequence \\{e}")
    return re.escape(e) if e != "-" else "\\-", i + 2


def _char_class(pattern: str, i: int) -> tuple[str, int]:
    out = ["["]
    j = i + 1
    if j < len(pattern) and pattern[j] == "^":
        out.append("^")
        j += 1
    first = True
    while j < len(pattern):
        c = pattern[j]
        if c == "]" and not first:
            out.append("]")
            return "".join(out), j + 1
        first = False
        if c == "[" and pattern.startswith("[:", j):
            end = pattern.find(":]", j + 2)
            if end > 0:
                name = pattern[j + 2:end]
                negate = name.startswith("^")
                body = _POSIX_CLASSES.get(name.lstrip("^"))
                if body is None:
                    raise GoRegexpError(f"error parsing regexp {pattern!r}: invalid character class range [:{name}:]")
                if negate:
                    raise GoRegexpError(f"regexp {pattern!r}: negated POSIX classes are not supported here")
                out.append(body)
                j = end + 2
                continue
        if c == "\\":
            piece, j = _escape(pattern, j, in_class=True)
            out.append(piece)
            continue
        if c == "[":
            out.append("\\[")
            j += 1
            continue
        out.append(c)
        j += 1
    raise GoRegexpError(f"error parsing regexp {pattern!r}: missing closing ]")
