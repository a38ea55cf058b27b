"""The JSON Schema of policy.yaml, generated from the step's own definition of it (steps/policy.py).

The chart validates its `policy:` value with this schema (charts/gpuaas/values.schema.json, written by
`gpuaas render`); the step validates the ConfigMap with steps.policy. Both read IDLE_FIELDS, SECTIONS
and TENANT_SECTIONS, so a key added there is accepted, and a wrong value refused, in both places after
a re-render. tests/artifacts/test_policy_schema.py runs a corpus and a fuzzer through both and demands
the same verdict.

What the schema cannot say, and the step still refuses: numbers JSON cannot carry (`.nan`, `.inf`,
integers beyond 64 bits: Helm cannot even read such values) and YAML that is not a document.
"""

from __future__ import annotations

from typing import Any

from steps.policy import DURATION_DIGITS, IDLE_FIELDS, MODES, SECTIONS, TENANT_SECTIONS

JSON = dict[str, Any]

_NUMBER = f"[0-9]{{1,{DURATION_DIGITS}}}(?:\\.[0-9]{{1,{DURATION_DIGITS}}})?"
DURATION_PATTERN = f"^\\s*(?:{_NUMBER}h)?(?:{_NUMBER}m)?(?:{_NUMBER}s)?\\s*$"
"""steps.policy.parse_duration's grammar (`1h30m`, `90s`, `1.5h`; parse_duration strips surrounding
whitespace) as an RE2 pattern: Helm's validator is Go's regexp (no look-ahead)."""
ZERO_PATTERN = "^\\s*(?:0+(?:\\.0+)?h)?(?:0+(?:\\.0+)?m)?(?:0+(?:\\.0+)?s)?\\s*$"
"""A duration whose every number is zero (refused where the duration must be > 0)."""


def _value_schema(kind: str, description: str) -> JSON:
    if kind in ("duration", "positive-duration"):
        positive = kind == "positive-duration"
        number: JSON = {"type": "number", **({"exclusiveMinimum": 0} if positive else {"minimum": 0})}
        text: JSON = {"type": "string", "pattern": DURATION_PATTERN, "allOf": [{"pattern": "[hms]"}]}
        if positive:
            text["not"] = {"pattern": ZERO_PATTERN}
        return {"description": f"{description} (seconds, or 30s / 10m / 1h30m)", "oneOf": [number, text]}
    if kind == "ratio":
        return {"description": description, "type": "number", "minimum": 0, "maximum": 1}
    if kind == "count":
        return {"description": description, "type": "integer", "minimum": 0}
    if kind == "mode":
        return {"description": description, "enum": list(MODES)}
    raise ValueError(f"IdleField kind {kind!r} has no schema")


def idle_schema() -> JSON:
    properties: JSON = {}
    for spec in IDLE_FIELDS:
        for key in (spec.key, *spec.aliases):
            properties[key] = _value_schema(spec.kind, spec.description if key == spec.key
                                            else f"alias of {spec.key}: {spec.description}")
    schema: JSON = {"type": ["object", "null"], "additionalProperties": False, "properties": properties}
    both = [{"type": "object", "required": [spec.key, alias]} for spec in IDLE_FIELDS for alias in spec.aliases]
    if both:  # a key and its alias: the step refuses both at once (one would silently win)
        schema["not"] = {"anyOf": both}
    return schema


def policy_schema() -> JSON:
    """The schema of the whole policy document (a mapping with SECTIONS; null means the defaults)."""
    quota: JSON = {"type": ["object", "null"],
                   "description": "read by provision-quota (docs/quota.md): cohort, queueingStrategy, weight, "
                                  "guaranteedGpus, flavors, cpuPerGpu, memoryPerGpu, localQueue"}
    sections: JSON = {"idle": idle_schema(), "quota": quota}
    tenant: JSON = {"type": ["object", "null"], "additionalProperties": False,
                    "properties": {name: sections[name] for name in TENANT_SECTIONS}}
    properties = {**{name: sections[name] for name in SECTIONS if name in sections},
                  "tenants": {"type": ["object", "null"], "description": "per-tenant overrides, by ClusterQueue name",
                              "additionalProperties": tenant}}
    missing = set(SECTIONS) - set(properties)
    if missing:
        raise ValueError(f"steps.policy.SECTIONS names {sorted(missing)}, which this schema does not describe")
    return {"type": ["object", "null"], "additionalProperties": False,
            "description": "the idle policy (ConfigMap gpuaas-policy, key policy.yaml; docs/reactions.md)",
            "properties": properties}
