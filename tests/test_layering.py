"""Imports follow ARCHITECTURE.md's folder table: gpuaas -> engine -> routing, steps; one way only.

The table is the rule and this test reads it, so the document and the code cannot drift apart: for
every folder row, the column "imports from the project" names the project folders its modules may
import, and "imports from outside" the third-party top-level modules (`any`: no limit). Every
import statement counts, including the lazy ones inside functions (a lazy import is still an
arrow: it fails in the step image all the same).
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ARCHITECTURE = REPO / "ARCHITECTURE.md"
PROJECT_COLUMN = "imports from the project"
OUTSIDE_COLUMN = "imports from outside"


@dataclass(frozen=True)
class Rule:
    folder: str
    project: frozenset[str]
    outside: frozenset[str] | None  # None: any third-party module


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _names(cell: str) -> frozenset[str]:
    return frozenset(name.split(".")[0] for name in re.findall(r"`([A-Za-z_][\w.]*)`", cell))


def rules() -> list[Rule]:
    """The folder table's rows that have Python in them (manifests/ has none)."""
    lines = ARCHITECTURE.read_text(encoding="utf-8").splitlines()
    header_at = next(i for i, line in enumerate(lines) if PROJECT_COLUMN in line and line.startswith("|"))
    header = _cells(lines[header_at])
    project_at = next(i for i, c in enumerate(header) if c.startswith(PROJECT_COLUMN))
    outside_at = next(i for i, c in enumerate(header) if c.startswith(OUTSIDE_COLUMN))
    found: list[Rule] = []
    for line in lines[header_at + 2:]:
        if not line.startswith("|"):
            break
        cells = _cells(line)
        folder = cells[0].strip("`").rstrip("/")
        if not any((REPO / folder).rglob("*.py")):
            continue
        outside = None if cells[outside_at].strip() == "any" else _names(cells[outside_at])
        found.append(Rule(folder, _names(cells[project_at]), outside))
    return found


PROJECT_FOLDERS = frozenset(rule.folder for rule in rules())


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, top-level module) of every absolute import in one file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def violations(rule: Rule, root: Path = REPO) -> list[str]:
    problems = []
    for path in sorted((root / rule.folder).rglob("*.py")):
        for line, module in imports(path):
            if module == rule.folder or module == "__future__" or module in sys.stdlib_module_names:
                continue
            where = f"{path.relative_to(root)}:{line}"
            if module in PROJECT_FOLDERS:
                if module not in rule.project:
                    problems.append(f"{where} imports {module}; {rule.folder}/ may import "
                                    f"{', '.join(sorted(rule.project)) or 'no other project folder'}")
            elif rule.outside is not None and module not in rule.outside:
                problems.append(f"{where} imports {module}; {rule.folder}/ may import from outside only "
                                f"{', '.join(sorted(rule.outside))}")
    return problems


def test_the_table_covers_every_python_folder_of_the_product() -> None:
    folders = {p.parent.name for p in REPO.glob("*/__init__.py")} - {"tests"}
    assert folders <= PROJECT_FOLDERS, f"ARCHITECTURE.md's table has no row for {sorted(folders - PROJECT_FOLDERS)}"
    assert "gpuaas" not in {name for rule in rules() for name in rule.project}, \
        "nothing outside gpuaas/ may import gpuaas: the arrows run gpuaas -> engine -> routing, steps"


@pytest.mark.parametrize("rule", rules(), ids=lambda rule: rule.folder)
def test_imports_follow_the_architecture_table(rule: Rule) -> None:
    assert violations(rule) == []


def test_a_forbidden_import_is_caught(tmp_path: Path) -> None:
    """The checker itself: a lazy gpuaas import and an unlisted package in engine/ are both reported."""
    engine = next(rule for rule in rules() if rule.folder == "engine")
    module = tmp_path / "engine" / "late.py"
    module.parent.mkdir()
    module.write_text("import json\nfrom steps.plan import Outcome\n\n"
                      "def f():\n    from gpuaas.manifests import observability\n    import hera\n")
    assert violations(engine, tmp_path) == [
        "engine/late.py:5 imports gpuaas; engine/ may import routing, steps",
        "engine/late.py:6 imports hera; engine/ may import from outside only cloudevents, kubernetes, matplotlib, yaml",
    ]
