"""Sensor `gpuaas-on-admitted`: start `gpuaas-on-admitted` when a Workload BECOMES admitted.

Fires on: UPDATE, Admitted True now, not True in oldBody, not Finished, and an owner that may need a
write (not only job kinds: steps.delivery.NO_ADMISSION_ACTION_KINDS). That covers first admission
(with or without admission checks: Admitted turns True only after all checks are Ready) and
re-admission after an eviction. It does not fire on status churn while admitted, on QuotaReserved
without admission, on eviction or deactivation (Admitted turns False), or on the re-list ADD after
an EventSource restart (see sensors/workload_transition.py). A job kind's admission, whose reaction
writes nothing, is recorded by the catch-up sweep (gpuaas-sweep) without a step pod; the sweep also
delivers any admission the event path missed (docs/catch-up.md).
"""

from __future__ import annotations

from sensors import event_sources as sources
from sensors.trigger import UID_LABEL, FromEvent, sensor, workflow_trigger
from sensors.workload_transition import became_true, condition_not_true, may_need_a_step

NAME = "gpuaas-on-admitted"
NO_ACTION_KINDS = ("Job", "JobSet", "RayCluster", "RayJob", "PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob",
                   "JAXJob", "TrainJob")
"""steps.delivery.NO_ADMISSION_ACTION_KINDS (sensors/ imports no other folder: tests/routing checks they match)."""
TEMPLATE = "gpuaas-on-admitted"
DEPENDENCY = "workload-admitted"


def workload_arguments() -> dict[str, str]:
    return {"namespace": "", "workload": "", "event": "", "dry-run": "false", "tenant": ""}


def workload_parameters() -> list[FromEvent]:
    return [FromEvent("namespace", "body.metadata.namespace"), FromEvent("workload", "body.metadata.name"),
            FromEvent("tenant", "body.status.admission.clusterQueue"), FromEvent("event")]


def workload_labels() -> list[tuple[str, str]]:
    """Labels set on the submitted Workflow from the event (label, GJSON path): the Workload's uid lets the
    sweep see a run in flight before the workflow-controller has started it (its labelsFrom come later)."""
    return [(UID_LABEL, "body.metadata.uid")]


def build() -> dict:
    dependency = {"name": DEPENDENCY, "eventSourceName": sources.WORKLOADS, "eventName": sources.WORKLOADS_EVENT,
                  "filters": {"data": [*became_true("Admitted"), condition_not_true("body", "Finished"),
                                       may_need_a_step("body", NO_ACTION_KINDS)]}}
    trigger = workflow_trigger("submit-on-admitted", TEMPLATE, "on-admitted", DEPENDENCY,
                               workload_arguments(), workload_parameters(), labels=workload_labels())
    return sensor(NAME, [dependency], [trigger], __doc__.splitlines()[0])
