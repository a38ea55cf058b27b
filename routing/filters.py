"""A dependency's `filters`, evaluated with the semantics of argo-events
`pkg/sensors/dependencies/filter.go`, and explained.

Order and combination follow the Go code exactly: exprs, data, context, time, script.
With `filtersLogicalOperator: and` (default) an error in exprs or data fails the dependency
immediately; with `or` the dependency passes if any DEFINED filter group passed.
Inside a group, `dataLogicalOperator`/`exprLogicalOperator` combine entries the same way.
Data filters: a missing path is an error; string values are Go regexps matched unanchored and
OR-ed; `!=` means "matches none"; numbers compare with the comparator; bools use ParseBool.
A Lua `script` filter cannot be evaluated here: the dependency is reported as not evaluated.

Everything is compiled once (`compile_filters`) so routing an event only runs lookups.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from routing.event import ArgoEvent
from routing.gjson import GjsonPath, Result, UnsupportedPath, compile_path
from routing.goregexp import GoRegexpError, GoRegexpUnsupported, compile_go_regexp
from routing.gostrconv import GoNumberError, go_quote, parse_float
from routing.gotemplate import Template, TemplateError, TemplateUnsupported, parse_template
from routing.gotime import GoTimeError, load_location, local_clock, local_date, parse_clock, wall_clock_nanos
from routing.govaluate import Expression, ExpressionError, ExpressionPanic

_COMPARATORS = (">=", ">", "=", "!=", "<", "<=", "")
_GO_BOOLS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
             "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}


@dataclass
class Verdict:
    """Outcome of filtering one event for one dependency."""

    passed: bool
    reason: str  # why it failed (or "" when it passed)
    evaluated: bool = True  # False when a filter (Lua script) could not be evaluated here
    errors: tuple[str, ...] = ()  # filter groups that returned an error (expr, data, time), as Filter() does


_UNSUPPORTED = "\x00not-evaluated\x00"


class _NotEvaluated(Exception):
    """A filter uses something gpuaas route does not evaluate (like a Lua script)."""


class _Panic(Exception):
    """govaluate panics inside Filter: the sensor process crashes (whatever the logical operators)."""


class _Failure(Exception):
    """A filter error: the Go code returns (false, err)."""

    def __init__(self, message: str, stage: str = "") -> None:
        super().__init__(message)
        self.stage = stage


def _quote(text: str, limit: int = 120) -> str:
    shown = text if len(text) <= limit else text[:limit] + "..."
    return '"' + shown.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


# ---------------------------------------------------------------------------------------------
# data filters


@dataclass
class DataFilter:
    index: int
    path_text: str
    path: GjsonPath | None
    path_error: str | None
    type: str
    values: list[str]
    comparator: str
    template: Template | None
    template_error: str | None
    template_unsupported: bool
    patterns: list[tuple[str, re.Pattern[str] | None, str | None]]

    @property
    def label(self) -> str:
        return f"data filter {self.index} ({self.path_text})"

    def check(self, event: ArgoEvent) -> tuple[bool, str]:
        """(matched, explanation). Raises _Failure for what Go treats as an error."""
        if self.path is None:
            raise _NotEvaluated(f"{self.label}: {self.path_error}")
        result = self.path.get(event.document)
        if not result.exists():
            raise _Failure(
                f"{self.label}: path does not exist in the event data (a missing path is an error, "
                f"so the filter fails)"
            )
        if not self.values:
            raise _Failure(f"{self.label}: no values specified")
        shown_input = result.string()
        if self.template is not None or self.template_error is not None:
            if self.template is None:
                if self.template_unsupported:
                    raise _NotEvaluated(f"{self.label}: {self.template_error}")
                raise _Failure(f"{self.label}: template does not parse: {self.template_error}")
            try:
                out = self.template.execute({"Input": result.string()})
            except TemplateUnsupported as exc:
                raise _NotEvaluated(f"{self.label}: template: {exc}") from None
            except TemplateError as exc:
                raise _Failure(f"{self.label}: template failed: {exc}") from None
            if out in ("", "<no value>"):
                raise _Failure(f"{self.label}: template evaluated to empty string or no value")
            result = _StringResult(out)
            shown_input = out
        if self.type == "bool":
            return self._check_bool(result, shown_input)
        if self.type == "number":
            return self._check_number(result, shown_input)
        if self.type == "string":
            return self._check_string(result.string())
        raise _Failure(f"{self.label}: unsupported JSON type {self.type!r} (use string, number or bool)")

    def _check_bool(self, result: Any, shown: str) -> tuple[bool, str]:
        actual = result.bool()
        for value in self.values:
            if value not in _GO_BOOLS:
                raise _Failure(f'{self.label}: strconv.ParseBool: parsing {go_quote(value)}: invalid syntax')
            if _GO_BOOLS[value] == actual:
                return True, ""
        return False, f"{self.label}: value {_quote(shown)} (as bool: {str(actual).lower()}) is not {' or '.join(self.values)}"

    def _check_number(self, result: Any, shown: str) -> tuple[bool, str]:
        actual = result.float()
        op = self.comparator or "="
        for value in self.values:
            try:
                wanted = parse_float(value)
            except GoNumberError as exc:
                raise _Failure(f"{self.label}: {exc}") from None
            if _compare_number(actual, op, wanted):
                return True, ""
        wanted_text = " or ".join(f"{op} {v}" for v in self.values)
        return False, f"{self.label}: value {_quote(shown)} (as number: {actual:g}) is not {wanted_text}"

    def _check_string(self, actual: str) -> tuple[bool, str]:
        op = self.comparator or "="
        for text, pattern, error in self.patterns:
            if pattern is None:
                if error and error.startswith(_UNSUPPORTED):
                    raise _NotEvaluated(f"{self.label}: {error[len(_UNSUPPORTED):]}")
                raise _Failure(f"{self.label}: {error}")
            matched = pattern.search(actual) is not None
            if (op == "=" and matched) or (op == "!=" and not matched):
                return True, ""
        values = ", ".join(t for t, _, _ in self.patterns)
        if op == "=":
            if len(self.patterns) == 1:
                return False, f"{self.label}: value {_quote(actual)} does not match {values}"
            return False, f"{self.label}: value {_quote(actual)} matches none of [{values}]"
        if op == "!=":
            if len(self.patterns) == 1:
                return False, f"{self.label}: value {_quote(actual)} matches {values} (comparator !=)"
            return False, f"{self.label}: value {_quote(actual)} matches every one of [{values}] (comparator !=)"
        return False, (
            f"{self.label}: comparator {op!r} never matches a string filter (Argo Events only "
            f"implements = and != for strings)"
        )


class _StringResult:
    """`gjson.Parse(strconv.Quote(out))`: a template's output seen as a JSON string."""

    def __init__(self, text: str) -> None:
        self.text = text

    def string(self) -> str:
        return self.text

    def bool(self) -> bool:
        from routing.gjson import go_string_bool

        return go_string_bool(self.text)

    def float(self) -> float:
        from routing.gjson import go_parse_float

        return go_parse_float(self.text)


