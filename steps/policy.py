"""The idle policy: ConfigMap `gpuaas-policy` (namespace $GPUAAS_NAMESPACE), key `policy.yaml`.

Defaults plus per-tenant overrides (a tenant is a ClusterQueue name). Format (EXAMPLE_POLICY_YAML
below is the documented, tested example the manifests embed):

    idle:                       # defaults for every tenant
      window: 30m               # how long GPUs must stay idle (seconds as a number, or 30s/10m/1h/1h30m;
                                # windowSeconds / minRuntimeSeconds are accepted as aliases)
      threshold: 0.05           # highest GPU activity (0-1) that still counts as idle
      minCoverage: 0.9          # share of the window the samples must cover before idle is believed
      minRuntime: 1h            # never release a workload admitted less than this ago
      mode: enforce             # enforce | dry-run (plan and record only)
      maxReleasesPerHour: 10    # per tenant; 0 = never release
    quota: {...}                # read by provision-quota (steps.reactions.provision_quota)
    tenants:
      team-a:
        idle: {mode: dry-run, window: 10m}
        quota: {weight: 2, guaranteedGpus: {a100: 4}}

Exemption is not a policy key but an annotation (or label) `gpuaas.io/idle-policy: exempt` on the
Workload or its owner: the tenant decides per workload.

    load_policy(kube, namespace) -> (Policy, source)   # defaults when the ConfigMap is absent
    parse_policy(text) -> Policy                       # PolicyError (a RejectedInput) names the field
    Policy.idle_for(tenant) -> IdleSettings            # defaults overlaid with the tenant's `idle`
    Policy.raw                                         # the whole mapping (quota reads its sections)
    default_policy_text() -> str                       # EXAMPLE_POLICY_YAML
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from steps.plan import RejectedInput

CONFIG_MAP = "gpuaas-policy"
KEY = "policy.yaml"
EXEMPT_KEY = "gpuaas.io/idle-policy"
EXEMPT_VALUE = "exempt"
MODES = ("enforce", "dry-run")

EXAMPLE_POLICY_YAML = """\
# gpuaas policy: defaults for every tenant, then per-tenant overrides (tenant = ClusterQueue name).
# Exempt one workload: annotate it (or its owner) gpuaas.io/idle-policy=exempt.
idle:
  window: 30m              # GPUs idle for this long (30s, 10m, 1h, 1h30m or seconds)
  threshold: 0.05          # activity at or below 5% counts as idle (0-1)
  minCoverage: 0.9         # samples must cover 90% of the window ("no data" is never idle)
  minRuntime: 1h           # never release a workload admitted less than an hour ago
  mode: enforce            # enforce | dry-run
  maxReleasesPerHour: 10   # per tenant; 0 = never release
quota:
  cohort: gpuaas           # the shared cohort of every tenant's ClusterQueue
  queueingStrategy: BestEffortFIFO
  weight: 1                # capacity split weight
  guaranteedGpus: 0        # GPUs a tenant keeps whatever the others need
tenants:
  team-a:
    idle:
      window: 1h
      mode: dry-run
    quota:
      weight: 2
      guaranteedGpus: 4
"""


def default_policy_text() -> str:
    """The documented example policy (what `gpuaas render` puts in the ConfigMap)."""
    return EXAMPLE_POLICY_YAML


class PolicyError(RejectedInput):
    """The policy document is wrong; names the key path, what was expected and what was found."""

    def __init__(self, field: str, expected: str, found: object) -> None:
        super().__init__(f"policy.yaml {field}", expected, found,
                         f"fix the policy: the chart's `policy` value (helm upgrade), your kustomize site's "
                         f"policy.yaml, or ConfigMap {CONFIG_MAP}")


@dataclass(frozen=True)
class IdleSettings:
    """The idle part of one tenant's policy (field names match on_idle.IdlePolicy)."""

    window_seconds: float = 1800.0
    threshold: float = 0.05
    min_coverage: float = 0.9
    min_runtime_seconds: float = 3600.0
    mode: str = "enforce"
    max_releases_per_hour: int = 10

    @property
    def dry_run(self) -> bool:
        return self.mode == "dry-run"

    def to_dict(self) -> dict[str, Any]:
        return {"windowSeconds": self.window_seconds, "threshold": self.threshold,
                "minCoverage": self.min_coverage, "minRuntimeSeconds": self.min_runtime_seconds,
                "mode": self.mode, "maxReleasesPerHour": self.max_releases_per_hour}


