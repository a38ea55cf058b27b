"""on-idle: one GPUWorkloadIdle alert -> confirm the workload is idle NOW -> release its workers.

An alert is a hint that may be minutes old and names one pod. So the step (`step(context)`, run by
`python -m steps on-idle FILE` for each item of the idle-alerts fan-out):

1. observe (`observe_step`): pod -> Workload from the live owner chain (the `workload` parameter
   is only a fallback when the pod is gone); steps-core's Workload state (owners, tenant,
   ScaledObjects, release record); every running pod of the Workload; the GPU activity of ALL of
   them over the tenant's idle window (metrics gateway, both DCGM label spellings); the tenant's
   releases in the last hour (GPUaaSWorkersReleased Events);
2. decide (`decide`, pure, table-tested): the observed state's plain facts (`IdleFacts`) are
   judged by `judge`: no-op when there is nothing to release or the GPUs are not provably idle
   (busy, partly busy, no data, data with holes); skipped-by-policy when exempt, younger than the
   minimum runtime, or the tenant used its hourly release budget; else release. `gpuaas simulate`
   replays history through the same `judge`;
3. plan (`plan_step`, pure): release-workers' plan for the kind (steps.strategies), dry-run when
   asked or when the tenant's policy mode is dry-run;
4. apply and record (steps.reactions.run_planned): metrics gpusReleased and gpuHoursFreedPerHour
   (= GPUs released; 0 in dry-run); the entry point's `tenant` output labels the Argo metric.

Nothing is released on missing data: "no samples" never means idle. If Prometheus is unreachable
and the decision depends on it, the step fails TRANSIENT (exit 75) and Argo retries it; an exempt
or too-young workload is decided without Prometheus.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from steps.demand import DemandVerdict
from steps.gateways.metrics import GpuActivity
from steps.model.workload import Workload
from steps.plan import Plan
from steps.policy import EXEMPT_KEY, EXEMPT_VALUE, IdleSettings, exempt_by
from steps.reactions.idle_alerts import IdleAlert
from steps.signals import SIGNAL_OF_KIND, Evidence

REACTION = "on-idle"
JSON = dict[str, Any]


@dataclass(frozen=True)
class IdleRequest:
    """The step's parameters, validated."""

    namespace: str
    workload: str
    pod: str
    alert: IdleAlert | None
    dry_run: bool = False


# The tenant's idle settings (steps.policy): window_seconds, threshold, min_coverage,
# min_runtime_seconds, mode, max_releases_per_hour.
IdlePolicy = IdleSettings


@dataclass(frozen=True)
class IdleState:
    """What observe found that matters to the decision (also what the record shows)."""

    now: datetime
    workload: JSON | None
    resolution: str = ""
    """How the workload was found, or why it was not."""
    tenant: str | None = None
    owners: tuple[JSON, ...] = ()
    """The Workload's owner chain, direct owner first (steps.model.owners.OwnerChain.objects): the opt-out is read
    on every one of them, as release-workers reads it, so a tenant who annotates the object they know (a Notebook
    above its StatefulSet, a PyTorchJob above its Job) is not warned."""
    pods: tuple[str, ...] = ()
    activity: GpuActivity | None = None
    pod_gpus: Mapping[str, int] = field(default_factory=dict)
    """GPUs each pod of the workload requests: each must have its own samples (no evidence, no release)."""
    metrics_error: str | None = None
    releases_last_hour: int = 0
    released_record: JSON | None = None
    """The release gpuaas recorded on the workload/owner, if it is currently released."""
    kind: str | None = None
    """The policy kind of the workload (steps.policy.kind_of over its owner chain)."""
    evidence: Evidence | None = None
    demand: DemandVerdict | None = None

    # -- facts derived from the Workload (steps.model.workload) ------------------------------------
    @property
    def model(self) -> Workload:
        return Workload(self.workload or {})

    def is_true(self, kind: str) -> bool:
        return self.model.is_true(kind)

    @property
    def active(self) -> bool:
        return self.model.active

    @property
    def admitted_at(self) -> datetime | None:
        return self.model.admitted_at

    @property
    def runtime_seconds(self) -> float | None:
        at = self.admitted_at
        return None if at is None else max(0.0, (self.now - at).total_seconds())

    @property
    def gpus(self) -> int:
        """GPUs the Workload's admission holds (resourceUsage, else count x template request)."""
        return int(self.model.gpus_admitted)

    @property
    def owner(self) -> JSON | None:
        """The direct owner (the record names it)."""
        return self.owners[0] if self.owners else None

    @property
    def exempt_by(self) -> str | None:
        """"Workload <name>" or "<Kind> <name>" carrying gpuaas.io/idle-policy: exempt anywhere up the owner chain,
        else None."""
        return exempt_by(self.workload, *self.owners)

    def facts(self, request: IdleRequest, policy: IdlePolicy) -> IdleFacts:
        """The plain facts `judge` reads; idleness is judged over the tenant's window and threshold."""
        name = (self.workload or {}).get("metadata", {}).get("name", request.workload)
        target = f"{request.namespace}/{name}"
        if self.workload is None:
            return IdleFacts(target=target, found=False, not_found=self.resolution)
        activity = self.activity
        not_idle = idle_summary = None
        if activity is not None:
            not_idle = activity.why_not_idle(policy.threshold, policy.min_coverage, expected=self.pod_gpus,
                                             held=self.gpus)
            if not_idle is None:
                idle_summary = (f"all {len(activity.gpus)} GPU(s) of {len(self.pods)} pod(s) stayed at or below "
                                f"{policy.threshold:.0%} for {policy.window_seconds:g}s "
                                f"(max {activity.max_activity or 0:.1%}, coverage {activity.coverage:.0%})")
        return IdleFacts(
            target=target, finished=self.is_true("Finished"),
            released=self.released_record is not None or not self.active,
            released_at=(self.released_record or {}).get("releasedAt"), admitted=self.is_true("Admitted"),
            exempt_by=self.exempt_by, runtime_seconds=self.runtime_seconds or 0.0, pods=len(self.pods),
            metrics_error=self.metrics_error, activity_observed=activity is not None, not_idle=not_idle,
            busy=activity is not None and (activity.max_activity or 0.0) > policy.threshold,
            idle_summary=idle_summary or "", releases_last_hour=self.releases_last_hour, tenant=self.tenant,
            gpus=self.gpus, kind=self.kind, evidence=self.evidence, demand=self.demand)

    # -- what the entry point reads (steps.reactions.run_planned convention) ----------------------
    @property
    def workload_object(self) -> JSON | None:
        return self.workload

    @property
    def workload_ref(self) -> JSON | None:
        return self.model.ref() if self.workload else None

    def observed(self) -> JSON:
        """The record's `observed` section."""
        return {
            "resolution": self.resolution, "tenant": self.tenant,
            "owner": None if not self.owner else {"kind": self.owner.get("kind"),
                                                  "name": (self.owner.get("metadata") or {}).get("name")},
            "admitted": self.is_true("Admitted"), "finished": self.is_true("Finished"), "active": self.active,
            "runtimeSeconds": self.runtime_seconds, "gpus": self.gpus, "pods": list(self.pods),
            "podGpus": dict(self.pod_gpus),
            "exemptBy": self.exempt_by, "releasesLastHour": self.releases_last_hour,
            "released": self.released_record, "activity": self.activity.as_dict() if self.activity else None,
            "metricsError": self.metrics_error, "kind": self.kind,
            "kindEvidence": self.evidence.to_dict() if self.evidence else None,
            "demand": ({"helps": self.demand.helps, "reason": self.demand.reason, **self.demand.details}
                       if self.demand else None),
        }


