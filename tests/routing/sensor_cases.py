"""Random Sensors and the events that reach them, for the differential test against Argo Events.

`CaseGenerator(seed).case()` returns `{"sensor": <Sensor>, "events": [<Argo Events event>...]}`,
the input of stack/argo-events-oracle and of the router alike. Seeded and reproducible: a
disagreement names its seed and index, and `CaseGenerator(seed).cases(n)[i]` rebuilds it.

What is drawn, biased toward the edges where Go and Python differ:

* event data: Kueue Workload resource events, Alertmanager webhooks and free-form JSON, with
  dotted and unicode keys, numbers and bools as strings, big and negative numbers, HTML
  characters, empty strings, nulls; sometimes no data, text that is not JSON, or text/plain;
* data filters over paths that exist, paths that do not, and gjson queries (`#(...)`, `#(...)#`,
  `#`, escapes); string values as Go regexps (anchored, unanchored, case-insensitive, classes,
  invalid ones), numbers and bools spelled every way strconv does or does not accept; every
  comparator; templates over `.Input`; data/expr/filters logical operators;
* expr filters (govaluate) over named fields; context filters; time filters with time zones, DST
  days, fractions, single-digit hours and invalid clocks;
* conditions over dependency names that differ by `-` and `_`, invalid conditions;
* trigger parameters: dataKey, dataTemplate, contextKey, contextTemplate, defaults, useRawData,
  append/prepend/overwrite, dests into the Workflow, dependencies that did not fire;
* Sensors the controller rejects (empty values, unknown comparators, bad time filters, ...).
"""

from __future__ import annotations

import base64
import json
import random
import string
from datetime import UTC, datetime, timedelta
from typing import Any

SOURCES = (("es", "ev1"), ("es", "ev2"), ("hooks", "alert"))
DEPENDENCY_NAMES = ("dep-a", "dep_a", "dep-b", "dep_c", "c", "dep-1a", "dep_1a", "x", "B2", "ünï")
ZONES = ("", "UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata", "Australia/Lord_Howe", "Pacific/Chatham",
         "America/St_Johns", "Europe/London", "Asia/Tokyo", "Etc/GMT+5", "Mars/Olympus", "utc", "Local",
         "Europe//Berlin", "../UTC", "America/")
# Days around DST changes (Europe, USA, Lord Howe), and plain days.
DAYS = ("2024-03-10", "2024-03-31", "2024-10-27", "2024-11-03", "2024-04-07", "2024-07-15", "2026-12-01",
        "2025-01-01", "2030-06-30")
STRINGS = ("True", "False", "NotTrue", "true", "t", "T", "1", "0", "yes", "", " ", "4", "4.0", "-1", "1e3",
           "0x10", " 4", "Admitted", "QuotaReserved", "team-a", "team_a", "job-llm-7c9f2", "ñandú", "日本語",
           "a.b", "a\\b", 'say "hi"', "<b>&</b>", "line\nbreak", "GPUWorkloadIdle", "firing", "resolved",
           "NaN", "inf", "+Inf", "2026-12-01", "1_000", "١٢", "UPDATE", "ADD", "DELETE")
NUMBERS = (0, 1, 4, -1, 2.5, -0.5, 1e21, 1e-7, 123456789012345678, 100, 3.0, 0.1, 1e6)
KEYS = ("name", "count", "status", "type", "labels", "a.b", "x y", "ключ", "0", "gpu_util", "items", "flag",
        "kueue.x-k8s.io/queue-name", "value")


