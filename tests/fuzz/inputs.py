"""Hostile inputs for the fuzz tests: what an operator mistypes and an attacker sends.

Every strategy mixes well-formed values (so the deep paths run) with the known troublemakers of
issue 10: JSON nested 1,000 deep, text that is not UTF-8, lone surrogates, numbers with thousands
of digits or non-ASCII digits, non-ASCII "names", CloudEvents without `id`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import strategies as st

SURROGATES = ["\ud800", "\udfff", "a\udc80b"]
NON_ASCII_DIGITS = ["٣", "१२", "𝟙", "²", "٠٫٥", "Ⅻ"]
HUGE_NUMBERS = ["9" * 5000, "1" + "0" * 4301, "-" + "7" * 10000, "1e999999", "NaN", "Infinity", "0x10", "1_000"]
NAMES = ["team-a", "job-train-1a2b3", "a" * 63, "a" * 64, "a" * 254, "Team-A", "tëam-a", "team_a", "-a", "a-",
         "a..b", "a.b", ".", "", " team-a ", "team-a\n", "ｔｅａｍ", "a\u0301", "١٢٣"]
KEYS = ["namespace", "workload", "event", "dry-run", "tenant", "alert", "pod", "gpus", "flavor", "mode",
        "target", "reason", "status", "failures", "cohort", "weight", "guaranteedGpus", "borrowing-limit",
        "lending-limit"]
NUMBER_KEYS = ("gpus", "weight", "guaranteedGpus", "borrowing-limit", "lending-limit")


PROCESS_RECURSION_LIMIT = 1000
"""CPython's default: what `gpuaas route` or `python -m steps` runs with."""


@contextmanager
def process_recursion_limit() -> Iterator[None]:
    """Run the block with the recursion headroom of a fresh process (the interpreter's default limit
    above the frames already on the stack). Hypothesis runs every case with the limit raised by 2,000
    (ensure_free_stackframes), and the limit is the interpreter's, so every thread sees it: under
    Hypothesis `json.loads` reads JSON nested 1,500 deep that a user's process cannot."""
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + PROCESS_RECURSION_LIMIT)
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


def deep_json(depth: int, kind: str = "list") -> str:
    """JSON text nested `depth` levels: `[[[...]]]` or `{"a":{"a":...}}`."""
    if kind == "list":
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


DEPTHS = (1, 2, 10, 63, 64, 65, 100, 999, 1000, 1001, 5000)
FRAGMENTS = [*SURROGATES, *NON_ASCII_DIGITS, *HUGE_NUMBERS, *NAMES,
             *(deep_json(d) for d in DEPTHS), *(deep_json(d, "object") for d in DEPTHS),
             "", " ", "null", "true", "[]", "{}", '{"a":', "\x00", "\u0000", "\n", "line\nbreak", "\t", "\r\n",
             "ADD", "UPDATE", "DELETE", "Workload", "firing", "resolved", "GPUWorkloadIdle", "4", "1.0",
             "base64:", "e30=", "W10=", "%%%", "<script>", "'; DROP", "${HOME}", "{{workflow.uid}}", "é" * 300]
"""Known troublemakers; picked whole (one cheap draw), mixed with generated text."""


def tricky_text() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=10),
                     st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=6))


def json_values(max_leaves: int = 3) -> st.SearchStrategy[Any]:
    """Small generated JSON values, or one of the corpus' hostile ones (deep, huge, odd keys)."""
    leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), tricky_text())
    generated = st.recursive(leaves, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                             st.dictionaries(st.sampled_from(KEYS), inner, max_size=3)),
                             max_leaves=max_leaves)
    return st.one_of(generated, st.sampled_from(VALUES))


def _values() -> list[Any]:
    deep_list: Any = []
    for _ in range(1500):
        deep_list = [deep_list]
    deep_dict: Any = {}
    for _ in range(70):
        deep_dict = {"a": deep_dict}
    return [None, True, 0, -1, 2**64, 10**5000, 1e308, float("inf"), float("nan"), "", [], {}, deep_list, deep_dict,
            {"\ud800": 1}, ["\udfff"], {"": ""}, {"metadata": None}, {"metadata": "x"}, {"metadata": {"name": 7}},
            {"labels": []}, {"labels": {"pod": None}}, {"type": "ADD"}, {"id": ""}, {"id": 12}, [[[[[]]]]],
            {"body": "{"}, {"alerts": "x"}, {"version": 4}, *FRAGMENTS[:40]]


VALUES = _values()


def json_text(values: st.SearchStrategy[Any] | None = None) -> st.SearchStrategy[str]:
    """JSON text of `values` (lone surrogates as `\\udXXX` escapes; numbers as Python writes them)."""
    return (values or json_values()).map(_dumps)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else _dumps(value)


