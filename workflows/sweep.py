"""`gpuaas-sweep`: the catch-up sweep, and the CronWorkflow that runs it (docs/catch-up.md).

One pass lists every Kueue Workload and records or delivers each admission and finish that no
reaction has handled yet (steps/reactions/sweep.py). The CronWorkflow lives in the
workflow-controller, which runs the reactions anyway: the safety net needs none of the parts of
the event path it stands in for (EventSource, NATS, Sensor).

    schedule   every 2 minutes (a site's: the chart's `sweep.schedule`); concurrencyPolicy Forbid (passes
               never overlap; the template's mutex holds a hand-submitted pass off too)
    grace      5m (`sweep.grace`): a transition the Sensor starts a run for is left to the event path this long
    max-per-pass 500 runs created per pass, oldest transitions first
    page-size  500 Workloads per list request
    installed-at empty: the CronWorkflow's creationTimestamp (older transitions are adopted)
"""

from __future__ import annotations

from typing import Any

from hera.workflows import WorkflowTemplate

from workflows.reaction import DRY_RUN, Input, ReactionTemplate, single_step

NAME = "gpuaas-sweep"
SERVICE_ACCOUNT = "gpuaas-sweep"
SCHEDULE = "*/2 * * * *"
MUTEX = "gpuaas-sweep"
GRACE = Input("grace", "How long a transition the Sensor starts a run for is left to the event path before the "
                       "sweep delivers it (seconds, or 30s / 5m / 1h).", "5m")
MAX_PER_PASS = Input("max-per-pass", "At most this many runs one pass creates (oldest transitions first; the rest "
                                     "wait for the next pass).", "500")
PAGE_SIZE = Input("page-size", "Workloads read per list request (limit/continue): a pass holds one page at a time.",
                  "500")
INSTALLED_AT = Input("installed-at", "Leave empty: transitions older than CronWorkflow gpuaas-sweep's creationTimestamp "
                                     "(the install) are adopted, not answered. An RFC 3339 time overrides it.")
SPEC = ReactionTemplate(
    name=NAME,
    reaction="sweep",
    description="Catch-up sweep: record or deliver every Kueue Workload admission and finish that no reaction has "
                "handled (a lost event, a run that failed, a job kind whose reaction needs no step pod). Run by "
                "CronWorkflow gpuaas-sweep; submit by hand with dry-run=true to see what it would do.",
    inputs=(GRACE, MAX_PER_PASS, PAGE_SIZE, INSTALLED_AT, DRY_RUN),
    mutex=MUTEX,
    labels_from_workload=False,
    service_account=SERVICE_ACCOUNT,
    active_deadline_seconds=1800,
)


def workflow_template() -> WorkflowTemplate:
    return single_step(SPEC)


def cron_workflow(schedule: str = SCHEDULE, grace: str | None = None) -> dict[str, Any]:
    """The CronWorkflow (a plain dict: every field is the v4 CRD's, `schedules` plural since v3.6)."""
    arguments = [{"name": "grace", "value": grace}] if grace else []
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "CronWorkflow",
        "metadata": {"name": NAME, "labels": {"app.kubernetes.io/name": "gpuaas",
                                              "app.kubernetes.io/component": "reaction",
                                              "gpuaas.io/reaction": "sweep"}},
        "spec": {
            "schedules": [schedule],
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 60,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "workflowSpec": {"workflowTemplateRef": {"name": NAME},
                             **({"arguments": {"parameters": arguments}} if arguments else {})},
        },
    }


if __name__ == "__main__":
    print(workflow_template().to_yaml())
