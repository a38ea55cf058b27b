"""Plans: what a reaction decided, as plain data (printing one is the dry-run, storing it is the audit).

Shared by every reaction (stable; other helpers import these names):

- `Outcome`: `applied | no-op | skipped-by-policy | rejected-input | failed` (ARCHITECTURE §3).
- `RejectedInput(field, expected, found, hint)`: bad input. Its message names the field, what was
  expected, what was found and what to do; the step records `rejected-input` and exits 0 (retrying
  the same input cannot help).
- `ReactionRequest`: the step parameters (ARCHITECTURE §1) validated: `reaction`, `namespace`,
  `workload`, `event` (raw text), `dry_run`, `tenant_hint`, `extra` (every other parameter).
- `Action`: one intended write (`operation` = create | merge-patch | json-patch | delete | none) on
  one object (`resource` + `namespace` + `name`), with the reason and the patch/body. `before` is the
  part of the live object the write changes, as planned from the observation.
- `Plan`: actions plus reasons (why these actions, or why none), and `empty_outcome`: what an empty
  plan means (`no-op`, or `skipped-by-policy` when policy said no).
- `ActionResult`: what applying one action did (`applied | unchanged | dry-run | failed`).
- `StepReport`: everything a reaction hands back to the entry point to build the record.

Pure: no I/O, no gateway import (a `Resource` is duck-typed: `kind`, `api_version`, `namespaced`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

JSON = dict[str, Any]


class Outcome(str, Enum):
    """The audit outcome of one reaction run."""

    APPLIED = "applied"
    NO_OP = "no-op"
    SKIPPED_BY_POLICY = "skipped-by-policy"
    REJECTED_INPUT = "rejected-input"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


class RejectedInput(ValueError):
    """Input the step cannot act on. Names the field, what was expected, what was found, what to do."""

    def __init__(self, field: str, expected: str, found: object, hint: str = "") -> None:
        self.field = _printable(field)
        self.expected = expected
        self.found = _printable(found)
        self.hint = hint
        message = f"{self.field}: expected {expected}, found {self.found}"
        if hint:
            message += f"; {hint}"
        super().__init__(message)


def _short(value: object, limit: int = 120) -> str:
    text = ascii(value) if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _printable(value: object, limit: int = 200) -> str:
    """Text for a one-line message that can be written anywhere: input echoed in an error may hold
    newlines, control characters or lone surrogates; such text (and anything not text) is quoted."""
    if isinstance(value, str) and len(value) <= limit and value.isprintable():
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            pass
    return _short(value, limit)


COMMON_PARAMETERS = frozenset({"namespace", "workload", "event", "dry-run", "tenant"})


@dataclass(frozen=True)
class ReactionRequest:
    """The validated step parameters. `extra` holds reaction-specific ones (`alert`, `gpus`, ...)."""

    reaction: str
    namespace: str = ""
    workload: str = ""
    event: str = ""
    dry_run: bool = False
    tenant_hint: str = ""
    extra: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_params(cls, reaction: str, params: Mapping[str, str]) -> ReactionRequest:
        """Validate the common parameters; raise RejectedInput naming the first bad one."""
        for name, value in params.items():
            if not isinstance(value, str):
                raise RejectedInput(f"parameters.{name}", "a string (Argo passes every parameter as text)",
                                    type(value).__name__, "quote the value in the Workflow arguments")
        dry = (params.get("dry-run") or "false").strip().lower()
        if dry not in ("true", "false"):
            raise RejectedInput("dry-run", '"true" or "false"', repr(params.get("dry-run")),
                                "pass dry-run=true to plan without writing")
        namespace = (params.get("namespace") or "").strip()
        workload = (params.get("workload") or "").strip()
        from steps.names import is_dns_label, is_dns_subdomain

        if namespace and not is_dns_label(namespace):
            raise RejectedInput("namespace", "a namespace name (at most 63 ASCII lower-case letters, digits, '-')",
                                _short(namespace), "pass the Workload's metadata.namespace")
        if workload and not is_dns_subdomain(workload):
            raise RejectedInput("workload", "a Kubernetes object name (at most 253 ASCII lower-case letters, digits, "
                                "'-', '.')", _short(workload), "pass the Workload's metadata.name")
        extra = {k: v for k, v in params.items() if k not in COMMON_PARAMETERS}
        return cls(reaction=reaction, namespace=namespace, workload=workload, event=params.get("event") or "",
                   dry_run=dry == "true", tenant_hint=(params.get("tenant") or "").strip(), extra=extra)

    def require_workload(self) -> None:
        """Reactions that target a Workload need both names, from the parameters or the event."""
        if not self.namespace:
            raise RejectedInput("namespace", "the Workload's namespace", "an empty value",
                                "pass namespace=<ns> (the Sensor maps it from body.metadata.namespace)")
        if not self.workload:
            raise RejectedInput("workload", "the Workload's name", "an empty value",
                                "pass workload=<name> (kubectl get workloads -n <ns>)")

    def with_names(self, namespace: str, workload: str) -> ReactionRequest:
        return ReactionRequest(self.reaction, namespace, workload, self.event, self.dry_run, self.tenant_hint,
                               self.extra)


@dataclass(frozen=True)
class Action:
    """One intended write, planned from observed state (pure data).

    `operation`: create (body) | merge-patch (patch) | json-patch (patch = list of ops) | delete | none
    | already-applied (the write was made by an earlier attempt of this same run, whose answer was
    lost: nothing is written now, and the record says it was applied, with a note).
    `resource`: a `steps.gateways.resources.Resource`. `subresource`: e.g. "status".
    `resource_version`: when set, the write is conditional on it (409 -> re-observe, re-plan).
    """

    action: str
    resource: Any
    name: str
    namespace: str | None
    reason: str
    operation: str = "merge-patch"
    patch: Any = None
    body: JSON | None = None
    subresource: str | None = None
    resource_version: str | None = None
    before: JSON | None = None
    bookkeeping: bool = False
    """gpuaas' own record on the object (the handled-transition marker, steps.delivery): written
    also when the tenant's policy is dry-run, and never what makes an outcome `applied`."""

    @property
    def target(self) -> JSON:
        target: JSON = {"apiVersion": self.resource.api_version, "kind": self.resource.kind, "name": self.name}
        if self.namespace:
            target["namespace"] = self.namespace
        if self.subresource:
            target["subresource"] = self.subresource
        return target

    def to_dict(self) -> JSON:
        out: JSON = {"action": self.action, "target": self.target, "reason": self.reason,
                     "operation": self.operation}
        if self.patch is not None:
            out["patch"] = self.patch
        if self.body is not None:
            out["body"] = self.body
        if self.bookkeeping:
            out["bookkeeping"] = True
        return out


