"""The step image: built on UBI, installs no extras, precompiled, runs as an arbitrary non-root UID.

No container engine runs in CI, so the Containerfile is checked for the properties that matter, and
the one runtime promise (the steps import without any admin-tool package) is checked for real.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONTAINERFILE = (REPO / "Containerfile").read_text()
INSTRUCTIONS = [line for line in CONTAINERFILE.splitlines() if line and not line.startswith("#")]


def test_base_is_a_ubi_python_image() -> None:
    assert re.search(r"^ARG BASE_IMAGE=registry\.access\.redhat\.com/ubi\d+/python-3\d+", CONTAINERFILE, re.MULTILINE)
    assert "FROM ${BASE_IMAGE}" in INSTRUCTIONS


def test_installs_the_repo_without_extras() -> None:
    installs = [line for line in INSTRUCTIONS if "pip install" in line]
    assert installs and all(re.search(r"pip install \.(\s|$)", line) for line in installs), installs
    assert "[" not in " ".join(installs)


def test_bytecode_is_precompiled_and_not_rewritten_at_run_time() -> None:
    assert "compileall" in CONTAINERFILE and "--invalidation-mode unchecked-hash" in CONTAINERFILE
    assert "PYTHONDONTWRITEBYTECODE=1" in CONTAINERFILE


def test_runs_as_a_numeric_non_root_user_in_group_zero() -> None:
    users = [line.split()[1] for line in INSTRUCTIONS if line.startswith("USER ")]
    assert users[-1].isdigit() and users[-1] != "0"
    assert "fix-permissions /opt/app-root" in CONTAINERFILE
    assert "chmod 777" not in CONTAINERFILE and "chmod -R 777" not in CONTAINERFILE


def test_every_reaction_imports_without_admin_tool_packages() -> None:
    """What `pip install .` without extras gives the pod: no hera, jsonschema, matplotlib, gpuaas CLI."""
    blocked = ["hera", "jsonschema", "matplotlib", "kubernetes_validate", "pygjson", "gjson", "gpuaas", "engine",
               "workflows", "sensors"]
    reactions = sorted(p.stem for p in (REPO / "steps" / "reactions").glob("*.py") if p.stem != "__init__")
    code = (f"import sys\nfor name in {blocked!r}: sys.modules[name] = None\n"
            "import importlib, steps.entrypoint\n"
            f"for r in {reactions!r}: importlib.import_module('steps.reactions.' + r)\n"
            "print('ok')")
    done = subprocess.run([sys.executable, "-c", code], check=False, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert reactions and done.stdout.strip() == "ok"


def test_copies_every_file_the_build_reads() -> None:
    """`pip install .` reads the readme and the license files pyproject names: the image build fails
    without them (setuptools refuses a missing license file)."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    needed = [project["readme"], *project.get("license-files", [])]
    copied = {name for line in INSTRUCTIONS if line.startswith("COPY ") for name in line.split()[1:-1]}
    assert set(needed) <= copied, f"Containerfile copies {sorted(copied)}; the build also reads {needed}"
