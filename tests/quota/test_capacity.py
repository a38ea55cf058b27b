"""The capacity split is a pure function: every rule gets a row, and the invariants hold for all rows."""

from __future__ import annotations

from fractions import Fraction

import pytest

from steps.capacity import TenantClaim, flavor_capacity, largest_remainder, node_is_usable, split_capacity


def claim(name: str, weight: int | str = 1, guarantee: int = 0, in_use: int = 0, lent: int = 0,
          current: int | None = None) -> TenantClaim:
    return TenantClaim(name, Fraction(weight), guarantee, in_use, lent, current)


CASES = [
    # id, capacity, claims, expected nominal per queue, a word every reason/note must contain
    ("equal-weights", 8, [claim("a"), claim("b")], {"a": 4, "b": 4}, None),
    ("weights-2-to-1", 9, [claim("a", 2), claim("b", 1)], {"a": 6, "b": 3}, None),
    ("rounding-largest-remainder-ties-by-name", 10, [claim("c"), claim("b"), claim("a")],
     {"a": 4, "b": 3, "c": 3}, None),
    ("rounding-remainders-differ", 10, [claim("a", 1), claim("b", 2), claim("c", 4)],
     {"a": 1, "b": 3, "c": 6}, None),
    ("guarantee-above-share", 8, [claim("a", 1, guarantee=6), claim("b")], {"a": 6, "b": 2}, "guarantee"),
    ("guarantee-below-share-changes-nothing", 8, [claim("a", 1, guarantee=2), claim("b")], {"a": 4, "b": 4}, None),
    ("guarantees-oversubscribed-scaled", 6, [claim("a", 1, guarantee=6), claim("b", 1, guarantee=6)],
     {"a": 3, "b": 3}, "scaled"),
    ("in-use-floor-above-share", 8, [claim("a", in_use=7), claim("b")], {"a": 7, "b": 1}, "in use"),
    ("in-use-above-capacity-holds-everyone", 4, [claim("a", in_use=3), claim("b", in_use=3)],
     {"a": 3, "b": 3}, "in use"),
    ("zero-capacity", 0, [claim("a", guarantee=2), claim("b")], {"a": 0, "b": 0}, None),
    ("zero-capacity-keeps-usage", 0, [claim("a", in_use=2), claim("b")], {"a": 2, "b": 0}, "in use"),
    ("weight-zero-gets-floor-only", 8, [claim("a", 0, guarantee=1), claim("b")], {"a": 1, "b": 7}, "weight 0"),
    ("new-flavor-no-current-quota", 4, [claim("a", current=None), claim("b", current=None)], {"a": 2, "b": 2}, None),
    ("lent-set-aside-and-added-back", 8, [claim("a", lent=2, in_use=2), claim("b")], {"a": 5, "b": 3}, "lent"),
    ("fractional-weights", 7, [claim("a", "1/2"), claim("b", "3/2")], {"a": 2, "b": 5}, None),
]


@pytest.mark.parametrize(("capacity", "claims", "expected", "word"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_split(capacity: int, claims: list[TenantClaim], expected: dict[str, int], word: str | None) -> None:
    split = split_capacity("a100", capacity, claims)
    assert {q.cluster_queue: q.nominal for q in split.quotas} == expected
    in_use = {c.cluster_queue: c.in_use for c in claims}
    assert all(q.nominal >= in_use[q.cluster_queue] for q in split.quotas), "never below what is in use"
    if sum(in_use.values()) <= capacity and any(c.weight for c in claims):
        assert split.total == capacity, "the split adds up to the capacity exactly"
    if word:
        text = " ".join([q.reason for q in split.quotas] + list(split.notes))
        assert word in text


def test_order_of_claims_does_not_matter() -> None:
    claims = [claim("a", 1), claim("b", 2), claim("c", 3), claim("d", 1, guarantee=3)]
    first = split_capacity("a100", 13, claims)
    second = split_capacity("a100", 13, list(reversed(claims)))
    assert first == second


def test_changed_flags_only_real_changes() -> None:
    split = split_capacity("a100", 8, [claim("a", current=4), claim("b", current=3)])
    assert [q.changed for q in split.quotas] == [False, True]


def test_no_tenants_is_a_note_not_an_error() -> None:
    split = split_capacity("a100", 8, [])
    assert split.quotas == () and "no tenant" in split.notes[0]


@pytest.mark.parametrize("bad", [claim("a", -1), claim("a", guarantee=-1), claim("a", in_use=-2)])
def test_negative_inputs_are_rejected(bad: TenantClaim) -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        split_capacity("a100", 8, [bad])


def test_duplicate_queue_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        split_capacity("a100", 8, [claim("a"), claim("a")])


def test_largest_remainder_sums_exactly() -> None:
    for total in range(30):
        shares = largest_remainder(total, {"x": Fraction(1), "y": Fraction(1), "z": Fraction(1)})
        assert sum(shares.values()) == total
        assert max(shares.values()) - min(shares.values()) <= 1


def node(name: str, labels: dict, gpus: str | None, ready: str = "True", unschedulable: bool = False) -> dict:
    return {"metadata": {"name": name, "labels": labels},
            "spec": {"unschedulable": unschedulable} if unschedulable else {},
            "status": {"allocatable": {"nvidia.com/gpu": gpus} if gpus is not None else {},
                       "conditions": [{"type": "Ready", "status": ready}]}}


def test_flavor_capacity_counts_ready_schedulable_matching_nodes() -> None:
    nodes = [
        node("n1", {"gpu": "a100"}, "8"),
        node("n2", {"gpu": "a100"}, "8", ready="False"),
        node("n3", {"gpu": "a100"}, "8", unschedulable=True),
        node("n4", {"gpu": "h100"}, "8"),
        node("n5", {"gpu": "a100", "zone": "x"}, "4"),
        node("n6", {"gpu": "a100"}, None),
        node("n7", {"gpu": "a100"}, "garbage"),
    ]
    assert flavor_capacity(nodes, {"gpu": "a100"}) == (12, ["n1", "n5"])
    assert flavor_capacity(nodes, {}) == (20, ["n1", "n4", "n5"])
    assert not node_is_usable({"metadata": {"name": "x"}})
