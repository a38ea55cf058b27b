"""Where the on-idle step reads each kind's own evidence (steps.gateways.workload_apis, read_evidence),
hand-computed from the upstream sources' naming rules:

- Kubeflow's notebook culler asks `http://{name}.{namespace}.svc.{domain}/notebook/{namespace}/{name}/api/kernels`
  (kubeflow/notebooks, components/notebook-controller/controllers/culling_controller.go);
- KubeRay names a RayCluster's head Service `{name}-head-svc` unless `spec.headGroupSpec.headService`
  names it (ray-operator/controllers/ray/utils/util.go GenerateHeadServiceName); the dashboard listens on
  8265 (utils/constant.go DefaultDashboardPort); a RayJob's status carries `dashboardURL` and
  `rayClusterName` (apis/ray/v1/rayjob_types.go).

And which source decides: a RayJob's own status unless `signalUrl` points at a dashboard; an owner chain
without the kind's object is missing evidence, never a failure. The HTTP reads go to a real socket
(a stand-in answering like Jupyter and Ray's job API) or to a closed port."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from steps.gateways.workload_apis import WorkloadApis, jupyter_url, ray_dashboard_url
from steps.model.owners import OwnerChain
from steps.policy import IdleSettings
from steps.reactions.on_idle import read_evidence

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def owner(kind: str, name: str = "w", spec: dict[str, Any] | None = None,
          status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name, "namespace": "team-a"}, "spec": spec or {},
            "status": status or {}}


def test_the_notebook_url_is_the_service_the_kubeflow_culler_asks() -> None:
    assert jupyter_url(owner("Notebook", "nb")) == "http://nb.team-a.svc.cluster.local/notebook/team-a/nb"
    assert jupyter_url(owner("Notebook", "nb"), "https://{name}-{namespace}.apps.example/") == \
        "https://nb-team-a.apps.example"


@pytest.mark.parametrize(("obj", "url"), [
    (owner("RayCluster", "train"), "http://train-head-svc.team-a.svc.cluster.local:8265"),
    (owner("RayCluster", "train", {"headGroupSpec": {"headService": {"metadata": {"name": "my-head"}}}}),
     "http://my-head.team-a.svc.cluster.local:8265"),
    (owner("RayJob", "job", status={"rayClusterName": "job-raycluster-x2k9f"}),
     "http://job-raycluster-x2k9f-head-svc.team-a.svc.cluster.local:8265"),
    (owner("RayJob", "job", status={"dashboardURL": "job-raycluster-x2k9f-head-svc.team-a.svc.cluster.local:8265"}),
     "http://job-raycluster-x2k9f-head-svc.team-a.svc.cluster.local:8265"),
])
def test_the_ray_dashboard_url_is_the_head_service_kuberay_makes(obj: dict[str, Any], url: str) -> None:
    assert ray_dashboard_url(obj) == url


class Context:
    def __init__(self) -> None:
        self.metrics = None
        self.workload_apis = WorkloadApis(timeout_seconds=2)


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A real HTTP server on a free loopback port for the test's handler; its URL while the block runs."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def ray_head(jobs: list[dict[str, Any]]) -> Iterator[str]:
    """A stand-in for a Ray head's job API on a real socket (no Ray runs here)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(jobs if self.path == "/api/jobs/" else {}).encode()
            self.send_response(200 if self.path == "/api/jobs/" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        yield url


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def evidence(chain: list[dict[str, Any]], settings: IdleSettings, kind: str = "ray") -> Any:
    return read_evidence(Context(), kind, settings, OwnerChain(objects=tuple(chain)), "team-a", ("w-0",), NOW)


def test_a_rayjob_is_judged_by_its_own_status_not_by_a_dashboard() -> None:
    running = owner("RayJob", status={"jobStatus": "RUNNING", "dashboardURL": f"127.0.0.1:{closed_port()}"})
    found = evidence([running], IdleSettings(window_seconds=1800, kind="ray"))
    assert found.done is False and found.reason == "RayJob status RUNNING: its job is not over"


def test_a_signal_url_makes_the_rayjob_ask_the_dashboard() -> None:
    finished = owner("RayJob", status={"jobStatus": "SUCCEEDED", "endTime": "2026-03-01T06:00:00Z"})
    with ray_head([{"submission_id": "raysubmit_2", "status": "RUNNING"}]) as url:
        found = evidence([finished], IdleSettings(window_seconds=1800, kind="ray", signal_url=url))
    assert found.done is False and found.reason == "1 Ray job(s) pending or running (raysubmit_2)"


def test_an_unreachable_dashboard_is_missing_evidence() -> None:
    found = evidence([owner("RayCluster")], IdleSettings(kind="ray", signal_url=f"http://127.0.0.1:{closed_port()}"))
    assert found.done is None and found.reason.startswith("Ray's job API could not be read: GET http://127.0.0.1:")


@pytest.mark.parametrize(("kind", "chain", "says"), [
    ("notebook", [owner("StatefulSet")], "no Notebook owns the workload: no Jupyter server to ask"),
    ("ray", [owner("Job")], "no RayCluster owns the workload: no Ray dashboard to ask"),
])
def test_an_owner_chain_without_the_kinds_object_is_missing_evidence(kind: str, chain: list[dict[str, Any]],
                                                                     says: str) -> None:
    found = evidence(chain, IdleSettings(kind=kind), kind)
    assert found.done is None and found.reason == says


# -- the kinds' metrics in Prometheus: a failing Prometheus is not missing evidence ------------------------------
@contextmanager
def prometheus_rejecting() -> Iterator[str]:
    """A stand-in for Prometheus' HTTP API that rejects every query (400, its error shape)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}).encode()
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        yield url


def metrics_evidence(url: str, kind: str) -> Any:
    from steps.gateways.metrics import MetricsGateway

    context = Context()
    context.metrics = MetricsGateway(url, timeout_seconds=2, retries=0)
    settings = IdleSettings(window_seconds=1800, kind=kind, progress_metric="train_steps_total")
    return read_evidence(context, kind, settings, OwnerChain(), "team-a", ("w-0",), NOW)


@pytest.mark.parametrize("kind", ["serving", "training"])
def test_prometheus_unreachable_for_the_kinds_metrics_is_retried_like_gpu_activity(kind: str) -> None:
    """The step has just read GPU activity from the same Prometheus: a failure now is transient, and
    reading it as missing evidence would let `withoutSignal: gpu` release on GPU activity alone."""
    from steps.gateways.metrics import MetricsUnavailable

    with pytest.raises(MetricsUnavailable):
        metrics_evidence(f"http://127.0.0.1:{closed_port()}", kind)


@pytest.mark.parametrize(("kind", "says"), [("serving", "the request metrics could not be read: Prometheus at"),
                                            ("training", "train_steps_total could not be read: Prometheus at")])
def test_a_query_prometheus_rejects_is_missing_evidence(kind: str, says: str) -> None:
    with prometheus_rejecting() as url:
        found = metrics_evidence(url, kind)
    assert found.done is None and found.reason.startswith(says) and "rejected the query" in found.reason
