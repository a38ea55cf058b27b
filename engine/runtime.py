"""The local engine, assembled: API server, Kueue emulation, event sources, sensors, executor, archive.

    Kubernetes-API-compatible server (engine.apiserver) <- Kueue emulation (engine.kueue)
        |  LIST+WATCH (official client)                       ^ steps patch it (official client)
    resource watcher / webhook intake -> CloudEvent -> SensorRuntime (routing on the
    RENDERED Sensors) -> WorkflowExecutor (RENDERED WorkflowTemplates) -> python -m steps ...
        -> run archive (SQLite, Argo's archive layout)

`LocalEngine` is also the API `gpuaas audit resubmit` uses to re-run an archived workflow on this
machine: `LocalEngine.from_snapshot(path)` restores the cluster state the demo ended in, and
`submit(workflow)` runs it and returns the archived Workflow.
"""

from __future__ import annotations

import logging
import secrets
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

from engine import cluster_state
from engine.archive import RunArchive
from engine.executor import ExecutorSettings, WorkflowExecutor
from engine.rendered import DEFAULT_MANIFESTS, RenderedManifests
from engine.resource_watcher import ResourceWatcher, WatchedResource
from engine.sensors import SensorRuntime, load_router
from engine.step_runner import runner_for
from engine.timeline import Timeline
from engine.webhook import WebhookEndpoint, WebhookIntake

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


@dataclass
class EngineOptions:
    """What to run. Defaults: everything but metrics, steps in-process, archive in a temp dir."""

    manifests: Path = DEFAULT_MANIFESTS
    archive_path: Path | None = None
    step_mode: str = "in-process"  # or "subprocess": `python -m steps ...` exactly as in a pod
    event_sources: bool = True
    kueue: bool = True
    kueue_interval_seconds: float = 0.2
    prometheus_url: str = "http://127.0.0.1:9"  # nothing listens: steps that need metrics fail visibly
    namespace: str = "gpuaas"
    webhook_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    time_scale: float = 1.0  # demo seconds per wall second (retry backoff, suspend)
    kueue_options: dict[str, Any] = field(default_factory=dict)
    crons: bool = True
    """Run the rendered CronWorkflows (the catch-up sweep) and the Workflows they create through the API."""
    cron_min_wall_seconds: float = 1.0
    """A CronWorkflow runs at most this often in wall time (a demo clock at 300x: every 5 demo minutes)."""


