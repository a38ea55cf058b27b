"""Argo Workflows' own retry decision, for checking the rendered `retryStrategy.expression`.

    from tests.support.argo_retry import retry_verdicts
    retry_verdicts([{"expression": "...", "exitCode": None, "status": "Error", "message": "pod deleted"}])
    # -> [{"retry": True}]

Builds `stack/argo-workflows/cmd/retry-expression` (a few lines of Go over the pinned Argo
Workflows module's `util/expr/argoexpr` and `util/expr/env`, the evaluator the controller's
processNodeRetries calls) once per test session; Go's build cache makes later builds take a
second. A missing `go` command is an error, never a skip (the project needs Go anyway: upstream
CRDs and schemas come from the pinned modules).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

HARNESS_DIR = Path(__file__).resolve().parents[2] / "stack" / "argo-workflows"


@functools.cache
def harness() -> Path:
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("the retry-expression harness is built with Go, and no `go` command is on PATH; "
                           "install Go 1.26+ (the project reads upstream schemas from Go modules too)")
    build_dir = Path(tempfile.mkdtemp(prefix="gpuaas-retry-expression-"))
    atexit.register(shutil.rmtree, build_dir, ignore_errors=True)  # 10 MB per session otherwise stays in /tmp
    binary = build_dir / "retry-expression"
    env = dict(os.environ, GOFLAGS=os.environ.get("GOFLAGS", "") + " -mod=readonly")
    done = subprocess.run([go, "build", "-o", str(binary), "./cmd/retry-expression"], cwd=HARNESS_DIR, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"go build ./cmd/retry-expression in {HARNESS_DIR} failed: {done.stderr.strip()}")
    return binary


def retry_verdicts(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Argo's verdict per case: {"retry": bool, "error": str (when the expression failed)}."""
    done = subprocess.run([str(harness())], input=json.dumps(cases), capture_output=True, text=True, timeout=60,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"retry-expression failed: {done.stderr.strip()}")
    return json.loads(done.stdout)
