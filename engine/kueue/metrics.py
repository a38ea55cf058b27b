"""The Kueue metrics of the emulated cluster, as Kueue v0.19 exports them, on a /metrics endpoint.

Real Kueue (sigs.k8s.io/kueue v0.19.2 pkg/metrics/metrics.go, with
`metrics.enableClusterQueueResources: true`) reports per ClusterQueue, flavor and resource
`kueue_cluster_queue_resource_usage`, `_resource_reservation`, `_nominal_quota`,
`_borrowing_limit`/`_lending_limit` (+Inf when unset) {cohort, cluster_queue, flavor, resource,
replica_role}, `kueue_cluster_queue_resource_pending` {cluster_queue, resource, replica_role}, and
the `kueue_admission_wait_time_seconds` histogram {cluster_queue, priority_class, replica_role}
(buckets 1, then 2.5 x 2^k). This exporter renders the same series from the engine's ClusterQueue
status and Workloads, so the local demo's Prometheus holds what a real cluster's would, and
`gpuaas quota advise` and the dashboard read it unchanged. `replica_role` is "standalone" (one
Kueue, no leader election).

Admission wait = QuotaReserved's lastTransitionTime - the time the Workload was queued: the last
transition of its `Requeued` condition when it has one, else its creation (Kueue v0.19.2
pkg/workload/workload.go QueuedWaitTime); each admission is observed once.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from engine.http_server import QuietHTTPServer
from steps.cluster_queue import cohort_of

GPU = "nvidia.com/gpu"
BUCKETS = [1.0] + [2.5 * 2 ** k for k in range(15)]
ROLE = "standalone"


def _time(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.fromisoformat(text).timestamp()


def _number(value: object) -> float:
    from engine.kueue.quantity import parse_quantity

    return float(parse_quantity(str(value)))


def _labels(**labels: str) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def _num(value: float) -> str:
    return "+Inf" if math.isinf(value) else repr(float(value))


class KueueMetrics:
    """Renders Kueue's ClusterQueue metrics from a gateway's view of the cluster; serves /metrics."""

    def __init__(self, list_objects: Callable[[str], list[dict[str, Any]]]) -> None:
        """`list_objects(kind)` -> objects, for kind in ClusterQueue, LocalQueue, Workload."""
        self._list = list_objects
        self._lock = threading.Lock()
        self._observed: set[tuple[str, str]] = set()
        self._waits: dict[str, list[float]] = {}
        self._server: ThreadingHTTPServer | None = None

    def _observe_admissions(self, workloads: list[dict[str, Any]], queue_of: Callable[[dict], str | None]) -> None:
        for workload in workloads:
            conditions = (workload.get("status") or {}).get("conditions") or []
            requeued = next((c for c in conditions if c.get("type") == "Requeued"), None)
            for condition in conditions:
                if condition.get("type") != "QuotaReserved" or condition.get("status") != "True":
                    continue
                admitted = _time(condition.get("lastTransitionTime"))
                created = _time((requeued or {}).get("lastTransitionTime")
                                or workload["metadata"].get("creationTimestamp"))
                key = (workload["metadata"].get("uid", workload["metadata"]["name"]), condition.get("lastTransitionTime"))
                queue = queue_of(workload)
                if admitted is None or created is None or queue is None or key in self._observed:
                    continue
                self._observed.add(key)
                self._waits.setdefault(queue, []).append(max(0.0, admitted - created))

    def render(self) -> str:
        queues = self._list("ClusterQueue")
        local = {(lq["metadata"]["namespace"], lq["metadata"]["name"]): (lq.get("spec") or {}).get("clusterQueue")
                 for lq in self._list("LocalQueue")}
        workloads = self._list("Workload")

        def queue_of(workload: dict[str, Any]) -> str | None:
            return local.get((workload["metadata"].get("namespace"), (workload.get("spec") or {}).get("queueName")))

        lines: list[str] = []
        with self._lock:
            self._observe_admissions(workloads, queue_of)
            pending: dict[str, float] = {}
            for workload in workloads:
                status = workload.get("status") or {}
                reserved = any(c.get("type") == "QuotaReserved" and c.get("status") == "True"
                               for c in status.get("conditions") or [])
                finished = any(c.get("type") == "Finished" and c.get("status") == "True"
                               for c in status.get("conditions") or [])
                active = (workload.get("spec") or {}).get("active", True) is not False
                queue = queue_of(workload)
                if reserved or finished or not active or queue is None:
                    continue
                gpus = 0.0
                for pod_set in (workload.get("spec") or {}).get("podSets") or []:
                    for container in ((pod_set.get("template") or {}).get("spec") or {}).get("containers") or []:
                        request = ((container.get("resources") or {}).get("requests") or {}).get(GPU)
                        if request is not None:
                            gpus += _number(request) * int(pod_set.get("count", 1))
                pending[queue] = pending.get(queue, 0.0) + gpus
            gauges: dict[str, list[str]] = {name: [] for name in (
                "kueue_cluster_queue_resource_usage", "kueue_cluster_queue_resource_reservation",
                "kueue_cluster_queue_nominal_quota", "kueue_cluster_queue_borrowing_limit",
                "kueue_cluster_queue_lending_limit", "kueue_cluster_queue_resource_pending")}
            for cq in queues:
                name = cq["metadata"]["name"]
                cohort = cohort_of(cq)
                usage: dict[str, float] = {}
                for flavor in (cq.get("status") or {}).get("flavorsUsage") or []:
                    for resource in flavor.get("resources") or []:
                        if resource.get("name") == GPU:
                            usage[flavor["name"]] = _number(resource.get("total", 0))
                for group in (cq.get("spec") or {}).get("resourceGroups") or []:
                    for flavor in group.get("flavors") or []:
                        for resource in flavor.get("resources") or []:
                            if resource.get("name") != GPU:
                                continue
                            labels = _labels(cohort=cohort, cluster_queue=name, flavor=flavor["name"], resource=GPU,
                                             replica_role=ROLE)
                            used = usage.get(flavor["name"], 0.0)
                            borrowing = resource.get("borrowingLimit")
                            lending = resource.get("lendingLimit")
                            for metric, value in (
                                    ("kueue_cluster_queue_resource_usage", used),
                                    ("kueue_cluster_queue_resource_reservation", used),
                                    ("kueue_cluster_queue_nominal_quota", _number(resource.get("nominalQuota", 0))),
                                    ("kueue_cluster_queue_borrowing_limit",
                                     math.inf if borrowing is None else _number(borrowing)),
                                    ("kueue_cluster_queue_lending_limit",
                                     math.inf if lending is None else _number(lending))):
                                gauges[metric].append(f"{metric}{{{labels}}} {_num(value)}")
                gauges["kueue_cluster_queue_resource_pending"].append(
                    f"kueue_cluster_queue_resource_pending{{{_labels(cluster_queue=name, resource=GPU, replica_role=ROLE)}}} "
                    f"{_num(pending.get(name, 0.0))}")
            for metric, rows in gauges.items():
                lines += [f"# TYPE {metric} gauge", *rows]
            metric = "kueue_admission_wait_time_seconds"
            lines.append(f"# TYPE {metric} histogram")
            for cq in queues:
                name = cq["metadata"]["name"]
                waits = self._waits.get(name, [])
                base = {"cluster_queue": name, "priority_class": "", "replica_role": ROLE}
                for le in BUCKETS:
                    lines.append(f"{metric}_bucket{{{_labels(**base, le=f'{le:g}')}}} {sum(1 for w in waits if w <= le)}")
                lines.append(f"{metric}_bucket{{{_labels(**base, le='+Inf')}}} {len(waits)}")
                lines.append(f"{metric}_sum{{{_labels(**base)}}} {_num(sum(waits))}")
                lines.append(f"{metric}_count{{{_labels(**base)}}} {len(waits)}")
        return "\n".join(lines) + "\n"

    def start(self) -> str:
        metrics = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404, "only /metrics is served")
                    return
                body = metrics.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="kueue-metrics", daemon=True).start()
        return self.target

    @property
    def target(self) -> str:
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
