"""record-outcome: the exit handler's step: a record for a run whose reaction step failed.

When a reaction step dies before writing its record (OOM, image pull, retries exhausted), the
Workflow's exit handler runs this with `reaction`, `namespace`, `workload`, `event`, `dry-run`,
`tenant`, `status` ({{workflow.status}}) and `failures` ({{workflow.failures}}, a JSON list).

For a failed run the record is typed as the FAILED reaction (io.gpuaas.reaction.<reaction>) so the
audit has a record for the run even when the step died before writing one; `observed.recordedBy`
says this step wrote it (prefer the reaction node's own record when both exist). A Succeeded or
empty status means the reaction recorded itself: no-op, typed io.gpuaas.reaction.record-outcome. A failed run also gets a
GPUaaSReactionFailed Event on the Workload. This step always exits 0: an exit handler that fails
would hide the original failure.
"""

from __future__ import annotations

from typing import Any

from steps.json_text import load as load_json
from steps.plan import Outcome, ReactionRequest, RejectedInput, StepReport

REACTION = "record-outcome"


def _failures(text: str) -> list[Any]:
    """{{workflow.failures}}: a JSON array, `null`, empty, or (quoted once more by Argo) a JSON string of it."""
    value: Any = text.strip()
    for _ in range(2):
        if not isinstance(value, str):
            break
        if not value.strip():
            return []
        try:
            value = load_json("failures", value)
        except RejectedInput:  # not JSON, or JSON no step reads (too deep, huge numbers): kept as text
            return [value]
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def step(context: Any) -> StepReport:
    from steps.gateways.errors import KubernetesError
    from steps.reactions import NAME_PATTERN
    from steps.record import FAILED

    params = context.params
    reaction = (params.get("reaction") or "").strip()
    if not NAME_PATTERN.match(reaction):
        raise RejectedInput("reaction", "the name of the reaction whose run failed (e.g. on-idle)", repr(reaction),
                            "pass reaction={{workflow.labels.gpuaas.io/reaction}} from the exit handler")
    request = ReactionRequest.from_params(reaction, {k: v for k, v in params.items() if k != "reaction"})
    status = (params.get("status") or "").strip()
    failures = _failures(params.get("failures") or "")
    observed = {"recordedBy": REACTION, "workflowStatus": status, "failures": failures}
    report = StepReport(reaction=reaction, outcome=Outcome.NO_OP, request=request, observed=observed,
                        exit_code=0, tenant=request.tenant_hint or None)
    if status in ("", "Succeeded"):
        # Typed as record-outcome, not as the reaction: the reaction's own record is the run's record.
        report.reaction = REACTION
        observed["reaction"] = reaction
        report.plan = {"actions": [], "reasons": [(f"workflow status {status or 'unknown'}: the reaction step "
                                                  "recorded its own outcome")]}
        return report
    messages = [str(f.get("message") if isinstance(f, dict) else f) for f in failures] or [f"workflow {status}"]
    report.outcome = Outcome.FAILED
    report.errors = [f"{status}: {m}" for m in messages]
    report.plan = {"actions": [], "reasons": [f"the {reaction} run ended {status} without recording itself"]}
    if request.namespace and request.workload:
        from steps.model.state import _get_workload

        try:
            workload = _get_workload(context.kube, request.namespace, request.workload, None)
        except KubernetesError as error:
            report.errors.append(f"Workload not read: {error}")
            workload = None
        if workload is not None:
            meta = workload.get("metadata") or {}
            report.workload = {"namespace": meta.get("namespace"), "name": meta.get("name"), "uid": meta.get("uid")}
            try:
                context.kube.record_event(workload, FAILED, f"{reaction} {status}: {messages[0]}"[:1000],
                                          type="Warning", action=reaction)
            except KubernetesError as error:
                report.errors.append(f"Kubernetes Event not recorded: {error}")
    return report
