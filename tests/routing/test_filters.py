"""Dependency filters against argo-events filter.go semantics (the facts file's traps included)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.routing.builders import cloudevent, fires, router, sensor

ADMITTED = {"type": "UPDATE",
            "body": {"status": {"conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted"}]},
                     "spec": {"podSets": [{"count": 4}]}, "metadata": {"name": "w1"}},
            "oldBody": {"status": {"conditions": [{"type": "QuotaReserved", "status": "True"}]}}}
NOT_ADMITTED = {"type": "UPDATE",
                "body": {"status": {"conditions": [{"type": "Admitted", "status": "NotTrue"}]}},
                "oldBody": None}
ADMITTED_PATH = 'body.status.conditions.#(type=="Admitted").status'


def data(*filters: dict[str, Any], op: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"data": list(filters)}
    if op:
        spec["dataLogicalOperator"] = op
    return spec


def string_filter(path: str, *values: str, comparator: str | None = None) -> dict[str, Any]:
    f: dict[str, Any] = {"path": path, "type": "string", "value": list(values)}
    if comparator:
        f["comparator"] = comparator
    return f


class TestStringDataFilters:
    def test_values_are_unanchored_regexps(self) -> None:
        """`True` matches `NotTrue`: the trap the facts warn about."""
        loose = sensor(data(string_filter(ADMITTED_PATH, "True")))
        strict = sensor(data(string_filter(ADMITTED_PATH, "^True$")))
        assert fires(loose, NOT_ADMITTED)[0] is True
        fired, reason = fires(strict, NOT_ADMITTED)
        assert fired is False
        assert reason == (
            'data filter 1 (body.status.conditions.#(type=="Admitted").status): '
            'value "NotTrue" does not match ^True$'
        )

    def test_values_are_or_ed(self) -> None:
        s = sensor(data(string_filter("type", "^ADD$", "^UPDATE$")))
        assert fires(s, {"type": "UPDATE"})[0]
        fired, reason = fires(s, {"type": "DELETE"})
        assert not fired and "matches none of [^ADD$, ^UPDATE$]" in reason

    def test_not_equal_passes_when_the_value_does_not_match(self) -> None:
        s = sensor(data(string_filter("type", "^DELETE$", comparator="!=")))
        assert fires(s, {"type": "UPDATE"})[0]
        fired, reason = fires(s, {"type": "DELETE"})
        assert not fired and reason.endswith('value "DELETE" matches ^DELETE$ (comparator !=)')

    def test_not_equal_with_several_values_passes_if_any_one_does_not_match(self) -> None:
        """filter.go returns at the first value whose `!match` is true: with `!=` the values are
        still OR-ed, so `!= [^DELETE$, ^ADD$]` lets DELETE through (^ADD$ does not match it)."""
        s = sensor(data(string_filter("type", "^DELETE$", "^ADD$", comparator="!=")))
        assert fires(s, {"type": "DELETE"})[0]
        fired, reason = fires(sensor(data(string_filter("type", "E", "^D", comparator="!="))), {"type": "DELETE"})
        assert not fired and "matches every one of [E, ^D]" in reason

    def test_ordering_comparator_never_matches_a_string(self) -> None:
        fired, reason = fires(sensor(data(string_filter("type", "A", comparator=">"))), {"type": "B"})
        assert not fired and "never matches a string filter" in reason

    def test_missing_path_is_an_error_that_fails_the_filter(self) -> None:
        s = sensor(data(string_filter('body.status.conditions.#(type=="Finished").status', ".*")))
        fired, reason = fires(s, ADMITTED)
        assert not fired
        assert "path does not exist" in reason

    def test_old_body_filter_never_passes_on_add(self) -> None:
        """oldBody is null on ADD: any path below it is missing, even with comparator !=."""
        s = sensor(data(string_filter('oldBody.status.conditions.#(type=="Admitted").status', "^True$",
                                      comparator="!=")))
        assert not fires(s, {"type": "ADD", "body": ADMITTED["body"], "oldBody": None})[0]

    def test_first_admission_missed_by_a_single_match_query(self) -> None:
        """The facts' bug: `#(...)` on an oldBody without Admitted is missing, so `!=` errors."""
        naive = sensor(data(string_filter('oldBody.status.conditions.#(type=="Admitted").status', "^True$",
                                          comparator="!=")))
        robust = sensor(data(string_filter('oldBody.status.conditions.#(type=="Admitted")#.status',
                                           '^\\["True"\\]$', comparator="!=")))
        assert not fires(naive, ADMITTED)[0]
        assert fires(robust, ADMITTED)[0]

    def test_null_value_matches_as_empty_string(self) -> None:
        s = sensor(data(string_filter("oldBody", "^$")))
        assert fires(s, {"oldBody": None})[0]

    def test_dollar_is_end_of_text_like_go(self) -> None:
        s = sensor(data(string_filter("name", "^w1$")))
        assert fires(s, {"name": "w1"})[0]
        assert not fires(s, {"name": "w1\n"})[0]  # Python's $ would match before the newline

    def test_go_only_syntax_is_understood(self) -> None:
        s = sensor(data(string_filter("name", "^[[:alpha:]]+-\\x{31}\\z")))
        assert fires(s, {"name": "team-1"})[0]

    def test_invalid_go_regexp_is_an_error(self) -> None:
        fired, reason = fires(sensor(data(string_filter("name", "(a)\\1"))), {"name": "aa"})
        assert not fired and "invalid escape sequence" in reason  # RE2 has no back-references

    def test_case_insensitive_flag(self) -> None:
        assert fires(sensor(data(string_filter("type", "(?i)^update$"))), {"type": "UPDATE"})[0]

    def test_template_rewrites_the_value_before_matching(self) -> None:
        f = string_filter("body.metadata.name", "^W1-CHECKED$")
        f["template"] = '{{ .Input | upper }}-CHECKED'
        assert fires(sensor(data(f)), ADMITTED)[0]

    def test_template_that_prints_nothing_is_an_error(self) -> None:
        f = string_filter("body.metadata.name", ".*")
        f["template"] = '{{ if eq .Input "nobody" }}x{{ end }}'
        fired, reason = fires(sensor(data(f)), ADMITTED)
        assert not fired and "empty string or no value" in reason

    def test_no_values_is_refused_by_the_controller(self) -> None:
        fired, reason = fires(sensor(data({"path": "type", "type": "string", "value": []})), {"type": "ADD"})
        assert not fired and "the Sensor controller rejects this Sensor" in reason
        assert "type, path and value must be not empty" in reason


