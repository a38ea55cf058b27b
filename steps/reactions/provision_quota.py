"""provision-quota: give tenants GPU quota in the shared cohort, by hand or from node capacity.

Two modes (parameter `mode`; empty means `hand` when `tenant` is set, else `capacity`):

**hand** — create or resize one tenant's ClusterQueue (`kueue.x-k8s.io/v1beta2`, `cohortName` =
the shared cohort, a resource group covering `nvidia.com/gpu`, plus `cpu`/`memory` when the
policy sets `quota.cpuPerGpu`/`quota.memoryPerGpu`, on `flavor` with `nominalQuota = gpus`) and
its LocalQueue in `namespace`. Resizing below what the queue is using is refused (Kueue would keep
the admitted work running and its books would be wrong).

**capacity** — for every ResourceFlavor: sum allocatable `nvidia.com/gpu` over Ready,
schedulable Nodes matching the flavor's `spec.nodeLabels`, split it among the cohort's
ClusterQueues by the policy's weights and guarantees, never below what each is using
(`steps.capacity.split_capacity`), and patch `nominalQuota` only where it changes. A second run
against unchanged nodes is a `no-op`.

**Lent quota contract** (shared with on-finished). Hand mode with `workload` set lends `gpus` GPUs
to that Workload's ClusterQueue for the Workload's lifetime: nominalQuota of (flavor,
nvidia.com/gpu) goes up by `gpus` and the loan is recorded on the ClusterQueue as the annotation

    gpuaas.io/lent-gpus: '{"<namespace>/<workload>": {"flavor": "a100", "gpus": 2,
                           "uid": "<workload uid>", "lentAt": "<RFC 3339>"}}'

(one JSON object, one key per loan; helpers in `steps.cluster_queue`). on-finished returns it:
`return_loan_patch(cq, key)` gives the single merge patch that sets nominalQuota to the declared
quota plus the other loans (never below what the queue uses) and removes the key, conditional on the
ClusterQueue's resourceVersion. Every write records the GPU quota written
(`gpuaas.io/gpu-quota-written`), so a quota declared again by another writer is told apart. Capacity tracking keeps
loans: lent GPUs are set aside from the capacity before the split and added back on top.

Every write is a merge patch carrying `metadata.resourceVersion`; on 409 the reaction re-reads
and re-plans (bounded), so two runs racing never lose an update.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from steps.capacity import FlavorSplit, TenantClaim, flavor_capacity, split_capacity
from steps.cluster_queue import (
    LENDING_ANNOTATION,
    LENT_ANNOTATION,
    WRITTEN_ANNOTATION,
    Loan,
    admit_namespace,
    cohort_of,
    declared_gpus,
    fit_lending_limit,
    gpu_lending_limits,
    gpu_quotas,
    gpus_in_use,
    groups_equal,
    lending_annotation,
    loans_annotation,
    lowered_lending_limits,
    new_cluster_queue,
    new_local_queue,
    read_loans,
    return_loan_patch,
    set_gpu_quota,
    written_annotation,
    written_record,
)
from steps.names import is_dns_label, is_dns_subdomain
from steps.plan import ActionResult, Outcome, RejectedInput, StepReport

REACTION = "provision-quota"
EVENT_REASON = "GPUaaSQuotaProvisioned"
MODES = ("hand", "capacity")
MAX_GPUS = 1_000_000
"""More GPUs than any one tenant's quota: a larger number is a typo (or an attack), not a request."""
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")

JSON = dict[str, Any]

# on-finished's side of the lent-quota contract, re-exported where steps-core was told to find it.
__all__ = ["LENT_ANNOTATION", "REACTION", "read_loans", "return_loan_patch", "run", "step"]




# ------------------------------------------------------------------------------ settings

@dataclass(frozen=True)
class TenantQuotaSettings:
    weight: Fraction = Fraction(1)
    guarantees: Mapping[str, int] = field(default_factory=dict)   # flavor -> GPUs; "*" = any flavor
    flavors: tuple[str, ...] | None = None                        # None = every flavor

    def guarantee(self, flavor: str) -> int:
        return int(self.guarantees.get(flavor, self.guarantees.get("*", 0)))


