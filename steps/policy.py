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
      releaseOn: idle           # idle | demand (only when queued work would use the GPUs) | never
      warnFor: 0                # warn the owner this long before a release (steps.warning); 0 = release at once
      # warnWebhook: http://... # where a warning is also POSTed as JSON (optional)
      kinds:                    # per kind (KINDS; the owner chain decides, kind_of): any key above but
        notebook: {window: 2h40m}   # maxReleasesPerHour, and the kind's own: signal, withoutSignal,
        training: {progressMetric: train_steps_total}   # progressMetric, requestMetric, signalUrl
    quota: {...}                # read by provision-quota (steps.reactions.provision_quota)
    tenants:
      team-a:
        idle: {mode: dry-run, window: 10m, kinds: {notebook: {window: 4h}}}
        quota: {weight: 2, guaranteedGpus: {a100: 4}}

Every key is a row of IDLE_FIELDS, which drives the parsing, the errors and `policy_json_schema()`
(the Helm chart's values schema). Settings are layered (Policy). Exemption is not a policy key but
an annotation (or label) `gpuaas.io/idle-policy: exempt` on the Workload or its owner: the tenant
decides per workload.

    load_policy(kube, namespace) -> (Policy, source)   # the built-in defaults when the ConfigMap is absent
    parse_policy(text) -> Policy                       # PolicyError (a RejectedInput) names the field
    Policy.idle_for(tenant, kind) -> IdleSettings      # the layers for one tenant and kind
    Policy.raw                                         # the whole mapping (quota reads its sections)
    default_policy_text() -> str                       # EXAMPLE_POLICY_YAML
    policy_json_schema() -> dict                       # JSON Schema (draft 07) of policy.yaml
    kind_of(owner kinds) -> str                        # the policy kind of a workload
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from steps.plan import RejectedInput

KINDS = ("notebook", "ray", "training", "serving", "batch")
"""The policy's kinds of workload, each with its own idle settings and its own evidence that the work
is done. A Workload's kind follows its owner chain as the release strategies classify it
(steps.strategies, docs/reactions.md "What a release does, per kind")."""

KIND_OF_OWNER: dict[str, str] = {
    "Notebook": "notebook",
    "RayCluster": "ray", "RayJob": "ray", "RayService": "serving",
    "PyTorchJob": "training", "TFJob": "training", "MPIJob": "training", "XGBoostJob": "training",
    "PaddleJob": "training", "JAXJob": "training", "TrainJob": "training", "JobSet": "training",
    "InferenceService": "serving", "Deployment": "serving", "StatefulSet": "serving", "LeaderWorkerSet": "serving",
    "Job": "batch", "AppWrapper": "batch", "Pod": "batch",
}
"""Owner kind -> policy kind. The top of the owner chain decides (a Notebook's StatefulSet is a
notebook; a RayJob's RayCluster is Ray); unknown owners and Workloads without one are batch."""
KIND_PRECEDENCE = ("Notebook", "InferenceService", "RayService", "RayJob", "RayCluster", "TrainJob", "JobSet",
                   "PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob", "LeaderWorkerSet",
                   "StatefulSet", "Deployment", "AppWrapper", "Job", "Pod")


def kind_of(owner_kinds: object) -> str:
    """The policy kind of a workload from the kinds in its owner chain (a string for one kind).

    The most specific owner wins, in the order the release strategies look for them: a Notebook
    before its StatefulSet, an InferenceService before its Deployment, a RayJob before its
    RayCluster, a JobSet before its Jobs."""
    kinds = [owner_kinds] if isinstance(owner_kinds, str) else [str(k) for k in (owner_kinds or ())]
    for kind in KIND_PRECEDENCE:
        if kind in kinds:
            return KIND_OF_OWNER[kind]
    return "batch"


CONFIG_MAP = "gpuaas-policy"
KEY = "policy.yaml"
EXEMPT_KEY = "gpuaas.io/idle-policy"
EXEMPT_VALUE = "exempt"
MODES = ("enforce", "dry-run")
RELEASE_ON = ("idle", "demand", "never")
SIGNALS = ("auto", "none")
SECTIONS = ("idle", "quota", "tenants")
"""The top-level keys of policy.yaml."""
TENANT_SECTIONS = ("idle", "quota")
"""The keys of one tenant's overrides."""
WITHOUT_SIGNAL = ("gpu", "keep")

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
  releaseOn: idle          # idle | demand (only when queued work would use the GPUs) | never
  warnFor: 0               # warn the owner this long before a release; activity or the exempt annotation cancels
  kinds:                   # per kind of workload (the owner's kind); chosen with gpuaas simulate (docs/simulate.md)
    notebook:
      window: 2h40m        # every kernel idle, no client connected (Jupyter's API), and the GPUs idle
    ray:
      window: 24h          # no Ray job pending or running (Ray's job API, or the RayJob's status)
    training:
      window: 8h10m        # its progress counter flat when progressMetric names one; the GPUs idle
    serving:
      window: 8h10m        # no request served or waiting (vLLM, Triton, TGI metrics); the GPUs idle
    batch:
      window: 30m          # the GPUs idle (a Job has no source of its own)
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
    """The idle part of one tenant's policy for one kind (field names match on_idle.IdlePolicy).

    Every field is set by one key of IDLE_FIELDS; a later key (a warning's grace period, how a released
    workload wakes) is one more field and one more row there, at every level of the policy."""

    window_seconds: float = 1800.0
    threshold: float = 0.05
    min_coverage: float = 0.9
    min_runtime_seconds: float = 3600.0
    mode: str = "enforce"
    max_releases_per_hour: int = 10
    release_on: str = "idle"
    node_pool_autoscaled: bool = False
    signal: str = "auto"
    without_signal: str = "gpu"
    progress_metric: str = ""
    request_metric: str = ""
    signal_url: str = ""
    warn_seconds: float = 0.0
    """The grace period (idle.warnFor): the owner is warned, and the release waits this long for activity or an
    opt-out (steps.warning); 0 releases at once, as before warnings existed."""
    warn_webhook: str = ""
    """Where a warning is also POSTed as JSON (idle.warnWebhook): a chat or mail bridge that reads gpuaas' own flat
    body (steps.warning.notice; not Alertmanager's webhook payload)."""
    kind: str | None = None
    """The kind these settings were resolved for (None: the tenant's general settings)."""

    @property
    def dry_run(self) -> bool:
        return self.mode == "dry-run"

    def to_dict(self) -> dict[str, Any]:
        out = {"windowSeconds": self.window_seconds, "threshold": self.threshold,
               "minCoverage": self.min_coverage, "minRuntimeSeconds": self.min_runtime_seconds,
               "mode": self.mode, "maxReleasesPerHour": self.max_releases_per_hour, "releaseOn": self.release_on}
        if self.node_pool_autoscaled:
            out["nodePoolAutoscaled"] = True
        if self.warn_seconds:
            out["warnForSeconds"] = self.warn_seconds
        if self.warn_webhook:
            out["warnWebhook"] = self.warn_webhook
        if self.kind is not None:
            out.update(kind=self.kind, signal=self.signal, withoutSignal=self.without_signal)
            for key, value in (("progressMetric", self.progress_metric), ("requestMetric", self.request_metric),
                               ("signalUrl", self.signal_url)):
                if value:
                    out[key] = value
        return out


@dataclass(frozen=True)
class Field:
    """One key of an idle section: how it is written, read, checked, documented (and JSON-schema'd)."""

    key: str
    attr: str
    type: str
    """duration (>= 0) | positive-duration (> 0) | ratio | count | enum | bool | metric | url"""
    help: str
    choices: tuple[str, ...] = ()
    kinds: bool = True
    """Allowed inside idle.kinds.<kind> (False: a tenant-wide setting)."""


IDLE_FIELDS: tuple[Field, ...] = (
    Field("window", "window_seconds", "positive-duration", "how long the work must be idle (GPUs, and the kind's own "
          "evidence) before a release (30s, 10m, 1h, 1h30m or seconds)"),
    Field("threshold", "threshold", "ratio", "highest GPU activity (0-1) that still counts as idle"),
    Field("minCoverage", "min_coverage", "ratio", "share of the window the GPU samples must cover (no data is never "
          "idle)"),
    Field("minRuntime", "min_runtime_seconds", "duration", "never release a workload admitted less than this ago"),
    Field("mode", "mode", "enum", "enforce, or dry-run (plan and record only)", MODES),
    Field("maxReleasesPerHour", "max_releases_per_hour", "count", "releases per tenant and hour; 0 = never release",
          kinds=False),
    Field("releaseOn", "release_on", "enum", "idle: release what is idle; demand: only when queued work in the "
          "cohort would be admitted into the GPUs freed (or, with nodePoolAutoscaled, a node would be emptied); "
          "never: do not release (e.g. servers, until they wake on their next request)", RELEASE_ON),
    Field("nodePoolAutoscaled", "node_pool_autoscaled", "bool", "the GPU node pool scales down: with releaseOn "
          "demand, a release that empties a GPU node helps too"),
    Field("signal", "signal", "enum", "auto: the kind's own evidence that the work is done (notebook: Jupyter "
          "kernels and clients; ray: Ray jobs; serving: request metrics; training: progressMetric), with GPU "
          "activity as a guard; none: GPU activity alone", SIGNALS),
    Field("withoutSignal", "without_signal", "enum", "when the kind's evidence cannot be read (not exported, "
          "unreachable): gpu: decide on GPU activity alone; keep: never release", WITHOUT_SIGNAL),
    Field("progressMetric", "progress_metric", "metric", "training: a counter the job's pods export that advances "
          "with its progress (e.g. training steps); stalled when it did not advance in the window"),
    Field("requestMetric", "request_metric", "metric", "serving: a request counter the server's pods export, "
          "besides the known ones (vLLM, Triton, TGI)"),
    Field("signalUrl", "signal_url", "url", "notebook: the Jupyter server's base URL; ray: the Ray dashboard's; "
          "{name} and {namespace} are the owner's, {domain} the cluster's (defaults: Kubeflow's and KubeRay's services)"),
    Field("warnFor", "warn_seconds", "duration", "warn the owner (an Event on their object, the annotation "
          "gpuaas.io/idle-warning, warnWebhook) and release only when the work is still idle this long after; "
          "activity or gpuaas.io/idle-policy: exempt cancels; 0 = release at once"),
    Field("warnWebhook", "warn_webhook", "url", "an http(s) URL that receives each warning and its cancellation "
          "as a POST of gpuaas' own flat JSON (docs/reactions.md; a chat or mail bridge reads it, not Alertmanager's "
          "webhook format); {name}, {namespace} and {domain} are filled as in signalUrl"),
)
FIELDS_BY_KEY = {f.key: f for f in IDLE_FIELDS}
_ALIASES = {"windowSeconds": "window", "minRuntimeSeconds": "minRuntime"}
_METRIC = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
URL_LENGTH = 500
"""The longest signalUrl accepted (the step and the schema)."""
_URL = re.compile(r"^https?://(?:[^{}]|\{\{|\}\}|\{(?:name|namespace|domain)\})*$")
"""signalUrl: http(s), and braces only as the three placeholders the step fills (steps.gateways.workload_apis formats
it with name, namespace and domain) or doubled (a literal brace). One regular expression for the step and the
chart's schema (Python's and Go's agree on it), so both refuse the same URLs."""

KIND_DEFAULTS: dict[str, dict[str, Any]] = {
    "notebook": {"window_seconds": 2 * 3600.0 + 40 * 60},
    "ray": {"window_seconds": 24 * 3600.0},
    "training": {"window_seconds": 8 * 3600.0 + 10 * 60},
    "serving": {"window_seconds": 8 * 3600.0 + 10 * 60},
    "batch": {"window_seconds": 1800.0},
}
"""Built-in settings per kind: what a parsed policy (or an absent ConfigMap) starts `idle.kinds` from, and
what the rendered ConfigMap spells out. Chosen with `gpuaas simulate` on both calibrations (docs/simulate.md
"Choosing the defaults"): each kind's own evidence with GPU activity as the guard; windows long enough
that pauses end before them (a notebook owner's pause, a training stall, a server's night, a Ray
cluster's next job) and aligned with the alert's deliveries (first look 35.5 minutes after the GPUs
go quiet, then every 65 minutes: 2h40m and 8h10m are met at a delivery)."""


@dataclass(frozen=True)
class Policy:
    """Defaults plus per-tenant overrides; `raw` is the parsed document for other sections.

    Layers, from the weakest: the built-in defaults and KIND_DEFAULTS; the policy's `idle`; the policy's
    `idle.kinds.<kind>`; the tenant's `idle`; the tenant's `idle.kinds.<kind>`. A more specific scope
    wins: a tenant's setting beats the cluster-wide one, even a cluster-wide kind's; a key the policy's
    `idle` sets replaces the built-in per-kind value of that key (the rendered policy spells every kind
    out, so what it shows is what applies)."""

    idle: IdleSettings = IdleSettings()
    tenants: Mapping[str, IdleSettings] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict)
    kinds: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Changes per kind at the cluster-wide level (IdleSettings attribute -> value)."""
    tenant_changes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Each tenant's own idle changes (when parsed; a hand-built Policy derives them from `tenants`)."""
    tenant_kinds: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(default_factory=dict)

    def idle_for(self, tenant: str | None, kind: str | None = None) -> IdleSettings:
        """The settings for `tenant`'s workloads of `kind` (None: its general settings)."""
        tenant = tenant or ""
        if kind is None:
            return self.tenants.get(tenant, self.idle)
        settings = replace(self.idle, **dict(self.kinds.get(kind, {})))
        settings = replace(settings, **self._tenant_changes(tenant))
        settings = replace(settings, **dict((self.tenant_kinds.get(tenant) or {}).get(kind, {})))
        return replace(settings, kind=kind)

    def _tenant_changes(self, tenant: str) -> Mapping[str, Any]:
        if tenant in self.tenant_changes:
            return self.tenant_changes[tenant]
        own = self.tenants.get(tenant)
        if own is None:
            return {}
        return {f.attr: getattr(own, f.attr) for f in IDLE_FIELDS if getattr(own, f.attr) != getattr(self.idle, f.attr)}

    def tenant_section(self, tenant: str) -> Mapping[str, Any]:
        return ((self.raw.get("tenants") or {}).get(tenant) or {})

    def every_settings(self) -> list[IdleSettings]:
        """The settings of every tenant the policy names and the default tenant, for every kind."""
        return [self.idle_for(tenant, kind) for tenant in ("", *self.tenants) for kind in KINDS]

    def windows(self) -> list[float]:
        """Every idle window in effect (the alert's window is the shortest: gpuaas render)."""
        return sorted({s.window_seconds for s in self.every_settings()})

    def with_window(self, seconds: float) -> Policy:
        """The same policy with one idle window for every tenant and kind (the simulator's sweep)."""
        return self.with_everywhere(window_seconds=seconds)

    def with_everywhere(self, **changes: Any) -> Policy:
        """The same policy with `changes` (IdleSettings attributes) for every tenant and kind, e.g. every
        tenant releasing on demand, or reading GPU activity only (the simulator's variants)."""
        def without(layer: Mapping[str, Any]) -> dict[str, Any]:
            return {k: v for k, v in layer.items() if k not in changes}

        return replace(self, idle=replace(self.idle, **changes),
                       tenants={t: replace(v, **changes) for t, v in self.tenants.items()},
                       kinds={k: {**without(v), **changes} for k, v in {**{k: {} for k in KINDS}, **self.kinds}.items()},
                       tenant_changes={t: without(self._tenant_changes(t)) for t in self.tenants},
                       tenant_kinds={t: {k: without(v) for k, v in kinds.items()}
                                     for t, kinds in self.tenant_kinds.items()})


