"""on-admitted: a Workload was admitted -> record its queue wait and prepare idle handling.

observe: the live Workload (the event is only a hint), its owner chain, tenant, ScaledObjects.
plan (pure):
- no-op when the Workload is gone, finished (finished before this event was handled), or not
  admitted now (stale or out-of-order event); the queue wait is recorded whenever it is known;
- skipped-by-policy when the Workload or its owner is exempt (`gpuaas.io/idle-policy: exempt`);
- for owners KEDA can scale (Deployment, StatefulSet, KServe raw-deployment InferenceService):
  ensure a keda.sh/v1alpha1 ScaledObject that moves the target only between its recorded size N
  (its replicas when the ScaledObject is made) and 0: `minReplicaCount = maxReplicaCount = N` (the
  HPA KEDA makes can never resize N->M, which Kueue forbids for a managed StatefulSet) and
  `idleReplicaCount: 0` (KEDA v2.20 pkg/scaling/executor: inactive -> idleReplicaCount after the
  cooldown, active at idle -> minReplicaCount). The Prometheus trigger reads the DCGM activity of
  the target's live pods (both label spellings) and is empty until they have reported for a whole
  idle window, so a new or resumed server is never judged on its first low sample; the cooldowns
  (`initialCooldownPeriod` from creation, `cooldownPeriod` from the last activity) are the longer of
  the tenant's idle window and minimum runtime. Owner reference to the owner (garbage collected with
  it), label gpuaas.io/managed-by=gpuaas. A tenant's own ScaledObject on the same target is
  respected (KEDA allows one per target), and so is any other HorizontalPodAutoscaler on it (e.g.
  KServe's: KEDA's webhook refuses a ScaledObject for a target an HPA scales); a server Knative scales
  (a Deployment controlled by a Knative Revision: KServe Serverless) gets none: Knative takes it to
  zero itself, and the record says so;
- for other kinds: record the release strategy on-idle will use (no write).
"""

from __future__ import annotations

import re
from typing import Any

from steps.gpu_key import ENGINE_ACTIVE, GPU_UTIL, whole_gpu_only
from steps.model.state import (
    MANAGED_BY,
    MANAGED_BY_VALUE,
    OWNER_UID_LABEL,
    TENANT_LABEL,
    WORKLOAD_LABEL_KEY,
    WorkloadState,
    observe_workload,
)
from steps.plan import JSON, Action, Outcome, Plan, ReactionRequest, StepReport
from steps.policy import IdleSettings, Policy, exempt_by
from steps.record import PREPARED
from steps.strategies import strategy_for

REACTION = "on-admitted"
RUN_ANNOTATION = "gpuaas.io/created-by-run"
"""On a ScaledObject gpuaas created: the Argo run (workflow uid) that created it."""
METRICS = (ENGINE_ACTIVE, GPU_UTIL)


def observe(context: Any, request: ReactionRequest) -> WorkloadState:
    return observe_workload(context, request)


def pod_regex(target: JSON) -> str:
    """The names of a Deployment's / StatefulSet's pods (PromQL regexes are fully anchored)."""
    name = re.escape(str((target.get("metadata") or {}).get("name")))
    if target.get("kind") == "StatefulSet":
        return f"{name}-[0-9]+"
    return f"{name}-[a-z0-9]+-[a-z0-9]+"


PRESENCE_STEP = "10s"
"""Resolution at which the query checks that a pod's series was there without a break (a subquery step)."""