JUDGE_GATES = ("not-found", "finished", "released", "not-admitted", "exempt", "release-off", "too-young", "no-pods",
               "metrics-error", "not-observed", "no-evidence", "kind-busy", "not-idle", "hourly-budget", "no-demand",
               "release")
"""The rules of `judge`, in the order it applies them."""


@dataclass(frozen=True)
class IdleDecision:
    """What to do and why. `verdict`: release | no-op | skipped-by-policy | retry."""

    verdict: str
    reasons: tuple[str, ...]
    dry_run: bool = False
    gpus: int = 0
    details: Mapping[str, Any] = field(default_factory=dict)
    gate: str = ""
    """Which rule of `judge` decided (JUDGE_GATES), so a replay can count outcomes by rule."""
    evidence: str = ""
    """Which evidence the decision rests on: the kind's own source with GPU activity as a guard, or GPU
    activity alone (and why), for the record."""

    @property
    def releases(self) -> bool:
        return self.verdict == "release"


@dataclass(frozen=True)
class IdleFacts:
    """Everything the idle judgement reads, as plain values.

    The step derives them from what it observed (`IdleState.facts`); `gpuaas simulate` derives
    them from a replayed history. Both then call the same `judge`, so the simulator applies the
    production decision, not a copy of it.
    """

    target: str
    """"<namespace>/<workload>", for the reasons."""
    found: bool = True
    not_found: str = ""
    """Why the workload was not found (the resolution), when `found` is False."""
    finished: bool = False
    released: bool = False
    """A gpuaas release record is on the workload/owner, or the Workload is inactive."""
    released_at: str | None = None
    admitted: bool = True
    exempt_by: str | None = None
    runtime_seconds: float = 0.0
    pods: int = 0
    metrics_error: str | None = None
    activity_observed: bool = True
    not_idle: str | None = None
    """Why the GPUs are not provably idle (steps.gateways.metrics); None when idleness is confirmed."""
    busy: bool = False
    """A GPU went above the threshold in the window (activity), as opposed to samples missing: activity cancels a
    pending idle warning (steps.warning), a hole in the data does not."""
    idle_summary: str = ""
    """How idle they were, for the release reason ("all 4 GPU(s) of 2 pod(s) stayed at or below ...")."""
    releases_last_hour: int = 0
    tenant: str | None = None
    gpus: int = 0
    kind: str | None = None
    """The policy kind (steps.policy.KINDS) of the workload."""
    evidence: Evidence | None = None
    """The kind's own evidence that its work is done (steps.signals), when the kind has a source and the
    policy reads it; None when it was not read."""
    demand: DemandVerdict | None = None
    """Whether a release helps queued work or lets the node pool shrink (steps.demand), read when the
    policy releases on demand."""


