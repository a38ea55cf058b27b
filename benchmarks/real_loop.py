"""How long a reaction takes on the real stack: Kueue's condition change -> the Workflow Succeeded.

    .venv/bin/python benchmarks/real_loop.py [--runs 5] [--state-dir DIR]

Issue 9's latency figure, taken through the whole real chain: for each of `--runs` batch Jobs, one
after another, Kueue admits the Job on a KWOK GPU node and KWOK completes it; the product's resource
EventSource sees the Workload change, the Sensor submits `gpuaas-on-admitted` (then
`gpuaas-on-finished`) with the argo CLI, the workflow-controller runs the step pod on the real node.
Each figure runs from the condition's lastTransitionTime (Admitted, Finished: read from the Workload
the Sensor delivered) to the Workflow's creation and to its status.finishedAt. All timestamps are
the cluster's own, in whole seconds.

The baseline, timed in the same run: the same WorkflowTemplate hand-submitted (a Workflow from it
created through the API, as `argo submit --from workflowtemplate/...` does) for the same Workload (Argo Workflows alone: no EventSource, EventBus
or Sensor), from the submit call to finishedAt. The ratio is what event-driven submission costs.

Without --state-dir it starts `gpuaas cluster up --with events` in a new state dir and stops it
afterwards; with one it reuses that running cluster (as `make cluster` started it). Prints readable
figures, then, last, one JSON line. Needs root (the real node), like `make cluster`.
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[1]
PRODUCT_NAMESPACE = "gpuaas"
TENANT = "team-a"
FINISHED = ("Succeeded", "Failed", "Error")
REACTIONS = (("on-admitted", "Admitted"), ("on-finished", "Finished"))


def wait_until(check: Any, *, timeout_s: float, what: str, poll_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(poll_s)
    raise RuntimeError(f"expected {what} within {timeout_s:g}s; last seen: {last!r}")


def gpuaas(*argv: str, capture: bool = False, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The project's own commands as processes (progress shown unless captured): a benchmark may not
    import gpuaas (ARCHITECTURE.md)."""
    done = subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=capture, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"python -m {' '.join(argv)} failed ({done.returncode}): {done.stderr or 'see above'}")
    return done


