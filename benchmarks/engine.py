"""Local engine throughput: events routed through the rendered Sensors, reactions completed end to end.

Two figures, each beside a baseline measured in the same run on the same machine:

- routing: Workload lifecycle events (pending, admitted, status churn, finished) and Alertmanager
  groups, as the event sources emit them, routed by `routing.Router` over manifests/.
  Baseline: plain `json.loads` of the same events' JSON (the least any consumer must do).
- end to end (in-process steps): Jobs created in the local cluster -> Kueue admits -> resource
  watcher -> Sensor -> `gpuaas-on-admitted` Workflow -> step -> archive. Baseline: the same
  number of direct in-process calls of the on-admitted step entry point on the same Workloads
  (no event source, no sensor, no executor, no archive).

The last line is one JSON object with both pairs. Run: `.venv/bin/python benchmarks/engine.py`.
"""

from __future__ import annotations

import copy
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine import demo_cluster as cluster
from engine.events import envelope
from engine.rendered import DEFAULT_MANIFESTS, RenderedManifests

WORKLOAD_EVENTS = 4000
JOBS = 60


def lifecycle_events(count: int) -> list[dict]:
    """Resource events of a Workload's life, in the shapes the watcher emits, plus alert groups."""
    manifests = RenderedManifests.load(DEFAULT_MANIFESTS)
    resource_source, resource_event, webhook_source, webhook_event = _event_names(manifests)
    base = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "job-train-abcde", "namespace": "team-research", "uid": "u-1",
                         "resourceVersion": "1"},
            "spec": {"queueName": "research", "active": True,
                     "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": []}}}]},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending"}]}}
    admitted = copy.deepcopy(base)
    admitted["status"] = {"conditions": [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
        {"type": "Admitted", "status": "True", "reason": "Admitted"}],
        "admission": {"clusterQueue": "research", "podSetAssignments": [
            {"name": "main", "flavors": {"nvidia.com/gpu": "a100"}, "resourceUsage": {"nvidia.com/gpu": "2"},
             "count": 1}]}}
    churn = copy.deepcopy(admitted)
    churn["status"]["conditions"].append({"type": "PodsReady", "status": "True", "reason": "PodsReady"})
    finished = copy.deepcopy(churn)
    finished["status"]["conditions"].append({"type": "Finished", "status": "True", "reason": "Succeeded"})
    shapes = [("ADD", base, None), ("UPDATE", admitted, base), ("UPDATE", churn, admitted),
              ("UPDATE", finished, churn)]
    alert = {"version": "4", "status": "firing", "receiver": "gpuaas", "groupKey": "{}:{}",
             "groupLabels": {"alertname": "GPUWorkloadIdle"}, "commonLabels": {"alertname": "GPUWorkloadIdle"},
             "alerts": [{"status": "firing", "labels": {"alertname": "GPUWorkloadIdle", "namespace": "team-vision",
                                                        "pod": "ray-vision-gpu-workers-0"}}]}
    events = []
    for index in range(count):
        if index % 10 == 9 and webhook_source:
            events.append(envelope("webhook", webhook_source, webhook_event,
                                   {"header": {"Content-Type": ["application/json"]}, "body": alert,
                                    "metadata": None}))
            continue
        kind, body, old = shapes[index % len(shapes)]
        events.append(envelope("resource", resource_source, resource_event,
                               {"type": kind, "body": body, "oldBody": old, "group": "kueue.x-k8s.io",
                                "version": "v1beta2", "resource": "workloads", "metadata": None}))
    return events


def _event_names(manifests: RenderedManifests) -> tuple[str, str, str, str]:
    resource = webhook = ("", "")
    for source in manifests.event_sources():
        spec = source.get("spec") or {}
        for name, block in (spec.get("resource") or {}).items():
            if block.get("resource") == "workloads" and not resource[0]:
                resource = (source["metadata"]["name"], name)
        for name in spec.get("webhook") or {}:
            if not webhook[0]:
                webhook = (source["metadata"]["name"], name)
    if not resource[0]:
        raise SystemExit("no resource EventSource on workloads in manifests/; run `gpuaas render` first")
    return resource[0], resource[1], webhook[0], webhook[1]