@dataclass(frozen=True)
class QuotaSettings:
    """The policy's `quota` section plus per-tenant `tenants.<cq>.quota` overrides."""

    cohort: str = "gpuaas"
    queueing_strategy: str = "BestEffortFIFO"
    cpu_per_gpu: str | None = None
    memory_per_gpu: str | None = None
    local_queue: str | None = None                                 # None = named after the tenant
    default: TenantQuotaSettings = TenantQuotaSettings()
    tenants: Mapping[str, TenantQuotaSettings] = field(default_factory=dict)

    def for_tenant(self, cluster_queue: str) -> TenantQuotaSettings:
        return self.tenants.get(cluster_queue, self.default)

    @classmethod
    def from_policy(cls, policy: Any) -> QuotaSettings:
        """Read from steps-core's Policy object or the raw policy mapping (`quota:` + `tenants:`)."""
        raw = _policy_mapping(policy)
        quota = raw.get("quota") or {}
        if not isinstance(quota, Mapping):
            raise RejectedInput("policy.quota", "a mapping", quota, "fix the gpuaas-policy ConfigMap")
        default = _tenant_settings("policy.quota", quota, TenantQuotaSettings())
        tenants = {}
        for name, body in (raw.get("tenants") or {}).items():
            section = (body or {}).get("quota") if isinstance(body, Mapping) else None
            if section:
                tenants[name] = _tenant_settings(f"policy.tenants.{name}.quota", section, default)
        strategy = quota.get("queueingStrategy", "BestEffortFIFO")
        if strategy not in ("BestEffortFIFO", "StrictFIFO"):
            raise RejectedInput("policy.quota.queueingStrategy", "BestEffortFIFO or StrictFIFO", strategy,
                                "fix the gpuaas-policy ConfigMap")
        for key in ("cpuPerGpu", "memoryPerGpu"):
            value = quota.get(key)
            if value is not None and not _QUANTITY.match(str(value)):
                raise RejectedInput(f"policy.quota.{key}", "a quantity like 8 or 64Gi", value,
                                    "fix the gpuaas-policy ConfigMap")
        return cls(cohort=str(quota.get("cohort", "gpuaas")), queueing_strategy=strategy,
                   cpu_per_gpu=_opt_str(quota.get("cpuPerGpu")), memory_per_gpu=_opt_str(quota.get("memoryPerGpu")),
                   local_queue=_opt_str(quota.get("localQueue")), default=default, tenants=tenants)


def _policy_mapping(policy: Any) -> Mapping:
    if policy is None:
        return {}
    if isinstance(policy, Mapping):
        return policy
    for attribute in ("raw", "data", "document"):
        value = getattr(policy, attribute, None)
        if isinstance(value, Mapping):
            return value
    return {}


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def _tenant_settings(where: str, section: Mapping, inherit: TenantQuotaSettings) -> TenantQuotaSettings:
    weight = section.get("weight", inherit.weight)
    try:
        weight = Fraction(str(weight))
    except (ValueError, ZeroDivisionError):
        raise RejectedInput(f"{where}.weight", "a number >= 0", weight, "fix the gpuaas-policy ConfigMap") from None
    if weight < 0:
        raise RejectedInput(f"{where}.weight", "a number >= 0", section.get("weight"), "fix the gpuaas-policy ConfigMap")
    raw = section.get("guaranteedGpus", None)
    if raw is None:
        guarantees = dict(inherit.guarantees)
    elif isinstance(raw, Mapping):
        guarantees = {str(k): _non_negative_int(f"{where}.guaranteedGpus.{k}", v) for k, v in raw.items()}
    else:
        guarantees = {"*": _non_negative_int(f"{where}.guaranteedGpus", raw)}
    flavors = section.get("flavors", inherit.flavors)
    return TenantQuotaSettings(weight, guarantees, tuple(flavors) if flavors is not None else None)


def _non_negative_int(where: str, value: object) -> int:
    try:
        number = int(str(value))
    except ValueError:
        number = -1
    if number < 0:
        raise RejectedInput(where, "a whole number of GPUs >= 0", value, "fix the gpuaas-policy ConfigMap")
    return number


# ------------------------------------------------------------------------------ request

@dataclass(frozen=True)
class QuotaRequest:
    mode: str
    tenant: str = ""
    namespace: str = ""
    flavor: str = ""
    gpus: int | None = None
    cohort: str = ""
    workload: str = ""
    dry_run: bool = False
    borrowing_limit: int | None = None
    lending_limit: int | None = None

    @property
    def limits(self) -> dict[str, int]:
        """Kueue's field names -> the limits this request sets (empty: keep what the queue has)."""
        out = {}
        if self.borrowing_limit is not None:
            out["borrowingLimit"] = self.borrowing_limit
        if self.lending_limit is not None:
            out["lendingLimit"] = self.lending_limit
        return out