DURATION_DIGITS = 15
"""Digits a duration's number may have on each side of the point: ample (10^15 hours), and no spelling
can overflow to an infinite duration (policy_json_schema writes the same bound into the chart's schema)."""
_NUMBER = f"[0-9]{{1,{DURATION_DIGITS}}}(?:\\.[0-9]{{1,{DURATION_DIGITS}}})?"
"""ASCII digits only (Python's \\d also takes other scripts' digits; the JSON Schema, read by Go, does not)."""
_DURATION = re.compile(f"^(?:({_NUMBER})h)?(?:({_NUMBER})m)?(?:({_NUMBER})s)?$")
_LONG_DURATION = re.compile(r"^(?:[0-9]+(?:\.[0-9]+)?h)?(?:[0-9]+(?:\.[0-9]+)?m)?(?:[0-9]+(?:\.[0-9]+)?s)?$")
"""The grammar without the bound: a duration spelt with too many digits is told so."""
DURATION_PATTERN = f"^\\s*(?:{_NUMBER}h)?(?:{_NUMBER}m)?(?:{_NUMBER}s)?\\s*$"
"""parse_duration's grammar (`1h30m`, `90s`, `1.5h`; it strips surrounding whitespace) as an RE2 pattern
for the schema: Helm's validator is Go's regexp (no look-ahead)."""
ZERO_PATTERN = "^\\s*(?:0+(?:\\.0+)?h)?(?:0+(?:\\.0+)?m)?(?:0+(?:\\.0+)?s)?\\s*$"
"""A duration whose every number is zero (refused where the duration must be > 0)."""


