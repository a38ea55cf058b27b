"""`gpuaas doctor` run as an admin runs it, against a real stack: a subprocess with the cluster's kubeconfig
in $KUBECONFIG and the built kubectl on $PATH (its printed fixes are kubectl commands, run by bash exactly as
printed). Shared by tests/realstack/test_doctor.py (the plain stack) and test_monitoring_profiles.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuaas.cluster.binaries import program
from tests.support.real_cluster import RealCluster

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Doctor:
    cluster: RealCluster
    prometheus: str
    alertmanager: str | None = None
    options: tuple[str, ...] = field(default_factory=tuple)
    """More options on every run (--bearer-token-file, --ca-file)."""
    wrap: Callable[[list[str]], list[str]] | None = None
    """Turns the command line into another (e.g. gpuaas.cluster.monitoring_pods.with_hosts: Service names resolved
    as a pod resolves them, for a serving certificate issued to the Service's name)."""

    def env(self, kubeconfig: Path | None = None) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(kubeconfig or self.cluster.kubeconfig),
                "PATH": f"{program('kubernetes', 'kubectl').parent}{os.pathsep}{os.environ.get('PATH', '')}"}

    def __call__(self, *extra: str, kubeconfig: Path | None = None, prometheus: str | None = None
                 ) -> tuple[int, dict[str, Any], float]:
        """(exit code, the JSON report, seconds)."""
        urls = ["--prometheus", prometheus or self.prometheus]
        if self.alertmanager:
            urls += ["--alertmanager", self.alertmanager]
        started = time.monotonic()
        argv = [sys.executable, "-m", "gpuaas.cli", "doctor", *urls, "--output", "json", *self.options, *extra]
        done = subprocess.run(self.wrap(argv) if self.wrap else argv, cwd=ROOT, env=self.env(kubeconfig),
                              capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode in (0, 1), f"gpuaas doctor exited {done.returncode}: {done.stderr[-2000:]}"
        return done.returncode, json.loads(done.stdout), time.monotonic() - started

    def run_fix(self, fix: str) -> None:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", fix], cwd=ROOT, env=self.env(), capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 0, f"the printed fix failed ({done.returncode}):\n{fix}\n{done.stderr[-2000:]}"


STACK_GAPS = {"kube-state-metrics": "warn"}
"""Findings no profile of the stack can pass: no kube-state-metrics runs on it (the doctor warns that
per-tenant utilization reads nothing; it does not block)."""


def not_ok(report: dict[str, Any]) -> dict[str, str]:
    return {f["check"]: f["status"] for f in report["findings"] if f["status"] != "ok"}


def changed(report: dict[str, Any], baseline: dict[str, str]) -> dict[str, str]:
    """The findings whose status differs from the baseline's (a check that became ok counts too)."""
    now = not_ok(report)
    return {k: now.get(k, "ok") for k in set(now) | set(baseline) if now.get(k, "ok") != baseline.get(k, "ok")}


def finding(report: dict[str, Any], check: str) -> dict[str, Any]:
    return next(f for f in report["findings"] if f["check"] == check)