def judge(facts: IdleFacts, policy: IdlePolicy, *, dry_run_requested: bool = False) -> IdleDecision:
    """The idle reaction's whole judgement over plain facts, in order (pure, table-tested):
    nothing to release -> no-op; exempt / too young -> skipped-by-policy; no pods -> no-op;
    Prometheus down -> retry; the kind's own evidence says the work goes on -> no-op (missing evidence:
    the policy's withoutSignal: GPU activity alone, or skipped-by-policy); the GPUs not provably idle
    (the guard) -> no-op; hourly budget used -> skipped-by-policy; releasing on demand and nobody would
    use the GPUs -> skipped-by-policy; else release (dry-run when asked or when the tenant's mode is
    dry-run). The decision names the evidence it rests on."""
    target = facts.target
    if not facts.found:
        return IdleDecision("no-op", (facts.not_found or f"workload {target} not found; nothing to release",),
                            gate="not-found")
    if facts.finished:
        return IdleDecision("no-op", (f"workload {target} has finished; on-finished releases what is left",),
                            gate="finished")
    if facts.released:
        when = facts.released_at
        return IdleDecision("no-op", (f"workload {target} is already released" + (f" (at {when})" if when else "")
                                      + "; repeated alerts are expected",), gate="released")
    if not facts.admitted:
        return IdleDecision("no-op", (f"workload {target} is not admitted; it holds no GPUs to release",),
                            gate="not-admitted")
    if facts.exempt_by:
        return IdleDecision("skipped-by-policy", (f"{facts.exempt_by} is annotated {EXEMPT_KEY}: {EXEMPT_VALUE}",),
                            gate="exempt")
    if policy.release_on == "never":
        return IdleDecision("skipped-by-policy", (
            (f"the policy does not release {facts.kind or policy.kind or 'this kind of'} workloads "
            "(idle.releaseOn: never)"),), gate="release-off")
    runtime = facts.runtime_seconds
    if runtime < policy.min_runtime_seconds:
        return IdleDecision("skipped-by-policy", (
            (f"workload {target} has run {runtime:.0f}s since admission, less than the minimum runtime "
            f"{policy.min_runtime_seconds:g}s"),), gate="too-young")
    if not facts.pods:
        return IdleDecision("no-op", (f"workload {target} has no running pods; idleness cannot be confirmed",),
                            gate="no-pods")
    if facts.metrics_error:
        return IdleDecision("retry", (f"idleness cannot be confirmed now: {facts.metrics_error}",), gate="metrics-error")
    if not facts.activity_observed:
        return IdleDecision("no-op", ("GPU activity was not observed",), gate="not-observed")
    kind = policy.kind or facts.kind
    source = SIGNAL_OF_KIND.get(kind or "") if policy.signal != "none" else None
    if policy.signal == "none":
        evidence_used = "GPU activity (idle.signal: none)"
    else:
        evidence_used = "GPU activity" + (f" (a {kind} workload has no source of its own)" if kind and not source else "")
    if source:
        evidence = facts.evidence
        if evidence is None or evidence.done is None:
            missing = evidence.reason if evidence is not None else f"{source} was not read"
            if policy.without_signal == "keep":
                return IdleDecision("skipped-by-policy", (
                    (f"the {kind}'s own evidence is missing ({missing}) and the policy keeps it without "
                    "(idle.withoutSignal: keep)"),), gate="no-evidence", evidence=f"{source}: missing")
            evidence_used = f"GPU activity alone ({source} missing: {missing}; idle.withoutSignal: gpu)"
        elif evidence.done is False:
            return IdleDecision("no-op", (f"{source}: {evidence.reason}",), gate="kind-busy",
                                evidence=f"{source}: {evidence.reason}")
        else:
            evidence_used = f"{source}: {evidence.reason}; GPU activity as the guard"
    if facts.not_idle:
        return IdleDecision("no-op", (facts.not_idle,), gate="not-idle", evidence=evidence_used,
                            details={"activity": facts.busy})
    if policy.max_releases_per_hour <= 0 or facts.releases_last_hour >= policy.max_releases_per_hour:
        return IdleDecision("skipped-by-policy", (
            (f"tenant {facts.tenant} already had {facts.releases_last_hour} release(s) in the last hour "
            f"(maximum {policy.max_releases_per_hour})"),), gate="hourly-budget", evidence=evidence_used)
    reasons = [facts.idle_summary, f"evidence: {evidence_used}"]
    if policy.release_on == "demand":
        demand = facts.demand
        if demand is None or not demand.helps:
            why = demand.reason if demand is not None else "the cohort's queue was not observed"
            return IdleDecision("skipped-by-policy", ((f"idle, but releasing it helps nobody now: {why} "
                                                      "(idle.releaseOn: demand)"),), gate="no-demand",
                                evidence=evidence_used)
        reasons.append(f"demand: {demand.reason}")
    dry_run = dry_run_requested or policy.mode == "dry-run"
    if dry_run:
        reasons.append("dry-run: " + ("requested by the dry-run parameter" if dry_run_requested
                                      else f"tenant {facts.tenant} policy mode is dry-run"))
    return IdleDecision("release", tuple(reasons), dry_run=dry_run, gpus=facts.gpus, gate="release",
                        evidence=evidence_used)


def decide(request: IdleRequest, state: IdleState, policy: IdlePolicy) -> IdleDecision:
    """The idle reaction's whole judgement: the observed state's facts, judged (pure, table-tested)."""
    return judge(state.facts(request, policy), policy, dry_run_requested=request.dry_run)


def parse_request(params: Mapping[str, str]) -> IdleRequest:
    """Validate the step parameters: `namespace`, `workload`, `pod` (optional), `alert` (JSON), `dry-run`.

    Raises steps.plan.RejectedInput (a ValueError) naming the field.
    """
    from steps.plan import RejectedInput

    alert_raw = (params.get("alert") or "").strip()
    alert: IdleAlert | None = None
    if alert_raw:
        from steps.json_text import load

        data = load("alert", alert_raw, "idle-alerts writes it; check the on-idle template's withParam wiring")
        alert = IdleAlert.from_alert(data, "alert")
    namespace = (params.get("namespace") or (alert.namespace if alert else "")).strip()
    pod = (params.get("pod") or (alert.pod if alert else "")).strip()
    workload = (params.get("workload") or "").strip()
    if not namespace:
        raise RejectedInput("namespace", "the workload's namespace (or an alert with a namespace label)", "nothing")
    if not workload and not pod:
        raise RejectedInput("workload", "a Workload name, or an alert/pod to resolve it from", "neither")
    if alert and alert.namespace and alert.namespace != namespace:
        raise RejectedInput("alert.labels.namespace", f"{namespace!r} (the namespace parameter)", repr(alert.namespace))
    from steps.names import is_dns_subdomain

    if pod and not is_dns_subdomain(pod):
        # It becomes part of the API path (GET .../pods/<pod>): JSON or an over-long value would be a URL no
        # API server takes (414), and a failed step instead of a clear rejection.
        shown = pod if len(pod) <= 80 else f"{pod[:77]}... ({len(pod)} characters)"
        raise RejectedInput("pod", "a pod name (at most 253 ASCII lower-case letters, digits, '-', '.')", repr(shown))
    dry = (params.get("dry-run") or "false").strip().lower()
    if dry not in ("true", "false"):
        raise RejectedInput("dry-run", '"true" or "false"', repr(dry))
    return IdleRequest(namespace=namespace, workload=workload, pod=pod, alert=alert, dry_run=dry == "true")


