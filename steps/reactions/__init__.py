"""Reactions: one module per reaction, found by name (no shared registry to edit).

Convention (stable; helpers add modules without touching this file):

    reaction "on-idle"  ->  module steps.reactions.on_idle

A reaction module exposes

    REACTION: str = "on-idle"
    def step(context: StepContext) -> steps.plan.StepReport

The entry point (`python -m steps on-idle FILE`) imports the module lazily, calls `step`, then
records the Kubernetes Event, builds the audit record and writes the outputs: a reaction never
writes output files or the record itself. Raising `steps.plan.RejectedInput` from `step` gives
`rejected-input`; a gateway `TransientError` gives `failed` + exit 75; anything else `failed` +
exit 1, and the record is still written.

Most reactions are observe -> plan -> apply; `run_planned(context, observe=..., plan=...)` is that
loop (re-observe and re-plan on 409 Conflict, bounded), with `apply_actions` as the generic apply
over `steps.plan.Action`s:

    def observe(context: StepContext, request: ReactionRequest) -> State   # State: see `run_planned`
    def plan(request: ReactionRequest, state, policy: steps.policy.Policy) -> steps.plan.Plan  (pure)
    def step(context): return run_planned(context, observe=observe, plan=plan)

`StepContext` gives lazy access to the gateways (`context.kube`, `context.metrics`), the policy
(`context.policy`, read from the ConfigMap on first use), the raw parameters and the clock.
"""

from __future__ import annotations

import importlib
import os
import re
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

from steps.plan import (
    JSON,
    Action,
    ActionResult,
    Outcome,
    Plan,
    ReactionRequest,
    RejectedInput,
    StepReport,
    outcome_of,
)

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9-]*$")


def module_name(reaction: str) -> str:
    """ "on-idle" -> "steps.reactions.on_idle"."""
    return f"{__name__}.{reaction.replace('-', '_')}"


def load(reaction: str) -> ModuleType:
    """Import the reaction's module; RejectedInput when the name is malformed or unknown."""
    if not NAME_PATTERN.match(reaction or ""):
        raise RejectedInput("reaction", "a reaction name such as on-admitted (lower-case, '-')",
                            repr(reaction), "check the template's command: [python, -m, steps, <reaction>]")
    try:
        module = importlib.import_module(module_name(reaction))
    except ModuleNotFoundError as error:
        if error.name != module_name(reaction):
            raise
        raise RejectedInput("reaction", f"one of {', '.join(available())}", repr(reaction),
                            "check the template's command") from None
    if not callable(getattr(module, "step", None)):
        raise RejectedInput("reaction", f"a module exposing step(context) ({module.__name__})",
                            "a module without step()", "this reaction cannot be run as a step yet")
    return module


def available() -> list[str]:
    """Reaction names with a module in this package (for messages and docs)."""
    here = os.path.dirname(__file__)
    return sorted(f[:-3].replace("_", "-") for f in os.listdir(here)
                  if f.endswith(".py") and not f.startswith("_"))