def _dumps(value: Any) -> str:
    try:
        return json.dumps(value, allow_nan=True)
    except (RecursionError, ValueError):
        return deep_json(1500)


def raw_bytes() -> st.SearchStrategy[bytes]:
    """Bytes that are often not UTF-8, sometimes JSON in another encoding."""
    return st.one_of(
        st.binary(max_size=40),
        st.sampled_from([b"\xff\xfe[\x00]\x00", b'[{"name": "namespace", "value": "\xe9"}]', b"\xc3\x28",
                         b"\x00" * 8, "[]".encode("utf-16"), b"\xef\xbb\xbf[]", deep_json(2000).encode()]),
        json_text().map(lambda t: t.encode("utf-8", "surrogatepass")),
    )


class Picks:
    """Cheap variety: one Hypothesis draw (a seed) picks many slot values from the corpora, plus one
    generated string. Hypothesis draws are the cost of a fuzz case (~25 us each); three or four draws
    per case keep 10,000 cases per entry point to seconds, and the corpora hold the known hostile
    values (deep nesting, huge numbers, surrogates, odd shapes)."""

    def __init__(self, seed: int, text: str) -> None:
        import random

        self.random = random.Random(seed)
        self.text = text

    def slot(self) -> Any:
        roll = self.random.random()
        if roll < 0.25:
            return self.text
        if roll < 0.6:
            return self.random.choice(FRAGMENTS)
        if roll < 0.7:
            return self.random.choice(NAMES)
        return self.random.choice(VALUES)

    def name(self) -> Any:
        return self.random.choice(NAMES) if self.random.random() < 0.6 else self.slot()

    def maybe(self, good: Any, p: float = 0.8) -> Any:
        return good if self.random.random() < p else self.slot()


SEEDS = st.integers(min_value=0, max_value=2**32 - 1)
TEXT = st.one_of(st.text(max_size=8), st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=4))


def _resource_event(shape: int, seed: int, text: str) -> Any:
    """One resource event in one of the shapes the Sensor delivers, broken somewhere (or not)."""
    import base64

    pick = Picks(seed, text)
    metadata = pick.maybe({"name": pick.name(), "namespace": pick.name(), "uid": pick.maybe("uid-1"),
                           "resourceVersion": pick.maybe("7")})
    body = pick.maybe({"kind": pick.maybe("Workload"), "metadata": metadata})
    data: Any = pick.maybe({"type": pick.maybe(("ADD", "UPDATE", "DELETE")[shape % 3]), "body": body})
    if shape % 7 == 0 and isinstance(data, dict):
        data["oldBody"] = pick.slot()
    context = pick.maybe({"id": pick.maybe("ev-1"), "type": "resource", "source": "gpuaas-workloads",
                          "subject": "workloads", "time": pick.maybe("2026-01-01T00:00:00Z")})
    wrap = shape % 6
    if wrap == 0:
        return data
    if wrap == 1:
        return {"context": context, "data": data}
    if wrap == 2:
        return {"context": context, "data": _dumps(data)}
    if wrap == 3:
        return {"context": context, "data": base64.b64encode(_dumps(data).encode("utf-8", "surrogatepass")).decode()}
    if wrap == 4:
        event: Any = {"specversion": pick.maybe("1.0"), "source": "gpuaas-workloads", "type": "resource", "data": data}
        if shape % 2:
            event["id"] = pick.maybe("ev-1")
        return event
    return pick.slot()


def resource_events() -> st.SearchStrategy[Any]:
    """Argo Events resource events in every shape the Sensor delivers, as objects or JSON text."""
    event = st.builds(_resource_event, st.integers(0, 419), SEEDS, TEXT)
    return st.one_of(event, event.map(_dumps))


def _alert(pick: Picks, shape: int) -> Any:
    labels = pick.maybe({"alertname": pick.maybe("GPUWorkloadIdle"), "namespace": pick.name(), "pod": pick.name()})
    alert: Any = {"status": pick.maybe(("firing", "resolved")[shape % 2]), "labels": labels}
    if shape % 5 == 0:
        alert["fingerprint"] = pick.slot()
    return pick.maybe(alert, 0.9)