def parse_request(params: Mapping[str, str]) -> QuotaRequest:
    """Step parameters -> request; every problem names the parameter and the fix."""
    def get(name: str) -> str:
        value = params.get(name, "")
        return "" if value is None else str(value).strip()

    dry = get("dry-run").lower()
    if dry not in ("", "true", "false"):
        raise RejectedInput("dry-run", '"true" or "false"', params.get("dry-run"), "pass dry-run=true or false")
    mode = get("mode") or ("hand" if get("tenant") else "capacity")
    if mode not in MODES:
        raise RejectedInput("mode", "hand or capacity", params.get("mode"), "pass mode=hand or mode=capacity")
    request = QuotaRequest(mode=mode, tenant=get("tenant"), namespace=get("namespace"), flavor=get("flavor"),
                           cohort=get("cohort"), workload=get("workload"), dry_run=dry == "true")
    for name, valid, what in (("tenant", is_dns_subdomain, "a ClusterQueue name (DNS subdomain)"),
                              ("flavor", is_dns_subdomain, "a ResourceFlavor name (DNS subdomain)"),
                              ("cohort", is_dns_subdomain, "a cohort name (DNS subdomain)"),
                              ("namespace", is_dns_label, "a namespace name (DNS label)"),
                              ("workload", is_dns_subdomain, "a Workload name")):
        value = getattr(request, name)
        if value and not valid(value):
            raise RejectedInput(name, what, value, f"pass a valid {name}")
    if mode == "capacity":
        for name in ("tenant", "gpus", "workload", "borrowing-limit", "lending-limit"):
            if get(name):
                raise RejectedInput(name, "empty in mode=capacity (quota comes from node capacity)", get(name),
                                    "drop it, or use mode=hand")
        return request
    for name in ("tenant", "flavor", "gpus"):
        if not get(name):
            raise RejectedInput(name, "a value in mode=hand", "", f"pass {name}=...")
    gpus_text = get("gpus")
    # ASCII digits only: str.isdigit() accepts "²" and "٣", and int() of thousands of digits raises.
    if not re.fullmatch(r"[0-9]{1,7}", gpus_text) or int(gpus_text) > MAX_GPUS:
        raise RejectedInput("gpus", f"a whole number of GPUs from 0 to {MAX_GPUS} (ASCII digits)", gpus_text,
                            "pass gpus=N, e.g. gpus=8")
    if request.workload and not request.namespace:
        raise RejectedInput("namespace", "the Workload's namespace when workload is set", "",
                            "pass namespace=<the workload's namespace>")
    limits: dict[str, int | None] = {}
    for name in ("borrowing-limit", "lending-limit"):
        text = get(name)
        # The same ASCII-digit rule as gpus: str.isdigit() accepts "²" (int() then raises) and "٣".
        if text and (not re.fullmatch(r"[0-9]{1,7}", text) or int(text) > MAX_GPUS):
            raise RejectedInput(name, f"a whole number of GPUs from 0 to {MAX_GPUS} (ASCII digits), or empty to "
                                "keep the queue's", text, f"pass {name}=N, e.g. {name}=0")
        if text and request.workload:
            raise RejectedInput(name, "empty when lending to a workload", text, "set limits in a separate run")
        limits[name.replace("-limit", "_limit")] = int(text) if text else None
    if limits["lending_limit"] is not None and limits["lending_limit"] > int(gpus_text):
        raise RejectedInput("lending-limit", f"<= gpus ({gpus_text}): Kueue rejects a lendingLimit above the "
                            "nominal quota", limits["lending_limit"], "lower lending-limit or raise gpus")
    return QuotaRequest(**{**request.__dict__, "gpus": int(gpus_text), **limits})


# ------------------------------------------------------------------------------ state

@dataclass
class QuotaState:
    """What observe read: the facts the plan depends on (and nothing it might be tempted to trust)."""

    cluster_queues: dict[str, JSON]
    flavors: dict[str, JSON]
    nodes: list[JSON] = field(default_factory=list)
    local_queues: dict[tuple[str, str], JSON] = field(default_factory=dict)
    workload: JSON | None = None
    now: datetime = field(default_factory=lambda: datetime.now(UTC))


# ------------------------------------------------------------------------------ plan

@dataclass(frozen=True)
class QuotaAction:
    action: str                # create-cluster-queue | create-local-queue | patch-cluster-queue
    target: JSON
    reason: str
    body: JSON | None = None   # create
    patch: JSON | None = None  # merge patch (conditional on resourceVersion)
    before: JSON | None = None
    after: JSON | None = None

    def to_dict(self) -> JSON:
        out: JSON = {"action": self.action, "target": self.target, "reason": self.reason}
        if self.patch is not None:
            out["patch"] = self.patch
        if self.body is not None:
            out["body"] = self.body
        if self.before is not None:
            out["before"] = self.before
        if self.after is not None:
            out["after"] = self.after
        return out


@dataclass(frozen=True)
class QuotaPlan:
    actions: tuple[QuotaAction, ...]
    reasons: tuple[str, ...]
    observed: JSON = field(default_factory=dict)
    splits: tuple[FlavorSplit, ...] = ()

    def to_dict(self) -> JSON:
        return {"actions": [a.to_dict() for a in self.actions], "reasons": list(self.reasons)}


