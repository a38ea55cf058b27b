"""`--prometheus` and `--trace` on the same history give the same numbers.

The trace is backfilled into a real Prometheus (Debian 2.42): `promtool tsdb create-blocks-from
openmetrics` writes the DCGM series (both label spellings, engine-active and GPU_UTIL-only GPUs)
and the kube-state-metrics series the reader needs (pod owners, a ReplicaSet -> Deployment
chain, a Notebook label, an exemption label, tenant namespace labels, creation times, GPU
requests) into a TSDB directory; Prometheus is started on it; `gpuaas simulate --prometheus`
reads it back and must score every policy exactly as `gpuaas simulate --trace` does.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.monitoring import PrometheusProcess, availability
from gpuaas.cli import main
from tests.simulate.conftest import T0, Job, run, trace

JOBS = [
    Job("train-a", 240, [run((70, 0.8), (110, 0.0), (60, 0.8)), run((70, 0.7), (110, 0.01), (60, 0.9))],
        tenant="tenant-a", namespace="team-a", pods=["train-a-0", "train-a-0"]),
    Job("ray-b", 300, [run((60, 0.9), (240, 0.0)), run((80, 0.9), (220, 0.0))], kind="RayCluster",
        tenant="tenant-a", namespace="team-a", pods=["ray-b-head", "ray-b-worker"]),
    Job("nb-c", 400, [run((20, 0.4), (60, 0.0), (5, 0.5), (3, None), (312, 0.0))], kind="Notebook",
        tenant="tenant-b", namespace="team-b", start=10, pods=["nb-c-0"]),
    Job("infer-d", 300, [run((100, 0.6), (200, 0.0))], kind="Deployment", tenant="tenant-b", namespace="team-b",
        pods=["infer-d-7f9c-x2"]),
    Job("infer-e", 300, [run((100, 0.6), (200, 0.0))], kind="Deployment", tenant="tenant-b", namespace="team-c",
        exempt=True, pods=["infer-e-5d8b-k1"]),
]
EXPORTED = {"ray-b"}
"""Series written in the ServiceMonitor spelling (exported_namespace / exported_pod)."""
UTIL_ONLY = {"nb-c"}
"""GPUs without profiling metrics: DCGM_FI_DEV_GPU_UTIL in percent."""


def _labels(values: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(values.items())) + "}"


def openmetrics(jobs: list[Job]) -> str:
    """The jobs' GPU samples and kube-state-metrics series, one sample a minute, grouped by family."""
    families: dict[str, list[str]] = defaultdict(list)
    namespaces: dict[str, str] = {}
    for job in jobs:
        start = T0 + job.start * 60
        minutes = range(job.minutes)
        namespaces[job.namespace] = job.tenant
        pods = sorted(set(job.pods))
        for gpu, samples in enumerate(job.gpus):
            pod = job.pods[gpu]
            gpu_labels = {"gpu": str(gpu), "UUID": f"GPU-{job.name}-{gpu:02d}", "Hostname": "node-a",
                          "modelName": "NVIDIA A100"}
            if job.name in EXPORTED:
                gpu_labels.update(exported_namespace=job.namespace, exported_pod=pod, namespace="gpu-operator",
                                  pod="nvidia-dcgm-exporter-x7k2p")
            else:
                gpu_labels.update(namespace=job.namespace, pod=pod)
            metric = "DCGM_FI_DEV_GPU_UTIL" if job.name in UTIL_ONLY else "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
            scale = 100.0 if job.name in UTIL_ONLY else 1.0
            families[metric] += [f"{metric}{_labels(gpu_labels)} {v * scale!r} {start + m * 60}"
                                 for m, v in enumerate(samples) if v is not None]
        for pod in pods:
            base = {"namespace": job.namespace, "pod": pod}
            if job.kind == "Deployment":
                replicaset = pod.rsplit("-", 1)[0]
                owner = {"owner_kind": "ReplicaSet", "owner_name": replicaset}
                families["kube_replicaset_owner"].append(
                    f"kube_replicaset_owner{_labels({'namespace': job.namespace, 'replicaset': replicaset, 'owner_kind': 'Deployment', 'owner_name': job.name, 'owner_is_controller': 'true'})} 1 {start}")
            elif job.kind == "Notebook":
                owner = {"owner_kind": "StatefulSet", "owner_name": job.name}
            else:
                owner = {"owner_kind": job.kind, "owner_name": job.name}
            owner_labels = _labels({**base, **owner, "owner_is_controller": "true"})
            families["kube_pod_owner"] += [f"kube_pod_owner{owner_labels} 1 {start + m * 60}" for m in minutes]
            families["kube_pod_created"].append(f"kube_pod_created{_labels(base)} {start} {start}")
            held = sum(1 for p in job.pods if p == pod)
            request = _labels({**base, "container": "main", "resource": "nvidia_com_gpu", "unit": "integer"})
            families["kube_pod_container_resource_requests"].append(
                f"kube_pod_container_resource_requests{request} {held} {start}")
            pod_labels = dict(base)
            if job.kind == "Notebook":
                pod_labels["label_notebook_name"] = job.name
            if job.exempt:
                pod_labels["label_gpuaas_io_idle_policy"] = "exempt"
            families["kube_pod_labels"].append(f"kube_pod_labels{_labels(pod_labels)} 1 {start}")
    for namespace, tenant in namespaces.items():
        families["kube_namespace_labels"].append(
            f"kube_namespace_labels{_labels({'namespace': namespace, 'label_gpuaas_io_tenant': tenant})} 1 {T0}")
    lines = []
    for family in sorted(families):
        lines.append(f"# TYPE {family} gauge")
        by_series: dict[str, list[str]] = defaultdict(list)
        for line in families[family]:
            by_series[line.rsplit(" ", 2)[0]].append(line)
        for series in sorted(by_series):
            lines += sorted(by_series[series], key=lambda text: int(text.rsplit(" ", 1)[1]))
    return "\n".join(lines) + "\n# EOF\n"