def parse_duration(where: str, value: object) -> float:
    """Seconds from a number or a Go-like duration string (30s, 10m, 1h30m)."""
    if isinstance(value, bool):
        raise PolicyError(where, "a duration (seconds, or 30s / 10m / 1h30m)", repr(value))
    if isinstance(value, (int, float)):
        if value < 0:
            raise PolicyError(where, "a duration >= 0", repr(value))
        return float(value)
    text = str(value).strip()
    match = _DURATION.fullmatch(text)
    if text and not match and _LONG_DURATION.fullmatch(text):
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


def _value(where: str, spec: Field, value: object) -> object:
    """One key's value, checked by its type."""
    if spec.type in ("duration", "positive-duration"):
        seconds = parse_duration(where, value)
        if spec.type == "positive-duration" and seconds <= 0:
            raise PolicyError(where, "a duration > 0", repr(value))
        return seconds
    if spec.type == "ratio":
        return _number(where, value, 0, 1)
    if spec.type == "count":
        # A whole number; 3.0 is 3 (a YAML or JSON writer may spell it so: the chart's values are JSON numbers).
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise PolicyError(where, "a whole number >= 0", repr(value))
        return value
    if spec.type == "enum":
        if value not in spec.choices:
            raise PolicyError(where, " or ".join(spec.choices), repr(value))
        return value
    if spec.type == "bool":
        if not isinstance(value, bool):
            raise PolicyError(where, "true or false", repr(value))
        return value
    if spec.type == "metric":
        if not isinstance(value, str) or not _METRIC.fullmatch(value):
            raise PolicyError(where, "a Prometheus metric name (letters, digits, _ and :)", repr(value))
        return value
    if not isinstance(value, str) or len(value) > URL_LENGTH or not _URL.fullmatch(value):
        raise PolicyError(where, "an http(s) URL (with {name}, {namespace} and {domain} where the owner's and the "
                                 "cluster's go; {{ and }} for a brace)", repr(value))
    return value


