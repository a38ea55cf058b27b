"""`gpuaas-on-idle`: one Alertmanager group of `GPUWorkloadIdle` alerts, one child per alert.

    main
      idle-alerts   python -m steps idle-alerts  -> output `alerts`: [{namespace, workload, pod, alert}]
      on-idle       withParam over `alerts`: python -m steps on-idle, one pod per alert,
                    each under its own Workload mutex (template-level synchronization), with its own
                    outcome, plan and record outputs and its own metrics

The workflow itself takes no lock (a group spans workloads); the child lock has the same name as the
workflow-level lock of the other workload templates, so an idle release never overlaps an admission
or finish reaction on the same Workload. Submitted by hand with `namespace`/`workload` and an empty
`event`, idle-alerts yields that one workload.
"""

from __future__ import annotations

from hera.workflows import Step, Steps, WorkflowTemplate
from hera.workflows.models import Parameter as ModelParameter

from workflows.reaction import (
    RELEASED_GPUS_METRIC,
    STANDARD_OUTPUTS,
    TENANT_OUTPUT,
    WORKLOAD_INPUTS,
    Input,
    ReactionTemplate,
    amount_metric,
    assemble,
    mutex,
    outcome_metric,
    script,
    workflow_arguments,
)

NAME = "gpuaas-on-idle"
EVENT = Input("event", "The Alertmanager webhook event as the Sensor delivered it (JSON, one alert group). "
                       "Leave empty when submitting by hand and give namespace and workload instead.")
SPEC = ReactionTemplate(
    name=NAME,
    reaction="on-idle",
    description="GPUWorkloadIdle fired: confirm each alert's workload is idle over the policy window and "
                "release its GPUs (per tenant policy). One child step, lock and record per alert.",
    inputs=tuple(EVENT if i.name == "event" else i for i in WORKLOAD_INPUTS),
    mutex=None,
    needs_prometheus=True,
)
CHILD_INPUTS = ("namespace", "workload", "pod", "alert", "event", "dry-run", "tenant")
CHILD_MUTEX = "gpuaas-workload-{{inputs.parameters.namespace}}-{{inputs.parameters.workload}}"


def workflow_template() -> WorkflowTemplate:
    names = [i.name for i in SPEC.inputs]

    def body() -> None:
        with Steps(name="main"):
            Step(name="idle-alerts", template="idle-alerts", arguments=workflow_arguments(names))
            Step(
                name="on-idle", template="on-idle",
                with_param="{{steps.idle-alerts.outputs.parameters.alerts}}",
                arguments=[
                    ModelParameter(name="namespace", value="{{item.namespace}}"),
                    ModelParameter(name="workload", value="{{item.workload}}"),
                    ModelParameter(name="pod", value="{{item.pod}}"),
                    ModelParameter(name="alert", value="{{item.alert}}"),
                    # not the group's event: each child's node would carry all of it, and the Workflow's
                    # node status grows with the square of the group (seen: 1.6 MB for 20 alerts, past
                    # Argo's 1 MB limit before compression); the child reads only its alert
                    ModelParameter(name="event", value=""),
                    *workflow_arguments(["dry-run", "tenant"]),
                ],
            )
        script("idle-alerts", "idle-alerts", names, [*STANDARD_OUTPUTS, ("alerts", "[]")],
               metrics=[outcome_metric("idle-alerts")])
        script("on-idle", "on-idle", CHILD_INPUTS, [*STANDARD_OUTPUTS, ("gpus-released", "0"), TENANT_OUTPUT],
               needs_prometheus=True, synchronization=mutex(CHILD_MUTEX),
               metrics=[outcome_metric("on-idle"),
                        amount_metric(RELEASED_GPUS_METRIC, "GPUs released by the idle reaction", "gpus-released")])

    return assemble(SPEC, body)


if __name__ == "__main__":
    print(workflow_template().to_yaml())
