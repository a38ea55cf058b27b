"""The demo scenario: three tenants competing for 12 GPUs, with the product reacting on its own.

What happens (demo time runs `speed` times faster than wall time; every reaction is a real
Workflow from the rendered templates, started by the rendered Sensors from real events):

1. research opens a notebook, serving deploys an inference server and a vLLM model server, vision
   starts a Ray cluster: admitted; `gpuaas-on-admitted` prepares idle handling for each (a KEDA
   ScaledObject for the model server).
2. research submits a 6-GPU training job: not enough quota in the cohort, it waits (backlog).
3. vision runs a batch evaluation Job on borrowed quota; it finishes: `gpuaas-on-finished`.
4. The Ray cluster's GPUs go idle: Prometheus fires `GPUWorkloadIdle`, Alertmanager POSTs to the
   webhook intake, `gpuaas-on-idle` releases it (Workload deactivated, quota returned).
5. The queued training job is admitted into the freed quota: `gpuaas-on-admitted`.
6. vision's admin hand-submits `gpuaas-resume-workers` for the Ray cluster: it re-queues.
7. The training job finishes: `gpuaas-on-finished`; the Ray cluster is admitted again.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from engine import demo_cluster as cluster
from engine.rendered import DEFAULT_MANIFESTS
from engine.runtime import EngineOptions, LocalEngine
from engine.timeline import STARTED_BY, reaction_records, started_by
from engine.workload_pods import WorkloadPods, holds_quota
from steps.gateways import resources as R

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

# Idle handling with short windows so the story fits in a minute of wall time.
IDLE_WINDOW_SECONDS = 6
IDLE_FOR_SECONDS = 3
IDLE_THRESHOLD_PERCENT = 5
IDLE_WARN_SECONDS = 3
"""The Ray cluster's owner is warned this many wall seconds before its release (idle.warnFor; steps.warning): the
catch-up sweep, a pass every few wall seconds at the demo's speed, delivers the warning once it is due."""

DEMO_POLICY = f"""\
# gpuaas policy for the local demo (same format as manifests/base/policy.yaml), with windows in
# seconds so the story fits in a minute of wall time.
idle:
  mode: enforce
  window: {IDLE_WINDOW_SECONDS}s
  threshold: {IDLE_THRESHOLD_PERCENT / 100}
  minCoverage: 0.5
  minRuntime: 0s
  maxReleasesPerHour: 100
  kinds:
    ray:
      warnFor: {IDLE_WARN_SECONDS}s    # warn the owner (an Event on the RayCluster), release if still idle after
quota:
  cohort: {cluster.COHORT}
  queueingStrategy: BestEffortFIFO
  weight: 1
  guaranteedGpus: 0
"""


class AlertRules(Protocol):
    """The product's idle alert rules and Alertmanager route, built with the demo's short windows.

    WHY a parameter and not an import: the rules belong to the product (`gpuaas.manifests.observability`
    renders them into manifests/), and the engine must not import the admin CLI package that imports
    the engine (ARCHITECTURE: gpuaas -> engine -> routing, steps). `gpuaas demo` hands that module in.
    """

    def rule_groups(self, window: str, for_: str) -> dict[str, Any]: ...

    def alertmanager_config(self, webhook_url: str, credentials_file: str, *, group_wait: str,
                            group_interval: str, repeat_interval: str) -> dict[str, Any]: ...


class DemoStalled(RuntimeError):
    """The scenario waited for something that did not happen; says what, and what was seen."""


class DemoBackend(Protocol):
    """Where the story happens: the local engine (LocalBackend) or the real stack (gpuaas.demo_real).

    Both run the SAME story (`Scenario._story`); a backend only says how each step is done there."""

    def note(self, event: str, outcome: str = "") -> None:
        """A line of the story in the timeline (a tenant did something)."""

    def apply(self, objects: list[dict[str, Any]]) -> None:
        """Create or update the tenants' objects."""

    def apply_owned(self, child: dict[str, Any], owner: dict[str, Any]) -> None:
        """What the owner's controller would create (`child`, controlled by the live `owner`)."""

    def set_activity(self, namespace: str, owner: str, percent: float) -> None:
        """How busy the owner's GPUs are from now on (0 = idle)."""

    def finish(self, obj: dict[str, Any]) -> None:
        """The Job or PyTorchJob `obj` completes (its controller marks it succeeded)."""

    def workload_of(self, namespace: str, owner: str) -> dict[str, Any] | None:
        """Kueue's Workload for the owner's object (or None yet)."""

    def settle(self) -> None:
        """Wait until the reactions started so far have finished."""

    def runs_of(self, template: str) -> list[dict[str, Any]]:
        """The runs (Workflows) of this WorkflowTemplate so far."""

    def submit_resume(self, namespace: str, workload: str) -> dict[str, Any]:
        """An admin hand-submits gpuaas-resume-workers for the Workload; the run, finished."""

    def reaction_times(self, template: str) -> list[str]:
        """When this template's runs started, as demo-clock HH:MM:SS."""


