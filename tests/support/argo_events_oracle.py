"""Argo Events' own answers, from the Go program in stack/argo-events-oracle (built from the
pinned argo-events module by `make setup`; rebuilt here when its sources changed).

    answers = ask([{"sensor": sensor_dict, "events": [argo_event_dict, ...]}, ...])

Each answer is the program's Result (see stack/argo-events-oracle/sensor.go). The Go toolchain is
a requirement of the project (docs/development.md): without it this fails loudly, never skips.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
ORACLE_MODULE = REPO / "stack" / "argo-events-oracle"
BINARY = Path(sys.prefix) / "bin" / "argo-events-oracle"


class OracleUnavailable(RuntimeError):
    """The oracle could not be built or did not answer; the message says what to do."""


@functools.cache
def oracle_binary() -> Path:
    """Build (or confirm up to date, about a second with a warm Go cache) and return the oracle."""
    go = shutil.which("go")
    if go is None:
        raise OracleUnavailable("the Argo Events oracle is built with Go, and no `go` command is on PATH; install "
                                "Go 1.26+ (`make setup` needs it too)")
    env = dict(os.environ, GOFLAGS="-mod=readonly")
    started = time.monotonic()
    done = subprocess.run([go, "build", "-o", str(BINARY), "."], cwd=ORACLE_MODULE, env=env, capture_output=True,
                          text=True, timeout=3600, check=False)
    if done.returncode != 0:
        raise OracleUnavailable(f"`go build` of {ORACLE_MODULE.relative_to(REPO)} failed after "
                                f"{time.monotonic() - started:.0f}s: {done.stderr.strip()[-2000:]}")
    return BINARY


def ask(cases: list[dict[str, Any]], timeout: float = 600) -> list[dict[str, Any]]:
    """Argo Events' answer for each case, in order."""
    binary = oracle_binary()
    payload = "".join(json.dumps(case, ensure_ascii=False) + "\n" for case in cases)
    # TZ=UTC: the sensor image has no /etc/localtime, so Go's Local is UTC there too.
    done = subprocess.run([str(binary)], input=payload.encode("utf-8"), capture_output=True, timeout=timeout,
                          env=dict(os.environ, TZ="UTC"), check=False)
    if done.returncode != 0:
        raise OracleUnavailable(f"the oracle exited with {done.returncode}: "
                                f"{done.stderr.decode('utf-8', 'replace').strip()[-2000:]}")
    answers = [json.loads(line) for line in done.stdout.decode("utf-8").splitlines() if line.strip()]
    if len(answers) != len(cases):
        raise OracleUnavailable(f"expected {len(cases)} answers from the oracle, found {len(answers)}")
    return answers
