"""`gpuaas-release-workers`: release a Workload's GPUs by hand (what on-idle does on an idle alert).

Submitted from the Argo UI or `argo submit --from workflowtemplate/gpuaas-release-workers`; there is
no Sensor for it. The step scales the owner's workers down with the owner kind's strategy and never
deletes the tenant's workload or data.
"""

from __future__ import annotations

from hera.workflows import WorkflowTemplate

from workflows.reaction import ReactionTemplate, single_step

NAME = "gpuaas-release-workers"
SPEC = ReactionTemplate(
    name=NAME,
    reaction="release-workers",
    description="Release the GPUs of a Kueue Workload (scale its workers down, keep the workload and its data). "
                "Use dry-run=true first to see the plan.",
)


def workflow_template() -> WorkflowTemplate:
    return single_step(SPEC)


if __name__ == "__main__":
    print(workflow_template().to_yaml())
