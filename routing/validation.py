"""The Sensor controller's verdict on a Sensor, before any event: argo-events v1.9.11
`pkg/reconciler/sensor/validate.go` (ValidateSensor) with a JetStream EventBus.

A Sensor the controller rejects gets a status condition and no Deployment: no sensor pod runs,
so nothing it declares ever fires, whatever the event. The checks and their messages are the
controller's (`kubectl get sensor NAME -o yaml` shows the same text under status.conditions).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from routing.gotime import GoTimeError, load_location, local_date, parse_clock, unix_nanos, wall_clock_nanos

_LOGICAL_OPERATORS = ("and", "or", "")
_COMPARATORS = (">=", ">", "=", "!=", "<", "<=", "")
_PARAMETER_OPERATIONS = ("append", "overwrite", "prepend", "")
_K8S_OPERATIONS = ("", "create", "patch", "update", "delete")
_WORKFLOW_OPERATIONS = ("submit", "submit-from", "suspend", "retry", "resume", "resubmit", "terminate", "stop")
_HTTP_METHODS = ("GET", "DELETE", "PATCH", "POST", "PUT")


class SensorRejected(ValueError):
    """What ValidateSensor returns; the controller deploys nothing."""


def validate_sensor(sensor: dict[str, Any], now_nanos: int | None = None) -> str | None:
    """The controller's error for this Sensor, or None when it deploys it."""
    try:
        spec = sensor.get("spec") or {}
        _dependencies(spec.get("dependencies") or [], now_nanos)
        _triggers(spec.get("triggers") or [])
    except SensorRejected as exc:
        return str(exc)
    return None


def _s(value: Any) -> str:
    """A Go string field: absent or null is ""."""
    return "" if value is None else str(value)


def _dependencies(dependencies: list[dict[str, Any]], now_nanos: int | None) -> None:
    if len(dependencies) < 1:
        raise SensorRejected("no event dependencies found")
    for dep in dependencies:
        if not _s(dep.get("name")):
            raise SensorRejected("event dependency must define a name")
        if not _s(dep.get("eventSourceName")):
            raise SensorRejected("event dependency must define the EventSourceName")
        if not _s(dep.get("eventName")):
            raise SensorRejected("event dependency must define the EventName")
        _filter(dep.get("filters"), now_nanos)
        _logical_operator(dep.get("filtersLogicalOperator"))


def _logical_operator(value: Any) -> None:
    if _s(value) not in _LOGICAL_OPERATORS:
        raise SensorRejected(f"logical operator {_s(value)} not supported")


def _filter(filters: dict[str, Any] | None, now_nanos: int | None) -> None:
    if filters is None:
        return
    _logical_operator(filters.get("exprLogicalOperator"))
    _logical_operator(filters.get("dataLogicalOperator"))
    for expr in filters.get("exprs") or []:
        fields = expr.get("fields") or []
        if not _s(expr.get("expr")) or len(fields) == 0:
            raise SensorRejected("one of expr filters is not valid (expr and fields must be not empty)")
        for field in fields:
            if not _s(field.get("path")) or not _s(field.get("name")):
                raise SensorRejected("one of expr filters is not valid (path and name in a field must be not empty)")
    for data in filters.get("data") or []:
        comparator = _s(data.get("comparator"))
        if comparator not in _COMPARATORS:
            raise SensorRejected(f"comparator {comparator} not supported")
        values = data.get("value") or []
        if not _s(data.get("path")) or not _s(data.get("type")) or len(values) == 0:
            raise SensorRejected("one of data filters is not valid (type, path and value must be not empty)")
        if any(_s(v) == "" for v in values):
            raise SensorRejected("one of data filters is not valid (value must be not empty)")
    context = filters.get("context")
    if context is not None and not any(_s(context.get(k)) for k in ("type", "subject", "source",
                                                                      "datacontenttype")):
        raise SensorRejected("no fields specified in ctx filter (aka all events will be discarded)")
    if filters.get("time") is not None:
        _time_filter(filters["time"], now_nanos)