def bench_routing() -> dict[str, float]:
    from routing import Router

    events = lifecycle_events(WORKLOAD_EVENTS)
    texts = [json.dumps(e) for e in events]
    router = Router.from_manifests(DEFAULT_MANIFESTS, explain_unsubscribed=False)
    started = time.perf_counter()
    triggered = 0
    for event in events:
        triggered += len(router.route(event).triggered)
    routed = len(events) / (time.perf_counter() - started)
    started = time.perf_counter()
    for text in texts:
        json.loads(text)
    parsed = len(texts) / (time.perf_counter() - started)
    print(f"routing: {len(events)} events through {len(router.sensors)} rendered Sensors: "
          f"{routed:,.0f} events/s ({triggered} triggers fired)")
    print(f"  baseline json.loads of the same events: {parsed:,.0f} events/s "
          f"(routing costs {parsed / routed:.1f}x a JSON parse)")
    return {"events_routed_per_s": round(routed, 1), "baseline_json_parse_per_s": round(parsed, 1)}


def bench_end_to_end() -> dict[str, float]:
    from engine.runtime import EngineOptions, LocalEngine
    from engine.step_runner import InProcessStepRunner
    from steps.gateways import resources as R

    research = cluster.TENANTS[0]
    with tempfile.TemporaryDirectory(prefix="gpuaas-bench-") as tmp:
        options = EngineOptions(archive_path=Path(tmp) / "runs.db", step_mode="in-process",
                                kueue_options={"excluded_resource_prefixes": ("cpu", "memory")})
        big_quota = [o for o in cluster.platform_objects("idle:\n  mode: enforce\n")]
        for obj in big_quota:
            if obj["kind"] == "ClusterQueue":
                obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 1000
        with LocalEngine(options) as engine:
            engine.apply(big_quota)
            engine.settle(timeout=30, quiet_seconds=0.5)
            before = len(engine.archive)
            started = time.perf_counter()
            jobs = []
            for index in range(JOBS):
                jobs += cluster.batch_job(research, f"bench-{index:03d}", 1)
            engine.apply(jobs)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                done = len(engine.archive.find({"workflows.argoproj.io/workflow-template": "gpuaas-on-admitted"}))
                if done >= JOBS:
                    break
                time.sleep(0.02)
            elapsed = time.perf_counter() - started
            completed = len(engine.archive) - before
            reactions = completed / elapsed
            workloads = engine.gateway.list(R.WORKLOAD, namespace=research.namespace)
            # baseline: the step alone, called directly in-process on the same Workloads
            runner = InProcessStepRunner()
            env = {"GPUAAS_KUBE_URL": engine.kube_url, "GPUAAS_NAMESPACE": "gpuaas"}
            started = time.perf_counter()
            for workload in workloads:
                params = Path(tmp) / "params.json"
                params.write_text(json.dumps([
                    {"name": "namespace", "value": workload["metadata"]["namespace"]},
                    {"name": "workload", "value": workload["metadata"]["name"]},
                    {"name": "event", "value": ""}, {"name": "dry-run", "value": "false"}]))
                out = Path(tmp) / "out"
                out.mkdir(exist_ok=True)
                runner.run(["python", "-m", "steps", "on-admitted", str(params)],
                           {**env, "GPUAAS_OUTPUTS_DIR": str(out)}, Path(tmp))
            direct = len(workloads) / (time.perf_counter() - started)
    print(f"end to end: {completed} workflows from {JOBS} Job admissions in {elapsed:.2f}s: "
          f"{reactions:,.1f} reactions/s (Kueue -> watcher -> Sensor -> Workflow -> step -> archive)")
    print(f"  baseline direct in-process on-admitted step calls: {direct:,.1f} calls/s")
    return {"reactions_per_s": round(reactions, 2), "baseline_direct_step_calls_per_s": round(direct, 2)}


def main() -> int:
    figures = {}
    figures.update(bench_routing())
    figures.update(bench_end_to_end())
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
