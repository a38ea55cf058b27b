"""Fixtures for the artifacts tests: every rendered object, once per session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"


@pytest.fixture(scope="session")
def rendered_objects() -> list[dict[str, Any]]:
    from gpuaas.manifests import objects

    return objects()


@pytest.fixture(scope="session")
def templates() -> dict[str, dict[str, Any]]:
    import workflows

    return workflows.rendered()


@pytest.fixture(scope="session")
def sensors_by_name() -> dict[str, dict[str, Any]]:
    import sensors

    return {s["metadata"]["name"]: s for s in sensors.all_sensors()}
