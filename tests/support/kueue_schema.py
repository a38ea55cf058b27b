"""Validate Kueue objects against Kueue's own CRD schemas, strictly (unknown fields are errors).

    from tests.support.kueue_schema import kueue_schema_errors
    assert kueue_schema_errors(cluster_queue) == []

The CRDs are read from `<repo>/../shared/schemas/kueue/` (or `$GPUAAS_SHARED_DIR/schemas/kueue/`),
never copied into the repository. The API server prunes unknown fields silently, so a misspelt
key would pass a real cluster and be ignored by Kueue; the strict mode turns every object schema
that lists `properties` (and does not say `x-kubernetes-preserve-unknown-fields`) into a closed one.
The CRDs contain a bare `=` enum value that PyYAML's safe loader reads as YAML 1.1's "value" tag;
a constructor for that tag returns the plain scalar.
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path
from typing import Any

import jsonschema
import yaml


class _CrdLoader(yaml.SafeLoader):
    pass


_CrdLoader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))

_PLURALS = {"ClusterQueue": "clusterqueues", "LocalQueue": "localqueues", "ResourceFlavor": "resourceflavors",
            "Workload": "workloads", "Cohort": "cohorts", "AdmissionCheck": "admissionchecks"}


def shared_dir() -> Path:
    env = os.environ.get("GPUAAS_SHARED_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / ".." / "shared"


@functools.cache
def _crd(plural: str) -> dict[str, Any]:
    path = shared_dir() / "schemas" / "kueue" / f"{plural}.yaml"
    with path.open() as handle:
        return yaml.load(handle, Loader=_CrdLoader)


def _closed(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


@functools.cache
def _validator(kind: str, version: str) -> jsonschema.protocols.Validator:
    crd = _crd(_PLURALS[kind])
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            schema = _closed(copy.deepcopy(served["schema"]["openAPIV3Schema"]))
            return jsonschema.Draft7Validator(schema)
    raise LookupError(f"Kueue CRD {kind} serves no version {version}")


def kueue_schema_errors(obj: dict[str, Any]) -> list[str]:
    """Every schema violation of `obj`, as "path: message" lines (empty when valid)."""
    version = obj["apiVersion"].split("/", 1)[1]
    validator = _validator(obj["kind"], version)
    return sorted(f"{'/'.join(str(p) for p in error.absolute_path) or '(root)'}: {error.message}"
                  for error in validator.iter_errors(obj))