def _group(shape: int, seed: int, text: str) -> Any:
    pick = Picks(seed, text)
    alert_list = [_alert(pick, shape + i) for i in range(pick.random.randint(0, 5))]
    body: Any = {"version": pick.maybe("4", 0.9), "alerts": pick.maybe(alert_list, 0.9), "status": "firing",
                 "groupKey": pick.maybe("{}:{}"), "receiver": "gpuaas", "truncatedAlerts": pick.maybe(0)}
    wrap = shape % 6
    if wrap == 0:
        return body
    if wrap == 1:
        return {"header": {}, "body": body}
    if wrap == 2:
        return {"header": {}, "body": _dumps(body)}
    if wrap == 3:
        return {"context": {"id": "x", "type": "webhook"}, "data": {"header": {}, "body": body}}
    if wrap == 4:
        return _dumps(body)
    return pick.slot()


def alert_groups() -> st.SearchStrategy[Any]:
    return st.builds(_group, st.integers(0, 359), SEEDS, TEXT)


REACTIONS = ["on-admitted", "on-finished", "on-idle", "idle-alerts", "release-workers", "resume-workers",
             "provision-quota", "record-outcome"]


_EVENT = json.dumps({"context": {"id": "ev-1", "type": "resource", "source": "gpuaas-workloads",
                                  "subject": "workloads", "time": "2026-01-01T00:00:00Z"},
                      "data": {"type": "UPDATE", "body": {"kind": "Workload", "metadata": {
                          "name": "job-train-1a2b3", "namespace": "team-a", "uid": "uid-1"}}}})
_ALERT = {"status": "firing", "labels": {"alertname": "GPUWorkloadIdle", "namespace": "team-a", "pod": "train-0"}}
_WORKLOAD = {"namespace": "team-a", "workload": "job-train-1a2b3", "event": _EVENT, "dry-run": "false",
             "tenant": "team-a"}
WELL_FORMED: dict[str, dict[str, str]] = {
    "on-admitted": _WORKLOAD, "on-finished": _WORKLOAD, "release-workers": _WORKLOAD, "resume-workers": _WORKLOAD,
    "on-idle": {**_WORKLOAD, "event": "", "pod": "train-0", "alert": json.dumps(_ALERT)},
    "idle-alerts": {"event": json.dumps({"header": {}, "body": {"version": "4", "status": "firing", "alerts": [_ALERT]}}),
                    "namespace": "", "workload": "", "dry-run": "false", "tenant": ""},
    "provision-quota": {"mode": "hand", "tenant": "team-a", "flavor": "a100", "gpus": "8", "cohort": "gpuaas",
                        "borrowing-limit": "2", "lending-limit": "1", "dry-run": "true"},
    "record-outcome": {"reaction": "on-idle", "namespace": "team-a", "workload": "job-train-1a2b3",
                       "status": "Failed", "failures": "[]", "event": "", "dry-run": "false", "tenant": ""},
}
"""Per reaction, parameters it parses to the end: the base that `_params_file` breaks in one place,
so the checks late in a parser (a hand provision-quota's limits, say) are reached, not only the first."""


def _params_file(shape: int, seed: int, text: str, reaction: str = "") -> bytes:
    """The step's parameters file (Argo writes `{{inputs.parameters}}`), from well-formed to garbage."""
    pick = Picks(seed, text)
    kind = shape % 8
    if kind in (5, 6, 7) and reaction in WELL_FORMED:  # the reaction's well-formed parameters, one broken
        params = dict(WELL_FORMED[reaction])
        key = pick.random.choice(list(params)) if pick.random.random() < 0.8 else pick.random.choice(KEYS)
        params[key] = _number(pick, text) if key in NUMBER_KEYS else pick.slot()
        return _dumps([{"name": k, "value": v} for k, v in params.items()]).encode("utf-8", "surrogatepass")
    if kind == 0:
        return pick.random.choice([b"\xff\xfe[\x00]\x00", b"\xc3\x28", b"\x00\x01", "[]".encode("utf-16"),
                                   b"\xef\xbb\xbf[]", deep_json(2000).encode(), text.encode("utf-8", "surrogatepass")])
    if kind == 1:
        return _dumps(pick.slot()).encode("utf-8", "surrogatepass")
    params: list[Any] = []
    for key in pick.random.sample(KEYS, pick.random.randint(1, 7)):
        if key in ("namespace", "workload", "tenant", "flavor", "pod", "cohort"):
            value = pick.name()
        elif key == "event":
            value = pick.random.choice([_dumps(_resource_event(shape, seed, text)), _dumps(_group(shape, seed, text)),
                                        "", pick.slot()])
        elif key == "alert":
            value = _dumps(_alert(pick, shape))
        elif key in NUMBER_KEYS:
            value = _number(pick, text)
        elif key == "dry-run":
            value = pick.maybe(pick.random.choice(["true", "false"]))
        else:
            value = pick.slot()
        params.append({"name": key, "value": value} if kind != 2 else {"name": pick.maybe(key), "value": value})
    if kind == 3:
        params.append(pick.slot())
    document: Any = params if kind != 4 else {p["name"]: p["value"] for p in params if isinstance(p, dict)
                                              and isinstance(p.get("name"), str)}
    return _dumps(document).encode("utf-8", "surrogatepass")


