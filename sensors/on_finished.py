"""Sensor `gpuaas-on-finished`: start `gpuaas-on-finished` when a Workload BECOMES finished.

Fires on: UPDATE, Finished True now and not True in oldBody, whether the job succeeded or failed
(the step reads the reason), except reason WorkloadSliceReplaced: an elastic job's old Workload slice
that a scale-up replaced (the job runs on in the new slice). Later status writes on a finished
Workload, evictions, deactivation and the re-list ADD after a restart start nothing.
"""

from __future__ import annotations

from sensors import event_sources as sources
from sensors.on_admitted import workload_arguments, workload_parameters
from sensors.trigger import sensor, workflow_trigger
from sensors.workload_transition import became_true, reason_not

NAME = "gpuaas-on-finished"
TEMPLATE = "gpuaas-on-finished"
DEPENDENCY = "workload-finished"
SLICE_REPLACED = "WorkloadSliceReplaced"
"""Kueue's Finished reason for a replaced elastic Workload slice (steps.model.workload.SLICE_REPLACED)."""


def build() -> dict:
    dependency = {"name": DEPENDENCY, "eventSourceName": sources.WORKLOADS, "eventName": sources.WORKLOADS_EVENT,
                  "filters": {"data": [*became_true("Finished"), reason_not("body", "Finished", SLICE_REPLACED)]}}
    trigger = workflow_trigger("submit-on-finished", TEMPLATE, "on-finished", DEPENDENCY,
                               workload_arguments(), workload_parameters())
    return sensor(NAME, [dependency], [trigger], __doc__.splitlines()[0])
