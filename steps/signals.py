"""Each kind's own evidence that its work is done, judged from what the kind's own API answered (pure).

GPU activity says the GPUs are quiet; it cannot say whether a person is reading a notebook, a Ray
job is between two tasks, or a server is waiting for the morning. Each kind already has an API
that knows (docs/reactions.md "The kind's own evidence"):

| kind     | source       | read from                                                              | done when (over the window)                                    |
|----------|--------------|------------------------------------------------------------------------|----------------------------------------------------------------|
| notebook | `jupyter`    | the Jupyter server: `/api/kernels` and `/api/status`, as the Kubeflow   | every kernel `idle`, no client connected, last activity (kernels' |
|          |              | notebook culler reads them (notebook-controller culling_controller.go) | and the server's) at least a window ago                         |
| ray      | `ray-jobs`   | Ray's job API on the head's dashboard (`GET /api/jobs/`, as KubeRay's  | no job PENDING or RUNNING, the last one ended a window ago (or   |
|          |              | dashboard client lists jobs), or a RayJob's `status.jobStatus`         | none ever ran)                                                   |
| serving  | `requests`   | the serving runtime's request metrics in Prometheus (vLLM, Triton, TGI | no request served and none running or waiting                    |
|          |              | names below, or the policy's `requestMetric`)                           |                                                                  |
| training | `progress`   | the counter named in the policy (`progressMetric`)                       | it did not advance                                               |
| batch    | (none)       |                                                                        |                                                                  |

Every function returns `Evidence`: `done` True / False, or None when the source could not be read
(not exported, unreachable, not configured): then the policy's `withoutSignal` decides (GPU activity
alone, or keep). The on-idle step reads the sources (steps.gateways.workload_apis, MetricsGateway)
and `gpuaas simulate` models them from a history; both call these functions, so the replay judges
with the production code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from steps.model.workload import parse_time

SIGNAL_OF_KIND: dict[str, str | None] = {"notebook": "jupyter", "ray": "ray-jobs", "serving": "requests",
                                         "training": "progress", "batch": None}

REQUEST_COUNTERS = ("vllm:request_success_total", "nv_inference_request_success", "nv_inference_request_failure",
                    "tgi_request_count")
"""Requests served: vLLM (vllm/v1/metrics/loggers.py `vllm:request_success`, exposed with `_total`),
Triton (core src/metrics.cc), Text Generation Inference (router `tgi_request_count`)."""
REQUEST_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "nv_inference_pending_request_count",
                  "tgi_queue_size", "tgi_batch_current_size")
"""Requests in flight or waiting, from the same runtimes."""

RAY_ACTIVE = ("PENDING", "RUNNING")
"""Ray job statuses of a job that is not over (KubeRay rayv1.JobStatus; Ray's job API)."""
KERNEL_IDLE = "idle"


@dataclass(frozen=True)
class Evidence:
    """What a kind's own source says about its work."""

    source: str
    done: bool | None
    """True: the work is done; False: it is not; None: the source could not be read."""
    reason: str
    observed: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "done": self.done, "reason": self.reason, "observed": dict(self.observed)}


def _seconds(value: object) -> float | None:
    """Unix seconds from RFC 3339 (Jupyter writes `2026-01-01T00:00:00.000000Z`), None when absent or bad."""
    moment = parse_time(value)
    return None if moment is None else moment.timestamp()


def _ago(seconds: float) -> str:
    return f"{seconds / 60:.0f} min ago" if seconds < 7200 else f"{seconds / 3600:.1f} h ago"


def jupyter_evidence(kernels: Sequence[Mapping[str, Any]] | None, status: Mapping[str, Any] | None, now: float,
                     window: float, error: str | None = None) -> Evidence:
    """A notebook's work is done when every kernel is idle, no client is connected and the last activity
    (the kernels' and the server's: API calls, terminals) is at least `window` old."""
    if error:
        return Evidence("jupyter", None, f"the Jupyter server could not be read: {error}")
    if kernels is None:
        return Evidence("jupyter", None, "the Jupyter server answered no kernel list")
    observed = {"kernels": len(kernels)}
    busy = [k for k in kernels if str(k.get("execution_state", "")) != KERNEL_IDLE]
    if busy:
        states = ", ".join(sorted({str(k.get("execution_state") or "unknown") for k in busy}))
        return Evidence("jupyter", False, f"{len(busy)} of {len(kernels)} kernel(s) not idle ({states})", observed)
    connections = sum(int(k.get("connections") or 0) for k in kernels)
    if status is not None:
        connections = max(connections, int(status.get("connections") or 0))
    observed["connections"] = connections
    if connections > 0:
        return Evidence("jupyter", False, f"{connections} client(s) connected to the kernels", observed)
    stamps = [_seconds(k.get("last_activity")) for k in kernels]
    if status is not None:
        stamps.append(_seconds(status.get("last_activity")))
    known = [s for s in stamps if s is not None]
    if not known:
        return Evidence("jupyter", None, "no kernel and no server activity time to judge from", observed)
    last = max(known)
    observed["lastActivity"] = datetime.fromtimestamp(last, UTC).isoformat().replace("+00:00", "Z")
    if now - last < window:
        return Evidence("jupyter", False, f"last activity {_ago(now - last)}, within the {window:g}s window", observed)
    return Evidence("jupyter", True, f"every kernel idle ({len(kernels)}), no client connected, last activity "
                                     f"{_ago(now - last)}", observed)


