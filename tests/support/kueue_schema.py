"""Validate Kueue objects against Kueue's own CRD schemas, strictly (unknown fields are errors).

    from tests.support.kueue_schema import kueue_schema_errors
    assert kueue_schema_errors(cluster_queue) == []

A thin name for tests over `gpuaas.manifests.validation.schema_errors`, the one strict validator the
project has (it reads Kueue's CRDs from the Kueue module pinned in `stack/kueue/go.mod`). The API
server prunes unknown fields silently, so a misspelt key would pass a real cluster and be ignored
by Kueue; strict validation catches it here.
"""

from __future__ import annotations

from typing import Any

from gpuaas.manifests.validation import schema_errors


def kueue_schema_errors(obj: dict[str, Any]) -> list[str]:
    """Every schema violation of `obj`, as "Kind name: path: message" lines (empty when valid)."""
    if not str(obj.get("apiVersion", "")).startswith("kueue.x-k8s.io/"):
        raise ValueError(f"expected a kueue.x-k8s.io object, found apiVersion {obj.get('apiVersion')!r}")
    return schema_errors(obj)