@contextmanager
def serving(workdir: Path, text: str) -> Iterator[Any]:
    """A real Prometheus serving `text` (OpenMetrics) backfilled with promtool into a fresh TSDB."""
    found = availability()
    assert found.prometheus and found.promtool, f"prometheus and promtool are needed (make setup): {found.reason}"
    source = workdir / "history.om"
    source.write_text(text)
    (workdir / "tsdb").mkdir()
    created = subprocess.run([found.promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(source),
                              str(workdir / "tsdb")], capture_output=True, text=True, check=False, timeout=120)
    assert created.returncode == 0, created.stderr
    (workdir / "prometheus.yml").write_text(yaml.safe_dump({"global": {"scrape_interval": "1m"}}))

    class Backfilled(PrometheusProcess):
        def command(self) -> list[str]:
            return [*super().command(), "--storage.tsdb.retention.time=100000d"]

    process = Backfilled(workdir, found.prometheus)  # type: ignore[arg-type]
    process.start(timeout_s=30)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # blocks are loaded once the head is ready; wait for the data
            query = f"{process.url}/api/v1/query?query=count(kube_pod_owner)&time={T0 + 600}"
            with urllib.request.urlopen(query, timeout=5) as response:
                if json.loads(response.read())["data"]["result"]:
                    break
            time.sleep(0.2)
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with serving(tmp_path_factory.mktemp("backfill"), openmetrics(JOBS)) as process:
        yield process


