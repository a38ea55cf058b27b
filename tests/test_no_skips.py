"""No test skips itself, and a skip from anywhere else (a fixture, a library) fails the run.

A missing tool is a failure with a one-line message saying what to install (`make setup` installs
the Debian packages, `make cluster-build` builds the pinned stack): CI never passes a tier it did not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIPPING = re.compile(r"pytest\.skip\(|mark\.skip(?:if)?\b|importorskip\(|pytest\.xfail\(|mark\.xfail\b")


def test_no_test_skips_itself() -> None:
    here = Path(__file__).resolve()
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in sorted((ROOT / "tests").rglob("*.py")) if path.resolve() != here
             for number, line in enumerate(path.read_text().splitlines(), 1) if SKIPPING.search(line)]
    assert found == [], "a missing tool must fail the test, saying what to install:\n" + "\n".join(found)


def _run_scratch(tmp_path: Path, name: str, body: str) -> str:
    (tmp_path / "conftest.py").write_text(
        "from tests.support.no_skips import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401\n")
    (tmp_path / name).write_text(body)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", name],
                          cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    return out


def test_a_skip_at_run_time_is_reported_as_a_failure(tmp_path: Path) -> None:
    """The suite's hooks (tests/support/no_skips.py), on a scratch test that skips: a library, a fixture..."""
    out = _run_scratch(tmp_path, "test_run.py", "import pytest\n\n"
                       "def test_runs():\n    pass\n\n"
                       "def test_skips():\n    pytest.skip('frobnicator not installed')\n")
    assert "frobnicator not installed" in out, out
    assert out.splitlines()[-1].startswith("1 failed, 1 passed"), out


def test_a_skip_at_import_is_reported_as_an_error(tmp_path: Path) -> None:
    out = _run_scratch(tmp_path, "test_import.py", "import pytest\n\npytest.importorskip('no_such_module_gpuaas')\n")
    assert "ERROR test_import.py" in out and "no_such_module_gpuaas" in out, out
    assert "skipped" not in out.splitlines()[-1], out
