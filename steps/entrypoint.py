"""`python -m steps <reaction> PARAMS_FILE`: what every Argo script template runs (ARCHITECTURE §1).

    main(argv, *, outputs_dir=None, environ=None) -> int    # argv = [reaction, params_file]

Reads the parameters file Argo writes (`[{"name": ..., "value": ...}, ...]`; a plain JSON object
is accepted too), runs the reaction's `step(context)` (steps.reactions convention), records the
Kubernetes Event on the Workload, builds the audit record, and writes the output files into
`outputs_dir` or $GPUAAS_OUTPUTS_DIR (default /tmp/gpuaas/outputs):

    outcome               applied | no-op | skipped-by-policy | rejected-input | failed
    plan                  JSON {"actions": [...], "reasons": [...]}
    record                the audit CloudEvent (JSON)
    gpus-released         data.metrics.gpusReleased, else 0
    gpu-hours-reclaimed   data.metrics.gpuHoursReclaimed, else 0
    tenant                the ClusterQueue the step resolved, else "unknown" (labels Argo metrics)
    final                 "false" when Argo will run another attempt of this step (exit 75 and
                          attempts left: GPUAAS_ATTEMPT < GPUAAS_RETRY_LIMIT), else "true"; the
                          outcome counter counts only final attempts: once per reaction
    <name>                any extra output the reaction returns (idle-alerts: alerts)

Exit codes: 0 for every recorded outcome but `failed`; 75 (EX_TEMPFAIL) for a transient failure
(templates retry only on 75); 1 for a permanent one. Outputs are written in every case.

WHY so careful about imports: a step is a fresh process; everything heavy (the Kubernetes client,
yaml, cloudevents) is imported only when the reaction needs it. `main` never calls sys.exit and
keeps no process-global state, so the local engine can call it in-process.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
import uuid
from collections.abc import Mapping
from pathlib import Path

from steps.plan import Outcome, ReactionRequest, RejectedInput, StepReport

EX_TEMPFAIL = 75
DEFAULT_OUTPUTS_DIR = "/tmp/gpuaas/outputs"
USAGE = "usage: python -m steps <reaction> PARAMS_FILE"


def read_params(path: str) -> dict[str, str]:
    """The parameters file: Argo's `{{inputs.parameters}}` JSON list, or a JSON object."""
    from steps.json_text import load

    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise RejectedInput("PARAMS_FILE", "a readable file holding the step parameters", f"{path} ({error.strerror})",
                            "Argo writes it from the script template's source: '{{inputs.parameters}}'") from None
    hint = "set the template's source to '{{inputs.parameters}}'"
    data = load("PARAMS_FILE", raw, hint) if raw.strip() else []
    if isinstance(data, dict):
        return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in data.items()}
    if not isinstance(data, list):
        raise RejectedInput("PARAMS_FILE", "a JSON list of {name, value}", type(data).__name__)
    params: dict[str, str] = {}
    for index, item in enumerate(data):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise RejectedInput(f"PARAMS_FILE[{index}]", 'an object {"name": ..., "value": ...}', item)
        value = item.get("value", "")
        params[item["name"]] = value if isinstance(value, str) else json.dumps(value)
    return params


def main(argv: list[str], *, outputs_dir: str | None = None, environ: Mapping[str, str] | None = None,
         context_overrides: Mapping[str, object] | None = None) -> int:
    """Run one reaction; returns the exit code. Never raises for a reaction's failure."""
    started = time.perf_counter()
    env = dict(os.environ if environ is None else environ)
    out_dir = Path(outputs_dir or env.get("GPUAAS_OUTPUTS_DIR") or DEFAULT_OUTPUTS_DIR)
    reaction = argv[0] if argv else ""
    params: dict[str, str] = {}
    context = None
    try:
        if len(argv) != 2:
            raise RejectedInput("argv", "<reaction> PARAMS_FILE", " ".join(argv) or "nothing", USAGE)
        params = read_params(argv[1])
        from steps.reactions import StepContext, load

        module = load(reaction)
        context = StepContext(reaction, params, env, **dict(context_overrides or {}))
        report = module.step(context)
    except RejectedInput as error:
        report = _report(reaction, params, Outcome.REJECTED_INPUT, str(error))
    except Exception as error:  # noqa: BLE001 - every failure is recorded, then mapped to an exit code
        report = _failure(reaction, params, error)
    report.timings.setdefault("totalSeconds", time.perf_counter() - started)
    _record_kubernetes_event(report, context, uuid.uuid4().hex)
    return _write_outputs(report, out_dir, env)