def _simulate(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """`gpuaas simulate ARGS` with one 30-minute window for every kind (the cases' times are worked out for it)."""
    policy = Path(__file__).resolve().parent / "thirty-minutes.yaml"
    assert main(["simulate", *args, "--windows", "10m,1h", "--output", "json", "--policy", str(policy)]) == 0
    return json.loads(capsys.readouterr().out)


def test_prometheus_history_scores_like_the_trace(backfilled: Any, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from_trace = _simulate(["--trace", str(trace(tmp_path / "trace", JOBS))], capsys)
    end = max(T0 + (job.start + job.minutes) * 60 for job in JOBS)
    since, until = _iso(T0), _iso(end)
    from_prometheus = _simulate(["--prometheus", backfilled.url, "--since", since, "--until", until], capsys)
    trace_history, prom_history = from_trace["history"], from_prometheus["history"]
    for key in ("workloads", "tenants", "namespaces", "pods", "samples", "start", "end"):
        assert prom_history[key] == trace_history[key], key
    assert from_trace["policies"][0]["total"]["releases"] >= 2  # the comparison is not about nothing
    for ours, theirs in zip(from_trace["policies"], from_prometheus["policies"], strict=True):
        assert ours["name"] == theirs["name"]
        assert ours["total"] == theirs["total"], ours["name"]
        assert ours["tenants"] == theirs["tenants"], ours["name"]
        assert ours["onIdleRuns"] == theirs["onIdleRuns"], ours["name"]
    kinds = sorted((i["workload"], i["kind"]) for i in from_prometheus["interruptions"])
    assert kinds == sorted((i["workload"], i["kind"]) for i in from_trace["interruptions"])


def _iso(seconds: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rolled_deployment() -> str:
    """A 1-GPU Deployment rolled once: ReplicaSet infer-r-1's pod lives minutes 0-120 (busy 0-60, idle
    60-120), then infer-r-2's pod minutes 120-300 (busy 120-180, idle 180-300). One GPU at any time."""
    lines: dict[str, list[str]] = defaultdict(list)
    for replicaset, pod, first, busy, last in (("infer-r-1", "infer-r-1-aaaa", 0, 60, 120),
                                               ("infer-r-2", "infer-r-2-bbbb", 120, 180, 300)):
        base = {"namespace": "team-r", "pod": pod}
        gpu = _labels({**base, "gpu": "0", "UUID": f"GPU-{pod}", "Hostname": "node-r"})
        lines["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] += [
            f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu} {0.6 if m < busy else 0.0} {T0 + m * 60}" for m in range(first, last)]
        owner = _labels({**base, "owner_kind": "ReplicaSet", "owner_name": replicaset, "owner_is_controller": "true"})
        lines["kube_pod_owner"] += [f"kube_pod_owner{owner} 1 {T0 + m * 60}" for m in range(first, last)]
        lines["kube_pod_created"].append(f"kube_pod_created{_labels(base)} {T0 + first * 60} {T0 + first * 60}")
        request = _labels({**base, "container": "main", "resource": "nvidia_com_gpu", "unit": "integer"})
        lines["kube_pod_container_resource_requests"].append(
            f"kube_pod_container_resource_requests{request} 1 {T0 + first * 60}")
        chain = _labels({"namespace": "team-r", "replicaset": replicaset, "owner_kind": "Deployment",
                         "owner_name": "infer-r", "owner_is_controller": "true"})
        lines["kube_replicaset_owner"].append(f"kube_replicaset_owner{chain} 1 {T0 + first * 60}")
    lines["kube_namespace_labels"].append(
        f"kube_namespace_labels{_labels({'namespace': 'team-r', 'label_gpuaas_io_tenant': 'tenant-r'})} 1 {T0}")
    out = []
    for family in sorted(lines):
        out.append(f"# TYPE {family} gauge")
        by_series: dict[str, list[str]] = defaultdict(list)
        for line in lines[family]:
            by_series[line.rsplit(" ", 2)[0]].append(line)
        for series in sorted(by_series):
            out += by_series[series]
    return "\n".join(out) + "\n# EOF\n"


def test_a_rolled_deployment_holds_one_gpu_not_one_per_pod_it_ever_had(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Pods that replace each other (a rollout, a Job's retry) hold the workload's GPUs in turn: idle
    and reclaimed GPU-hours count the GPUs held at each time, not every pod's GPUs at once."""
    with serving(tmp_path, rolled_deployment()) as prometheus:
        result = _simulate(["--prometheus", prometheus.url, "--since", _iso(T0), "--until", _iso(T0 + 300 * 60)],
                           capsys)
    assert (result["history"]["workloads"], result["history"]["pods"]) == (1, 2)
    assert result["history"]["gpusHeldOnAverage"] == 1.0
    given = result["policies"][0]["total"]
    # idle 60-120 (ends busy: the new pod works) and 180-300 (ends at finish): 3 GPU-hours on one GPU
    assert (given["idleGpuHours"], given["idleGpuHoursEndingAtFinish"]) == (3.0, 2.0)
    # the first pod's alert fires at 95 (30m window + 5m for), delivered at 95.5: released until the
    # new pod's activity at 120 (a wrong release): 24.5 minutes of one GPU
    assert (given["releases"], given["wrongReleases"]) == (1, 1)
    assert given["reclaimedGpuHours"] == round(24.5 / 60, 3)
    assert result["interruptions"][0]["gpus"] == 1


def nightly_cronjob() -> str:
    """A CronJob's two runs (Jobs nightly-1 and nightly-2, one 1-GPU pod each): minutes 0-60 (busy 0-20,
    idle after) and 120-180 (busy 120-140, idle after)."""
    lines: dict[str, list[str]] = defaultdict(list)
    for job, pod, first in (("nightly-1", "nightly-1-x", 0), ("nightly-2", "nightly-2-y", 120)):
        base = {"namespace": "team-n", "pod": pod}
        gpu = _labels({**base, "gpu": "0", "UUID": f"GPU-{pod}", "Hostname": "node-n"})
        lines["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] += [
            f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu} {0.6 if m < first + 20 else 0.0} {T0 + m * 60}"
            for m in range(first, first + 60)]
        owner = _labels({**base, "owner_kind": "Job", "owner_name": job, "owner_is_controller": "true"})
        lines["kube_pod_owner"] += [f"kube_pod_owner{owner} 1 {T0 + m * 60}" for m in range(first, first + 60)]
        lines["kube_pod_created"].append(f"kube_pod_created{_labels(base)} {T0 + first * 60} {T0 + first * 60}")
        request = _labels({**base, "container": "main", "resource": "nvidia_com_gpu", "unit": "integer"})
        lines["kube_pod_container_resource_requests"].append(
            f"kube_pod_container_resource_requests{request} 1 {T0 + first * 60}")
        chain = _labels({"namespace": "team-n", "job_name": job, "owner_kind": "CronJob", "owner_name": "nightly",
                         "owner_is_controller": "true"})
        lines["kube_job_owner"].append(f"kube_job_owner{chain} 1 {T0 + first * 60}")
    out = []
    for family in sorted(lines):
        out.append(f"# TYPE {family} gauge")
        by_series: dict[str, list[str]] = defaultdict(list)
        for line in lines[family]:
            by_series[line.rsplit(" ", 2)[0]].append(line)
        for series in sorted(by_series):
            out += by_series[series]
    return "\n".join(out) + "\n# EOF\n"


def test_each_run_of_a_cronjob_is_a_workload(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Kueue admits each Job a CronJob creates as a Workload of its own (a CronJob is not one): each
    run's idle tail ends at that run's finish, not busy at the next night's run."""
    with serving(tmp_path, nightly_cronjob()) as prometheus:
        result = _simulate(["--prometheus", prometheus.url, "--since", _iso(T0), "--until", _iso(T0 + 180 * 60)],
                           capsys)
    assert result["history"]["workloads"] == 2
    given = result["policies"][0]["total"]
    assert (given["idleGpuHours"], given["idleGpuHoursEndingAtFinish"]) == (round(80 / 60, 3), round(80 / 60, 3))
