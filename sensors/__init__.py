"""EventSources and Sensors, built in Python as plain dicts (see sensors/event_sources.py for why).

One module per Sensor (`sensors/on_admitted.py` -> Sensor `gpuaas-on-admitted`), each exposing
`NAME` and `build() -> dict`; `sensors.event_sources.objects()` gives the EventSources.
`gpuaas render` writes them to manifests/base/events/.
"""

from __future__ import annotations

import importlib
from typing import Any

SENSOR_MODULES: tuple[str, ...] = (
    "sensors.on_admitted",
    "sensors.on_finished",
    "sensors.on_idle",
    "sensors.provision_quota",
)


def all_sensors() -> list[dict[str, Any]]:
    return [importlib.import_module(name).build() for name in SENSOR_MODULES]


def all_event_sources(workload_version: str = "v1beta2") -> list[dict[str, Any]]:
    from sensors.event_sources import objects

    return objects(workload_version)