class TestNumberAndBoolDataFilters:
    @pytest.mark.parametrize(
        ("comparator", "value", "expected"),
        [(">", "3", True), (">", "4", False), (">=", "4", True), ("<", "4", False), ("<=", "4", True),
         ("=", "4", True), (None, "4.0", True), ("!=", "4", False), ("!=", "5", True)],
    )
    def test_comparators(self, comparator: str | None, value: str, expected: bool) -> None:
        f: dict[str, Any] = {"path": "body.spec.podSets.0.count", "type": "number", "value": [value]}
        if comparator:
            f["comparator"] = comparator
        assert fires(sensor(data(f)), ADMITTED)[0] is expected

    def test_numeric_string_compares_as_its_number_and_words_as_zero(self) -> None:
        f = {"path": "gpus", "type": "number", "value": ["4"]}
        assert fires(sensor(data(f)), {"gpus": "4"})[0]
        zero = {"path": "gpus", "type": "number", "value": ["0"]}
        assert fires(sensor(data(zero)), {"gpus": "four"})[0]

    def test_unparsable_number_value_is_an_error(self) -> None:
        fired, reason = fires(sensor(data({"path": "gpus", "type": "number", "value": ["four"]})), {"gpus": 4})
        assert not fired and "ParseFloat" in reason

    @pytest.mark.parametrize(("actual", "expected"), [(True, True), ("True", True), ("t", True), ("TrUe", True), (1, True),
                                                     (False, False), ("yes", False), (0, False)])
    def test_bool_uses_go_conversions(self, actual: Any, expected: bool) -> None:
        f = {"path": "flag", "type": "bool", "value": ["true"]}
        assert fires(sensor(data(f)), {"flag": actual})[0] is expected

    def test_unparsable_bool_value_is_an_error(self) -> None:
        fired, reason = fires(sensor(data({"path": "flag", "type": "bool", "value": ["yes"]})), {"flag": True})
        assert not fired and "ParseBool" in reason

    def test_unknown_type_is_an_error(self) -> None:
        fired, reason = fires(sensor(data({"path": "flag", "type": "boolean", "value": ["true"]})), {"flag": True})
        assert not fired and "unsupported JSON type" in reason


