"""The kubelet and job controllers of the local cluster: pods for admitted Workloads, on real GPUs.

On a cluster, once Kueue admits a Workload the job's controller unsuspends it and the kubelet runs
its pods on GPUs, which dcgm-exporter then attributes to the pod. Here: for every admitted,
unfinished Workload this creates the pods of its pod sets (owned by the job, as the job controller
would), assigns each pod's GPUs on the emulated exporter, and drives their utilization from the
scenario's activity setting; when the Workload loses its quota (evicted, deactivated, on hold,
finished, deleted) the pods go away and the GPUs are free again.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from engine.kueue import integration
from steps.gateways import resources as R
from steps.gateways.errors import Conflict, KubernetesError

log = logging.getLogger(__name__)
GPU = "nvidia.com/gpu"


@dataclass
class RunningPod:
    namespace: str
    name: str
    owner: tuple[str, str]  # (kind, name)
    workload: str
    gpus: list[str]  # exporter GPU uuids
    node: str


def _gpus_of(template: dict[str, Any]) -> int:
    total = 0
    for container in ((template or {}).get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        value = (resources.get("limits") or {}).get(GPU) or (resources.get("requests") or {}).get(GPU) or 0
        total += int(value)
    return total


def _condition(workload: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (workload.get("status") or {}).get("conditions") or [])


def holds_quota(workload: dict[str, Any]) -> bool:
    return _condition(workload, "QuotaReserved") and not _condition(workload, "Finished") and \
        (workload.get("spec") or {}).get("active", True) is not False


class WorkloadPods:
    """Keeps pods (and exporter GPU assignments) in line with which Workloads hold quota."""

    def __init__(self, gateway: Any, exporter: Any) -> None:
        self.gateway = gateway
        self.exporter = exporter
        self.pods: dict[tuple[str, str], RunningPod] = {}
        self.activity: dict[tuple[str, str], float] = {}  # (namespace, owner name) -> GPU utilization %
        self.default_activity = 80.0
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- scenario controls ------------------------------------------------------------------------

    def set_activity(self, namespace: str, owner: str, percent: float) -> None:
        """How busy the owner's GPUs are from now on (0 = idle)."""
        with self._lock:
            self.activity[(namespace, owner)] = percent
            for pod in self.pods.values():
                if pod.namespace == namespace and pod.owner[1] == owner:
                    for uuid in pod.gpus:
                        self.exporter.set_utilization(uuid, percent)

    def gpus_by_namespace(self) -> dict[str, tuple[int, float]]:
        """namespace -> (GPUs held by running pods, GPUs' worth of busy time = sum of util/100)."""
        usage: dict[str, tuple[int, float]] = {}
        utilization = {g.uuid: g.utilization for g in self.exporter.gpus()}
        with self._lock:
            for pod in self.pods.values():
                held, busy = usage.get(pod.namespace, (0, 0.0))
                usage[pod.namespace] = (held + len(pod.gpus),
                                        busy + sum(utilization.get(u, 0.0) for u in pod.gpus) / 100.0)
        return usage

    # -- loop -------------------------------------------------------------------------------------

    def start(self, interval: float = 0.2) -> None:
        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    self.sync()
                except KubernetesError as error:
                    log.warning("pod sync failed: %s", error)
        self._thread = threading.Thread(target=loop, name="workload-pods", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def sync(self) -> None:
        with self._lock:
            wanted: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any], int, int]] = {}
            for workload in self.gateway.list(R.WORKLOAD):
                if not holds_quota(workload):
                    continue
                owner = integration.owner_reference(workload)
                if owner is None:
                    continue
                admission = (workload.get("status") or {}).get("admission") or {}
                counts = {a.get("name"): a.get("count") for a in admission.get("podSetAssignments") or []}
                for pod_set in (workload.get("spec") or {}).get("podSets") or []:
                    count = counts.get(pod_set["name"], pod_set.get("count", 1))
                    count = pod_set.get("count", 1) if count is None else count
                    for index in range(int(count)):
                        name = (f"{owner['name']}-{index}" if owner["kind"] == "StatefulSet"
                                else f"{owner['name']}-{pod_set['name']}-{index}")
                        wanted[(workload["metadata"]["namespace"], name)] = (
                            workload, owner, _gpus_of(pod_set.get("template") or {}), index)
            for key in [k for k in self.pods if k not in wanted]:
                self._remove(self.pods.pop(key))
            for key, (workload, owner, gpus, _) in wanted.items():
                if key not in self.pods:
                    pod = self._create(key[0], key[1], workload, owner, gpus)
                    if pod is not None:
                        self.pods[key] = pod

    def _free_gpus(self, count: int) -> tuple[str, list[str]] | None:
        taken = {u for pod in self.pods.values() for u in pod.gpus}
        by_node: dict[str, list[str]] = {}
        for gpu in sorted(self.exporter.gpus(), key=lambda g: (g.hostname, g.gpu)):
            if gpu.uuid not in taken:
                by_node.setdefault(gpu.hostname, []).append(gpu.uuid)
        for node, free in by_node.items():
            if len(free) >= count:
                return node, free[:count]
        return None

    def _create(self, namespace: str, name: str, workload: dict[str, Any], owner: dict[str, Any],
                gpus: int) -> RunningPod | None:
        placement = self._free_gpus(gpus) if gpus else ("gpu-node-1", [])
        if placement is None:
            return None  # Pending: no node has the GPUs free yet; retried next sync
        node, uuids = placement
        body = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"gpuaas.io/owner-kind": owner["kind"].lower(), "gpuaas.io/owner": owner["name"]},
                         "ownerReferences": [{"apiVersion": owner.get("apiVersion", "v1"), "kind": owner["kind"],
                                              "name": owner["name"], "uid": owner.get("uid", ""),
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.example.com/ml/runtime",
                                                       "resources": {"limits": {GPU: str(gpus)}} if gpus else {}}]},
        }
        try:
            self.gateway.create(R.POD, body, namespace=namespace)
        except Conflict:
            pass
        try:
            self.gateway.merge_patch(R.POD, name, {"status": {"phase": "Running"}}, namespace=namespace,
                                     subresource="status")
        except KubernetesError:
            pass
        percent = self.activity.get((namespace, owner["name"]), self.default_activity)
        for uuid in uuids:
            self.exporter.assign(uuid, namespace=namespace, pod=name)
            self.exporter.set_utilization(uuid, percent)
        return RunningPod(namespace, name, (owner["kind"], owner["name"]), workload["metadata"]["name"], uuids, node)

    def _remove(self, pod: RunningPod) -> None:
        for uuid in pod.gpus:
            self.exporter.unassign(uuid)
        try:
            self.gateway.delete(R.POD, pod.name, namespace=pod.namespace)
        except KubernetesError as error:
            log.warning("deleting pod %s/%s failed: %s", pod.namespace, pod.name, error)