# -- observe (edges: Kubernetes API and Prometheus) ------------------------------------------------
RELEASED_EVENT_REASON = "GPUaaSWorkersReleased"


def releases_in_last_hour(kube: Any, tenant: str | None, now: datetime) -> int:
    """Releases recorded for the tenant's namespaces in the last hour, counted from the
    `GPUaaSWorkersReleased` Events the record step writes on Workloads (ARCHITECTURE §3).

    The tenant's namespaces are those whose LocalQueues point at its ClusterQueue. Events are
    aggregated per message, so `count` is summed when the last one falls inside the hour.
    """
    from steps.gateways.resources import EVENT, LOCAL_QUEUE

    if not tenant:
        return 0
    namespaces = {(lq.get("metadata") or {}).get("namespace") for lq in kube.list(LOCAL_QUEUE)
                  if ((lq.get("spec") or {}).get("clusterQueue")) == tenant}
    total = 0
    for event in kube.list(EVENT):
        if event.get("reason") != RELEASED_EVENT_REASON:
            continue
        involved = event.get("involvedObject") or {}
        if involved.get("kind") != "Workload" or involved.get("namespace") not in namespaces:
            continue
        stamp = event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp")
        if not stamp:
            continue
        when = datetime.fromisoformat(str(stamp))
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        if (now - when).total_seconds() <= 3600:
            total += int(event.get("count") or 1)
    return total


# -- the step (steps.reactions convention) ----------------------------------------------------------
@dataclass
class OnIdleState:
    """steps-core's WorkloadState (owners, tenant, ScaledObjects, release record) plus the idle facts."""

    workload_state: Any
    idle: IdleState
    request: IdleRequest
    run_name: str = ""
    """The Argo run's name (StepContext.run_name): what a warning names for a reader."""
    warning_event_missing: bool = False
    """A pending warning not yet marked notified (its run wrote the annotation and stopped before telling the owner)
    has no Event (GPUIdleWarning on the owner's object): the next delivery within the grace writes it. Read only
    for such a warning: a notified warning's Event may have expired (--event-ttl), and is never written again."""

    @property
    def workload_object(self) -> JSON | None:
        return self.workload_state.workload_object

    @property
    def workload_ref(self) -> JSON | None:
        return self.workload_state.workload_ref

    @property
    def tenant(self) -> str | None:
        return self.workload_state.tenant

    @property
    def cohort(self) -> str | None:
        return self.workload_state.cohort

    @property
    def event_summary(self) -> JSON | None:
        alert = self.request.alert
        if alert is None:
            return None
        return {"type": "alertmanager", "alertname": alert.alertname, "status": alert.status,
                "subject": f"{alert.namespace}/{alert.pod}", "fingerprint": alert.fingerprint, "time": alert.starts_at}

    def observed(self) -> JSON:
        from steps.warning import read_warning

        warning = read_warning(self.idle.workload)
        return {**self.workload_state.observed(),
                "idle": {**self.idle.observed(), "warning": warning.to_dict() if warning else None}}


def observe_step(context: Any, request: Any) -> OnIdleState:
    """observe for run_planned: pod -> Workload, then steps-core's Workload state, then the idle facts."""
    from dataclasses import replace as dc_replace

    from steps.gateways.metrics import MetricsError
    from steps.model.state import observe_workload
    from steps.reactions.idle_alerts import pod_gpus_of_workload, resolve_pod_workload

    idle_request = parse_request(context.params)
    kube, now = context.kube, context.now()
    name, resolution = idle_request.workload, ""
    if idle_request.pod:
        found = resolve_pod_workload(kube, idle_request.namespace, idle_request.pod)
        if found.workload_name:
            resolution = f"pod {idle_request.namespace}/{idle_request.pod} -> Workload {found.workload_name}"
            if name and name != found.workload_name:
                resolution += f" (the alert item named {name}; the live owner chain wins)"
            name = found.workload_name
        else:
            resolution = found.reason + (f"; Workload {name} read by name" if name else "")
    # The `event` parameter of on-idle is an Alertmanager event, not a Workload event.
    workload_request = dc_replace(request, namespace=idle_request.namespace, workload=name or "", event="")
    ws = observe_workload(context, workload_request) if name else None
    workload = ws.workload_object if ws is not None else None
    if ws is None:
        from steps.model.state import WorkloadState

        ws = WorkloadState(now=now, event=None, workload=None)
    if workload is None:
        return OnIdleState(ws, IdleState(now=now, workload=None, resolution=resolution or
                                         f"Workload {idle_request.namespace}/{name} not found"), idle_request)
    from steps.policy import kind_of

    kind = kind_of(ws.owners.kinds())
    settings = judged_settings(context.policy.idle_for(ws.tenant, kind), workload, idle_request.alert, now)
    pod_gpus = pod_gpus_of_workload(kube, workload)
    pods = tuple(sorted(pod_gpus))
    activity, metrics_error = None, None
    if pods:
        try:
            activity = context.metrics.gpu_activity(idle_request.namespace, pods, settings.window_seconds,
                                                    at=now.timestamp())
        except MetricsError as error:
            if not getattr(error, "transient", False):
                raise
            metrics_error = str(error)
    evidence = demand = None
    if pods and not metrics_error and ws.release is None:
        try:
            evidence = read_evidence(context, kind, settings, ws.owners, idle_request.namespace, pods, now)
        except MetricsError as error:  # transient only (read_evidence): Prometheus failed between two reads
            metrics_error = str(error)
        if settings.release_on == "demand":
            demand = observe_demand(kube, ws, workload, pod_gpus, settings)
    idle = IdleState(now=now, workload=workload, resolution=resolution or f"Workload {name} read by name",
                     tenant=ws.tenant, owners=ws.owners.objects, pods=pods, pod_gpus=pod_gpus, activity=activity,
                     metrics_error=metrics_error, releases_last_hour=releases_in_last_hour(kube, ws.tenant, now),
                     released_record=ws.release, kind=kind, evidence=evidence, demand=demand)
    return OnIdleState(ws, idle, idle_request, getattr(context, "run_name", "") or "",
                       _warning_event_missing(kube, ws.owners.top or workload, workload, idle_request.namespace))