class TestLogicalOperators:
    def test_data_or_passes_when_one_filter_passes_despite_a_missing_path(self) -> None:
        s = sensor(data(string_filter("nope", ".*"), string_filter("type", "^UPDATE$"), op="or"))
        assert fires(s, ADMITTED)[0]

    def test_data_or_fails_when_none_pass_and_lists_why(self) -> None:
        s = sensor(data(string_filter("nope", ".*"), string_filter("type", "^ADD$"), op="or"))
        fired, reason = fires(s, ADMITTED)
        assert not fired and "does not exist" in reason and "^ADD$" in reason

    def test_data_and_is_the_default(self) -> None:
        s = sensor(data(string_filter("type", "^UPDATE$"), string_filter("body.metadata.name", "^w2$")))
        fired, reason = fires(s, ADMITTED)
        assert not fired and reason.startswith("data filter 2 (body.metadata.name)")

    def test_filters_or_passes_on_context_when_data_fails(self) -> None:
        spec = data(string_filter("type", "^DELETE$"))
        spec["context"] = {"type": "resource"}
        assert fires(sensor(spec, filters_logical_operator="or"), ADMITTED)[0]
        assert not fires(sensor(spec), ADMITTED)[0]

    def test_filters_or_fails_when_every_defined_group_fails(self) -> None:
        spec = data(string_filter("type", "^DELETE$"))
        spec["context"] = {"subject": "other"}
        fired, reason = fires(sensor(spec, filters_logical_operator="or"), ADMITTED)
        assert not fired and "no filter passed" in reason


class TestContextTimeScript:
    def test_context_is_exact_match(self) -> None:
        assert fires(sensor({"context": {"type": "resource", "source": "demo-source"}}), {})[0]
        fired, reason = fires(sensor({"context": {"type": "resourc"}}), {})
        assert not fired and 'expected exactly "resourc"' in reason

    @pytest.mark.parametrize(
        ("start", "stop", "time", "expected"),
        [("09:00:00", "10:00:00", "2026-12-01T09:30:00Z", True),
         ("09:00:00", "10:00:00", "2026-12-01T10:00:00Z", False),  # stop is exclusive
         ("09:00:00", "10:00:00", "2026-12-01T09:00:00Z", True),  # start is inclusive
         ("22:00:00", "02:00:00", "2026-12-01T01:00:00Z", True),  # wraps past midnight
         ("22:00:00", "02:00:00", "2026-12-01T12:00:00Z", False)],
    )
    def test_time_window(self, start: str, stop: str, time: str, expected: bool) -> None:
        s = sensor({"time": {"start": start, "stop": stop}})
        assert fires(s, {}, time=time)[0] is expected

    @pytest.mark.parametrize(
        ("timezone", "time", "expected"),
        # argo-events v1.9.11 filter_time_test.go TestFilterTimeWithTimezone: the window is read in
        # the filter's time zone (since v1.9.9), on the event's date in that zone.
        [("America/New_York", "2024-07-15T14:00:00Z", True),   # 10:00 EDT
         ("America/New_York", "2024-07-15T12:00:00Z", False),  # 08:00 EDT: too early
         ("America/New_York", "2024-07-15T22:00:00Z", False),  # 18:00 EDT: too late
         ("Asia/Tokyo", "2024-07-15T01:00:00Z", True),         # 10:00 JST
         ("Asia/Tokyo", "2024-07-15T10:00:00Z", False)],       # 19:00 JST
    )
    def test_time_window_is_read_in_the_filters_timezone(self, timezone: str, time: str, expected: bool) -> None:
        s = sensor({"time": {"start": "09:00:00", "stop": "17:00:00", "timezone": timezone}})
        fired, reason = fires(s, {}, time=time)
        assert fired is expected, reason
        if not expected:
            assert timezone in reason

    @pytest.mark.parametrize(
        ("time_filter", "problem"),
        # pkg/reconciler/sensor/validate.go validateEventTimeFilter: the controller refuses the
        # Sensor, so no sensor pod runs and nothing fires, whatever the event.
        [({"start": "09:00:00", "stop": "09:00:00"}, "is equal to start"),
         ({"start": "09:00:00", "stop": "17:00:00", "timezone": "Mars/Olympus_Mons"}, "invalid timezone"),
         ({"start": "9am", "stop": "17:00:00"}, 'cannot parse "am" as ":"')],
    )
    def test_sensor_the_controller_rejects_never_fires(self, time_filter: dict[str, str], problem: str) -> None:
        fired, reason = fires(sensor({"time": time_filter}), {}, time="2026-12-01T09:30:00Z")
        assert fired is False
        assert "the Sensor controller rejects this Sensor" in reason and problem in reason

    def test_script_filter_is_reported_not_guessed(self) -> None:
        fired, reason = fires(sensor({"script": "return event.type == 'UPDATE'"}), {"type": "UPDATE"})
        assert not fired and "Lua" in reason and "not evaluated" in reason


