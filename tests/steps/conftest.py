"""Fixtures for the steps area: a real API server on loopback and an in-process step runner."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.apiserver import ApiServer
from tests.support.apiserver import running_apiserver


@pytest.fixture
def api() -> Iterator[ApiServer]:
    with running_apiserver() as server:
        yield server


class StepRunner:
    """Runs `python -m steps REACTION FILE` in-process (steps.entrypoint.main) and reads its outputs."""

    def __init__(self, server: ApiServer, tmp: Path) -> None:
        self.server = server
        self.tmp = tmp
        self.runs = 0

    def __call__(self, step_reaction: str, /, **params: str) -> tuple[int, dict[str, Any]]:
        """Run `step_reaction` with `params` (underscores become '-': dry_run -> dry-run)."""
        reaction = step_reaction
        from steps.entrypoint import main

        self.runs += 1
        params_file = self.tmp / f"params-{self.runs}.json"
        params_file.write_text(json.dumps([{"name": k.replace("_", "-"), "value": v} for k, v in params.items()]))
        out = self.tmp / f"out-{self.runs}"
        env = {"GPUAAS_KUBE_URL": self.server.url, "GPUAAS_NAMESPACE": "gpuaas",
               "GPUAAS_PROMETHEUS_URL": "http://prometheus.test:9090"}
        code = main([reaction, str(params_file)], outputs_dir=str(out), environ=env)
        outputs = {p.name: p.read_text() for p in out.iterdir()}
        outputs["record"] = json.loads(outputs["record"])
        outputs["plan"] = json.loads(outputs["plan"])
        return code, outputs


@pytest.fixture
def run_step(api: ApiServer, tmp_path: Path) -> StepRunner:
    return StepRunner(api, tmp_path)
