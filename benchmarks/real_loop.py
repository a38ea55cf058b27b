"""How long a reaction takes on the real stack: Kueue's condition change -> the Workflow Succeeded.

    .venv/bin/python benchmarks/real_loop.py [--runs 5] [--state-dir DIR]

Issue 9's latency figure, by the path a reaction takes (docs/catch-up.md). For each of `--runs`
rounds, one after another:

- the event path: a one-replica StatefulSet (a server: a step may write for it) is admitted on a
  KWOK GPU node; the product's resource EventSource sees the Workload change, the Sensor submits
  `gpuaas-on-admitted` with the argo CLI, the workflow-controller runs the step pod on the real node;
- the sweep: a batch Job is admitted and completes; the Sensors leave a job kind's transitions to the
  catch-up sweep (CronWorkflow gpuaas-sweep, every minute on this stack), which records its
  `gpuaas-on-admitted` and `gpuaas-on-finished` runs without a pod.

Each figure runs from the condition's lastTransitionTime (Admitted, Finished, on the live Workload)
to the Workflow's creation and to its status.finishedAt. All timestamps are the cluster's own, in
whole seconds.

The baseline, timed in the same run: the same WorkflowTemplate hand-submitted (a Workflow from it
created through the API, as `argo submit --from workflowtemplate/...` does) for the same Workload
(Argo Workflows alone: no EventSource, EventBus or Sensor; a step pod), from the submit call to
finishedAt. The ratio is what each path costs against it.

Without --state-dir it starts `gpuaas cluster up --with events` in a new state dir and stops it
afterwards; with one it reuses that running cluster (as `make cluster` started it). Prints readable
figures, then, last, one JSON line. Needs root (the real node), like `make cluster`.
"""

from __future__ import annotations

import argparse
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.burst import server

ROOT = Path(__file__).resolve().parents[1]
PRODUCT_NAMESPACE = "gpuaas"
TENANT = "team-a"
FINISHED = ("Succeeded", "Failed", "Error")
PATHS = (("on-admitted", "Admitted", "event"), ("on-admitted", "Admitted", "sweep"),
         ("on-finished", "Finished", "sweep"))
"""(reaction, condition, path): the rows of the table (module docstring)."""


def _row(reaction: str, path: str) -> str:
    return f"{reaction} ({'event path, step pod' if path == 'event' else 'sweep, no pod'})"


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
    """The finished run the Sensor submitted or the sweep recorded for this Workload (a hand-submitted one
    has no event)."""
    items = custom.list_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows",
                                                 label_selector=f"gpuaas.io/reaction={reaction}")["items"]
    for item in items:
        parameters = _parameters(item)
        if parameters.get("workload") == workload and parameters.get("namespace") == TENANT \
                and parameters.get("event") and item.get("status", {}).get("phase") in FINISHED:
            return item
    return None


def _transition(workload: dict[str, Any], kind: str) -> str:
    """When Kueue set condition `kind` True on the Workload."""
    return next(c["lastTransitionTime"] for c in workload["status"]["conditions"]
                if c["type"] == kind and c["status"] == "True")


def _server(run: int) -> dict[str, Any]:
    """A one-replica StatefulSet for the tenant's LocalQueue: a server, whose admission the Sensor takes."""
    return server(TENANT, f"bench-loop-srv-{run}-{int(time.time()) % 100000}")


def _owned_workload(custom: client.CustomObjectsApi, kind: str, name: str) -> dict[str, Any] | None:
    items = custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", TENANT, "workloads")["items"]
    return next((w for w in items if any(r.get("kind") == kind and r.get("name") == name
                                         for r in w["metadata"].get("ownerReferences") or [])), None)


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
    apps, batch, custom = client.AppsV1Api(api), client.BatchV1Api(api), client.CustomObjectsApi(api)
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {(r, p): [] for r, _, p in PATHS}
    alone: list[float] = []

    def sample(reaction: str, condition: str, path: str, workload: dict[str, Any]) -> None:
        name = workload["metadata"]["name"]
        ran = wait_until(lambda: _reaction_run(custom, reaction, name), timeout_s=300,
                         what=f"gpuaas-{reaction} for {name} finished")
        if ran["status"]["phase"] != "Succeeded":
            raise RuntimeError(f"{ran['metadata']['name']} ended {ran['status']['phase']}: "
                               f"{ran['status'].get('message')}")
        swept = ran["metadata"].get("labels", {}).get("gpuaas.io/recorded-by") == "sweep"
        if swept != (path == "sweep"):
            raise RuntimeError(f"expected {name}'s {reaction} through the {path}, found run {ran['metadata']['name']} "
                               f"{'recorded by the sweep' if swept else 'with a step'}")
        event = _seconds(_transition(workload, condition))
        samples[(reaction, path)].append((_seconds(ran["metadata"]["creationTimestamp"]) - event,
                                          _seconds(ran["status"]["finishedAt"]) - event))

    for run in range(runs):
        server = apps.create_namespaced_stateful_set(TENANT, _server(run)).metadata.name
        uid = batch.create_namespaced_job(TENANT, _job(run)).metadata.uid
        admitted = wait_until(lambda server=server: (w := _owned_workload(custom, "StatefulSet", server))
                              and _condition(w, "Admitted") == "True" and w, timeout_s=180,
                              what=f"the Workload of bench StatefulSet {server} admitted")
        sample("on-admitted", "Admitted", "event", admitted)
        apps.delete_namespaced_stateful_set(server, TENANT)
        done = wait_until(lambda uid=uid: (w := _workload(custom, uid)) and _condition(w, "Finished") == "True" and w,
                          timeout_s=180, what=f"the Workload of bench Job {run} admitted and finished")
        sample("on-admitted", "Admitted", "sweep", done)
        sample("on-finished", "Finished", "sweep", done)
        alone.append(_hand_submitted(custom, done["metadata"]["name"]))
        print(f"  run {run + 1}/{runs}: " + ", ".join(
            f"{_row(r, p)} {samples[(r, p)][-1][1]:.0f}s" for r, _, p in PATHS)
            + f", hand-submitted on-admitted {alone[-1]:.0f}s", flush=True)
    figures: dict[str, Any] = {"runs": runs, "baseline_hand_submitted_median_s": statistics.median(alone),
                               "baseline_hand_submitted_max_s": max(alone)}
    for (reaction, path), values in samples.items():
        succeeded = sorted(v[1] for v in values)
        created = sorted(v[0] for v in values)
        figures[f"{reaction} {path}"] = {
            "succeeded_median_s": statistics.median(succeeded), "succeeded_max_s": succeeded[-1],
            "created_median_s": statistics.median(created), "created_max_s": created[-1], "succeeded_s": succeeded,
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
    print(f"  {'reaction':<38} {'median':>7} {'max':>5} {'created (median)':>17} {'x baseline':>11}")
    for reaction, _, path in PATHS:
        f = figures[f"{reaction} {path}"]
        print(f"  gpuaas-{_row(reaction, path):<31} {f['succeeded_median_s']:>6.0f}s {f['succeeded_max_s']:>4.0f}s "
              f"{f['created_median_s']:>16.0f}s {f['ratio_to_baseline']:>10.2f}x")
    print(f"  baseline: gpuaas-on-admitted hand-submitted (a Workflow from its template), create -> Succeeded: "
          f"median {figures['baseline_hand_submitted_median_s']:.0f}s, max {figures['baseline_hand_submitted_max_s']:.0f}s")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