def extra_resources(settings: QuotaSettings, gpus: int) -> dict[str, str]:
    """cpu/memory nominal quotas that go with `gpus` GPUs when the policy sets per-GPU ratios."""
    out = {}
    if settings.cpu_per_gpu is not None:
        out["cpu"] = _times(settings.cpu_per_gpu, gpus)
    if settings.memory_per_gpu is not None:
        out["memory"] = _times(settings.memory_per_gpu, gpus)
    return out


def _times(quantity: str, n: int) -> str:
    match = _QUANTITY.match(quantity)
    if not match:
        raise RejectedInput("policy.quota", "a quantity", quantity, "fix the gpuaas-policy ConfigMap")
    number, suffix = match.groups()
    value = Fraction(number) * n
    text = str(value.numerator) if value.denominator == 1 else format(float(value), "g")
    return f"{text}{suffix}"


def plan(request: QuotaRequest, state: QuotaState, settings: QuotaSettings) -> QuotaPlan:
    """Pure: the actions that make quota what the request and the policy say (raises RejectedInput)."""
    if request.mode == "hand":
        return _plan_hand(request, state, settings)
    return _plan_capacity(request, state, settings)


def _plan_hand(request: QuotaRequest, state: QuotaState, settings: QuotaSettings) -> QuotaPlan:
    assert request.gpus is not None
    cohort = request.cohort or settings.cohort
    if request.flavor not in state.flavors:
        raise RejectedInput("flavor", f"an existing ResourceFlavor ({', '.join(sorted(state.flavors)) or 'none exist'})",
                            request.flavor, "create the ResourceFlavor first or pass one of those")
    actions: list[QuotaAction] = []
    reasons: list[str] = []
    extras = extra_resources(settings, request.gpus)
    cq = state.cluster_queues.get(request.tenant)
    target = {"kind": "ClusterQueue", "name": request.tenant}
    observed: JSON = {"clusterQueue": request.tenant, "exists": cq is not None, "cohort": cohort,
                      "flavor": request.flavor}

    if request.workload:
        return _plan_loan(request, state, settings, cq, observed)

    if cq is None:
        if not request.namespace:
            raise RejectedInput("namespace", "the tenant's namespace (for its LocalQueue) when the ClusterQueue "
                                "is new", "", "pass namespace=<tenant namespace>")
        body = new_cluster_queue(request.tenant, cohort, request.namespace, request.flavor, request.gpus,
                                 extras, settings.queueing_strategy, request.limits)
        actions.append(QuotaAction("create-cluster-queue", target, f"ClusterQueue {request.tenant} does not exist; "
                                   f"create it in cohort {cohort} with {request.gpus} GPU(s) of {request.flavor}",
                                   body=body, after={request.flavor: request.gpus}))
    else:
        current_cohort = cohort_of(cq)
        if current_cohort != cohort:
            raise RejectedInput("cohort", f"cohort {current_cohort or '(none)'} of existing ClusterQueue "
                                f"{request.tenant}", cohort, "move the ClusterQueue between cohorts by hand "
                                "(kubectl) if that is really intended, or pass its cohort")
        current = gpu_quotas(cq)
        in_use = gpus_in_use(cq).get(request.flavor, 0)
        observed.update(nominal=current.get(request.flavor), inUse=in_use, loans=len(read_loans(cq)))
        lent = sum(loan.gpus for loan in read_loans(cq).values() if loan.flavor == request.flavor)
        wanted = request.gpus + lent
        if wanted < in_use:
            raise RejectedInput("gpus", f">= {in_use - lent} (ClusterQueue {request.tenant} uses {in_use} GPU(s) of "
                                f"{request.flavor}{f', {lent} of them lent' if lent else ''})", request.gpus,
                                "wait for work to finish, or deactivate it first")
        kept_lending = gpu_lending_limits(cq).get(request.flavor)
        if request.lending_limit is None and kept_lending is not None and kept_lending > wanted:
            raise RejectedInput("lending-limit", f"a value <= {wanted} when the quota goes below ClusterQueue "
                                f"{request.tenant}'s lendingLimit {kept_lending} for {request.flavor} (Kueue rejects "
                                "a lendingLimit above the nominal quota)", f"empty (keep lendingLimit {kept_lending})",
                                f"pass lending-limit={request.gpus} (or less) together with gpus={request.gpus}")
        groups = (cq.get("spec") or {}).get("resourceGroups") or []
        new_groups = set_gpu_quota(groups, request.flavor, wanted, extras, request.limits)
        spec_patch: JSON = {}
        why: list[str] = []
        # A quota already as asked, but declared again by someone else while loans are out: recording it makes
        # the loans' return leave the quota asked for (steps.cluster_queue.WRITTEN_ANNOTATION).
        record_stale = bool(lent) and written_record(cq).get(request.flavor) != wanted
        if groups_equal(groups, new_groups):
            reasons.append(f"ClusterQueue {request.tenant} already has {wanted} GPU(s) of {request.flavor}")
            if record_stale:
                why.append(f"record that ClusterQueue {request.tenant}'s {wanted} GPU(s) of {request.flavor} hold "
                           f"the {lent} lent ({WRITTEN_ANNOTATION})")
        else:
            spec_patch["resourceGroups"] = new_groups
            why.append(f"resize {request.flavor} GPUs of ClusterQueue {request.tenant} from "
                       f"{current.get(request.flavor, 'none')} to {wanted}" + (f" ({lent} lent)" if lent else "")
                       + "".join(f", {k} {v}" for k, v in request.limits.items()))
        selector = (cq.get("spec") or {}).get("namespaceSelector")
        if request.namespace:
            widened = admit_namespace(selector, request.namespace)
            if widened is None:
                reasons.append(f"ClusterQueue {request.tenant} has a custom namespaceSelector; check it admits "
                               f"namespace {request.namespace}")
            elif widened != selector:
                # merge patch: keys the new selector drops must be nulled, or they would stay
                spec_patch["namespaceSelector"] = {**{k: None for k in (selector or {}) if k not in widened}, **widened}
                why.append(f"let namespace {request.namespace} use ClusterQueue {request.tenant}")
        if spec_patch or record_stale:
            metadata: JSON = {"resourceVersion": cq["metadata"].get("resourceVersion")}
            if "resourceGroups" in spec_patch or record_stale:
                metadata["annotations"] = {WRITTEN_ANNOTATION: written_annotation(new_groups, cq, [request.flavor])}
            actions.append(QuotaAction(
                "patch-cluster-queue", target, "; ".join(why),
                patch={"metadata": metadata, "spec": spec_patch},
                before={request.flavor: current.get(request.flavor)}, after={request.flavor: wanted}))
    if request.namespace:
        lq_name = settings.local_queue or request.tenant
        lq = state.local_queues.get((request.namespace, lq_name))
        lq_target = {"kind": "LocalQueue", "namespace": request.namespace, "name": lq_name}
        if lq is None:
            actions.append(QuotaAction("create-local-queue", lq_target,
                                       f"namespace {request.namespace} has no LocalQueue {lq_name}",
                                       body=new_local_queue(lq_name, request.namespace, request.tenant)))
        elif (lq.get("spec") or {}).get("clusterQueue") != request.tenant:
            raise RejectedInput("namespace", f"a LocalQueue {lq_name} pointing at ClusterQueue {request.tenant}",
                                f"LocalQueue {request.namespace}/{lq_name} -> "
                                f"{(lq.get('spec') or {}).get('clusterQueue')}",
                                "fix the LocalQueue by hand (its clusterQueue is immutable) or use another tenant")
        else:
            reasons.append(f"LocalQueue {request.namespace}/{lq_name} already points at {request.tenant}")
    return QuotaPlan(tuple(actions), tuple(reasons), observed)