# Templates over event data: Go text/template builtins and the sprig functions routing implements,
# with arguments of every type the data can hold (type errors included).
PARAMETER_TEMPLATES = (
    "{{ .Input.body.metadata.name | upper }}", "{{ upper .Input.body.spec.podSets }}", "{{ trunc 3 .Input.type }}",
    "{{ .Input.body.spec.podSets | len }}", '{{ index .Input.body.spec.podSets 0 "count" }}',
    '{{ printf "%v-%s" .Input.type .Input.body.metadata.name }}', '{{ printf "%d" .Input.body.priority }}',
    '{{ printf "%.2f" .Input.body.priority }}', '{{ printf "%q" .Input.type }}', '{{ printf "%5s|" .Input.type }}',
    '{{ default "none" .Input.nope }}', "{{ .Input.body.spec.podSets | toJson }}", "{{ add 1 .Input.body.priority }}",
    "{{ if gt .Input.body.priority 1.0 }}hi{{ else }}lo{{ end }}", '{{ eq .Input.type "ADD" }}',
    "{{ range .Input.body.status.conditions }}{{ .type }},{{ end }}",
    "{{ with .Input.body.metadata }}{{ .name }}{{ end }}", "{{ len .Input.type }}",
    '{{ hasKey .Input.body "status" }}', '{{ get .Input.body.metadata "name" }}', "{{ quote .Input.type }}",
    "{{ substr 0 3 .Input.type }}", '{{ replace "-" "_" .Input.body.metadata.name }}',
    "{{ .Input.body.metadata.name | b64enc }}", "{{ toString .Input.body.priority }}", "{{ max 1 2 5 }}",
    "{{ int .Input.body.priority }}", "{{ .Input.body.spec.active | not }}", "{{ and .Input.body .Input.type }}",
    "{{ or .Input.nope .Input.type }}", '{{ ternary "y" "n" .Input.body.spec.active }}',
    "{{ .Input.body.priority | float64 }}", "{{ toRawJson .Input.body.metadata.labels }}",
    '{{ regexFind "[0-9]+" .Input.body.metadata.name }}', '{{ splitList "-" .Input.body.metadata.name | join "+" }}',
    '{{ $n := .Input.body.metadata.name }}{{ $n }}/{{ .Input.type }}', "{{ .Input.body.metadata.labels }}",
    "{{ .Input.body.status }}", "{{ .Input.body.spec.podSets }}", "{{ lower .Input.nope }}",
    '{{ cat .Input.type .Input.body.priority }}', "{{ first .Input.body.spec.podSets }}",
    '{{ dig "metadata" "name" "none" .Input.body }}', "{{ .Input.oldBody.metadata.name }}",
)


def gjson_escape(key: str) -> str:
    """A key as one gjson path component."""
    out = []
    for char in key:
        if char in ".*?\\|#@!=<>%":
            out.append("\\")
        out.append(char)
    return "".join(out)


def go_quote_meta(text: str) -> str:
    """regexp.QuoteMeta."""
    return "".join("\\" + c if c in "\\.+*?()|[]{}^$" else c for c in text)