def _warning_event_missing(kube: Any, owner: JSON, workload: JSON, namespace: str) -> bool:
    """Whether the pending warning on the Workload lacks its Event (one read, only when a warning is pending and its
    owner was not told yet)."""
    from steps.gateways.resources import EVENT
    from steps.warning import WARNING_REASON, event_key, event_name, read_warning

    warning = read_warning(workload)
    if warning is None or not warning.pending or warning.notified_at:
        return False
    meta = owner.get("metadata") or {}
    name = event_name(str(meta.get("name", "")), str(meta.get("uid") or ""), event_key(warning), WARNING_REASON)
    return kube.get(EVENT, name, meta.get("namespace") or namespace) is None


def read_evidence(context: Any, kind: str, settings: IdleSettings, owners: Any, namespace: str,
                  pods: tuple[str, ...], now: datetime) -> Evidence | None:
    """The kind's own evidence over its window, from the API the kind has (steps.signals); None when the
    policy reads none for this kind. A source that cannot be read is Evidence(done=None), never a failure,
    except Prometheus failing (MetricsUnavailable, transient): the step has just read GPU activity from it,
    so that is raised and retried like GPU activity, not read as missing evidence (`withoutSignal: gpu`
    would then release on GPU activity alone because of a timeout)."""
    from steps import signals
    from steps.gateways.metrics import MetricsError
    from steps.gateways.workload_apis import WorkloadApiError, WorkloadApis, jupyter_url, ray_dashboard_url

    source = signals.SIGNAL_OF_KIND.get(kind) if settings.signal != "none" else None
    if not source:
        return None
    window, at = settings.window_seconds, now.timestamp()
    apis = getattr(context, "workload_apis", None) or WorkloadApis()
    if source == "jupyter":
        notebook = owners.find("Notebook")
        if notebook is None:
            return signals.Evidence("jupyter", None, "no Notebook owns the workload: no Jupyter server to ask")
        try:
            kernels, status = apis.jupyter(jupyter_url(notebook, settings.signal_url))
        except WorkloadApiError as error:
            return signals.jupyter_evidence(None, None, at, window, error=str(error))
        return signals.jupyter_evidence(kernels, status, at, window)
    if source == "ray-jobs":
        rayjob = owners.find("RayJob")
        if rayjob is not None and not settings.signal_url:
            return signals.rayjob_status_evidence(rayjob.get("status"), at, window)
        cluster = owners.find("RayCluster") or rayjob
        if cluster is None:
            return signals.Evidence("ray-jobs", None, "no RayCluster owns the workload: no Ray dashboard to ask")
        try:
            jobs = apis.ray_jobs(ray_dashboard_url(cluster, settings.signal_url))
        except WorkloadApiError as error:
            return signals.ray_jobs_evidence(None, at, window, error=str(error))
        return signals.ray_jobs_evidence(jobs, at, window)
    metrics = context.metrics
    if source == "requests":
        counters = (*signals.REQUEST_COUNTERS, *((settings.request_metric,) if settings.request_metric else ()))
        try:
            served = metrics.counter_increase(counters, namespace, pods, window, at=at)
            in_flight = metrics.gauge_max(signals.REQUEST_GAUGES, namespace, pods, window, at=at)
        except MetricsError as error:
            if getattr(error, "transient", False):
                raise
            return signals.requests_evidence(None, None, window, counters, error=str(error))
        return signals.requests_evidence(served, in_flight, window, (*counters, *signals.REQUEST_GAUGES))
    if source == "progress":
        if not settings.progress_metric:
            return signals.progress_evidence(None, "", window)
        try:
            increase = metrics.counter_increase((settings.progress_metric,), namespace, pods, window, at=at)
        except MetricsError as error:
            if getattr(error, "transient", False):
                raise
            return signals.progress_evidence(None, settings.progress_metric, window, error=str(error))
        return signals.progress_evidence(increase, settings.progress_metric, window)
    return None


def observe_demand(kube: Any, ws: Any, workload: JSON, pod_gpus: Mapping[str, int],
                   settings: IdleSettings) -> DemandVerdict:
    """Whether releasing the workload helps someone (steps.demand): the cohort's pending Workloads and
    unused GPU quota (its ClusterQueues' nominal quota minus usage), and the GPU nodes the release would
    empty (their other pods hold no GPU)."""
    from steps import demand as demand_model
    from steps.cluster_queue import gpu_quotas, gpus_in_use
    from steps.gateways.resources import CLUSTER_QUEUE, LOCAL_QUEUE, NODE, POD, WORKLOAD, WORKLOAD_V1BETA1
    from steps.model.tenancy import cohort_of

    tenant, cohort = ws.tenant, ws.cohort
    queues = [cq for cq in kube.list(CLUSTER_QUEUE)
              if (cohort and cohort_of(cq) == cohort) or (cq.get("metadata") or {}).get("name") == tenant]
    names = {(cq.get("metadata") or {}).get("name") for cq in queues}
    free = sum(sum(gpu_quotas(cq).values()) - sum(gpus_in_use(cq).values()) for cq in queues)
    local = {((lq.get("metadata") or {}).get("namespace"), (lq.get("metadata") or {}).get("name")):
             (lq.get("spec") or {}).get("clusterQueue") for lq in kube.list(LOCAL_QUEUE)}
    pending: list[tuple[str, int]] = []
    for obj in kube.list(WORKLOAD_V1BETA1 if Workload(workload).version == "v1beta1" else WORKLOAD):
        other = Workload(obj)
        if not other.active or other.has_quota or other.is_finished:
            continue
        if local.get((other.namespace, other.queue_name)) not in names:
            continue
        pending.append((f"{other.namespace}/{other.name}", int(other.gpus_requested)))
    pending.sort(key=lambda item: item[1])
    emptied: list[str] = []
    if settings.node_pool_autoscaled:
        namespace = (workload.get("metadata") or {}).get("namespace")
        ours = set(pod_gpus)
        nodes = {(kube.get(POD, pod, namespace) or {}).get("spec", {}).get("nodeName") for pod in ours}
        known = {(n.get("metadata") or {}).get("name") for n in kube.list(NODE)}  # list: the steps may not get a node
        for node in sorted(n for n in nodes if n):
            others = [pod for pod in kube.list(POD) if (pod.get("spec") or {}).get("nodeName") == node
                      and not ((pod.get("metadata") or {}).get("namespace") == namespace
                               and (pod.get("metadata") or {}).get("name") in ours)
                      and (pod.get("status") or {}).get("phase") in ("Pending", "Running")
                      and _pod_gpus(pod) > 0]
            if not others and node in known:
                emptied.append(node)
    model = demand_model.Demand(cohort=cohort or tenant, pending=tuple(pending), free_gpus=max(int(free), 0),
                                emptied_nodes=tuple(emptied), node_pool_autoscaled=settings.node_pool_autoscaled)
    return demand_model.verdict(model, int(Workload(workload).gpus_admitted))