class LocalEngine:
    """The whole product on one machine. Use as a context manager, or start()/stop()."""

    def __init__(self, options: EngineOptions | None = None, *, timeline_clock: Clock | None = None) -> None:
        self.options = options or EngineOptions()
        self.manifests = RenderedManifests.load(self.options.manifests)
        self.timeline = Timeline(timeline_clock or (lambda: datetime.now(UTC)))
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.api_server: Any = None
        self.kube_url = ""
        self.gateway: Any = None
        self.kueue: Any = None
        self.archive: RunArchive | None = None
        self.executor: WorkflowExecutor | None = None
        self.sensors: SensorRuntime | None = None
        self.watchers: list[ResourceWatcher] = []
        self.webhook: WebhookIntake | None = None
        self.cron: Any = None
        self.intake: Any = None
        self.started = False

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self, initial_objects: list[dict[str, Any]] | None = None) -> Self:
        from engine.apiserver import ApiServer
        from steps.gateways.kubernetes import KubernetesGateway

        self._tmp = tempfile.TemporaryDirectory(prefix="gpuaas-engine-", ignore_cleanup_errors=True)
        self.api_server = ApiServer()
        self.kube_url = self.api_server.start()
        self.gateway = KubernetesGateway(url=self.kube_url)
        cluster_state.apply(self.gateway, [{"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": self.options.namespace}}])
        if initial_objects:
            cluster_state.apply(self.gateway, initial_objects)
        archive_path = self.options.archive_path or Path(self._tmp.name) / "runs.db"
        self.archive = RunArchive(archive_path)
        env = {"GPUAAS_KUBE_URL": self.kube_url, "GPUAAS_PROMETHEUS_URL": self.options.prometheus_url,
               "GPUAAS_NAMESPACE": self.options.namespace}
        self.executor = WorkflowExecutor(
            self.manifests.workflow_templates(), runner_for(self.options.step_mode), archive=self.archive,
            settings=ExecutorSettings(env=env, time_scale=self.options.time_scale,
                                      workdir=Path(self._tmp.name)))
        self.executor.listeners.append(self.timeline.finished)
        if self.options.kueue:
            from engine.kueue import KueueController

            self.kueue = KueueController.over_url(self.kube_url, **self.options.kueue_options)
            self.kueue.start(interval=self.options.kueue_interval_seconds)
        if self.options.event_sources:
            self._start_event_sources()
        if self.options.crons and self.manifests.cron_workflows():
            from engine.cron import ApiWorkflowIntake, CronRunner

            self.intake = ApiWorkflowIntake(self.kube_url, self.options.namespace, self.executor, self.gateway)
            self.intake.start()
            self.cron = CronRunner(self.manifests.cron_workflows(), self.executor, self.options.time_scale,
                                   self.options.cron_min_wall_seconds)
            self.cron.start()
        self.started = True
        return self

    def _start_event_sources(self) -> None:
        assert self.executor is not None
        self.sensors = SensorRuntime(load_router(self.options.manifests), self.executor, self.timeline)
        endpoints: list[WebhookEndpoint] = []
        for event_source in self.manifests.event_sources():
            for watched in WatchedResource.from_event_source(event_source):
                self.watchers.append(ResourceWatcher(self.kube_url, watched, self.sensors.accept))
            endpoints += WebhookEndpoint.from_event_source(event_source)
        for watcher in self.watchers:
            watcher.start()
        for watcher in self.watchers:
            watcher.ready.wait(10)
        if endpoints:
            self.webhook = WebhookIntake(endpoints, self.options.webhook_token, self.sensors.accept)
            self.webhook.start()

    def stop(self) -> None:
        if self.cron is not None:
            self.cron.stop()
        if self.intake is not None:
            self.intake.stop()
        for watcher in self.watchers:
            watcher.stop(timeout=0.1)
        if self.webhook is not None:
            self.webhook.stop()
        if self.executor is not None:
            self.executor.wait_idle(timeout=30)
            self.executor.shutdown()
        if self.kueue is not None:
            self.kueue.stop()
        if self.api_server is not None:
            self.api_server.stop()
        for watcher in self.watchers:
            watcher.stop(timeout=5)
        if self.archive is not None:
            self.archive.close()
        if self._tmp is not None:
            self._tmp.cleanup()
        self.started = False

    def __enter__(self) -> Self:
        if not self.started:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- using it ---------------------------------------------------------------------------------

    def apply(self, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Create or update objects (status included) over the Kubernetes API; wakes Kueue."""
        applied = cluster_state.apply(self.gateway, objects)
        self.nudge()
        return applied

    def applied_object(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The live version of an object this engine applied (uid, resourceVersion, status)."""
        resource = cluster_state.resource_of(obj)
        metadata = obj["metadata"]
        live = self.gateway.get(resource, metadata["name"],
                                namespace=metadata.get("namespace") if resource.namespaced else None)
        if live is None:
            raise LookupError(f"{obj['kind']} {metadata.get('namespace', '')}/{metadata['name']}: not in the cluster")
        return live

    def nudge(self) -> None:
        """Let Kueue look now rather than at its next tick."""
        if self.kueue is not None and hasattr(self.kueue, "notify"):
            self.kueue.notify()

    def submit(self, workflow: dict[str, Any]) -> dict[str, Any]:
        """Run a Workflow (hand submission or resubmission) to completion; returns it as archived."""
        assert self.executor is not None, "start() the engine first"
        return self.executor.submit(workflow)

    def settle_handled(self, timeout: float = 60.0) -> list[str]:
        """Wait until every admission and finish of every Workload is answered (its marker: the catch-up
        sweep records the job kinds', a period after the transition); returns those still open."""
        from steps.delivery import TRACKED, read_marker, transition_for
        from steps.gateways.resources import WORKLOAD

        deadline = time.monotonic() + timeout
        while True:
            open_ = [f"{(w.get('metadata') or {}).get('namespace')}/{(w.get('metadata') or {}).get('name')} {r}"
                     for w in self.gateway.list(WORKLOAD) for r in TRACKED
                     if (t := transition_for(r, w)) is not None
                     and ((m := read_marker(w, r)) is None or m.transition != t.key)]
            if not open_ or time.monotonic() > deadline or self.cron is None:
                return open_
            time.sleep(0.2)

    def stop_crons(self) -> None:
        """No more CronWorkflow runs; the ones running finish (their runs land in the archive now)."""
        if self.cron is not None:
            self.cron.stop()
        if self.executor is not None:
            self.executor.wait_idle(timeout=30)

    def events_emitted(self) -> int:
        return sum(w.emitted for w in self.watchers)

    def settle(self, timeout: float = 30.0, quiet_seconds: float = 0.6) -> bool:
        """Wait until no event has been emitted for `quiet_seconds` and every workflow finished."""
        assert self.executor is not None
        deadline = time.monotonic() + timeout
        last = (-1, -1)
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            self.executor.wait_idle(timeout=max(0.0, deadline - time.monotonic()))
            seen = self.sensors.events_seen if self.sensors else 0
            current = (self.events_emitted(), seen)
            if current != last:
                last, quiet_since = current, time.monotonic()
            elif time.monotonic() - quiet_since >= quiet_seconds:
                return True
            time.sleep(0.05)
        return False

    def snapshot(self, path: Path) -> int:
        """Write the cluster's current state (see engine.cluster_state); returns the object count."""
        return cluster_state.write(self.gateway, path)

    @classmethod
    def from_snapshot(cls, path: Path | str, *, archive_path: Path | str | None = None,
                      manifests: Path | str | None = None, step_mode: str = "in-process",
                      event_sources: bool = False, kueue: bool = True,
                      prometheus_url: str | None = None, time_scale: float = 30.0) -> LocalEngine:
        """A started engine whose cluster holds the snapshot's objects (for local resubmission).

        Event sources are off by default: a re-run should do what was asked and nothing else.
        There is no Prometheus unless `prometheus_url` names one, so reactions that confirm
        idleness fail transiently and are retried; `time_scale` shortens the templates' retry
        backoff (5 s, 10 s, ... become 1/30 of that) so such a re-run ends in seconds.
        """
        objects = cluster_state.read(Path(path))
        options = EngineOptions(manifests=Path(manifests) if manifests else DEFAULT_MANIFESTS,
                                archive_path=Path(archive_path) if archive_path else None,
                                step_mode=step_mode, event_sources=event_sources, kueue=kueue,
                                time_scale=time_scale)
        if prometheus_url:
            options.prometheus_url = prometheus_url
        engine = cls(options)
        namespaces = [o for o in objects if o.get("kind") == "Namespace"]
        others = [o for o in objects if o.get("kind") != "Namespace"]
        try:
            engine.start(initial_objects=namespaces + others)
        except BaseException:
            engine.stop()
            raise
        return engine
