"""`python -m steps.install_hook CRONWORKFLOW...`: after `helm install` or `helm upgrade`, have the
workflow-controller validate each of the chart's CronWorkflows again, against a WorkflowTemplate it has.

Why: argo-workflows v4.0.5 validates a CronWorkflow against the controller's WorkflowTemplate informer
when the CronWorkflow is added or updated (workflow/cron/controller.go `processNextCronItem`,
`validateCronWorkflow`); a rejection ("WorkflowTemplate Informer cannot find WorkflowTemplate") is only
logged, and the CronWorkflow is looked at again only when it changes or at the informer's 20-minute
resync (upstream issue argoproj/argo-workflows#12332). Helm v4.3.2 creates the kinds it does not know
in the alphabetical order of their kind (pkg/release/v1/util/kind_sorter.go `lessByKind`), one kind
after the other (pkg/kube/client.go `batchPerform`): CronWorkflow `gpuaas-sweep` before WorkflowTemplate
`gpuaas-sweep`, so the catch-up sweep would not run for up to 20 minutes after an install. The chart
runs this module as a post-install and post-upgrade hook (a Job: gpuaas/manifests/site.py
`_install_hook`), after every object of the release exists: for each CronWorkflow it waits until its
WorkflowTemplate exists and is SETTLE_S old (the controller's informer has it by then), then annotates
the CronWorkflow with the template's resourceVersion and the time. That is an update, which the
controller answers by validating the CronWorkflow again. On the stack, gpuaas.cluster.install applies
the CronWorkflows last for the same reason.

Exit 0 when every CronWorkflow was annotated; 1 when one, or its WorkflowTemplate, is still missing after
WAIT_S or the API refused a call (Helm then reports the hook failed and prints this output). The
namespace is the pod's own (GPUAAS_NAMESPACE, from the downward API).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from steps.gateways import resources
from steps.gateways.errors import KubernetesError

TEMPLATE_VERSION = "gpuaas.io/template-resource-version"
"""On each CronWorkflow: the resourceVersion of the WorkflowTemplate it runs, when it was last validated against it."""
REVALIDATED_AT = "gpuaas.io/revalidated-at"
"""On each CronWorkflow: when the hook last asked for its validation (changes every time, so every run is an update)."""
SETTLE_S = 3.0
"""How old the WorkflowTemplate must be (creationTimestamp has whole seconds): the controller's informer
receives it from its watch within well under a second."""
WAIT_S = 120.0


class HookError(RuntimeError):
    """What the hook waited for and did not find."""


def _now_text(now: float) -> str:
    """Milliseconds: two runs within a second still change the annotation (a patch that changes nothing is no update)."""
    return datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def revalidate(gateway: Any, namespace: str, name: str, *, wait_s: float = WAIT_S, settle_s: float = SETTLE_S,
               clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep) -> str:
    """Annotate CronWorkflow `name` once its WorkflowTemplate exists and has settled; one line saying what was done."""
    deadline = clock() + wait_s
    while True:
        cron = gateway.get(resources.CRON_WORKFLOW, name, namespace)
        ref = (((cron or {}).get("spec") or {}).get("workflowSpec") or {}).get("workflowTemplateRef") or {}
        if cron is not None and (not ref.get("name") or ref.get("clusterScope")):
            return f"CronWorkflow {namespace}/{name}: runs no WorkflowTemplate of its namespace, nothing to wait for"
        template = gateway.get(resources.WORKFLOW_TEMPLATE, ref["name"], namespace) if cron is not None else None
        if template is not None:
            created = datetime.fromisoformat(template["metadata"]["creationTimestamp"]).timestamp()
            young = settle_s - (clock() - created)
            if young > 0:
                sleep(young)
            break
        if clock() >= deadline:
            missing = (f"CronWorkflow {namespace}/{name}" if cron is None
                       else f"WorkflowTemplate {namespace}/{ref['name']} (CronWorkflow {name} runs it)")
            raise HookError(f"expected {missing} within {wait_s:g}s of the install, found none; is the release "
                            "installed in this namespace? (`helm status`, `kubectl get cronworkflows,workflowtemplates`)")
        sleep(1.0)
    version = template["metadata"]["resourceVersion"]
    gateway.merge_patch(resources.CRON_WORKFLOW, name, {"metadata": {"annotations": {
        TEMPLATE_VERSION: version, REVALIDATED_AT: _now_text(clock())}}}, namespace)
    return (f"CronWorkflow {namespace}/{name}: annotated with WorkflowTemplate {ref['name']}'s resourceVersion "
            f"{version}; the workflow-controller validates it again")


def main(argv: list[str] | None = None, gateway: Any | None = None, wait_s: float = WAIT_S) -> int:
    names = sys.argv[1:] if argv is None else argv
    namespace = os.environ.get("GPUAAS_NAMESPACE", "").strip()
    if not names or names[0] in ("-h", "--help") or not namespace:
        print("usage: GPUAAS_NAMESPACE=NAMESPACE python -m steps.install_hook CRONWORKFLOW... (the chart's "
              "post-install hook; see the module's docstring)", file=sys.stderr)
        return 0 if names and names[0] in ("-h", "--help") else 2
    if gateway is None:
        from steps.gateways.kubernetes import KubernetesGateway

        gateway = KubernetesGateway(component="gpuaas-install-hook")
    try:
        for name in names:
            print(revalidate(gateway, namespace, name, wait_s=wait_s), flush=True)
    except (HookError, KubernetesError) as error:
        print(f"gpuaas install hook: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