def _number(pick: Picks, text: str) -> str:
    return pick.random.choice(["8", "0", "1", "99999999999999999999", *HUGE_NUMBERS, *NON_ASCII_DIGITS, text])


def params_files() -> st.SearchStrategy[tuple[str, bytes]]:
    """(reaction, parameters file bytes)."""
    reaction = st.one_of(st.sampled_from(REACTIONS), st.sampled_from(["", "On-Idle", "../etc", "on_idle", "x" * 300]))
    return reaction.flatmap(lambda name: st.tuples(st.just(name), st.builds(
        _params_file, st.integers(0, 799), SEEDS, TEXT, st.just(name))))


SOURCES = [("gpuaas-workloads", "workloads", "resource"), ("gpuaas-alertmanager", "idle", "webhook"),
           ("gpuaas-gpu-nodes", "gpu-nodes", "resource"), ("gpuaas-capacity-clock", "capacity-reconcile", "calendar")]


def _route_line(shape: int, seed: int, text: str) -> str:
    """One line of `gpuaas route --events FILE`: a structured-mode CloudEvent, broken somewhere."""
    import base64

    pick = Picks(seed, text)
    source, subject, kind = SOURCES[shape % 4]
    if shape % 4 == 1:
        data: Any = {"header": pick.maybe({"Authorization": ["*****"]}), "body": _group(shape, seed, text)}
    elif shape % 4 == 3:
        data = pick.maybe({"eventTime": "2026-01-01 00:00:00 +0000 UTC"})
    else:
        data = _resource_event(shape * 6, seed, text)  # wrap 0: bare resource event data
    event: Any = {"specversion": "1.0", "source": pick.maybe(source), "subject": pick.maybe(subject),
                  "type": pick.maybe(kind), "time": pick.maybe("2026-01-01T00:00:00Z")}
    if shape % 3:
        event["id"] = pick.maybe(f"id-{seed % 1000}")
    if shape % 5 == 0:
        event["data_base64"] = pick.maybe(base64.b64encode(_dumps(data).encode("utf-8", "surrogatepass")).decode())
    else:
        event["data"] = data
    line = _dumps(pick.maybe(event, 0.95))
    if shape % 13:
        return line
    return pick.random.choice([text, deep_json(1000), deep_json(1001, "object"), deep_json(5000)])


def route_lines() -> st.SearchStrategy[str]:
    return st.builds(_route_line, st.integers(0, 779), SEEDS, TEXT)


TOKEN = "s3cret"
LENGTHS = ["abc", "-1", "1e3", "0x10", "10, 10", "99999999999999999999999", "", " ", "+5", "٣", "5 5", "1048577"]


def _http_request(shape: int, seed: int, text: str) -> bytes:
    """Raw bytes of one HTTP request to the intake: the method, path, headers and body vary."""
    pick = Picks(seed, text)
    body_value: Any = _group(shape, seed, text)
    body = (body_value if isinstance(body_value, str) else _dumps(body_value)).encode("utf-8", "surrogatepass")
    if shape % 9 == 0:
        body = pick.random.choice([b"\xff\xfe", b"[" * 5000 + b"]" * 5000, b"\x00" * 10, b"{", b""])
    method = _as_text(pick.maybe("POST", 0.9)) if shape % 7 else pick.random.choice(["GET", "PUT", "BREW", "post"])
    path = "/alerts" if shape % 11 else pick.random.choice(["/", "/alerts/x", "/%00", "/alerts?x=1", "*"])
    length = str(len(body))
    if shape % 5 == 0:
        length = pick.random.choice([*LENGTHS, str(len(body) + 10), str(max(0, len(body) - 1))])
    lines = [f"{method} {path} HTTP/1.1", "Host: gpuaas", "Content-Type: application/json"]
    if shape % 4:
        token = TOKEN if shape % 8 else pick.maybe(TOKEN)
        lines.append(f"Authorization: Bearer {_as_text(token)}")
    if shape % 6:
        lines.append(f"Content-Length: {length}")
    if shape % 13 == 0:
        lines.append("Transfer-Encoding: chunked")
    if shape % 17 == 0:
        lines.append("Content-Length: 3")
    head = "\r\n".join(lines) + "\r\n\r\n"
    return head.encode("utf-8", "surrogatepass") + body


def http_requests() -> st.SearchStrategy[bytes]:
    return st.builds(_http_request, st.integers(0, 7999), SEEDS, TEXT)
