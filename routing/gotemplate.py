"""Go text/template with the commonly used sprig functions, for `dataTemplate`/`contextTemplate`.

Argo Events renders trigger-parameter templates with Go's text/template plus sprig over
`{"Input": <event data as gjson Value()>}` and data-filter templates over `{"Input": <String()>}`.
The behaviours that decide whether a parameter resolves are reproduced:

* a missing map key prints `<no value>` (a template that prints only that counts as unresolved,
  but `ns/<no value>` is accepted silently, exactly like the sensor does);
* a field of a missing key (`.Input.nope.name`) is an execution error -> fall back to key/value;
* numbers from JSON are float64 (`{{ .Input.count }}` prints `4`, `eq .Input.count 4` is an
  "incompatible types for comparison" error, as in Go);
* an unknown function is a parse error.

Supported: text and `{{ }}` actions with `{{-`/`-}}` trimming, comments, pipelines, parenthesised
pipelines, variables (`$`, `$x :=`, `$x =`), `if`/`else if`/`else`, `range` (with `$i, $v :=`
and `else`), `with`, field chains on maps, and the functions listed in FUNCTIONS.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from routing.gofmt import go_json_marshal, go_sprint
from routing.goregexp import GoRegexpUnsupported, compile_go_regexp
from routing.gostrconv import go_quote


class TemplateError(ValueError):
    """Parse or execution error, worded like Go's so an admin recognises it."""


class TemplateUnsupported(TemplateError):
    """The template uses Go or sprig behaviour this evaluator does not reproduce: not evaluated."""


class _NoValue:
    """The invalid reflect.Value Go gets for a missing map key: prints as `<no value>`."""

    def __repr__(self) -> str:
        return "<no value>"


NO_VALUE = _NoValue()


# ---------------------------------------------------------------------------------------------
# Lexing and parsing


@dataclass
class _Text:
    text: str


@dataclass
class _Action:
    pipeline: _Pipeline


@dataclass
class _If:
    pipeline: _Pipeline
    then: list
    orelse: list = field(default_factory=list)


@dataclass
class _Range:
    pipeline: _Pipeline
    body: list
    orelse: list = field(default_factory=list)


@dataclass
class _With:
    pipeline: _Pipeline
    body: list
    orelse: list = field(default_factory=list)


@dataclass
class _Pipeline:
    commands: list  # list[list[operand]]
    declare: list = field(default_factory=list)  # variable names
    assign: bool = False  # `=` instead of `:=`


_TOKEN = re.compile(
    r"""\s*(?:
    (?P<str>"(?:[^"\\]|\\.)*")|
    (?P<raw>`[^`]*`)|
    (?P<char>'(?:[^'\\]|\\.)+')|
    (?P<num>[-+]?(?:0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?))(?![\w.])|
    (?P<declare>:=)|
    (?P<field>(?:\.[A-Za-z_]\w*)+)|
    (?P<var>\$[A-Za-z_]\w*|\$)(?P<varfields>(?:\.[A-Za-z_]\w*)*)|
    (?P<dot>\.)|
    (?P<ident>[A-Za-z_]\w*)|
    (?P<pipe>\|)|
    (?P<lparen>\()|
    (?P<rparen>\))(?P<pfields>(?:\.[A-Za-z_]\w*)*)|
    (?P<comma>,)|
    (?P<assign>=)
    )""",
    re.VERBOSE,
)


def _tokenize(source: str) -> list[tuple[str, Any]]:
    tokens: list[tuple[str, Any]] = []
    pos = 0
    source = source.rstrip()
    while pos < len(source):
        m = _TOKEN.match(source, pos)
        if not m or m.end() == pos:
            raise TemplateError(f"template: unexpected {source[pos:].strip()[:20]!r} in command")
        kind = m.lastgroup
        if kind == "varfields":
            kind = "var"
        if kind == "pfields":
            kind = "rparen"
        if kind == "str":
            tokens.append(("lit", json.loads(m.group("str"))))
        elif kind == "raw":
            tokens.append(("lit", m.group("raw")[1:-1]))
        elif kind == "char":
            tokens.append(("lit", ord(json.loads('"' + m.group("char")[1:-1] + '"'))))
        elif kind == "num":
            text = m.group("num")
            tokens.append(("lit", int(text, 0) if re.fullmatch(r"[-+]?(0[xX][0-9a-fA-F]+|\d+)", text) else float(text)))
        elif kind == "field":
            tokens.append(("field", m.group("field")[1:].split(".")))
        elif kind == "var":
            chain = m.group("varfields")
            tokens.append(("var", (m.group("var"), chain[1:].split(".") if chain else [])))
        elif kind == "rparen":
            chain = m.group("pfields")
            tokens.append(("rparen", chain[1:].split(".") if chain else []))
        else:
            tokens.append((kind, m.group(kind)))
        pos = m.end()
    return tokens


