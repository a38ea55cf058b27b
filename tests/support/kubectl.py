"""The pinned kubectl (stack/kubernetes) for tests that build kustomize overlays, as `kubectl apply -k` would.

`make cluster-build` builds it (`make test` runs that first). Missing, it FAILS the calling test in one
line that says how to build it: a test never skips.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaas.cluster.binaries import BuildFailed, program


def pinned_program(component: str, name: str, what: str) -> Path:
    """A program built from stack/<component>, or the calling test FAILS saying how to build it."""
    try:
        return program(component, name)
    except BuildFailed as missing:
        reason = str(missing)
    pytest.fail(f"{what} needed: {reason}", pytrace=False)


def pinned_kubectl() -> Path:
    return pinned_program("kubernetes", "kubectl", "kubectl (kustomize)")
