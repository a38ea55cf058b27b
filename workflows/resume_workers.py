"""`gpuaas-resume-workers`: bring a released Workload's workers back (the tenant asks to resume).

Submitted by hand; counts the GPU-hours reclaimed while the workload was released.
"""

from __future__ import annotations

from hera.workflows import WorkflowTemplate

from workflows.reaction import ReactionTemplate, single_step

NAME = "gpuaas-resume-workers"
SPEC = ReactionTemplate(
    name=NAME,
    reaction="resume-workers",
    description="Resume a Kueue Workload that gpuaas released: restore its workers as they were recorded.",
    reclaimed_gpu_hours=True,
)


def workflow_template() -> WorkflowTemplate:
    return single_step(SPEC)


if __name__ == "__main__":
    print(workflow_template().to_yaml())
