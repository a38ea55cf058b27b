"""Warn, then release: the grace period in which the owner of an idle workload is told before on-idle releases it.

With `idle.warnFor` above 0 (steps.policy), on-idle's first decision to release an idle episode does not
release: it WARNS. The owner sees a Kubernetes Event on their object (reason GPUIdleWarning, with the
release time), the annotation gpuaas.io/idle-warning on the Workload, and, when the tenant's policy names
`warnWebhook`, a JSON POST. A later delivery of the same episode releases only when the grace has passed
AND the production judgement (on_idle.judge) still says release: the step re-reads the GPU activity and
the kind's own evidence then, over all the time since the warning (`judged_seconds`), so any activity after
the warning cancels. So does the opt-out the product already has, gpuaas.io/idle-policy: exempt on the
Workload or any owner up its chain. A warning that no longer stands lapses (`lapse_reason`, LAPSE_GATES).

    annotation gpuaas.io/idle-warning on the Workload (JSON):
      {"episode": "idle@...", "warnedAt": RFC 3339, "releaseAfter": RFC 3339, "run": RUN,
       "state": "warned|cancelled|released|lapsed", "uid": the Workload's uid, "notifiedAt": RFC 3339 (the
       owner was told), "at": RFC 3339 of the last change, "by": RUN of it, "reason": why it changed}

Level-triggered: nothing waits for one event at the release time. Alertmanager re-sends a still-firing
alert's group every repeat_interval + group_interval (65 min as rendered), and every delivery re-judges
the live state; the first delivery at or after `releaseAfter` releases. The release therefore happens
between `warnFor` and `warnFor` + 65 min after the warning; a `warnFor` of at most 60 min is met by the
very next re-send (docs/reactions.md "Warn, then release").

`grace` is pure and table-tested; `gpuaas simulate` replays it with the same code.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from steps.model.workload import parse_time

JSON = dict[str, Any]
WARNING_ANNOTATION = "gpuaas.io/idle-warning"
WARNING_REASON = "GPUIdleWarning"
CANCELLED_REASON = "GPUIdleWarningCancelled"
WARNED, CANCELLED, RELEASED, LAPSED = "warned", "cancelled", "released", "lapsed"

CANCEL_GATES: Mapping[str, str] = {
    "not-idle": "activity",
    "kind-busy": "activity",
    "exempt": "opt-out",
    "release-off": "policy",
    "finished": "finished",
}
"""The judgement's rules (on_idle.JUDGE_GATES) that cancel a pending warning, and the kind of cancel. LAPSE_GATES
make it lapse; the others leave it pending: a Prometheus outage (retry), the hourly budget or no demand (still
idle; the release only waits), no pods (restarting), until it lapses by age."""

LAPSE_GATES: Mapping[str, str] = {
    "released": "released",
    "not-admitted": "not admitted",
}
"""The judgement's rules after which nothing can be released on a pending warning (the workload holds no GPUs, or
was released by someone else, or by this warning's run that stopped before it recorded so): it lapses. Were it
left pending, the sweep would deliver it again and again, and a later re-admission would find it."""

LAPSE_AFTER_DUE_SECONDS = 7200.0
"""A pending warning this long past its releaseAfter lapses: the sweep's delivery at releaseAfter and at least one
of Alertmanager's re-sends (every 65 min as rendered) had their chance and the release still waited (the hourly
budget, no demand, a hole in the samples). The owner is warned afresh before any release; a delivery days later
(a UI resubmit, the sweep once the earlier run's TTL deleted it) never releases on it."""


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class IdleWarning:
    """One warning as the Workload's annotation holds it."""

    episode: str
    warned_at: str
    release_after: str
    run: str
    state: str = WARNED
    at: str = ""
    by: str = ""
    reason: str = ""
    uid: str = ""
    """The Workload's uid when the warning was given ("" before this field existed): a warning found on an object of
    another uid (restored from a backup, copied) was not given to it, and lapses."""
    notified_at: str = ""
    """When the owner was told (the Event written; set just before the webhook is POSTed, so the webhook is told at
    most once). A pending warning without it belongs to a run that stopped before it told the owner: the next
    delivery tells them. With it, no delivery tells them again, even when the Event has expired (the apiserver's
    --event-ttl: 1 h upstream, 3 h on OpenShift)."""
    raw: str = ""
    """The annotation's text as read ("" when planned here)."""

    def to_dict(self) -> JSON:
        out = {"episode": self.episode, "warnedAt": self.warned_at, "releaseAfter": self.release_after,
               "run": self.run, "state": self.state}
        for key, value in (("uid", self.uid), ("notifiedAt", self.notified_at), ("at", self.at), ("by", self.by),
                           ("reason", self.reason)):
            if value:
                out[key] = value
        return out

    def text(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @property
    def pending(self) -> bool:
        return self.state == WARNED

    def due(self, now: datetime) -> bool:
        """The grace has passed (an unreadable releaseAfter is due: the warning was given)."""
        after = parse_time(self.release_after)
        return after is None or now >= after

    def describe(self) -> str:
        return f"warned at {self.warned_at} by run {self.run or 'unknown'} (release after {self.release_after})"


def read_warning(obj: Mapping[str, Any] | None) -> IdleWarning | None:
    """The warning on a Workload, or None (absent or unreadable: unreadable reads as no warning, so the worst
    case is a second warning, never a release without one)."""
    from steps.delivery import annotation_json

    raw = annotation_json(obj, WARNING_ANNOTATION)
    if raw is None or not isinstance(raw.get("warnedAt"), str):
        return None
    text = str(obj["metadata"]["annotations"][WARNING_ANNOTATION])  # type: ignore[index]
    state = raw.get("state") if raw.get("state") in (WARNED, CANCELLED, RELEASED, LAPSED) else WARNED
    return IdleWarning(str(raw.get("episode") or ""), raw["warnedAt"], str(raw.get("releaseAfter") or ""),
                       str(raw.get("run") or ""), state, str(raw.get("at") or ""), str(raw.get("by") or ""),
                       str(raw.get("reason") or ""), uid=str(raw.get("uid") or ""),
                       notified_at=str(raw.get("notifiedAt") or ""), raw=str(text))


@dataclass(frozen=True)
class Grace:
    """What the grace period makes of a decision. `step`: release | warn | wait | cancel | none (the judgement
    stands as it is, no warning involved)."""

    step: str
    reasons: tuple[str, ...] = ()
    warning: IdleWarning | None = None
    """warn: the new warning; cancel: the warning as cancelled; lapse: the warning as lapsed; release: the linked
    warning as released (None when released without one, warnFor 0); wait: the pending warning."""
    superseded: IdleWarning | None = None
    """A pending warning this decision replaces: of an earlier episode (the alert resolved in between), or lapsed
    (`lapse_reason`; state lapsed, to write when nothing else replaces the annotation)."""


def _episode_time(episode: str) -> datetime | None:
    return parse_time(episode.split("@", 1)[1]) if "@" in episode else None


def _newer(episode: str, than: str) -> bool | None:
    """Whether `episode` started after `than` (None: not comparable)."""
    a, b = _episode_time(episode), _episode_time(than)
    return None if a is None or b is None else a > b


def same_episode(warning: IdleWarning, episode: str) -> bool:
    """Whether a delivery of `episode` acts on `warning`: the same idle episode, or either has none (a hand run or
    the sweep's delivery has no alert, so no episode; a warning given by hand has none either)."""
    return not warning.episode or not episode or warning.episode == episode


def lapse_reason(warning: IdleWarning, now: datetime, *, uid: str = "", admitted_at: datetime | None = None
                 ) -> str | None:
    """Why a pending warning no longer stands whatever the judgement says, else None (pure):
    given to another object (uid); older than the Workload's admission (evicted and admitted again, released and
    resumed: the warning was about the run before); or more than LAPSE_AFTER_DUE_SECONDS past its releaseAfter."""
    if warning.uid and uid and warning.uid != uid:
        return f"it was given to another object (uid {warning.uid})"
    warned = parse_time(warning.warned_at)
    if admitted_at is not None and warned is not None and admitted_at > warned:
        return f"the workload was admitted again at {rfc3339(admitted_at)}, after the warning"
    after = parse_time(warning.release_after)
    if after is not None and (now - after).total_seconds() > LAPSE_AFTER_DUE_SECONDS:
        return (f"due since {warning.release_after}, more than {LAPSE_AFTER_DUE_SECONDS / 3600:g} h without a release "
                "(it waited for the budget, demand or data)")
    return None


def judged_seconds(window_seconds: float, warning: IdleWarning | None, episode: str, now: datetime, *,
                   uid: str = "", admitted_at: datetime | None = None) -> float:
    """How far back the idle judgement reads GPU activity and the kind's evidence: the policy's window, or, while
    a warning that this delivery acts on is pending, everything since the warning was given, when that is longer.

    Any activity after the warning cancels it, however long ago: a busy minute in a 2 h grace is older than a 30 min
    window at the grace's end, and the re-fired alert that would supersede the warning comes only `window + for`
    after the activity, so a delivery in between (the sweep's, at releaseAfter) would otherwise release on the old
    warning. Read from Prometheus (and the kind's API) at the delivery, never taken from the event. A warning that
    lapsed (`lapse_reason`) widens nothing."""
    if warning is None or not warning.pending or not same_episode(warning, episode) or \
            lapse_reason(warning, now, uid=uid, admitted_at=admitted_at):
        return window_seconds
    warned = parse_time(warning.warned_at)
    return window_seconds if warned is None else max(window_seconds, (now - warned).total_seconds())


def grace(verdict: str, gate: str, reasons: tuple[str, ...], warn_seconds: float, warning: IdleWarning | None,
          episode: str, now: datetime, run: str, *, activity: bool = True, uid: str = "",
          admitted_at: datetime | None = None) -> Grace:
    """The grace period applied to one judgement (`verdict`, `gate`, `reasons` of on_idle.IdleDecision), pure.

    - release with warnFor 0: release now (linking a pending warning, if one is there);
    - release, no pending warning: warn now, release after `now + warnFor`;
    - release, a pending warning of the same episode (or either is a hand run's, episode ""): release when the
      grace has passed, else wait (a re-sent alert within the grace is a repeat: no second warning); the judgement
      then covered the whole time since the warning (`judged_seconds`), so the release means idle since the warning;
    - release, a pending warning of an EARLIER episode: a new idle episode started (the alert fired again), so
      that warning lapsed and this episode is warned afresh; of a later episode: this delivery is stale, wait;
    - a pending warning that lapsed (`lapse_reason` with the Workload's `uid` and `admitted_at`, or a rule of
      LAPSE_GATES decided): a release warns afresh (the owner is told before any release; with warnFor 0 it
      releases), anything else records it lapsed;
    - no release, a pending warning, and a rule of CANCEL_GATES decided: cancel it, saying why; for `not-idle`
      only when the GPUs were used (`activity`), not when samples are missing (a scrape gap is no activity:
      the warning stays pending and the release waits for data that proves idleness);
    - else: none."""
    pending = warning if warning is not None and warning.pending else None
    lapsed = None
    if pending is not None:
        lapse = lapse_reason(pending, now, uid=uid, admitted_at=admitted_at)
        if lapse is None and verdict != "release" and gate in LAPSE_GATES:
            lapse = f"{LAPSE_GATES[gate]}: {reasons[0] if reasons else gate}"
        if lapse is not None:
            lapsed = replace(pending, state=LAPSED, at=rfc3339(now), by=run, reason=lapse, raw="")
            pending = None
    lapse_why = (f"idle warning lapsed ({lapsed.reason}); it was {lapsed.describe()}",) if lapsed else ()
    if verdict != "release":
        if lapsed is not None:
            return Grace("lapse", lapse_why, lapsed)
        if pending is not None and gate in CANCEL_GATES and (activity or gate != "not-idle"):
            why = f"{CANCEL_GATES[gate]}: {reasons[0] if reasons else gate}"
            return Grace("cancel", (f"idle warning cancelled ({why}); it was {pending.describe()}",),
                         replace(pending, state=CANCELLED, at=rfc3339(now), by=run, reason=why, raw=""))
        return Grace("none")
    if warn_seconds <= 0:
        if pending is None:
            return Grace("release", lapse_why, None, lapsed)
        return Grace("release", (f"idle warning: {pending.describe()}",), _released(pending, now, run))
    superseded = lapsed
    if pending is not None:
        if same_episode(pending, episode):
            if pending.due(now):
                return Grace("release", (f"idle warning: {pending.describe()}; idle since the warning, after the grace",),
                             _released(pending, now, run))
            return Grace("wait", ((f"idle, within the grace period: {pending.describe()}; a re-sent alert changes "
                                   "nothing until then (activity or gpuaas.io/idle-policy: exempt cancels)"),), pending)
        if _newer(episode, pending.episode) is False:
            return Grace("wait", ((f"stale delivery: episode {episode} is older than the pending warning's episode "
                                   f"{pending.episode} ({pending.describe()})"),), pending)
        superseded = pending
    release_after = now + timedelta(seconds=warn_seconds)
    new = IdleWarning(episode, rfc3339(now), rfc3339(release_after), run, uid=uid)
    why = [(f"idle: warning the owner; release after {new.release_after} (idle.warnFor {warn_seconds:g}s) unless "
            "the workload is active again or annotated gpuaas.io/idle-policy: exempt")]
    if lapsed is not None:
        why.extend(lapse_why)
    elif superseded is not None:
        why.append(f"the warning of episode {superseded.episode} lapsed (a new idle episode started: the alert fired "
                   f"again): it was {superseded.describe()}")
    return Grace("warn", tuple(why), new, superseded)


def _released(warning: IdleWarning, now: datetime, run: str) -> IdleWarning:
    return replace(warning, state=RELEASED, at=rfc3339(now), by=run, reason="idle since the warning, after the grace", raw="")


def warning_message(warning: IdleWarning, target: str, gpus: int) -> str:
    """The Event's message: what, when, how to keep it."""
    return (f"{target} holds {gpus} idle GPU(s): gpuaas will release them at {warning.release_after} unless they "
            f"are used again before then. To keep them, use them, or annotate the workload "
            f"gpuaas.io/idle-policy=exempt.")


def event_key(warning: IdleWarning) -> str:
    """What names a warning's Events: its episode and when it was given (a warning given again in the same
    episode, after a cancel, is another warning with Events of its own)."""
    return f"{warning.episode}|{warning.warned_at}"


def event_name(involved_name: str, uid: str, episode: str, reason: str) -> str:
    """A deterministic Event name per (object, episode, reason): a retried create meets AlreadyExists."""
    digest = hashlib.sha256(f"{uid}\x00{episode}\x00{reason}".encode()).hexdigest()[:16]
    return f"{involved_name[:200]}.{digest}"


def event_body(involved: Mapping[str, Any], namespace: str, reason: str, message: str, type_: str, now: datetime,
               episode: str, annotations: Mapping[str, str]) -> JSON:
    """A core/v1 Event on `involved` (the owner's object, else the Workload)."""
    meta = involved.get("metadata") or {}
    ref = {"apiVersion": involved.get("apiVersion", ""), "kind": involved.get("kind", ""),
           "name": meta.get("name", ""), "namespace": meta.get("namespace") or namespace}
    if meta.get("uid"):
        ref["uid"] = meta["uid"]
    stamp = rfc3339(now)
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": event_name(str(ref["name"]), str(meta.get("uid") or ""), episode, reason),
                         "namespace": ref["namespace"], "annotations": dict(annotations)},
            "involvedObject": ref, "reason": reason, "message": message[:1000], "type": type_,
            "source": {"component": "gpuaas"}, "reportingComponent": "gpuaas", "reportingInstance": "gpuaas",
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1}


def notice(warning: IdleWarning, target: str, owner: Mapping[str, Any] | None, tenant: str | None, gpus: int,
           message: str) -> JSON:
    """The webhook's JSON body (small, flat, gpuaas' own: a chat or mail bridge reads it; it is not Alertmanager's
    webhook payload, so an Alertmanager webhook receiver does not take it)."""
    meta = (owner or {}).get("metadata") or {}
    return {"kind": "GPUIdleWarning" if warning.state == WARNED else "GPUIdleWarningCancelled",
            "workload": target, "owner": {"kind": (owner or {}).get("kind"), "name": meta.get("name")},
            "tenant": tenant, "gpus": gpus, "message": message, **warning.to_dict()}
