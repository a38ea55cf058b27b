"""The sample checker itself: it lets the accidents of a run through and nothing else."""

from __future__ import annotations

from tests.docs.samples import mismatch, normalize


def test_accidents_of_a_run_are_normalized() -> None:
    documented = "2026-12-01 01:46:33  on-admitted  serving  statefulset-embed-38608  applied  gpuaas-on-admitted-o2ana"
    printed = "2026-12-01 16:54:21  on-admitted  serving  statefulset-embed-16f1f      applied  gpuaas-on-admitted-ngfje"
    assert normalize(documented) == normalize(printed)
    assert normalize("observe 0.016s at 127.0.0.1:44353") == normalize("observe 0.003s at 127.0.0.1:9")


def test_facts_are_not_normalized() -> None:
    assert mismatch(["x  serving  applied"], ["x  serving  no-op"]) is not None  # an outcome
    assert mismatch(["14 run(s); 0 failed"], ["15 run(s); 0 failed"]) is not None  # a count
    assert mismatch(["a", "b"], ["a"]) is not None and mismatch(["a"], ["a", "b"]) is not None


def test_skips_and_cut_lines() -> None:
    assert mismatch(["head", "[...]", "tail"], ["head", "1", "2", "tail"]) is None
    assert mismatch(["head", "[...]", "tail"], ["head", "1", "2"]) is not None
    assert mismatch(["a long line ..."], ["a long line that goes on"]) is None
    assert mismatch(["b", "a"], ["a", "b"]) is not None
    assert mismatch(["b", "a"], ["a", "b"], any_order=True) is None
