"""The gpuaas WorkflowTemplates, one Hera module each (`workflows/on_admitted.py` -> `gpuaas-on-admitted`).

Each module exposes `NAME` and `workflow_template() -> hera WorkflowTemplate`; `python -m
workflows.on_admitted` prints its YAML. `gpuaas render` writes them to
`manifests/base/workflows/<name>.yaml`, and tests/artifacts fails when a render would change the
committed YAML (regenerate on purpose with `gpuaas render` or `GPUAAS_REGENERATE=1`).

Argo features the templates use, and nothing else (the local engine executes exactly these):
`script` templates (image, command, source `{{inputs.parameters}}`, env with `fieldRef`,
securityContext, resources), `steps` templates (sequential groups, `withParam` over a JSON list
with `{{item.<key>}}`), `inputs.parameters` / `outputs.parameters` with `valueFrom.path` and
`valueFrom.default`, `{{steps.<name>.outputs.parameters.<name>}}`, `{{workflow.parameters.<name>}}`,
`retryStrategy` (limit, retryPolicy Always, `expression: asInt(lastRetry.exitCode) == 75`, backoff),
`onExit` with `{{workflow.status}}` and `{{workflow.failures}}`, `synchronization.mutexes` at workflow
level and (on-idle children) template level, `workflowMetadata.labels` and `labelsFrom` expressions
`workflow.parameters.<name>`, Prometheus `metrics` (workflow-level counter and histogram with
`{{workflow.status}}`/`{{workflow.duration}}`; template-level counters with `{{outputs.parameters.X}}`,
`{{inputs.parameters.X}}` and `when: "{{status}} == Succeeded"`), `podGC`, `ttlStrategy`,
`activeDeadlineSeconds`, `serviceAccountName`, argument `description` and `enum`.
No dag, suspend, templateRef, memoize or artifacts.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

MODULES: tuple[str, ...] = (
    "workflows.on_admitted",
    "workflows.on_finished",
    "workflows.on_idle",
    "workflows.release_workers",
    "workflows.resume_workers",
    "workflows.provision_quota",
    "workflows.sweep",
)


def modules() -> list[ModuleType]:
    import importlib

    return [importlib.import_module(name) for name in MODULES]


def cron_workflows() -> dict[str, dict]:
    """Every CronWorkflow as a plain dict, keyed by name (the catch-up sweep's)."""
    from workflows import sweep

    return {sweep.NAME: sweep.cron_workflow()}


def rendered() -> dict[str, dict]:
    """Every WorkflowTemplate as a plain dict, keyed by template name."""
    out: dict[str, dict] = {}
    for module in modules():
        build: Callable = module.workflow_template
        out[module.NAME] = build().to_dict()
    return out