def _seconds(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def _job(run: int) -> dict[str, Any]:
    """A one-pod, one-GPU batch Job for the tenant's LocalQueue; KWOK runs and completes its pod at once."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"generateName": f"bench-loop-{run}-", "namespace": TENANT,
                         "labels": {"kueue.x-k8s.io/queue-name": TENANT}},
            "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "registry.invalid/train:1",
                "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}}}


def _condition(workload: dict[str, Any], kind: str) -> str | None:
    return next((c["status"] for c in (workload.get("status") or {}).get("conditions") or [] if c["type"] == kind),
                None)


def _workload(custom: client.CustomObjectsApi, uid: str) -> dict[str, Any] | None:
    items = custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", TENANT, "workloads",
                                                 label_selector=f"kueue.x-k8s.io/job-uid={uid}")["items"]
    return items[0] if items else None


def _parameters(run: dict[str, Any]) -> dict[str, str]:
    return {p["name"]: p.get("value") for p in run["spec"]["arguments"]["parameters"]}


def _reaction_run(custom: client.CustomObjectsApi, reaction: str, workload: str) -> dict[str, Any] | None:
    """The finished run the Sensor submitted for this Workload (a hand-submitted one has no event)."""
    items = custom.list_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows",
                                                 label_selector=f"gpuaas.io/reaction={reaction}")["items"]
    for item in items:
        parameters = _parameters(item)
        if parameters.get("workload") == workload and parameters.get("namespace") == TENANT \
                and parameters.get("event") and item.get("status", {}).get("phase") in FINISHED:
            return item
    return None


def _transition(run: dict[str, Any], kind: str) -> str:
    """When Kueue set condition `kind` True, in the Workload the Sensor delivered to this run."""
    body = json.loads(base64.b64decode(json.loads(_parameters(run)["event"])["data"]))["body"]
    return next(c["lastTransitionTime"] for c in body["status"]["conditions"]
                if c["type"] == kind and c["status"] == "True")


def _hand_submitted(custom: client.CustomObjectsApi, workload: str) -> float:
    """Argo Workflows alone: a Workflow from the on-admitted template for this Workload, created through
    the API as `argo submit --from workflowtemplate/...` creates it; create call -> finishedAt."""
    body = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"generateName": "gpuaas-on-admitted-", "namespace": PRODUCT_NAMESPACE,
                         "labels": {"workflows.argoproj.io/workflow-template": "gpuaas-on-admitted"}},
            "spec": {"workflowTemplateRef": {"name": "gpuaas-on-admitted"}, "arguments": {"parameters": [
                {"name": "namespace", "value": TENANT}, {"name": "workload", "value": workload},
                {"name": "tenant", "value": TENANT}]}}}
    started = time.time()
    name = custom.create_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows",
                                                  body)["metadata"]["name"]
    run = wait_until(lambda: (w := custom.get_namespaced_custom_object(
        "argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows", name)).get("status", {}).get("phase") in FINISHED
        and w, timeout_s=300, what=f"hand-submitted Workflow {name} finished")
    if run["status"]["phase"] != "Succeeded":
        raise RuntimeError(f"hand-submitted {name} ended {run['status']['phase']}: {run['status'].get('message')}")
    return _seconds(run["status"]["finishedAt"]) - started


def measure(kubeconfig: Path, runs: int) -> dict[str, Any]:
    api = config.new_client_from_config(str(kubeconfig))
    batch, custom = client.BatchV1Api(api), client.CustomObjectsApi(api)
    samples: dict[str, list[tuple[float, float]]] = {reaction: [] for reaction, _ in REACTIONS}
    alone: list[float] = []
    for run in range(runs):
        uid = batch.create_namespaced_job(TENANT, _job(run)).metadata.uid
        done = wait_until(lambda uid=uid: (w := _workload(custom, uid)) and _condition(w, "Finished") == "True" and w,
                          timeout_s=180, what=f"the Workload of bench Job {run} admitted and finished")
        name = done["metadata"]["name"]
        for reaction, kind in REACTIONS:
            ran = wait_until(lambda reaction=reaction, name=name: _reaction_run(custom, reaction, name),
                             timeout_s=300, what=f"gpuaas-{reaction} for {name} finished")
            if ran["status"]["phase"] != "Succeeded":
                raise RuntimeError(f"{ran['metadata']['name']} ended {ran['status']['phase']}: "
                                   f"{ran['status'].get('message')}")
            event = _seconds(_transition(ran, kind))
            samples[reaction].append((_seconds(ran["metadata"]["creationTimestamp"]) - event,
                                      _seconds(ran["status"]["finishedAt"]) - event))
        alone.append(_hand_submitted(custom, name))
        print(f"  run {run + 1}/{runs}: " + ", ".join(
            f"{reaction} {samples[reaction][-1][1]:.0f}s" for reaction, _ in REACTIONS)
            + f", hand-submitted on-admitted {alone[-1]:.0f}s", flush=True)
    figures: dict[str, Any] = {"runs": runs, "baseline_hand_submitted_median_s": statistics.median(alone),
                               "baseline_hand_submitted_max_s": max(alone)}
    for reaction, values in samples.items():
        succeeded = sorted(v[1] for v in values)
        created = sorted(v[0] for v in values)
        figures[reaction] = {"succeeded_median_s": statistics.median(succeeded), "succeeded_max_s": succeeded[-1],
                             "created_median_s": statistics.median(created), "created_max_s": created[-1],
                             "succeeded_s": succeeded,
                             "ratio_to_baseline": round(statistics.median(succeeded) / statistics.median(alone), 2)}
    return figures


def _runs(text: str) -> int:
    """`--runs`: a whole number, at least 1 (a median needs a run)."""
    try:
        runs = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, found {text!r}") from None
    if runs < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, found {runs}")
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=_runs, default=5, help="batch Jobs, one after another (default 5)")
    parser.add_argument("--state-dir", type=Path, help="a running `gpuaas cluster up --with events` to reuse")
    args = parser.parse_args()
    state_dir = args.state_dir or Path(tempfile.mkdtemp(prefix="gpuaas-bench-loop-", dir="/var/tmp"))
    where = ("--state-dir", str(state_dir))
    started_here = args.state_dir is None
    try:
        if started_here:
            print("starting the real stack with Argo (gpuaas cluster up --with events) ...", flush=True)
            gpuaas("gpuaas.cli", "cluster", "up", "--with", "events", *where)
        status = json.loads(gpuaas("gpuaas.cli", "cluster", "status", *where, "--output", "json", capture=True).stdout)
        if status["phase"] != "ready" or "events" not in status["parts"]:
            print(f"expected the cluster in {state_dir} ready with the events part, found {status['phase']} with "
                  f"parts {status['parts']}; start it with `gpuaas cluster up --with events --state-dir {state_dir}`",
                  file=sys.stderr)
            return 2
        kubeconfig = Path(status["kubeconfig"])
        print("installing the product (rendered base, example tenants) and waiting for its pods to listen ...",
              flush=True)
        gpuaas("gpuaas.cluster.install", "--kubeconfig", str(kubeconfig))
        figures = measure(kubeconfig, args.runs)
    finally:
        if started_here:
            gpuaas("gpuaas.cli", "cluster", "down", *where, check=False)
            shutil.rmtree(state_dir, ignore_errors=True)
    print(f"\nKueue condition -> reaction's Workflow Succeeded, {figures['runs']} runs (cluster timestamps, whole s):")
    print(f"  {'reaction':<22} {'median':>7} {'max':>5} {'created (median)':>17} {'x baseline':>11}")
    for reaction, _ in REACTIONS:
        f = figures[reaction]
        print(f"  gpuaas-{reaction:<15} {f['succeeded_median_s']:>6.0f}s {f['succeeded_max_s']:>4.0f}s "
              f"{f['created_median_s']:>16.0f}s {f['ratio_to_baseline']:>10.2f}x")
    print(f"  baseline: gpuaas-on-admitted hand-submitted (a Workflow from its template), create -> Succeeded: "
          f"median {figures['baseline_hand_submitted_median_s']:.0f}s, max {figures['baseline_hand_submitted_max_s']:.0f}s")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