class StepContext:
    """What a reaction may touch: parameters, environment, clock, and lazily built gateways."""

    def __init__(self, reaction: str, params: Mapping[str, str], environ: Mapping[str, str] | None = None,
                 *, kube: Any = None, metrics: Any = None, policy: Any = None, now: datetime | None = None,
                 workload_apis: Any = None) -> None:
        self.reaction = reaction
        self.workload_apis = workload_apis
        """steps.gateways.workload_apis.WorkloadApis (built when first needed; tests hand one in)."""
        self.params = dict(params)
        self.environ = dict(os.environ if environ is None else environ)
        self._kube = kube
        self._metrics = metrics
        self._policy = policy
        self._now = now
        self.policy_source = "given" if policy is not None else ""

    def now(self) -> datetime:
        return self._now or datetime.now(UTC)

    @property
    def kube(self) -> Any:
        """steps.gateways.kubernetes.KubernetesGateway (GPUAAS_KUBE_URL wins, as ARCHITECTURE §1)."""
        if self._kube is None:
            from steps.gateways.kubernetes import KubernetesGateway

            url = self.environ.get("GPUAAS_KUBE_URL")
            self._kube = KubernetesGateway(url=url) if url else KubernetesGateway()
        return self._kube

    @property
    def metrics(self) -> Any:
        """steps.gateways.metrics.MetricsGateway at GPUAAS_PROMETHEUS_URL."""
        if self._metrics is None:
            from steps.gateways.metrics import MetricsGateway

            self._metrics = MetricsGateway(url=self.environ.get("GPUAAS_PROMETHEUS_URL") or None)
        return self._metrics

    @property
    def run_id(self) -> str:
        """The Argo run this attempt belongs to (the workflow uid, env GPUAAS_RUN_ID), "" by hand.

        Argo retries a step in a new pod: a retry of the same run recognises the release an earlier
        attempt made (the release record names the run) and records it, whose answer was lost."""
        return (self.environ.get("GPUAAS_RUN_ID") or "").strip()

    @property
    def run_name(self) -> str:
        """The Argo run's name (env GPUAAS_RUN_NAME), "" by hand: what `gpuaas audit show` takes."""
        return (self.environ.get("GPUAAS_RUN_NAME") or "").strip()

    @property
    def namespace(self) -> str:
        """The product's own namespace (policy ConfigMap lives there)."""
        return self.environ.get("GPUAAS_NAMESPACE") or "gpuaas"

    @property
    def policy(self) -> Any:
        """steps.policy.Policy from ConfigMap gpuaas-policy (defaults when it is absent)."""
        if self._policy is None:
            from steps.policy import load_policy

            self._policy, self.policy_source = load_policy(self.kube, self.namespace)
        return self._policy


def _project(obj: Any, shape: Any) -> Any:
    """The part of `obj` that a merge patch of `shape` touches (before/after in the record)."""
    if not isinstance(shape, dict):
        return obj
    if not isinstance(obj, dict):
        return None
    return {k: _project(obj.get(k), v) for k, v in shape.items() if k != "resourceVersion"}


EARLIER_ATTEMPT_NOTE = "applied by an earlier attempt of this run (workflow {run}); its answer was lost"
LOST_ANSWER_NOTE = "the API's answer was lost ({error}); re-reading the object showed the write took effect"


def apply_actions(kube: Any, plan: Plan, dry_run: bool, results: list[ActionResult] | None = None
                  ) -> list[ActionResult]:
    """Apply a plan's actions in order (or report them as dry-run).

    Conflict (409) propagates so the caller re-observes and re-plans; TransientError propagates
    (the caller re-observes once, then exit 75 and Argo retries); any other API error marks the
    action failed and stops the plan. A write whose answer was lost (`maybe_committed`: the
    gateway's retry met 409/422, or it gave up) is first checked against the live object
    (steps.effects): if it took effect it is recorded as applied and the plan goes on.
    `results` (optional) is filled as actions complete, so a caller still knows what was written
    when an exception cuts the plan short.
    """
    from steps.effects import took_effect
    from steps.gateways.errors import Conflict, KubernetesError, TransientError

    results = [] if results is None else results
    moved: dict[tuple[str, str | None, str, str], str] = {}
    """(resource, namespace, name, version read) -> the version the run's own claim left (see below)."""
    for action in plan.actions:
        mark = action.bookkeeping
        if action.resource_version:
            # A write conditional on the version this run read, after this run's own claim on the same object
            # (steps.delivery.claimed_and_marked: the claim held that version, so nothing else changed since).
            key = (str(action.resource), action.namespace, action.name, action.resource_version)
            if key in moved:
                from dataclasses import replace as dc_replace

                action = dc_replace(action, resource_version=moved[key])
        if action.operation == "none":
            results.append(ActionResult(action.action, action.target, "unchanged", action.before, action.before,
                                        bookkeeping=mark))
            continue
        if action.operation == "already-applied":
            results.append(ActionResult(action.action, action.target, "applied", action.before, None,
                                        note=action.reason, bookkeeping=mark))
            continue
        if dry_run and not mark:
            results.append(ActionResult(action.action, action.target, "dry-run", action.before, None))
            continue
        try:
            after = _write(kube, action)
        except KubernetesError as error:
            if error.maybe_committed and _confirmed(took_effect, kube, action):
                results.append(ActionResult(action.action, action.target, "applied", action.before, None,
                                            note=LOST_ANSWER_NOTE.format(error=error), bookkeeping=mark))
                continue
            if isinstance(error, (Conflict, TransientError)):
                raise
            if mark and action.operation == "json-patch" and error.status == 422:
                # The marker's `test` failed: another run claimed or answered the transition after this
                # one read it (steps.delivery, rule 3). Read again: the re-plan records a duplicate.
                raise Conflict(409, f"the marker changed since this run read it: {error.message}",
                               "Conflict") from error
            results.append(ActionResult(action.action, action.target, "failed", action.before, None, str(error),
                                        bookkeeping=mark))
            break
        results.append(ActionResult(action.action, action.target, "applied", action.before, after, bookkeeping=mark))
        if mark and action.action == "claim" and action.resource_version and isinstance(after, dict) \
                and after.get("resourceVersion"):
            moved[(str(action.resource), action.namespace, action.name, action.resource_version)] = \
                str(after["resourceVersion"])
    return results