def activity_query(namespace: str, target: JSON, window_seconds: float, min_runtime_seconds: float = 0.0) -> str:
    """Highest GPU activity (0-1) of the target's pods over the window, in both DCGM label spellings
    (GPU_UTIL of whole GPUs only: a MIG slice does not report it, steps.gpu_key).

    One element (max) as KEDA requires. A series counts only if it exists now (a deleted pod's series
    is stale at once, so the pods a server had before it went to 0 do not count). Nothing is judged
    (empty) while ANY series of the target's pods that exists now was not there, without a break, at
    every step of the last A = max(window, minimum runtime): so a new or resumed server is not judged
    before its pods have reported for a whole window and run for the tenant's minimum runtime (KEDA's
    cooldowns cannot hold a server resumed long after it went to 0: both count from a time long
    past), not on the old pods that still terminate beside it (they hold their GPUs until they are
    gone, and have reported for long), and not on a StatefulSet pod's predecessor under the same
    name (the same series; the stale marker between them is a break). "There at every step" compares
    the count of subquery steps the series was there with the count of steps (of `vector(1)`), so it
    does not depend on how a Prometheus version bounds a range. The steps are aligned to whole
    multiples of PRESENCE_STEP and the first one may lie up to a step after the start of A, so the
    series must also be there at A ago (`offset`): else a pod whose first sample fell just before
    that first step (the stack scrapes every 5 s) would be judged up to a step early. No
    `or vector(0)`: "no data" must never read as idle; an empty result is an error on which KEDA
    keeps the current replicas.
    """
    window = f"{int(window_seconds)}s"
    held = f"{int(max(window_seconds, min_runtime_seconds))}s"
    age = f"{held}:{PRESENCE_STEP}"
    steps = f"count_over_time(vector(1)[{age}])"
    pods = pod_regex(target).replace("\\", "\\\\")   # a PromQL string literal: the regex's backslashes doubled
    parts, young = [], []
    for metric in METRICS:
        scale = " / 100" if metric == GPU_UTIL else ""
        only = "".join(f",{m}" for m in [whole_gpu_only(metric)] if m)   # GPU_UTIL: never a MIG slice's
        for ns_label, pod_label in (("namespace", "pod"), ("exported_namespace", "exported_pod")):
            series = f'{metric}{{{ns_label}="{namespace}",{pod_label}=~"{pods}"{only}}}'
            parts.append(f"(max_over_time({series}[{window}]) and {series}){scale}")
            young.append(f"({series} unless (count_over_time({series}[{age}]) >= on () group_left () {steps}"
                         f" and {series} offset {held}))")
    return f"max({' or '.join(parts)}) unless on () ({' or '.join(young)})"


def scaled_object_name(target: JSON) -> str:
    base = f"gpuaas-{(target.get('metadata') or {}).get('name')}"
    return base[:253]


def recorded_size(target: JSON, ours: JSON | None) -> int:
    """The size gpuaas' ScaledObject brings the target back to: what it recorded when it was made
    (steps.strategies.scaled_size: its minReplicaCount, or an older object's maxReplicaCount), else
    the target's replicas now."""
    from steps.strategies import scaled_size

    if ours is not None:
        return scaled_size(ours)
    replicas = (target.get("spec") or {}).get("replicas")
    return 1 if replicas is None else int(replicas)


def desired_scaled_object(state: WorkloadState, target: JSON, owner: JSON, idle: IdleSettings,
                          size: int | None = None) -> JSON:
    """The ScaledObject gpuaas wants for `target` (pure): `size` replicas or 0, nothing in between."""
    wl = state.workload
    assert wl is not None
    meta = owner.get("metadata") or {}
    replicas = recorded_size(target, None) if size is None else size
    labels = {MANAGED_BY: MANAGED_BY_VALUE, OWNER_UID_LABEL: str(meta.get("uid") or "")[:63],
              WORKLOAD_LABEL_KEY: wl.name[:63]}
    if state.tenant:
        labels[TENANT_LABEL] = state.tenant[:63]
    threshold = f"{idle.threshold:g}"
    cooldown = int(max(idle.window_seconds, idle.min_runtime_seconds))
    metadata_extra = {"annotations": {RUN_ANNOTATION: state.run_id}} if state.run_id else {}
    trigger: dict[str, Any] = {
        "type": "prometheus",
        "name": "gpu-activity",
        "metadata": {
            "serverAddress": state.prometheus_url,
            "query": activity_query(wl.namespace, target, idle.window_seconds, idle.min_runtime_seconds),
            "threshold": threshold,
            "activationThreshold": threshold,
            "ignoreNullValues": "false",
        },
    }
    if state.keda_authentication:
        # KEDA v2.20 prometheus scaler: authModes bearer takes `bearerToken` (and `ca`) from the reference.
        kind, _, name = state.keda_authentication.rpartition("/")
        trigger["metadata"]["authModes"] = "bearer"
        trigger["authenticationRef"] = {"name": name, "kind": kind or "TriggerAuthentication"}
    return {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {
            **metadata_extra,
            "name": scaled_object_name(target), "namespace": wl.namespace, "labels": labels,
            "ownerReferences": [{"apiVersion": owner.get("apiVersion"), "kind": owner.get("kind"),
                                 "name": meta.get("name"), "uid": meta.get("uid"), "blockOwnerDeletion": False}],
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": target.get("apiVersion") or "apps/v1", "kind": target.get("kind"),
                               "name": (target.get("metadata") or {}).get("name")},
            "idleReplicaCount": 0,
            "minReplicaCount": replicas,
            "maxReplicaCount": replicas,
            "pollingInterval": 30,
            "initialCooldownPeriod": cooldown,
            "cooldownPeriod": cooldown,
            "triggers": [trigger],
        },
    }