def _compare_number(actual: float, op: str, wanted: float) -> bool:
    if op == ">=":
        return actual >= wanted
    if op == ">":
        return actual > wanted
    if op == "<":
        return actual < wanted
    if op == "<=":
        return actual <= wanted
    if op == "!=":
        return actual != wanted
    if op in ("=", ""):
        return actual == wanted
    return False


def _compile_data(index: int, spec: dict[str, Any]) -> DataFilter:
    path_text = str(spec.get("path", ""))
    path, path_error = None, None
    try:
        path = compile_path(path_text)
    except UnsupportedPath as exc:
        path_error = str(exc)
    values = [str(v) for v in (spec.get("value") or [])]
    template, template_error, template_unsupported = None, None, False
    if spec.get("template"):
        try:
            template = parse_template(str(spec["template"]))
        except TemplateError as exc:
            template_error = str(exc)
            template_unsupported = isinstance(exc, TemplateUnsupported)
    patterns: list[tuple[str, re.Pattern[str] | None, str | None]] = []
    if spec.get("type") == "string":
        for value in values:
            try:
                patterns.append((value, compile_go_regexp(value), None))
            except GoRegexpUnsupported as exc:
                patterns.append((value, None, _UNSUPPORTED + str(exc)))
            except GoRegexpError as exc:
                patterns.append((value, None, str(exc)))
    return DataFilter(
        index=index,
        path_text=path_text,
        path=path,
        path_error=path_error,
        type=str(spec.get("type", "")),
        values=values,
        comparator=str(spec.get("comparator") or ""),
        template=template,
        template_error=template_error,
        template_unsupported=template_unsupported,
        patterns=patterns,
    )


