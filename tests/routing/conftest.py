"""Routers over the Sensors under test: the hand-written fixture and the RENDERED manifests/ that
`gpuaas render` writes (committed, so always there: a missing one fails, it never skips)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from routing import Router

REPO = Path(__file__).resolve().parents[2]
FIXTURE_MANIFESTS = Path(__file__).resolve().parent / "fixtures" / "manifests"
RENDERED_MANIFESTS = REPO / "manifests"


@dataclass
class Stack:
    """A router plus the names of the event sources the lifecycle tests publish to."""

    router: Router
    workloads: tuple[str, str]  # (EventSource name, event name) of the Workload resource source
    alerts: tuple[str, str]  # (EventSource name, event name) of the Alertmanager webhook


def _find_sources(router: Router) -> tuple[tuple[str, str], tuple[str, str]]:
    workloads = alerts = None
    for info in router.event_sources.values():
        for event_name, kind in info.events.items():
            if kind == "resource" and workloads is None and _watches_workloads(router, info.name, event_name):
                workloads = (info.name, event_name)
            if kind == "webhook" and alerts is None:
                alerts = (info.name, event_name)
    assert workloads, "no resource EventSource watching kueue.x-k8s.io workloads in the manifests"
    assert alerts, "no webhook EventSource (Alertmanager) in the manifests"
    return workloads, alerts


def _watches_workloads(router: Router, source: str, event_name: str) -> bool:
    spec = router.event_source_specs.get(source, {})
    block = (spec.get("resource") or {}).get(event_name) or {}
    return block.get("resource") == "workloads" and block.get("group") == "kueue.x-k8s.io"


def make_stack(path: Path) -> Stack:
    router = Router.from_manifests(path, clock=lambda: 1_796_000_000.0)
    workloads, alerts = _find_sources(router)
    return Stack(router, workloads, alerts)


def _rendered_has_sensors() -> bool:
    return RENDERED_MANIFESTS.is_dir() and any(
        "kind: Sensor" in p.read_text(encoding="utf-8", errors="ignore")
        for p in RENDERED_MANIFESTS.rglob("*.yaml")
    )


@pytest.fixture(params=["fixture", "rendered"])
def stack(request: pytest.FixtureRequest) -> Stack:
    """A fresh router (no remembered state) per test, for each set of Sensors."""
    if request.param == "rendered":
        assert _rendered_has_sensors(), f"{RENDERED_MANIFESTS} has no rendered Sensor: run `gpuaas render`"
        return make_stack(RENDERED_MANIFESTS)
    return make_stack(FIXTURE_MANIFESTS)
