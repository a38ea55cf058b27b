"""Workload condition types, reasons and messages as Kueue writes them, and the helpers to set them.

Names follow apis/kueue/v1beta2/workload_types.go; messages follow what Kueue prints (its
troubleshooting guide, site/content/en/docs/tasks/troubleshooting/troubleshooting_jobs.md), so a
reaction that reads the emulation reads the same words it would read on a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
FINISHED = "Finished"
EVICTED = "Evicted"
REQUEUED = "Requeued"
PODS_READY = "PodsReady"

# QuotaReserved reasons. "Pending" is what Kueue v0.19 writes by default for "does not fit"; the
# finer reasons (WaitingForQuota, NoMatchingFlavor, ExceedsMaxQuota) come with the alpha feature gate
# UnadmittedWorkloadsObservability (off by default in v0.19), so the emulation writes Pending.
REASON_QUOTA_RESERVED = "QuotaReserved"
REASON_PENDING = "Pending"
REASON_INADMISSIBLE = "Inadmissible"
REASON_ON_HOLD = "OnHold"
# Admitted reasons
REASON_ADMITTED = "Admitted"
REASON_NO_RESERVATION = "NoReservation"
# Evicted / Requeued reasons
REASON_DEACTIVATED = "Deactivated"
REASON_REACTIVATED = "Reactivated"
REASON_CQ_STOPPED = "ClusterQueueStopped"
# PodsReady reasons (pkg/controller/jobframework/reconciler.go generatePodsReadyCondition)
REASON_WAIT_FOR_START = "WaitForStart"
REASON_STARTED = "Started"
REASON_WAIT_FOR_RECOVERY = "WaitForRecovery"

MSG_ADMITTED = "The workload is admitted"
MSG_NO_RESERVATION = "The workload has no reservation"
MSG_DEACTIVATED = "The workload is deactivated"
MSG_CQ_STOPPED = "The ClusterQueue is stopped"
MSG_PODS_NOT_READY = "Not all pods are ready or succeeded"
MSG_PODS_READY = "All pods reached readiness and the workload is running"
MSG_PODS_RECOVERY = "At least one pod has failed, waiting for recovery"


def quota_reserved_message(cluster_queue: str) -> str:
    return f"Quota reserved in ClusterQueue {cluster_queue}"


def timestamp(now: datetime) -> str:
    """RFC 3339 in UTC with second precision, as metav1.Time serialises."""
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def find(conditions: list[Mapping] | None, kind: str) -> Mapping | None:
    for condition in conditions or []:
        if condition.get("type") == kind:
            return condition
    return None


def is_true(conditions: list[Mapping] | None, kind: str) -> bool:
    condition = find(conditions, kind)
    return condition is not None and condition.get("status") == "True"


def set_condition(conditions: list[dict], kind: str, status: bool, reason: str, message: str,
                  now: datetime, generation: int | None = None) -> bool:
    """Set one condition in place like apimeta.SetStatusCondition; True when anything changed.

    lastTransitionTime moves only when the status flips, as in Kubernetes, so a reconcile that
    rewrites the same reason does not look like a new transition to a watcher.
    """
    wanted = "True" if status else "False"
    for condition in conditions:
        if condition.get("type") != kind:
            continue
        changed = False
        if condition.get("status") != wanted:
            condition["status"] = wanted
            condition["lastTransitionTime"] = timestamp(now)
            changed = True
        for key, value in (("reason", reason), ("message", message)):
            if condition.get(key) != value:
                condition[key] = value
                changed = True
        if generation is not None and condition.get("observedGeneration") != generation:
            condition["observedGeneration"] = generation
            changed = True
        return changed
    new = {"type": kind, "status": wanted, "reason": reason, "message": message,
           "lastTransitionTime": timestamp(now)}
    if generation is not None:
        new["observedGeneration"] = generation
    conditions.append(new)
    return True
