"""Real Kueue's Workload watch stream through the rendered Sensors, and the emulation against it.

The short scenario of tests/support/short_scenario.py (a tenant's Job admitted, released,
resumed, finished, with the reaction steps in between) runs once on the real stack and once on
the emulation (engine.apiserver + engine.kueue). On both, the engine's resource watcher runs the
rendered EventSource `gpuaas-workloads` (on the real stack as its ServiceAccount, with a
TokenRequest token), and every event it emitted goes through `gpuaas route` with the rendered
Sensors.

- The Sensors fire exactly once per admission (two: the first and the one after resume-workers)
  and once per completion, never on the other updates Kueue makes to the Workload.
- The emulation's Workload condition sequence and the objects after each reaction are the real
  ones, except for the differences listed in docs/local-engine.md ("Checked against the real
  stack"), which this test keeps honest: an undocumented difference fails it, and so does a
  documented one that no longer shows.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.real_cluster import RealCluster
from tests.support.short_scenario import EmulatedBackend, RealBackend, Recorded, fired, route, run

ROOT = Path(__file__).resolve().parents[2]
LOCAL_ENGINE_DOC = ROOT / "docs" / "local-engine.md"


@pytest.fixture(scope="module")
def real_run(real_cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    backend = RealBackend(real_cluster, tmp_path_factory.mktemp("real-scenario"))
    try:
        yield run(backend)
    finally:
        backend.close()


@pytest.fixture(scope="module")
def emulated_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    backend = EmulatedBackend(tmp_path_factory.mktemp("emulated-scenario"))
    try:
        yield run(backend)
    finally:
        backend.close()


def _transitions(recorded: Recorded, condition: str) -> list[int]:
    """Indexes (in the Workload's events) where `condition` became True (from anything else)."""
    found = []
    for index, event in enumerate(recorded.workload_events()):
        data = event["data"]
        if data["type"] != "UPDATE":
            continue

        def status(obj: dict | None) -> str | None:
            for item in ((obj or {}).get("status") or {}).get("conditions") or []:
                if item["type"] == condition:
                    return item["status"]
            return None
        if status(data["body"]) == "True" and status(data.get("oldBody")) != "True":
            found.append(index)
    return found


def _as_a_server(events: list[dict]) -> list[dict]:
    """The same stream with the Workload owned by a StatefulSet: the Sensors start runs only for owners a
    step may write for; a Job's transitions are recorded by the catch-up sweep (docs/catch-up.md). The
    edge logic under test (fire once per transition on real Kueue's writes) is the same for both."""
    out = copy.deepcopy(events)
    for event in out:
        for key in ("body", "oldBody"):
            body = event["data"].get(key)
            for ref in ((body or {}).get("metadata") or {}).get("ownerReferences") or []:
                ref.update(apiVersion="apps/v1", kind="StatefulSet")
    return out


def _assert_the_sensors_leave_a_job_to_the_sweep(recorded: Recorded, workdir: Path) -> None:
    answers = route(recorded.workload_events(), workdir)
    fires = sorted({s for answer in answers for s in fired(answer)})
    assert fires == [], f"{recorded.backend}: a Job's transitions are the sweep's, the Sensors started {fires}"


def _assert_fires_once_per_transition(recorded: Recorded, workdir: Path) -> None:
    events = _as_a_server(recorded.workload_events())
    answers = route(events, workdir)
    fires = {name: [i for i, answer in enumerate(answers) if name in fired(answer)]
             for name in ("gpuaas-on-admitted", "gpuaas-on-finished")}
    others = sorted({s for answer in answers for s in fired(answer)} - set(fires))
    admissions, completions = _transitions(recorded, "Admitted"), _transitions(recorded, "Finished")
    kinds = [e["data"]["type"] for e in events]
    assert len(admissions) == 2, f"{recorded.backend}: expected 2 admissions in the stream, found {admissions} ({kinds})"
    assert len(completions) == 1, f"{recorded.backend}: expected 1 completion, found {completions} ({kinds})"
    assert fires["gpuaas-on-admitted"] == admissions, (recorded.backend, fires, admissions, kinds)
    assert fires["gpuaas-on-finished"] == completions, (recorded.backend, fires, completions, kinds)
    assert not others, f"{recorded.backend}: other sensors fired on the Workload's events: {others}"
    assert len(events) > len(admissions) + len(completions), "the stream holds Kueue's other updates too"


def test_sensors_fire_once_per_real_admission_and_completion(real_run: Recorded, tmp_path: Path) -> None:
    """Real Kueue's stream, as the EventSource's ServiceAccount watched it, through the rendered Sensors:
    as a server's, once per admission and completion; as the Job's it is, never (the sweep records it)."""
    assert real_run.workload_events()[0]["data"]["type"] in ("ADD", "UPDATE")
    _assert_fires_once_per_transition(real_run, tmp_path)
    _assert_the_sensors_leave_a_job_to_the_sweep(real_run, tmp_path)


def test_sensors_fire_the_same_on_the_emulations_stream(emulated_run: Recorded, tmp_path: Path) -> None:
    _assert_fires_once_per_transition(emulated_run, tmp_path)
    _assert_the_sensors_leave_a_job_to_the_sweep(emulated_run, tmp_path)


KNOWN_DIFFERENCES: dict[str, str] = {}
"""Differences between the emulation and real Kueue on this scenario, each one named (by its key)
in docs/local-engine.md's "Checked against the real stack" section."""


ADMISSION = frozenset({("Admitted", "True", "Admitted"), ("QuotaReserved", "True", "QuotaReserved")})
WAIT_FOR_START = frozenset({("PodsReady", "False", "WaitForStart")})


def _without_admission_race(sequence: list[tuple]) -> list[tuple]:
    """The sequence without the intermediate state of a race real Kueue has: its scheduler (the
    admission) and its job reconciler (PodsReady=False/WaitForStart) write the new Workload
    independently, and both orders were seen on the real stack. A state is dropped when the next one
    adds exactly the other writer's conditions to it."""
    out = []
    for index, current in enumerate(sequence):
        following = set(sequence[index + 1]) if index + 1 < len(sequence) else None
        if current and following is not None and set(current) < following \
                and frozenset(following - set(current)) in (ADMISSION, WAIT_FOR_START):
            continue
        out.append(current)
    return out


def test_the_admission_race_is_folded_whichever_writer_comes_first() -> None:
    admitted = (("Admitted", "True", "Admitted"), ("QuotaReserved", "True", "QuotaReserved"))
    both = (("Admitted", "True", "Admitted"), ("PodsReady", "False", "WaitForStart"),
            ("QuotaReserved", "True", "QuotaReserved"))
    waiting = (("PodsReady", "False", "WaitForStart"),)
    assert _without_admission_race([(), admitted, both]) == _without_admission_race([(), waiting, both]) == [(), both]
    evicted = (*both, ("Evicted", "True", "Deactivated"))
    assert _without_admission_race([(), both, evicted]) == [(), both, evicted]


def _differences(emulated: Recorded, real: Recorded) -> dict[str, tuple]:
    found: dict[str, tuple] = {}
    emulated_sequence = _without_admission_race(emulated.condition_sequence())
    real_sequence = _without_admission_race(real.condition_sequence())
    if emulated_sequence != real_sequence:
        found["condition-sequence"] = (emulated_sequence, real_sequence)
    for mine, theirs in zip(emulated.snapshots, real.snapshots, strict=True):
        for field_name, value in mine.as_dict().items():
            other = theirs.as_dict()[field_name]
            if field_name == "release_record" and value and other:
                value, other = _without_names(value), _without_names(other)
            if value != other:
                found[f"{mine.step}.{field_name}"] = (value, other)
    outcomes = [(s.reaction, s.outcome, sorted(a["action"] for a in s.actions)) for s in emulated.steps]
    real_outcomes = [(s.reaction, s.outcome, sorted(a["action"] for a in s.actions)) for s in real.steps]
    if outcomes != real_outcomes:
        found["step-outcomes"] = (outcomes, real_outcomes)
    return found


def _without_names(record: dict) -> dict:
    """The release record without the Workload's generated name (its hash differs by uid)."""
    target = dict(record.get("target") or {})
    target.pop("name", None)
    return {**record, "target": target}


def test_the_emulation_behaves_as_real_kueue_on_the_short_scenario(emulated_run: Recorded, real_run: Recorded) -> None:
    differences = _differences(emulated_run, real_run)
    undocumented = {k: v for k, v in differences.items() if k not in KNOWN_DIFFERENCES}
    assert not undocumented, "the emulation differs from real Kueue (emulated, real):\n" + "\n".join(
        f"  {key}: {value}" for key, value in undocumented.items())
    gone = sorted(set(KNOWN_DIFFERENCES) - set(differences))
    assert not gone, f"documented differences that no longer show (remove them here and in the doc): {gone}"
    doc = LOCAL_ENGINE_DOC.read_text()
    missing = [key for key in KNOWN_DIFFERENCES if f"`{key}`" not in doc]
    assert not missing, f"differences not listed in docs/local-engine.md: {missing}"
