"""The CLI module stays cheap to import; the command works as a real process."""

from __future__ import annotations

import json
import subprocess
import sys


def test_importing_the_command_pulls_in_neither_hera_nor_matplotlib():
    code = ("import sys, gpuaas.commands.audit, gpuaas.cli; gpuaas.cli.build_parser(); "
            "print(sorted(m for m in ('hera', 'matplotlib', 'jsonschema', 'engine') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.replace("'", '"')) == []


def test_runs_as_a_process(archive):
    result = subprocess.run([sys.executable, "-m", "gpuaas.cli", "audit", "--archive", str(archive), "--output",
                             "json", "--outcome", "unknown"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert {r["workflow"] for r in json.loads(result.stdout)} == {
        "gpuaas-resume-workers-g7h8j", "gpuaas-provision-quota-r6t7y", "gpuaas-on-admitted-broken"}
