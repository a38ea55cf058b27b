"""GJSON paths and Go's Result conversions (tidwall/gjson as Argo Events uses it)."""

from __future__ import annotations

import json

import pytest

from routing.gjson import Document, UnsupportedPath, compile_path

WORKLOAD_EVENT = {
    "type": "UPDATE",
    "body": {
        "metadata": {"name": "w", "labels": {"kueue.x-k8s.io/queue-name": "team-a-gpus", "a.b": "dotted"}},
        "spec": {"podSets": [{"name": "main", "count": 4}, {"name": "workers", "count": 2}]},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "True"},
                                  {"type": "Admitted", "status": "False"}]},
    },
    "oldBody": None,
    "numbers": {"f": 1.50, "e": 1000.0, "i": 1000000, "neg": -3, "zero": 0},
    "strings": {"t": "t", "True": "True", "num": "4.5", "word": "abc", "empty": ""},
    "alerts": [{"labels": {"alertname": "GPUWorkloadIdle"}, "status": "firing"},
               {"labels": {"alertname": "Other"}, "status": "resolved"}],
}


@pytest.fixture(scope="module")
def doc() -> Document:
    text = json.dumps(WORKLOAD_EVENT, separators=(",", ":"))
    # Raw number spellings matter to Go's String(): write them the way a producer might
    text = text.replace('"f":1.5', '"f":1.50').replace('"e":1000.0', '"e":1E3')
    return Document(text)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("body.metadata.labels.kueue\\.x-k8s\\.io/queue-name", "team-a-gpus"),
        ("body.metadata.labels.a\\.b", "dotted"),
        ('body.status.conditions.#(type=="Admitted").status', "False"),
        ("body.status.conditions.#(type==Admitted).status", "False"),  # unquoted value: a string compare
        ('body.status.conditions.#(type=="Admitted")#.status', '["False"]'),
        ('body.status.conditions.#(status=="True")#.type', '["QuotaReserved"]'),
        ('body.status.conditions.#(type%"Quota*").status', "True"),
        ('body.status.conditions.#(type!%"Quota*").type', "Admitted"),
        ("body.status.conditions.#", "2"),
        ("body.status.conditions.#.type", '["QuotaReserved","Admitted"]'),
        ("body.status.conditions.1.type", "Admitted"),
        ("body.spec.podSets.#(count>3).name", "main"),
        ('body.spec.podSets.#(count>="2")#.name', '["main","workers"]'),
        ('alerts.#(labels.alertname=="GPUWorkloadIdle").status', "firing"),
        ('alerts.#(labels.alertname=="GPUWorkloadIdle")#|#', "1"),
        ("body.metadata.labels.kueue*", "team-a-gpus"),
        ("body.metadata.na?e", "w"),
        ("numbers.f", "1.5"),  # Go prints non-integers with FormatFloat('f', -1)
        ("numbers.e", "1000"),  # 1E3 is not an integer literal: reformatted without exponent
        ("numbers.i", "1000000"),  # integer literal kept verbatim
        ("oldBody", ""),  # null exists and prints as ""
        ("strings.empty", ""),
    ],
)
def test_path_string_value_matches_go(doc: Document, path: str, expected: str) -> None:
    result = doc.get(path)
    assert result.exists()
    assert result.string() == expected


@pytest.mark.parametrize(
    "path",
    [
        'body.status.conditions.#(type=="Finished").status',
        "oldBody.status.conditions",
        "body.metadata.labels.kueue.x-k8s.io/queue-name",  # unescaped dots: a different path
        "body.nope",
        "body.spec.podSets.5.name",
    ],
)
def test_missing_paths_do_not_exist(doc: Document, path: str) -> None:
    assert not doc.get(path).exists()


def test_query_all_with_no_match_exists_as_empty_array(doc: Document) -> None:
    """The facts' transition trick: `#(...)#` exists (as []) where `#(...)` does not."""
    first = doc.get('body.status.conditions.#(type=="Finished").status')
    every = doc.get('body.status.conditions.#(type=="Finished")#.status')
    assert not first.exists()
    assert every.exists() and every.string() == "[]"


@pytest.mark.parametrize(
    ("path", "as_bool", "as_float"),
    [
        ("strings.t", True, 0.0),
        ("strings.True", True, 0.0),
        ("strings.num", False, 4.5),
        ("strings.word", False, 0.0),
        ("numbers.neg", True, -3.0),
        ("numbers.zero", False, 0.0),
        ("body.metadata", False, 0.0),
        ("oldBody", False, 0.0),
    ],
)
def test_bool_and_float_conversions_match_go(doc: Document, path: str, as_bool: bool, as_float: float) -> None:
    result = doc.get(path)
    assert result.bool() is as_bool
    assert result.float() == as_float


def test_value_turns_every_number_into_a_float(doc: Document) -> None:
    assert doc.get("body.spec.podSets.0").value() == {"name": "main", "count": 4.0}
    assert isinstance(doc.get("numbers.i").value(), float)
    assert doc.get("oldBody").value() is None


def test_kind_names_are_gos(doc: Document) -> None:
    kinds = {p: doc.get(p).kind for p in ("body", "body.metadata.name", "numbers.i", "oldBody")}
    assert kinds == {"body": "JSON", "body.metadata.name": "String", "numbers.i": "Number", "oldBody": "Null"}


@pytest.mark.parametrize(
    ("path", "raw"),
    # each checked against Go's tidwall/gjson v1.19.0
    [("body|@keys", '["metadata","spec","status"]'),
     ("body.metadata|@values", '["w",{"kueue.x-k8s.io/queue-name":"team-a-gpus","a.b":"dotted"}]'),
     ("strings.word|@tostr", r'"\"abc\""'), ("@dig:name", '["w","main","workers"]'),
     ("alerts|@reverse|#.status", '["resolved","firing"]')],
)
def test_modifiers_are_evaluated_as_go_gjson_does(doc: Document, path: str, raw: str) -> None:
    assert doc.get(path).raw == raw


def test_pretty_modifier_is_refused_not_guessed() -> None:
    with pytest.raises(UnsupportedPath, match="@pretty"):
        compile_path("body|@pretty")


def test_escaped_at_sign_is_a_key_not_a_modifier() -> None:
    doc = Document('{"@keys": 1}')
    assert doc.get("\\@keys").string() == "1"


def test_multipath_skips_missing_results_like_go(doc: Document) -> None:
    """Go gjson's subselector appends only results that exist: over a missing parent it is `[]`,
    so a transition filter on `[oldBody....]` is not an error on the first admission."""
    assert doc.get('[oldBody.status.conditions.#(type=="Admitted").status]').string() == "[]"
    assert doc.get('[body.status.conditions.#(type=="Admitted").status]').string() == '["False"]'
    assert doc.get('[body.metadata.name,body.nope,numbers.i]').string() == '["w",1000000]'
    assert doc.get("[oldBody]").string() == "[null]"  # null exists
    assert doc.get("{body.metadata.name,numbers.i}").string() == '{"name":"w","i":1000000}'
    assert doc.get('{body.metadata.name,"n":numbers.i}').string() == '{"name":"w","n":1000000}'