def _changes(where: str, section: object, *, in_kind: bool) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(IdleSettings attribute -> value, kind -> its changes) of one idle section, validated."""
    if section is None:
        return {}, {}
    if not isinstance(section, Mapping):
        raise PolicyError(where, "a mapping of idle settings", type(section).__name__)
    allowed = {f.key for f in IDLE_FIELDS if f.kinds or not in_kind} | set(_ALIASES)
    if not in_kind:
        allowed.add("kinds")
    unknown = sorted(set(section) - allowed)
    if unknown:
        expected = ", ".join(sorted(allowed - set(_ALIASES)))
        raise PolicyError(f"{where}.{unknown[0]}", f"one of {expected}", repr(unknown[0]))
    for alias, name in _ALIASES.items():
        if alias in section and name in section:  # one would silently win over the other
            raise PolicyError(f"{where}.{alias}", f"{name} or {alias}, not both", f"both ({name}: {section[name]!r})")
    changes: dict[str, Any] = {}
    for key, value in section.items():
        if key == "kinds":
            continue
        name = _ALIASES.get(key, key)
        spec = FIELDS_BY_KEY[name]
        changes[spec.attr] = _value(f"{where}.{key}", spec, value)
    kinds: dict[str, dict[str, Any]] = {}
    raw_kinds = section.get("kinds") if not in_kind else None
    if raw_kinds is not None:
        if not isinstance(raw_kinds, Mapping):
            raise PolicyError(f"{where}.kinds", f"a mapping of kind ({', '.join(KINDS)}) -> idle settings",
                              type(raw_kinds).__name__)
        for kind, kind_section in raw_kinds.items():
            if kind not in KINDS:
                raise PolicyError(f"{where}.kinds.{kind}", f"one of {', '.join(KINDS)}", repr(kind))
            kinds[kind], _ = _changes(f"{where}.kinds.{kind}", kind_section, in_kind=True)
    return changes, kinds


def _idle(where: str, section: object, base: IdleSettings) -> IdleSettings:
    """`base` with one idle section's general changes (its kinds are read by `_changes`)."""
    changes, _ = _changes(where, section, in_kind=False)
    return replace(base, **changes)


