"""The catch-up sweep (docs/catch-up.md): CronWorkflow `gpuaas-sweep` is there, scheduled on time, and its
last pass succeeded.

Why the doctor looks: the sweep answers every Kueue transition the event path lost, and records the job
kinds' transitions (no Sensor starts a run for them). When it does not run, nothing says so. Argo Workflows
v4.0.5 rejects a CronWorkflow whose WorkflowTemplate its informer has not seen yet (the install order of
`kubectl apply -k`, a race under Helm that the chart's hook works around) and looks at it again only when
it changes or at its 20-minute resync; that rejection is only logged: `workflow/cron/controller.go`
`processNextCronItem` returns after `validateCronWorkflow` without persisting the SpecError condition it set
in memory. The condition IS written when a scheduled run fails validation (`operator.go` `run` persists its
status in a deferred `persistUpdate`: a CronWorkflow that ran, then lost its template), and SubmissionError
when the controller could not create the pass: both are read here. So the rejection on install shows only
as time passing with no `status.lastScheduledTime`, which is what `sweep` judges, in multiples of the
schedule's longest gap (gpuaas.doctor.schedule). A rejected update keeps the job the controller had
scheduled before (processNextCronItem returns before `cc.cron.Delete`), so a CronWorkflow that was
scheduled and stops being so points at the controller itself (down, not leading) more than at a rejection.
A pass the CronWorkflow created (label workflows.argoproj.io/cron-workflow) counts as scheduled too, should
the controller's status patch have failed.

| finding | blocks | warn | ok |
|---|---|---|---|
| `sweep` | the CronWorkflow is missing; SpecError or SubmissionError is True; never scheduled for 2 intervals + MARGIN_S after it was created or last re-validated; last scheduled (or a pass created) longer ago than 3 intervals + MARGIN_S | suspended, or Stopped (a stopStrategy); late, but a pass is still running (concurrencyPolicy Forbid starts no other); a schedule the doctor cannot interpret | scheduled on time, or not yet due |
| `sweep.pass` | | the newest finished pass Failed or Error | it Succeeded, or none has finished yet |
"""

from __future__ import annotations

from gpuaas.doctor.checks.components import not_installed
from gpuaas.doctor.facts import CronWorkflowFact, Facts, SweepPass
from gpuaas.doctor.findings import Finding, Skipped, blocks, ok, warn
from gpuaas.doctor.schedule import ScheduleError, describe, interval_s
from steps.install_hook import REVALIDATED_AT
from steps.reactions.sweep import CRON_NAME

CRD = "cronworkflows.argoproj.io"
MARGIN_S = 120.0
"""Added to every deadline: the controller fires on whole minutes, a pass is created a moment after its
scheduled time, and the doctor's clock and the apiserver's differ a little."""
NEVER_AFTER = 2
"""A CronWorkflow never scheduled this many intervals (+ MARGIN_S) after it was created or re-validated was rejected."""
LATE_AFTER = 3
"""A CronWorkflow last scheduled longer ago than this many intervals (+ MARGIN_S) is no longer scheduled."""
FINISHED = ("Succeeded", "Failed", "Error")


def revalidate_fix(namespace: str) -> str:
    """docs/install.md step 4's command: an update, which has the controller validate the CronWorkflow again."""
    return (f"kubectl -n {namespace} annotate cronworkflow {CRON_NAME} --overwrite "
            f'{REVALIDATED_AT}="$(date -u +%Y-%m-%dT%H:%M:%SZ)"')


def _ago(seconds: float | None) -> str:
    return "never" if seconds is None else f"{describe(seconds)} ago"


def _rejected_fix(facts: Facts, cron: CronWorkflowFact, interval: float) -> str:
    ns = facts.namespace
    controller = next(iter(facts.controllers_of("argo-workflows")), None)
    logs = (f"kubectl -n {controller.namespace} logs deploy/{controller.name}" if controller
            else "kubectl -n argo logs deploy/workflow-controller")
    return (f"{revalidate_fix(ns)}\n"
            f"# then, within {describe(interval + MARGIN_S)}, this prints a time: kubectl -n {ns} get cronworkflow "
            f"{CRON_NAME} -o jsonpath='{{.status.lastScheduledTime}}'\n"
            f"# if it does not, the workflow-controller's log says why: {logs} | grep {CRON_NAME}"
            f"   (WorkflowTemplate {cron.template or CRON_NAME} must exist in {ns})")


