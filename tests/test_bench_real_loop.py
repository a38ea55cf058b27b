"""benchmarks/real_loop.py's command line (it needs a real cluster to measure: not run here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_runs_below_one_is_bad_usage_before_any_cluster_is_touched(tmp_path: Path) -> None:
    """`--runs 0` has no median: refused as usage (exit 2) at once, not after a cluster start and the
    product's install (a --state-dir is given so that a defect could never start a cluster here)."""
    done = subprocess.run([sys.executable, "benchmarks/real_loop.py", "--runs", "0", "--state-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--runs: expected at least 1, found 0" in done.stderr, done.stderr
    assert "cluster" not in done.stdout
