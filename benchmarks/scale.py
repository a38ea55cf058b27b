"""Bursts and an idle storm on the real stack: lost and doubled reactions, throughput, latency, cost.

    .venv/bin/python benchmarks/scale.py --state-dir DIR [--levels 1000,2000,3000,5000] [--alerts 200]
    make bench-scale STATE_DIR=DIR                      # the same, with the defaults

For each level N (at least 1,000 Workloads of mixed kinds admitted within about a minute, then
completed): KWOK GPU nodes and a tenant big enough for the burst; N Workloads (batch Jobs,
PyTorchJobs, a Deployment's pods, StatefulSets, RayClusters) submitted from 8 threads; the Jobs and
PyTorchJobs then complete, the servers and Ray clusters are deleted. Figures, every one from the
cluster's own records:

- lost and doubled: every admission and finish a watch of the apiserver saw (the transition keys of
  steps.delivery) against the runs of gpuaas-on-admitted / -on-finished whose records say they
  handled it, read from the Argo Server's archive (GET /api/v1/archived-workflows: what admins and
  `gpuaas audit` read, each run's own archived copy) once it holds every run seen finished live;
  duplicates recorded as such are counted apart (the live count is kept beside it, `liveTally`);
- throughput: reactions per minute, first transition to last reaction's end, against the same
  template hand-submitted for as many Workloads in the same run (Argo Workflows alone:
  `--baseline N` runs, all created at once; 0 skips it);
- latency p50/p95/p99: the Kueue condition's lastTransitionTime to the reaction Workflow's
  finishedAt, by path (the event path, the sweep recording without a pod, the sweep delivering);
- cost per 1,000 admissions: pods, API calls (kube-apiserver's audit log: the product's, Argo's
  and Argo Events' ServiceAccounts, the real node's kubelet, the scheduler's bindings), archive rows
  and bytes (PostgreSQL);
- memory (peak RSS) and CPU seconds of the stack's processes and the real node during the level;
- the load average of the machine, before and after.

Then the idle storm: `--alerts` idle Jobs in one namespace (one Alertmanager group), a policy that
releases them (window 30 s, minimum runtime 10 s, enforce, no hourly limit); each must be released
exactly once, every re-send of the group recorded as a repeat.

Levels go up until one breaks (lost or doubled reactions, reactions not done within --timeout, or a
component that died); what broke is printed. Prints a table per level, then one JSON line (last).
Needs a cluster started with `gpuaas cluster up --with events --state-dir DIR` (root: the real node).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from kubernetes import client, config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.burst import (
    Burst,
    BurstTenant,
    Mix,
    Tally,
    TransitionWatch,
    archived_reaction_runs,
    archived_reaction_uids,
    kwok_gpu_nodes,
    reaction_runs,
    seconds,
    wait_archived,
    wait_for_reactions,
    workflow_nodes,
)

ROOT = Path(__file__).resolve().parents[1]
PRODUCT_NAMESPACE = "gpuaas"
BASE_MIX = Mix(jobs=700, pytorchjobs=100, deployments=20, pods_per_deployment=5, statefulsets=50, rayclusters=50)
"""1,000 Workloads: 80 % job kinds (recorded by the sweep without a pod), 20 % servers (a step pod each)."""


def gpuaas(*argv: str) -> str:
    """The project's own commands, as processes (a benchmark may not import gpuaas: ARCHITECTURE.md)."""
    done = subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"python -m {' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    return done.stdout


def load() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


