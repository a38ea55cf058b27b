"""Sensor `gpuaas-on-idle`: start `gpuaas-on-idle` for a FIRING Alertmanager group with GPUWorkloadIdle.

One POST (one alert group, any number of alerts) is one event and one workflow; the template fans
out one child per alert. Resolved groups and groups of other alerts start nothing (an alertname that
only contains "GPUWorkloadIdle" does not match: the GJSON query compares for equality). Alertmanager
re-sends groups on group_interval/repeat_interval; the on-idle step is idempotent for a workload it
already released.
"""

from __future__ import annotations

from sensors import event_sources as sources
from sensors.trigger import FromEvent, sensor, workflow_trigger

NAME = "gpuaas-on-idle"
TEMPLATE = "gpuaas-on-idle"
DEPENDENCY = "idle-alerts"
ALERT_NAME = "GPUWorkloadIdle"
WORKLOAD_NAMESPACE_LABEL = "workload_namespace"
"""The product's alerts carry the workload's namespace here (their `namespace` is the product's; sensors/
imports no other folder: steps/reactions/idle_alerts.py has the same name, tests/artifacts checks both)."""


def build() -> dict:
    dependency = {"name": DEPENDENCY, "eventSourceName": sources.ALERTMANAGER,
                  "eventName": sources.ALERTMANAGER_EVENT,
                  "filters": {"data": [
                      {"path": "body.status", "type": "string", "value": ["^firing$"]},
                      {"path": f'body.alerts.#(labels.alertname=="{ALERT_NAME}")#|#', "type": "number",
                       "comparator": ">", "value": ["0"]},
                  ]}}
    arguments = {"namespace": "", "workload": "", "event": "", "dry-run": "false", "tenant": ""}
    trigger = workflow_trigger("submit-on-idle", TEMPLATE, "on-idle", DEPENDENCY, arguments,
                               [FromEvent("namespace", f"body.commonLabels.{WORKLOAD_NAMESPACE_LABEL}"), FromEvent("event")])
    return sensor(NAME, [dependency], [trigger], __doc__.splitlines()[0])
