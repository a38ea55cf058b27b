"""The product's settings a replay needs, read from the same YAML the admin applies:

- the idle policy: ConfigMap `gpuaas-policy` (key `policy.yaml`) or a bare `policy.yaml`,
  parsed by the steps' own `steps.policy.parse_policy`;
- the alert's window, `for` and threshold: the `GPUWorkloadIdle` rule of the PrometheusRule (or a
  plain Prometheus rule file);
- Alertmanager's group_wait, group_interval and repeat_interval: the AlertmanagerConfig route (or
  a plain Alertmanager config).

Defaults are the rendered files under manifests/base/ (what `gpuaas render` writes and `kubectl
apply -k` installs). Errors name the file and the key, and say what to do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuaas.invocation import command
from gpuaas.manifests.observability import ALERT_NAME, GPU_ACTIVITY
from gpuaas.simulate.alert_rule import RuleTimings
from gpuaas.simulate.alertmanager import NotificationTimings
from steps.policy import KEY, Policy, parse_policy

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests" / "base"
DEFAULT_POLICY = MANIFESTS / "policy.yaml"
DEFAULT_OBSERVABILITY = MANIFESTS / "observability.yaml"

_PROM_DURATION = re.compile(r"^((\d+)(ms|y|w|d|h|m|s))+$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


class ProductSettingsError(ValueError):
    """A settings file is missing, unreadable, or lacks what the replay needs."""


def prometheus_duration(text: str, where: str) -> float:
    """Seconds from a Prometheus/Alertmanager duration (`30s`, `5m`, `1h30m`, `1d`)."""
    value = str(text).strip()
    if not _PROM_DURATION.match(value):
        raise ProductSettingsError(f"{where}: expected a duration such as 30s, 5m or 1h30m, found {text!r}")
    return sum(int(n) * _UNITS[unit] for n, unit in re.findall(r"(\d+)(ms|y|w|d|h|m|s)", value))


def format_duration(seconds: float) -> str:
    """The shortest Prometheus duration for whole seconds (`1h30m`, `45s`)."""
    total = round(seconds)
    if total <= 0:
        return "0s"
    parts = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if total >= size:
            parts.append(f"{total // size}{unit}")
            total %= size
    return "".join(parts)


def _documents(path: Path) -> list[Any]:
    try:
        text = path.read_text()
    except OSError as error:
        raise ProductSettingsError(f"{path}: cannot read it ({error.strerror}); pass an existing file") from None
    if not text.strip():
        raise ProductSettingsError(f"{path}: expected YAML (the rendered manifest or `kubectl get ... -o yaml`), found "
                                   "an empty file")
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as error:
        raise ProductSettingsError(f"{path}: not valid YAML ({error})") from None


def load_policy(path: Path | None = None) -> tuple[Policy, str]:
    """The policy from a ConfigMap manifest (key policy.yaml) or a bare policy.yaml; (Policy, source)."""
    path = path or DEFAULT_POLICY
    documents = _documents(path)
    for document in documents:
        if isinstance(document, dict) and document.get("kind") == "ConfigMap":
            text = (document.get("data") or {}).get(KEY)
            if text is None:
                raise ProductSettingsError(f"{path}: ConfigMap has no data key {KEY!r}; expected the gpuaas-policy "
                                           "ConfigMap (kubectl -n gpuaas get configmap gpuaas-policy -o yaml)")
            return _parsed(text, path), f"{path} (ConfigMap {document.get('metadata', {}).get('name')})"
    if len(documents) == 1 and isinstance(documents[0], dict):
        return _parsed(yaml.safe_dump(documents[0]), path), str(path)
    raise ProductSettingsError(f"{path}: expected the gpuaas-policy ConfigMap or a policy.yaml document, "
                               f"found {len(documents)} document(s) without one")


def _parsed(text: str, path: Path) -> Policy:
    try:
        return parse_policy(text)
    except ValueError as error:
        raise ProductSettingsError(f"{path}: {error}") from None


def grouping(group_by: list[str]) -> str:
    """How the idle route groups alerts, in the replay's terms: per "pod", per "namespace", or "all"
    in one group (group_by `...` groups by every label, i.e. per pod)."""
    if "..." in group_by or "pod" in group_by:
        return "pod"
    return "namespace" if "namespace" in group_by else "all"


@dataclass(frozen=True)
class ProductTimings:
    rule: RuleTimings
    notifications: NotificationTimings
    source: str


_ALERT_EXPR = re.compile(r"max_over_time\(" + re.escape(GPU_ACTIVITY) + r"\[([0-9a-z]+)\]\)\)\s*<=\s*([0-9.eE+-]+)")


def rule_timings(rule: dict[str, Any], where: str) -> RuleTimings:
    """Window and threshold from the alert's expression (as `idle_alert_expr` writes it), and `for`."""
    match = _ALERT_EXPR.search(str(rule.get("expr", "")))
    if not match:
        raise ProductSettingsError(f"{where}: the {ALERT_NAME} expression is not the one gpuaas renders "
                                   f"(max_over_time({GPU_ACTIVITY}[W]) <= T); re-render it with `{command()} render`")
    return RuleTimings(window_seconds=prometheus_duration(match.group(1), f"{where} window"),
                       for_seconds=prometheus_duration(rule.get("for", "0s"), f"{where} for"),
                       threshold=float(match.group(2)))


