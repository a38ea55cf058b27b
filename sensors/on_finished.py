"""Sensor `gpuaas-on-finished`: start `gpuaas-on-finished` when a Workload BECOMES finished.

Fires on: UPDATE, Finished True now and not True in oldBody, whether the job succeeded or failed
(the step reads the reason), except reason WorkloadSliceReplaced: an elastic job's old Workload slice
that a scale-up replaced (the job runs on in the new slice); and only where the step may have to
write: an owner that is not only job kinds (a RayJob may keep its RayCluster), or gpuaas' release
record or a loan on the Workload. Later status writes on a finished Workload, evictions, deactivation
and the re-list ADD after a restart start nothing. The other finishes are recorded by the catch-up
sweep without a step pod (docs/catch-up.md).
"""

from __future__ import annotations

from sensors import event_sources as sources
from sensors.on_admitted import NO_ACTION_KINDS, workload_arguments, workload_labels, workload_parameters
from sensors.trigger import sensor, workflow_trigger
from sensors.workload_transition import became_true, may_need_a_step, reason_not

NAME = "gpuaas-on-finished"
TEMPLATE = "gpuaas-on-finished"
DEPENDENCY = "workload-finished"
NO_FINISH_ACTION_KINDS = tuple(k for k in NO_ACTION_KINDS if k != "RayJob")
"""steps.delivery.NO_FINISH_ACTION_KINDS: a RayJob may keep its RayCluster, which on-finished scales down."""
FINISH_ACTION_ANNOTATIONS = ("gpuaas.io/release", "gpuaas.io/lent-gpus")
"""steps.delivery.FINISH_ACTION_ANNOTATIONS: a release (GPU-hours reclaimed) or a loan to return."""
SLICE_REPLACED = "WorkloadSliceReplaced"
"""Kueue's Finished reason for a replaced elastic Workload slice (steps.model.workload.SLICE_REPLACED)."""


def build() -> dict:
    dependency = {"name": DEPENDENCY, "eventSourceName": sources.WORKLOADS, "eventName": sources.WORKLOADS_EVENT,
                  "filters": {"data": [*became_true("Finished"), reason_not("body", "Finished", SLICE_REPLACED),
                                       may_need_a_step("body", NO_FINISH_ACTION_KINDS, FINISH_ACTION_ANNOTATIONS)]}}
    trigger = workflow_trigger("submit-on-finished", TEMPLATE, "on-finished", DEPENDENCY,
                               workload_arguments(), workload_parameters(), labels=workload_labels())
    return sensor(NAME, [dependency], [trigger], __doc__.splitlines()[0])