SCHEMA_DEFINITIONS = ("gpuaasPolicyIdle", "gpuaasPolicyKindIdle")
"""The names under `definitions` that policy_json_schema's references use: the chart's values.schema.json
carries them at its root (gpuaas/manifests/values.py), so the references resolve there too."""


def _field_schema(spec: Field, description: str) -> dict[str, Any]:
    """One key's JSON Schema, refusing what _value refuses (as far as JSON Schema can say it)."""
    text = {"description": description}
    if spec.type in ("duration", "positive-duration"):
        positive = spec.type == "positive-duration"
        number: dict[str, Any] = {"type": "number", **({"exclusiveMinimum": 0} if positive else {"minimum": 0})}
        string: dict[str, Any] = {"type": "string", "pattern": DURATION_PATTERN, "allOf": [{"pattern": "[hms]"}]}
        if positive:
            string["not"] = {"pattern": ZERO_PATTERN}
        return {**text, "oneOf": [number, string]}
    if spec.type == "ratio":
        return {**text, "type": "number", "minimum": 0, "maximum": 1}
    if spec.type == "count":
        return {**text, "type": "integer", "minimum": 0}
    if spec.type == "enum":
        return {**text, "enum": list(spec.choices)}
    if spec.type == "bool":
        return {**text, "type": "boolean"}
    if spec.type == "metric":
        # `$` also matches before a final newline in Python's re (jsonschema), not in Go's (Helm): say it twice
        return {**text, "type": "string", "pattern": _METRIC.pattern, "not": {"pattern": "\n"}}
    if spec.type == "url":
        return {**text, "type": "string", "pattern": _URL.pattern, "maxLength": URL_LENGTH}
    raise ValueError(f"Field type {spec.type!r} has no schema")