class _Parser:
    def __init__(self, source: str, functions: dict[str, Callable]) -> None:
        self.source = source
        self.functions = functions

    def parse(self) -> list:
        pieces = self._split(self.source)
        nodes, _, end = self._block(pieces, 0, ())
        if end is not None:
            raise TemplateError(f"template: unexpected {{{{{end}}}}}")
        return nodes

    @staticmethod
    def _split(source: str) -> list[tuple[str, str]]:
        """Split into ("text", s) and ("action", s) with trim markers applied."""
        out: list[tuple[str, str]] = []
        pos = 0
        while True:
            start = source.find("{{", pos)
            if start < 0:
                out.append(("text", source[pos:]))
                break
            text = source[pos:start]
            inner_start = start + 2
            if source.startswith("- ", inner_start) or source.startswith("-\t", inner_start) or source.startswith("-\n", inner_start):
                text = text.rstrip(" \t\r\n")
                inner_start += 1
            if source[inner_start:].lstrip().startswith("/*"):
                close = source.find("*/", inner_start)
                if close < 0:
                    raise TemplateError("template: unclosed comment")
                end = source.find("}}", close)
            else:
                end = _find_action_end(source, inner_start)
            if end < 0:
                raise TemplateError("template: unclosed action")
            inner = source[inner_start:end]
            pos = end + 2
            if inner.endswith((" -", "\t-", "\n-")):
                inner = inner[:-1]
                while pos < len(source) and source[pos] in " \t\r\n":
                    pos += 1
            out.append(("text", text))
            if not inner.strip().startswith("/*"):
                out.append(("action", inner.strip()))
        return [p for p in out if p != ("text", "")]

    def _block(self, pieces: list, i: int, terminators: tuple) -> tuple[list, int, str | None]:
        nodes: list = []
        while i < len(pieces):
            kind, body = pieces[i]
            i += 1
            if kind == "text":
                nodes.append(_Text(body))
                continue
            word = body.split(None, 1)[0] if body else ""
            if word in ("end", "else") and (word in terminators):
                return nodes, i, body
            if word in ("end", "else"):
                raise TemplateError(f"template: unexpected {{{{{word}}}}}")
            if word in ("if", "range", "with"):
                pipeline = self._pipeline(body[len(word):])
                inner, i, stop = self._block(pieces, i, ("end", "else"))
                orelse: list = []
                if stop is None:
                    raise TemplateError(f"template: unexpected EOF in {word}")
                if stop != "end":
                    rest = stop[4:].strip()
                    if rest.startswith("if") and word == "if":
                        # else if: parse as nested if that consumes the shared {{end}}
                        nested_pipe = self._pipeline(rest[2:])
                        nested_then, i, stop2 = self._block(pieces, i, ("end", "else"))
                        nested = _If(nested_pipe, nested_then)
                        while stop2 is not None and stop2 != "end":
                            rest2 = stop2[4:].strip()
                            if rest2.startswith("if"):
                                deeper_pipe = self._pipeline(rest2[2:])
                                deeper_then, i, stop2 = self._block(pieces, i, ("end", "else"))
                                deeper = _If(deeper_pipe, deeper_then)
                                _last_if(nested).orelse = [deeper]
                            else:
                                tail, i, stop2 = self._block(pieces, i, ("end",))
                                _last_if(nested).orelse = tail
                        if stop2 is None:
                            raise TemplateError("template: unexpected EOF in if")
                        orelse = [nested]
                    else:
                        orelse, i, stop = self._block(pieces, i, ("end",))
                        if stop is None:
                            raise TemplateError(f"template: unexpected EOF in {word}")
                cls = {"if": _If, "range": _Range, "with": _With}[word]
                nodes.append(cls(pipeline, inner, orelse))
                continue
            if word in ("template", "define", "block", "break", "continue"):
                raise TemplateError(f"template: {{{{{word}}}}} is not supported by this evaluator")
            nodes.append(_Action(self._pipeline(body)))
        return nodes, i, None

    def _pipeline(self, text: str) -> _Pipeline:
        tokens = _tokenize(text)
        pipeline, rest = self._parse_pipeline(tokens, 0)
        if rest != len(tokens):
            raise TemplateError(f"template: unexpected {tokens[rest][1]!r} in operand")
        return pipeline

    def _parse_pipeline(self, tokens: list, i: int) -> tuple[_Pipeline, int]:
        declare: list[str] = []
        assign = False
        # variable declarations: $x := ...  or  $i, $v := ...
        j = i
        names: list[str] = []
        while j < len(tokens) and tokens[j][0] == "var" and not tokens[j][1][1]:
            names.append(tokens[j][1][0])
            if j + 1 < len(tokens) and tokens[j + 1][0] == "comma":
                j += 2
                continue
            j += 1
            break
        if names and j < len(tokens) and tokens[j][0] in ("declare", "assign"):
            declare, assign, i = names, tokens[j][0] == "assign", j + 1
        commands: list[list] = []
        current: list = []
        while i < len(tokens):
            kind, value = tokens[i]
            if kind == "pipe":
                if not current:
                    raise TemplateError("template: missing value for command")
                commands.append(current)
                current = []
                i += 1
                continue
            if kind == "rparen":
                break
            if kind == "lparen":
                inner, i = self._parse_pipeline(tokens, i + 1)
                if i >= len(tokens) or tokens[i][0] != "rparen":
                    raise TemplateError("template: unclosed left paren")
                current.append(("pipe", inner, tokens[i][1]))
                i += 1
                continue
            if kind == "ident":
                if value in ("true", "false"):
                    current.append(("lit", value == "true"))
                elif value == "nil":
                    current.append(("nil", None))
                elif value in self.functions:
                    current.append(("func", value))
                elif value in GO_BUILTINS or value in SPRIG_FUNCTIONS:
                    raise TemplateUnsupported(f"the template function {value!r} is not evaluated by gpuaas route")
                else:
                    raise TemplateError(f'template: function "{value}" not defined')
            elif kind in ("declare", "assign", "comma"):
                raise TemplateError(f"template: unexpected {value!r} in operand")
            else:
                current.append((kind, value))
            i += 1
        if current:
            commands.append(current)
        if not commands:
            raise TemplateError("template: missing value for command")
        return _Pipeline(commands, declare, assign), i


