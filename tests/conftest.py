"""Hypothesis profiles for the fuzz tests (tests/fuzz/), registered before pytest parses options so
`--hypothesis-profile` can choose one.

- `ci` (the default, what `make test` runs): 10,000 cases per entry point, no deadline (a shared
  CI machine must not turn a slow case into a failure), no example database (nothing written into
  the checkout; a failure prints the `@reproduce_failure` blob instead).
- `dev`: 300 cases per entry point, for a quick local run: `pytest tests/fuzz --hypothesis-profile=dev`.

It also installs tests/support/no_skips.py's hooks (a skipped test is reported as a failure) and
tests/support/disk_space.py's (the run refuses to start on a nearly full disk: 8 GiB with real-stack
tests, 1 GiB without; and reports what was free).

The tests run as in an activated virtualenv: its bin/ first on PATH, so the hints the CLI prints read
`gpuaas ...` as the docs write them (gpuaas.invocation); tests/test_invocation.py checks a PATH without it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

from tests.support.disk_space import (  # noqa: F401
    pytest_collection_finish,
    pytest_sessionstart,
    pytest_terminal_summary,
)
from tests.support.no_skips import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401

FUZZ_CASES = 10_000
_COMMON = {"deadline": None, "database": None, "print_blob": True,
           "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.function_scoped_fixture]}
settings.register_profile("ci", max_examples=FUZZ_CASES, **_COMMON)
settings.register_profile("dev", max_examples=300, **_COMMON)
settings.load_profile("ci")

_VENV_BIN = str(Path(sys.prefix) / "bin")
if os.environ.get("PATH", "").split(os.pathsep)[0] != _VENV_BIN:
    os.environ["PATH"] = os.pathsep.join([_VENV_BIN, os.environ.get("PATH", "")])