def ray_jobs_evidence(jobs: Sequence[Mapping[str, Any]] | None, now: float, window: float,
                      error: str | None = None) -> Evidence:
    """A Ray cluster's work is done when no job is pending or running and the last one ended at least
    `window` ago (Ray's job API: `status`, `end_time` in milliseconds); a cluster that never ran a job is
    done too (the GPU guard and the minimum runtime keep a new one)."""
    if error:
        return Evidence("ray-jobs", None, f"Ray's job API could not be read: {error}")
    if jobs is None:
        return Evidence("ray-jobs", None, "Ray's job API answered no job list")
    active = [j for j in jobs if str(j.get("status", "")).upper() in RAY_ACTIVE]
    observed: dict[str, Any] = {"jobs": len(jobs), "active": len(active)}
    if active:
        names = ", ".join(sorted(str(j.get("submission_id") or j.get("job_id") or "?") for j in active)[:3])
        return Evidence("ray-jobs", False, f"{len(active)} Ray job(s) pending or running ({names})", observed)
    ends = [float(j["end_time"]) / 1000.0 for j in jobs if j.get("end_time")]
    if not ends:
        return Evidence("ray-jobs", True, "no Ray job pending or running" + (" (none ever ran)" if not jobs else ""),
                        observed)
    last = max(ends)
    observed["lastEnded"] = datetime.fromtimestamp(last, UTC).isoformat().replace("+00:00", "Z")
    if now - last < window:
        return Evidence("ray-jobs", False, f"the last Ray job ended {_ago(now - last)}, within the {window:g}s window",
                        observed)
    return Evidence("ray-jobs", True, f"no Ray job pending or running; the last ended {_ago(now - last)}", observed)


def rayjob_status_evidence(status: Mapping[str, Any] | None, now: float, window: float) -> Evidence:
    """A RayJob's own status (KubeRay): done once `jobStatus` is terminal and `endTime` a window old."""
    status = status or {}
    job_status = str(status.get("jobStatus") or "")
    observed = {"jobStatus": job_status or "(new)", "jobDeploymentStatus": status.get("jobDeploymentStatus")}
    if job_status in ("", *RAY_ACTIVE):
        return Evidence("ray-jobs", False, f"RayJob status {job_status or 'new'}: its job is not over", observed)
    end = _seconds(status.get("endTime"))
    if end is not None and now - end < window:
        return Evidence("ray-jobs", False, f"RayJob {job_status} {_ago(now - end)}, within the {window:g}s window",
                        observed)
    return Evidence("ray-jobs", True, f"RayJob {job_status}" + (f" {_ago(now - end)}" if end is not None else ""),
                    observed)


def requests_evidence(served: float | None, in_flight: float | None, window: float, metrics: Iterable[str],
                      error: str | None = None) -> Evidence:
    """A server's work is done when its pods served no request in the window and none is running or
    waiting (`served`: the counters' increase; `in_flight`: the gauges' highest; None: no series)."""
    names = ", ".join(metrics)
    if error:
        return Evidence("requests", None, f"the request metrics could not be read: {error}")
    if served is None and in_flight is None:
        return Evidence("requests", None, f"no request metric for the server's pods ({names})")
    observed = {"served": served, "inFlight": in_flight}
    if served is not None and served > 0:
        return Evidence("requests", False, f"{served:g} request(s) served in the last {window:g}s", observed)
    if in_flight is not None and in_flight > 0:
        return Evidence("requests", False, f"{in_flight:g} request(s) running or waiting in the last {window:g}s",
                        observed)
    return Evidence("requests", True, f"no request served or waiting in the last {window:g}s", observed)


def progress_evidence(increase: float | None, metric: str, window: float, error: str | None = None) -> Evidence:
    """A training job has stopped making progress when the policy's progress counter did not advance."""
    if not metric:
        return Evidence("progress", None, "no progress metric named in the policy (idle.kinds.training.progressMetric)")
    if error:
        return Evidence("progress", None, f"{metric} could not be read: {error}")
    if increase is None:
        return Evidence("progress", None, f"the job's pods export no {metric}")
    observed = {"metric": metric, "increase": increase}
    if increase > 0:
        return Evidence("progress", False, f"{metric} advanced by {increase:g} in the last {window:g}s", observed)
    return Evidence("progress", True, f"{metric} did not advance in the last {window:g}s", observed)
