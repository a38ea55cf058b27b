"""Fixtures for the audit tests: a run archive from Workflow fixtures, and the CLI in-process."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuaas.cli import main
from tests.audit.workflows import history, write_archive

BROKEN_UID = "00000000-0000-4000-8000-00000000dead"
BROKEN_NAME = "gpuaas-on-admitted-broken"


@pytest.fixture
def workflows() -> dict[str, dict[str, Any]]:
    return history()


@pytest.fixture
def archive(tmp_path: Path, workflows: dict[str, dict[str, Any]]) -> Path:
    return write_archive(tmp_path / "runs.db", list(workflows.values()), broken_rows=[(BROKEN_UID, BROKEN_NAME)])


class Cli:
    """`gpuaas ...` in-process: exit code, stdout, stderr."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = main(list(argv))
        captured = self.capsys.readouterr()
        return code, captured.out, captured.err

    def json(self, *argv: str) -> Any:
        code, out, err = self(*argv)
        assert code == 0, err
        return json.loads(out)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    for name in ("ARGO_SERVER", "ARGO_TOKEN", "ARGO_NAMESPACE", "ARGO_SECURE"):
        monkeypatch.delenv(name, raising=False)
    return Cli(capsys)