def plan(request: ReactionRequest, state: WorkloadState, policy: Policy) -> Plan:
    """plan_transition under steps.delivery's exactly-once rule (`planned_once`)."""
    from steps.delivery import planned_once

    return planned_once(plan_transition, request, state, policy)


def plan_transition(request: ReactionRequest, state: WorkloadState, policy: Policy) -> Plan:
    wl = state.workload
    notes = state.event_notes()
    if wl is None:
        return Plan.nothing(*notes, f"Workload {request.namespace}/{request.workload} not found: nothing to prepare")
    metrics: dict[str, float] = {}
    if wl.queue_wait_seconds is not None:
        metrics["queueWaitSeconds"] = wl.queue_wait_seconds
    if wl.status() == "finished":
        return Plan((), (*notes, (f"Workload finished ({wl.finished_reason}) before this admission was handled; "
                               "on-finished releases what is left")), Outcome.NO_OP, metrics)
    if wl.status() != "admitted":
        return Plan((), (*notes, f"Workload is {wl.status()} now, not admitted (stale or out-of-order event)"),
                    Outcome.NO_OP, metrics)
    idle = policy.idle_for(state.tenant)
    exempt = exempt_by(state.workload_object, *state.owners.objects)
    target = state.keda_target()
    owner = state.owners.top or target
    ours = None if target is None else next(
        (so for so in state.managed_scaled_objects
         if (so.get("metadata") or {}).get("name") == scaled_object_name(target)), None)
    desired = (desired_scaled_object(state, target, owner, idle, recorded_size(target, ours))
               if target is not None and owner is not None else None)
    scaler = state.scaled_objects[0] if state.scaled_objects else None if state.autoscalers else desired
    strategy = strategy_for(wl, state.owners, scaler)
    reasons = [*notes, f"queue wait {metrics['queueWaitSeconds']:.0f}s" if "queueWaitSeconds" in metrics
               else "queue wait unknown (no creationTimestamp or admission time)",
               f"release strategy: {strategy.name} ({strategy.why})",
               (f"idle policy for tenant {state.tenant}: window {idle.window_seconds:g}s, threshold {idle.threshold:g}, "
               f"minimum runtime {idle.min_runtime_seconds:g}s, mode {idle.mode}, "
               f"at most {idle.max_releases_per_hour} release(s) per hour")]
    if exempt:
        return Plan((), (*reasons, f"{exempt} is annotated gpuaas.io/idle-policy: exempt: no idle handling"),
                    Outcome.SKIPPED_BY_POLICY, metrics)
    if state.owners.knative:
        return Plan((), (*reasons, (f"{state.owners.knative}: Knative scales it to zero itself; gpuaas makes no "
                                    "ScaledObject and never patches its replicas")), Outcome.NO_OP, metrics)
    if target is None or desired is None:
        return Plan((), (*reasons, "owner is not scaled by KEDA; on-idle applies the release strategy"),
                    Outcome.NO_OP, metrics)
    foreign = [so for so in state.scaled_objects
               if ((so.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY) != MANAGED_BY_VALUE]
    if foreign:
        name = (foreign[0].get("metadata") or {}).get("name")
        return Plan((), (*reasons, (f"the tenant's own ScaledObject {name} already scales "
                                   f"{target.get('kind')} {(target.get('metadata') or {}).get('name')}; it is kept "
                                   "(KEDA allows one per target) and paused on release")), Outcome.NO_OP, metrics)
    target_name = f"{target.get('kind')} {(target.get('metadata') or {}).get('name')}"
    if state.autoscalers:
        hpa = (state.autoscalers[0].get("metadata") or {}).get("name")
        return Plan((), (*reasons, (f"HorizontalPodAutoscaler {hpa} already scales {target_name}: someone else "
                                   "autoscales it (KEDA's webhook refuses a second autoscaler), so gpuaas makes no "
                                   "ScaledObject")), Outcome.NO_OP, metrics)
    if desired["spec"]["minReplicaCount"] < 1:
        return Plan((), (*reasons, (f"{target_name} has 0 replicas: no size to record and come back to, so "
                                   "gpuaas makes no ScaledObject")), Outcome.NO_OP, metrics)
    from steps.gateways.resources import SCALED_OBJECT

    dry = idle.dry_run
    if dry:
        reasons.append(f"tenant {state.tenant} policy mode is dry-run")
    event = (PREPARED, (f"gpuaas prepared idle handling: ScaledObject {desired['metadata']['name']} scales "
                       f"{target_name} between {desired['spec']['minReplicaCount']} and 0 replicas: to 0 once its GPUs "
                       f"have been idle for {idle.window_seconds:g}s and then KEDA's cooldown of "
                       f"{desired['spec']['cooldownPeriod']}s has passed, never sooner than "
                       f"{desired['spec']['initialCooldownPeriod']}s after it was made"))
    if ours is None:
        action = Action("create-scaled-object", SCALED_OBJECT, desired["metadata"]["name"], wl.namespace,
                        "no ScaledObject scales the owner yet", operation="create", body=desired)
        return Plan((action,), tuple(reasons), Outcome.NO_OP, metrics, event, dry)
    created_by = ((ours.get("metadata") or {}).get("annotations") or {}).get(RUN_ANNOTATION)
    if state.run_id and created_by == state.run_id:
        # An earlier attempt of this run created it and its answer was lost (Argo retried the step).
        from steps.reactions import EARLIER_ATTEMPT_NOTE

        action = Action("create-scaled-object", SCALED_OBJECT, desired["metadata"]["name"], wl.namespace,
                        EARLIER_ATTEMPT_NOTE.format(run=state.run_id), operation="already-applied")
        note = (f"ScaledObject {desired['metadata']['name']} was created by an earlier attempt of this run "
                f"(workflow {state.run_id})")
        return Plan((action,), (*reasons, note),
                    Outcome.NO_OP, metrics, event, dry)
    current = {"spec": ours.get("spec"), "labels": (ours.get("metadata") or {}).get("labels")}
    # The workload label names the Workload that created it: pods of a Deployment each have their own
    # Workload, and re-labelling on every pod's admission would be churn, not information.
    desired["metadata"]["labels"].pop(WORKLOAD_LABEL_KEY, None)
    wanted_labels = {**(current["labels"] or {}), **desired["metadata"]["labels"]}
    if ours.get("spec") == desired["spec"] and current["labels"] == wanted_labels:
        return Plan((), (*reasons, f"ScaledObject {desired['metadata']['name']} is already as wanted"),
                    Outcome.NO_OP, metrics)
    action = Action("update-scaled-object", SCALED_OBJECT, desired["metadata"]["name"], wl.namespace,
                    "the ScaledObject differs from the policy (window, threshold, replicas or Prometheus)",
                    patch={"metadata": {"labels": desired["metadata"]["labels"]}, "spec": desired["spec"]},
                    resource_version=(ours.get("metadata") or {}).get("resourceVersion"),
                    before={"metadata": {"labels": current["labels"]}, "spec": ours.get("spec")})
    return Plan((action,), tuple(reasons), Outcome.NO_OP, metrics, event, dry)


def step(context: Any) -> StepReport:
    from steps.reactions import run_planned

    return run_planned(context, observe=observe, plan=plan)