def _last_if(node: _If) -> _If:
    while node.orelse and len(node.orelse) == 1 and isinstance(node.orelse[0], _If):
        node = node.orelse[0]
    return node


def _find_action_end(source: str, pos: int) -> int:
    """Index of the `}}` closing an action, skipping over quoted strings."""
    i = pos
    while i < len(source):
        c = source[i]
        if c in "\"'`":
            close = i + 1
            while close < len(source) and source[close] != c:
                close += 2 if source[close] == "\\" and c != "`" else 1
            i = close + 1
            continue
        if source.startswith("}}", i):
            return i
        i += 1
    return -1


# ---------------------------------------------------------------------------------------------
# Execution


class _Scope:
    def __init__(self, dot: Any) -> None:
        self.vars: list[dict[str, Any]] = [{"$": dot}]

    def lookup(self, name: str) -> Any:
        for frame in reversed(self.vars):
            if name in frame:
                return frame[name]
        raise TemplateError(f"template: undefined variable: {name}")

    def set(self, name: str, value: Any) -> None:
        for frame in reversed(self.vars):
            if name in frame:
                frame[name] = value
                return
        raise TemplateError(f"template: undefined variable: {name}")


def _truth(value: Any) -> bool:
    if value is None or value is NO_VALUE:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    if isinstance(value, (str, bytes, list, dict, tuple)):
        return len(value) > 0
    return True


def _field(value: Any, name: str, chain_text: str) -> Any:
    """text/template evalField: a missing key is the invalid value, and a field of the invalid value
    is still the invalid value (printed `<no value>`); a field of a present JSON null is an error."""
    if isinstance(value, dict):
        return value.get(name, NO_VALUE)
    if value is NO_VALUE:
        return NO_VALUE
    if value is None:
        raise TemplateError(f"template: executing at <{chain_text}>: nil pointer evaluating interface {{}}.{name}")
    raise TemplateError(
        f"template: executing at <{chain_text}>: can't evaluate field {name} in type {_go_type(value)}"
    )


def _go_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, int):
        return "int"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "[]interface {}"
    if isinstance(value, dict):
        return "map[string]interface {}"
    return "interface {}"


