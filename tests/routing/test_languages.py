"""The small languages inside a Sensor: Go text/template (+sprig), govaluate, RE2, Go printing."""

from __future__ import annotations

from typing import Any

import pytest

from routing.gofmt import go_float_g, go_json_marshal, go_sprint
from routing.goregexp import GoRegexpError, go_match
from routing.gotemplate import TemplateError, parse_template
from routing.govaluate import Expression, ExpressionError

INPUT = {"Input": {"name": "w1", "count": 4.0, "big": 1e6, "labels": {"b": "2", "a": "1"},
                   "conds": [{"type": "Admitted", "status": "True"}, {"type": "Evicted", "status": "False"}],
                   "nothing": None, "flag": True}}


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ .Input.name }}", "w1"),
        ("{{ .Input.count }} {{ .Input.big }}", "4 1e+06"),
        ("{{ .Input.labels }}", "map[a:1 b:2]"),
        ("{{ .Input.nothing }}", "<no value>"),
        ("{{ .Input.missing }}", "<no value>"),
        ("{{ .Input.missing.deeper }}", "<no value>"),  # a field of a missing key is still no value
        ("{{ toJson .Input.missing.deeper }}", "null"),
        ("{{- range .Input.conds }}{{ if eq .status \"True\" }}{{ .type }} {{ end }}{{ end -}}", "Admitted "),
        ("{{ range $i, $c := .Input.conds }}{{ $i }}={{ $c.type }};{{ end }}", "0=Admitted;1=Evicted;"),
        ("{{ range $k, $v := .Input.labels }}{{ $k }}{{ $v }}{{ end }}", "a1b2"),
        ("{{ with .Input.labels }}{{ .a }}{{ else }}none{{ end }}", "1"),
        ("{{ with .Input.missing }}{{ . }}{{ else }}none{{ end }}", "none"),
        ("{{ if .Input.nothing }}x{{ else if .Input.flag }}flag{{ else }}y{{ end }}", "flag"),
        ('{{ printf "%s/%v" .Input.name .Input.count }}', "w1/4"),
        ("{{ .Input.name | upper | printf \"%s!\" }}", "W1!"),
        ('{{ default "d" .Input.missing }} {{ default "d" .Input.name }}', "d w1"),
        ("{{ len .Input.conds }} {{ index .Input.conds 1 \"type\" }}", "2 Evicted"),
        ("{{ toJson .Input.labels }}", '{"a":"1","b":"2"}'),
        ('{{ b64enc .Input.name }} {{ "dzE=" | b64dec }}', "dzE= w1"),
        ('{{ trunc 3 "abcdef" }} {{ replace "-" "_" "a-b" }} {{ trimPrefix "job-" "job-x" }}', "abc a_b x"),
        ('{{ splitList "," "a,b" | join "+" }} {{ hasPrefix "w" .Input.name }}', "a+b true"),
        ('{{ regexReplaceAll "([a-z])([0-9])" .Input.name "${2}${1}" }}', "1w"),
        ("{{ add 1 2 }} {{ sub 5 7 }} {{ int .Input.count }}", "3 -2 4"),
        ("{{ $n := .Input.name }}{{ $n = \"x\" }}{{ $n }}", "x"),
        ("{{/* a comment */}}a {{- \" b\" }}", "a b"),
        ("{{ and .Input.flag .Input.name }} {{ or .Input.nothing \"z\" }} {{ not .Input.flag }}", "w1 z false"),
    ],
)
def test_template_renders_like_go(template: str, expected: str) -> None:
    assert parse_template(template).execute(INPUT) == expected


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{{ .Input.nothing.deeper }}", "nil pointer evaluating interface {}.deeper"),
        ("{{ .Input.name.deeper }}", "can't evaluate field deeper in type string"),
        ("{{ eq .Input.count 4 }}", "incompatible types for comparison"),
        ("{{ index .Input.conds 5 }}", "index out of range"),
    ],
)
def test_template_execution_errors_like_go(template: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message.replace("{", r"\{").replace("}", r"\}")):
        parse_template(template).execute(INPUT)


@pytest.mark.parametrize("template", ["{{ nosuchfunc 1 }}", "{{ if true }}x", "{{ end }}", "{{ .Input.a"])
def test_template_parse_errors(template: str) -> None:
    with pytest.raises(TemplateError):
        parse_template(template)


