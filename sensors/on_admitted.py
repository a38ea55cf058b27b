"""Sensor `gpuaas-on-admitted`: start `gpuaas-on-admitted` when a Workload BECOMES admitted.

Fires on: UPDATE, Admitted True now, not True in oldBody, not Finished. That covers first admission
(with or without admission checks: Admitted turns True only after all checks are Ready) and
re-admission after an eviction. It does not fire on status churn while admitted, on QuotaReserved
without admission, on eviction or deactivation (Admitted turns False), or on the re-list ADD after
an EventSource restart (see sensors/workload_transition.py).
"""

from __future__ import annotations

from sensors import event_sources as sources
from sensors.trigger import FromEvent, sensor, workflow_trigger
from sensors.workload_transition import became_true, condition_not_true

NAME = "gpuaas-on-admitted"
TEMPLATE = "gpuaas-on-admitted"
DEPENDENCY = "workload-admitted"


def workload_arguments() -> dict[str, str]:
    return {"namespace": "", "workload": "", "event": "", "dry-run": "false", "tenant": ""}


def workload_parameters() -> list[FromEvent]:
    return [FromEvent("namespace", "body.metadata.namespace"), FromEvent("workload", "body.metadata.name"),
            FromEvent("tenant", "body.status.admission.clusterQueue"), FromEvent("event")]


def build() -> dict:
    dependency = {"name": DEPENDENCY, "eventSourceName": sources.WORKLOADS, "eventName": sources.WORKLOADS_EVENT,
                  "filters": {"data": [*became_true("Admitted"), condition_not_true("body", "Finished")]}}
    trigger = workflow_trigger("submit-on-admitted", TEMPLATE, "on-admitted", DEPENDENCY,
                               workload_arguments(), workload_parameters())
    return sensor(NAME, [dependency], [trigger], __doc__.splitlines()[0])