class Template:
    """A parsed template: parse once when the Sensor loads, execute per event."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.nodes = _Parser(source, FUNCTIONS).parse()

    def execute(self, data: Any) -> str:
        out: list[str] = []
        self._run(self.nodes, data, _Scope(data), out)
        return "".join(out)

    def _run(self, nodes: list, dot: Any, scope: _Scope, out: list[str]) -> None:
        for node in nodes:
            if isinstance(node, _Text):
                out.append(node.text)
            elif isinstance(node, _Action):
                value = self._pipeline(node.pipeline, dot, scope)
                if not node.pipeline.declare:
                    out.append(_print(value))
            elif isinstance(node, _If):
                scope.vars.append({})
                try:
                    if _truth(self._pipeline(node.pipeline, dot, scope)):
                        self._run(node.then, dot, scope, out)
                    else:
                        self._run(node.orelse, dot, scope, out)
                finally:
                    scope.vars.pop()
            elif isinstance(node, _With):
                scope.vars.append({})
                try:
                    value = self._pipeline(node.pipeline, dot, scope)
                    if _truth(value):
                        self._run(node.body, value, scope, out)
                    else:
                        self._run(node.orelse, dot, scope, out)
                finally:
                    scope.vars.pop()
            elif isinstance(node, _Range):
                self._range(node, dot, scope, out)

    def _range(self, node: _Range, dot: Any, scope: _Scope, out: list[str]) -> None:
        pipe = node.pipeline
        value = self._pipeline(_Pipeline(pipe.commands), dot, scope)
        if isinstance(value, dict):
            items = [(k, value[k]) for k in sorted(value)]
        elif isinstance(value, (list, tuple, str)) and not isinstance(value, str):
            items = list(enumerate(value))
        elif isinstance(value, int) and not isinstance(value, bool):
            items = [(i, i) for i in range(value)]
        elif value is None or value is NO_VALUE:
            items = []
        else:
            raise TemplateError(f"template: range can't iterate over {go_sprint(value)}")
        if not items:
            self._run(node.orelse, dot, scope, out)
            return
        for key, elem in items:
            frame: dict[str, Any] = {}
            if len(pipe.declare) == 1:
                frame[pipe.declare[0]] = elem
            elif len(pipe.declare) == 2:
                frame[pipe.declare[0]], frame[pipe.declare[1]] = key, elem
            scope.vars.append(frame)
            try:
                self._run(node.body, elem, scope, out)
            finally:
                scope.vars.pop()

    def _pipeline(self, pipe: _Pipeline, dot: Any, scope: _Scope) -> Any:
        value: Any = _UNSET
        for command in pipe.commands:
            value = self._command(command, dot, scope, value)
        if pipe.declare:
            if pipe.assign:
                scope.set(pipe.declare[-1], value)
            else:
                scope.vars[-1][pipe.declare[-1]] = value
        return value

    def _command(self, command: list, dot: Any, scope: _Scope, piped: Any) -> Any:
        head = command[0]
        if head[0] == "func":
            args = [self._operand(op, dot, scope) for op in command[1:]]
            if piped is not _UNSET:
                args.append(piped)
            fn = FUNCTIONS[head[1]]
            args = _check_arguments(head[1], args)
            try:
                return fn(*args)
            except TemplateError:
                raise
            except GoRegexpUnsupported as exc:
                raise TemplateUnsupported(str(exc)) from None
            except TypeError as exc:
                raise TemplateError(f"template: error calling {head[1]}: wrong number of args ({exc})") from None
            except (ValueError, KeyError, IndexError, ZeroDivisionError) as exc:
                raise TemplateError(f"template: error calling {head[1]}: {exc}") from None
        if len(command) > 1 or piped is not _UNSET:
            raise TemplateError(f"template: can't give argument to non-function {_describe(head)}")
        return self._operand(head, dot, scope)

    def _operand(self, op: tuple, dot: Any, scope: _Scope) -> Any:
        kind = op[0]
        if kind == "lit":
            return op[1]
        if kind == "nil":
            return None
        if kind == "dot":
            return dot
        if kind == "field":
            value = dot
            for i, name in enumerate(op[1]):
                value = _field(value, name, "." + ".".join(op[1][: i + 1]))
            return value
        if kind == "var":
            name, chain = op[1]
            value = scope.lookup(name)
            for i, fname in enumerate(chain):
                value = _field(value, fname, name + "." + ".".join(chain[: i + 1]))
            return value
        if kind == "pipe":
            value = self._pipeline(op[1], dot, scope)
            for i, fname in enumerate(op[2]):
                value = _field(value, fname, "(...)." + ".".join(op[2][: i + 1]))
            return value
        if kind == "func":
            return FUNCTIONS[op[1]]()
        raise TemplateError(f"template: unexpected operand {op!r}")


_UNSET = object()


def _describe(op: tuple) -> str:
    return str(op[1])


def _print(value: Any) -> str:
    if value is NO_VALUE:
        return "<no value>"
    if value is None:
        return "<no value>"
    return go_sprint(value)


# ---------------------------------------------------------------------------------------------
# Functions: Go's builtins and the sprig functions sensors commonly use.


def _basic_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if value is None or value is NO_VALUE:
        return "nil"
    return "other"


def _kind_for_comparison(value: Any) -> str:
    """basicKind after indirectInterface: a missing key and a JSON null are both the invalid value."""
    if value is None or value is NO_VALUE:
        return "invalid"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    return "map" if isinstance(value, dict) else "slice"


def _type_name(value: Any) -> str:
    return _go_type(value)


def _eq(a: Any, *others: Any) -> bool:
    """text/template eq: the first argument against each other one (funcs.go)."""
    if not others:
        raise TemplateError("template: error calling eq: missing argument for comparison")
    k1 = _kind_for_comparison(a)
    for b in others:
        k2 = _kind_for_comparison(b)
        truth = False
        basic = ("bool", "int", "float", "string")
        if (k1 in basic or k2 in basic) and k1 != k2:
            if k1 != "invalid" and k2 != "invalid":
                raise TemplateError(f"template: error calling eq: incompatible types for comparison: "
                                    f"{_type_name(a)} and {_type_name(b)}")
        elif k1 in basic:
            truth = a == b
        else:  # maps, slices and the invalid value
            if k1 != k2 and "invalid" not in (k1, k2):
                raise TemplateError("template: error calling eq: non-comparable types")
            if k1 == "invalid" or k2 == "invalid":
                truth = k1 == k2
            else:
                raise TemplateError(f"template: error calling eq: non-comparable type {go_sprint(b)}: "
                                    f"{_type_name(b)}")
        if truth:
            return True
    return False


def _ne(a: Any, b: Any) -> bool:
    return not _eq(a, b)


def _lt(a: Any, b: Any) -> bool:
    k1, k2 = _kind_for_comparison(a), _kind_for_comparison(b)
    for kind in (k1, k2):
        if kind not in ("bool", "int", "float", "string"):
            raise TemplateError("template: error calling lt: invalid type for comparison")
    if k1 != k2:
        raise TemplateError(f"template: error calling lt: incompatible types for comparison: {_type_name(a)} and "
                            f"{_type_name(b)}")
    if k1 == "bool":
        raise TemplateError("template: error calling lt: invalid type for comparison")
    if k1 == "string":
        return a.encode("utf-8") < b.encode("utf-8")
    return a < b


def _le(a: Any, b: Any) -> bool:
    return _lt(a, b) or _eq(a, b)


def _index(value: Any, *keys: Any) -> Any:
    for key in keys:
        if isinstance(value, dict):
            if not isinstance(key, str):
                raise TemplateError("template: error calling index: value has type int; should be string")
            value = value.get(key, NO_VALUE)
        elif isinstance(value, (list, str)):
            if not isinstance(key, int) or isinstance(key, bool):
                raise TemplateError(f"template: error calling index: cannot index slice/array with type {_go_type(key)}")
            if not 0 <= key < len(value):
                raise TemplateError(f"template: error calling index: index out of range: {key}")
            value = value[key] if isinstance(value, list) else ord(value[key])
        elif value is None or value is NO_VALUE:
            raise TemplateError("template: error calling index: index of untyped nil")
        else:
            raise TemplateError(f"template: error calling index: can't index item of type {_go_type(value)}")
    return value


def _len(value: Any) -> int:
    if isinstance(value, (str, list, dict, tuple)):
        return len(value.encode() if isinstance(value, str) else value)
    raise TemplateError(f"template: error calling len: len of type {_go_type(value)}")


def _printf(fmt: str, *args: Any) -> str:
    """fmt.Sprintf for the verbs v, s, d, q, f, e, g, t and %% (other verbs: not evaluated)."""
    out: list[str] = []
    arg_i = 0
    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c != "%":
            out.append(c)
            i += 1
            continue
        m = re.match(r"%([-+# 0]*)(\d*)(?:\.(\d*))?(.?)", fmt[i:], re.DOTALL)
        assert m is not None
        i += m.end()
        flags, verb = m.group(1), m.group(4)
        if verb == "%":
            out.append("%")
            continue
        if verb == "":
            out.append("%!(NOVERB)")
            continue
        if verb not in "vsdqfegt":
            raise TemplateUnsupported(f"printf verb %{verb} is not evaluated by gpuaas route")
        if arg_i >= len(args):
            out.append(f"%!{verb}(MISSING)")
            continue
        arg = args[arg_i]
        arg_i += 1
        arg = None if arg is NO_VALUE else arg
        prec = None if m.group(3) is None else int(m.group(3) or "0")
        text = _format_verb(verb, arg, prec, flags)
        width = int(m.group(2)) if m.group(2) else 0
        if width and len(text) < width:
            if "-" in flags:
                text = text.ljust(width)
            elif "0" in flags and verb in "dfeg" and _is_number(arg):
                sign = text[0] if text[:1] in "+-" else ""
                text = sign + text[len(sign):].rjust(width - len(sign), "0")
            else:
                text = text.rjust(width)
        out.append(text)
    if arg_i < len(args):
        out.append("%!(EXTRA " + ", ".join(_bad_verb_operand(a) for a in args[arg_i:]) + ")")
    return "".join(out)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _bad_verb_operand(value: Any) -> str:
    value = None if value is NO_VALUE else value
    return "<nil>" if value is None else f"{_go_type(value)}={go_sprint(value)}"


def _format_verb(verb: str, arg: Any, prec: int | None, flags: str) -> str:
    """One operand under one verb, as fmt prints it (maps and slices format their elements)."""
    if arg is None:
        return "<nil>" if verb == "v" else f"%!{verb}(<nil>)"
    if verb == "v":
        return go_sprint(arg)
    if isinstance(arg, dict):
        inner = " ".join(f"{_format_verb(verb, k, prec, flags)}:{_format_verb(verb, arg[k], prec, flags)}"
                         for k in sorted(arg))
        return f"map[{inner}]"
    if isinstance(arg, list):
        return "[" + " ".join(_format_verb(verb, v, prec, flags) for v in arg) + "]"
    if verb == "s" and isinstance(arg, str):
        return arg if prec is None else arg[:prec]
    if verb == "q" and isinstance(arg, str):
        return go_quote(arg)
    if verb == "t" and isinstance(arg, bool):
        return "true" if arg else "false"
    if verb == "d" and isinstance(arg, int) and not isinstance(arg, bool):
        return ("+" if "+" in flags and arg >= 0 else "") + str(arg)
    if verb in "feg" and _is_number(arg) and isinstance(arg, float):
        if verb == "g" and prec is None:
            return go_sprint(arg)
        return format(arg, f"{'+' if '+' in flags else ''}.{6 if prec is None else prec}{verb}")
    return f"%!{verb}({_go_type(arg)}={go_sprint(arg)})"


def _sprint(*args: Any) -> str:
    out = []
    for i, arg in enumerate(args):
        arg = None if arg is NO_VALUE else arg
        if i and not isinstance(arg, str) and not isinstance(args[i - 1], str):
            out.append(" ")
        out.append(go_sprint(arg))
    return "".join(out)


def _empty(value: Any) -> bool:
    return not _truth(value)


def _default(default: Any, *given: Any) -> Any:
    if not given or _empty(given[0]):
        return default
    return given[0]


def _to_string(value: Any) -> str:
    if value is NO_VALUE or value is None:
        return "<nil>"
    return go_sprint(value)


def _to_int(value: Any) -> int:
    """spf13/cast ToInt64 (what sprig's int, int64, add, sub, ... use), errors ignored as sprig does."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value) or not -(2 ** 63) <= value < 2 ** 63:
            return -(2 ** 63)
        return int(value)
    if isinstance(value, str):
        return _go_parse_int(_trim_zero_decimal(value))
    return 0


def _trim_zero_decimal(text: str) -> str:
    """cast's trimZeroDecimal: "12.000" -> "12"."""
    found_zero = False
    for i in range(len(text), 0, -1):
        c = text[i - 1]
        if c == ".":
            if found_zero:
                return text[:i - 1]
        elif c == "0":
            found_zero = True
        else:
            return text
    return text


def _go_parse_int(text: str) -> int:
    """strconv.ParseInt(text, 0, 64), 0 on error: base prefixes, a leading 0 is octal, _ between digits."""
    match = re.fullmatch(r"([+-]?)(0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|0[0-7_]*|[1-9][0-9_]*)", text)
    if not match:
        return 0
    sign, digits = match.groups()
    if "_" in digits and (digits.endswith("_") or "__" in digits or re.match(r"^[1-9]", digits) is None
                          and not re.match(r"^0[xXbBoO]?_?[0-9a-fA-F]", digits)):
        return 0
    body = digits.replace("_", "")
    if len(body) > 1 and body[0] == "0" and body[1] not in "xXbBoO":
        number = int(body, 8)
    else:
        number = int(body, 0)
    number = -number if sign == "-" else number
    return number if -(2 ** 63) <= number < 2 ** 63 else 0


def _to_float(value: Any) -> float:
    """spf13/cast ToFloat64: numbers, bools, strconv.ParseFloat of strings; 0 otherwise."""
    from routing.gostrconv import GoNumberError, parse_float

    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return parse_float(value)
        except GoNumberError:
            return 0.0
    return 0.0


def _to_json(value: Any) -> str:
    return go_json_marshal(_plain(value))


def _plain(value: Any) -> Any:
    return None if value is NO_VALUE else value


def _b64dec(value: str) -> str:
    try:
        return base64.b64decode(value, validate=True).decode("utf-8", errors="replace")
    except (ValueError, TypeError) as exc:
        return str(exc)


def _trunc(n: int, value: str) -> str:
    if n < 0:
        return value[n:] if -n < len(value) else value
    return value[:n]


def _dig(*args: Any) -> Any:
    """sprig dig: keys..., default, map; its type assertions fail (an error) on anything but maps."""
    if len(args) < 3:
        raise TemplateError("template: error calling dig: dig needs at least three arguments")
    *keys, default, mapping = args
    if not isinstance(mapping, dict):
        raise TemplateError(f"template: error calling dig: interface conversion: interface {{}} is "
                            f"{'nil' if mapping is None else _go_type(mapping)}, not map[string]interface {{}}")
    if not all(isinstance(k, str) for k in keys):
        raise TemplateError("template: error calling dig: interface conversion: key is not string")
    value: Any = mapping
    for i, key in enumerate(keys):
        if not isinstance(value, dict):
            raise TemplateError(f"template: error calling dig: interface conversion: interface {{}} is "
                                f"{'nil' if value is None else _go_type(value)}, not map[string]interface {{}}")
        if key not in value:
            return default
        value = value[key]
        if i == len(keys) - 1:
            return value
    return value


def _ternary(true_value: Any, false_value: Any, condition: Any) -> Any:
    return true_value if condition else false_value


def _regex_replace_all(pattern: str, text: str, replacement: str) -> str:
    go_repl = re.sub(r"\$\{?(\w+)\}?", lambda m: "\\g<" + m.group(1) + ">", replacement)
    return compile_go_regexp(pattern).sub(go_repl, text)


def _split_list(sep: str, text: str) -> list[str]:
    return text.split(sep) if sep else list(text)


def _join(sep: str, values: Any) -> str:
    if isinstance(values, str):
        return values
    return sep.join(_to_string(v) for v in (values or []))


def go_upper(text: str) -> str:
    """strings.ToUpper: unicode.ToUpper rune by rune (simple mapping: ß stays ß, Python says SS)."""
    return "".join(u if len(u := c.upper()) == 1 else c for c in text)


def go_lower(text: str) -> str:
    """strings.ToLower: unicode.ToLower rune by rune (simple mapping)."""
    return "".join(u if len(u := c.lower()) == 1 else c for c in text)


def _go_title_rune(c: str) -> str:
    t = c.title()
    return t if len(t) == 1 else c


def _title(value: str) -> str:
    """strings.Title: the first letter of each word to title case; words are separated by anything
    but letters, digits and `_` (ASCII), or by Unicode spaces."""
    out = []
    previous = " "
    for c in value:
        if ord(previous) < 0x80:
            separator = not (previous.isalnum() or previous == "_")
        else:
            separator = previous.isspace()
        out.append(_go_title_rune(c) if separator else c)
        previous = c
    return "".join(out)


def _kebab(value: str) -> str:
    value = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", value)
    return re.sub(r"[\s_]+", "-", value).lower()


def _snake(value: str) -> str:
    value = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", value)
    return re.sub(r"[\s-]+", "_", value).lower()


def _quote(*values: Any) -> str:
    return " ".join(json.dumps(_to_string(v), ensure_ascii=False) for v in values if v is not None and v is not NO_VALUE)


def _squote(*values: Any) -> str:
    return " ".join("'" + _to_string(v) + "'" for v in values if v is not None and v is not NO_VALUE)


def _has_key(mapping: Any, key: str) -> bool:
    return isinstance(mapping, dict) and key in mapping


def _get(mapping: Any, key: str) -> Any:
    return mapping.get(key, "") if isinstance(mapping, dict) else ""


def _from_json(text: str) -> Any:
    try:
        return json.loads(text, parse_int=float)
    except ValueError:
        return {}


def _arith(op: Callable[[int, int], int]) -> Callable[..., int]:
    def fn(*values: Any) -> int:
        ints = [_to_int(v) for v in values]
        result = ints[0]
        for v in ints[1:]:
            result = op(result, v)
        return result

    return fn


def _go_div(a: int, b: int) -> int:
    if b == 0:
        raise ZeroDivisionError("integer divide by zero")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _go_mod(a: int, b: int) -> int:
    if b == 0:
        raise ZeroDivisionError("integer divide by zero")
    return a - b * _go_div(a, b)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    # text/template builtins
    "and": lambda *a: next((v for v in a if not _truth(v)), a[-1]),
    "or": lambda *a: next((v for v in a if _truth(v)), a[-1]),
    "not": lambda v: not _truth(v),
    "len": _len,
    "index": _index,
    "print": _sprint,
    "printf": _printf,
    "println": lambda *a: " ".join(go_sprint(_plain(v)) for v in a) + "\n",
    "eq": _eq,
    "ne": _ne,
    "lt": _lt,
    "le": _le,
    "gt": lambda a, b: not _le(a, b),
    "ge": lambda a, b: not _lt(a, b),
    # sprig: defaults and flow
    "default": _default,
    "empty": _empty,
    "coalesce": lambda *a: next((v for v in a if _truth(v)), None),
    "ternary": _ternary,
    # sprig: strings
    "toString": _to_string,
    "upper": lambda s: go_upper(s),
    "lower": lambda s: go_lower(s),
    "title": _title,
    "trim": lambda s: str(s).strip(),
    "trimAll": lambda chars, s: str(s).strip(chars),
    "trimPrefix": lambda p, s: s.removeprefix(p),
    "trimSuffix": lambda p, s: s[: -len(p)] if p and s.endswith(p) else s,
    "trunc": _trunc,
    "replace": lambda old, new, s: str(s).replace(old, new),
    "contains": lambda sub, s: sub in s,
    "hasPrefix": lambda p, s: str(s).startswith(p),
    "hasSuffix": lambda p, s: str(s).endswith(p),
    "quote": _quote,
    "squote": _squote,
    "cat": lambda *a: " ".join(go_sprint(v) for v in a if v is not None and v is not NO_VALUE),
    "nospace": lambda s: re.sub(r"\s", "", s),
    "kebabcase": _kebab,
    "snakecase": _snake,
    "repeat": lambda n, s: s * n,
    "substr": lambda start, end, s: s[start:end] if end >= 0 else s[start:],
    "split": lambda sep, s: {f"_{i}": part for i, part in enumerate(s.split(sep))},
    "splitList": _split_list,
    "join": _join,
    "b64enc": lambda s: base64.b64encode(str(s).encode()).decode(),
    "b64dec": _b64dec,
    "sha256sum": lambda s: hashlib.sha256(str(s).encode()).hexdigest(),
    "sha1sum": lambda s: hashlib.sha1(str(s).encode()).hexdigest(),
    "regexMatch": lambda p, s: compile_go_regexp(p).search(s) is not None,
    "regexFind": lambda p, s: (m.group(0) if (m := compile_go_regexp(p).search(s)) else ""),
    "regexReplaceAll": _regex_replace_all,
    # sprig: conversions and numbers
    "int": _to_int,
    "int64": _to_int,
    "float64": _to_float,
    "atoi": _to_int,
    "add": _arith(lambda a, b: a + b),
    "sub": _arith(lambda a, b: a - b),
    "mul": _arith(lambda a, b: a * b),
    "div": _arith(_go_div),
    "mod": _arith(_go_mod),
    "max": _arith(max),
    "min": _arith(min),
    "add1": lambda v: _to_int(v) + 1,
    # sprig: JSON
    "toJson": _to_json,
    "mustToJson": _to_json,
    "toRawJson": lambda v: go_json_marshal(_plain(v), escape_html=False),
    "toPrettyJson": lambda v: go_json_marshal(_plain(v), indent="  "),
    "fromJson": _from_json,
    # sprig: lists and dicts
    "list": lambda *a: list(a),
    "first": lambda v: v[0] if v else None,
    "last": lambda v: v[-1] if v else None,
    "rest": lambda v: v[1:] if v else [],
    "has": lambda needle, haystack: needle in (haystack or []),
    "uniq": lambda v: list(dict.fromkeys(v)),
    "dict": lambda *a: {str(a[i]): (a[i + 1] if i + 1 < len(a) else "") for i in range(0, len(a), 2)},
    "get": _get,
    "hasKey": _has_key,
    "keys": lambda *maps: [k for m in maps for k in m],
    "pluck": lambda key, *maps: [m[key] for m in maps if isinstance(m, dict) and key in m],
    "dig": _dig,
}


