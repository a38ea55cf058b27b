"""Fuzz: `python -m steps <reaction> PARAMS_FILE`, the whole step, against a real local API server.

Whatever the parameters file holds (not UTF-8, not JSON, JSON nested 2,000 deep, lone surrogates,
names with non-ASCII letters, `gpus` with thousands of digits or non-ASCII digits, events and
alerts broken anywhere), the step exits 0 with a recorded outcome; malformed input is
`rejected-input` with a one-line error naming what was expected and what was found; never
`failed`, never a traceback (issue 10 item 10). The API server holds the Workload the well-formed
parameters name and a real (empty) Prometheus answers on-idle, so parameters that parse go on to
observe, plan and write; the test checks that releases, resumes and quota changes were applied.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings

from engine.apiserver import ApiServer
from tests.fuzz.inputs import params_files, process_recursion_limit
from tests.support.apiserver import running_apiserver
from tests.support.prometheus import running_monitoring

OUTCOMES = {"applied", "no-op", "skipped-by-policy", "rejected-input"}


@pytest.fixture(scope="module")
def api() -> Iterator[ApiServer]:
    """A cluster holding the Workload the well-formed parameters name (tests.fuzz.inputs.WELL_FORMED:
    team-a/job-train-1a2b3, a Job's): cases that parse go on to observe, plan and apply against it,
    in whatever state the cases before left it (released, resumed, its quota changed)."""
    from steps.gateways.resources import RESOURCE_FLAVOR
    from tests.steps.objects import Scene

    with running_apiserver(set_env=False) as server:
        Scene.of("Job", workers=2).seed(server.store)
        server.store.create(RESOURCE_FLAVOR, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                                              "metadata": {"name": "a100"}}, None)
        yield server


@pytest.fixture(scope="module")
def prometheus_url() -> Iterator[str]:
    """A real, empty Prometheus: on-idle asks it and finds no samples (an unreachable one is a
    transient failure, exit 75, which is right and not what this test is about)."""
    with running_monitoring() as monitoring:
        yield monitoring.prometheus_url


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """Where the cases' files go: a tmpfs when the machine has one (/dev/shm), else pytest's tmp_path.
    10,000 steps write 10 files each; on a disk that is minutes of I/O, in memory seconds."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        folder = Path(tempfile.mkdtemp(prefix="gpuaas-fuzz-", dir=shm))
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    else:
        yield tmp_path


def test_the_parameters_file(api: ApiServer, prometheus_url: str, scratch: Path) -> None:
    from collections import Counter

    from steps.entrypoint import main

    env = {"GPUAAS_KUBE_URL": api.url, "GPUAAS_NAMESPACE": "gpuaas", "GPUAAS_PROMETHEUS_URL": prometheus_url}
    cases = 0
    outcomes: Counter[tuple[str, str]] = Counter()

    @given(params_files())
    def step(case: tuple[str, bytes]) -> None:
        nonlocal cases
        cases += 1
        reaction, content = case
        # A fresh folder per case: rewriting (truncating) the same files costs ~2 ms each on ext4
        # (auto_da_alloc flushes them); creating new ones does not.
        case_dir = scratch / str(cases)
        case_dir.mkdir()
        params_file, out = case_dir / "params", case_dir / "out"
        params_file.write_bytes(content)
        stderr = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr), process_recursion_limit():
            code = main([reaction, str(params_file)], outputs_dir=str(out),
                        environ={**env, "GPUAAS_RUN_ID": f"fuzz-{cases}"})  # each case its own Argo run
        record = json.loads((out / "record").read_text(encoding="utf-8"))
        outcome = (out / "outcome").read_text(encoding="utf-8")
        assert "Traceback" not in stderr.getvalue(), stderr.getvalue()
        assert code == 0, (code, record["data"]["errors"])
        assert outcome in OUTCOMES or (reaction == "record-outcome" and outcome == "failed"), record["data"]
        assert record["data"]["outcome"] == outcome
        outcomes[(reaction, outcome)] += 1
        if outcome == "rejected-input":
            first = record["data"]["errors"][0]
            assert "\n" not in first and ": expected " in first and ", found " in first, first
        shutil.rmtree(case_dir)

    step()
    assert cases >= settings.default.max_examples, f"only {cases} cases ran"
    # past parsing, into the reactions' decisions and writes (or this proves only the parsers)
    for reaction in ("release-workers", "resume-workers", "provision-quota"):
        assert outcomes[(reaction, "applied")] > 0, outcomes