# ---------------------------------------------------------------------------------------------
# expr filters


@dataclass
class ExprFilter:
    index: int
    text: str
    expression: Expression | None
    parse_error: str | None
    fields: list[tuple[str, str, GjsonPath | None, str | None]]  # (name, path text, path, error)
    parse_panic: bool = False  # govaluate panics while parsing (a trailing backslash)

    @property
    def label(self) -> str:
        return f"expr filter {self.index} ({self.text})"

    def parameters(self, event: ArgoEvent) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for name, path_text, path, error in self.fields:
            if path is None:
                raise _NotEvaluated(f"{self.label}: field {name}: {error}")
            result: Result = path.get(event.document)
            if not result.exists():
                raise _Failure(f"{self.label}: path '{path_text}' (field {name}) does not exist")
            params[name] = result.value()
        return params


def _compile_expr(index: int, spec: dict[str, Any]) -> ExprFilter:
    text = str(spec.get("expr", ""))
    expression, parse_error = None, None
    parse_panic = False
    try:
        expression = Expression(text)
    except GoRegexpUnsupported as exc:
        parse_error = _UNSUPPORTED + str(exc)
    except ExpressionError as exc:
        parse_error = str(exc)
        parse_panic = isinstance(exc, ExpressionPanic)
    fields = []
    for f in spec.get("fields") or []:
        path_text = str(f.get("path", ""))
        try:
            fields.append((str(f.get("name", "")), path_text, compile_path(path_text), None))
        except UnsupportedPath as exc:
            fields.append((str(f.get("name", "")), path_text, None, str(exc)))
    return ExprFilter(index=index, text=text, expression=expression, parse_error=parse_error, fields=fields,
                      parse_panic=parse_panic)


# ---------------------------------------------------------------------------------------------
# the whole filter block