# Every function argo-events' templates can call (text/template's builtins and sprig v3.3.0's
# FuncMap): a template using one that FUNCTIONS does not implement is "not evaluated", never a
# parse error (which would make a parameter fall back to its default: a guess).
GO_BUILTINS = frozenset({"and", "call", "html", "index", "js", "len", "not", "or", "print", "printf", "println",
                         "slice", "urlquery", "eq", "ge", "gt", "le", "lt", "ne"})
SPRIG_FUNCTIONS = frozenset({
    "abbrev", "abbrevboth", "add", "add1", "add1f", "addf", "adler32sum", "ago", "all", "any", "append",
    "atoi", "b32dec", "b32enc", "b64dec", "b64enc", "base", "bcrypt", "biggest", "buildCustomCert",
    "camelcase", "cat", "ceil", "chunk", "clean", "coalesce", "compact", "concat", "contains", "date",
    "dateInZone", "dateModify", "date_in_zone", "date_modify", "decryptAES", "deepCopy", "deepEqual",
    "default", "derivePassword", "dict", "dig", "dir", "div", "divf", "duration", "durationRound", "empty",
    "encryptAES", "env", "expandenv", "ext", "fail", "first", "float64", "floor", "fromJson", "genCA",
    "genCAWithKey", "genPrivateKey", "genSelfSignedCert", "genSelfSignedCertWithKey", "genSignedCert",
    "genSignedCertWithKey", "get", "getHostByName", "has", "hasKey", "hasPrefix", "hasSuffix", "hello",
    "htmlDate", "htmlDateInZone", "htpasswd", "indent", "initial", "initials", "int", "int64", "isAbs", "join",
    "kebabcase", "keys", "kindIs", "kindOf", "last", "list", "lower", "max", "maxf", "merge", "mergeOverwrite",
    "min", "minf", "mod", "mul", "mulf", "mustAppend", "mustChunk", "mustCompact", "mustDateModify",
    "mustDeepCopy", "mustFirst", "mustFromJson", "mustHas", "mustInitial", "mustLast", "mustMerge",
    "mustMergeOverwrite", "mustPrepend", "mustRegexFind", "mustRegexFindAll", "mustRegexMatch",
    "mustRegexReplaceAll", "mustRegexReplaceAllLiteral", "mustRegexSplit", "mustRest", "mustReverse",
    "mustSlice", "mustToDate", "mustToJson", "mustToPrettyJson", "mustToRawJson", "mustUniq", "mustWithout",
    "must_date_modify", "nindent", "nospace", "now", "omit", "osBase", "osClean", "osDir", "osExt", "osIsAbs",
    "pick", "pluck", "plural", "prepend", "quote", "randAlpha", "randAlphaNum", "randAscii", "randBytes",
    "randInt", "randNumeric", "regexFind", "regexFindAll", "regexMatch", "regexQuoteMeta", "regexReplaceAll",
    "regexReplaceAllLiteral", "regexSplit", "repeat", "replace", "rest", "reverse", "round", "semver",
    "semverCompare", "seq", "set", "sha1sum", "sha256sum", "sha512sum", "shuffle", "slice", "snakecase",
    "sortAlpha", "split", "splitList", "splitn", "squote", "sub", "subf", "substr", "swapcase", "ternary",
    "title", "toDate", "toDecimal", "toJson", "toPrettyJson", "toRawJson", "toString", "toStrings", "trim",
    "trimAll", "trimPrefix", "trimSuffix", "trimall", "trunc", "tuple", "typeIs", "typeIsLike", "typeOf",
    "uniq", "unixEpoch", "unset", "until", "untilStep", "untitle", "upper", "urlJoin", "urlParse", "uuidv4",
    "values", "without", "wrap", "wrapWith",
})