# -- the stack's processes ----------------------------------------------------------------------------------
def _tree(pid: int) -> list[int]:
    """pid and all its descendants (the real node's kubelet, containerd, shims and pods)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, []))
    return out


def _cpu_rss(pid: int) -> tuple[float, int]:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        return cpu, rss
    except (OSError, IndexError, ValueError):
        return 0.0, 0


class Resources:
    """CPU seconds and peak RSS of each component (its process tree) between start() and stop()."""

    def __init__(self, components: dict[str, int]) -> None:
        self.components = components
        self.start_cpu: dict[str, float] = {}
        self.peak: Counter[str] = Counter()
        self.cpu: dict[str, float] = {}

    def _sample(self) -> dict[str, tuple[float, int]]:
        out = {}
        for name, pid in self.components.items():
            pids = _tree(pid) if name == "node" else [pid]
            values = [_cpu_rss(p) for p in pids]
            out[name] = (sum(v[0] for v in values), sum(v[1] for v in values))
        return out

    def start(self) -> None:
        self.start_cpu = {name: cpu for name, (cpu, _rss) in self._sample().items()}

    def sample(self) -> None:
        for name, (_cpu, rss) in self._sample().items():
            self.peak[name] = max(self.peak[name], rss)

    def stop(self) -> None:
        for name, (cpu, rss) in self._sample().items():
            self.cpu[name] = cpu - self.start_cpu.get(name, cpu)
            self.peak[name] = max(self.peak[name], rss)


# -- API calls from the audit log -----------------------------------------------------------------------------
def audit_lines(path: Path) -> int:
    return sum(1 for _ in path.open()) if path.exists() else 0


def audit_calls(path: Path, skip: int) -> Counter[str]:
    """Requests after the first `skip` lines, by who made them."""
    calls: Counter[str] = Counter()
    if not path.exists():
        return calls
    with path.open() as handle:
        for index, line in enumerate(handle):
            if index < skip or not line.strip():
                continue
            event = json.loads(line)
            user = (event.get("user") or {}).get("username", "")
            groups = (event.get("user") or {}).get("groups") or []
            if user.startswith("system:serviceaccount:gpuaas:"):
                who = user.rsplit(":", 1)[1]
            elif user.startswith("system:serviceaccount:argo-events:"):
                who = "argo-events"
            elif user.startswith("system:serviceaccount:argo:"):
                who = "argo " + user.rsplit(":", 1)[1]
            elif "system:nodes" in groups:
                who = "kubelet"
            else:
                who = user
            calls[who] += 1
    return calls


# -- the run -----------------------------------------------------------------------------------------------------
class Bench:
    def __init__(self, state_dir: Path, timeout_s: float) -> None:
        self.state_dir = state_dir
        self.timeout_s = timeout_s
        status = json.loads(gpuaas("gpuaas.cli", "cluster", "status", "--state-dir", str(state_dir), "--output", "json"))
        if status["phase"] != "ready" or "events" not in status["parts"]:
            raise SystemExit(f"expected the cluster in {state_dir} ready with the events part, found {status['phase']} "
                             f"with parts {status['parts']}; start it with `gpuaas cluster up --with events "
                             f"--state-dir {state_dir}`")
        self.status = status
        self.kubeconfig = Path(status["kubeconfig"])
        self.api = config.new_client_from_config(str(self.kubeconfig))
        self.audit_log = state_dir / "logs" / "audit.log"
        self.components = {c["name"]: c["pid"] for c in status["components"] if c.get("running") and c.get("pid")}
        self.argo_server = (status.get("endpoints") or {}).get("argo-server")
        if not self.argo_server:
            raise SystemExit(f"expected the Argo Server's address in the status of {state_dir} (endpoint argo-server), "
                             f"found endpoints {sorted(status.get('endpoints') or {})}: the reactions are counted from "
                             f"its archive; start the cluster with `gpuaas cluster up --with events`")

    def install(self, base: Path | None = None) -> None:
        what = f"the manifests of {base}" if base else "the product (rendered base)"
        print(f"installing {what} and the example tenants, waiting for its pods to listen ...", flush=True)
        gpuaas("gpuaas.cluster.install", "--kubeconfig", str(self.kubeconfig), "--idle",
               *(("--base", str(base)) if base else ()))
        if base and not any("kind: CronWorkflow" in f.read_text() for f in base.rglob("*.yaml")):
            # an earlier release without the sweep: the current product's CronWorkflow must not run beside it
            custom = client.CustomObjectsApi(self.api)
            for cron in custom.list_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE,
                                                             "cronworkflows")["items"]:
                custom.delete_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "cronworkflows",
                                                       cron["metadata"]["name"])

    def apply(self, objects: list[dict[str, Any]]) -> None:
        import yaml

        kubectl = ROOT / ".stack-cache" / "bin" / "kubernetes" / "kubectl"
        binary = str(kubectl) if kubectl.exists() else "kubectl"
        done = subprocess.run([binary, f"--kubeconfig={self.kubeconfig}", "apply", "--server-side", "--force-conflicts",
                               "--field-manager=gpuaas-bench", "-f", "-"], input=yaml.safe_dump_all(objects),
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"kubectl apply failed: {done.stderr.strip()[-800:]}")

    def archive(self) -> dict[str, int]:
        return json.loads(gpuaas("gpuaas.cluster.postgres", str(self.state_dir)))

    def policy(self, tenant: str, window: str = "30s", min_runtime: str = "10s") -> None:
        core = client.CoreV1Api(self.api)
        import yaml

        current = core.read_namespaced_config_map("gpuaas-policy", PRODUCT_NAMESPACE)
        policy = yaml.safe_load((current.data or {}).get("policy.yaml") or "") or {}
        policy.setdefault("tenants", {})[tenant] = {"idle": {"window": window, "minRuntime": min_runtime,
                                                             "mode": "enforce", "maxReleasesPerHour": 100000}}
        core.patch_namespaced_config_map("gpuaas-policy", PRODUCT_NAMESPACE,
                                         {"data": {"policy.yaml": yaml.safe_dump(policy, sort_keys=False)}})

    def level(self, n: int, baseline: int, name: str | None = None) -> dict[str, Any]:
        mix = BASE_MIX.scaled(n / BASE_MIX.workloads)
        tenant = BurstTenant(name or f"burst{n}", gpus=mix.workloads + mix.rayclusters + 64, namespaces=4)
        nodes = (tenant.gpus + 63) // 64
        self.apply(kwok_gpu_nodes(f"{tenant.name}-gpu", nodes, 64, tenant.flavor_selector) + tenant.objects())
        watcher = TransitionWatch(self.api, tenant.namespace_names()).start()
        resources = Resources(self.components)
        archive_before, audit_before, load_before = self.archive(), audit_lines(self.audit_log), load()
        runs_before = {r.uid for r in reaction_runs(self.api)}
        archived_before = archived_reaction_uids(self.argo_server)
        resources.start()
        print(f"\nlevel {n}: submitting {mix.workloads} Workloads ({mix}) on {nodes} KWOK nodes x 64 GPUs; "
              f"load {load_before}", flush=True)
        started = time.time()
        burst = Burst(self.api, tenant, prefix=tenant.name)
        burst.submit(mix)
        submitted_s = time.time() - started
        if burst.errors:
            print(f"  {len(burst.errors)} objects not created, e.g.: {burst.errors[:3]}", flush=True)
        admitted = self._wait_admitted(watcher, mix.workloads - len(burst.errors), resources)
        admit_window = max((s.at for s in admitted), default=started) - min((s.at for s in admitted), default=started)
        print(f"  submitted in {submitted_s:.0f}s; {len(admitted)} admitted within {admit_window:.0f}s "
              f"(Kueue's lastTransitionTime, first to last)", flush=True)
        finishes = self._wait_finished(watcher, burst, mix.jobs + mix.pytorchjobs, resources, started)

        def progress(tally: Tally) -> None:
            resources.sample()
            print(f"  [{time.time() - started:5.0f}s] transitions {tally.transitions}, handled {tally.handled}, "
                  f"runs pending {tally.pending}, load {load()}", flush=True)
        tally = wait_for_reactions(self.api, watcher, timeout_s=self.timeout_s, quiet_s=20, progress=progress,
                                   stall_s=300)
        resources.stop()
        watcher.stop()
        burst.finish(servers=True)  # the servers and Ray clusters go, as their tenants' would (not measured)
        uids = {s.uid for s in watcher.transitions()}
        mine = [r for r in reaction_runs(self.api) if r.uid not in runs_before and r.workload_uid in uids]
        live = tally
        tally, not_archived = self.from_archive(
            watcher, {r.uid for r in mine if r.phase in ("Succeeded", "Failed", "Error")}, archived_before)
        archive_after = self.archive()
        calls = audit_calls(self.audit_log, audit_before)
        handled_runs = [r for r in mine if r.finished]
        first = min((s.at for s in watcher.transitions() if s.at), default=started)
        last = max((r.finished for r in handled_runs), default=time.time())
        admissions = sum(1 for s in watcher.transitions() if s.reaction == "on-admitted")
        per_k = 1000.0 / max(1, admissions)
        result = {
            "workloads": mix.workloads, "mix": mix.__dict__, "kwokNodes": nodes, "submitSeconds": round(submitted_s, 1),
            "admittedWithinSeconds": round(admit_window, 1), "submitErrors": burst.errors[:5],
            "jobsFinished": finishes, "jobsSubmitted": mix.jobs + mix.pytorchjobs,
            "tally": tally.to_dict(), "tallySource": f"the Argo Server's archive ({self.argo_server})",
            "liveTally": {k: v for k, v in live.to_dict().items() if k != "latency"}, "notArchived": not_archived,
            "throughputPerMinute": round(tally.handled / max(1e-9, (last - first) / 60.0), 1),
            "reactionSpanSeconds": round(last - first, 1),
            "perThousandAdmissions": {
                "pods": round(sum(r.pods for r in mine) * per_k, 1),
                "apiCalls": round(sum(calls.values()) * per_k, 1),
                "apiCallsBy": {k: round(v * per_k, 1) for k, v in calls.most_common(12)},
                "archiveRows": round((archive_after["rows"] - archive_before["rows"]) * per_k, 1),
                "archiveBytes": round((archive_after["bytes"] - archive_before["bytes"]) * per_k),
                "workflows": round(len(mine) * per_k, 1)},
            "archive": archive_after,
            "cpuSeconds": {k: round(v, 1) for k, v in sorted(resources.cpu.items(), key=lambda kv: -kv[1])},
            "peakRssMiB": {k: round(v / 2**20) for k, v in resources.peak.most_common()},
            "load": {"before": load_before, "after": load()},
            "components": {c["name"]: c["running"] for c in json.loads(gpuaas(
                "gpuaas.cli", "cluster", "status", "--state-dir", str(self.state_dir), "--output", "json"))["components"]},
        }
        if baseline:
            result["baseline"] = self.baseline(tenant, min(baseline, mix.jobs))
            result["baseline"]["ratio"] = round(result["throughputPerMinute"]
                                                / max(1e-9, result["baseline"]["throughputPerMinute"]), 2)
        self.cleanup(tenant, [n["metadata"]["name"] for n in kwok_gpu_nodes(f"{tenant.name}-gpu", nodes, 64,
                                                                            tenant.flavor_selector)])
        return result

    def from_archive(self, watcher: TransitionWatch, finished: set[str], archived_before: set[str]
                     ) -> tuple[Tally, int]:
        """The level's tally counted again from the Argo Server's archive (issue 21: the record admins read, not the
        live Workflows): every run the archive gained since the level began, and every run seen finished live that
        it holds, parsed from the archive's own copy; and how many runs seen finished live it still lacked after
        waiting 10 minutes (a run the archive lacks shows as lost in this tally: that number tells the two apart)."""
        held = wait_archived(self.argo_server, finished, timeout_s=600, progress=lambda got, of: print(
            f"  archive: {got}/{of} finished runs archived, load {load()}", flush=True))
        if held != finished:
            print(f"  archive: {len(finished - held)} finished runs not archived after 600 s, e.g. "
                  f"{sorted(finished - held)[:3]}", flush=True)
        new = (archived_reaction_uids(self.argo_server) - archived_before) | held
        return Tally.of(watcher.transitions(), archived_reaction_runs(self.argo_server, new), watcher.markers()), \
            len(finished - held)

    def cleanup(self, tenant: BurstTenant, nodes: list[str]) -> None:
        """The level's tenant, nodes and reaction runs go (the runs are in the archive), so the next level
        starts from the same cluster and not from one holding every earlier level's objects."""
        kubectl = ROOT / ".stack-cache" / "bin" / "kubernetes" / "kubectl"
        binary = str(kubectl) if kubectl.exists() else "kubectl"
        base = [binary, f"--kubeconfig={self.kubeconfig}", "delete", "--ignore-not-found", "--wait=false"]
        for args in (["namespace", *tenant.namespace_names()], ["clusterqueue", tenant.name],
                     ["resourceflavor", f"{tenant.name}-gpu"], ["node", *nodes],
                     ["workflows", "-n", PRODUCT_NAMESPACE, "-l",
                      "gpuaas.io/reaction in (on-admitted,on-finished,on-idle)"]):
            subprocess.run([*base, *args], capture_output=True, text=True, timeout=600, check=False)

    def _wait_finished(self, watcher: TransitionWatch, burst: Burst, expected: int, resources: Resources,
                       started: float) -> int:
        """Until every Job and PyTorchJob of the burst has Finished (or the timeout): how many have. The pods are told
        to finish again every 15 s: a Job admitted a moment before has no pod yet to tell, and at a burst's load
        (average 150 on two cores) most had none at the first telling; a tally taken before they finish counts
        only the finishes seen so far (the first run of this benchmark: 113 of 800)."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            finished = sum(1 for s in watcher.transitions() if s.reaction == "on-finished")
            if finished >= expected or time.monotonic() > deadline:
                return finished
            burst.finish()
            resources.sample()
            print(f"  [{time.time() - started:5.0f}s] {finished}/{expected} Jobs finished, load {load()}", flush=True)
            time.sleep(15)

    def _wait_admitted(self, watcher: TransitionWatch, expected: int, resources: Resources) -> list[Any]:
        """Until every submitted Workload is admitted (or the timeout: the tally then counts what was)."""
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            resources.sample()
            admitted = [s for s in watcher.transitions() if s.reaction == "on-admitted"]
            if len(admitted) >= expected:
                return admitted
            time.sleep(5)
        return [s for s in watcher.transitions() if s.reaction == "on-admitted"]

    def baseline(self, tenant: BurstTenant, n: int) -> dict[str, Any]:
        """Argo Workflows alone: n runs of gpuaas-on-admitted created at once, for n of the burst's Workloads
        (by hand: an empty event; each runs its step pod); create -> the last one's finishedAt."""
        custom = client.CustomObjectsApi(self.api)
        workloads = [w for ns in tenant.namespace_names() for w in custom.list_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", ns, "workloads")["items"]][:n]
        print(f"  baseline: {len(workloads)} gpuaas-on-admitted runs created at once (Argo Workflows alone) ...",
              flush=True)
        started = time.time()
        names = []
        for workload in workloads:
            meta = workload["metadata"]
            body = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                    "metadata": {"generateName": "gpuaas-on-admitted-", "namespace": PRODUCT_NAMESPACE,
                                 "labels": {"workflows.argoproj.io/workflow-template": "gpuaas-on-admitted",
                                            "gpuaas.io/bench": "baseline"}},
                    "spec": {"workflowTemplateRef": {"name": "gpuaas-on-admitted"}, "arguments": {"parameters": [
                        {"name": "namespace", "value": meta["namespace"]}, {"name": "workload", "value": meta["name"]},
                        {"name": "dry-run", "value": "true"}]}}}
            names.append(custom.create_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE,
                                                                "workflows", body)["metadata"]["name"])
        deadline = time.monotonic() + self.timeout_s
        finished: dict[str, float] = {}
        while time.monotonic() < deadline and len(finished) < len(names):
            items = custom.list_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows",
                                                         label_selector="gpuaas.io/bench=baseline")["items"]
            for item in items:
                if (item.get("status") or {}).get("phase") in ("Succeeded", "Failed", "Error"):
                    finished[item["metadata"]["name"]] = seconds(item["status"].get("finishedAt")) or time.time()
            print(f"    {len(finished)}/{len(names)} finished, load {load()}", flush=True)
            time.sleep(20)
        span = (max(finished.values()) - started) if finished else float("nan")
        custom.delete_collection_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows",
                                                          label_selector="gpuaas.io/bench=baseline")
        return {"runs": len(names), "finished": len(finished), "seconds": round(span, 1),
                "throughputPerMinute": round(len(finished) / max(1e-9, span / 60.0), 1)}

    def idle_storm(self, alerts: int) -> dict[str, Any]:
        """`alerts` idle Jobs in one namespace (one Alertmanager group); each released exactly once."""
        tenant = BurstTenant("storm", gpus=alerts + 8, namespaces=1)
        nodes = (tenant.gpus + 63) // 64
        self.apply(kwok_gpu_nodes("storm-gpu", nodes, 64, tenant.flavor_selector) + tenant.objects())
        self.policy(tenant.name)
        custom = client.CustomObjectsApi(self.api)
        before = {w["metadata"]["uid"] for w in custom.list_namespaced_custom_object(
            "argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows", label_selector="gpuaas.io/reaction=on-idle")["items"]}
        print(f"\nidle storm: {alerts} idle Jobs in namespace {tenant.namespace_names()[0]} (one Alertmanager group); "
              f"load {load()}", flush=True)
        started = time.time()
        Burst(self.api, tenant, prefix="idle").submit(Mix(jobs=alerts, idle=True))
        namespace = tenant.namespace_names()[0]
        deadline = time.monotonic() + self.timeout_s
        released: dict[str, str] = {}
        while time.monotonic() < deadline:
            items = custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "workloads")["items"]
            released = {w["metadata"]["name"]: (w["metadata"].get("annotations") or {}).get("gpuaas.io/handled-on-idle", "")
                        for w in items if (w["metadata"].get("annotations") or {}).get("gpuaas.io/handled-on-idle")}
            print(f"  [{time.time() - started:5.0f}s] released {len(released)}/{alerts}, load {load()}", flush=True)
            if len(released) >= alerts:
                break
            time.sleep(20)
        time.sleep(60)  # let Alertmanager re-send the group once the releases are in (group_interval)
        runs = [w for w in custom.list_namespaced_custom_object(
            "argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows", label_selector="gpuaas.io/reaction=on-idle")["items"]
            if w["metadata"]["uid"] not in before]
        outcomes: Counter[str] = Counter()
        repeats = 0
        released_by: Counter[str] = Counter()
        pods = 0
        for run in runs:
            for node in workflow_nodes(run).values():
                if node.get("type") != "Pod":
                    continue
                pods += 1
                out = {p["name"]: p.get("value") for p in (node.get("outputs") or {}).get("parameters") or []}
                try:
                    data = json.loads(out.get("record") or "{}").get("data") or {}
                except ValueError:
                    continue
                outcomes[f"{data.get('reaction')}: {data.get('outcome')}"] += 1
                if data.get("reaction") == "idle-alerts":
                    repeats += sum(1 for s in (data.get("observed") or {}).get("skipped") or []
                                   if "repeat of idle episode" in s.get("reason", ""))
                if data.get("reaction") == "on-idle" and data.get("outcome") == "applied":
                    released_by[(data.get("workload") or {}).get("name", "?")] += 1
        self.cleanup(tenant, [n["metadata"]["name"] for n in kwok_gpu_nodes("storm-gpu", nodes, 64,
                                                                            tenant.flavor_selector)])
        return {"alerts": alerts, "released": len(released), "releasedTwice": sum(1 for n in released_by.values() if n > 1),
                "onIdleRuns": len(runs), "pods": pods, "repeatsRecorded": repeats, "outcomes": dict(outcomes),
                "seconds": round(time.time() - started, 1), "load": load()}