def _time_filter(time_filter: dict[str, Any], now_nanos: int | None) -> None:
    """validateEventTimeFilter: the zone loads, start and stop parse (on today's date), and differ."""
    zone_name = _s(time_filter.get("timezone"))
    start_text, stop_text = _s(time_filter.get("start")), _s(time_filter.get("stop"))
    try:
        zone = load_location(zone_name)
    except GoTimeError as exc:
        raise SensorRejected(f"invalid timezone '{zone_name}': {exc}") from None
    now = now_nanos if now_nanos is not None else unix_nanos(datetime.now(UTC))
    date = local_date(now, zone)
    try:
        start = wall_clock_nanos(date, parse_clock(date, start_text), zone)
        stop = wall_clock_nanos(date, parse_clock(date, stop_text), zone)
    except GoTimeError as exc:
        raise SensorRejected(str(exc)) from None
    if start == stop:
        raise SensorRejected(f"invalid event time filter: stop '{stop_text}' is equal to start '{start_text}")


def _triggers(triggers: list[dict[str, Any]]) -> None:
    if len(triggers) < 1:
        raise SensorRejected("no triggers found")
    names: set[str] = set()
    for trigger in triggers:
        _trigger(trigger)
        name = _s((trigger.get("template") or {}).get("name"))
        if name in names:
            raise SensorRejected(f"duplicate trigger name: {name}")
        names.add(name)


def _trigger(trigger: dict[str, Any]) -> None:
    template = trigger.get("template")
    _template(template)
    _policy(trigger, template or {})
    for i, parameter in enumerate(trigger.get("parameters") or []):
        _parameter(parameter, f"template parameter index: {i}. err: ")
    dlq = trigger.get("dlqTrigger")
    if dlq is not None:
        if not trigger.get("atLeastOnce"):
            raise SensorRejected("to use dlqTrigger, trigger.atLeastOnce must be set to true")
        if not dlq.get("atLeastOnce"):
            raise SensorRejected("atLeastOnce must be set to true within the dlqTrigger")
        _trigger(dlq)


def _template(template: dict[str, Any] | None) -> None:
    if template is None:
        raise SensorRejected("trigger template can't be nil")
    name = _s(template.get("name"))
    if not name:
        raise SensorRejected("trigger must define a name")
    for reset in template.get("conditionsReset") or []:
        by_time = reset.get("byTime")
        if by_time is None:
            raise SensorRejected("invalid conditionsReset")
        cron = _s(by_time.get("cron"))
        if not valid_cron(cron):
            raise SensorRejected(f"invalid cron expression {_go_q(cron)}")
        try:
            load_location(_s(by_time.get("timezone")))
        except GoTimeError:
            raise SensorRejected(f"invalid timezone {_go_q(_s(by_time.get('timezone')))}") from None
    checks = (
        ("k8s", _k8s, "trigger for template {name} is invalid, "),
        ("argoWorkflow", _argo_workflow, "template {name} is invalid, "),
        ("http", _http, "template {name} is invalid, "),
        ("awsLambda", _aws_lambda, "template {name} is invalid, "),
        ("kafka", _kafka, "template {name} is invalid, "),
        ("nats", _nats, "template {name} is invalid, "),
        ("slack", _slack, "template {name} is invalid, "),
        ("openWhisk", _open_whisk, "template {name} is invalid, "),
        ("custom", _custom, "template {name} is invalid, "),
        ("email", _email, "template {name} is invalid, "),
    )
    for key, check, prefix in checks:
        if template.get(key) is not None:
            try:
                check(template[key])
            except SensorRejected as exc:
                raise SensorRejected(prefix.format(name=name) + str(exc)) from None


def _parameters(parameters: list[dict[str, Any]] | None, prefix: str) -> None:
    for i, parameter in enumerate(parameters or []):
        _parameter(parameter, f"{prefix}: {i}. err: ")