@pytest.mark.parametrize(
    ("expression", "params", "expected"),
    [
        ('a == "x" && n >= 2', {"a": "x", "n": 2.0}, True),
        ("n + 1 == 3", {"n": 2.0}, True),
        ('a + n', {"a": "v", "n": 2.0}, "v2"),
        ("n * 2 - 1 / 4", {"n": 2.0}, 3.75),
        ("(n > 1 || a == \"y\") && !f", {"n": 0.0, "a": "y", "f": False}, True),
        ('a =~ "^ad"', {"a": "admitted"}, True),
        ('a !~ "mit"', {"a": "admitted"}, False),
        ("a < b", {"a": "abc", "b": "abd"}, True),
        ('n == "2"', {"n": 2.0}, False),
        ("n in (1, 2, 3)", {"n": 2.0}, True),
        ("f ? 'yes' : 'no'", {"f": True}, "yes"),
        ("x ?? 'fallback'", {"x": None}, "fallback"),
        ("n > 1 && n < 3", {"n": 2.0}, True),
        ("2 ** 3", {}, 8.0),
        ("[with-dash] == 1", {"with-dash": 1.0}, True),
        ("-n", {"n": 2.0}, -2.0),
        ("'2026-12-01T00:00:00Z' == 1796083200", {}, True),  # date literals become Unix seconds
        ("'2026-12-01' < t", {"t": 1796083201.0}, True),
        ("d == '2026-12-01'", {"d": "2026-12-01"}, False),  # the string field is not converted
    ],
)
def test_govaluate_expressions(expression: str, params: dict[str, Any], expected: Any) -> None:
    assert Expression(expression).evaluate(params) == expected


@pytest.mark.parametrize(
    ("expression", "params", "message"),
    [
        ("a > 1", {"a": "x"}, "is not a number"),
        ("a && true", {"a": "true"}, "is not a bool"),
        ("missing == 1", {}, "No parameter 'missing' found"),
        ("a - 1", {"a": "x"}, "is not a number"),
    ],
)
def test_govaluate_type_errors(expression: str, params: dict[str, Any], message: str) -> None:
    with pytest.raises(ExpressionError, match=message):
        Expression(expression).evaluate(params)


def test_govaluate_short_circuits() -> None:
    assert Expression("f && missing").evaluate({"f": False}) is False


@pytest.mark.parametrize("expression", ["a ==", "(a == 1", "a === 1", "os.system('x')(1)", "a == 1 b"])
def test_govaluate_parse_errors(expression: str) -> None:
    with pytest.raises(ExpressionError):
        Expression(expression)


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [("True", "NotTrue", True), ("^True$", "True\n", False), ("(?m)^b$", "a\nb\nc", True),
     (r"\d+", "x٣", False), ("[[:upper:]]{2}", "aBCd", True), (r"\Qa.b\E", "axb", False),
     (r"(?P<n>x)|(?<m>y)", "y", True), (r"\x{41}", "A", True), ("a.c", "a\nc", False),
     (r"\pL", "ä", True), ("(?U)a+", "aaa", True), ("[[:^digit:]]", "1", False), ("a(?i)b|c", "C", True),
     ("a(?i)b|c", "AB", False), ("(?i)ñ", "Ñ", True), ("a{,2}", "a{,2}", True)],
)
def test_go_regexp_semantics(pattern: str, text: str, expected: bool) -> None:
    assert go_match(pattern, text) is expected


@pytest.mark.parametrize("pattern", [r"(a)\1", "(?=x)", "(?<!x)", r"a\Z", "[[:nope:]]", "a**", "a*+", "a{1001}",
                                     r"\ñ", "(?x)a"])
def test_go_rejects_what_re2_rejects(pattern: str) -> None:
    with pytest.raises(GoRegexpError):
        go_match(pattern, "x")


@pytest.mark.parametrize(
    ("value", "expected"),
    [(4.0, "4"), (0.5, "0.5"), (1e6, "1e+06"), (123456.0, "123456"), (1234567.0, "1.234567e+06"),
     (0.0001, "0.0001"), (0.00001, "1e-05"), (-2.5, "-2.5")],
)
def test_go_float_printing(value: float, expected: str) -> None:
    assert go_float_g(value) == expected


def test_go_printing_of_containers_and_json() -> None:
    assert go_sprint({"b": [1.0, None, True], "a": "x"}) == "map[a:x b:[1 <nil> true]]"
    assert go_json_marshal({"b": 1e21, "a": "<&>", "c": 1e-7, "d": 100.0}) == \
        '{"a":"\\u003c\\u0026\\u003e","b":1e+21,"c":1e-7,"d":100}'