def policy_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 07) of policy.yaml, from IDLE_FIELDS, SECTIONS and TENANT_SECTIONS: what the
    Helm chart's values.schema.json embeds for `policy` (gpuaas render), so the chart and the step accept
    the same documents (tests/fuzz/test_fuzz_policy_schema.py demands the same verdict).

    What the schema cannot say, and the step still refuses: numbers JSON cannot carry (`.nan`, `.inf`,
    integers beyond 64 bits: Helm cannot even read such values) and YAML that is not a document."""
    idle_ref, kind_ref = (f"#/definitions/{name}" for name in SCHEMA_DEFINITIONS)

    def section(in_kind: bool) -> dict[str, Any]:
        properties: dict[str, Any] = {f.key: _field_schema(f, f.help) for f in IDLE_FIELDS if f.kinds or not in_kind}
        properties.update({alias: _field_schema(FIELDS_BY_KEY[name], f"alias of {name}: {FIELDS_BY_KEY[name].help}")
                           for alias, name in _ALIASES.items()})
        if not in_kind:
            properties["kinds"] = {"type": ["object", "null"], "additionalProperties": False,
                                   "description": "per kind of workload (the owner's kind, as the release "
                                                  "strategies classify it)",
                                   "properties": {k: {"$ref": kind_ref} for k in KINDS}}
        # a key and its alias: the step refuses both at once (one would silently win)
        both = {"anyOf": [{"type": "object", "required": [name, alias]} for alias, name in _ALIASES.items()]}
        return {"type": ["object", "null"], "additionalProperties": False, "properties": properties, "not": both}

    sections: dict[str, Any] = {
        "idle": {"$ref": idle_ref},
        "quota": {"type": ["object", "null"],
                  "description": "read by provision-quota (docs/quota.md): cohort, queueingStrategy, weight, "
                                 "guaranteedGpus, flavors, cpuPerGpu, memoryPerGpu, localQueue"}}
    tenant = {"type": ["object", "null"], "additionalProperties": False,
              "properties": {name: sections[name] for name in TENANT_SECTIONS}}
    properties = {**{name: sections[name] for name in SECTIONS if name in sections},
                  "tenants": {"type": ["object", "null"], "description": "per-tenant overrides, by ClusterQueue name",
                              "additionalProperties": tenant}}
    missing = set(SECTIONS) - set(properties)
    if missing:
        raise ValueError(f"SECTIONS names {sorted(missing)}, which policy_json_schema does not describe")
    return {"$schema": "http://json-schema.org/draft-07/schema#", "title": "gpuaas policy.yaml",
            "description": "the idle policy (ConfigMap gpuaas-policy, key policy.yaml; docs/reactions.md)",
            "type": ["object", "null"], "additionalProperties": False,
            "definitions": dict(zip(SCHEMA_DEFINITIONS, (section(False), section(True)))),
            "properties": properties}


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
        return Policy(kinds={k: dict(v) for k, v in KIND_DEFAULTS.items()})
    if not isinstance(document, Mapping):
        raise PolicyError("(document)", "a mapping with idle/quota/tenants sections", type(document).__name__)
    unknown = sorted(set(document) - set(SECTIONS))
    if unknown:
        raise PolicyError(unknown[0], "one of idle, quota, tenants", repr(unknown[0]))
    changes, kinds = _changes("idle", document.get("idle"), in_kind=False)
    defaults = replace(IdleSettings(), **changes)
    tenants_section = document.get("tenants")
    if tenants_section is None:
        tenants_section = {}
    if not isinstance(tenants_section, Mapping):
        raise PolicyError("tenants", "a mapping of ClusterQueue name -> overrides", type(tenants_section).__name__)
    tenants: dict[str, IdleSettings] = {}
    tenant_changes: dict[str, dict[str, Any]] = {}
    tenant_kinds: dict[str, dict[str, dict[str, Any]]] = {}
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
        own, own_kinds = _changes(f"tenants.{name}.idle", section.get("idle"), in_kind=False)
        tenants[str(name)] = replace(defaults, **own)
        tenant_changes[str(name)] = own
        if own_kinds:
            tenant_kinds[str(name)] = own_kinds
    if document.get("quota") is not None and not isinstance(document.get("quota"), Mapping):
        raise PolicyError("quota", "a mapping of quota settings", type(document.get("quota")).__name__)
    # the built-in per-kind settings apply where the policy's own general section says nothing
    kinds = {k: {**{a: v for a, v in KIND_DEFAULTS.get(k, {}).items() if a not in changes}, **kinds.get(k, {})}
             for k in KINDS}
    return Policy(idle=defaults, tenants=tenants, raw=dict(document), kinds=kinds, tenant_changes=tenant_changes,
                  tenant_kinds=tenant_kinds)


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
        return policy_from_mapping(None), f"defaults (ConfigMap {namespace}/{CONFIG_MAP} not found)"
    text = (config_map.get("data") or {}).get(KEY)
    if not text:
        return policy_from_mapping(None), f"defaults (ConfigMap {namespace}/{CONFIG_MAP} has no key {KEY})"
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