def _plan_loan(request: QuotaRequest, state: QuotaState, settings: QuotaSettings, cq: JSON | None,
               observed: JSON) -> QuotaPlan:
    """Lend `gpus` to the ClusterQueue that admitted (or queues) `workload`."""
    assert request.gpus is not None
    workload = state.workload
    if workload is None:
        raise RejectedInput("workload", f"an existing Workload in namespace {request.namespace}", request.workload,
                            "pass the Workload's name (kubectl get workloads -n NAMESPACE)")
    admitted_in = ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue")
    if admitted_in and admitted_in != request.tenant:
        raise RejectedInput("tenant", f"ClusterQueue {admitted_in} (where the Workload is admitted)", request.tenant,
                            f"pass tenant={admitted_in}")
    if cq is None:
        raise RejectedInput("tenant", "an existing ClusterQueue to lend to", request.tenant,
                            "create the tenant's ClusterQueue first (mode=hand without workload)")
    key = f"{request.namespace}/{request.workload}"
    loans = read_loans(cq)
    previous = loans.get(key)
    current = gpu_quotas(cq).get(request.flavor, 0)
    delta = request.gpus - (previous.gpus if previous and previous.flavor == request.flavor else 0)
    observed.update(loanKey=key, previousLoan=previous.__dict__ if previous else None, nominal=current)
    if previous and previous.flavor != request.flavor:
        raise RejectedInput("flavor", f"{previous.flavor} (the flavor of the existing loan to {key})", request.flavor,
                            "return the loan first (on-finished) or lend the same flavor")
    if delta == 0:
        return QuotaPlan((), (f"{request.gpus} GPU(s) of {request.flavor} already lent to {key}",), observed)
    declared, redeclared = declared_gpus(cq, request.flavor)
    loans[key] = Loan(request.flavor, request.gpus, (workload.get("metadata") or {}).get("uid", ""),
                      state.now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    groups = (cq.get("spec") or {}).get("resourceGroups") or []
    lent = sum(loan.gpus for loan in loans.values() if loan.flavor == request.flavor)
    new_total = max(gpus_in_use(cq).get(request.flavor, 0), declared + lent)
    new_groups = set_gpu_quota(groups, request.flavor, new_total, extra_resources(settings, new_total))
    action = QuotaAction(
        "patch-cluster-queue", {"kind": "ClusterQueue", "name": request.tenant},
        f"lend {request.gpus} GPU(s) of {request.flavor} to Workload {key}: nominalQuota {current} -> {new_total}"
        + (f" ({declared} declared + {lent} lent)" if redeclared else ""),
        patch={"metadata": {"resourceVersion": cq["metadata"].get("resourceVersion"),
                            "annotations": {LENT_ANNOTATION: loans_annotation(loans),
                                            WRITTEN_ANNOTATION: written_annotation(new_groups, cq,
                                                                                   [request.flavor])}},
               "spec": {"resourceGroups": new_groups}},
        before={request.flavor: current, "loan": previous.gpus if previous else 0},
        after={request.flavor: new_total, "loan": request.gpus})
    return QuotaPlan((action,), (redeclared,) if redeclared else (), observed)


def _plan_capacity(request: QuotaRequest, state: QuotaState, settings: QuotaSettings) -> QuotaPlan:
    cohort = request.cohort or settings.cohort
    members = {name: cq for name, cq in sorted(state.cluster_queues.items()) if cohort_of(cq) == cohort}
    reasons: list[str] = []
    observed: JSON = {"cohort": cohort, "clusterQueues": sorted(members), "flavors": {}}
    if not members:
        reasons.append(f"no ClusterQueue in cohort {cohort}: nothing to split")
    new_groups = {name: (cq.get("spec") or {}).get("resourceGroups") or [] for name, cq in members.items()}
    before: dict[str, JSON] = {name: {} for name in members}
    after: dict[str, JSON] = {name: {} for name in members}
    why: dict[str, list[str]] = {name: [] for name in members}
    remembered = {name: lowered_lending_limits(cq) for name, cq in members.items()}
    splits = []
    if request.flavor and request.flavor not in state.flavors:
        raise RejectedInput("flavor", f"an existing ResourceFlavor ({', '.join(sorted(state.flavors)) or 'none'})",
                            request.flavor, "pass an existing flavor or leave it empty for all flavors")
    for flavor_name, flavor in sorted(state.flavors.items()):
        if request.flavor and flavor_name != request.flavor:
            continue
        labels = (flavor.get("spec") or {}).get("nodeLabels") or {}
        capacity, counted = flavor_capacity(state.nodes, labels)
        claims = []
        for name, cq in members.items():
            tenant = settings.for_tenant(name)
            listed = flavor_name in gpu_quotas(cq)
            if tenant.flavors is not None and flavor_name not in tenant.flavors and not listed:
                continue
            if not listed and capacity == 0:
                continue
            loans = sum(loan.gpus for loan in read_loans(cq).values() if loan.flavor == flavor_name)
            claims.append(TenantClaim(name, tenant.weight, tenant.guarantee(flavor_name),
                                      gpus_in_use(cq).get(flavor_name, 0), loans, gpu_quotas(cq).get(flavor_name)))
        if not claims:
            continue
        split = split_capacity(flavor_name, capacity, claims)
        splits.append(split)
        observed["flavors"][flavor_name] = {"capacity": capacity, "nodes": counted,
                                            "nodeLabels": dict(labels)}
        reasons.extend(f"{flavor_name}: {note}" for note in split.notes)
        for quota in split.quotas:
            name = quota.cluster_queue
            before[name][flavor_name] = quota.current
            after[name][flavor_name] = quota.nominal
            lending = fit_lending_limit(quota.nominal, gpu_lending_limits(members[name]).get(flavor_name),
                                        remembered[name].get(flavor_name))
            if lending.remembered is None:
                remembered[name].pop(flavor_name, None)
            else:
                remembered[name][flavor_name] = lending.remembered
            if quota.changed or lending.note:
                limits = {"lendingLimit": lending.limit} if lending.note else None
                new_groups[name] = set_gpu_quota(new_groups[name], flavor_name, quota.nominal,
                                                 extra_resources(settings, quota.nominal), limits)
            if quota.changed:
                why[name].append(f"{flavor_name} {quota.current if quota.current is not None else 'none'}"
                                 f" -> {quota.nominal} ({quota.reason})")
            if lending.note:
                why[name].append(f"{flavor_name} {lending.note}")
    actions = []
    for name, cq in members.items():
        groups = (cq.get("spec") or {}).get("resourceGroups") or []
        annotations = (cq.get("metadata") or {}).get("annotations") or {}
        lending = lending_annotation(remembered[name])
        written = written_annotation(new_groups[name], cq, list(after[name]))
        # A queue gpuaas never wrote and that has no loan keeps no record: nothing to tell a later return.
        stale_record = annotations.get(WRITTEN_ANNOTATION, written if not read_loans(cq) else None) != written
        if groups_equal(groups, new_groups[name]) and annotations.get(LENDING_ANNOTATION) == lending \
                and not stale_record:
            if after[name]:
                reasons.append(f"ClusterQueue {name} unchanged: " + ", ".join(
                    f"{f}={n}" for f, n in sorted(after[name].items())))
            continue
        metadata: JSON = {"resourceVersion": cq["metadata"].get("resourceVersion"),
                          "annotations": {WRITTEN_ANNOTATION: written}}
        if annotations.get(LENDING_ANNOTATION) != lending:
            metadata["annotations"][LENDING_ANNOTATION] = lending
        actions.append(QuotaAction(
            "patch-cluster-queue", {"kind": "ClusterQueue", "name": name},
            f"capacity tracking for ClusterQueue {name}: " + "; ".join(why[name] or [
                "lending limits remembered" if annotations.get(LENDING_ANNOTATION) != lending
                else f"the quota gpuaas holds it at recorded ({WRITTEN_ANNOTATION})"]),
            patch={"metadata": metadata, "spec": {"resourceGroups": new_groups[name]}},
            before=before[name], after=after[name]))
    return QuotaPlan(tuple(actions), tuple(reasons), observed, tuple(splits))


# ------------------------------------------------------------------------------ observe / apply / run

def observe(gateway: Any, request: QuotaRequest, now: datetime | None = None) -> QuotaState:
    """Read live state: ClusterQueues, ResourceFlavors, and per mode Nodes or the tenant's queues."""
    from steps.gateways import resources as R

    state = QuotaState(
        cluster_queues={cq["metadata"]["name"]: cq for cq in gateway.list(R.CLUSTER_QUEUE)},
        flavors={rf["metadata"]["name"]: rf for rf in gateway.list(R.RESOURCE_FLAVOR)},
        now=now or datetime.now(UTC),
    )
    if request.mode == "capacity":
        state.nodes = gateway.list(R.NODE)
    elif request.namespace:
        state.local_queues = {(request.namespace, lq["metadata"]["name"]): lq
                              for lq in gateway.list(R.LOCAL_QUEUE, request.namespace)}
        if request.workload:
            state.workload = gateway.get(R.WORKLOAD, request.workload, request.namespace)
    return state


def apply(gateway: Any, quota_plan: QuotaPlan, dry_run: bool) -> list[ActionResult]:
    """Carry the plan out (or only report it). A 409 propagates: the caller re-reads and re-plans."""
    from steps.gateways import resources as R

    results = []
    for action in quota_plan.actions:
        if dry_run:
            results.append(ActionResult(action.action, action.target, "dry-run", action.before, action.after))
            continue
        if action.action == "create-cluster-queue":
            written = gateway.create(R.CLUSTER_QUEUE, action.body)
        elif action.action == "create-local-queue":
            written = gateway.create(R.LOCAL_QUEUE, action.body, action.target["namespace"])
        elif action.action == "patch-cluster-queue":
            written = gateway.merge_patch(R.CLUSTER_QUEUE, action.target["name"], action.patch)
        else:  # a plan is data: an unknown verb is a programming error, say which
            raise ValueError(f"unknown provision-quota action {action.action!r}")
        results.append(ActionResult(action.action, action.target, "applied", action.before, action.after,
                                         error=_record_event(gateway, written, action)))
    return results


def _record_event(gateway: Any, written: JSON, action: QuotaAction) -> str | None:
    """`kubectl describe clusterqueue` shows the change (best effort: the write already happened)."""
    from steps.gateways.errors import KubernetesError
    from steps.gateways.resources import CLUSTER_QUEUE

    if action.action == "create-local-queue":
        return None
    written = {"apiVersion": CLUSTER_QUEUE.api_version, "kind": CLUSTER_QUEUE.kind, **(written or {})}
    written.setdefault("metadata", {}).setdefault("name", action.target["name"])
    try:
        gateway.record_event(written, EVENT_REASON, action.reason, action="ProvisionQuota")
    except KubernetesError as error:
        return f"event not recorded: {error}"
    return None


@dataclass
class QuotaRun:
    """Everything the audit record needs about one provision-quota run."""

    outcome: str                                # applied | no-op | rejected-input | failed
    request: QuotaRequest | None
    plan: QuotaPlan | None
    results: list[ActionResult]
    errors: list[str]
    timings: dict[str, float]
    attempts: int = 1
    workload_object: JSON | None = None

    @property
    def exit_code(self) -> int:
        if self.outcome != "failed":
            return 0
        return 75 if any(e.startswith("transient:") for e in self.errors) else 1


def run(gateway: Any, params: Mapping[str, str], policy: Any, *, now: datetime | None = None,
        max_attempts: int = 3) -> QuotaRun:
    """parse -> observe -> plan -> apply, re-reading and re-planning on 409 (bounded)."""
    import time

    from steps.gateways.errors import Conflict, TransientError

    timings = {"observeSeconds": 0.0, "planSeconds": 0.0, "applySeconds": 0.0}
    started = time.perf_counter()
    request = None
    quota_plan = None
    try:
        request = parse_request(params)
        settings = policy if isinstance(policy, QuotaSettings) else QuotaSettings.from_policy(policy)
    except RejectedInput as error:
        return QuotaRun("rejected-input", request, None, [], [str(error)], _total(timings, started))
    attempt = 0
    while True:
        attempt += 1
        try:
            t = time.perf_counter()
            state = observe(gateway, request, now)
            timings["observeSeconds"] += time.perf_counter() - t
            t = time.perf_counter()
            quota_plan = plan(request, state, settings)
            timings["planSeconds"] += time.perf_counter() - t
            t = time.perf_counter()
            results = apply(gateway, quota_plan, request.dry_run)
            timings["applySeconds"] += time.perf_counter() - t
        except RejectedInput as error:
            return QuotaRun("rejected-input", request, quota_plan, [], [str(error)], _total(timings, started), attempt)
        except Conflict as error:
            if attempt < max_attempts:
                continue
            return QuotaRun("failed", request, quota_plan, [], [f"transient: conflict retries exhausted: {error}"],
                            _total(timings, started), attempt)
        except TransientError as error:
            return QuotaRun("failed", request, quota_plan, [], [f"transient: {error}"], _total(timings, started), attempt)
        except Exception as error:  # noqa: BLE001 - recorded as a permanent failure, never swallowed silently
            return QuotaRun("failed", request, quota_plan, [], [f"{type(error).__name__}: {error}"],
                            _total(timings, started), attempt)
        outcome = "applied" if any(r.result in ("applied", "dry-run") for r in results) else "no-op"
        return QuotaRun(outcome, request, quota_plan, results, [], _total(timings, started), attempt,
                        workload_object=state.workload)


def _total(timings: dict[str, float], started: float) -> dict[str, float]:
    import time

    return {**{k: round(v, 6) for k, v in timings.items()}, "totalSeconds": round(time.perf_counter() - started, 6)}


# ------------------------------------------------------------------------------ the step

def step(context: Any) -> StepReport:
    """Entry point contract (steps.reactions): run, then hand the entry point a StepReport."""
    # Reading the policy may fail: RejectedInput (bad YAML) and TransientError (API down) propagate to
    # the entry point, which records rejected-input or failed/75 as for every reaction.
    return to_report(run(context.kube, context.params, context.policy, now=context.now()))


def to_report(quota_run: QuotaRun) -> StepReport:
    """The audit record's view of a run: tenant/cohort, observed, plan, before/after per queue."""
    request = quota_run.request
    quota_plan = quota_run.plan
    observed = dict(quota_plan.observed) if quota_plan is not None else {}
    if request is not None:
        observed.setdefault("mode", request.mode)
    report = StepReport(
        reaction=REACTION,
        outcome=Outcome(quota_run.outcome),
        plan=quota_plan,
        results=list(quota_run.results),
        observed=observed,
        errors=list(quota_run.errors),
        timings=dict(quota_run.timings),
        tenant=(request.tenant or None) if request is not None else None,
        cohort=observed.get("cohort"),
        transient=any(e.startswith("transient:") for e in quota_run.errors),
    )
    if request is not None:
        from steps.plan import ReactionRequest

        report.request = ReactionRequest(REACTION, request.namespace, request.workload, "", request.dry_run,
                                         request.tenant)
    if request is not None and request.workload and quota_run.outcome == "applied":
        report.workload_object = quota_run.workload_object
        report.workload = _workload_ref(quota_run.workload_object)
        report.event = (EVENT_REASON, quota_plan.actions[0].reason if quota_plan and quota_plan.actions else
                        "quota lent", "Normal")
    if quota_run.results:
        report.metrics["gpusProvisioned"] = sum(
            max(0, (r.after or {}).get(f, 0) - ((r.before or {}).get(f) or 0))
            for r in quota_run.results for f in (r.after or {}) if isinstance((r.after or {}).get(f), int))
    return report


def _workload_ref(workload: JSON | None) -> JSON | None:
    if not workload:
        return None
    meta = workload.get("metadata") or {}
    return {"namespace": meta.get("namespace"), "name": meta.get("name"), "uid": meta.get("uid")}