class LocalBackend:
    """The story on the local engine (engine.runtime.LocalEngine) and its emulated pods."""

    def __init__(self, engine: LocalEngine, pods: WorkloadPods, wait_timeout: float) -> None:
        self.engine = engine
        self.pods = pods
        self.wait_timeout = wait_timeout

    def note(self, event: str, outcome: str = "") -> None:
        self.engine.timeline.note(event, outcome)

    def apply(self, objects: list[dict[str, Any]]) -> None:
        self.engine.apply(objects)

    def apply_owned(self, child: dict[str, Any], owner: dict[str, Any]) -> None:
        self.engine.apply([cluster.owned_by(child, self.engine.applied_object(owner))])

    def set_activity(self, namespace: str, owner: str, percent: float) -> None:
        self.pods.set_activity(namespace, owner, percent)

    def finish(self, obj: dict[str, Any]) -> None:
        self.engine.apply([{**obj, "status": cluster.finished_status(obj["kind"])}])

    def workload_of(self, namespace: str, owner: str) -> dict[str, Any] | None:
        for workload in self.engine.gateway.list(R.WORKLOAD, namespace=namespace):
            for reference in workload["metadata"].get("ownerReferences") or []:
                if reference.get("name") == owner:
                    return workload
        return None

    def settle(self) -> None:
        self.engine.settle(timeout=self.wait_timeout, quiet_seconds=0.5)

    def runs_of(self, template: str) -> list[dict[str, Any]]:
        assert self.engine.archive is not None
        return self.engine.archive.find({"workflows.argoproj.io/workflow-template": template})

    def submit_resume(self, namespace: str, workload: str) -> dict[str, Any]:
        return self.engine.submit(resume_submission(namespace, workload))

    def reaction_times(self, template: str) -> list[str]:
        return [row.time for row in self.engine.timeline.rows if row.template == template]


@dataclass
class DemoOptions:
    output_dir: Path = Path("demo-report")
    manifests: Path = DEFAULT_MANIFESTS
    step_mode: str = "in-process"
    speed: float = 300.0  # demo seconds per wall second
    metrics: str = "auto"  # auto | prometheus | in-process
    progress: Progress | None = print
    wait_timeout: float = 60.0
    short: bool = False  # admissions, backlog and a finish only (no idle release): the tests' reduced form
    idle_timeout: float = 90.0  # wall seconds to wait for the idle release (alert window + reaction)
    alert_rules: AlertRules | None = None  # needed for real Prometheus/Alertmanager (metrics auto|prometheus)
    # `gpuaas quota advise` over the run's Prometheus: (prometheus_url, cluster_queues, wall_seconds, end) -> advice;
    # handed in by `gpuaas demo` like the alert rules (the engine does not import gpuaas)
    quota_advisor: Callable[[str, list[dict[str, Any]], float, float], dict[str, Any]] | None = None


class DemoClock:
    """Demo time: 08:00 today when the story begins, then `speed` times faster than wall time.

    It reads 08:00:00 until `begin()`: starting the engine, the exporter and Prometheus takes wall
    seconds (more on a loaded machine) that are no part of the story, and at 300x would move every
    time of the timeline by half an hour or more."""

    def __init__(self, speed: float, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.speed = speed
        self._monotonic = monotonic
        self.wall_start: float | None = None  # the wall clock (monotonic) when the story began
        self.start = datetime.now(UTC).replace(hour=8, minute=0, second=0, microsecond=0)

    def begin(self) -> None:
        """The story begins: the clock runs from here (once; a second call changes nothing)."""
        if self.wall_start is None:
            self.wall_start = self._monotonic()

    def wall_seconds(self) -> float:
        """Wall seconds since the story began (0 before)."""
        return 0.0 if self.wall_start is None else self._monotonic() - self.wall_start

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.wall_seconds() * self.speed)

    def hours(self) -> float:
        return self.wall_seconds() * self.speed / 3600.0


@dataclass
class Sample:
    hours: float
    reserved: dict[str, int]  # tenant -> GPUs reserved by Kueue
    held: dict[str, int]  # tenant -> GPUs held by running pods
    busy: dict[str, float]  # tenant -> GPUs' worth of utilization
    workloads: dict[str, dict[str, Any]]  # "ns/name" -> {gpus, holds, active}