_CACHE: dict[str, Template] = {}


def parse_template(source: str) -> Template:
    """Parse (and cache) a template; raises TemplateError like Go's Parse would."""
    template = _CACHE.get(source)
    if template is None:
        template = Template(source)
        if len(_CACHE) < 4096:
            _CACHE[source] = template
    return template


# Go signatures of the functions above (text/template checks every argument against them before
# the call: `lower` on a map, `trunc` with a float64 count, `get` on a list are errors, not
# conversions). "any" is interface{} (a missing key arrives as nil); "value" is a builtin's
# reflect.Value (passed as is); a trailing "..." makes the last type variadic.
SIGNATURES: dict[str, tuple[str, ...]] = {
    "and": ("value", "value..."), "or": ("value", "value..."), "not": ("value",), "len": ("value",),
    "index": ("value", "value..."), "print": ("any...",), "printf": ("string", "any..."), "println": ("any...",),
    "eq": ("value", "value..."), "ne": ("value", "value"), "lt": ("value", "value"), "le": ("value", "value"),
    "gt": ("value", "value"), "ge": ("value", "value"),
    "default": ("any", "any..."), "empty": ("any",), "coalesce": ("any...",), "ternary": ("any", "any", "bool"),
    "toString": ("any",), "upper": ("string",), "lower": ("string",), "title": ("string",), "trim": ("string",),
    "trimAll": ("string", "string"), "trimPrefix": ("string", "string"), "trimSuffix": ("string", "string"),
    "trunc": ("int", "string"), "replace": ("string", "string", "string"), "contains": ("string", "string"),
    "hasPrefix": ("string", "string"), "hasSuffix": ("string", "string"), "quote": ("any...",),
    "squote": ("any...",), "cat": ("any...",), "nospace": ("string",), "kebabcase": ("string",),
    "snakecase": ("string",), "repeat": ("int", "string"), "substr": ("int", "int", "string"),
    "split": ("string", "string"), "splitList": ("string", "string"), "join": ("string", "any"),
    "b64enc": ("string",), "b64dec": ("string",), "sha256sum": ("string",), "sha1sum": ("string",),
    "regexMatch": ("string", "string"), "regexFind": ("string", "string"),
    "regexReplaceAll": ("string", "string", "string"), "int": ("any",), "int64": ("any",), "float64": ("any",),
    "atoi": ("string",), "add": ("any...",), "sub": ("any", "any"), "mul": ("any", "any..."), "div": ("any", "any"),
    "mod": ("any", "any"), "max": ("any", "any..."), "min": ("any", "any..."), "add1": ("any",),
    "toJson": ("any",), "mustToJson": ("any",), "toRawJson": ("any",), "toPrettyJson": ("any",),
    "fromJson": ("string",), "list": ("any...",), "first": ("any",), "last": ("any",), "rest": ("any",),
    "has": ("any", "any"), "uniq": ("any",), "dict": ("any...",), "get": ("map", "string"),
    "hasKey": ("map", "string"), "keys": ("map...",), "pluck": ("string", "map..."), "dig": ("any...",),
}


