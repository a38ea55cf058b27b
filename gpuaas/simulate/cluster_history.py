"""A history read from the cluster's Prometheus (`gpuaas simulate --prometheus URL --since 7d`).

What is read, with the product's own Prometheus client (`steps.gateways.metrics.MetricsGateway`,
prometheus-api-client):

- **GPU activity**: the raw samples of `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (else `DCGM_FI_DEV_GPU_UTIL`
  / 100) of every GPU held by a pod, in both label spellings, exactly as the recording rule
  `gpuaas:gpu_activity:ratio` reads them: `namespace`/`pod` outside the exporter's namespaces, or
  `exported_namespace`/`exported_pod`. Queried as range vectors in chunks, so samples are raw (no
  lookback filling a gap: a missing sample stays "no data"). A GPU is keyed by UUID plus MIG
  instance (`steps.gpu_key.GpuKey`), and a MIG slice's `DCGM_FI_DEV_GPU_UTIL` (not reported on MIG)
  is never read.
- **Who holds them** (kube-state-metrics): `kube_pod_owner` (pod -> owner), `kube_replicaset_owner`
  (ReplicaSet -> Deployment), `kube_job_owner` (Job -> JobSet, ...; a CronJob's Jobs stay
  workloads of their own, as Kueue admits them), `kube_pod_labels`
  (`notebook-name` marks a Kubeflow Notebook; `gpuaas.io/idle-policy: exempt` an exemption, both
  only when KSM's `--metric-labels-allowlist` exposes them), `kube_namespace_labels`
  (`gpuaas.io/tenant`, else the tenant is the namespace), `kube_pod_created` (the admission time
  stand-in: the earliest pod's creation, even before `--since`, so minRuntime counts from it), `kube_pod_container_resource_requests{resource=
  "nvidia_com_gpu"}` (GPUs held; a requested GPU without any DCGM series is held but has no data).
- **Lifetimes**: a pod lives while `kube_pod_owner` has raw samples; a workload from its first
  pod's creation to its last pod's last sample (plus one step). Its GPUs are the most its pods held
  at once: pods that replace each other (a rollout, a retried Job) hold them in turn, and GPU-hours
  count the GPUs held at each time.

The workload is the pod's top owner (Deployment, JobSet, RayCluster, PyTorchJob, Notebook, ...),
which is what a Kueue Workload stands for.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuaas.manifests.observability import DEFAULT_EXPORTER_NAMESPACES, TENANT_NAMESPACE_LABEL
from gpuaas.simulate.history import NOT_HELD, History, Pods, Workloads, allocate
from steps.gateways.metrics import ENGINE_ACTIVE, GPU_UTIL, MetricsGateway
from steps.gpu_key import GpuKey, reports

CHUNK_SECONDS = 3 * 3600.0
OWNERS_NOT_WORKLOADS = ("CronJob",)
"""Owners of a Job that Kueue does not admit as one Workload: each Job a CronJob creates is a Workload."""


class ClusterHistoryError(RuntimeError):
    """Prometheus could not give what the replay needs; the message says what to do."""


def _label(name: str) -> str:
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _duration(seconds: float) -> str:
    return f"{max(1, math.ceil(seconds))}s"


@dataclass
class PodInfo:
    namespace: str
    pod: str
    owner_kind: str = "Pod"
    owner_name: str = ""
    created: float | None = None
    first_seen: float | None = None
    last_seen: float | None = None
    requested_gpus: int = 0
    notebook: str = ""
    exempt: bool = False
    gpu_series: list[tuple[str, np.ndarray, np.ndarray]] = field(default_factory=list)
    """(GPU id, sample times, activity)."""


class ClusterReader:
    """Reads [since, until] from Prometheus into a History on a grid of `step` seconds."""

    def __init__(self, url: str, since: float, until: float, step: float = 60.0, *,
                 progress: Callable[[str, float], None] | None = None,
                 exporter_namespaces: tuple[str, ...] = DEFAULT_EXPORTER_NAMESPACES) -> None:
        if until - since < step:
            raise ClusterHistoryError(f"--since/--until: expected --since at least one --step ({step:g}s) before "
                                      f"--until, found --since {_iso(since)}, --until {_iso(until)}")
        self.gateway = MetricsGateway(url, timeout_seconds=120.0)
        self.since, self.until, self.step = since, until, step
        self.progress = progress
        self.exporter_namespaces = exporter_namespaces
        self.pods: dict[tuple[str, str], PodInfo] = {}

    def _query(self, promql: str, at: float) -> list[dict[str, Any]]:
        from steps.gateways.metrics import MetricsError, MetricsUnavailable

        try:
            return self.gateway.query(promql, at=at)
        except MetricsUnavailable as error:
            # the gateway speaks to the on-idle step (retried by Argo, URL from GPUAAS_PROMETHEUS_URL); here the
            # URL is the --prometheus option and nothing retries
            cause = error.__cause__
            why = str(cause)[:200] if cause is not None and "HTTP Status Code" in str(cause) else (
                type(cause).__name__ if cause is not None else str(error))
            raise ClusterHistoryError(
                f"--prometheus {self.gateway.url}: Prometheus is unreachable or failing ({why}); expected the URL of "
                "its HTTP API (for example http://prometheus-operated.monitoring.svc:9090): check it and that "
                "Prometheus answers") from None
        except MetricsError as error:
            raise ClusterHistoryError(str(error)) from None

    def _pod(self, namespace: str, pod: str) -> PodInfo:
        key = (namespace, pod)
        if key not in self.pods:
            self.pods[key] = PodInfo(namespace, pod)
        return self.pods[key]

    # -- GPU samples ---------------------------------------------------------------------------------
    def read_gpus(self) -> None:
        names = f"{ENGINE_ACTIVE}|{GPU_UTIL}"
        skip = "|".join(self.exporter_namespaces)
        selectors = {
            ("namespace", "pod"): f'{{__name__=~"{names}", exported_pod="", pod!="", namespace!~"{skip}"}}',
            ("exported_namespace", "exported_pod"): f'{{__name__=~"{names}", exported_pod!=""}}',
        }
        samples: dict[tuple[str, str, str], dict[str, list[tuple[np.ndarray, np.ndarray]]]] = defaultdict(
            lambda: defaultdict(list))
        chunks = max(1, math.ceil((self.until - self.since) / CHUNK_SECONDS))
        for index in range(chunks):
            begin = self.since + index * CHUNK_SECONDS
            end = min(self.until, begin + CHUNK_SECONDS)
            for (ns_label, pod_label), selector in selectors.items():
                for series in self._query(f"{selector}[{_duration(end - begin)}]", at=end):
                    labels = series.get("metric", {})
                    values = series.get("values") or []
                    if not values:
                        continue
                    points = np.asarray(values, dtype=np.float64)
                    keep = (points[:, 0] > begin) & (points[:, 0] <= end) & ~np.isnan(points[:, 1])
                    if index == 0:
                        keep |= points[:, 0] == begin
                    points = points[keep]
                    if not len(points):
                        continue
                    metric = labels.get("__name__", "")
                    if not reports(metric, labels):
                        continue  # GPU_UTIL of a MIG slice: not a reading (steps.gpu_key)
                    scale = 0.01 if metric == GPU_UTIL else 1.0
                    key = (labels.get(ns_label, ""), labels.get(pod_label, ""), str(GpuKey.from_labels(labels)))
                    samples[key][metric].append((points[:, 0], points[:, 1] * scale))
            if self.progress:
                self.progress("reading GPU samples", (index + 1) / chunks)
        for (namespace, pod, gpu), by_metric in samples.items():
            times, values = self._prefer_engine(by_metric)
            self._pod(namespace, pod).gpu_series.append((gpu, times, values))

    def _prefer_engine(self, by_metric: dict[str, list[tuple[np.ndarray, np.ndarray]]]) -> tuple[np.ndarray, np.ndarray]:
        """Engine-active where it has a sample in a slot, else GPU_UTIL/100 (the recording rule's `or`)."""
        def joined(metric: str) -> tuple[np.ndarray, np.ndarray]:
            parts = by_metric.get(metric) or []
            if not parts:
                return np.zeros(0), np.zeros(0)
            return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

        engine_t, engine_v = joined(ENGINE_ACTIVE)
        util_t, util_v = joined(GPU_UTIL)
        if len(util_t) and len(engine_t):
            engine_slots = np.floor((engine_t - self.since) / self.step + 1e-9)
            util_slots = np.floor((util_t - self.since) / self.step + 1e-9)
            extra = ~np.isin(util_slots, engine_slots)
            return np.concatenate([engine_t, util_t[extra]]), np.concatenate([engine_v, util_v[extra]])
        return (engine_t, engine_v) if len(engine_t) else (util_t, util_v)

    # -- kube-state-metrics ------------------------------------------------------------------------
    def _instant(self, promql: str) -> list[dict[str, Any]]:
        return self._query(promql, at=self.until)

    def read_pods(self) -> None:
        span = _duration(self.until - self.since)
        for series in self._instant(f"last_over_time(kube_pod_owner[{span}])"):
            labels = series["metric"]
            info = self._pod(labels.get("namespace", ""), labels.get("pod", ""))
            kind, name = labels.get("owner_kind", ""), labels.get("owner_name", "")
            if kind and kind != "<none>" and name and name != "<none>":
                info.owner_kind, info.owner_name = kind, name
        replicasets = {(s["metric"].get("namespace"), s["metric"].get("replicaset")): s["metric"]
                       for s in self._instant(f"last_over_time(kube_replicaset_owner[{span}])")}
        jobs = {(s["metric"].get("namespace"), s["metric"].get("job_name")): s["metric"]
                for s in self._instant(f"last_over_time(kube_job_owner[{span}])")}
        for info in self.pods.values():
            table = {"ReplicaSet": replicasets, "Job": jobs}.get(info.owner_kind)
            owner = table.get((info.namespace, info.owner_name)) if table else None
            if owner and owner.get("owner_kind") not in (None, "", "<none>", *OWNERS_NOT_WORKLOADS) and owner.get(
                    "owner_name") not in (None, "", "<none>"):
                info.owner_kind, info.owner_name = owner["owner_kind"], owner["owner_name"]
        for series in self._instant(f"last_over_time(kube_pod_created[{span}])"):
            labels = series["metric"]
            key = (labels.get("namespace", ""), labels.get("pod", ""))
            if key in self.pods:
                self.pods[key].created = float(series["value"][1])
        request = 'kube_pod_container_resource_requests{resource="nvidia_com_gpu"}'
        for series in self._instant(f"sum by (namespace, pod) (max_over_time({request}[{span}]))"):
            labels = series["metric"]
            key = (labels.get("namespace", ""), labels.get("pod", ""))
            if key in self.pods:
                self.pods[key].requested_gpus = round(float(series["value"][1]))
        notebook, exempt = _label("notebook-name"), _label("gpuaas.io/idle-policy")
        for series in self._instant(f"last_over_time(kube_pod_labels[{span}])"):
            labels = series["metric"]
            key = (labels.get("namespace", ""), labels.get("pod", ""))
            if key in self.pods:
                self.pods[key].notebook = labels.get(notebook, "")
                self.pods[key].exempt = labels.get(exempt, "").lower() == "exempt"
        self._read_presence()

    def _read_presence(self) -> None:
        """First and last raw sample of each pod's kube_pod_owner (range vectors, so no lookback
        stretches a pod's life by five minutes)."""
        chunks = max(1, math.ceil((self.until - self.since) / CHUNK_SECONDS))
        for index in range(chunks):
            begin = self.since + index * CHUNK_SECONDS
            end = min(self.until, begin + CHUNK_SECONDS)
            for series in self._query(f"kube_pod_owner[{_duration(end - begin)}]", at=end):
                labels = series["metric"]
                key = (labels.get("namespace", ""), labels.get("pod", ""))
                stamps = [float(v[0]) for v in series.get("values") or [] if begin <= float(v[0]) <= end]
                if key not in self.pods or not stamps:
                    continue
                info = self.pods[key]
                info.first_seen = min(stamps) if info.first_seen is None else min(info.first_seen, min(stamps))
                info.last_seen = max(stamps) if info.last_seen is None else max(info.last_seen, max(stamps))

    def tenants(self) -> dict[str, str]:
        span = _duration(self.until - self.since)
        label = _label(TENANT_NAMESPACE_LABEL)
        out = {}
        for series in self._instant(f'last_over_time(kube_namespace_labels{{{label}!=""}}[{span}])'):
            labels = series["metric"]
            out[labels.get("namespace", "")] = labels.get(label, "")
        return out

    # -- assembly ------------------------------------------------------------------------------------
    def read(self) -> History:
        self.read_gpus()
        self.read_pods()
        tenant_of = self.tenants()
        holders = [p for p in self.pods.values() if p.gpu_series or p.requested_gpus]
        if not holders:
            raise ClusterHistoryError(
                f"no GPU held by any pod in Prometheus at {self.gateway.url} between the --since and --until times "
                f"(neither {ENGINE_ACTIVE} nor {GPU_UTIL} with a pod, nor GPU requests in kube-state-metrics); "
                "check the URL, the time range and that dcgm-exporter runs in Kubernetes mode")
        groups: dict[tuple[str, str, str], list[PodInfo]] = defaultdict(list)
        for info in holders:
            if info.notebook:
                kind, name = "Notebook", info.notebook
            elif info.owner_name:
                kind, name = info.owner_kind, info.owner_name
            else:
                kind, name = "Pod", info.pod
            groups[(info.namespace, kind, name)].append(info)
        return self._assemble(groups, tenant_of)

    def _pod_span(self, info: PodInfo) -> tuple[float, float]:
        times = [t for _, stamps, _ in info.gpu_series for t in (stamps.min(), stamps.max()) if len(stamps)]
        first = info.created if info.created is not None else (info.first_seen if info.first_seen is not None
                                                               else min(times, default=self.since))
        last_seen = info.last_seen if info.last_seen is not None else max(times, default=self.until)
        start = max(self.since, first)
        end = min(self.until, max(last_seen + self.step, start + self.step))
        return start, end

    def _assemble(self, groups: dict[tuple[str, str, str], list[PodInfo]], tenant_of: dict[str, str]) -> History:
        keys = sorted(groups)
        names, namespaces, tenants, kinds, gpus, starts, ends, exempt, admitted = [], [], [], [], [], [], [], [], []
        pod_names, pod_owner, pod_first, pod_width = [], [], [], []
        layout: list[list[tuple[PodInfo, float, float, list[tuple[str, np.ndarray, np.ndarray] | None]]]] = []
        for index, (namespace, kind, name) in enumerate(keys):
            members = sorted(groups[(namespace, kind, name)], key=lambda p: p.pod)
            column = 0
            entries = []
            for info in members:
                start, end = self._pod_span(info)
                series = sorted(info.gpu_series, key=lambda s: s[0])
                columns: list[tuple[str, np.ndarray, np.ndarray] | None] = list(series)
                columns += [None] * max(0, info.requested_gpus - len(series))
                pod_names.append(info.pod)
                pod_owner.append(index)
                pod_first.append(column)
                pod_width.append(len(columns))
                column += len(columns)
                entries.append((info, start, end, columns))
            spans = [(s, e) for _, s, e, _ in entries]
            names.append(name)
            namespaces.append(namespace)
            tenants.append(tenant_of.get(namespace) or namespace)
            kinds.append(kind)
            gpus.append(max(1, max(sum(len(c) for *_, c in entries), 1)))
            starts.append(min(s for s, _ in spans))
            ends.append(max(e for _, e in spans))
            exempt.append(any(info.exempt for info, *_ in entries))
            created = [info.created for info, *_ in entries if info.created is not None]
            admitted.append(min([*created, starts[-1]]))
            layout.append(entries)
        workloads = Workloads.build(name=names, namespace=namespaces, tenant=tenants, kind=kinds, gpus=gpus,
                                    start=starts, end=ends, exempt=exempt, admitted=admitted)
        t0 = math.floor(self.since / self.step) * self.step
        pods = Pods(name=np.asarray(pod_names, dtype=object), workload=np.asarray(pod_owner, dtype=np.int64),
                    first_column=np.asarray(pod_first, dtype=np.int64), columns=np.asarray(pod_width, dtype=np.int64))
        history = allocate(t0, self.step, workloads, np.asarray(gpus), pods,
                           source=f"Prometheus {self.gateway.url}")
        for w, entries in enumerate(layout):
            block = history.block(w)
            column = 0
            for _, start, end, columns in entries:
                slot_times = history.t0 + (history.first[w] + np.arange(block.shape[0])) * history.step
                outside = (slot_times + history.step <= start) | (slot_times >= end)
                for series in columns:
                    block[outside, column] = NOT_HELD
                    if series is not None:
                        _, times, values = series
                        inside = (times >= history.workloads.start[w]) & (times < history.workloads.end[w])
                        local = (np.floor((times[inside] - history.t0) / history.step + 1e-9).astype(np.int64)
                                 - history.first[w])
                        target = block[:, column]
                        np.fmax.at(target, local, values[inside].astype(np.float32))
                        block[:, column] = target
                    column += 1
            # pods that replace each other hold the workload's GPUs in turn: it holds at most this many
            held = (block != NOT_HELD).sum(axis=1)
            history.workloads.gpus[w] = max(1, int(held.max())) if len(held) else history.workloads.gpus[w]
        history.notes.append(f"{len(self.pods):,} pods seen; {len(keys):,} workloads holding GPUs")
        return history


def _iso(seconds: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_cluster(url: str, since: float, until: float, step: float = 60.0,
                 progress: Callable[[str, float], None] | None = None) -> History:
    return ClusterReader(url, since, until, step, progress=progress).read()
