"""`gpuaas-on-finished`: a Kueue Workload just finished (Sensor `gpuaas-on-finished`).

The step releases what gpuaas holds for the workload (lent quota, idle bookkeeping) and counts the
GPU-hours reclaimed if the workload ended while released.
"""

from __future__ import annotations

from hera.workflows import WorkflowTemplate

from workflows.reaction import ReactionTemplate, single_step

NAME = "gpuaas-on-finished"
SPEC = ReactionTemplate(
    name=NAME,
    recordable=True,
    reaction="on-finished",
    description="A Kueue Workload finished: return lent quota, close its idle bookkeeping, record GPU-hours.",
    reclaimed_gpu_hours=True,
)


def workflow_template() -> WorkflowTemplate:
    return single_step(SPEC)


if __name__ == "__main__":
    print(workflow_template().to_yaml())