@dataclass
class DemoResult:
    summary: dict[str, Any]
    samples: list[Sample] = field(default_factory=list)
    output_dir: Path = Path("demo-report")


def _workload_gpus(workload: dict[str, Any]) -> int:
    total = 0
    for assignment in ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        usage = (assignment.get("resourceUsage") or {}).get(cluster.GPU)
        if usage is not None:
            total += int(float(str(usage)))
    return total


class Scenario:
    """Runs the story on a LocalEngine and collects what the report needs."""

    def __init__(self, options: DemoOptions) -> None:
        self.options = options
        self.clock = DemoClock(options.speed)
        self.say: Progress = options.progress or (lambda _: None)
        self.samples: list[Sample] = []
        self.metrics_mode = ""
        self.metrics_live = ""  # the metrics' URLs while they run, for the progress only
        self.fallback_metrics = False
        self._stop_sampling = threading.Event()
        self.engine: LocalEngine | None = None
        self.pods: WorkloadPods | None = None
        self.backend: DemoBackend | None = None
        self.marks: list[dict[str, Any]] = []
        self.kueue_metrics: Any = None
        self.quota_advice: dict[str, Any] | None = None
        self.quota_advice_error = "the demo ran without Prometheus (--metrics in-process)"

    # -- helpers ----------------------------------------------------------------------------------

    def _gateway(self) -> Any:
        assert self.engine is not None
        return self.engine.gateway

    def workload_of(self, namespace: str, owner: str) -> dict[str, Any] | None:
        assert self.backend is not None
        return self.backend.workload_of(namespace, owner)

    def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float | None = None,
                 seen: Callable[[], Any] | None = None) -> None:
        """Poll `predicate`; DemoStalled names what was awaited and, with `seen`, the last state seen."""
        deadline = time.monotonic() + (timeout or self.options.wait_timeout)
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.1 if self.options.speed > 200 else 0.5)
        last = ""
        if seen is not None:
            try:
                last = f"; last seen: {seen()}"
            except Exception as error:  # noqa: BLE001 - the message must not fail
                last = f"; last state unreadable ({error})"
        raise DemoStalled(f"waited {timeout or self.options.wait_timeout:.0f}s for: {what}{last}")

    def wait_workload(self, what: str, namespace: str, owner: str, predicate: Callable[[str, str], bool],
                      timeout: float | None = None) -> None:
        """wait_for a state of the owner's Workload; a stall names the Workload's conditions last seen."""
        def seen() -> Any:
            workload = self.workload_of(namespace, owner)
            if workload is None:
                return f"no Workload owned by {namespace}/{owner}"
            conditions = [(c.get("type"), c.get("status"), c.get("reason")) for c in
                          (workload.get("status") or {}).get("conditions") or []]
            return f"Workload {workload['metadata']['name']} active={(workload.get('spec') or {}).get('active', True)}" \
                   f" conditions {conditions}"
        self.wait_for(what, lambda: predicate(namespace, owner), timeout, seen)

    def admitted(self, namespace: str, owner: str) -> bool:
        workload = self.workload_of(namespace, owner)
        return workload is not None and holds_quota(workload)

    def pending(self, namespace: str, owner: str) -> bool:
        workload = self.workload_of(namespace, owner)
        return workload is not None and any(
            c.get("type") == "QuotaReserved" and c.get("status") == "False"
            for c in (workload.get("status") or {}).get("conditions") or [])

    def finished(self, namespace: str, owner: str) -> bool:
        workload = self.workload_of(namespace, owner)
        return workload is not None and any(
            c.get("type") == "Finished" and c.get("status") == "True"
            for c in (workload.get("status") or {}).get("conditions") or [])

    def warned(self, namespace: str, owner: str) -> bool:
        """The Workload carries a pending idle warning (annotation gpuaas.io/idle-warning, state warned)."""
        workload = self.workload_of(namespace, owner)
        text = ((workload or {}).get("metadata", {}).get("annotations") or {}).get("gpuaas.io/idle-warning") or ""
        return '"state":"warned"' in text

    def released(self, namespace: str, owner: str) -> bool:
        workload = self.workload_of(namespace, owner)
        return workload is not None and not holds_quota(workload) and \
            (workload.get("spec") or {}).get("active", True) is False

    def runs_of(self, template: str) -> list[dict[str, Any]]:
        assert self.backend is not None
        return self.backend.runs_of(template)

    def settle(self) -> None:
        assert self.backend is not None
        self.backend.settle()

    def submit(self, tenant: cluster.Tenant, what: str, objects: list[dict[str, Any]]) -> None:
        assert self.backend is not None
        self.backend.note(f"{tenant.name}: {what}")
        self.backend.apply(objects)

    def mark(self, tenant: cluster.Tenant, what: str, *, at: str | None = None) -> None:
        """A moment of the story the report's chart points at (demo clock; `at` = a timeline HH:MM:SS)."""
        hours = self.clock.hours() if at is None else _hours_since_start(at, self.clock.start)
        moment = self.clock.start + timedelta(hours=hours)
        self.marks.append({"time": moment.strftime("%H:%M:%S"), "hours": round(hours, 4), "tenant": tenant.name,
                           "what": what})

    def pause(self, demo_minutes: float) -> None:
        time.sleep(demo_minutes * 60.0 / self.options.speed)

    # -- sampling ---------------------------------------------------------------------------------

    def _sample_loop(self) -> None:
        while not self._stop_sampling.wait(0.25):
            try:
                self.samples.append(self._sample())
            except Exception as error:  # noqa: BLE001 - a missed sample must not stop the demo
                log.debug("sample failed: %s", error)

    def _sample(self) -> Sample:
        assert self.engine is not None and self.pods is not None
        reserved = {t.name: 0 for t in cluster.TENANTS}
        workloads: dict[str, dict[str, Any]] = {}
        for workload in self._gateway().list(R.WORKLOAD):
            key = f"{workload['metadata']['namespace']}/{workload['metadata']['name']}"
            holds = holds_quota(workload)
            gpus = _workload_gpus(workload) if holds else 0
            workloads[key] = {"gpus": gpus, "holds": holds,
                              "active": (workload.get("spec") or {}).get("active", True) is not False}
            tenant = cluster.TENANT_BY_NAMESPACE.get(workload["metadata"]["namespace"])
            if tenant is not None:
                reserved[tenant.name] += gpus
        usage = self.pods.gpus_by_namespace()
        held = {t.name: usage.get(t.namespace, (0, 0.0))[0] for t in cluster.TENANTS}
        busy = {t.name: round(usage.get(t.namespace, (0, 0.0))[1], 3) for t in cluster.TENANTS}
        return Sample(self.clock.hours(), reserved, held, busy, workloads)

    # -- metrics ----------------------------------------------------------------------------------

    def _start_metrics(self, exporter: Any, token_file: Path) -> Any:
        """Real Prometheus + Alertmanager when installed; else the labelled in-process idle rule."""
        from engine import monitoring as monitoring_module

        assert self.engine is not None and self.engine.webhook is not None
        webhook_url = self.engine.webhook.url_for()
        found = monitoring_module.availability()
        rules = self.options.alert_rules
        if rules is None and found.ok:
            found = dataclasses.replace(found, ok=False, reason="no alert rules were given (DemoOptions.alert_rules; "
                                                                "`gpuaas demo` passes the product's)")
        use_prometheus = self.options.metrics == "prometheus" or (self.options.metrics == "auto" and found.ok)
        if use_prometheus:
            if not found.ok or rules is None:
                raise monitoring_module.MonitoringUnavailable(found.reason)
            observability = rules
            from engine.kueue.metrics import KueueMetrics

            kinds = {"ClusterQueue": R.CLUSTER_QUEUE, "LocalQueue": R.LOCAL_QUEUE, "Workload": R.WORKLOAD}
            self.kueue_metrics = KueueMetrics(lambda kind: self._gateway().list(kinds[kind]))
            monitor = monitoring_module.Monitoring(
                # as a ServiceMonitor scrapes dcgm-exporter: the target's own pod/namespace labels make
                # Prometheus rename the GPU's to exported_pod/exported_namespace (both spellings matter)
                scrape_targets=[{"targets": [exporter.target],
                                 "labels": {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-demo"}},
                                {"targets": [self.kueue_metrics.start()], "labels": {}}],  # Kueue's own metrics
                rule_groups=observability.rule_groups(window=f"{IDLE_WINDOW_SECONDS}s", for_=f"{IDLE_FOR_SECONDS}s"),
                alertmanager_config=observability.alertmanager_config(
                    webhook_url, str(token_file), group_wait="1s", group_interval="1s", repeat_interval="1h"),
                scrape_interval_s=0.5, evaluation_interval_s=0.5)
            monitor.start()
            monitor.wait_for_targets_up(timeout_s=20)
            self.engine.executor.settings.env["GPUAAS_PROMETHEUS_URL"] = monitor.prometheus_url  # type: ignore[union-attr]
            # no URL in the summary: these processes stop with the demo (the progress names them while they run)
            self.metrics_live = f"Prometheus {monitor.prometheus_url} + Alertmanager {monitor.alertmanager_url}"
            self.metrics_mode = ("Prometheus + Alertmanager (Debian's, on loopback while the demo runs) with the "
                                 "product's alert rules (short windows); DCGM series carry exported_pod/"
                                 "exported_namespace as behind a ServiceMonitor")
            return monitor
        from engine.idle_rule import InProcessIdleRule

        reason = found.reason if not found.ok else "--metrics in-process was asked for"
        rule = InProcessIdleRule(exporter, webhook_url, self.engine.options.webhook_token,
                                 threshold_percent=IDLE_THRESHOLD_PERCENT,
                                 for_seconds=IDLE_WINDOW_SECONDS + IDLE_FOR_SECONDS)
        rule.start()
        self.fallback_metrics = True
        self.metrics_mode = (f"IN-PROCESS FALLBACK idle rule (no Prometheus/Alertmanager: {reason}); "
                             "the on-idle step's Prometheus confirmation cannot succeed in this mode")
        return rule

    # -- the story --------------------------------------------------------------------------------

    def run(self) -> DemoResult:
        from engine.exporter import DcgmExporter

        options = self.options
        output = options.output_dir
        output.mkdir(parents=True, exist_ok=True)
        archive_path = output / "runs.db"
        archive_path.unlink(missing_ok=True)
        (output / "runs.json").unlink(missing_ok=True)  # a `--stack real` demo's runs: not this report's
        wall_started = time.monotonic()
        exporter = DcgmExporter()
        for node in cluster.NODES:
            for index in range(cluster.GPUS_PER_NODE):
                exporter.add_gpu(node, index)
        exporter.start()
        engine_options = EngineOptions(manifests=options.manifests, archive_path=archive_path,
                                       step_mode=options.step_mode, time_scale=options.speed,
                                       # Kueue and the steps share wall time (timestamps on objects);
                                       # demo time is only the timeline's and the charts' axis.
                                       kueue_options={"excluded_resource_prefixes": ("cpu", "memory")})
        self.engine = LocalEngine(engine_options, timeline_clock=self.clock.now)
        self.engine.timeline.on_row = self._print_row
        monitor: Any = None
        sampler = threading.Thread(target=self._sample_loop, name="demo-sampler", daemon=True)
        with tempfile.TemporaryDirectory(prefix="gpuaas-demo-") as tmp:
            token_file = Path(tmp) / "webhook-token"
            token_file.write_text(engine_options.webhook_token)
            try:
                self.say(f"starting the local engine (steps {options.step_mode}, demo time x{options.speed:g})")
                self.engine.start(initial_objects=cluster.platform_objects(DEMO_POLICY))
                self.pods = WorkloadPods(self.engine.gateway, exporter)
                self.pods.start()
                self.backend = LocalBackend(self.engine, self.pods, options.wait_timeout)
                monitor = self._start_metrics(exporter, token_file)
                self.say(f"metrics: {self.metrics_live} while the demo runs, with the product's alert rules"
                         if self.metrics_live else f"metrics: {self.metrics_mode}")
                self.engine.settle(timeout=options.wait_timeout, quiet_seconds=0.5)  # start-up reactions done
                self.clock.begin()
                sampler.start()
                self._story()
                self.settle()
                # the job kinds' transitions are answered by the catch-up sweep, a pass after them
                self.engine.settle_handled(timeout=options.wait_timeout)
                self.settle()
                self.engine.snapshot(output / "cluster-snapshot.json")
                # the story's wall time: the window the quota chart maps onto the demo clock
                self._advise_quota(monitor, self.clock.wall_seconds())
            finally:
                self._stop_sampling.set()
                if monitor is not None:
                    monitor.stop()
                if self.kueue_metrics is not None:
                    self.kueue_metrics.stop()
                if self.pods is not None:
                    self.pods.stop()
                self.engine.stop_crons()  # the archive is read once: no sweep pass may land after it
                archive = self.engine.archive
                runs = list(archive) if archive is not None and self.engine.started else []
                rows = [row.to_dict() for row in self.engine.timeline.rows]
                events_seen = self.engine.sensors.events_seen if self.engine.sensors else 0
                self.engine.stop()
                exporter.stop()
        summary = build_summary(runs, self.samples, rows, speed=options.speed,
                                wall_seconds=time.monotonic() - wall_started, metrics_mode=self.metrics_mode,
                                step_mode=options.step_mode, events_routed=events_seen, marks=self.marks,
                                started=self.clock.start)
        return self._result(summary, output)

    def _result(self, summary: dict[str, Any], output: Path) -> DemoResult:
        """The run's result, with the quota advice or why there is none (either stack)."""
        if self.quota_advice is not None:
            summary["quota_advice"] = self.quota_advice
        else:
            summary["quota_advice_unavailable"] = self.quota_advice_error
        return DemoResult(summary=summary, samples=self.samples, output_dir=output)

    def _advise_quota(self, monitor: Any, wall_seconds: float) -> None:
        """`gpuaas quota advise` over the whole run, on the demo's own Prometheus (report section)."""
        if self.kueue_metrics is None or not hasattr(monitor, "prometheus_url"):
            return
        advisor = self.options.quota_advisor
        if advisor is None:
            self.quota_advice_error = "no quota advisor was given (DemoOptions.quota_advisor; `gpuaas demo` passes one)"
            return
        self.say("quota advice: gpuaas quota advise over the run's Prometheus history")
        try:
            self.quota_advice = advisor(monitor.prometheus_url, self._gateway().list(R.CLUSTER_QUEUE),
                                        wall_seconds, time.time())
        except Exception as error:  # noqa: BLE001 - the report says why instead of losing the whole run
            self.quota_advice_error = f"{type(error).__name__}: {error}"
            self.say(f"quota advice failed: {self.quota_advice_error}")

    def _print_row(self, row: Any) -> None:
        if row.workflow:
            self.say(f"  {row.time}  {row.event:<46} -> {row.template} [{row.outcome}]")
        else:
            self.say(f"  {row.time}  {row.event}")

    def _story(self) -> None:
        """The story, the same on every backend (the module docstring)."""
        research, vision, serving = cluster.TENANTS
        backend = self.backend
        assert backend is not None
        backend.set_activity(research.namespace, "nb-alice", 35)
        backend.set_activity(serving.namespace, "llm-chat", 70)
        backend.set_activity(serving.namespace, "embed", 55)
        backend.set_activity(vision.namespace, "ray-vision", 85)
        backend.set_activity(research.namespace, "train-llm", 95)
        backend.set_activity(vision.namespace, "eval-batch", 90)

        notebook, stateful_set = cluster.notebook(research, "nb-alice", 2)
        self.submit(research, "opens notebook nb-alice (2 GPUs)", [notebook])
        backend.apply_owned(stateful_set, notebook)
        self.wait_workload("notebook nb-alice admitted", research.namespace, "nb-alice", self.admitted)
        self.pause(20)
        [isvc] = cluster.inference_service(serving, "llm-chat", 2)
        self.submit(serving, "deploys inference server llm-chat (2 GPUs)", [isvc])
        backend.apply_owned(cluster.predictor_deployment(isvc, 2), isvc)
        self.wait_workload("InferenceService llm-chat admitted", serving.namespace, "llm-chat", self.admitted)
        self.submit(serving, "runs model server embed (vLLM StatefulSet, 1 GPU)",
                    cluster.model_server(serving, "embed", 1))
        self.wait_workload("StatefulSet embed admitted", serving.namespace, "embed", self.admitted)
        self.pause(20)
        self.submit(vision, "starts RayCluster ray-vision (2 workers x 2 GPUs)",
                    cluster.ray_cluster(vision, "ray-vision", 2, 2))
        self.wait_workload("RayCluster ray-vision admitted", vision.namespace, "ray-vision", self.admitted)
        self.settle()

        self.pause(20)
        self.submit(research, "submits PyTorchJob train-llm (3 pods x 2 GPUs)",
                    cluster.pytorch_job(research, "train-llm", 2, 2))
        self.wait_workload("train-llm queued", research.namespace, "train-llm", self.pending)
        backend.note("research: train-llm queued, no quota left in the cohort", "backlog")
        self.mark(research, "train-llm queued")
        self.submit(vision, "runs batch Job eval-batch (2 GPUs, borrowed)", cluster.batch_job(vision, "eval-batch", 2))
        self.wait_workload("eval-batch admitted", vision.namespace, "eval-batch", self.admitted)
        self.settle()
        self.pause(30)
        backend.note("vision: eval-batch completes")
        backend.finish(cluster.batch_job(vision, "eval-batch", 2)[0])
        self.wait_workload("eval-batch finished", vision.namespace, "eval-batch", self.finished)
        self.settle()
        if self.options.short:
            return

        backend.note("vision: ray-vision's GPUs go idle (utilization 0%)")
        backend.set_activity(vision.namespace, "ray-vision", 0)
        self.mark(vision, "GPUs idle")
        idle_runs_before = len(self.runs_of("gpuaas-on-idle"))
        self.wait_workload("ray-vision warned by gpuaas-on-idle", vision.namespace, "ray-vision",
                           lambda namespace, owner: self.warned(namespace, owner) or self.released(namespace, owner) or (
                               self.fallback_metrics and len(self.runs_of("gpuaas-on-idle")) > idle_runs_before),
                           timeout=max(self.options.wait_timeout, self.options.idle_timeout))
        if self.warned(vision.namespace, "ray-vision"):
            backend.note(f"vision: the owner of ray-vision is warned (Event GPUIdleWarning on the RayCluster); "
                         f"released after {IDLE_WARN_SECONDS}s unless used", "warning")
            self.mark(vision, "warned (on-idle)")
        self.wait_workload("ray-vision released by gpuaas-on-idle", vision.namespace, "ray-vision",
                           lambda namespace, owner: self.released(namespace, owner) or (
                               self.fallback_metrics and len(self.runs_of("gpuaas-on-idle")) > idle_runs_before),
                           timeout=max(self.options.wait_timeout, self.options.idle_timeout))
        if not self.released(vision.namespace, "ray-vision"):
            self.settle()
            backend.note("ray-vision NOT released: without Prometheus the on-idle step cannot confirm "
                         "idleness (in-process fallback); the story stops here", "stopped")
            return
        alerts = backend.reaction_times("gpuaas-on-idle")
        if alerts:
            self.mark(vision, "idle alert", at=alerts[-1])
        self.mark(vision, "released (on-idle)")
        self.wait_workload("train-llm admitted into the freed quota", research.namespace, "train-llm", self.admitted)
        self.mark(research, "train-llm admitted")
        self.settle()

        self.pause(60)
        workload = self.workload_of(vision.namespace, "ray-vision")
        assert workload is not None
        backend.note("vision admin: hand-submits gpuaas-resume-workers for ray-vision")
        self.mark(vision, "resumed (by hand)")
        resumed = backend.submit_resume(vision.namespace, workload["metadata"]["name"])
        if resumed["status"]["phase"] != "Succeeded":
            records = reaction_records(resumed)
            errors = [e for r in records for e in (r.get("data") or {}).get("errors") or []]
            raise DemoStalled(f"the hand-submitted {resumed['metadata']['name']} ended {resumed['status']['phase']}: "
                              f"{'; '.join(errors) or resumed['status'].get('message', '')}")
        self.wait_workload("ray-vision queued again", vision.namespace, "ray-vision",
                           lambda namespace, owner: self.pending(namespace, owner) or self.admitted(namespace, owner))
        if self.pending(vision.namespace, "ray-vision"):
            self.mark(vision, "ray-vision queued")
        self.settle()
        backend.set_activity(vision.namespace, "ray-vision", 85)

        self.pause(60)
        backend.note("research: train-llm completes")
        backend.finish(cluster.pytorch_job(research, "train-llm", 2, 2)[0])
        self.wait_workload("train-llm finished", research.namespace, "train-llm", self.finished)
        self.wait_workload("ray-vision admitted again", vision.namespace, "ray-vision", self.admitted)
        self.mark(vision, "ray-vision admitted again")
        self.settle()


def resume_submission(namespace: str, workload: str) -> dict[str, Any]:
    """A Workflow as the Argo UI submits it from the template (label submit-from-ui)."""
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"generateName": "gpuaas-resume-workers-", "labels": {"submit-from-ui": "true"}},
            "spec": {"workflowTemplateRef": {"name": "gpuaas-resume-workers"},
                     "arguments": {"parameters": [{"name": "namespace", "value": namespace},
                                                  {"name": "workload", "value": workload},
                                                  {"name": "event", "value": ""},
                                                  {"name": "dry-run", "value": "false"}]}}}