def _table(results: list[dict[str, Any]]) -> None:
    print("\nlevel  admitted-in  transitions  lost  doubled  dup-recorded  react/min  baseline/min  "
          "p50/p95/p99 s (all)   pods/1k  api/1k  archive rows/1k  bytes/1k  load")
    for r in results:
        t = r["tally"]
        lat = t["latency"]["all"]
        fmt = "/".join("-" if lat[q] is None else f"{lat[q]:.0f}" for q in ("p50", "p95", "p99"))
        base = r.get("baseline", {}).get("throughputPerMinute", "-")
        k = r["perThousandAdmissions"]
        print(f"{r['workloads']:>5}  {r['admittedWithinSeconds']:>9.0f}s  {t['transitions']:>11}  {t['lost']:>4}  "
              f"{t['doubled']:>7}  {t['duplicatesRecorded']:>12}  {r['throughputPerMinute']:>9}  {base!s:>12}  "
              f"{fmt:>20}  {k['pods']:>7}  {k['apiCalls']:>6}  {k['archiveRows']:>15}  {k['archiveBytes']:>8}  "
              f"{r['load']['after']}")
        for path, values in t["latency"].items():
            if path != "all" and values["n"]:
                print(f"       latency {path}: n={values['n']} p50 {values['p50']:.0f}s p95 {values['p95']:.0f}s "
                      f"p99 {values['p99']:.0f}s")
        print(f"       API calls per 1,000 admissions by caller: {k['apiCallsBy']}")
        print(f"       CPU s: {r['cpuSeconds']}")
        print(f"       peak RSS MiB: {r['peakRssMiB']}")