def _pod_gpus(pod: Mapping[str, Any]) -> int:
    from steps.model.workload import GPU, quantity

    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        requests = (container.get("resources") or {}).get("requests") or {}
        total += int(quantity(limits.get(GPU) or requests.get(GPU) or 0))
    return total


def plan_step(request: Any, state: OnIdleState, policy: Any) -> Any:
    """plan for run_planned: the idle decision, then release-workers' plan for the kind (pure).

    A decision of `retry` (Prometheus unreachable when it matters) raises MetricsUnavailable, which
    the entry point records as a transient failure (exit 75; Argo retries).
    """
    from dataclasses import replace as dc_replace

    from steps.gateways.metrics import MetricsUnavailable
    from steps.plan import Outcome, Plan
    from steps.reactions import release_workers

    repeat = _repeat(state)
    if repeat is not None:
        return Plan.nothing(repeat)
    if state.workload_state.release is not None and state.workload_state.workload is not None:
        # Released already: complete what an earlier attempt left (the Workload's copy of the
        # record) and record this run's own release whose answer was lost (release-workers' rules).
        named = dc_replace(request, namespace=state.request.namespace,
                           workload=(state.idle.workload or {}).get("metadata", {}).get("name", ""))
        completion = release_workers.plan(named, state.workload_state, policy, by=REACTION)
        if completion.actions:
            gpus = float(completion.metrics.get("gpusReleased", 0.0))
            # The release is this episode's reaction: it is marked too (an Alertmanager re-send is a repeat).
            return _with_episode(Plan(completion.actions, completion.reasons, completion.empty_outcome,
                                      {"gpusReleased": gpus, "gpuHoursFreedPerHour": gpus} if gpus else {},
                                      completion.event), state, request.dry_run)
    settings = judged_settings(policy.idle_for(state.tenant, state.idle.kind), state.idle.workload, state.request.alert,
                               state.idle.now)
    decision = decide(state.request, state.idle, settings)
    if decision.verdict == "retry":
        raise MetricsUnavailable(decision.reasons[0])
    period = grace_of(state, settings, decision)
    if period.step == "cancel":
        return _warning_plan(state, settings, period, decision.reasons, request.dry_run)
    if period.step == "lapse":
        # recorded on the annotation and in the run's record; the owner is told by the next warning, if any
        return WarningPlan((_warning_write(state, period.warning, conditional=True, why="record that the warning lapsed"),),
                           (*period.reasons, *decision.reasons), Outcome.NO_OP, {}, None, request.dry_run)
    if decision.verdict != "release":
        outcome = Outcome.SKIPPED_BY_POLICY if decision.verdict == "skipped-by-policy" else Outcome.NO_OP
        return Plan.nothing(*decision.reasons, outcome=outcome)
    if period.step == "wait":
        told = period.warning is None or not period.warning.pending or period.warning.notified_at
        if not told and not (request.dry_run or decision.dry_run):
            return _warning_plan(state, settings, dc_replace(period, step="warn"), decision.reasons, False,
                                 complete=True)
        return Plan.nothing(*period.reasons, *decision.reasons)
    if period.step == "warn":
        return _warning_plan(state, settings, period, decision.reasons,
                             request.dry_run or decision.dry_run)
    named = dc_replace(request, namespace=state.request.namespace,
                       workload=(state.idle.workload or {}).get("metadata", {}).get("name", ""))
    linked = f"; after the warning {period.warning.describe()}" if period.warning is not None else ""
    release = release_workers.plan(named, state.workload_state, policy, by=REACTION,
                                   reason=f"idle: {decision.reasons[0]}{linked}")
    dry_run = decision.dry_run or release.dry_run or request.dry_run
    gpus = float(release.metrics.get("gpusReleased", 0)) if release.actions else 0.0
    metrics = {"gpusReleased": 0.0 if dry_run else gpus, "gpuHoursFreedPerHour": 0.0 if dry_run else gpus}
    if dry_run:
        metrics["gpusReleasedIfEnforced"] = gpus
    reasons = (*release.reasons, *decision.reasons[1:], *period.reasons)
    actions = release.actions
    if period.warning is not None and release.actions:
        actions = (*actions, _warning_write(state, period.warning, conditional=False,
                                            why="record on the warning that the release followed it"))
    elif period.superseded is not None and release.actions:
        actions = (*actions, _warning_write(state, period.superseded, conditional=False,
                                            why="record that the warning lapsed (released without it: warnFor 0)"))
    # A release the sweep delivered (no alert) answers the warned episode: marked too, so a later re-send of that
    # alert is a repeat.
    episode = period.warning.episode if period.warning is not None else ""
    return _with_episode(Plan(actions, reasons, release.empty_outcome, metrics, release.event, dry_run),
                         state, request.dry_run, episode=episode)