def _report(reaction: str, params: Mapping[str, str], outcome: Outcome, error: str) -> StepReport:
    try:
        request = ReactionRequest.from_params(reaction, params)
    except RejectedInput:  # keep the names for the record's subject, unvalidated
        request = ReactionRequest(reaction, str(params.get("namespace") or ""), str(params.get("workload") or ""),
                                  str(params.get("event") or ""), False, str(params.get("tenant") or ""))
    return StepReport(reaction=reaction or "unknown", outcome=outcome, request=request, errors=[error])


def _failure(reaction: str, params: Mapping[str, str], error: Exception) -> StepReport:
    from steps.gateways.errors import KubernetesError, TransientError

    transient = isinstance(error, TransientError) or bool(getattr(error, "transient", False))
    if isinstance(error, KubernetesError):
        message = str(error)
    else:
        message = f"{type(error).__name__}: {error}"
        traceback.print_exc(file=sys.stderr)
    report = _report(reaction, params, Outcome.FAILED, ("transient: " if transient else "") + message)
    report.transient = transient
    return report


def _record_kubernetes_event(report: StepReport, context: object, invocation: str) -> None:
    """Record the Event on the Workload, once per run (`occurrence`: the Argo run, or this
    invocation when the step runs without one, by hand).

    Best effort, but for GPUaaSWorkersReleased: the per-tenant release limit counts those Events, so
    a release whose Event could not be written for a transient reason exits 75; Argo's retry of the
    same run finds the release it made and writes the Event then (steps.reactions.release_workers).
    """
    from steps.gateways.errors import TransientError
    from steps.record import COUNTED_EVENT_REASONS, kubernetes_event

    workload = report.workload_object
    if workload is None or context is None:
        return
    event = kubernetes_event(report)
    if event is None:
        return
    reason, message, kind = event
    occurrence = f"{report.reaction}/{getattr(context, 'run_id', '') or invocation}"
    try:
        context.kube.record_event(workload, reason, message, type=kind, action=report.reaction,  # type: ignore[attr-defined]
                                  occurrence=occurrence)
    except Exception as error:  # noqa: BLE001 - recorded; fatal only for the Events the release limit counts
        if reason in COUNTED_EVENT_REASONS and isinstance(error, TransientError):
            report.errors.append(f"Kubernetes Event {reason} not recorded: {error}; the release limit counts "
                                 "these Events, so the step exits 75 and Argo's retry records it")
            report.exit_code = EX_TEMPFAIL
            return
        report.errors.append(f"Kubernetes Event {reason} not recorded: {error}")


def _write_outputs(report: StepReport, out_dir: Path, env: Mapping[str, str]) -> int:
    from steps.record import build_record, record_json

    try:
        record = build_record(report)
    except Exception as error:  # noqa: BLE001 - a record must exist even if a reaction returned odd data
        report.errors.append(f"record: {type(error).__name__}: {error}")
        report.plan, report.results, report.observed = None, [], {"unrecordable": str(error)}
        record = build_record(report)
    metrics = record["data"].get("metrics") or {}
    code = report.code
    outputs = {
        "outcome": str(report.outcome),
        "plan": json.dumps(record["data"]["plan"], separators=(",", ":")),
        "record": record_json(record),
        "gpus-released": _figure(metrics.get("gpusReleased")),
        "gpu-hours-reclaimed": _figure(metrics.get("gpuHoursReclaimed")),
        "tenant": report.tenant or "unknown",
        "final": "true" if final_attempt(code, env) else "false",
        **report.outputs,
    }
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in outputs.items():
            (out_dir / name).write_text(text, encoding="utf-8")
    except OSError as error:
        print(f"cannot write outputs to {out_dir}: {error}", file=sys.stderr)
        return 1
    print(outputs["record"])
    if report.errors:
        print(f"{report.reaction}: {report.outcome}: {'; '.join(report.errors)}", file=sys.stderr)
    return code


def final_attempt(code: int, environ: Mapping[str, str]) -> bool:
    """False only when Argo's retryStrategy will run this step again: it exits 75 and attempts are
    left (GPUAAS_ATTEMPT is Argo's {{retries}}, 0 for the first; GPUAAS_RETRY_LIMIT its limit).
    Unknown attempt numbers (a step run by hand) count as final."""
    if code != EX_TEMPFAIL:
        return True
    try:
        attempt, limit = int(environ.get("GPUAAS_ATTEMPT", "")), int(environ.get("GPUAAS_RETRY_LIMIT", ""))
    except ValueError:
        return True
    return attempt >= limit


def _figure(value: object) -> str:
    if value is None:
        return "0"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