def _confirmed(took_effect: Callable[[Any, Action], bool], kube: Any, action: Action) -> bool:
    """Whether the action's write is in effect; False when even the re-read fails (then the caller
    re-observes later, or the step exits 75 and a retry finds out)."""
    from steps.gateways.errors import KubernetesError

    try:
        return took_effect(kube, action)
    except KubernetesError:
        return False


def _write(kube: Any, action: Action) -> JSON | None:
    ns = action.namespace if action.resource.namespaced else None
    if action.operation == "create":
        created = kube.create(action.resource, action.body or {}, ns)
        return {"name": (created.get("metadata") or {}).get("name"), "uid": (created.get("metadata") or {}).get("uid")}
    if action.operation == "merge-patch":
        patch = action.patch
        if action.resource_version:
            patch = {**patch, "metadata": {**(patch.get("metadata") or {}), "resourceVersion": action.resource_version}}
        written = kube.merge_patch(action.resource, action.name, patch, ns, subresource=action.subresource)
        return _project(written, action.patch)
    if action.operation == "json-patch":
        operations = list(action.patch)
        if action.resource_version:
            # Setting the observed resourceVersion makes the API server answer 409 if the object moved on.
            operations.insert(0, {"op": "replace", "path": "/metadata/resourceVersion",
                                  "value": action.resource_version})
        written = kube.json_patch(action.resource, action.name, operations, ns, subresource=action.subresource)
        return {"resourceVersion": (written.get("metadata") or {}).get("resourceVersion")}
    if action.operation == "delete":
        kube.delete(action.resource, action.name, ns)
        return None
    raise ValueError(f"unknown operation {action.operation!r} in action {action.action}")