def _unjudged(facts: Facts, check: str) -> Skipped | None:
    """Argo Workflows' CRD is missing (its own finding says so) or the sweep could not be read."""
    why = not_installed(facts, CRD) or facts.unreadable.get("sweep")
    return Skipped(check, why) if why else None


def cron_finding(facts: Facts) -> Finding | Skipped:
    check = "sweep"
    if skipped := _unjudged(facts, check):
        return skipped
    ns, cron = facts.namespace, facts.sweep.cron
    if cron is None:
        return blocks(check, f"CronWorkflow {CRON_NAME} is missing from {ns}: no catch-up sweep answers a Kueue "
                             "transition the event path lost, and the job kinds' transitions are not recorded",
                      "install or upgrade the product: helm upgrade --install gpuaas charts/gpuaas -n "
                      f"{ns} -f my-values.yaml --server-side=false\n# or: kubectl apply -k manifests/overlays/<yours>, then (docs/install.md, "
                      f"step 4): sleep 10; {revalidate_fix(ns)}")
    schedule = ", ".join(cron.schedules) or "none"
    details = [f"schedule {schedule}" + (f" ({cron.timezone})" if cron.timezone else ""),
               f"created {_ago(cron.age_s)}; last scheduled {_ago(cron.last_scheduled_age_s)}"
               + (f" ({cron.last_scheduled_at})" if cron.last_scheduled_at else "")
               + (f"; re-validated {_ago(cron.revalidated_age_s)}" if cron.revalidated_age_s is not None else "")]
    scheduled = [p for p in facts.sweep.passes if p.scheduled]
    if scheduled:
        details.append(f"newest scheduled pass: {scheduled[0].name}, created {_ago(scheduled[0].age_s)}")
    if cron.active:
        details.append(f"running now: {', '.join(cron.active)}")
    if cron.when:
        details.append(f"when: {cron.when} (a schedule it skips is not a scheduled time)")
    spec_error = cron.conditions.get("SpecError", ("", "", ""))
    if spec_error[0] == "True":
        return blocks(check, f"Argo Workflows rejected CronWorkflow {CRON_NAME} at a scheduled run (condition SpecError: "
                             f"{spec_error[2][:300]}): no sweep pass runs",
                      "make the CronWorkflow valid again (apply the product's manifests: its WorkflowTemplate "
                      f"{cron.template or CRON_NAME} must exist in {ns}), then have it validated again:\n"
                      f"{revalidate_fix(ns)}\n# the condition stays until the next scheduled run that passes validation",
                      *details)
    if cron.suspend:
        return warn(check, f"CronWorkflow {CRON_NAME} is suspended: no sweep pass runs, so a transition the event path "
                           "lost is not answered and the job kinds' transitions are not recorded",
                    f"kubectl -n {ns} patch cronworkflow {CRON_NAME} --type=merge -p '{{\"spec\":{{\"suspend\":false}}}}'",
                    *details)
    if cron.phase == "Stopped":
        return warn(check, f"CronWorkflow {CRON_NAME} is Stopped: its stopStrategy ({cron.stop_strategy or 'none now'}) "
                           "held, and the workflow-controller schedules it no more",
                    f"kubectl -n {ns} patch cronworkflow {CRON_NAME} --type=merge -p '{{\"metadata\":{{\"labels\":"
                    "{\"cronworkflows.argoproj.io/completed\":null}},\"spec\":{\"stopStrategy\":null},"
                    "\"status\":{\"phase\":\"Active\"}}'   # the product sets no stopStrategy", *details)
    try:
        interval = interval_s(cron.schedules)
    except ScheduleError as error:
        return warn(check, f"the doctor cannot interpret CronWorkflow {CRON_NAME}'s schedule, so whether it runs on time "
                           f"is not judged: {error}",
                    "use a standard schedule (`sweep.schedule` in your values file, e.g. */2 * * * *); a schedule the "
                    "workflow-controller cannot parse either is rejected ('cron schedule ... is malformed' in its log) "
                    "and never runs", *details)
    details[0] += f": fires at least every {describe(interval)}"
    submission = cron.conditions.get("SubmissionError", ("", "", ""))
    if submission[0] == "True":
        return blocks(check, f"the workflow-controller could not create a sweep pass (condition SubmissionError: "
                             f"{submission[2][:300]})",
                      "fix what the message names (the ServiceAccount gpuaas-sweep, the WorkflowTemplate, an admission "
                      f"webhook, a quota in {ns}); the next scheduled run clears the condition", *details)
    # since the controller last had reason to validate it: created, or re-validated (the hook's or the admin's update)
    revalidated = cron.revalidated_age_s is not None and cron.revalidated_age_s < cron.age_s
    since = cron.revalidated_age_s if revalidated and cron.revalidated_age_s is not None else cron.age_s
    event = "re-validated" if revalidated else "created"
    # evidence that the controller schedules it: lastScheduledTime, or a pass it created (should a status patch fail)
    seen = [a for a in (cron.last_scheduled_age_s, *(p.age_s for p in scheduled)) if a is not None]
    if not seen:
        due = NEVER_AFTER * interval + MARGIN_S
        if since <= due:
            return ok(check, f"CronWorkflow {CRON_NAME} was {event} {describe(since)} ago: its first pass is due "
                             f"(judged after {describe(due)})", *details)
        return blocks(check, f"CronWorkflow {CRON_NAME} was never scheduled, {describe(since)} after it was "
                             f"{event} (its schedule fires at least every {describe(interval)}): "
                             "the workflow-controller rejected it, most likely because it arrived before its "
                             "WorkflowTemplate (kubectl apply -k, docs/catch-up.md), and Argo records no rejection",
                      _rejected_fix(facts, cron, interval), *details)
    last_seen = min(seen)
    late = LATE_AFTER * interval + MARGIN_S
    quiet = min(last_seen, since)
    if quiet <= late:
        return ok(check, f"CronWorkflow {CRON_NAME} is scheduled on time ({schedule}); last scheduled "
                         f"{_ago(last_seen)}", *details)
    known = {p.name: p for p in facts.sweep.passes}
    running = [name for name in cron.active if name not in known or known[name].phase not in FINISHED]
    if running:
        name = running[0]
        for_how_long = f" for {describe(known[name].age_s)}" if name in known else ""
        return warn(check, f"no sweep pass was scheduled for {describe(quiet)} (its schedule fires at least every "
                           f"{describe(interval)}): pass {name} has been running{for_how_long}, and concurrencyPolicy "
                           "Forbid starts no other meanwhile",
                    f"see what it is doing: argo -n {ns} get {name}; argo -n {ns} logs {name} "
                    "(a pass ends at its activeDeadlineSeconds, 30m)", *details)
    return blocks(check, f"CronWorkflow {CRON_NAME} was last scheduled {_ago(last_seen)}, and its schedule fires at "
                         f"least every {describe(interval)}: the workflow-controller no longer schedules it (no "
                         "controller runs or leads, see the argo-workflows finding; or it dropped the CronWorkflow), "
                         "and Argo records nothing",
                  _rejected_fix(facts, cron, interval), *details)


