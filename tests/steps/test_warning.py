"""Warn, then release (steps.warning): the grace period's decisions, table-tested with hand-computed times, and the
policy key `warnFor` / `warnWebhook` accepted alike by the step's parser and the chart's schema."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import jsonschema
import pytest

from steps.policy import PolicyError, parse_policy, policy_json_schema
from steps.warning import (
    CANCELLED,
    LAPSED,
    RELEASED,
    WARNED,
    IdleWarning,
    grace,
    judged_seconds,
    read_warning,
)

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
EPISODE = "idle@2026-12-01T11:00:00Z"
EARLIER = "idle@2026-12-01T08:00:00Z"
LATER = "idle@2026-12-01T11:30:00Z"
IDLE = ("all 2 GPU(s) of 1 pod(s) stayed at or below 5%",)


def pending(episode: str = EPISODE, warned_minutes_ago: float = 30, grace_minutes: float = 60) -> IdleWarning:
    warned = NOW - timedelta(minutes=warned_minutes_ago)
    after = warned + timedelta(minutes=grace_minutes)
    return IdleWarning(episode, warned.strftime("%Y-%m-%dT%H:%M:%SZ"), after.strftime("%Y-%m-%dT%H:%M:%SZ"), "wf-warn")


def test_first_release_verdict_warns_with_the_release_time_an_hour_on() -> None:
    period = grace("release", "release", IDLE, 3600, None, EPISODE, NOW, "wf-1")
    assert period.step == "warn"
    assert period.warning == IdleWarning(EPISODE, "2026-12-01T12:00:00Z", "2026-12-01T13:00:00Z", "wf-1")
    assert "release after 2026-12-01T13:00:00Z" in period.reasons[0]


def test_warn_for_zero_releases_at_once_as_before() -> None:
    period = grace("release", "release", IDLE, 0, None, EPISODE, NOW, "wf-1")
    assert period.step == "release" and period.warning is None and period.reasons == ()


def test_a_re_sent_alert_within_the_grace_is_a_repeat_and_warns_nobody_twice() -> None:
    # warned 30 min ago with a 60 min grace: releaseAfter = 12:30, now = 12:00
    period = grace("release", "release", IDLE, 3600, pending(), EPISODE, NOW, "wf-2")
    assert period.step == "wait" and period.warning == pending()
    assert "within the grace period: warned at 2026-12-01T11:30:00Z by run wf-warn" in period.reasons[0]


def test_still_idle_after_the_grace_releases_and_links_the_warning() -> None:
    # warned 61 min ago, 60 min grace: releaseAfter 11:59 <= 12:00
    period = grace("release", "release", IDLE, 3600, pending(warned_minutes_ago=61), EPISODE, NOW, "wf-3")
    assert period.step == "release"
    assert period.warning.state == RELEASED and period.warning.by == "wf-3" and period.warning.at == "2026-12-01T12:00:00Z"
    assert period.warning.run == "wf-warn" and period.warning.warned_at == "2026-12-01T10:59:00Z"
    assert "warned at 2026-12-01T10:59:00Z by run wf-warn" in period.reasons[0]


@pytest.mark.parametrize(("warning", "episode", "seconds"), [
    (None, EPISODE, 1800),  # no warning: the policy's window
    (pending(warned_minutes_ago=121, grace_minutes=120), EPISODE, 121 * 60),  # since the warning, 11:59 -> 12:00
    (pending(warned_minutes_ago=121, grace_minutes=120), "", 121 * 60),  # the sweep's delivery (no episode): the same
    (pending(warned_minutes_ago=10), EPISODE, 1800),  # the window is longer than the time since the warning
    (pending(warned_minutes_ago=121), LATER, 1800),  # a newer episode supersedes the warning: its own window
    (replace(pending(warned_minutes_ago=121), state=CANCELLED), EPISODE, 1800),  # no pending warning
])
def test_the_judgement_reads_activity_since_a_pending_warning(warning: IdleWarning | None, episode: str,
                                                             seconds: float) -> None:
    assert judged_seconds(1800, warning, episode, NOW) == seconds


def test_exactly_at_release_after_is_due() -> None:
    period = grace("release", "release", IDLE, 3600, pending(warned_minutes_ago=60), EPISODE, NOW, "wf-3")
    assert period.step == "release"


@pytest.mark.parametrize(("gate", "why"), [("not-idle", "activity"), ("kind-busy", "activity"),
                                           ("exempt", "opt-out"), ("release-off", "policy"),
                                           ("finished", "finished")])
def test_activity_or_the_opt_out_cancels_a_pending_warning(gate: str, why: str) -> None:
    verdict = "skipped-by-policy" if gate in ("exempt", "release-off") else "no-op"
    period = grace(verdict, gate, ("GPU 0 reached 70%",), 3600, pending(), EPISODE, NOW, "wf-4")
    assert period.step == "cancel"
    assert period.warning.state == CANCELLED and period.warning.reason == f"{why}: GPU 0 reached 70%"
    assert period.warning.by == "wf-4" and period.warning.episode == EPISODE


@pytest.mark.parametrize("gate", ["hourly-budget", "no-demand", "no-pods", "too-young", "metrics-error"])
def test_other_rules_leave_the_warning_pending(gate: str) -> None:
    # the release only waits (a budget, demand, pods, data): the warning stays pending until it lapses by age
    assert grace("skipped-by-policy", gate, ("x",), 3600, pending(), EPISODE, NOW, "wf-4").step == "none"


@pytest.mark.parametrize(("gate", "why"), [
    ("released", "released: workload x is already released"),  # by someone else, or this warning's run stopped
    ("not-admitted", "not admitted: workload x is not admitted"),  # evicted, preempted: it holds no GPUs
])
def test_a_warning_lapses_when_the_workload_holds_nothing_to_release_on_it(gate: str, why: str) -> None:
    period = grace("no-op", gate, (f"workload x is {why.split(': workload x is ')[1]}",), 3600, pending(), EPISODE, NOW,
                   "wf-9")
    assert period.step == "lapse" and period.warning.state == LAPSED and period.warning.reason == why
    assert period.warning.by == "wf-9" and period.warning.at == "2026-12-01T12:00:00Z"
    assert "idle warning lapsed (" in period.reasons[0] and "by run wf-warn" in period.reasons[0]


def test_a_warning_older_than_its_admission_lapses_and_the_owner_is_warned_afresh() -> None:
    # warned at 10:59, due 11:59; the Workload was admitted again at 11:30 (resumed, re-queued after an eviction):
    # the warning was about the run before; the sweep's delivery (no episode) warns afresh instead of releasing.
    admitted = NOW - timedelta(minutes=30)
    period = grace("release", "release", IDLE, 3600, pending(warned_minutes_ago=61), "", NOW, "wf-10",
                   admitted_at=admitted)
    assert period.step == "warn" and period.superseded.state == LAPSED
    assert period.superseded.reason == "the workload was admitted again at 2026-12-01T11:30:00Z, after the warning"
    assert period.warning.release_after == "2026-12-01T13:00:00Z"
    # not released either when the judgement does not release (the minimum runtime since the new admission)
    period = grace("skipped-by-policy", "too-young", ("x",), 3600, pending(warned_minutes_ago=61), "", NOW, "wf-10",
                   admitted_at=admitted)
    assert period.step == "lapse" and period.warning.reason.startswith("the workload was admitted again")


def test_a_warning_long_past_its_release_time_lapses() -> None:
    # warned 3 days ago (a 1 h grace): a delivery without an episode (the sweep after the run's TTL, a UI resubmit)
    # must not release on it: the owner is warned afresh.
    old = pending(warned_minutes_ago=3 * 24 * 60)
    period = grace("release", "release", IDLE, 3600, old, "", NOW, "wf-11")
    assert period.step == "warn" and period.superseded.state == LAPSED
    assert period.superseded.reason.startswith(f"due since {old.release_after}, more than 2 h without a release")
    # 2 h after releaseAfter exactly it still stands (the hourly budget, Alertmanager's next re-send)
    assert grace("release", "release", IDLE, 3600, pending(warned_minutes_ago=180), "", NOW, "wf").step == "release"
    assert judged_seconds(1800, old, "", NOW) == 1800  # a lapsed warning widens nothing


def test_a_warning_given_to_another_workload_of_the_same_name_lapses() -> None:
    given = replace(pending(warned_minutes_ago=61), uid="uid-old")
    period = grace("release", "release", IDLE, 3600, given, "", NOW, "wf-12", uid="uid-new")
    assert period.step == "warn" and period.superseded.reason == "it was given to another object (uid uid-old)"
    assert period.warning.uid == "uid-new"


def test_no_warning_and_no_release_is_nothing() -> None:
    assert grace("no-op", "not-idle", ("busy",), 3600, None, EPISODE, NOW, "wf").step == "none"


def test_a_new_episode_warns_again_after_a_cancelled_warning() -> None:
    cancelled = IdleWarning(EARLIER, "2026-12-01T08:05:00Z", "2026-12-01T09:05:00Z", "wf-0", CANCELLED)
    period = grace("release", "release", IDLE, 3600, cancelled, EPISODE, NOW, "wf-5")
    assert period.step == "warn" and period.warning.episode == EPISODE and period.superseded is None


def test_a_pending_warning_of_an_earlier_episode_lapsed_the_new_episode_is_warned_afresh() -> None:
    # The earlier warning's grace has long passed, but the alert resolved and fired again since: activity.
    period = grace("release", "release", IDLE, 3600, pending(EARLIER, warned_minutes_ago=200), EPISODE, NOW, "wf-6")
    assert period.step == "warn" and period.superseded.episode == EARLIER
    assert period.warning.release_after == "2026-12-01T13:00:00Z"


def test_a_stale_delivery_of_an_older_episode_waits() -> None:
    period = grace("release", "release", IDLE, 3600, pending(LATER), EPISODE, NOW, "wf-7")
    assert period.step == "wait" and "stale delivery" in period.reasons[0]


def test_a_hand_run_without_an_alert_follows_the_pending_warning() -> None:
    assert grace("release", "release", IDLE, 3600, pending(), "", NOW, "wf-8").step == "wait"
    assert grace("release", "release", IDLE, 3600, pending(warned_minutes_ago=90), "", NOW, "wf-8").step == "release"


def test_the_annotation_round_trips_and_unreadable_text_is_no_warning() -> None:
    warning = pending()
    obj = {"metadata": {"annotations": {"gpuaas.io/idle-warning": warning.text()}}}
    assert read_warning(obj) == IdleWarning(**{**warning.__dict__, "raw": warning.text()})
    assert read_warning(obj).state == WARNED
    assert read_warning({"metadata": {"annotations": {"gpuaas.io/idle-warning": "{broken"}}}) is None
    assert read_warning({"metadata": {}}) is None


# -- the policy key, in the step's parser and the chart's schema ---------------------------------------------
@pytest.mark.parametrize(("text", "seconds"), [
    ("idle: {warnFor: 1h}", 3600.0), ("idle: {warnFor: 0}", 0.0), ("idle: {warnFor: 90}", 90.0),
    ("idle: {kinds: {notebook: {warnFor: 30m}}}", 1800.0),
    ("tenants: {t: {idle: {kinds: {notebook: {warnFor: 1h30m}}}}}", 5400.0),
])
def test_warn_for_parses_and_the_schema_accepts_it(text: str, seconds: float) -> None:
    import yaml

    policy = parse_policy(text)
    tenant = "t" if "tenants" in text else ""
    assert policy.idle_for(tenant, "notebook").warn_seconds == seconds
    assert policy.idle_for(tenant, "batch").warn_seconds == (seconds if "kinds" not in text else 0.0)
    jsonschema.validate(yaml.safe_load(text), policy_json_schema())


def test_warn_for_defaults_to_zero_everywhere() -> None:
    policy = parse_policy("idle: {window: 30m}")
    assert {s.warn_seconds for s in policy.every_settings()} == {0.0}


@pytest.mark.parametrize("text", ["idle: {warnFor: -1}", "idle: {warnFor: soon}", "idle: {warnFor: true}",
                                  "idle: {warnWebhook: 'ftp://x'}", "idle: {warnWebhook: 'http://x/{user}'}"])
def test_bad_warning_settings_are_refused_by_both(text: str) -> None:
    import yaml

    with pytest.raises(PolicyError) as error:
        parse_policy(text)
    assert "warn" in str(error.value)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(yaml.safe_load(text), policy_json_schema())


def test_warn_webhook_is_read_per_tenant() -> None:
    policy = parse_policy("tenants: {t: {idle: {warnWebhook: 'http://notify.team-t.svc:8080/gpu-warnings/{namespace}'}}}")
    assert policy.idle_for("t", "ray").warn_webhook == "http://notify.team-t.svc:8080/gpu-warnings/{namespace}"
    assert policy.idle_for("other", "ray").warn_webhook == ""


def test_a_hole_in_the_samples_is_no_activity_the_warning_stays_pending() -> None:
    hole = ("DCGM samples for GPU 0 cover 60% of the window: idleness not confirmed",)
    assert grace("no-op", "not-idle", hole, 3600, pending(), EPISODE, NOW, "wf", activity=False).step == "none"
    assert grace("no-op", "not-idle", hole, 3600, pending(), EPISODE, NOW, "wf", activity=True).step == "cancel"


def test_the_judgement_says_whether_not_idle_was_activity() -> None:
    from steps.policy import IdleSettings
    from steps.reactions.on_idle import IdleFacts, judge

    facts = IdleFacts(target="ns/w", pods=1, runtime_seconds=7200, not_idle="a GPU reached 70%", busy=True)
    assert judge(facts, IdleSettings()).details == {"activity": True}
    assert judge(IdleFacts(target="ns/w", pods=1, runtime_seconds=7200, not_idle="no samples"),
                 IdleSettings()).details == {"activity": False}