def run_planned(context: StepContext, *, observe: Callable[[StepContext, ReactionRequest], Any],
                plan: Callable[[ReactionRequest, Any, Any], Plan],
                apply: Callable[..., list[ActionResult]] = apply_actions,
                require_workload: bool = True, uses_policy: bool = True, attempts: int = 3) -> StepReport:
    """parse -> observe -> plan -> apply, re-observing and re-planning on 409 (bounded).

    The state returned by `observe` should offer (all optional): `observed() -> dict` (the record's
    `observed`), `workload_object` (the Workload dict, for the Kubernetes Event), `workload_ref`
    ({namespace, name, uid}), `tenant`, `cohort`, `event_summary`.
    A RejectedInput raised anywhere ends as `rejected-input` with zero writes.
    `uses_policy=False`: the plan gets the default Policy and the ConfigMap is not read, so a broken
    policy cannot block reactions that do not depend on it (on-finished, resume-workers).
    """
    from steps.gateways.errors import Conflict, KubernetesError, TransientError

    timings = {"observeSeconds": 0.0, "planSeconds": 0.0, "applySeconds": 0.0}
    started = time.perf_counter()
    report = StepReport(reaction=context.reaction, outcome=Outcome.FAILED, timings=timings)
    request = ReactionRequest.from_params(context.reaction, context.params)
    report.request = request
    if require_workload:
        if not (request.namespace and request.workload) and request.event:
            from steps.events import parse_resource_event

            event = parse_resource_event(request.event)
            if event is not None and event.body.get("kind") == "Workload":
                request = request.with_names(request.namespace or event.namespace, request.workload or event.name)
                report.request = request
        request.require_workload()
    earlier: list[ActionResult] = []
    """Writes that succeeded in an attempt a 409 or a transient failure cut short: they happened, so
    they are recorded."""
    applied_plans: list[Plan] = []
    """The plans some of whose writes happened: their Event and metrics describe this run."""
    partial: list[ActionResult] = []
    reobserved_after_transient = False
    try:
        for attempt in range(1, attempts + 1):
            t = time.perf_counter()
            state = observe(context, request)
            timings["observeSeconds"] += time.perf_counter() - t
            _fill_from_state(report, state)
            t = time.perf_counter()
            the_plan = plan(request, state, context.policy if uses_policy else _default_policy())
            timings["planSeconds"] += time.perf_counter() - t
            report.plan = the_plan
            t = time.perf_counter()
            partial = []
            try:
                results = apply(context.kube, the_plan, request.dry_run or the_plan.dry_run, partial)
            except (Conflict, TransientError) as error:
                timings["applySeconds"] += time.perf_counter() - t
                earlier.extend(partial)
                if any(r.result == "applied" and not r.bookkeeping for r in partial):
                    applied_plans.append(the_plan)
                partial = []
                if isinstance(error, TransientError):
                    # After a transient failure, read again and record what is true (the write may
                    # have been committed); once only: if the API is still failing, exit 75.
                    if reobserved_after_transient or attempt == attempts:
                        raise
                    reobserved_after_transient = True
                elif attempt == attempts:
                    raise TransientError(409, f"conflict retries exhausted after {attempts} attempts: "
                                              f"{error.message}", "Conflict") from error
                report.errors.append(f"attempt {attempt}: {error}; re-read and re-planned")
                continue
            timings["applySeconds"] += time.perf_counter() - t
            report.results = [*earlier, *results]
            report.outcome = outcome_of(the_plan, report.results)
            if any(r.result == "applied" and not r.bookkeeping for r in results):
                applied_plans.append(the_plan)
            last_applied = applied_plans[-1] if applied_plans else None
            _describe_run(report, applied_plans if last_applied is the_plan else [*applied_plans, the_plan])
            report.errors.extend(r.error for r in results if r.error)
            break
    except KubernetesError as error:
        # Keep what was observed, planned and written so far: the record must say what happened.
        report.outcome = Outcome.FAILED
        report.transient = isinstance(error, TransientError)
        report.results = [*earlier, *partial]
        _describe_run(report, applied_plans)
        report.errors.append(("transient: " if report.transient else "") + str(error))
    timings["totalSeconds"] = time.perf_counter() - started
    return report


def _describe_run(report: StepReport, plans: list[Plan]) -> None:
    """Metrics and the Kubernetes Event of the run: from every plan whose writes happened (a write
    whose answer was lost, then confirmed, belongs to an earlier plan than the last), later plans
    winning; the last plan's figures (queue wait, GPU-hours) always count."""
    report.metrics.clear()
    for each in plans:
        report.metrics.update(each.metrics)
        if each.event is not None:
            report.event = (each.event[0], each.event[1], "Normal")


def _default_policy() -> Any:
    from steps.policy import Policy

    return Policy()


def _fill_from_state(report: StepReport, state: Any) -> None:
    observed = getattr(state, "observed", None)
    report.observed = observed() if callable(observed) else (observed or {})
    report.workload_object = getattr(state, "workload_object", None)
    report.workload = getattr(state, "workload_ref", None) or report.workload
    report.tenant = getattr(state, "tenant", None)
    report.cohort = getattr(state, "cohort", None)
    report.event_summary = getattr(state, "event_summary", None)
    delivery = getattr(state, "delivery", None)
    report.delivery = delivery.to_dict() if delivery is not None else None
