"""Fuzz: `python -m steps <reaction> PARAMS_FILE`, the whole step, against a real local API server.

Whatever the parameters file holds (not UTF-8, not JSON, JSON nested 2,000 deep, lone surrogates,
names with non-ASCII letters, `gpus` with thousands of digits or non-ASCII digits, events and
alerts broken anywhere), the step exits 0 with a recorded outcome; malformed input is
`rejected-input` with a one-line error naming what was expected and what was found; never
`failed`, never a traceback (issue 10 item 10).
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

OUTCOMES = {"applied", "no-op", "skipped-by-policy", "rejected-input"}


@pytest.fixture(scope="module")
def api() -> Iterator[ApiServer]:
    with running_apiserver(set_env=False) as server:
        yield server


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


def test_the_parameters_file(api: ApiServer, scratch: Path) -> None:
    from steps.entrypoint import main

    env = {"GPUAAS_KUBE_URL": api.url, "GPUAAS_NAMESPACE": "gpuaas", "GPUAAS_PROMETHEUS_URL": "http://127.0.0.1:9",
           "GPUAAS_RUN_ID": "fuzz"}
    cases = 0

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
            code = main([reaction, str(params_file)], outputs_dir=str(out), environ=env)
        record = json.loads((out / "record").read_text(encoding="utf-8"))
        outcome = (out / "outcome").read_text(encoding="utf-8")
        assert "Traceback" not in stderr.getvalue(), stderr.getvalue()
        assert code == 0, (code, record["data"]["errors"])
        assert outcome in OUTCOMES or (reaction == "record-outcome" and outcome == "failed"), record["data"]
        assert record["data"]["outcome"] == outcome
        if outcome == "rejected-input":
            first = record["data"]["errors"][0]
            assert "\n" not in first and ": expected " in first and ", found " in first, first
        shutil.rmtree(case_dir)

    step()
    assert cases >= settings.default.max_examples, f"only {cases} cases ran"