def _parameter(parameter: dict[str, Any], prefix: str, allow_empty_dest: bool = False) -> None:
    src = parameter.get("src")
    if src is None:
        raise SensorRejected(prefix + "parameter source can't be empty")
    if not _s(src.get("dependencyName")):
        raise SensorRejected(prefix + "parameter dependency name can't be empty")
    if not allow_empty_dest and not _s(parameter.get("dest")):
        raise SensorRejected(prefix + "parameter destination can't be empty")
    operation = _s(parameter.get("operation"))
    if operation not in _PARAMETER_OPERATIONS:
        raise SensorRejected(prefix + f"parameter operation {operation} is invalid")


def _k8s(trigger: dict[str, Any]) -> None:
    if trigger.get("source") is None:
        raise SensorRejected("k8s trigger does not contain an absolute action")
    if _s(trigger.get("operation")) not in _K8S_OPERATIONS:
        raise SensorRejected(f"unknown operation type {_s(trigger.get('operation'))}")
    _parameters(trigger.get("parameters"), "resource parameter index")


def _argo_workflow(trigger: dict[str, Any]) -> None:
    if trigger.get("source") is None:
        raise SensorRejected("argoWorkflow trigger does not contain an absolute action")
    if _s(trigger.get("operation")) not in _WORKFLOW_OPERATIONS:  # no default: "" is refused
        raise SensorRejected(f"unknown operation type {_s(trigger.get('operation'))}")
    _parameters(trigger.get("parameters"), "resource parameter index")


def _http(trigger: dict[str, Any]) -> None:
    if not _s(trigger.get("url")):
        raise SensorRejected("server URL is not specified")
    if _s(trigger.get("method")) and _s(trigger.get("method")) not in _HTTP_METHODS:
        raise SensorRejected("only GET, DELETE, PATCH, POST and PUT methods are supported")
    _parameters(trigger.get("parameters"), "resource parameter index")
    for i, parameter in enumerate(trigger.get("payload") or []):
        _parameter(parameter, f"payload index: {i}. err: ", allow_empty_dest=True)


def _open_whisk(trigger: dict[str, Any]) -> None:
    if not _s(trigger.get("actionName")):
        raise SensorRejected("action name is not specified")
    if not _s(trigger.get("host")):
        raise SensorRejected("host URL is not specified")
    token = trigger.get("authToken")
    if token is not None and (not _s(token.get("name")) or not _s(token.get("key"))):
        raise SensorRejected("auth token key and name must be specified")
    _parameters(trigger.get("parameters"), "resource parameter index")
    if trigger.get("payload") is None:
        raise SensorRejected("payload parameters are not specified")
    _parameters(trigger.get("payload"), "resource parameter index")


def _aws_lambda(trigger: dict[str, Any]) -> None:
    if not _s(trigger.get("functionName")):
        raise SensorRejected("function name is not specified")
    if not _s(trigger.get("region")):
        raise SensorRejected("region in not specified")
    if trigger.get("payload") is None:
        raise SensorRejected("payload parameters are not specified")
    _parameters(trigger.get("parameters"), "resource parameter index")
    _parameters(trigger.get("payload"), "payload index")


def _kafka(trigger: dict[str, Any]) -> None:
    if not _s(trigger.get("url")):
        raise SensorRejected("broker url must not be empty")
    if trigger.get("payload") is None:
        raise SensorRejected("payload must not be empty")
    if not _s(trigger.get("topic")):
        raise SensorRejected("topic must not be empty")
    _parameters(trigger.get("payload"), "payload index")


def _nats(trigger: dict[str, Any]) -> None:
    if not _s(trigger.get("url")):
        raise SensorRejected("nats server url can't be empty")
    if not _s(trigger.get("subject")):
        raise SensorRejected("nats subject can't be empty")
    if trigger.get("payload") is None:
        raise SensorRejected("payload can't be nil")
    _parameters(trigger.get("payload"), "payload index")