def _hours_since_start(clock_time: str, start: datetime) -> float:
    """A timeline HH:MM:SS on the demo clock, as hours since the clock's start (08:00)."""
    hours, minutes, seconds = (int(part) for part in clock_time.split(":"))
    moment = start.replace(hour=hours, minute=minutes, second=seconds)
    return (moment - start).total_seconds() / 3600.0


def gpu_hours_reclaimed(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Per workload, the records' `gpuHoursReclaimed`: GPUs x the hours between release and resume,
    measured by the steps on the wall clock, the same figure `gpuaas audit` and the Argo metric show."""
    reclaimed: dict[str, float] = {}
    for run in runs:
        for record in reaction_records(run):
            data = record.get("data") or {}
            hours = float((data.get("metrics") or {}).get("gpuHoursReclaimed") or 0.0)
            if hours and data.get("workload"):
                key = f"{data['workload']['namespace']}/{data['workload']['name']}"
                reclaimed[key] = reclaimed.get(key, 0.0) + hours
    return reclaimed


def workflow_template(run: dict[str, Any]) -> str:
    """The WorkflowTemplate a run came from: Argo's label when it set one (`argo submit --from`), else the
    run's `spec.workflowTemplateRef` (what a Sensor's `argo submit` of a Workflow referencing it carries)."""
    labels = (run.get("metadata") or {}).get("labels") or {}
    return labels.get("workflows.argoproj.io/workflow-template") or \
        ((run.get("spec") or {}).get("workflowTemplateRef") or {}).get("name") or "?"


SWEEP_TEMPLATE = "gpuaas-sweep"
"""The catch-up sweep's passes (docs/catch-up.md) are counted apart: `runs` and `reactions` are the reactions."""