@dataclass(frozen=True)
class Policy:
    """Defaults plus per-tenant overrides; `raw` is the parsed document for other sections."""

    idle: IdleSettings = IdleSettings()
    tenants: Mapping[str, IdleSettings] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict)

    def idle_for(self, tenant: str | None) -> IdleSettings:
        return self.tenants.get(tenant or "", self.idle)

    def tenant_section(self, tenant: str) -> Mapping[str, Any]:
        return ((self.raw.get("tenants") or {}).get(tenant) or {})


DURATION_DIGITS = 15
"""Digits a duration's number may have on each side of the point: ample (10^15 hours), and no spelling
can overflow to an infinite duration (steps/policy_schema.py writes the same bound into the chart's schema)."""
_NUMBER = f"[0-9]{{1,{DURATION_DIGITS}}}(?:\\.[0-9]{{1,{DURATION_DIGITS}}})?"
_DURATION = re.compile(f"^(?:({_NUMBER})h)?(?:({_NUMBER})m)?(?:({_NUMBER})s)?$")
_LONG_DURATION = re.compile(r"^(?:[0-9]+(?:\.[0-9]+)?h)?(?:[0-9]+(?:\.[0-9]+)?m)?(?:[0-9]+(?:\.[0-9]+)?s)?$")
"""The grammar without the bound: a duration spelt with too many digits is told so."""
"""ASCII digits only (Python's \\d also takes other scripts' digits; the JSON Schema, read by Go, does not)."""


def parse_duration(where: str, value: object) -> float:
    """Seconds from a number or a Go-like duration string (30s, 10m, 1h30m)."""
    if isinstance(value, bool):
        raise PolicyError(where, "a duration (seconds, or 30s / 10m / 1h30m)", repr(value))
    if isinstance(value, (int, float)):
        if value < 0:
            raise PolicyError(where, "a duration >= 0", repr(value))
        return float(value)
    text = str(value).strip()
    match = _DURATION.match(text)
    if text and not match and _LONG_DURATION.match(text):
        shown = repr(value)
        raise PolicyError(where, f"a duration with at most {DURATION_DIGITS} digits in each number",
                          shown if len(shown) <= 40 else shown[:40] + "...")
    if not text or not match or not any(match.groups()):
        raise PolicyError(where, "a duration (seconds, or 30s / 10m / 1h30m)", repr(value))
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if not math.isfinite(total):
        shown = repr(value)
        raise PolicyError(where, "a finite duration", shown if len(shown) <= 40 else shown[:40] + "...")
    return total


