"""Argo Events semantics for gpuaas: GJSON paths, sensor filters, dependency conditions,
trigger parameters, and the router that `gpuaas route` and the local engine share.

    from routing import Router
    router = Router.from_manifests("manifests")
    result = router.route(cloudevent)          # a CloudEvent in JSON structured mode, as a dict
    result.triggered[0].workflow               # the Workflow the Sensor would submit
    result.skipped                             # (sensor, dependency, reason) for what did not fire
    result.to_dict()                           # what `gpuaas route` prints
"""

from routing.event import ArgoEvent, EventError, from_cloudevent
from routing.manifests import ManifestError, load_argo_events_objects
from routing.router import Router, RouteResult, Skipped, Triggered

__all__ = [
    "ArgoEvent",
    "EventError",
    "ManifestError",
    "RouteResult",
    "Router",
    "Skipped",
    "Triggered",
    "from_cloudevent",
    "load_argo_events_objects",
]