def build_summary(runs: list[dict[str, Any]], samples: list[Sample], timeline: list[dict[str, str]], *,
                  speed: float, wall_seconds: float, metrics_mode: str, step_mode: str,
                  events_routed: int, marks: list[dict[str, Any]] | None = None,
                  started: datetime | None = None) -> dict[str, Any]:
    """summary.json: runs, GPU-hours reclaimed, reactions by WorkflowTemplate, tenants, timeline.

    One time base: the demo clock (08:00 at the start, `speed` demo seconds per wall second) for
    the timeline, the marks, the samples and `gpu_hours_reclaimed`; the steps measure wall time, so
    the records' figure is also given as `gpu_hours_reclaimed_wall` (= demo figure / speed)."""
    reactions: dict[str, dict[str, Any]] = {}
    released: set[str] = set()
    gpus_released = 0
    sweep = {"passes": 0, "recorded": 0, "delivered": 0, "idle_warnings": 0}
    passes = [run for run in runs if workflow_template(run) == SWEEP_TEMPLATE]
    for run in passes:
        sweep["passes"] += 1
        for record in reaction_records(run):
            metrics = (record.get("data") or {}).get("metrics") or {}
            sweep["recorded"] += int(metrics.get("recorded") or 0)
            sweep["delivered"] += int(metrics.get("delivered") or 0)
            sweep["idle_warnings"] += int(metrics.get("idleWarningsDelivered") or 0)
    runs = [run for run in runs if workflow_template(run) != SWEEP_TEMPLATE]
    for run in runs:
        template = workflow_template(run)
        entry = reactions.setdefault(template, {"runs": 0, "phases": {}, "outcomes": {}, "steps": {}})
        entry["runs"] += 1
        phase = run["status"].get("phase", "?")
        entry["phases"][phase] = entry["phases"].get(phase, 0) + 1
        for record in reaction_records(run):
            data = record.get("data") or {}
            outcome = data.get("outcome", "?")
            entry["outcomes"][outcome] = entry["outcomes"].get(outcome, 0) + 1
            by_step = entry["steps"].setdefault(data.get("reaction", "?"), {})
            by_step[outcome] = by_step.get(outcome, 0) + 1
            metrics = data.get("metrics") or {}
            if outcome == "applied" and data.get("reaction") in ("on-idle", "release-workers") and \
                    data.get("workload"):
                released.add(f"{data['workload']['namespace']}/{data['workload']['name']}")
                gpus_released += int(metrics.get("gpusReleased") or 0)
    reclaimed_wall = gpu_hours_reclaimed(runs)
    final = samples[-1] if samples else None
    starts = {how: 0 for how in STARTED_BY}
    for run in runs:
        starts[started_by(run)] += 1
    return {
        "runs": len(runs),
        "sweep": sweep,
        "started_by": starts,
        "gpu_hours_reclaimed": round(sum(reclaimed_wall.values()) * speed, 3),
        "gpu_hours_reclaimed_wall": round(sum(reclaimed_wall.values()), 6),
        "gpu_hours_reclaimed_by_workload": {key: round(hours * speed, 3) for key, hours in reclaimed_wall.items()},
        "gpus_released": gpus_released,
        "released_workloads": sorted(released),
        "reactions": dict(sorted(reactions.items())),
        "tenants": {t.name: {"namespace": t.namespace, "nominal_gpus": cluster.NOMINAL_GPUS,
                             "reserved_gpus_at_end": final.reserved.get(t.name, 0) if final else 0}
                    for t in cluster.TENANTS},
        "events_routed": events_routed,
        "demo_time": {"speed": speed, "wall_seconds": round(wall_seconds, 1),
                      "demo_hours": round(samples[-1].hours, 2) if samples else 0.0,
                      "clock_start": (started or datetime.now(UTC)).strftime("%H:%M")},
        "marks": list(marks or []),
        "metrics": metrics_mode,
        "step_mode": step_mode,
        "timeline": timeline,
        "files": {"archive": "runs.db", "snapshot": "cluster-snapshot.json", "report": "index.html"},
    }


def run_demo(options: DemoOptions) -> DemoResult:
    """Run the scenario, then write summary.json, charts and index.html into options.output_dir."""
    from engine import report

    result = Scenario(options).run()
    report.write(result.output_dir, result.summary, result.samples)
    (result.output_dir / "summary.json").write_text(json.dumps(result.summary, indent=2) + "\n")
    return result
