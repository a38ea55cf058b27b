"""How long a fresh step process takes before it does useful work (issue 2: goal <= 0.6 s).

    .venv/bin/python benchmarks/steps.py [--runs 7]

Starts the Kubernetes-API-compatible server (engine.apiserver) on loopback with one admitted
Workload, then launches `python -m steps release-workers PARAMS_FILE` (dry-run, so every run sees
the same cluster) several times, exactly as Argo does, and measures from just before the process
is spawned to the moment the API server receives its FIRST request. A bare interpreter
(`python -c pass`, same flags) is timed in the same run for comparison.

Prints readable figures, then, last, one JSON line:
    {"step_cold_start_s": <median>, "python_startup_s": <median>, ...}
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

NS = "bench"


def seed(store: object) -> None:
    from steps.gateways import resources as R

    tpl = {"spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    store.create(R.CLUSTER_QUEUE, {"apiVersion": R.CLUSTER_QUEUE.api_version, "kind": "ClusterQueue",  # type: ignore[attr-defined]
                                   "metadata": {"name": "bench"}, "spec": {"cohortName": "gpuaas"}})
    store.create(R.LOCAL_QUEUE, {"apiVersion": R.LOCAL_QUEUE.api_version, "kind": "LocalQueue",  # type: ignore[attr-defined]
                                 "metadata": {"name": "q", "namespace": NS}, "spec": {"clusterQueue": "bench"}}, NS)
    store.create(R.JOB, {"apiVersion": "batch/v1", "kind": "Job",  # type: ignore[attr-defined]
                         "metadata": {"name": "train", "namespace": NS, "uid": "uid-job"},
                         "spec": {"parallelism": 2, "template": tpl}}, NS)
    store.create(R.WORKLOAD, {  # type: ignore[attr-defined]
        "apiVersion": R.WORKLOAD.api_version, "kind": "Workload",
        "metadata": {"name": "job-train-1", "namespace": NS, "creationTimestamp": "2026-01-01T12:00:00Z",
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "uid-job",
                                          "controller": True}]},
        "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 2, "template": tpl}]},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                                   "lastTransitionTime": "2026-01-01T12:01:00Z"},
                                  {"type": "Admitted", "status": "True", "reason": "Admitted",
                                   "lastTransitionTime": "2026-01-01T12:01:00Z"}],
                   "admission": {"clusterQueue": "bench", "podSetAssignments": [
                       {"name": "main", "count": 2, "flavors": {"nvidia.com/gpu": "a100"}}]}}}, NS)


class FirstRequest:
    """Notes when the API server receives its first request after `arm()`."""

    def __init__(self, api: object) -> None:
        self._original = api._count_request  # type: ignore[attr-defined]
        self._event = threading.Event()
        self.at = 0.0
        api._count_request = self._count  # type: ignore[attr-defined]

    def _count(self, method: str) -> None:
        if not self._event.is_set():
            self.at = time.perf_counter()
            self._event.set()
        self._original(method)

    def arm(self) -> None:
        self._event.clear()
        self.at = 0.0

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()

    from engine.apiserver import ApiServer

    api = ApiServer()
    url = api.start()
    seed(api.store)
    first = FirstRequest(api)
    work = Path(tempfile.mkdtemp(prefix="gpuaas-bench-"))
    params = work / "script"
    params.write_text(json.dumps([{"name": "namespace", "value": NS}, {"name": "workload", "value": "job-train-1"},
                                  {"name": "event", "value": ""}, {"name": "dry-run", "value": "true"}]))
    env = {**os.environ, "GPUAAS_KUBE_URL": url, "GPUAAS_OUTPUTS_DIR": str(work / "out"), "PYTHONPATH": str(REPO),
           "GPUAAS_NAMESPACE": "gpuaas"}
    cold: list[float] = []
    total: list[float] = []
    bare: list[float] = []
    outcome = ""
    try:
        # one warm-up of each so the OS file cache is what a node with the image pulled has
        subprocess.run([sys.executable, "-m", "steps", "release-workers", str(params)], env=env, cwd=work,
                       capture_output=True, check=False)
        subprocess.run([sys.executable, "-c", "pass"], env=env, cwd=work, check=False)
        for _ in range(args.runs):
            first.arm()
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "steps", "release-workers", str(params)], env=env, cwd=work,
                                  capture_output=True, text=True, check=False)
            end = time.perf_counter()
            if done.returncode != 0 or not first.wait(5):
                print(done.stdout, done.stderr, file=sys.stderr)
                raise SystemExit(f"step run failed (exit {done.returncode})")
            cold.append(first.at - start)
            total.append(end - start)
            outcome = (work / "out" / "outcome").read_text()
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], env=env, cwd=work, check=True)
            bare.append(time.perf_counter() - start)
    finally:
        api.stop()

    def ms(values: list[float]) -> str:
        return f"median {statistics.median(values) * 1000:7.1f} ms  (min {min(values) * 1000:.1f}, " \
               f"max {max(values) * 1000:.1f}, n={len(values)})"

    print("gpuaas step cold start: `python -m steps release-workers FILE` (dry-run) against engine.apiserver")
    print(f"  spawn -> first API request : {ms(cold)}")
    print(f"  spawn -> process exit      : {ms(total)}  (outcome: {outcome})")
    print(f"  bare `python -c pass`      : {ms(bare)}")
    print(f"  step overhead over bare    : {(statistics.median(cold) - statistics.median(bare)) * 1000:.1f} ms")
    print("  goal: step_cold_start_s <= 0.6")
    print(json.dumps({"step_cold_start_s": round(statistics.median(cold), 4),
                      "python_startup_s": round(statistics.median(bare), 4),
                      "step_total_s": round(statistics.median(total), 4), "runs": args.runs}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
