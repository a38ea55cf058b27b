"""The docs' sample outputs are what the commands print today (tests/docs/samples.py says how).

One real `gpuaas demo` runs first (about a minute), in a scratch folder that holds `demo-report/`
plus links to the repository's `manifests/` and `examples/`, so every documented command runs
exactly as written there. Samples run in document order, docs/audit.md last (its resubmissions
add runs to the archive). A documented run name (`gpuaas-on-idle-wub47`) is replaced by the name
of the same run in this demo: same reaction, namespace and workload as in the documented listing.

Regenerate on purpose: `GPUAAS_REGENERATE_DOCS=1 pytest tests/docs` rewrites each sample that has
no `[...]` or cut line with what the commands printed; the others fail with the full output, to
be cut by hand.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.docs.samples import SKIP, TEMPLATES, Sample, find_samples, mismatch, normalize, rewrite

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "audit.md"),
        REPO / "docs" / "audit.md"]
SAMPLES = [sample for path in DOCS for sample in find_samples(path)]
REGENERATE = os.environ.get("GPUAAS_REGENERATE_DOCS") == "1"
RUN_NAME = re.compile(rf"\bgpuaas-(?:{'|'.join(TEMPLATES)})-(?:s-[0-9a-f]{{12}}|[a-z0-9]{{5}})\b")


@dataclass
class Stage:
    """The scratch folder the documented commands run in, after one real demo."""

    folder: Path
    demo_output: list[str]
    names: dict[str, str] = field(default_factory=dict)  # documented run name -> this demo's

    def env(self) -> dict[str, str]:
        drop = ("KUBECONFIG", "GPUAAS_KUBE_URL", "ARGO_SERVER", "ARGO_TOKEN", "ARGO_NAMESPACE", "GPUAAS_OUTPUTS_DIR")
        return {k: v for k, v in os.environ.items() if k not in drop} | {"COLUMNS": "200"}

    def run(self, command: str) -> list[str]:
        words = shlex.split(RUN_NAME.sub(lambda m: self.names.get(m.group(0), m.group(0)), command))
        if words[:2] in (["gpuaas", "demo"], ["make", "demo"]):
            return self.demo_output
        if words[0] == "gpuaas":
            words = [sys.executable, "-m", "gpuaas.cli", *words[1:]]
        elif words[0] in ("python", ".venv/bin/python"):
            words = [sys.executable, *words[1:]]
        done = subprocess.run(words, cwd=self.folder, env=self.env(), capture_output=True, text=True, timeout=300,
                              check=False)
        return (done.stdout + done.stderr).splitlines()


def _listing_keys(rows: list[tuple[str, str, str, str]]) -> dict[str, tuple[str, str, str, int]]:
    """Run name -> (reaction, namespace, workload normalized, n-th such run): how a run is found again."""
    seen: dict[tuple[str, str, str], int] = defaultdict(int)
    keys = {}
    for name, reaction, namespace, workload in rows:
        base = (reaction, namespace, normalize(workload))
        keys[name] = (*base, seen[base])
        seen[base] += 1
    return keys


def _documented_runs() -> list[tuple[str, str, str, str]]:
    listing = next((s for s in SAMPLES if s.name == "audit-list"), None)
    if listing is None:
        return []
    rows = []
    for line in listing.steps[0].expected:
        cells = line.split()
        if len(cells) == 8 and RUN_NAME.fullmatch(cells[7]):  # STARTED (2) REACTION TENANT NAMESPACE WORKLOAD OUTCOME WORKFLOW
            rows.append((cells[7], cells[2], cells[4], cells[5]))
    return rows


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory) -> Stage:
    folder = tmp_path_factory.mktemp("docs")
    for name in ("manifests", "examples"):
        (folder / name).symlink_to(REPO / name)
    done = subprocess.run([sys.executable, "-m", "gpuaas.cli", "demo", "--output-dir", "demo-report"], cwd=folder,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    stage = Stage(folder, done.stdout.splitlines())
    runs = json.loads(subprocess.run([sys.executable, "-m", "gpuaas.cli", "audit", "--archive", "demo-report/runs.db",
                                      "--output", "json"], cwd=folder, capture_output=True, text=True,
                                     check=True).stdout)
    actual = {key: name for name, key in _listing_keys([(r["workflow"], r["reaction"], r["namespace"] or "-",
                                                          r["workload"] or "-") for r in runs]).items()}
    for name, key in _listing_keys(_documented_runs()).items():
        if key in actual:
            stage.names[name] = actual[key]
    return stage


def test_the_docs_have_samples() -> None:
    names = [sample.name for sample in SAMPLES]
    assert len(names) == len(set(names)), f"sample names must be unique: {names}"
    assert {"audit-list", "route-admission-check", "demo-summary"} <= set(names)


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.where for s in SAMPLES])
def test_sample_output_is_what_the_command_prints(stage: Stage, sample: Sample) -> None:
    outputs = [stage.run(step.command) for step in sample.steps]
    problems = [f"$ {step.command}: {problem}" for step, output in zip(sample.steps, outputs, strict=True)
                if (problem := mismatch(step.expected, output, any_order="any-order" in sample.options))]
    if problems and REGENERATE:
        cut = any(line.strip() == SKIP or line.rstrip().endswith("...") for s in sample.steps for line in s.expected)
        if not cut:
            rewrite(sample, outputs)
            return
    printed = "\n".join(f"$ {step.command}\n" + "\n".join(output) for step, output in zip(sample.steps, outputs,
                                                                                              strict=True))
    assert not problems, f"{sample.where} is stale:\n" + "\n".join(problems) + f"\n--- printed now:\n{printed}"


# The README's demo table: (what the row is about, how to find it in the demo's timeline).
README_ROWS = [
    ("notebook", lambda r: "opens notebook" in r["event"]),
    ("inference servers", lambda r: "deploys inference server" in r["event"]),
    ("Ray cluster", lambda r: "starts RayCluster" in r["event"]),
    ("backlog", lambda r: "submits PyTorchJob" in r["event"]),
    ("batch Job completes", lambda r: "eval-batch completes" in r["event"]),
    ("idle alert and warning", lambda r: r["template"] == "gpuaas-on-idle"),
    ("release after the grace", lambda r: r["template"] == "gpuaas-on-idle" and r["sensor"] == "(sweep: delivered)"),
    ("queued job admitted", lambda r: r["template"] == "gpuaas-on-admitted" and "pytorchjob-train-llm" in r["event"]),
    ("resume", lambda r: "hand-submits gpuaas-resume-workers" in r["event"]),
    ("job completes, Ray admitted again", lambda r: "train-llm completes" in r["event"]),
]
TOLERANCE_MINUTES = 15
"""How much earlier than the README a moment may come. Later is bounded by the next documented moment instead (see
the test): the demo's clock runs on the wall clock (300 demo seconds a wall second), so a loaded machine shows the
moments that wait on reactions later. Beside the real tier in CI the idle release came at 10:46 (load 14) and the
queued job's admission at 10:56 (ciD, load 16) for the README's 10:35; at load 94 the batch Job completed at 09:52
for 09:40."""
LAST_ROW_MINUTES = 60
"""The last row has no next moment: it may be this much later."""


def _minutes(clock: str) -> int:
    hours, minutes = clock.split(":")[:2]
    return int(hours) * 60 + int(minutes)


def test_the_full_demo_shades_both_waits_for_quota(stage: Stage) -> None:
    """The README's story has two waits: the PyTorchJob until the release, the Ray cluster from its resume
    until the PyTorchJob completes; the report's chart shades each on its tenant's panel."""
    from engine.report import queued_spans

    marks = json.loads((stage.folder / "demo-report" / "summary.json").read_text())["marks"]
    spans = queued_spans(marks)
    assert set(spans) == {"research", "vision"} and all(len(s) == 1 for s in spans.values()), marks
    (release,) = [m["hours"] for m in marks if m["what"].startswith("released")]
    assert spans["research"][0][1] >= release and spans["vision"][0][0] > release, (spans, release)


def test_readme_demo_times_are_when_the_demo_shows_them(stage: Stage) -> None:
    """Each README time against this run's own timeline (its demo clock): never more than TOLERANCE_MINUTES earlier,
    never as late as the README's next later moment, in the README's order. The clock starts with the story, not
    with the engine and Prometheus, so a slow start-up on a loaded machine moves no time of the table."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    documented = re.findall(r"^\| (\d\d:\d\d) \|", readme, flags=re.MULTILINE)
    assert len(documented) == len(README_ROWS), f"README demo table has {len(documented)} rows, the test knows " \
                                                f"{len(README_ROWS)}: update README_ROWS with the table"
    timeline = json.loads((stage.folder / "demo-report" / "summary.json").read_text())["timeline"]
    shown = []
    for index, (clock, (about, found)) in enumerate(zip(documented, README_ROWS, strict=True)):
        row = next((r for r in timeline if found(r)), None)
        assert row is not None, f"README row {clock} ({about}): no such moment in this demo's timeline"
        at = _minutes(row["time"])
        assert at >= _minutes(clock) - TOLERANCE_MINUTES, \
            f"README says {clock} for the {about}; the demo shows it earlier, at {row['time']}"
        later = [_minutes(c) for c in documented[index + 1:] if _minutes(c) > _minutes(clock)]
        bound = later[0] if later else _minutes(clock) + LAST_ROW_MINUTES
        assert at < bound, (f"README says {clock} for the {about}; the demo shows it at {row['time']}, not before "
                            f"the README's next moment ({bound // 60:02d}:{bound % 60:02d}): the table is out of date")
        shown.append((at, about))
    assert shown == sorted(shown, key=lambda item: item[0]), f"the demo shows the README's moments in another order: {shown}"
