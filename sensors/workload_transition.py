"""Filters that recognise a Kueue Workload condition TRANSITION in a resource event.

A resource EventSource emits UPDATE on every resourceVersion change (status churn, Kueue's
requeue bookkeeping, heartbeat-like writes), so "condition X is True" alone would start a reaction
on every write. A transition needs both objects: X is True in `body` and was not True in `oldBody`.

Argo Events treats a missing GJSON path as an error that fails the filter. `oldBody` of a
just-created Workload often has no `status` at all, and a direct path such as
`oldBody.status.conditions.#(type=="Admitted").status` would then be missing, so the transition
would be lost. The multipath `[oldBody.status.conditions.#(type=="Admitted").status]` always exists:
`[]` when the condition (or the whole status) is absent, `["False"]`, or `["True"]`; the filter asks
that it is not `["True"]`. Values are Go regexps matched UNANCHORED, hence `^...$` everywhere.

ADD events are ignored on purpose. Kueue creates Workloads without status and admits them with a
status update, so an ADD carrying Admitted/Finished=True only ever comes from the EventSource's
re-list after a restart: the transition happened before, and was handled then (or was missed while
the source was down: an admin re-runs it by hand, and on-finished's cleanup is idempotent).
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]


def condition_path(obj: str, condition: str) -> str:
    return f'[{obj}.status.conditions.#(type=="{condition}").status]'


def is_update() -> JSON:
    return {"path": "type", "type": "string", "value": ["^UPDATE$"]}


def condition_true(obj: str, condition: str) -> JSON:
    return {"path": condition_path(obj, condition), "type": "string", "value": [r'^\["True"\]$']}


def condition_not_true(obj: str, condition: str) -> JSON:
    return {"path": condition_path(obj, condition), "type": "string", "comparator": "!=",
            "value": [r'^\["True"\]$']}


def reason_not(obj: str, condition: str, reason: str) -> JSON:
    """`condition`'s reason is not `reason` (also true when the condition is absent: `[]`)."""
    return {"path": f'[{obj}.status.conditions.#(type=="{condition}").reason]', "type": "string",
            "comparator": "!=", "value": [rf'^\["{reason}"\]$']}


def became_true(condition: str) -> list[JSON]:
    """UPDATE where `condition` is True now and was not True before."""
    return [is_update(), condition_true("body", condition), condition_not_true("oldBody", condition)]


def may_need_a_step(obj: str, kinds: tuple[str, ...], annotations: tuple[str, ...] = ()) -> JSON:
    """The Workload's owners are not all of `kinds`, or it carries one of `annotations`: a transition a
    step may have to write for. The others are recorded by the catch-up sweep without a step pod
    (steps.delivery.event_path_runs is the same rule in Python; tests/routing checks they agree).

    One data filter on a multipath: `[<obj>.metadata.ownerReferences.#.kind, <annotation>...]` is
    `[["Job"]]` for a Job's Workload with none of the annotations; a missing path is left out (no
    error), so no owners give `[]` and an annotation adds an element. The filter passes unless the
    text is exactly a list of the job kinds."""
    escaped = [a.replace(".", r"\.") for a in annotations]
    path = "[" + ",".join([f"{obj}.metadata.ownerReferences.#.kind",
                           *(f"{obj}.metadata.annotations.{a}" for a in escaped)]) + "]"
    kind = "(" + "|".join(kinds) + ")"
    return {"path": path, "type": "string", "comparator": "!=",
            "value": [rf'^\[\["{kind}"(,"{kind}")*\]\]$']}
