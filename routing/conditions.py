"""A trigger's dependency `conditions` ("(dep-a || dep-b) && dep-c"), resolved the way the sensor
resolves them.

The sensor (argo-events v1.9.11 `pkg/sensors/listener.go`, getDependencyExpression, and the
JetStream trigger connection) does it in two steps, and both leave marks users can see:

1. `conditions` is rewritten with expr-lang into "the dependency expression": every `-` becomes
   `_`, and each name is looked up among the dependency names with their `-` turned into `_`
   too. So `dep-1a` names a dependency called `dep_1a`, and when two dependencies differ only by
   `-`/`_` the one declared LAST wins. A name that is not there, or anything but names, `&&`,
   `||` and parentheses, stops the trigger for good ("failed to get dependency expression").
   No `conditions` = every dependency name joined with `&&`, untranslated.
2. The expression is parsed by govaluate (each `-` escaped): its variables must all be
   dependency names, and a name govaluate does not read as one variable (one starting with a
   digit or `_`, holding a `.`, a space, an operator character) breaks the trigger too.

Then: if the expression contains no `&`, every dependency that passes its filters fires the
trigger on its own (one event matching two dependencies under `||` fires it twice). With `&`,
passing events are remembered per dependency (the latest wins) until the expression is true;
the trigger then fires with all remembered events and the memory is cleared.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

_EXPR_KEYWORDS = frozenset({"not", "in", "or", "and", "matches", "contains", "startsWith", "endsWith", "let",
                            "true", "false", "nil"})


class ConditionsError(ValueError):
    """The trigger never runs: its conditions do not resolve to dependencies."""


@dataclass(frozen=True)
class Conditions:
    text: str  # as written (or the default, all dependencies AND-ed)
    expression: str  # the dependency expression the sensor logs ("Dependency expression for trigger")
    tree: tuple
    names: tuple[str, ...]  # dependencies of the expression, in order of first appearance
    requires_and: bool

    def satisfied(self, present: set[str] | frozenset[str]) -> bool:
        return _eval(self.tree, present)

    def missing(self, present: set[str] | frozenset[str]) -> list[str]:
        """Dependencies not yet received (for an explanation)."""
        return [n for n in self.names if n not in present]


def parse_conditions(text: str, known: list[str]) -> Conditions:
    """Resolve a trigger's `conditions` against the Sensor's dependency names (in spec order)."""
    by_key: dict[str, str] = {}
    for name in known:  # a Go map filled in spec order: the last of names equal up to -/_ wins
        by_key[name.replace("-", "_")] = name
    pieces: list[str] = []
    if text.strip() in ("true", "false"):  # expr-lang prints the constant; govaluate reads it back
        return _from_expression(text, text.strip(), known)
    tokens = _expr_tokens(text.replace("-", "_"), text)
    _check_structure(tokens, text)
    for kind, value in tokens:
        if kind == "name":
            if value not in by_key:
                raise ConditionsError(
                    f"conditions {text!r}: unknown name {value} (the sensor compares names with every '-' read "
                    f"as '_'; dependencies: {', '.join(known)}); the sensor logs 'failed to get dependency "
                    f"expression' and never runs this trigger")
            pieces.append(by_key[value])
        else:
            pieces.append(value)
    return _from_expression(text, "".join(pieces), known)


def all_dependencies(names: list[str]) -> Conditions:
    """No `conditions`: all dependencies AND-ed (untranslated names)."""
    return _from_expression(" && ".join(names), "&&".join(names), names)


def _from_expression(text: str, expression: str, known: list[str]) -> Conditions:
    """Step 2: govaluate reads the dependency expression; every variable must be a dependency."""
    tokens = _govaluate_tokens(expression.replace("-", "\\-"), expression)
    parser = _Parser(tokens, expression)
    tree = parser.expression()
    if parser.i != len(tokens):
        raise ConditionsError(f"dependency expression {expression!r}: unexpected {tokens[parser.i][1]!r}; "
                              f"the sensor never runs this trigger")
    names = tuple(dict.fromkeys(_names(tree)))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConditionsError(
            f"dependency expression {expression!r} names {', '.join(unknown)}, which is not a dependency of this "
            f"Sensor (known: {', '.join(known)}); the sensor logs 'Dependency expression and dependency list do "
            f"not match' and never runs this trigger")
    return Conditions(text=text, expression=expression, tree=tree, names=names, requires_and="&" in expression)


# ---------------------------------------------------------------------------------------------
# step 1: expr-lang, restricted to what a conditions string may hold


def _go_space(char: str) -> bool:
    """unicode.IsSpace."""
    return char in "\t\n\v\f\r \x85\xa0" or (ord(char) > 0xFF and unicodedata.category(char) == "Zs") \
        or char in "\u2028\u2029"


def _go_letter(char: str) -> bool:
    return unicodedata.category(char).startswith("L")


def _go_digit(char: str) -> bool:
    return unicodedata.category(char) == "Nd"


def _expr_tokens(source: str, text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    i = 0
    while i < len(source):
        char = source[i]
        if _go_space(char):
            i += 1
            continue
        if source.startswith(("&&", "||"), i):
            tokens.append(("op", source[i:i + 2]))
            i += 2
            continue
        if char in "()":
            tokens.append(("op", char))
            i += 1
            continue
        if char == "_" or char == "$" or _go_letter(char) or (_go_digit(char) and not "0" <= char <= "9"):
            j = i + 1
            while j < len(source) and (source[j] in "_$" or _go_letter(source[j]) or _go_digit(source[j])):
                j += 1
            word = source[i:j]
            if word in _EXPR_KEYWORDS or word.startswith("$"):
                raise ConditionsError(f"conditions {text!r}: {word!r} is an expr-lang keyword, not a dependency "
                                      f"name; the sensor never runs this trigger")
            tokens.append(("name", word))
            i = j
            continue
        raise ConditionsError(
            f"conditions {text!r}: unexpected {source[i:i + 10]!r} (only dependency names, &&, || and parentheses); "
            f"the sensor never runs this trigger")
    return tokens


def _check_structure(tokens: list[tuple[str, str]], text: str) -> None:
    """Names joined by && / || with balanced parentheses, as expr-lang would compile them."""
    parser = _Parser([("var" if kind == "name" else "op", value) for kind, value in tokens], text)
    parser.expression()
    if parser.i != len(tokens):
        raise ConditionsError(f"conditions {text!r}: unexpected {tokens[parser.i][1]!r}; "
                              f"the sensor never runs this trigger")


# ---------------------------------------------------------------------------------------------
# step 2: govaluate's lexer, for the tokens a dependency expression can hold


def _govaluate_tokens(source: str, expression: str) -> list[tuple[str, object]]:
    """Tokens as Knetic/govaluate reads them: variables start with a letter and go on with letters,
    digits, `_` and `.` (a backslash escapes any character); `true`/`false` are constants."""
    tokens: list[tuple[str, object]] = []
    i = 0
    while i < len(source):
        char = source[i]
        if _go_space(char):
            i += 1
            continue
        if char in "()":
            tokens.append(("op", char))
            i += 1
            continue
        if _go_letter(char):
            word: list[str] = []
            while i < len(source):
                c = source[i]
                if c == "\\":
                    if i + 1 < len(source):
                        word.append(source[i + 1])
                    i += 2
                    continue
                if _go_space(c) and word:
                    break
                if _go_letter(c) or _go_digit(c) or c in "_.":
                    word.append(c)
                    i += 1
                    continue
                break
            name = "".join(word)
            if name in ("true", "false"):
                tokens.append(("value", name == "true"))
            elif "." in name[1:] or name in ("in", "IN"):
                raise ConditionsError(
                    f"dependency expression {expression!r}: govaluate does not read {name!r} as a dependency "
                    f"name (a '.' makes it a field accessor); the trigger never fires")
            else:
                tokens.append(("var", name))
            continue
        j = i
        while j < len(source) and not (_go_letter(source[j]) or _go_digit(source[j]) or source[j] in "()[]'\""
                                       or _go_space(source[j])):
            j += 1
        symbol = source[i:max(j, i + 1)]
        if symbol in ("&&", "||"):
            tokens.append(("op", symbol))
            i = j
            continue
        raise ConditionsError(
            f"dependency expression {expression!r}: govaluate reads {symbol!r} here, not a dependency name, && "
            f"or ||; the sensor never runs this trigger")
    return tokens


class _Parser:
    """or := and ('||' and)* ; and := atom ('&&' atom)* ; atom := name | constant | '(' or ')'."""

    def __init__(self, tokens: list[tuple[str, object]], text: str) -> None:
        self.tokens, self.text, self.i = tokens, text, 0

    def _accept(self, value: str) -> bool:
        if self.i < len(self.tokens) and self.tokens[self.i] == ("op", value):
            self.i += 1
            return True
        return False

    def expression(self) -> tuple:
        items = [self.conjunction()]
        while self._accept("||"):
            items.append(self.conjunction())
        return items[0] if len(items) == 1 else ("or", tuple(items))

    def conjunction(self) -> tuple:
        items = [self.atom()]
        while self._accept("&&"):
            items.append(self.atom())
        return items[0] if len(items) == 1 else ("and", tuple(items))

    def atom(self) -> tuple:
        if self._accept("("):
            inner = self.expression()
            if not self._accept(")"):
                raise ConditionsError(f"conditions {self.text!r}: missing ); the sensor never runs this trigger")
            return inner
        if self.i < len(self.tokens) and self.tokens[self.i][0] in ("var", "value"):
            kind, value = self.tokens[self.i]
            self.i += 1
            return ("name", value) if kind == "var" else ("value", value)
        raise ConditionsError(f"conditions {self.text!r}: expected a dependency name; "
                              f"the sensor never runs this trigger")


def _eval(tree: tuple, present: set[str] | frozenset[str]) -> bool:
    kind = tree[0]
    if kind == "name":
        return tree[1] in present
    if kind == "value":
        return bool(tree[1])
    if kind == "and":
        return all(_eval(t, present) for t in tree[1])
    return any(_eval(t, present) for t in tree[1])


def _names(tree: tuple) -> list[str]:
    if tree[0] == "name":
        return [tree[1]]
    if tree[0] == "value":
        return []
    return [n for t in tree[1] for n in _names(t)]
