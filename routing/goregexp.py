"""Go (RE2) regular expressions translated to Python's `re`, matched the way Go matches them.

A string data filter value is a Go regexp matched with `regexp.Match` (UNANCHORED: `True`
matches `NotTrue`). The pattern is parsed with Go's syntax (regexp/syntax, Perl flags) and
written out in Python's, so that what Go refuses is refused here and what Go accepts means the
same thing:

* `^`/`$` are the ends of the TEXT unless `(?m)` (Python's `$` also matches before a final
  newline); `\\z` is Python's `\\Z`; `.` never matches a newline unless `(?s)`;
* `\\d`, `\\w`, `\\s`, `\\b` are ASCII-only in Go, while case folding (`(?i)`) is Unicode;
* character classes are computed as sets of code points, so POSIX classes (`[[:alpha:]]`,
  negated `[[:^digit:]]`), Perl classes and Unicode categories (`\\pL`, `\\p{Lu}`, `\\PN`) can be
  combined and negated as in Go;
* flags may change mid-pattern (`a(?i)b`), `(?U)` swaps greedy and lazy repetition;
* `\\Q...\\E`, `\\x{263a}`, octal escapes, `(?P<name>...)` and `(?<name>...)` are Go's;
* Go refuses back-references, look-arounds, possessive and nested repetitions (`a**`, `a*+`),
  repeat counts over 1000, escapes of letters it does not know, and unknown flags: so does this.

Unicode script classes (`\\p{Greek}`) are not translated (Python's `re` has no script data):
they raise GoRegexpError saying so.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

_MAX_RUNE = 0x10FFFF
_POSIX_CLASSES: dict[str, list[tuple[int, int]]] = {
    "alnum": [(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)], "alpha": [(0x41, 0x5A), (0x61, 0x7A)],
    "ascii": [(0x00, 0x7F)], "blank": [(0x09, 0x09), (0x20, 0x20)], "cntrl": [(0x00, 0x1F), (0x7F, 0x7F)],
    "digit": [(0x30, 0x39)], "graph": [(0x21, 0x7E)], "lower": [(0x61, 0x7A)], "print": [(0x20, 0x7E)],
    "punct": [(0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E)],
    "space": [(0x09, 0x0D), (0x20, 0x20)], "upper": [(0x41, 0x5A)],
    "word": [(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A), (0x5F, 0x5F)], "xdigit": [(0x30, 0x39), (0x41, 0x46), (0x61, 0x66)],
}
_PERL_CLASSES: dict[str, list[tuple[int, int]]] = {
    "d": [(0x30, 0x39)], "s": [(0x09, 0x0A), (0x0C, 0x0D), (0x20, 0x20)],
    "w": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
}
_SIMPLE_ESCAPES = {"a": 0x07, "f": 0x0C, "t": 0x09, "n": 0x0A, "r": 0x0D, "v": 0x0B}
_WORD = "[0-9A-Za-z_]"
_MAX_REPEAT = 1000


class GoRegexpError(ValueError):
    """The pattern is not a valid Go regexp (Go's regexp.Compile would fail too)."""


class GoRegexpUnsupported(GoRegexpError):
    """A valid Go regexp this translator does not reproduce (Unicode script classes): not evaluated."""


@lru_cache(maxsize=4096)
def compile_go_regexp(pattern: str) -> re.Pattern[str]:
    """Compile a Go regexp into an equivalent Python pattern (use `.search` for Go's `Match`)."""
    translated = _Translator(pattern).translate()  # GoRegexpUnsupported propagates as is
    try:
        return re.compile(translated)
    except re.error as exc:  # a translation the Python engine refuses: say so rather than guess
        raise GoRegexpError(f"error parsing regexp {pattern!r}: {exc}") from None


def go_match(pattern: str, text: str) -> bool:
    """Go `regexp.MustCompile(pattern).MatchString(text)`: true if the pattern occurs anywhere."""
    return compile_go_regexp(pattern).search(text) is not None


@dataclass(frozen=True)
class _Flags:
    i: bool = False
    m: bool = False
    s: bool = False
    U: bool = False


class _Translator:
    """A recursive-descent reader of Go's regexp syntax that writes Python's."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.i = 0
        self.names: set[str] = set()

    def error(self, message: str, what: str = "") -> GoRegexpError:
        detail = f": `{what}`" if what else ""
        return GoRegexpError(f"error parsing regexp: {message}{detail}")

    def translate(self) -> str:
        out = self.alternation(_Flags(), top=True)
        if self.i < len(self.pattern):  # a stray ')'
            raise self.error("unexpected )", self.pattern)
        return out

    # -- structure ------------------------------------------------------------------------

    def alternation(self, flags: _Flags, top: bool = False) -> str:
        """Alternatives up to the closing `)`: a flag change `(?i)` holds for the rest of the group,
        the following alternatives included, so the flags are threaded through."""
        text, flags = self.concatenation(flags)
        branches = [text]
        while self.i < len(self.pattern) and self.pattern[self.i] == "|":
            self.i += 1
            text, flags = self.concatenation(flags)
            branches.append(text)
        if not top and self.i >= len(self.pattern):
            raise self.error("missing closing )", self.pattern)
        return "|".join(branches)

    def concatenation(self, flags: _Flags) -> tuple[str, _Flags]:
        """Items up to `|` or `)`, and the flags in force after them."""
        out: list[str] = []
        while self.i < len(self.pattern) and self.pattern[self.i] not in "|)":
            if self.pattern.startswith("(?", self.i):
                changed = self.flag_change(flags)
                if changed is not None:
                    flags = changed
                    continue
            out.append(self.repetition(flags))
        return "".join(out), flags

    def flag_change(self, flags: _Flags) -> _Flags | None:
        """`(?flags)` alone: consume it and return the new flags; else None (not consumed)."""
        match = re.match(r"\(\?([A-Za-z-]*)\)", self.pattern[self.i:])
        if not match:
            return None
        self.i += match.end()
        return self.parse_flags(match.group(1), flags, match.group(0))

    def parse_flags(self, letters: str, flags: _Flags, whole: str) -> _Flags:
        if not letters or letters.endswith("-") or letters.count("-") > 1:
            raise self.error("missing argument to repetition operator" if not letters else
                             "invalid or unsupported Perl syntax", whole)
        on = True
        values = {"i": flags.i, "m": flags.m, "s": flags.s, "U": flags.U}
        for letter in letters:
            if letter == "-":
                on = False
                continue
            if letter not in values:
                raise self.error("invalid or unsupported Perl syntax", whole)
            values[letter] = on
        return _Flags(**values)

    def repetition(self, flags: _Flags) -> str:
        start = self.i
        atom = self.atom(flags)
        if atom is None:
            return ""
        quantified = False
        while self.i < len(self.pattern):
            quantifier = self.quantifier()
            if quantifier is None:
                break
            if quantified:
                raise self.error("invalid nested repetition operator", self.pattern[start:self.i])
            lazy = False
            if self.i < len(self.pattern) and self.pattern[self.i] == "?":
                self.i += 1
                lazy = True
            if flags.U:
                lazy = not lazy
            atom = f"(?:{atom}){quantifier}{'?' if lazy else ''}"
            quantified = True
        return atom

    def quantifier(self) -> str | None:
        char = self.pattern[self.i]
        if char in "*+?":
            self.i += 1
            return char
        if char == "{":
            match = re.match(r"\{([0-9]+)(,([0-9]*))?\}", self.pattern[self.i:])
            if not match:
                return None
            low = int(match.group(1))
            high = None if match.group(2) and not match.group(3) else int(match.group(3) or match.group(1))
            if low > _MAX_REPEAT or (high is not None and (high > _MAX_REPEAT or high < low)):
                raise self.error("invalid repeat count", match.group(0))
            self.i += match.end()
            return match.group(0)
        return None

    def atom(self, flags: _Flags) -> str | None:
        pattern, i = self.pattern, self.i
        char = pattern[i]
        if char in "*+?":
            raise self.error("missing argument to repetition operator", char)
        if char == "{" and re.match(r"\{[0-9]+(,[0-9]*)?\}", pattern[i:]):
            raise self.error("missing argument to repetition operator", re.match(r"\{[^}]*\}", pattern[i:]).group(0))
        if char == "(":
            return self.group(flags)
        if char == "[":
            return self.with_flags(self.char_class(flags), flags)
        if char == "\\":
            return self.escape(flags)
        self.i += 1
        if char == ".":
            return r"(?s:.)" if flags.s else r"[^\n]"
        if char == "^":
            return "(?m:^)" if flags.m else r"\A"
        if char == "$":
            return "(?m:$)" if flags.m else r"\Z"
        return self.with_flags(re.escape(char), flags)

    @staticmethod
    def with_flags(text: str, flags: _Flags) -> str:
        return f"(?i:{text})" if flags.i else text

    def group(self, flags: _Flags) -> str:
        pattern = self.pattern
        if pattern.startswith("(?", self.i):
            rest = pattern[self.i + 2:]
            if rest.startswith(("P<", "<")):
                if rest.startswith(("<=", "<!")):
                    raise self.error("invalid or unsupported Perl syntax", pattern[self.i:self.i + 4])
                begin = self.i + (4 if rest.startswith("P<") else 3)
                end = pattern.find(">", begin)
                if end < 0:
                    raise self.error("invalid named capture", pattern[self.i:])
                name = pattern[begin:end]
                if not name or not re.fullmatch(r"[A-Za-z0-9_]+", name):
                    raise self.error("invalid named capture", pattern[self.i:end + 1])
                if name in self.names:
                    raise self.error("duplicate capture group name", name)
                self.names.add(name)
                self.i = end + 1
                inner = self.alternation(flags)
                self.close()
                python_name = name if name.isidentifier() else f"_go_{len(self.names)}"
                return f"(?P<{python_name}>{inner})"
            match = re.match(r"\(\?([A-Za-z-]*):", pattern[self.i:])
            if match:
                new_flags = self.parse_flags(match.group(1), flags, match.group(0)) if match.group(1) else flags
                self.i += match.end()
                inner = self.alternation(new_flags)
                self.close()
                return f"(?:{inner})"
            raise self.error("invalid or unsupported Perl syntax", pattern[self.i:self.i + 3])
        self.i += 1
        inner = self.alternation(flags)
        self.close()
        return f"({inner})"

    def close(self) -> None:
        if self.i >= len(self.pattern) or self.pattern[self.i] != ")":
            raise self.error("missing closing )", self.pattern)
        self.i += 1

    # -- escapes ----------------------------------------------------------------------------

    def escape(self, flags: _Flags) -> str:
        pattern, i = self.pattern, self.i
        if i + 1 >= len(pattern):
            raise self.error("trailing backslash at end of expression")
        e = pattern[i + 1]
        if e == "Q":
            end = pattern.find("\\E", i + 2)
            literal = pattern[i + 2:] if end < 0 else pattern[i + 2:end]
            self.i = len(pattern) if end < 0 else end + 2
            return self.with_flags("".join(re.escape(c) for c in literal), flags)
        if e in "AzbB":
            self.i += 2
            return {"A": r"\A", "z": r"\Z",
                    "b": f"(?:(?<={_WORD})(?!{_WORD})|(?<!{_WORD})(?={_WORD}))",
                    "B": f"(?:(?<={_WORD})(?={_WORD})|(?<!{_WORD})(?!{_WORD}))"}[e]
        ranges = self.class_escape(in_class=False)
        if ranges is not None:
            return _emit_class(ranges, negate=False, fold=flags.i)
        code = self.literal_escape()
        return self.with_flags(re.escape(chr(code)), flags)

    def class_escape(self, in_class: bool) -> list[tuple[int, int]] | None:
        """\\d \\D \\s \\S \\w \\W \\pX \\p{X} \\PX as code point ranges (None: not a class escape)."""
        pattern, i = self.pattern, self.i
        e = pattern[i + 1]
        if e.lower() in _PERL_CLASSES:
            self.i += 2
            ranges = _PERL_CLASSES[e.lower()]
            return _complement(ranges) if e.isupper() else ranges
        if e in "pP":
            if i + 2 >= len(pattern):
                raise self.error("invalid character class range", pattern[i:])
            if pattern[i + 2] == "{":
                end = pattern.find("}", i + 3)
                if end < 0:
                    raise self.error("invalid character class range", pattern[i:])
                name, self.i = pattern[i + 3:end], end + 1
            else:
                name, self.i = pattern[i + 2], i + 3
            negate = e == "P"
            if name.startswith("^"):
                negate, name = not negate, name[1:]
            ranges = _unicode_class(name, pattern[i:self.i])
            return _complement(ranges) if negate else ranges
        return None

    def literal_escape(self) -> int:
        """One escaped character: its code point. Raises for what Go refuses."""
        pattern, i = self.pattern, self.i
        e = pattern[i + 1]
        if "1" <= e <= "7" and not (i + 2 < len(pattern) and "0" <= pattern[i + 2] <= "7"):
            raise self.error("invalid escape sequence", pattern[i:i + 2])
        if "0" <= e <= "7":
            digits = re.match(r"[0-7]{1,3}", pattern[i + 1:]).group(0)
            self.i += 1 + len(digits)
            return int(digits, 8)
        if e == "x":
            if pattern.startswith("{", i + 2):
                end = pattern.find("}", i + 3)
                digits = pattern[i + 3:end] if end > 0 else ""
                if end < 0 or not re.fullmatch(r"[0-9A-Fa-f]+", digits) or int(digits, 16) > _MAX_RUNE:
                    raise self.error("invalid escape sequence", pattern[i:end + 1 if end > 0 else len(pattern)])
                self.i = end + 1
                return int(digits, 16)
            digits = pattern[i + 2:i + 4]
            if not re.fullmatch(r"[0-9A-Fa-f]{2}", digits):
                raise self.error("invalid escape sequence", pattern[i:i + 4])
            self.i += 4
            return int(digits, 16)
        if e in _SIMPLE_ESCAPES:
            self.i += 2
            return _SIMPLE_ESCAPES[e]
        if ord(e) < 0x80 and not e.isalnum():
            self.i += 2
            return ord(e)
        raise self.error("invalid escape sequence", pattern[i:i + 2])

    # -- character classes ------------------------------------------------------------------

    def char_class(self, flags: _Flags) -> str:
        pattern = self.pattern
        start = self.i
        self.i += 1
        negate = self.i < len(pattern) and pattern[self.i] == "^"
        if negate:
            self.i += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            if self.i >= len(pattern):
                raise self.error("missing closing ]", pattern[start:])
            char = pattern[self.i]
            if char == "]" and not first:
                self.i += 1
                break
            first = False
            if pattern.startswith("[:", self.i):
                end = pattern.find(":]", self.i + 2)
                if end > 0:
                    name = pattern[self.i + 2:end]
                    negated_posix = name.startswith("^")
                    posix = _POSIX_CLASSES.get(name.lstrip("^"))
                    if posix is None:
                        raise self.error("invalid character class range", pattern[self.i:end + 2])
                    ranges.extend(_complement(posix) if negated_posix else posix)
                    self.i = end + 2
                    continue
            if char == "\\":
                if self.i + 1 >= len(pattern):
                    raise self.error("trailing backslash at end of expression")
                escaped = self.class_escape(in_class=True)
                if escaped is not None:
                    ranges.extend(escaped)
                    continue
                low = self.literal_escape()
            else:
                low = ord(char)
                self.i += 1
            high = low
            if pattern.startswith("-", self.i) and not pattern.startswith("-]", self.i):
                self.i += 1
                if self.i >= len(pattern):
                    raise self.error("missing closing ]", pattern[start:])
                if pattern[self.i] == "\\":
                    if self.class_escape_ahead():
                        raise self.error("invalid character class range", pattern[self.i - 2:self.i + 2])
                    high = self.literal_escape()
                else:
                    high = ord(pattern[self.i])
                    self.i += 1
                if high < low:
                    raise self.error("invalid character class range", f"{chr(low)}-{chr(high)}")
            ranges.append((low, high))
        return _emit_class(ranges, negate, fold=flags.i)

    def class_escape_ahead(self) -> bool:
        return self.i + 1 < len(self.pattern) and self.pattern[self.i + 1] in "dDsSwWpP"


def _normalize(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def _complement(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    next_low = 0
    for low, high in _normalize(ranges):
        if low > next_low:
            out.append((next_low, low - 1))
        next_low = high + 1
    if next_low <= _MAX_RUNE:
        out.append((next_low, _MAX_RUNE))
    return out


def _fold(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Add the simple case variants of every code point (Go's (?i) on a class)."""
    out = list(ranges)
    for low, high in _normalize(ranges):
        if high - low > 5000:  # a huge range: fold only the cased blocks it touches
            continue
        for code in range(low, high + 1):
            char = chr(code)
            for variant in {char.lower(), char.upper(), char.casefold()}:
                if len(variant) == 1 and variant != char:
                    out.append((ord(variant), ord(variant)))
    return _normalize(out)


def _emit_class(ranges: list[tuple[int, int]], negate: bool, fold: bool) -> str:
    """A Python class for a set of code points (folded first when (?i) is on, as Go does)."""
    merged = _fold(ranges) if fold else _normalize(ranges)
    if negate:
        merged = _complement(merged)
    if not merged:
        return "(?!)"  # matches nothing, like Go's empty class
    body = "".join(_code(low) if low == high else f"{_code(low)}-{_code(high)}" for low, high in merged)
    return f"[{body}]"


def _code(code: int) -> str:
    return f"\\U{code:08x}"


_CATEGORIES = ("L", "Lu", "Ll", "Lt", "Lm", "Lo", "M", "Mn", "Mc", "Me", "N", "Nd", "Nl", "No", "P", "Pc", "Pd",
               "Ps", "Pe", "Pi", "Pf", "Po", "S", "Sm", "Sc", "Sk", "So", "Z", "Zs", "Zl", "Zp", "C", "Cc", "Cf",
               "Cs", "Co")


def _unicode_class(name: str, text: str) -> list[tuple[int, int]]:
    if name == "Any":
        return [(0, _MAX_RUNE)]
    if name in _CATEGORIES:
        return _category_ranges(name)
    if re.fullmatch(r"[A-Z][A-Za-z_]+", name):
        raise GoRegexpUnsupported(f"the Unicode script class `{text}` is not evaluated by gpuaas route (Python's re "
                                  f"has no script data)")
    raise GoRegexpError(f"error parsing regexp: invalid character class range: `{text}`")


@lru_cache(maxsize=64)
def _category_ranges(name: str) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    for code in range(_MAX_RUNE + 1):
        category = unicodedata.category(chr(code))
        if category == name or (len(name) == 1 and category[0] == name):
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1] = (ranges[-1][0], code)
            else:
                ranges.append((code, code))
    return ranges