def judged_settings(settings: IdleSettings, workload: JSON | None, alert: IdleAlert | None, now: datetime
                    ) -> IdleSettings:
    """The tenant's idle settings with the span this judgement reads (steps.warning.judged_seconds): the window, or
    all the time since a pending warning this delivery acts on. observe reads Prometheus and the kind's evidence
    over it, and plan judges with it (same inputs, same span)."""
    from dataclasses import replace as dc_replace

    from steps.warning import judged_seconds, read_warning

    model = Workload(workload or {})
    span = judged_seconds(settings.window_seconds, read_warning(workload), (alert.episode if alert else "") or "", now,
                          uid=model.uid or "", admitted_at=model.admitted_at)
    return settings if span == settings.window_seconds else dc_replace(settings, window_seconds=span)


def grace_of(state: OnIdleState, settings: IdleSettings, decision: IdleDecision) -> Any:
    """The grace period (steps.warning.grace) applied to this run's decision, with the live warning."""
    from steps.warning import grace, read_warning

    alert = state.request.alert
    model = state.idle.model
    return grace(decision.verdict, decision.gate, decision.reasons, settings.warn_seconds,
                 read_warning(state.idle.workload), (alert.episode if alert else "") or "", state.idle.now,
                 state.run_name or state.workload_state.run_id or "hand", activity=bool(decision.details.get("activity", True)),
                 uid=model.uid or "", admitted_at=model.admitted_at)


def _warning_write(state: OnIdleState, warning: Any, *, conditional: bool, why: str) -> Any:
    """The annotation gpuaas.io/idle-warning on the Workload (merge patch; conditional on the version this run read,
    so of two runs that warn for one episode only one writes: the other re-reads and finds the warning)."""
    from steps.gateways.resources import WORKLOAD, WORKLOAD_V1BETA1
    from steps.plan import Action
    from steps.warning import WARNING_ANNOTATION

    workload = state.idle.workload or {}
    meta = workload.get("metadata") or {}
    resource = WORKLOAD_V1BETA1 if str(workload.get("apiVersion", "")).endswith("/v1beta1") else WORKLOAD
    before = ((meta.get("annotations") or {}).get(WARNING_ANNOTATION))
    return Action(f"idle-warning-{warning.state}", resource, str(meta.get("name")), str(meta.get("namespace")),
                  f"{why} (annotation {WARNING_ANNOTATION})",
                  patch={"metadata": {"annotations": {WARNING_ANNOTATION: warning.text()}}},
                  resource_version=(str(meta.get("resourceVersion") or "") or None) if conditional else None,
                  before={"metadata": {"annotations": {WARNING_ANNOTATION: before}}})


def _warning_plan(state: OnIdleState, settings: IdleSettings, period: Any, decision_reasons: tuple[str, ...],
                  dry_run: bool, *, complete: bool = False) -> Any:
    """Warn (or cancel a warning): the annotation on the Workload, then an Event on the owner's object (the
    Workload when it has none), then the mark `notifiedAt` on the annotation, then the tenant's webhook
    (steps.reactions.on_idle.apply_with_notice). `complete`: a pending warning whose run stopped before the mark:
    the Event if it is missing, the mark, the webhook."""
    from steps.gateways.resources import EVENT
    from steps.plan import Action, Outcome
    from steps.warning import CANCELLED_REASON, WARNING_REASON, event_body, event_key, notice, warning_message

    warning = period.warning
    workload = state.idle.workload or {}
    owner = state.workload_state.owners.top or workload
    namespace = state.request.namespace
    target = f"{namespace}/{(workload.get('metadata') or {}).get('name', '')}"
    gpus = state.idle.gpus
    if period.step == "warn":
        message = warning_message(warning, f"{owner.get('kind', 'Workload')} {target.split('/')[0]}/"
                                           f"{(owner.get('metadata') or {}).get('name', '')}", gpus)
        reason, kind, why = WARNING_REASON, "Warning", "warn the owner that the idle GPUs will be released"
        reasons = (*period.reasons, *decision_reasons)
    else:
        message = f"{target}: the idle warning is cancelled ({warning.reason}); nothing will be released for it"
        reason, kind, why = CANCELLED_REASON, "Normal", "record that the warning is cancelled"
        reasons = period.reasons
    annotations = {"gpuaas.io/idle-warning-release-after": warning.release_after,
                   "gpuaas.io/idle-warning-run": warning.run if period.step == "warn" else warning.by}
    body = event_body(owner, namespace, reason, message, kind, state.idle.now, event_key(warning), annotations)
    event = Action(f"event-{reason}", EVENT, body["metadata"]["name"], body["metadata"]["namespace"],
                   f"{why}: Event {reason} on {owner.get('kind', 'Workload')} "
                   f"{(owner.get('metadata') or {}).get('name', '')}", operation="create", body=body)
    if complete:
        # the warning's run wrote the annotation and stopped before it marked the owner told (so before the webhook)
        told = "no Event" if state.warning_event_missing else "its Event but no mark that its owner was told"
        reasons = (f"the pending warning has {told} (its run stopped before telling the owner): told now",
                   *period.reasons)
        actions: tuple[Any, ...] = ((event,) if state.warning_event_missing else ()) + (
            _notified_write(state, warning, warning.raw),)
    elif period.step == "warn":
        actions = (_warning_write(state, warning, conditional=True, why=why), event)
        if not dry_run:
            actions += (_notified_write(state, warning, warning.text()),)
    else:
        actions = (_warning_write(state, warning, conditional=True, why=why), event)
    hook = None
    if settings.warn_webhook:
        from steps.gateways.workload_apis import cluster_domain

        meta = owner.get("metadata") or {}
        url = settings.warn_webhook.format(name=meta.get("name", ""), namespace=meta.get("namespace") or namespace,
                                           domain=cluster_domain())
        hook = (url, notice(warning, target, owner, state.tenant, gpus, message))
    return WarningPlan(actions, reasons, Outcome.NO_OP, {}, None, dry_run, notice=hook)