def _slack(trigger: dict[str, Any]) -> None:
    if trigger.get("slackToken") is None:
        raise SensorRejected("slack token can't be empty")
    _parameters(trigger.get("parameters"), "resource parameter index")


def _email(trigger: dict[str, Any]) -> None:
    if not _s(trigger.get("host")):
        raise SensorRejected("host can't be empty")
    port = trigger.get("port") or 0
    if isinstance(port, int) and not 0 <= port <= 65535:
        raise SensorRejected(f"port: {port}, port should be between 0-65535")
    _parameters(trigger.get("parameters"), "resource parameter index")


def _custom(trigger: dict[str, Any]) -> None:
    if not _s(trigger.get("serverURL")):
        raise SensorRejected("custom trigger gRPC server url is not defined")
    if trigger.get("spec") is None:
        raise SensorRejected("trigger body can't be empty")
    if trigger.get("secure") and trigger.get("certSecret") is None:
        raise SensorRejected("certSecret can't be nil when the trigger server connection is secure")
    _parameters(trigger.get("parameters"), "resource parameter index")


def _policy(trigger: dict[str, Any], template: dict[str, Any]) -> None:
    policy = trigger.get("policy")
    if policy is None:
        return
    if template.get("k8s") is not None or template.get("argoWorkflow") is not None:
        k8s = policy.get("k8s")
        if k8s is not None and k8s.get("labels") is None:
            raise SensorRejected("resource labels are not specified")
        return
    if template.get("http") is not None or template.get("awsLambda") is not None:
        status = policy.get("status")
        if status is not None and status.get("allow") is None:
            raise SensorRejected("list of allowed response status is not specified")


def _go_q(text: str) -> str:
    """fmt's %q for printable text."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# ---------------------------------------------------------------------------------------------
# robfig/cron v3 with Minute | Hour | Dom | Month | Dow (what conditionsReset.byTime.cron takes)

_CRON_FIELDS = ((0, 59, None), (0, 23, None), (1, 31, None),
                (1, 12, {m: i + 1 for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug",
                                                          "sep", "oct", "nov", "dec"))}),
                (0, 6, {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}))
_ATOI = re.compile(r"[+-]?[0-9]+")


def valid_cron(spec: str) -> bool:
    """Whether robfig/cron's standard five-field parser accepts `spec` (no @descriptors)."""
    if spec.startswith(("TZ=", "CRON_TZ=")):
        head, _, spec = spec.partition(" ")
        try:
            load_location(head.split("=", 1)[1])
        except GoTimeError:
            return False
        spec = spec.strip()
    if not spec or spec.startswith("@"):
        return False
    fields = spec.split()
    if len(fields) != 5:
        return False
    return all(_cron_field(field, *bounds) for field, bounds in zip(fields, _CRON_FIELDS, strict=True))


def _cron_field(field: str, low: int, high: int, names: dict[str, int] | None) -> bool:
    for expr in field.split(","):
        range_and_step = expr.split("/")
        low_high = range_and_step[0].split("-")
        if low_high[0] in ("*", "?"):
            start, end = low, high
        else:
            start = _cron_int(low_high[0], names)
            if start is None:
                return False
            if len(low_high) == 1:
                end = start
            elif len(low_high) == 2:
                end = _cron_int(low_high[1], names)
                if end is None:
                    return False
            else:
                return False
        if len(range_and_step) == 2:
            step = _cron_int(range_and_step[1], None)
            if step is None or step == 0:
                return False
            if len(low_high) == 1:
                end = high
        elif len(range_and_step) > 2:
            return False
        if start < low or end > high or start > end:
            return False
    return True


def _cron_int(text: str, names: dict[str, int] | None) -> int | None:
    if names is not None and text.lower() in names:
        return names[text.lower()]
    if not _ATOI.fullmatch(text):
        return None
    value = int(text)
    return None if value < 0 else value