class CaseGenerator:
    """Draws differential cases from one seed."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)

    # -----------------------------------------------------------------------------------------
    # helpers

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def pick(self, items: Any) -> Any:
        return self.rng.choice(list(items))

    def cases(self, n: int) -> list[dict[str, Any]]:
        return [self.case() for _ in range(n)]

    # -----------------------------------------------------------------------------------------
    # event data

    def scalar(self) -> Any:
        roll = self.rng.random()
        if roll < 0.45:
            return self.pick(STRINGS)
        if roll < 0.8:
            return self.pick(NUMBERS)
        if roll < 0.95:
            return self.chance(0.5)
        return None

    def free_document(self, depth: int = 0) -> Any:
        if depth > 2 or self.chance(0.3):
            return self.scalar()
        if self.chance(0.3):
            return [self.free_document(depth + 1) for _ in range(self.rng.randint(0, 3))]
        return {self.pick(KEYS): self.free_document(depth + 1) for _ in range(self.rng.randint(1, 4))}

    def condition(self) -> dict[str, Any]:
        return {"type": self.pick(("Admitted", "QuotaReserved", "Finished", "Evicted")),
                "status": self.pick(("True", "False", "Unknown", True)),
                "reason": self.pick(("Admitted", "Pending", "Preempted", "")),
                "observedGeneration": self.pick((1, 2, "3"))}

    def workload(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": self.pick(("job-llm-7c9f2", "nb-ñ", "w1")), "namespace": self.pick(("team-a", "x")),
                         "labels": {"kueue.x-k8s.io/queue-name": self.pick(("team-a-gpus", "q")),
                                    "app": self.scalar()}},
            "spec": {"podSets": [{"name": "main", "count": self.pick((1, 4, 8, "4", 2.5))}],
                     "active": self.pick((True, False, "true")), "priority": self.pick(NUMBERS)},
        }
        if self.chance(0.8):
            body["status"] = {"conditions": [self.condition() for _ in range(self.rng.randint(0, 3))]}
        if self.chance(0.2):
            body[self.pick(KEYS)] = self.free_document(1)
        return body

    def data(self, source: tuple[str, str]) -> Any:
        if source[0] == "hooks":
            alerts = [{"status": self.pick(("firing", "resolved")),
                       "labels": {"alertname": "GPUWorkloadIdle", "namespace": self.pick(("team-a", "ß")),
                                  "pod": self.pick(("p-0", "p.1")), "gpu": self.pick(("0", 1))},
                       "annotations": {"summary": self.pick(STRINGS)}, "startsAt": "2026-12-01T09:00:00Z"}
                      for _ in range(self.rng.randint(0, 2))]
            return {"header": {"Content-Type": ["application/json"]},
                    "body": {"version": "4", "status": self.pick(("firing", "resolved")), "alerts": alerts,
                             "commonLabels": {"alertname": "GPUWorkloadIdle"}, "groupKey": "{}:{}"}}
        if self.chance(0.75):
            return {"type": self.pick(("ADD", "UPDATE", "DELETE")), "body": self.workload(),
                    "oldBody": self.workload() if self.chance(0.6) else None,
                    "group": "kueue.x-k8s.io", "version": "v1beta2", "resource": "workloads"}
        return self.free_document()

    def event_time(self) -> str:
        day = datetime.fromisoformat(self.pick(DAYS)).replace(tzinfo=UTC)
        if self.chance(0.5):  # near a whole hour: the filters' boundaries
            moment = day + timedelta(hours=self.rng.randint(0, 23), seconds=self.pick((0, 0, -1, 1, 1800)))
        else:
            moment = day + timedelta(seconds=self.rng.randint(0, 86_399))
        text = moment.strftime("%Y-%m-%dT%H:%M:%S")
        if self.chance(0.3):
            text += "." + "".join(self.pick(string.digits) for _ in range(self.rng.randint(1, 9)))
        if self.chance(0.2):
            return text + self.pick(("+05:30", "-04:00", "+13:45", "+00:00"))
        return text + "Z"

    def event(self, source: tuple[str, str], ids: list[str]) -> dict[str, Any]:
        if ids and self.chance(0.08):
            event_id = self.pick(ids)  # a re-delivery
        else:
            event_id = f"id-{self.rng.randrange(16 ** 6):06x}"
            ids.append(event_id)
        roll = self.rng.random()
        content_type = "application/json"
        if roll < 0.04:
            raw: bytes | None = None
        elif roll < 0.07:
            raw = self.pick((b"type=UPDATE", b"", b"{\"a\":", b"[1,2", b"null", b"42"))
        elif roll < 0.10:
            content_type = "text/plain"  # YAML data is converted with PyYAML, not go-yaml: not compared
            raw = json.dumps(self.data(source), ensure_ascii=self.chance(0.5)).encode()
        else:
            raw = json.dumps(self.data(source), ensure_ascii=self.chance(0.3), separators=(",", ":")).encode()
        return {"context": {"id": event_id, "source": source[0], "subject": source[1], "specversion": "1.0",
                            "type": self.pick(("resource", "webhook")), "datacontenttype": content_type,
                            "time": self.event_time()},
                "data": None if raw is None else base64.b64encode(raw).decode()}

    # -----------------------------------------------------------------------------------------
    # paths into event data

    def paths(self, document: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, Any]]:
        """(gjson path, value) for every member of a document, plus a few queries on arrays."""
        found: list[tuple[str, Any]] = []
        if depth > 5:
            return found
        if isinstance(document, dict):
            for key, value in document.items():
                path = f"{prefix}.{gjson_escape(key)}" if prefix else gjson_escape(key)
                found.append((path, value))
                found.extend(self.paths(value, path, depth + 1))
        elif isinstance(document, list):
            found.append((f"{prefix}.#" if prefix else "#", len(document)))
            for i, value in enumerate(document[:3]):
                path = f"{prefix}.{i}" if prefix else str(i)
                found.append((path, value))
                found.extend(self.paths(value, path, depth + 1))
            if document and all(isinstance(v, dict) for v in document):
                keys = sorted({k for v in document for k in v if k.isidentifier()})
                if keys:
                    key = self.pick(keys)
                    value = self.pick([v[key] for v in document if key in v])
                    literal = json.dumps(value, ensure_ascii=False) if not isinstance(value, (dict, list)) else '"x"'
                    op = self.pick(("==", "!=", "==", "%", "!%", ">", "<", ">=", "<=", "=="))
                    if op in ("%", "!%"):
                        literal = json.dumps(str(value)[:2] + self.pick(("*", "?", "")), ensure_ascii=False)
                    if self.chance(0.1):
                        literal = self.pick(('""', "true", "false", "null", "4", "-1", '"True"', "1.5"))
                    all_ = self.pick(("", "#"))
                    query = f"#({key}{op}{literal}){all_}"
                    if self.chance(0.1):
                        query = f"#({key})" if self.chance(0.5) else f"#(!{key})"
                    query = f"{prefix}.{query}" if prefix else query
                    found.append((query, None))
                    inner = self.pick(sorted({k for v in document for k in v}))
                    found.append((f"{query}.{gjson_escape(inner)}", None))
                    if prefix:
                        found.append((f"{prefix}.#.{gjson_escape(inner)}", None))
            if prefix and document and self.chance(0.2):
                found.append((f"{prefix}|{self.pick(('@reverse', '@flatten', '@this', '@ugly', '@valid'))}", None))
                found.append((f"{prefix}.{self.pick(('-1', '#.#', '@reverse.0', '100'))}", None))
        if isinstance(document, dict) and document and prefix and self.chance(0.2):
            keys = list(document)
            key = self.pick(keys)
            found.append((f"{prefix}.{gjson_escape(key)[:2]}*", None))
            found.append((f"{prefix}.{gjson_escape(key)[:-1]}?", None))
            if len(keys) > 1:
                found.append((f"[{prefix}.{gjson_escape(keys[0])},{prefix}.{gjson_escape(keys[1])}]", None))
        return found

    def path(self, documents: list[Any]) -> str:
        candidates = [p for d in documents for p in self.paths(d)]
        if not candidates or self.chance(0.12):
            return self.pick(("nope", "body.nope.x", "oldBody.status", "body.status.conditions.#.type", "@this",
                              "body.metadata.labels.kueue\\.x-k8s\\.io/queue-name", "body.spec.podSets.0.count",
                              "type", "body.*", "b?dy.kind", "body.status.conditions.5"))
        return self.pick(candidates)[0]

    def path_and_value(self, documents: list[Any]) -> tuple[str, Any]:
        candidates = [p for d in documents for p in self.paths(d)]
        if not candidates or self.chance(0.12):
            return self.path(documents), self.scalar()
        return self.pick(candidates)

    # -----------------------------------------------------------------------------------------
    # filters

    def regexp_values(self, value: Any) -> list[str]:
        text = json.dumps(value) if isinstance(value, (dict, list)) else (
            "" if value is None else str(value).lower() if isinstance(value, bool) else str(value))
        quoted = go_quote_meta(text)
        options = [f"^{quoted}$", quoted, f"^{quoted[:2]}", f"{quoted[-2:]}$", f"(?i)^{quoted}$",
                   f"^({quoted}|other)$", ".*", "^$", r"\d+", "[[:alpha:]]+", r"^\w+$", r"\bTrue\b", "e{2,}",
                   "^True$", "True", "(?s)a.b", r"\Qa.b\E", "(?P<n>x)|y", "[^a-z]", "ñ", "^日",
                   "(", "[a-", "a**", r"\8", "x{3,1}", r"\z", "$", "^", "(?m)^x$", r"\x41", "[[:^digit:]]"]
        return [self.pick(options) for _ in range(self.rng.randint(1, 3))]

    def number_values(self, value: Any) -> list[str]:
        base = value if isinstance(value, (int, float)) and not isinstance(value, bool) else 4
        options = [repr(base), str(base), f"{base + 1}", f"{base - 1}", "4", "4.0", "-1", "1e3", "0x1p2", "0x10",
                   " 4", "1_000", "inf", "NaN", "-0", ".5", "5.", "+3", "1e400", "abc", "0"]
        return [self.pick(options) for _ in range(self.rng.randint(1, 3))]

    def bool_values(self) -> list[str]:
        options = ["true", "false", "True", "FALSE", "t", "F", "1", "0", "yes", "TrUe"]
        return [self.pick(options) for _ in range(self.rng.randint(1, 2))]

    def data_template(self) -> str:
        return self.pick(("{{ .Input }}", "{{ .Input | upper }}", "{{ len .Input }}", "{{ .Input | trunc 3 }}",
                          '{{ if eq .Input "True" }}yes{{ end }}', '{{ printf "%s-x" .Input }}',
                          "{{ .Input | quote }}", "{{ .Input ", "{{ .Nope }}", '{{ .Input | replace "a" "b" }}',
                          "{{ default \"d\" .Input }}", "x{{ .Input }}", "{{ .Input | int }}",
                          '{{ printf "%v" .Input }}', "{{ .Input | b64enc }}", '{{ if hasPrefix "t" .Input }}t{{ end }}',
                          "{{ .Input | lower | trunc 2 }}", "{{ add .Input 1 }}", '{{ regexMatch "^[0-9]+$" .Input }}',
                          "{{ .Input | len | printf \"%d\" }}"))

    def data_filter(self, documents: list[Any]) -> dict[str, Any]:
        path, value = self.path_and_value(documents)
        kind = self.rng.choices(("string", "number", "bool", "int", ""), (6, 3, 2, 0.1, 0.05))[0]
        f: dict[str, Any] = {"path": path, "type": kind}
        if kind == "number":
            f["value"] = self.number_values(value)
        elif kind == "bool":
            f["value"] = self.bool_values()
        else:
            f["value"] = [v for v in self.regexp_values(value) if v or self.chance(0.05)] or ["."]
        if self.chance(0.01):
            f["value"] = [] if self.chance(0.5) else ["x", ""]
        if self.chance(0.5):
            f["comparator"] = self.rng.choices((">=", ">", "=", "!=", "<", "<=", "", "=="), (2, 2, 3, 3, 2, 2, 1, 0.05))[0]
        if self.chance(0.15):
            f["template"] = self.data_template()
        return f

    def expr_operand(self, names: list[str], depth: int) -> str:
        roll = self.rng.random()
        if depth < 2 and roll < 0.25:
            return self.expr_expression(names, depth + 1)
        if roll < 0.6:
            name = self.pick(names)
            return f"[{name}]" if self.chance(0.05) else name
        return self.pick(("1", "4", "0", "2.5", "3", "100", "0x10", ".5", "'x'", '"True"', '"UPDATE"', "'4'",
                          "true", "false", "'2026-12-01'", '"2026-12-01T09:00:00Z"', "'a\\'b'", '""',
                          "'^t'", "'(['", "'ñ'", "1e3"))

    def expr_expression(self, names: list[str], depth: int = 0) -> str:
        roll = self.rng.random()
        if roll < 0.12:
            prefix = self.pick(("!", "-", "~"))
            return f"{prefix}({self.expr_operand(names, depth)})" if self.chance(0.5) else \
                f"{prefix}{self.expr_operand(names, depth)}"
        if roll < 0.18:
            return (f"{self.expr_operand(names, depth)} ? {self.expr_operand(names, depth)} : "
                    f"{self.expr_operand(names, depth)}")
        if roll < 0.22:
            return f"{self.expr_operand(names, depth)} in ({self.expr_operand(names, depth)}, 'x', 4)"
        op = self.pick(("==", "!=", ">", ">=", "<", "<=", "=~", "!~", "&&", "||", "+", "-", "*", "/", "%", "**",
                        "&", "|", "^", "<<", ">>", "??", "==", "==", "&&", "-"))
        space = self.pick((" ", " ", ""))
        left, right = self.expr_operand(names, depth), self.expr_operand(names, depth)
        text = f"{left}{space}{op}{space}{right}"
        if depth == 0 and self.chance(0.2):
            text = f"({text}) {self.pick(('&&', '||', '-', '+'))} {self.expr_operand(names, depth)}"
        return text

    def expr_filter(self, documents: list[Any]) -> dict[str, Any]:
        fields = []
        names = []
        for name in self.pick((("a",), ("a", "b"), ("a", "b"), ("x_1", "ü"), ("a", "a.b"))):
            fields.append({"name": name, "path": self.path(documents)})
            names.append(name)
        if self.chance(0.15):
            expression = self.pick((f"{names[0]} ==", f"({names[0]} > 1", f"{names[0]} == nope", "a === 1",
                                    f"{names[0]} > 'x' 1", "", f"{names[0]}&&!{names[-1]}"))
        else:
            expression = self.expr_expression(names)
        if self.chance(0.03):
            return {"expr": expression, "fields": []}
        return {"expr": expression, "fields": fields}

    def clock(self) -> str:
        roll = self.rng.random()
        if roll < 0.9:
            return f"{self.rng.randint(0, 23):02d}:{self.pick((0, 0, 30, 59)):02d}:{self.pick((0, 0, 30)):02d}"
        return self.pick(("9:00:00", "09:00:00.5", "09:00:00,250", " 09:00:00", "24:00:00", "09:60:00",
                          "9am", "", "09:00", "09:00:00Z", "23:59:59.999999999", "02:30:00", "01:30:00",
                          "00:00:00", "9:5:0"))

    def time_filter(self) -> dict[str, Any]:
        f = {"start": self.clock(), "stop": self.clock()}
        if self.chance(0.7):
            f["timezone"] = self.pick(ZONES) if self.chance(0.3) else self.pick(ZONES[:11])
        return f

    def context_filter(self, event: dict[str, Any]) -> dict[str, Any]:
        context = event["context"]
        f: dict[str, Any] = {}
        for key in ("type", "subject", "source", "datacontenttype"):
            if self.chance(0.4):
                f[key] = context[key] if self.chance(0.6) else self.pick(("webhook", "ev2", "x", "text/plain"))
        if not f and self.chance(0.9):
            f["source"] = context["source"]
        return f

    def logical(self) -> str | None:
        return self.rng.choices((None, "and", "or", "", "OR"), (5, 2, 3, 1, 0.03))[0]

    def filters(self, documents: list[Any], events: list[dict[str, Any]]) -> dict[str, Any] | None:
        if self.chance(0.1):
            return None
        f: dict[str, Any] = {}
        if self.chance(0.75):
            f["data"] = [self.data_filter(documents) for _ in range(self.rng.randint(1, 3))]
        if self.chance(0.25):
            f["exprs"] = [self.expr_filter(documents) for _ in range(self.rng.randint(1, 2))]
        if self.chance(0.15) and events:
            f["context"] = self.context_filter(self.pick(events))
        if self.chance(0.2):
            f["time"] = self.time_filter()
        for key in ("dataLogicalOperator", "exprLogicalOperator"):
            operator = self.logical()
            if operator is not None:
                f[key] = operator
        return f

    # -----------------------------------------------------------------------------------------
    # triggers

    def conditions(self, names: list[str]) -> str | None:
        if self.chance(0.45):
            return None
        if self.chance(0.05):
            return self.pick(("a &", "dep-a ||", "(dep-a", "dep-a && nobody", "dep-a b", "&& x", "()",
                              "dep.a", "1a", "not x", "true && x", "dep-a & c"))

        def spelled(name: str) -> str:
            if self.chance(0.3):
                return name.replace("-", "_") if "-" in name else name.replace("_", "-")
            return name

        def term(depth: int) -> str:
            if depth < 2 and self.chance(0.3):
                return "(" + expression(depth + 1) + ")"
            return spelled(self.pick(names))

        def expression(depth: int) -> str:
            parts = [term(depth)]
            for _ in range(self.rng.randint(0, 2)):
                parts.append(self.pick((" && ", " || ", "&&", " ||")))
                parts.append(term(depth))
            return "".join(parts)

        return expression(0)

    def parameter(self, names: list[str], dests: list[str], documents: list[Any] | None = None) -> dict[str, Any]:
        dependency = self.pick(names)
        if self.chance(0.1):
            dependency = dependency.replace("-", "_") if "-" in dependency else "nobody"
        src: dict[str, Any] = {"dependencyName": dependency}
        kind = self.rng.choices(("dataKey", "dataTemplate", "contextKey", "contextTemplate", "none", "both"),
                                (5, 3, 2, 1, 1, 1))[0]
        if kind == "dataKey" and documents and self.chance(0.6):
            src["dataKey"] = self.path(documents)
        elif kind == "dataKey":
            src["dataKey"] = self.pick(("body.metadata.name", "body.spec.podSets.0.count", "body.status.conditions",
                                        "type", "oldBody", "body.spec.active", "nope", "body.metadata.labels",
                                        "body.alerts.#", "body.alerts.0.labels.pod", "@this", "body.priority",
                                        'body.status.conditions.#(type=="Admitted").status', "0", "value"))
        elif kind == "dataTemplate":
            src["dataTemplate"] = self.pick((
                "{{ .Input.body.metadata.name }}", "{{ .Input.body.spec.podSets }}", "{{ .Input.type | lower }}",
                "{{ .Input.body.metadata.namespace }}/{{ .Input.body.metadata.name }}", "{{ .Input.nope }}",
                "{{ .Input.nope.deeper }}", "{{ .Input.body.priority }}", '{{ index .Input.body.alerts 0 }}',
                "{{ toJson .Input.body.metadata.labels }}", "{{ .Input }}", "{{ len .Input.body.alerts }}",
                '{{ if .Input.oldBody }}update{{ else }}new{{ end }}', "{{ .Input.body.spec.active }}",
                "{{ .Input.body.metadata.labels.app }}", "{{ .Input.body.spec.podSets.0.count }}",
                "{{ (index .Input.body.spec.podSets 0).count }}", *PARAMETER_TEMPLATES))
        elif kind == "contextKey":
            src["contextKey"] = self.pick(("id", "source", "subject", "type", "time", "datacontenttype",
                                           "specversion", "nope"))
        elif kind == "contextTemplate":
            src["contextTemplate"] = self.pick(("{{ .Input.source }}/{{ .Input.subject }}", "{{ .Input.time }}",
                                                "{{ .Input.nope }}", "{{ .Input.id | upper }}"))
        elif kind == "both":
            src["dataKey"] = "body.metadata.name"
            src["contextKey"] = "subject"
        if self.chance(0.3):
            src["value"] = self.pick(("default", "", "0", '{"a":1}'))
        if self.chance(0.2):
            src["useRawData"] = True
        param: dict[str, Any] = {"src": src, "dest": self.pick(dests)}
        if self.chance(0.3):
            param["operation"] = self.rng.choices(("overwrite", "append", "prepend", "", "replace"),
                                                  (3, 3, 3, 1, 0.2))[0]
        return param

    def workflow(self) -> dict[str, Any]:
        metadata: dict[str, Any] = {"generateName": "run-"} if self.chance(0.85) else {"name": "fixed"}
        if self.chance(0.3):
            metadata["labels"] = {"app": "gpuaas"}
        return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": metadata,
                "spec": {"workflowTemplateRef": {"name": "tpl"},
                         "arguments": {"parameters": [{"name": f"p{i}", "value": "x" if i == 1 else ""}
                                                      for i in range(3)]}}}

    def trigger(self, index: int, names: list[str], documents: list[Any]) -> dict[str, Any]:
        dests = ["spec.arguments.parameters.0.value", "spec.arguments.parameters.1.value", "metadata.labels.team",
                 "metadata.name", "spec.x.y", "metadata.annotations.a\\.b", "spec.arguments.parameters.5.value",
                 "spec.workflowTemplateRef.name", "spec.list.-1"]
        parameters = [self.parameter(names, dests, documents) for _ in range(self.rng.randint(0, 4))]
        resource = self.workflow()
        if self.chance(0.25):
            kind = "k8s"
            body: dict[str, Any] = {"operation": self.pick(("create", "update", "patch", "")),
                                    "source": {"resource": resource}, "parameters": parameters}
        else:
            kind = "argoWorkflow"
            body = {"operation": self.rng.choices(("submit", "resubmit", "", "bogus"), (10, 1, 0.3, 0.1))[0],
                    "source": {"resource": resource}, "parameters": parameters}
        if self.chance(0.1):
            body["source"] = {"inline": json.dumps(resource)}
        template: dict[str, Any] = {"name": f"t{index}" if self.chance(0.97) else "t0", kind: body}
        conditions = self.conditions(names)
        if conditions is not None:
            template["conditions"] = conditions
        trigger: dict[str, Any] = {"template": template}
        if self.chance(0.1):
            trigger["parameters"] = [self.parameter(names, [
                f"{kind}.source.resource.metadata.generateName", f"{kind}.source.resource.spec.x",
                f"{kind}.operation"])]
        return trigger

    # -----------------------------------------------------------------------------------------
    # the case

    def case(self) -> dict[str, Any]:
        sources = [self.pick(SOURCES) for _ in range(self.rng.randint(1, 3))]
        ids: list[str] = []
        events = [self.event(self.pick(sources) if self.chance(0.9) else ("other", "ev"), ids)
                  for _ in range(self.rng.randint(1, 4))]
        documents: list[Any] = []
        by_source: dict[tuple[str, str], list[Any]] = {}
        for event in events:
            if event["data"] is not None:
                try:
                    document = json.loads(base64.b64decode(event["data"]))
                except ValueError:
                    continue
                documents.append(document)
                by_source.setdefault((event["context"]["source"], event["context"]["subject"]), []).append(document)
        names = list(dict.fromkeys(self.pick(DEPENDENCY_NAMES) for _ in range(self.rng.randint(1, 3))))
        if self.chance(0.05):
            names.append(self.pick(("1a", "_a", "a.b", "a b", "true", "in", "dep-a")))
        dependencies = []
        for i, name in enumerate(names):
            source = sources[i % len(sources)]
            dep: dict[str, Any] = {"name": name, "eventSourceName": source[0], "eventName": source[1]}
            # mostly paths into the data this dependency receives, sometimes into anything
            filters = self.filters(by_source.get(source, documents) if self.chance(0.85) else documents, events)
            if filters is not None:
                dep["filters"] = filters
            operator = self.logical()
            if operator is not None:
                dep["filtersLogicalOperator"] = operator
            dependencies.append(dep)
        triggers = [self.trigger(i, names, documents) for i in range(self.rng.randint(1, 2))]
        sensor = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Sensor",
                  "metadata": {"name": "fuzz", "namespace": "gpuaas"},
                  "spec": {"dependencies": dependencies, "triggers": triggers}}
        return {"sensor": sensor, "events": events}


def cloudevent(event: dict[str, Any]) -> dict[str, Any]:
    """The CloudEvent (JSON structured mode) the router reads for an Argo Events event."""
    context = event["context"]
    out = {"specversion": context["specversion"], "id": context["id"], "source": context["source"],
           "subject": context["subject"], "type": context["type"], "datacontenttype": context["datacontenttype"],
           "time": context["time"]}
    if event["data"] is not None:
        out["data_base64"] = event["data"]
    return out