@dataclass
class DependencyFilters:
    data: list[DataFilter] | None
    data_or: bool
    exprs: list[ExprFilter] | None
    expr_or: bool
    context: dict[str, str] | None
    time: tuple[str, str, str] | None  # start, stop, timezone
    script: str
    filters_or: bool

    def evaluate(self, event: ArgoEvent) -> Verdict:
        errors: list[str] = []
        failed: list[str] = []

        def stage(name: str, result: tuple[bool, str | None, str]) -> tuple[bool, str]:
            passed, error, why = result
            if error is not None:
                if not self.filters_or:
                    raise _Failure(error, name)
                errors.append(error)
                failed.append(name)
            return passed, why

        try:
            expr_ok, expr_why = stage("expr", self._exprs(event))
            data_ok, data_why = stage("data", self._data(event))
            ctx_ok, ctx_why = self._context(event)
            time_ok, time_why = stage("time", self._time(event))
        except _Failure as exc:
            return Verdict(False, str(exc), errors=(exc.stage,))
        except _NotEvaluated as exc:
            return Verdict(False, f"{exc}; cannot tell whether it passes", evaluated=False)
        except _Panic as exc:
            return Verdict(False, f"{exc} -- govaluate panics here: the sensor process crashes on this event and "
                                  f"restarts, and nothing fires", errors=("panic",))
        script_set = bool(self.script)
        if not self.filters_or:
            for ok, why in ((expr_ok, expr_why), (data_ok, data_why), (ctx_ok, ctx_why), (time_ok, time_why)):
                if not ok:
                    return Verdict(False, why)
            if script_set:
                return Verdict(False, _SCRIPT_REASON, evaluated=False)
            return Verdict(True, "")
        parts = [
            (self.exprs is not None, expr_ok, expr_why),
            (self.data is not None, data_ok, data_why),
            (self.context is not None, ctx_ok, ctx_why),
            (self.time is not None, time_ok, time_why),
        ]
        if failed:  # Filter() turns any error into a failure, even when a group passed
            return Verdict(False, "filter errors (filtersLogicalOperator: or): " + "; ".join(errors),
                           errors=tuple(failed))
        if any(defined and ok for defined, ok, _ in parts):
            return Verdict(True, "")
        if script_set:
            return Verdict(False, _SCRIPT_REASON + " (no other filter passed under filtersLogicalOperator: or)",
                           evaluated=False, errors=tuple(failed))
        whys = [why for defined, ok, why in parts if defined and why] + errors
        if not any(defined for defined, _, _ in parts):
            return Verdict(False, "filtersLogicalOperator is 'or' but no filter is defined, so nothing can pass",
                           errors=tuple(failed))
        return Verdict(False, "no filter passed (filtersLogicalOperator: or): " + "; ".join(dict.fromkeys(whys)),
                       errors=tuple(failed))

    def _exprs(self, event: ArgoEvent) -> tuple[bool, str | None, str]:
        """(passed, error, why-not). Mirrors filterExpr."""
        if self.exprs is None:
            return True, None, ""
        if event.data is None:
            return True, None, ""
        if not event.data_is_json:
            return False, "expr filter: event data is not valid JSON", ""
        errors: list[str] = []
        whys: list[str] = []
        for f in self.exprs:
            try:
                params = f.parameters(event)
            except _Failure as exc:
                if not self.expr_or:
                    return False, str(exc), ""
                errors.append(str(exc))
                continue
            if not params:
                continue
            if f.expression is None:
                if f.parse_error and f.parse_error.startswith(_UNSUPPORTED):
                    raise _NotEvaluated(f"{f.label}: {f.parse_error[len(_UNSUPPORTED):]}")
                if f.parse_panic:
                    raise _Panic(f"{f.label}: {f.parse_error}")
                if not self.expr_or:
                    return False, f"{f.label}: {f.parse_error}", ""
                errors.append(f"{f.label}: {f.parse_error}")
                continue
            try:
                result = f.expression.evaluate(params)
            except GoRegexpUnsupported as exc:
                raise _NotEvaluated(f"{f.label}: {exc}") from None
            except ExpressionPanic as exc:
                raise _Panic(f"{f.label}: {exc}") from None
            except ExpressionError as exc:
                if not self.expr_or:
                    return False, f"{f.label}: {exc}", ""
                errors.append(f"{f.label}: {exc}")
                continue
            if result is True:
                if self.expr_or:
                    return True, None, ""
            else:
                shown = ", ".join(f"{k}={_show(v)}" for k, v in params.items())
                why = f"{f.label}: evaluated to {_show(result)} with {shown}"
                if not self.expr_or:
                    return False, None, why
                whys.append(why)
        if self.expr_or:
            if errors:
                return False, "; ".join(["expr filter errors [" + " / ".join(errors) + "]", *whys]), ""
            return False, None, "no expr filter passed (exprLogicalOperator: or): " + "; ".join(whys)
        return True, None, ""

    def _data(self, event: ArgoEvent) -> tuple[bool, str | None, str]:
        """(passed, error, why-not). Mirrors filterData."""
        if not self.data:
            return True, None, ""
        if event.data is None:
            return True, None, ""
        if not event.data_is_json:
            return False, "data filter: event data is not valid JSON", ""
        errors: list[str] = []
        whys: list[str] = []
        for f in self.data:
            try:
                matched, why = f.check(event)
            except _Failure as exc:
                if not self.data_or:
                    return False, str(exc), ""
                errors.append(str(exc))
                continue
            if matched and self.data_or:
                return True, None, ""
            if not matched:
                if not self.data_or:
                    return False, None, why
                whys.append(why)
        if self.data_or:
            if errors:
                return False, "; ".join(["data filter errors [" + " / ".join(errors) + "]", *whys]), ""
            return False, None, "no data filter passed (dataLogicalOperator: or): " + "; ".join(whys)
        return True, None, ""

    def _context(self, event: ArgoEvent) -> tuple[bool, str]:
        if self.context is None:
            return True, ""
        actual = {"type": event.type, "subject": event.subject, "source": event.source,
                  "datacontenttype": event.datacontenttype}
        for key in ("type", "subject", "source", "datacontenttype"):
            wanted = self.context.get(key) or ""
            if wanted and wanted != actual[key]:
                return False, f"context filter: {key} is {_quote(actual[key])}, expected exactly {_quote(wanted)}"
        return True, ""

    def _time(self, event: ArgoEvent) -> tuple[bool, str | None, str]:
        """(passed, error, why-not). Mirrors filterTime: the window [start, stop) on the event's
        date, in `timezone` when set (else UTC); stop before start wraps past midnight."""
        if self.time is None:
            return True, None, ""
        start_text, stop_text, zone_name = self.time
        try:
            zone = load_location(zone_name)
        except GoTimeError as exc:
            return False, f"time filter: invalid timezone '{zone_name}': {exc}", ""
        moment = event.unix_nanos
        date = local_date(moment, zone)
        try:
            start = wall_clock_nanos(date, parse_clock(date, start_text), zone)
            stop = wall_clock_nanos(date, parse_clock(date, stop_text), zone)
        except GoTimeError as exc:
            return False, f"time filter: {exc}", ""
        ok = start <= moment < stop if start < stop else (moment >= start or moment < stop)
        if ok:
            return True, None, ""
        where = zone_name or "UTC"
        return False, None, (f"time filter: event time {local_clock(moment, zone)} {where} is outside "
                             f"[{start_text}, {stop_text}) {where}")


