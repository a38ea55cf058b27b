"""`make setup` checks Go before anything else: one line naming the version stack/*/go.mod asks for and
where to get it, instead of a failure deep in the first build or schema download."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")


def _needed() -> str:
    versions = {m.group(1) for gomod in (ROOT / "stack").glob("*/go.mod")
                if (m := re.search(r"^go (\S+)$", gomod.read_text(), re.MULTILINE))}
    return max(versions, key=lambda v: tuple(int(p) for p in v.split(".")))


def _make_go_check(tmp_path: Path, go_script: str | None) -> subprocess.CompletedProcess:
    """`make go-toolchain` with a PATH that holds only the shell tools the recipe uses, plus `go` if given."""
    assert MAKE, "make missing: install the Debian package make"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sed", "sort", "tail", "head"):
        found = shutil.which(tool)
        assert found, f"{tool} missing"
        (bin_dir / tool).symlink_to(found)
    if go_script is not None:
        (bin_dir / "go").write_text(go_script)
        (bin_dir / "go").chmod(0o755)
    return subprocess.run([MAKE, "-s", "--no-print-directory", "-C", str(ROOT), "go-toolchain"],
                          env={"PATH": str(bin_dir), "HOME": str(tmp_path)}, capture_output=True, text=True,
                          check=False, timeout=120)


def test_no_go_fails_in_one_line_that_names_the_version_and_where_to_get_it(tmp_path: Path) -> None:
    done = _make_go_check(tmp_path, None)
    assert done.returncode != 0
    (line,) = [line for line in done.stdout.splitlines() + done.stderr.splitlines()
               if line.strip() and not line.startswith(("make: ", "make["))]
    assert f"Go {_needed()}" in line and "go.dev/dl" in line and "no `go` on PATH" in line, line


def test_a_go_too_old_to_switch_toolchains_fails_in_one_line(tmp_path: Path) -> None:
    """Debian 12's golang-go is 1.19: it predates Go's toolchain switch (1.21), so it cannot fetch 1.26 itself."""
    old = "#!/bin/sh\ncase \"$1 $2\" in\n  'env GOVERSION') echo go1.19.8 ;;\n  'version ') echo 'go version go1.19.8 linux/amd64' ;;\n  *) exit 2 ;;\nesac\n"
    done = _make_go_check(tmp_path, old)
    assert done.returncode != 0
    (line,) = [line for line in done.stdout.splitlines() + done.stderr.splitlines()
               if line.strip() and not line.startswith(("make: ", "make["))]
    assert f"Go {_needed()}" in line and "go1.19.8" in line and "go.dev/dl" in line, line


def test_the_go_on_this_machine_passes_quietly() -> None:
    """The real Go (the project needs it anyway): the check says nothing and succeeds."""
    assert MAKE and shutil.which("go"), f"go missing: install Go {_needed()}+ from https://go.dev/dl/"
    done = subprocess.run([MAKE, "-s", "--no-print-directory", "-C", str(ROOT), "go-toolchain"], capture_output=True,
                          text=True, check=False, timeout=300)
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr


def test_setup_checks_go_before_anything_it_builds() -> None:
    """First prerequisite of `setup`, and order-only before the venv and the oracle build (also under make -j)."""
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^setup: go-toolchain .*\bupstream-modules\b", makefile, re.MULTILINE)
    assert re.search(r"^upstream-modules: .*\| go-toolchain\n\t\$\(BIN\)/python -m gpuaas.upstream$", makefile,
                     re.MULTILINE)
    assert re.search(r"^\$\(STAMP\): .*\| go-toolchain$", makefile, re.MULTILINE)
    assert re.search(r"^\$\(ORACLE\): .*\| go-toolchain$", makefile, re.MULTILINE)


def test_every_make_target_the_code_and_docs_name_exists() -> None:
    """A message or a page that says `make X` names a target the Makefile has."""
    targets = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    named: dict[str, set[str]] = {}
    for folder in ("gpuaas", "engine", "steps", "routing", "sensors", "workflows", "docs", "tests", "benchmarks"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".md") and path.is_file():
                for target in re.findall(r"`make ([a-z][a-z-]*)", path.read_text()):
                    named.setdefault(target, set()).add(str(path.relative_to(ROOT)))
    for page in ("README.md", "ARCHITECTURE.md"):
        for target in re.findall(r"`make ([a-z][a-z-]*)", (ROOT / page).read_text()):
            named.setdefault(target, set()).add(page)
    unknown = {target: sorted(where) for target, where in named.items() if target not in targets}
    assert named and unknown == {}, f"no such make target: {unknown}"
