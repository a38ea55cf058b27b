"""`gpuaas-provision-quota`: create or resize a tenant's ClusterQueue/LocalQueue quota.

Two ways in: by hand (mode=hand, a tenant, flavor and GPU count) and capacity tracking (mode=capacity,
started by Sensor `gpuaas-provision-quota` on GPU Node changes and on a calendar), which re-splits the
cohort's GPUs by the policy's weights. One lock for the whole template: two capacity runs never
overlap, and a hand run never races a capacity run.
"""

from __future__ import annotations

from hera.workflows import WorkflowTemplate

from workflows.reaction import DRY_RUN, EVENT, Input, ReactionTemplate, single_step

NAME = "gpuaas-provision-quota"
MUTEX = "gpuaas-provision-quota"
INPUTS = (
    Input("mode", "hand: set one tenant's quota from tenant/flavor/gpus. capacity: re-split the cohort's GPUs "
                  "by policy weights. Empty: hand if tenant is set, else capacity.", "", ("", "hand", "capacity")),
    Input("tenant", "ClusterQueue name of the tenant (required in hand mode). Empty in capacity mode."),
    Input("namespace", "Tenant namespace that gets the LocalQueue (hand mode); the workload's namespace when "
                       "lending to a workload."),
    Input("workload", "Optional: lend `gpus` to this Kueue Workload's ClusterQueue."),
    Input("flavor", "ResourceFlavor name (kubectl get resourceflavors). Required in hand mode; in capacity "
                    "mode empty = every flavor."),
    Input("gpus", "Whole GPUs: the new nominalQuota (hand mode), or the GPUs lent to `workload`. Empty in "
                  "capacity mode."),
    Input("cohort", "Cohort to place the ClusterQueue in. Empty: the policy's cohort."),
    Input("borrowing-limit", "Optional (hand mode): borrowingLimit of the GPU quota, whole GPUs this tenant may "
                             "borrow from the cohort. Empty: keep the queue's."),
    Input("lending-limit", "Optional (hand mode): lendingLimit of the GPU quota, whole GPUs of its quota the "
                           "cohort may borrow (<= gpus). Empty: keep the queue's."),
    DRY_RUN,
    EVENT,
)
SPEC = ReactionTemplate(
    name=NAME,
    reaction="provision-quota",
    description="Provision Kueue quota: a tenant's ClusterQueue and LocalQueue by hand, or re-split GPU "
                "capacity across tenants when GPU nodes change.",
    inputs=INPUTS,
    mutex=MUTEX,
)


def workflow_template() -> WorkflowTemplate:
    return single_step(SPEC)


if __name__ == "__main__":
    print(workflow_template().to_yaml())