def _notified_write(state: OnIdleState, warning: Any, expected: str) -> Any:
    """The mark `notifiedAt` on a pending warning, written after its Event and before its webhook: a JSON patch that
    tests the annotation is still `expected` (the text this run wrote or read), so of two runs that would tell the
    owner only one marks (the other meets a Conflict, reads again and finds the mark) and only that one POSTs.
    gpuaas' own bookkeeping (never an effect of its own)."""
    from dataclasses import replace as dc_replace

    from steps.delivery import annotation_path
    from steps.gateways.resources import WORKLOAD, WORKLOAD_V1BETA1
    from steps.plan import Action
    from steps.warning import WARNING_ANNOTATION, rfc3339

    workload = state.idle.workload or {}
    meta = workload.get("metadata") or {}
    resource = WORKLOAD_V1BETA1 if str(workload.get("apiVersion", "")).endswith("/v1beta1") else WORKLOAD
    marked = dc_replace(warning, notified_at=rfc3339(state.idle.now), raw="")
    path = annotation_path(WARNING_ANNOTATION)
    return Action("idle-warning-notified", resource, str(meta.get("name")), str(meta.get("namespace")),
                  f"record on the warning that its owner is told (annotation {WARNING_ANNOTATION}, notifiedAt): no "
                  "later delivery tells them again, even once the Event has expired",
                  operation="json-patch", patch=[{"op": "test", "path": path, "value": expected},
                                                 {"op": "replace", "path": path, "value": marked.text()}],
                  before={"metadata": {"annotations": {WARNING_ANNOTATION: expected}}}, bookkeeping=True)


@dataclass(frozen=True)
class WarningPlan(Plan):
    """A warning's (or a cancel's) plan: its writes, and the tenant's webhook to tell (url, JSON body)."""

    notice: tuple[str, JSON] | None = None


def apply_with_notice(kube: Any, plan: Any, dry_run: bool, results: list[Any] | None = None,
                      post: Any = None) -> list[Any]:
    """steps.reactions.apply_actions, then, for a warning whose writes were applied, the tenant's webhook.

    The webhook is told after the annotation, the Event and the mark notifiedAt exist, so a run that fails before
    them tells nobody, and a re-sent alert finds the warning and tells nobody twice. A webhook that fails is an
    error of the run (result `failed`, the run's outcome failed: the tenant was not told as its policy asks, and
    `gpuaas audit` lists it), not retried: the Event and the annotation carry the warning."""
    from steps.plan import ActionResult
    from steps.reactions import apply_actions

    results = apply_actions(kube, plan, dry_run, results)
    hook = getattr(plan, "notice", None)
    if hook is None:
        return results
    url, body = hook
    target = {"apiVersion": "http", "kind": "Webhook", "name": url}
    if dry_run:
        results.append(ActionResult("notify-webhook", target, "dry-run", None, body))
        return results
    if not results or any(r.result != "applied" for r in results):
        return results
    try:
        from steps.gateways.notify import post_json

        status = (post or post_json)(url, body)
    except OSError as error:
        results.append(ActionResult("notify-webhook", target, "failed", None, None,
                                    f"the webhook {url} failed ({error}); the Event and the annotation carry the "
                                    "warning, and the webhook is not told again for it"))
        return results
    results.append(ActionResult("notify-webhook", target, "applied", None, {"status": status}))
    return results



def _repeat(state: OnIdleState) -> str | None:
    """Why this alert is a repeat of an episode already acted on, or being acted on by another run (the
    Workload's marker), else None. A claim older than the lease is a dead run's: this run takes it over."""
    from steps.delivery import CLAIMED, read_marker

    alert = state.request.alert
    marker = read_marker(state.idle.workload, REACTION)
    if alert is None or not alert.episode or marker is None or marker.transition != alert.episode:
        return None
    if marker.run and marker.run == state.workload_state.run_id:
        return None  # Argo's retry of this same run: its own claim or marker
    if marker.claim_is_stale(state.idle.now):
        return None
    if marker.state == CLAIMED:
        return (f"idle episode {alert.episode} is being acted on by {marker.describe()} (claimed; in progress): "
                "nothing done here")
    return (f"repeat of idle episode {alert.episode}: acted on by {marker.describe()}; Alertmanager re-sent the "
            "alert, nothing changes (a new episode starts when the alert resolves and fires again)")


def _with_episode(plan: Any, state: OnIdleState, dry_run_requested: bool, *, episode: str = "") -> Any:
    """A release (or a policy dry-run's would-be release) is the episode's reaction: claimed on the Workload
    before it acts and marked after (steps.delivery.claimed_and_marked: a second run for the episode fails
    its claim and records a repeat). `episode`: the warned episode a release without an alert answers (the
    sweep's delivery of a due warning)."""
    from dataclasses import replace as dc_replace

    from steps.delivery import VIA_EVENT, VIA_HAND, VIA_SWEEP, claimed_and_marked

    alert, workload = state.request.alert, state.idle.workload
    key = alert.episode if alert is not None and alert.episode else episode
    if not key or workload is None or dry_run_requested or not plan.actions:
        return plan
    run = state.workload_state.run_id or "hand"
    via = VIA_EVENT if alert is not None and alert.episode else (
        VIA_SWEEP if state.run_name.startswith("gpuaas-on-idle-w-") else VIA_HAND)
    actions = claimed_and_marked(plan, workload, REACTION, key, run=run, now=state.idle.now, via=via,
                                 what=f"idle episode {key}")
    return dc_replace(plan, actions=actions)


def step(context: Any) -> Any:
    """`python -m steps on-idle FILE` (one alert of the fan-out)."""
    from steps.reactions import run_planned

    return run_planned(context, observe=observe_step, plan=plan_step, apply=apply_with_notice, require_workload=False)
