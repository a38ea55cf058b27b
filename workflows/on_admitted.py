"""`gpuaas-on-admitted`: a Kueue Workload was just admitted (Sensor `gpuaas-on-admitted`).

The step records queue wait and prepares idle handling for the workload (policy, owner kind).
"""

from __future__ import annotations

from hera.workflows import WorkflowTemplate

from workflows.reaction import ReactionTemplate, single_step

NAME = "gpuaas-on-admitted"
SPEC = ReactionTemplate(
    name=NAME,
    recordable=True,
    reaction="on-admitted",
    description="A Kueue Workload was admitted: record its queue wait and prepare idle handling. "
                "Submit by hand with namespace and workload to re-run it on the live state.",
    # The Prometheus address goes into the ScaledObjects it writes for inference servers (KEDA queries it).
    needs_prometheus=True,
)


def workflow_template() -> WorkflowTemplate:
    return single_step(SPEC)


if __name__ == "__main__":
    print(workflow_template().to_yaml())