def _number(where: str, value: object, low: float, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PolicyError(where, f"a number between {low:g} and {high:g}" if high is not None
                          else f"a number >= {low:g}", repr(value))
    if value < low or (high is not None and value > high):
        raise PolicyError(where, f"a number between {low:g} and {high:g}" if high is not None
                          else f"a number >= {low:g}", repr(value))
    return float(value)


@dataclass(frozen=True)
class IdleField:
    """One key of an `idle` section: how the step reads it and (steps/policy_schema.py) how the JSON Schema
    of the chart's values describes it. IDLE_FIELDS is the one definition of the section: the parser below
    and the schema are both read from it, so a key added here is validated the same way everywhere."""

    key: str
    attribute: str
    """The IdleSettings field it sets."""
    kind: str
    """duration (>= 0), positive-duration (> 0), ratio (0-1), count (whole number >= 0) or mode."""
    description: str
    aliases: tuple[str, ...] = ()


IDLE_FIELDS: tuple[IdleField, ...] = (
    IdleField("window", "window_seconds", "positive-duration",
              "how long every GPU of a workload must stay idle before it is released", ("windowSeconds",)),
    IdleField("threshold", "threshold", "ratio", "the highest GPU activity (0-1) that still counts as idle"),
    IdleField("minCoverage", "min_coverage", "ratio",
              "the share of the window the samples must cover before idle is believed (no data is never idle)"),
    IdleField("minRuntime", "min_runtime_seconds", "duration",
              "never release a workload admitted less than this ago", ("minRuntimeSeconds",)),
    IdleField("mode", "mode", "mode", "enforce (release) or dry-run (plan and record only)"),
    IdleField("maxReleasesPerHour", "max_releases_per_hour", "count", "per tenant; 0 = never release"),
)
SECTIONS = ("idle", "quota", "tenants")
"""The top-level keys of policy.yaml."""
TENANT_SECTIONS = ("idle", "quota")
"""The keys of one tenant's overrides."""

_IDLE_KEYS = {name for f in IDLE_FIELDS for name in (f.key, *f.aliases)}


def _field_value(where: str, kind: str, value: object) -> object:
    """One idle value read as its kind says (IdleField.kind); PolicyError naming `where` otherwise."""
    if kind in ("duration", "positive-duration"):
        seconds = parse_duration(where, value)
        if kind == "positive-duration" and seconds <= 0:
            raise PolicyError(where, "a duration > 0", repr(value))
        return seconds
    if kind == "ratio":
        return _number(where, value, 0, 1)
    if kind == "mode":
        if value not in MODES:
            raise PolicyError(where, "enforce or dry-run", repr(value))
        return value
    if kind == "count":
        # A whole number; 3.0 is 3 (a YAML or JSON writer may spell it so: the chart's values are JSON numbers).
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise PolicyError(where, "a whole number >= 0", repr(value))
        return value
    raise ValueError(f"IdleField kind {kind!r} has no reader")


def _idle(where: str, section: object, base: IdleSettings) -> IdleSettings:
    if section is None:
        return base
    if not isinstance(section, Mapping):
        raise PolicyError(where, "a mapping of idle settings", type(section).__name__)
    unknown = sorted(set(section) - _IDLE_KEYS)
    if unknown:
        raise PolicyError(f"{where}.{unknown[0]}", f"one of {', '.join(sorted(_IDLE_KEYS))}", repr(unknown[0]))
    for spec in IDLE_FIELDS:
        given = [key for key in (spec.key, *spec.aliases) if key in section]
        if len(given) > 1:  # one would silently win over the other
            raise PolicyError(f"{where}.{given[1]}", f"{spec.key} or {given[1]}, not both",
                              f"both ({spec.key}: {section[spec.key]!r})")
    aliases = {alias: f.key for f in IDLE_FIELDS for alias in f.aliases}
    section = {aliases.get(k, k): v for k, v in section.items()}
    out = base
    for spec in IDLE_FIELDS:
        if spec.key in section:
            out = replace(out, **{spec.attribute: _field_value(f"{where}.{spec.key}", spec.kind, section[spec.key])})
    return out


def _ordinary_numbers(document: object) -> None:
    """Every number in the document is finite and within 64 bits, else PolicyError naming its key.

    YAML reads `.nan` and `.inf`, and NaN compares false: `threshold: .nan` judged a 100% busy GPU
    idle, `minCoverage: .nan` took any coverage. Integers of thousands of digits cannot even be
    printed (Python refuses str() beyond 4,300 digits)."""
    stack: list[tuple[str, object]] = [("(document)", document)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, bool):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise PolicyError(path, "a finite number", repr(value))
        if isinstance(value, int) and not -(2**63) <= value < 2**63:
            raise PolicyError(path, "a number within 64 bits",
                              f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits")
        if isinstance(value, Mapping):
            prefix = "" if path == "(document)" else path + "."
            stack.extend((f"{prefix}{key if isinstance(key, str) else type(key).__name__}", child)
                         for key, child in value.items())
        elif isinstance(value, list):
            stack.extend((f"{path}[{index}]", child) for index, child in enumerate(value))


def policy_from_mapping(document: object) -> Policy:
    """Validate a parsed document (pure)."""
    _ordinary_numbers(document)
    if document is None:
        return Policy()
    if not isinstance(document, Mapping):
        raise PolicyError("(document)", "a mapping with idle/quota/tenants sections", type(document).__name__)
    unknown = sorted(set(document) - set(SECTIONS))
    if unknown:
        raise PolicyError(unknown[0], "one of idle, quota, tenants", repr(unknown[0]))
    defaults = _idle("idle", document.get("idle"), IdleSettings())
    tenants_section = document.get("tenants")
    if tenants_section is None:
        tenants_section = {}
    if not isinstance(tenants_section, Mapping):
        raise PolicyError("tenants", "a mapping of ClusterQueue name -> overrides", type(tenants_section).__name__)
    tenants: dict[str, IdleSettings] = {}
    for name, section in tenants_section.items():
        if section is None:
            section = {}
        if not isinstance(section, Mapping):
            raise PolicyError(f"tenants.{name}", "a mapping with idle and/or quota", type(section).__name__)
        extra = sorted(set(section) - set(TENANT_SECTIONS))
        if extra:
            raise PolicyError(f"tenants.{name}.{extra[0]}", "idle or quota", repr(extra[0]))
        if section.get("quota") is not None and not isinstance(section.get("quota"), Mapping):
            raise PolicyError(f"tenants.{name}.quota", "a mapping of quota settings",
                              type(section.get("quota")).__name__)
        tenants[str(name)] = _idle(f"tenants.{name}.idle", section.get("idle"), defaults)
    if document.get("quota") is not None and not isinstance(document.get("quota"), Mapping):
        raise PolicyError("quota", "a mapping of quota settings", type(document.get("quota")).__name__)
    return Policy(idle=defaults, tenants=tenants, raw=dict(document))


def parse_policy(text: str) -> Policy:
    """Parse policy.yaml text; PolicyError on YAML or validation errors."""
    import yaml

    try:
        document = yaml.safe_load(text)
    except RecursionError:
        raise PolicyError("(document)", "YAML nested a few levels deep (idle, quota, tenants)",
                          "nesting deeper than the parser reads") from None
    except ValueError as error:  # the YAML int constructor: Python refuses int() of more than 4,300 digits
        raise PolicyError("(document)", "ordinary numbers", f"a number YAML cannot read ({str(error)[:60]})") \
            from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise PolicyError("(document)", "valid YAML", f"a syntax error{where}: {getattr(error, 'problem', error)}") \
            from None
    return policy_from_mapping(document)


def load_policy(kube: Any, namespace: str) -> tuple[Policy, str]:
    """Read the ConfigMap; (Policy(), "defaults: ...") when it or its key is absent."""
    from steps.gateways import resources

    config_map = kube.get(resources.CONFIG_MAP, CONFIG_MAP, namespace)
    if config_map is None:
        return Policy(), f"defaults (ConfigMap {namespace}/{CONFIG_MAP} not found)"
    text = (config_map.get("data") or {}).get(KEY)
    if not text:
        return Policy(), f"defaults (ConfigMap {namespace}/{CONFIG_MAP} has no key {KEY})"
    version = (config_map.get("metadata") or {}).get("resourceVersion")
    return parse_policy(text), f"ConfigMap {namespace}/{CONFIG_MAP} resourceVersion {version}"


def exempt_by(*objects: Mapping[str, Any] | None) -> str | None:
    """"<Kind> <name>" of the first object annotated (or labelled) gpuaas.io/idle-policy: exempt."""
    for obj in objects:
        meta = (obj or {}).get("metadata") or {}
        for source in (meta.get("annotations") or {}, meta.get("labels") or {}):
            if str(source.get(EXEMPT_KEY, "")).strip().lower() == EXEMPT_VALUE:
                return f"{(obj or {}).get('kind', 'object')} {meta.get('name')}"
    return None
