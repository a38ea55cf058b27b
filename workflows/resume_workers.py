"""`gpuaas-resume-workers`: bring a released Workload's workers back (the tenant asks to resume).

Submitted by hand; counts the GPU-hours reclaimed while the workload was released. A released
KEDA-scaled Deployment has no Workload left (its pods, and their Workloads, are gone), so the
template also takes `target` (Kind/name) for that case.
"""

from __future__ import annotations

from hera.workflows import WorkflowTemplate

from workflows.reaction import WORKLOAD_INPUTS, Input, ReactionTemplate, single_step

NAME = "gpuaas-resume-workers"
SPEC = ReactionTemplate(
    name=NAME,
    reaction="resume-workers",
    description="Resume a Kueue Workload that gpuaas released: restore its workers as they were recorded.",
    reclaimed_gpu_hours=True,
    inputs=(*WORKLOAD_INPUTS,
            Input("target", "Optional, when `workload` is empty: the released object as Kind/name (for example "
                            "Deployment/llm-server or ScaledObject/gpuaas-llm) in `namespace`; a KEDA-paused "
                            "Deployment's per-pod Workloads are gone once it is scaled to zero. Also brings a "
                            "server gpuaas' ScaledObject took to 0 when idle back to its recorded size.")),
)


def workflow_template() -> WorkflowTemplate:
    return single_step(SPEC)


if __name__ == "__main__":
    print(workflow_template().to_yaml())
