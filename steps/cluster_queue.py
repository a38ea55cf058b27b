"""One tenant's ClusterQueue as quota: read, change and lend GPU quota (pure, dicts in and out).

Shared by provision-quota (which sets quota) and on-finished (which returns quota lent to a
Workload), so the lent-quota contract lives in one place:

    gpuaas.io/lent-gpus: '{"<namespace>/<workload>": {"flavor": "a100", "gpus": 2,
                           "uid": "<workload uid>", "lentAt": "<RFC 3339>"}}'

`read_loans(cq)` reads it; `return_loan_patch(cq, key)` is the one conditional merge patch that
gives a loan back. Everything here works on v1beta2 and v1beta1 ClusterQueues (`cohortName` or
`cohort`) and never mutates its input.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from steps.capacity import GPU_RESOURCE

LENT_ANNOTATION = "gpuaas.io/lent-gpus"
WRITTEN_ANNOTATION = "gpuaas.io/gpu-quota-written"
"""The GPU nominalQuota per flavor as gpuaas last wrote it (`{"a100": 7}`), set in the same patch as the quota.

Why: the product is not the only writer of a tenant's quota. A Helm upgrade that changes the tenant, a re-applied
kustomize overlay or a hand edit puts the declared quota back, which knows nothing of the loans outstanding. A live
quota that differs from this annotation was declared since, without the loans; one that matches it holds them.
Without it (a queue gpuaas never wrote) the live quota is taken to hold the loans, as gpuaas wrote them."""
MANAGED_LABEL = "gpuaas.io/managed-by"
TENANT_LABEL = "gpuaas.io/tenant"
KUEUE_API = "kueue.x-k8s.io/v1beta2"

JSON = dict[str, Any]


def cohort_of(cluster_queue: Mapping) -> str:
    spec = cluster_queue.get("spec") or {}
    return spec.get("cohortName") or spec.get("cohort") or ""


def gpu_quotas(cluster_queue: Mapping) -> dict[str, int]:
    """flavor -> nominalQuota of nvidia.com/gpu."""
    out = {}
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                if resource.get("name") == GPU_RESOURCE:
                    out[flavor["name"]] = _whole(resource.get("nominalQuota", 0))
    return out


def gpu_lending_limits(cluster_queue: Mapping) -> dict[str, int]:
    """flavor -> lendingLimit of nvidia.com/gpu, where the queue sets one.

    Kueue's ClusterQueue webhook refuses a lendingLimit above the nominalQuota (on update too), so a
    resize that lowers the quota must know the limit the queue already has.
    """
    out = {}
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                if resource.get("name") == GPU_RESOURCE and resource.get("lendingLimit") is not None:
                    out[flavor["name"]] = _whole(resource["lendingLimit"])
    return out


LENDING_ANNOTATION = "gpuaas.io/lending-limits"
"""On a ClusterQueue whose GPU lendingLimit capacity tracking lowered with the quota:
`{"<flavor>": {"configured": 8, "set": 6}}`, the limit the queue had and the one gpuaas wrote."""


@dataclass(frozen=True)
class LendingFit:
    """The lendingLimit a GPU nominalQuota allows, and what to remember for later (pure result)."""

    limit: int | None
    remembered: JSON | None
    note: str = ""


def _json_annotation(cluster_queue: Mapping, key: str) -> dict[str, Any]:
    """The JSON object in annotation `key`; {} when missing, malformed or not an object (never blocks a decision)."""
    text = ((cluster_queue.get("metadata") or {}).get("annotations") or {}).get(key)
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def lowered_lending_limits(cluster_queue: Mapping) -> dict[str, JSON]:
    """flavor -> {"configured", "set"} from LENDING_ANNOTATION (malformed entries read as absent)."""
    out = {}
    for flavor, value in _json_annotation(cluster_queue, LENDING_ANNOTATION).items():
        if isinstance(value, dict) and all(isinstance(value.get(k), int) and not isinstance(value.get(k), bool)
                                           and value[k] >= 0 for k in ("configured", "set")):
            out[str(flavor)] = {"configured": value["configured"], "set": value["set"]}
    return out


def fit_lending_limit(nominal: int, current: int | None, remembered: Mapping | None) -> LendingFit:
    """The GPU lendingLimit to write with `nominal`, never above it (Kueue's webhook refuses that).

    A limit at the nominal quota lends the same GPUs as any limit above it (all of them), so
    lowering the limit with the quota keeps what the tenant agreed to lend. The limit the queue
    had is remembered while it is lowered, and comes back as the quota grows past it. A limit that
    is no longer the one gpuaas set was changed by an admin since: that one is what counts.
    """
    if current is None:
        return LendingFit(None, None)
    configured = int(remembered["configured"]) if remembered is not None and current == remembered.get("set") \
        else current
    wanted = min(configured, nominal)
    keep = {"configured": configured, "set": wanted} if wanted < configured else None
    if wanted == current:
        return LendingFit(current, keep)
    if wanted < current:
        return LendingFit(wanted, keep, (f"lendingLimit {current} -> {wanted} with the quota (Kueue refuses a "
                                         f"lendingLimit above the nominalQuota; {configured} comes back when the "
                                         "quota reaches it)"))
    return LendingFit(wanted, keep, (f"lendingLimit {current} -> {wanted} (the queue's own limit {configured}, "
                                     "lowered with the quota before)"))


def lending_annotation(remembered: Mapping[str, Mapping]) -> str | None:
    if not remembered:
        return None
    return json.dumps({k: dict(v) for k, v in sorted(remembered.items())}, sort_keys=True, separators=(",", ":"))


def gpus_in_use(cluster_queue: Mapping) -> dict[str, int]:
    """flavor -> GPUs the queue holds: the larger of status.flavorsUsage and flavorsReservation."""
    out: dict[str, int] = {}
    status = cluster_queue.get("status") or {}
    for key in ("flavorsUsage", "flavorsReservation"):
        for flavor in status.get(key) or []:
            for resource in flavor.get("resources") or []:
                if resource.get("name") == GPU_RESOURCE:
                    out[flavor["name"]] = max(out.get(flavor["name"], 0), _whole(resource.get("total", 0)))
    return out


def _whole(value: object) -> int:
    text = str(value)
    try:
        return int(text)
    except ValueError:
        try:
            return int(float(text))
        except ValueError:
            return 0


@dataclass(frozen=True)
class Loan:
    flavor: str
    gpus: int
    uid: str = ""
    lent_at: str = ""


def read_loans(cluster_queue: Mapping) -> dict[str, Loan]:
    """The loans recorded on a ClusterQueue (`gpuaas.io/lent-gpus`), keyed `namespace/workload`.

    A malformed annotation reads as no loans: it must never block quota decisions, and the
    capacity split's in-use floor still protects running work.
    """
    text = ((cluster_queue.get("metadata") or {}).get("annotations") or {}).get(LENT_ANNOTATION)
    if not text:
        return {}
    try:
        raw = json.loads(text)
    except ValueError:
        return {}
    loans = {}
    for key, value in (raw.items() if isinstance(raw, dict) else []):
        if isinstance(value, dict) and isinstance(value.get("flavor"), str):
            gpus = _whole(value.get("gpus", 0))
            if gpus > 0:
                loans[key] = Loan(value["flavor"], gpus, str(value.get("uid", "")), str(value.get("lentAt", "")))
    return loans


def written_record(cluster_queue: Mapping) -> dict[str, int]:
    """WRITTEN_ANNOTATION read: flavor -> the GPU quota gpuaas last wrote ({} when none or unreadable)."""
    return {str(k): _whole(v) for k, v in _json_annotation(cluster_queue, WRITTEN_ANNOTATION).items()}


def written_annotation(groups: Iterable[Mapping], cluster_queue: Mapping | None = None,
                       flavors: Iterable[str] | None = None) -> str:
    """WRITTEN_ANNOTATION's value once gpuaas writes `groups` for `flavors` (None: every flavor).

    Only the flavors written are recorded anew: another flavor's live quota may have been declared again since
    gpuaas wrote it, and recording it would hide that from its loans' return."""
    record = written_record(cluster_queue) if cluster_queue is not None else {}
    quotas = gpu_quotas({"spec": {"resourceGroups": list(groups)}})
    for flavor in (quotas if flavors is None else flavors):
        if flavor in quotas:
            record[flavor] = quotas[flavor]
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def declared_gpus(cluster_queue: Mapping, flavor: str) -> tuple[int, str]:
    """The flavor's GPU quota without the loans outstanding, and why it was read so ("" when as gpuaas wrote it).

    A loan's lend, its return and every other write by gpuaas set nominalQuota to this plus the loans, so a quota
    declared again meanwhile (WRITTEN_ANNOTATION) neither loses GPUs at the return nor keeps a loan for good."""
    current = gpu_quotas(cluster_queue).get(flavor, 0)
    lent = sum(loan.gpus for loan in read_loans(cluster_queue).values() if loan.flavor == flavor)
    written = written_record(cluster_queue)
    if flavor in written and written[flavor] != current and lent:
        return current, (f"the {flavor} GPU quota was declared again since gpuaas wrote {written[flavor]} "
                         f"(now {current}, not holding the {lent} lent GPU(s))")
    return max(0, current - lent), ""


def loans_annotation(loans: Mapping[str, Loan]) -> str | None:
    if not loans:
        return None
    return json.dumps({k: {"flavor": v.flavor, "gpus": v.gpus, "uid": v.uid, "lentAt": v.lent_at}
                       for k, v in sorted(loans.items())}, sort_keys=True, separators=(",", ":"))


def return_loan_patch(cluster_queue: Mapping, key: str) -> JSON | None:
    """The merge patch returning loan `key` (for on-finished), or None when nothing is lent for it.

    Sets nominalQuota of (loan flavor, nvidia.com/gpu) to the declared quota plus the other loans (`declared_gpus`:
    the quota less the loan, unless it was declared again since gpuaas wrote it), never below what the queue
    uses now, records it (WRITTEN_ANNOTATION), removes the key (the whole annotation when it was the last loan), and
    carries the ClusterQueue's resourceVersion so a concurrent change makes it fail with 409 (re-read, re-plan).
    """
    loans = read_loans(cluster_queue)
    loan = loans.pop(key, None)
    if loan is None:
        return None
    current = gpu_quotas(cluster_queue).get(loan.flavor)
    groups = (cluster_queue.get("spec") or {}).get("resourceGroups") or []
    patch: JSON = {"metadata": {"annotations": {LENT_ANNOTATION: loans_annotation(loans),
                                                WRITTEN_ANNOTATION: written_annotation(
                                                    groups, cluster_queue, [loan.flavor])}}}
    rv = (cluster_queue.get("metadata") or {}).get("resourceVersion")
    if rv:
        patch["metadata"]["resourceVersion"] = rv
    if current is not None:
        floor = gpus_in_use(cluster_queue).get(loan.flavor, 0)
        target = max(floor, _entitled_after_return(cluster_queue, key))
        if target != current:
            # The lendingLimit may not stay above the lowered quota (Kueue's webhook): as capacity tracking does.
            remembered = lowered_lending_limits(cluster_queue)
            lending = fit_lending_limit(target, gpu_lending_limits(cluster_queue).get(loan.flavor),
                                        remembered.get(loan.flavor))
            limits = None
            if lending.note:
                limits = {"lendingLimit": lending.limit}
                if lending.remembered is None:
                    remembered.pop(loan.flavor, None)
                else:
                    remembered[loan.flavor] = lending.remembered
                patch["metadata"]["annotations"][LENDING_ANNOTATION] = lending_annotation(remembered)
            patch["spec"] = {"resourceGroups": set_gpu_quota(groups, loan.flavor, target, {}, limits)}
            patch["metadata"]["annotations"][WRITTEN_ANNOTATION] = written_annotation(
                patch["spec"]["resourceGroups"], cluster_queue, [loan.flavor])
    return patch


def _entitled_after_return(cluster_queue: Mapping, key: str) -> int:
    """The loan's flavor's GPU quota once loan `key` is returned: the declared quota plus the other loans."""
    loans = read_loans(cluster_queue)
    loan = loans.pop(key)
    declared, _ = declared_gpus(cluster_queue, loan.flavor)
    return declared + sum(other.gpus for other in loans.values() if other.flavor == loan.flavor)


def return_waits_for_kueue(cluster_queue: Mapping, key: str, own_gpus: int) -> str:
    """Why returning loan `key` must wait ("" when it need not): Kueue still counts the finished Workload.

    Kueue writes a ClusterQueue's status.flavorsUsage after the Workload's Finished condition, so a return read
    right after the finish can see the Workload's own GPUs as in use. The in-use floor would then keep the lent
    quota for good, with the loan gone from the books. When the usage above the quota the return sets is no more
    than the Workload's own GPUs, the run retries (the step exits 75) until Kueue's books catch up; usage beyond
    that is other admitted work, which the floor protects."""
    loan = read_loans(cluster_queue).get(key)
    if loan is None:
        return ""
    floor = gpus_in_use(cluster_queue).get(loan.flavor, 0)
    entitled = _entitled_after_return(cluster_queue, key)
    if floor > entitled and floor - own_gpus <= entitled:
        name = (cluster_queue.get("metadata") or {}).get("name")
        return (f"ClusterQueue {name} still counts {floor} GPU(s) of {loan.flavor} in use, the finished Workload's "
                f"{own_gpus} among them (Kueue updates its status after the finish): returning the loan now would "
                f"keep the quota at {floor} instead of {entitled}; retry once Kueue has released them")
    return ""


def set_gpu_quota(groups: Iterable[Mapping], flavor: str, gpus: int, extras: Mapping[str, str],
                  limits: Mapping[str, int] | None = None) -> list[JSON]:
    """resourceGroups with (flavor, nvidia.com/gpu) nominalQuota = gpus (pure; input untouched).

    `limits`: `borrowingLimit` / `lendingLimit` to set on the GPU resource of that flavor (others kept).

    Adds the flavor to the group covering GPUs when missing (listing every covered resource, as
    Kueue requires; a covered resource with no policy ratio gets 0), or a new group when no group
    covers GPUs. cpu/memory quotas follow the policy's per-GPU ratios where given.
    """
    groups = copy.deepcopy(list(groups))
    covered_elsewhere = {r for g in groups if GPU_RESOURCE not in (g.get("coveredResources") or [])
                         for r in g.get("coveredResources") or []}
    group = next((g for g in groups if GPU_RESOURCE in (g.get("coveredResources") or [])), None)
    if group is None:
        covered = [GPU_RESOURCE] + [r for r in extras if r not in covered_elsewhere]
        groups.append({"coveredResources": covered, "flavors": []})
        group = groups[-1]
    values = {GPU_RESOURCE: gpus, **extras}
    entry = next((f for f in group["flavors"] if f.get("name") == flavor), None)
    if entry is None:
        entry = {"name": flavor, "resources": [{"name": r, "nominalQuota": values.get(r, 0)}
                                               for r in group["coveredResources"]]}
        group["flavors"].append(entry)
    for resource in entry.get("resources") or []:
        if resource.get("name") in values:
            resource["nominalQuota"] = values[resource["name"]]
        if resource.get("name") == GPU_RESOURCE:
            resource.update(limits or {})
    return groups


def groups_equal(a: list[Mapping], b: list[Mapping]) -> bool:
    def norm(groups: list[Mapping]) -> str:
        def canon(value: object) -> object:
            if isinstance(value, dict):
                return {k: canon(v) for k, v in value.items()}
            if isinstance(value, list):
                return [canon(v) for v in value]
            return str(value) if isinstance(value, (int, float)) else value
        return json.dumps(canon(list(groups)), sort_keys=True)
    return norm(a) == norm(b)


def admit_namespace(selector: Mapping | None, namespace: str) -> JSON | None:
    """The namespaceSelector that also admits `namespace`, or None when the selector is custom.

    The product writes `matchLabels: {kubernetes.io/metadata.name: ns}` for one namespace and
    `matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [...]}]` for
    several; `{}` already admits every namespace. Anything else an admin wrote is left alone.
    """
    key = "kubernetes.io/metadata.name"
    if selector is not None and not selector:
        return dict(selector)
    selector = selector or {}
    labels, expressions = selector.get("matchLabels") or {}, selector.get("matchExpressions") or []
    if labels and not expressions and set(labels) == {key}:
        names = {labels[key]}
    elif expressions and not labels and len(expressions) == 1 and expressions[0].get("key") == key \
            and expressions[0].get("operator") == "In":
        names = set(expressions[0].get("values") or [])
    elif not labels and not expressions:
        names = set()
    else:
        return None
    if namespace in names:
        return dict(selector)
    names.add(namespace)
    if len(names) == 1:
        return {"matchLabels": {key: namespace}}
    return {"matchExpressions": [{"key": key, "operator": "In", "values": sorted(names)}]}


def new_cluster_queue(name: str, cohort: str, namespace: str, flavor: str, gpus: int, extras: Mapping[str, str],
                      strategy: str, limits: Mapping[str, int] | None = None) -> JSON:
    """A tenant's ClusterQueue as the product creates it (validated against Kueue's CRD in the tests)."""
    groups = set_gpu_quota([], flavor, gpus, extras, limits)
    return {
        "apiVersion": KUEUE_API, "kind": "ClusterQueue",
        "metadata": {"name": name, "labels": {MANAGED_LABEL: "gpuaas", TENANT_LABEL: name},
                     "annotations": {WRITTEN_ANNOTATION: written_annotation(groups)}},
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": admit_namespace(None, namespace),
            "queueingStrategy": strategy,
            "resourceGroups": groups,
        },
    }


def new_local_queue(name: str, namespace: str, cluster_queue: str) -> JSON:
    return {"apiVersion": KUEUE_API, "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace, "labels": {MANAGED_LABEL: "gpuaas",
                                                                          TENANT_LABEL: cluster_queue}},
            "spec": {"clusterQueue": cluster_queue}}
