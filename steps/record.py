"""The audit record of one reaction run: a CloudEvent (ARCHITECTURE §3) and a Kubernetes Event.

    build_record(report, now=None) -> dict            # the CloudEvent, JSON structured mode
    record_json(record) -> str                        # its text (the `record` output parameter)
    kubernetes_event(report) -> (reason, message, type) | None
    EVENT_REASONS                                     # the reasons ARCHITECTURE §3 allows

WHY a CloudEvent: the run archive, `gpuaas audit` and any external sink read one self-describing
format; the `cloudevents` package (core API, 2.x) validates the context attributes and writes the
structured JSON. The record is produced whatever happened (bad input, API failure): the entry point
builds it from whatever the reaction got to.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from steps.plan import JSON, Outcome, StepReport

SOURCE = "gpuaas/steps"
TYPE_PREFIX = "io.gpuaas.reaction."

PREPARED = "GPUaaSIdleHandlingPrepared"
RELEASED = "GPUaaSWorkersReleased"
RESUMED = "GPUaaSWorkersResumed"
RESOURCES_RELEASED = "GPUaaSResourcesReleased"
QUOTA_PROVISIONED = "GPUaaSQuotaProvisioned"
FAILED = "GPUaaSReactionFailed"
EVENT_REASONS = (PREPARED, RELEASED, RESUMED, RESOURCES_RELEASED, QUOTA_PROVISIONED, FAILED)
COUNTED_EVENT_REASONS = (RELEASED,)
"""Events a decision counts (on-idle's per-tenant hourly release limit): they must be written."""


def _to_dict(value: Any) -> Any:
    if value is None or isinstance(value, (dict, list, str, int, float, bool)):
        return value
    to_dict = getattr(value, "to_dict", None)
    return to_dict() if callable(to_dict) else str(value)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def build_record(report: StepReport, now: datetime | None = None) -> JSON:
    """The CloudEvent as a dict (structured mode), from whatever the reaction got to."""
    now = now or datetime.now(UTC)
    request = report.request
    workload = report.workload
    if workload is None and request is not None and request.namespace and request.workload:
        workload = {"namespace": request.namespace, "name": request.workload, "uid": None}
    subject = f"{workload['namespace']}/{workload['name']}" if workload else (
        report.tenant or report.reaction)
    plan = _to_dict(report.plan) or {"actions": [], "reasons": []}
    data: JSON = {
        "reaction": report.reaction,
        "dryRun": bool(request.dry_run) if request is not None else False,
        "event": report.event_summary,
        "workload": workload,
        "tenant": report.tenant,
        "cohort": report.cohort,
        "observed": report.observed or {},
        "plan": plan,
        "actions": [_to_dict(r) for r in report.results],
        "outcome": str(report.outcome),
        "errors": list(report.errors),
        "metrics": dict(report.metrics),
        "timings": dict(report.timings),
    }
    if report.delivery is not None:
        data["delivery"] = report.delivery
    attributes = {"specversion": "1.0", "id": uuid.uuid4().hex, "source": SOURCE,
                  "type": TYPE_PREFIX + report.reaction, "subject": subject, "time": now,
                  "datacontenttype": "application/json"}
    return _as_cloudevent(attributes, data)


def _as_cloudevent(attributes: JSON, data: JSON) -> JSON:
    """Validate the context attributes with the cloudevents package and write structured JSON."""
    from cloudevents.core.formats.json import JSONFormat
    from cloudevents.core.v1.event import CloudEvent

    event = CloudEvent(attributes=attributes, data=data)
    return json.loads(JSONFormat().write(event))


def record_json(record: JSON) -> str:
    return json.dumps(record, separators=(",", ":"), sort_keys=False, default=str)


def kubernetes_event(report: StepReport) -> tuple[str, str, str] | None:
    """(reason, message, type) for the Workload: the reaction's own, or GPUaaSReactionFailed.

    No Event for no-op / skipped / rejected runs: `kubectl describe` shows what changed, and a
    flood of "nothing to do" Events would bury it (the audit record still has them).
    """
    outcome = str(report.outcome)
    if outcome == Outcome.FAILED.value:
        first = report.errors[0] if report.errors else "unknown error"
        return FAILED, f"{report.reaction} failed: {first}"[:1000], "Warning"
    if outcome == Outcome.APPLIED.value and report.event is not None:
        reason, message, kind = report.event
        results = [_to_dict(r) or {} for r in report.results]
        if not any(isinstance(r, dict) and r.get("result") == "applied" and not r.get("bookkeeping")
                   for r in results):
            return None  # dry-run: nothing changed, nothing to describe
        return reason, message[:1000], kind
    return None