def _check_arguments(name: str, args: list[Any]) -> list[Any]:
    """text/template's evalArg/validateType for one call: arity, then each argument's type."""
    signature = SIGNATURES.get(name)
    if signature is None:
        return args
    variadic = signature[-1].endswith("...")
    fixed = signature[:-1] if variadic else signature
    if len(args) < len(fixed) or (not variadic and len(args) != len(fixed)):
        want = f"at least {len(fixed)}" if variadic else str(len(fixed))
        raise TemplateError(f"template: wrong number of args for {name}: want {want} got {len(args)}")
    checked = []
    for i, arg in enumerate(args):
        kind = fixed[i] if i < len(fixed) else signature[-1][:-3]
        checked.append(_check_type(name, kind, arg))
    return checked


def _check_type(name: str, kind: str, value: Any) -> Any:
    if kind == "value":
        return value
    if kind == "any":
        return None if value is NO_VALUE else value
    if value is NO_VALUE and kind == "map":  # a missing key is the zero map
        return None
    if value is NO_VALUE:
        raise TemplateError(f"template: executing at <{name}>: invalid value; expected {_go_param(kind)}")
    ok = {"string": isinstance(value, str), "bool": isinstance(value, bool),
          "int": isinstance(value, int) and not isinstance(value, bool), "map": isinstance(value, dict)}[kind]
    if not ok:
        got = "interface {}" if value is None else _go_type(value)
        raise TemplateError(f"template: executing at <{name}>: wrong type for value; expected "
                            f"{_go_param(kind)}; got {got}")
    return value


def _go_param(kind: str) -> str:
    return {"map": "map[string]interface {}"}.get(kind, kind)

