"""Every hint the CLI prints runs as printed (issue 18 item 3): `gpuaas ...` when PATH finds this installation,
else the path to it, as a new user right after `make demo` has it (`.venv/bin/` is not on PATH)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.prefix) / "bin" / "gpuaas"
BARE_PATH = "/usr/local/bin:/usr/bin:/bin"


def _hint(cwd: Path, path: str) -> str:
    """The command `gpuaas audit` tells the user to run when the archive is missing."""
    done = subprocess.run([str(SCRIPT), "audit", "--archive", "nope.db"], cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False, env={**os.environ, "PATH": path})
    assert done.returncode == 2, done.stderr
    found = re.search(r"run `(.+?) demo` first", done.stderr)
    assert found, done.stderr
    return found.group(1)


def test_off_path_the_hint_is_the_path_that_runs_it(tmp_path: Path) -> None:
    assert SCRIPT.is_file(), f"expected the gpuaas entry point at {SCRIPT} (pip install -e .)"
    for cwd in (REPO, tmp_path):
        hint = _hint(cwd, BARE_PATH)
        assert hint != "gpuaas" and Path(cwd, hint).resolve() == SCRIPT.resolve(), (cwd, hint)
        ran = subprocess.run(f"{hint} --help", shell=True, cwd=cwd, capture_output=True, text=True, timeout=60,
                             check=False, env={**os.environ, "PATH": BARE_PATH})
        assert ran.returncode == 0 and "usage: gpuaas" in ran.stdout, ran.stderr
    relative = os.path.relpath(SCRIPT, REPO)  # `.venv/bin/gpuaas` in the checkout
    # a venv outside the checkout (another worktree's, virtualenvwrapper's) is named by its absolute path
    assert _hint(REPO, BARE_PATH) == (relative if not relative.startswith("..") else str(SCRIPT))


def test_on_path_the_hint_is_gpuaas(tmp_path: Path) -> None:
    assert _hint(tmp_path, f"{SCRIPT.parent}:{BARE_PATH}") == "gpuaas"


def test_another_gpuaas_first_on_path_is_not_named(tmp_path: Path) -> None:
    """A different installation earlier on PATH would run other code: the hint names this one's path."""
    other = tmp_path / "bin"
    other.mkdir()
    (other / "gpuaas").write_text("#!/bin/sh\necho another gpuaas\n")
    (other / "gpuaas").chmod(0o755)
    hint = _hint(tmp_path, f"{other}:{SCRIPT.parent}:{BARE_PATH}")
    assert Path(tmp_path, hint).resolve() == SCRIPT.resolve(), hint


def test_a_command_beyond_the_demos_packages_says_to_run_make_setup(tmp_path: Path) -> None:
    """`gpuaas cluster up` in `make demo`'s venv (no `cli` extra, so no `cryptography`): one line naming the
    package and `make setup`, exit 78, not 'a defect of gpuaas' (a new admin's walk met the latter)."""
    done = _cluster_up_without(tmp_path, "cryptography")
    assert done.returncode == 78, done.stderr
    (line,) = done.stderr.strip().splitlines()[-1:]
    assert "needs Python package 'cryptography'" in line and "make setup" in line, done.stderr
    assert "defect" not in done.stderr, done.stderr


def test_a_missing_module_of_gpuaas_itself_is_a_defect_not_a_set_up(tmp_path: Path) -> None:
    """Only a package of an optional extra is blamed on set-up: a module of gpuaas' own that cannot be imported
    (a rename, a stale install) says 'a defect of gpuaas', exit 70, as any other failure of its own."""
    done = _cluster_up_without(tmp_path, "gpuaas.cluster.stack")
    assert done.returncode == 70, done.stderr
    assert "a defect of gpuaas" in done.stderr and "make setup" not in done.stderr, done.stderr


def _cluster_up_without(tmp_path: Path, module: str) -> subprocess.CompletedProcess[str]:
    """`gpuaas cluster up --no-build` in a Python where `module` cannot be imported (as in a venv without it)."""
    script = (f"import sys\nsys.modules[{module!r}] = None\nfrom gpuaas.cli import main\n"
              f"sys.exit(main(['cluster', 'up', '--no-build', '--state-dir', {str(tmp_path / 'state')!r}]))\n")
    return subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False)