def _pass_line(sweep_pass: SweepPass) -> str:
    by = "scheduled" if sweep_pass.scheduled else "submitted by hand"
    when = f"finished {sweep_pass.finished_at}" if sweep_pass.finished_at else f"created {_ago(sweep_pass.age_s)}"
    return f"{sweep_pass.name} ({by}): {sweep_pass.phase or 'no phase yet'}, {when}"


def pass_finding(facts: Facts) -> Finding | Skipped:
    check = "sweep.pass"
    if skipped := _unjudged(facts, check):
        return skipped
    ns, passes = facts.namespace, facts.sweep.passes
    finished = [p for p in passes if p.phase in FINISHED]
    if not finished:
        if facts.sweep.cron is None:
            return Skipped(check, f"CronWorkflow {CRON_NAME} is missing and no sweep pass ran: see the sweep finding")
        return ok(check, "no sweep pass has finished yet", *(_pass_line(p) for p in passes[:1]))
    last = finished[0]
    details = [_pass_line(p) for p in passes[:5]]
    failed = sum(1 for p in finished if p.phase != "Succeeded")
    details.append(f"{len(finished)} finished pass(es) kept, {failed} not Succeeded")
    if last.phase != "Succeeded":
        return warn(check, f"the last sweep pass, {last.name}, ended {last.phase}: {last.message[:300] or 'no message'}",
                    f"see which transitions it could not answer: gpuaas audit show {last.name} "
                    f"--argo-namespace {ns}   (or: argo -n {ns} get {last.name}; argo -n {ns} logs {last.name}); "
                    "the next pass tries them again", *details)
    return ok(check, f"the last sweep pass, {last.name}, succeeded"
                     + (f" at {last.finished_at}" if last.finished_at else f" ({describe(last.age_s)} ago)"), *details)