@dataclass(frozen=True)
class Plan:
    """Actions plus reasons. An empty plan ends as `empty_outcome` (no-op or skipped-by-policy)."""

    actions: tuple[Action, ...] = ()
    reasons: tuple[str, ...] = ()
    empty_outcome: Outcome = Outcome.NO_OP
    metrics: Mapping[str, float] = field(default_factory=dict)
    """Figures the plan already knows (queueWaitSeconds, gpuHoursUsed, gpusReleased, ...)."""
    event: tuple[str, str] | None = None
    """(reason, message) of the Kubernetes Event on the Workload when the plan is applied."""
    dry_run: bool = False
    """True when policy (mode: dry-run) says plan only, whatever the dry-run parameter says."""

    def to_dict(self) -> JSON:
        return {"actions": [a.to_dict() for a in self.actions], "reasons": list(self.reasons)}

    @classmethod
    def nothing(cls, *reasons: str, outcome: Outcome = Outcome.NO_OP, **metrics: float) -> Plan:
        """An empty plan: `no-op` (or `skipped-by-policy`) with the reasons why."""
        return cls((), tuple(reasons), outcome, dict(metrics))


@dataclass(frozen=True)
class ActionResult:
    """What applying one action did. `result`: applied | unchanged | dry-run | failed."""

    action: str
    target: JSON
    result: str
    before: JSON | None = None
    after: JSON | None = None
    error: str | None = None
    note: str | None = None
    """How an `applied` result is known when the API's answer was lost (re-read, or an earlier attempt)."""
    bookkeeping: bool = False
    """The action was gpuaas' own marker (Action.bookkeeping): not an effect, not counted as one."""

    def to_dict(self) -> JSON:
        out: JSON = {"action": self.action, "target": self.target, "before": self.before, "after": self.after,
                     "result": self.result}
        if self.error:
            out["error"] = self.error
        if self.note:
            out["note"] = self.note
        if self.bookkeeping:
            out["bookkeeping"] = True
        return out


def outcome_of(plan: Plan, results: list[ActionResult]) -> Outcome:
    """applied if anything was (or would be, in dry-run) written; failed if a write failed; else the
    plan's empty outcome. The bookkeeping marker (Action.bookkeeping) is no effect: a run that only
    marked its transition handled is a no-op."""
    if any(r.result == "failed" for r in results):
        return Outcome.FAILED
    effects = [r for r in results if not r.bookkeeping]
    if any(r.result in ("applied", "dry-run") for r in effects):
        return Outcome.APPLIED
    return plan.empty_outcome if not [a for a in plan.actions if not a.bookkeeping] else Outcome.NO_OP


@dataclass
class StepReport:
    """What a reaction hands the entry point; the record (ARCHITECTURE §3) is built from it.

    `plan` and `results` may be these module's types or anything with `to_dict()` / plain dicts,
    so reactions with their own plan types (provision-quota) plug in unchanged.
    `outputs`: extra output files (name -> text), e.g. `alerts` for idle-alerts.
    `event`: (reason, message, type) of the Kubernetes Event to record on `workload_object`.
    `exit_code`: None = derived (0, or 1 for failed; 75 when `transient`).
    """

    reaction: str
    outcome: Outcome | str
    request: ReactionRequest | None = None
    plan: Any = None
    results: list[Any] = field(default_factory=list)
    observed: JSON = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    metrics: JSON = field(default_factory=dict)
    timings: JSON = field(default_factory=dict)
    workload: JSON | None = None
    """{"namespace", "name", "uid"} of the Workload, or None."""
    workload_object: JSON | None = None
    tenant: str | None = None
    cohort: str | None = None
    event_summary: JSON | None = None
    event: tuple[str, str, str] | None = None
    outputs: dict[str, str] = field(default_factory=dict)
    transient: bool = False
    exit_code: int | None = None
    delivery: JSON | None = None
    """How the reaction reached the step (steps.delivery.Delivery.to_dict): the record's `delivery`."""

    @property
    def code(self) -> int:
        if self.exit_code is not None:
            return self.exit_code
        if str(self.outcome) != Outcome.FAILED.value:
            return 0
        return 75 if self.transient else 1