_SCRIPT_REASON = "script filter (Lua) is not evaluated by gpuaas route; cannot tell whether it passes"


def _show(value: Any) -> str:
    from routing.gofmt import go_sprint

    if isinstance(value, str):
        return _quote(value, 60)
    return go_sprint(value)


def compile_filters(spec: dict[str, Any] | None, filters_logical_operator: str | None) -> DependencyFilters | None:
    """Compile a dependency's `filters` block (None when the dependency has no filters)."""
    if spec is None:
        return None
    data = spec.get("data")
    exprs = spec.get("exprs")
    context = spec.get("context")
    time_spec = spec.get("time")
    return DependencyFilters(
        data=[_compile_data(i + 1, d) for i, d in enumerate(data)] if data else None,
        data_or=str(spec.get("dataLogicalOperator") or "") == "or",
        exprs=[_compile_expr(i + 1, e) for i, e in enumerate(exprs)] if exprs is not None else None,
        expr_or=str(spec.get("exprLogicalOperator") or "") == "or",
        context={k: str(v) for k, v in context.items() if v} if isinstance(context, dict) else None,
        time=(str(time_spec.get("start") or ""), str(time_spec.get("stop") or ""), str(time_spec.get("timezone") or ""))
        if isinstance(time_spec, dict) else None,
        script=str(spec.get("script") or ""),
        filters_or=str(filters_logical_operator or "") == "or",  # exact, as filter.go compares
    )