class TestExprFilters:
    def expr(self, expression: str, **fields: str) -> dict[str, Any]:
        return {"exprs": [{"expr": expression, "fields": [{"name": k, "path": v} for k, v in fields.items()]}]}

    def test_expression_over_named_fields(self) -> None:
        s = sensor(self.expr('kind == "UPDATE" && gpus >= 4', kind="type", gpus="body.spec.podSets.0.count"))
        assert fires(s, ADMITTED)[0]

    def test_false_expression_explains_the_values(self) -> None:
        s = sensor(self.expr("gpus > 4", gpus="body.spec.podSets.0.count"))
        fired, reason = fires(s, ADMITTED)
        assert not fired and reason == "expr filter 1 (gpus > 4): evaluated to false with gpus=4"

    def test_missing_field_path_is_an_error(self) -> None:
        fired, reason = fires(sensor(self.expr("x == 1", x="nope")), ADMITTED)
        assert not fired and "path 'nope' (field x) does not exist" in reason

    def test_regex_operators_are_unanchored_go_regexps(self) -> None:
        assert fires(sensor(self.expr('status =~ "True"', status=ADMITTED_PATH)), NOT_ADMITTED)[0]
        assert not fires(sensor(self.expr('status =~ "^True$"', status=ADMITTED_PATH)), NOT_ADMITTED)[0]
        assert fires(sensor(self.expr('status !~ "^True$"', status=ADMITTED_PATH)), NOT_ADMITTED)[0]

    def test_type_errors_fail_the_filter(self) -> None:
        fired, reason = fires(sensor(self.expr("name > 3", name="body.metadata.name")), ADMITTED)
        assert not fired and "is not a number" in reason

    def test_string_and_number_are_never_equal(self) -> None:
        assert not fires(sensor(self.expr('gpus == "4"', gpus="body.spec.podSets.0.count")), ADMITTED)[0]

    def test_expr_or(self) -> None:
        spec = {"exprLogicalOperator": "or", "exprs": [
            {"expr": "x == 1", "fields": [{"name": "x", "path": "nope"}]},
            {"expr": 'k == "UPDATE"', "fields": [{"name": "k", "path": "type"}]}]}
        assert fires(sensor(spec), ADMITTED)[0]

    def test_code_is_never_executed(self) -> None:
        fired, reason = fires(sensor(self.expr("__import__('os').system('true')", k="type")), ADMITTED)
        assert not fired and "expr filter 1" in reason


class TestEventData:
    def test_event_without_data_passes_data_and_expr_filters(self) -> None:
        """filter.go returns true when event.Data is nil: a data filter does not guard an empty event."""
        s = sensor({"data": [string_filter("type", "^UPDATE$")],
                    "exprs": [{"expr": "x == 1", "fields": [{"name": "x", "path": "x"}]}]})
        event = {"specversion": "1.0", "id": "no-data", "source": "demo-source", "subject": "demo-event",
                 "type": "resource"}
        assert router(s).route(event).triggered

    def test_data_that_is_not_json_fails_the_data_filter(self) -> None:
        event = cloudevent(None, data_base64=base64.b64encode(b"type=UPDATE").decode())
        del event["data"]
        result = router(sensor(data(string_filter("type", "UPDATE")))).route(event)
        assert not result.triggered and "not valid JSON" in result.skipped[0].reason

    def test_string_data_is_a_json_string(self) -> None:
        assert fires(sensor(data(string_filter("@this", "^hello$"))), "hello")[0]