def _levels(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected Workload counts such as 1000,2000, found {text!r}") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"expected counts of at least 1, found {text!r}")
    return levels


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-dir", type=Path, required=True,
                        help="a running `gpuaas cluster up --with events --state-dir DIR`")
    parser.add_argument("--levels", type=_levels, default=[1000, 2000, 3000, 5000],
                        help="Workloads per burst, in order, until one breaks (default 1000,2000,3000,5000)")
    parser.add_argument("--alerts", type=int, default=200, help="idle alerts in one group (0 skips the storm)")
    parser.add_argument("--baseline", type=int, default=-1,
                        help="hand-submitted runs for the baseline (-1: as many as the first level's Workloads, "
                             "capped at its Jobs; 0: none)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds a level may take to settle")
    parser.add_argument("--before-base", type=Path,
                        help="first measure a burst with this manifests/base installed (an earlier release's, e.g. "
                             "`git archive main manifests | tar -x -C DIR`, then DIR/manifests/base): cost before/after")
    parser.add_argument("--before-workloads", type=int, default=100, help="the before burst's Workloads (default 100)")
    args = parser.parse_args()
    bench = Bench(args.state_dir, args.timeout)
    before = None
    if args.before_base:
        bench.install(args.before_base)
        before = bench.level(args.before_workloads, 0, name="before")
        print(f"\nbefore ({args.before_base}): {json.dumps(before['perThousandAdmissions'])}", flush=True)
    bench.install()
    results: list[dict[str, Any]] = []
    broke: str | None = None
    for index, n in enumerate(args.levels):
        baseline = (n if args.baseline < 0 else args.baseline) if index == 0 else 0
        result = bench.level(n, baseline)
        results.append(result)
        print(f"level {n}: {json.dumps(result)}", flush=True)  # kept if a later level or the storm does not end
        t = {**result["tally"], "pending": result["liveTally"]["pending"]}
        died = [name for name, running in result["components"].items() if not running]
        if t["lost"] or t["doubled"] or t["pending"] or result["notArchived"] or died \
                or result["jobsFinished"] < result["jobsSubmitted"]:
            broke = (f"at {n} Workloads: lost {t['lost']}, doubled {t['doubled']} (from the archive; "
                     f"{result['notArchived']} finished runs not archived), runs not done {t['pending']}, Jobs finished "
                     f"{result['jobsFinished']} of {result['jobsSubmitted']} "
                     f"after {args.timeout:.0f}s" + (f"; components stopped: {died}" if died else ""))
            break
    storm = bench.idle_storm(args.alerts) if args.alerts else None
    _table(([before] if before else []) + results)
    if before:
        print(f"  (the first row is the before burst, {args.before_base})")
    if storm:
        print(f"\nidle storm: {storm}")
    held = [r["workloads"] for r in results if not (r["tally"]["lost"] or r["tally"]["doubled"]
                                                     or r["liveTally"]["pending"] or r["notArchived"])]
    print(f"\nlargest burst that held: {max(held) if held else 'none'}; " + (f"broke {broke}" if broke else
                                                                             "nothing broke up to the last level"))
    print(json.dumps({"before": before, "levels": results, "idleStorm": storm, "largestHeld": max(held) if held else None,
                      "broke": broke}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