def _find_alert(document: Any) -> dict[str, Any] | None:
    spec = document.get("spec", document) if isinstance(document, dict) else {}
    for group in (spec or {}).get("groups") or []:
        for rule in group.get("rules") or []:
            if rule.get("alert") == ALERT_NAME:
                return rule
    return None


IDLE_ALERT_LABELS = {"alertname": ALERT_NAME, "severity": "warning", "gpuaas_reaction": "on-idle"}
"""The idle alert's fixed labels (it also carries namespace and pod, whose values vary)."""
_MATCHER = re.compile(r'^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"?(.*?)"?\s*$')
_TIMING_KEYS = {"groupWait": "group_wait", "groupInterval": "group_interval", "repeatInterval": "repeat_interval",
                "groupBy": "group_by"}


def _matchers(route: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(label, operator, value) of a route, in either spelling (AlertmanagerConfig or alertmanager.yml)."""
    out: list[tuple[str, str, str]] = []
    for matcher in route.get("matchers") or []:
        if isinstance(matcher, dict):
            out.append((str(matcher.get("name")), str(matcher.get("matchType", "=")), str(matcher.get("value", ""))))
        else:
            parsed = _MATCHER.match(str(matcher))
            if parsed:
                out.append(parsed.groups())  # type: ignore[arg-type]
    out += [(k, "=", str(v)) for k, v in (route.get("match") or {}).items()]
    out += [(k, "=~", str(v)) for k, v in (route.get("match_re") or {}).items()]
    return out


def _route_matches(route: dict[str, Any]) -> bool:
    """Whether the idle alert goes down this route; a matcher on a varying label (namespace, pod) is
    taken to match, since it depends on the workload."""
    for label, operator, value in _matchers(route):
        if label not in IDLE_ALERT_LABELS:
            continue
        actual = IDLE_ALERT_LABELS[label]
        hit = actual == value if operator in ("=", "!=") else re.fullmatch(value, actual) is not None
        if hit != (operator in ("=", "=~")):
            return False
    return True


def _settings(route: dict[str, Any]) -> dict[str, Any]:
    return {_TIMING_KEYS.get(key, key): value for key, value in route.items()
            if key in _TIMING_KEYS or key in _TIMING_KEYS.values()}


def idle_route(top: dict[str, Any]) -> dict[str, Any] | None:
    """The route Alertmanager sends GPUWorkloadIdle down: from the top, the first matching child at each
    level (as Alertmanager routes without `continue`), with the timings and group_by it inherits."""
    if not _route_matches(top):
        return None
    settings = _settings(top)
    route = top
    while True:
        child = next((c for c in route.get("routes") or [] if isinstance(c, dict) and _route_matches(c)), None)
        if child is None:
            return settings
        settings = {**settings, **_settings(child)}
        route = child


def _find_route(document: Any) -> dict[str, Any] | None:
    if not isinstance(document, dict):
        return None
    if document.get("kind") == "AlertmanagerConfig":
        top = (document.get("spec") or {}).get("route")
    else:
        top = document.get("route")
    return idle_route(top) if isinstance(top, dict) else None


def load_timings(path: Path | None = None, alertmanager_path: Path | None = None) -> ProductTimings:
    """The alert rule and Alertmanager route timings from the rendered observability manifests."""
    path = path or DEFAULT_OBSERVABILITY
    documents = _documents(path) + (_documents(alertmanager_path) if alertmanager_path else [])
    rule = next((r for d in documents if (r := _find_alert(d)) is not None), None)
    if rule is None:
        raise ProductSettingsError(f"{path}: no {ALERT_NAME} alerting rule; expected the rendered "
                                   "manifests/base/observability.yaml (or `kubectl get prometheusrule gpuaas-gpu -o yaml`)")
    route = next((r for d in documents if (r := _find_route(d)) is not None), None)
    if route is None:
        raise ProductSettingsError(f"{path}: no Alertmanager route (AlertmanagerConfig gpuaas-idle); expected the "
                                   "rendered manifests/base/observability.yaml, or pass the Alertmanager config too")

    def timing(key: str, default: str) -> float:
        return prometheus_duration(route.get(key, default), f"{path} route {key}")

    group_by = [str(label) for label in route.get("group_by") or []]
    notifications = NotificationTimings(group_wait=timing("group_wait", "30s"),
                                        group_interval=timing("group_interval", "5m"),
                                        repeat_interval=timing("repeat_interval", "4h"),
                                        group_by=grouping(group_by))
    return ProductTimings(rule_timings(rule, str(path)), notifications, str(path))
