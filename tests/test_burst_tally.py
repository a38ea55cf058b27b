"""benchmarks/burst.py's Tally: what counts as a transition's reaction (the fault tier and bench-scale rely on it).

A transition is handled by a run only when the run Succeeded, its record says its marker write was
applied, and the Workload's live marker names that run (review T1: a Failed run whose plan meant to
mark counted as handled). A resubmitted copy of a sweep-recorded run is a duplicate, not a second
reaction (review D3).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1] / "benchmarks"))  # after the project: benchmarks/steps.py is no package

from burst import ReactionRun, Seen, Tally, parse_run

from steps.delivery import RESUBMITTED_LABEL, Marker, sweep_run_name
from tests.audit.test_recorded_runs import KEY, UID, recorded

SEEN = Seen(UID, "team-a", "job-a", "on-admitted", KEY, 100.0, "Job")


def run(name: str, phase: str = "Succeeded", *, marked: bool = True, applied: bool = True) -> ReactionRun:
    return ReactionRun(name=name, uid=f"uid-{name}", reaction="on-admitted", phase=phase, created=101.0,
                       finished=102.0, workload_uid=UID, transition=KEY, marked=marked, duplicate=False,
                       superseded=False, recorded_by_sweep=False, via="event", late=False, pods=1,
                       outcome="no-op" if phase == "Succeeded" else "failed", mark_applied=applied)


def marker(run_name: str) -> dict[tuple[str, str], Marker]:
    return {(UID, "on-admitted"): Marker("on-admitted", KEY, f"uid-{run_name}", "", "event")}


def test_a_failed_run_does_not_answer_its_transition() -> None:
    tally = Tally.of([SEEN], [run("wf-a", "Failed", applied=False)], marker("wf-a"))
    assert tally.handled == 0 and len(tally.lost) == 1


def test_a_succeeded_run_the_marker_does_not_name_does_not_answer_it() -> None:
    tally = Tally.of([SEEN], [run("wf-a")], marker("wf-other"))
    assert tally.handled == 0 and len(tally.lost) == 1
    assert Tally.of([SEEN], [run("wf-a")], marker("wf-a")).handled == 1


def test_two_runs_that_both_wrote_their_marker_are_a_double() -> None:
    tally = Tally.of([SEEN], [run("wf-a"), run("wf-b")], marker("wf-b"))
    assert tally.handled == 1 and len(tally.doubled) == 1


def test_a_resubmitted_copy_of_a_recorded_run_is_a_duplicate_not_a_double() -> None:
    original = sweep_run_name("on-admitted", UID, KEY)
    runs = [parse_run(recorded(original)), parse_run(recorded(f"{original}-x7k2p", {RESUBMITTED_LABEL: original}))]
    tally = Tally.of([SEEN], runs, marker(original))
    assert tally.handled == 1 and tally.doubled == [] and tally.duplicates_recorded == 1
