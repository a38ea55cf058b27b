"""Real Prometheus and Alertmanager processes for the local engine and the tests.

The product's idle detection is a Prometheus alerting rule routed by Alertmanager to a webhook.
Emulating either would test the emulation, so the engine runs the real binaries (Debian packages
`prometheus` and `prometheus-alertmanager`) on free loopback ports with throw-away data dirs,
feeding them the same rules and routing the product renders, with short windows.

When the binaries are absent, `availability()` says so (and how to install them) and `start()`
raises `MonitoringUnavailable` with that reason; callers decide what to do instead.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import yaml

INSTALL_HINT = ("install them with `apt-get install -y --no-install-recommends prometheus "
                "prometheus-alertmanager` (or `make setup`)")


class MonitoringUnavailable(RuntimeError):
    """The Prometheus/Alertmanager binaries are missing, or a process did not come up."""


@dataclass(frozen=True)
class Availability:
    ok: bool
    reason: str
    prometheus: str | None
    alertmanager: str | None
    promtool: str | None


def availability() -> Availability:
    """Whether the binaries exist, and if not, which are missing and how to get them."""
    prometheus = shutil.which("prometheus")
    alertmanager = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    promtool = shutil.which("promtool")
    missing = [name for name, path in (("prometheus", prometheus), ("prometheus-alertmanager", alertmanager),
                                       ("promtool", promtool)) if not path]
    if missing:
        return Availability(False, f"not on PATH: {', '.join(missing)}; {INSTALL_HINT}",
                            prometheus, alertmanager, promtool)
    return Availability(True, "prometheus, prometheus-alertmanager and promtool found", prometheus, alertmanager,
                        promtool)


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel just handed out and released (the window for a race is tiny)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _duration(seconds: float) -> str:
    """Prometheus duration syntax (ms resolution)."""
    ms = max(1, round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def prometheus_argv(binary: str, config: Path, tsdb: Path, port: int) -> list[str]:
    """Prometheus on 127.0.0.1:`port` (the engine's, the tests' and `gpuaas cluster up`'s)."""
    return [binary, f"--config.file={config}", f"--storage.tsdb.path={tsdb}",
            f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle", "--log.level=warn"]


def alertmanager_argv(binary: str, config: Path, storage: Path, port: int) -> list[str]:
    """Alertmanager on 127.0.0.1:`port`, alone: an empty cluster address disables gossip (else it
    binds :9094 on every interface)."""
    return [binary, f"--config.file={config}", f"--storage.path={storage}",
            f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=warn"]


def alerting(alertmanager_port: int) -> dict[str, Any]:
    """The `alerting` section of a Prometheus config: alerts to the Alertmanager on 127.0.0.1:`alertmanager_port`."""
    return {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]}


class _Process:
    """One child process with a log file and a readiness endpoint."""

    name = "process"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / f"{self.name}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout_s: float = 15.0) -> None:
        with open(self.log_path, "wb") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=self.workdir)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise MonitoringUnavailable(
                    f"{self.name} exited with code {self.proc.returncode} during start-up; "
                    f"last log lines:\n{self.log_tail()}")
            try:
                status, _ = _http_get(f"{self.url}/-/ready", timeout=0.5)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise MonitoringUnavailable(f"{self.name} was not ready within {timeout_s:g}s; log:\n{self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None


def _stop_unrecorded_children(workdir: Path) -> None:
    """Stop this process's children that run in `workdir` but were never recorded: a Ctrl-C or SIGTERM (raised
    as an exception, gpuaas.stops) that lands inside subprocess.Popen after the fork leaves the child running
    and unknown to `_Process.stop`. Every child started here has its workdir as its current directory."""
    me = str(os.getpid())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[1]
            if parent != me or Path(os.readlink(entry / "cwd")) != workdir.resolve():
                continue
            pid = int(entry.name)
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 5
            while os.waitpid(pid, os.WNOHANG) == (0, 0):
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    break
                time.sleep(0.05)
        except (OSError, IndexError, ChildProcessError):
            continue


class PrometheusProcess(_Process):
    name = "prometheus"

    def __init__(self, workdir: Path, binary: str) -> None:
        super().__init__(workdir)
        self.binary = binary

    def command(self) -> list[str]:
        return prometheus_argv(self.binary, self.workdir / "prometheus.yml", self.workdir / "tsdb", self.port)


class AlertmanagerProcess(_Process):
    name = "alertmanager"

    def __init__(self, workdir: Path, binary: str) -> None:
        super().__init__(workdir)
        self.binary = binary

    def command(self) -> list[str]:
        return alertmanager_argv(self.binary, self.workdir / "alertmanager.yml", self.workdir / "am-data", self.port)


class Monitoring:
    """Prometheus (scraping `scrape_targets`, evaluating `rule_groups`) and, if an Alertmanager
    config is given, an Alertmanager that Prometheus sends its alerts to.

    `rule_groups` is a plain Prometheus rule file (`{"groups": [...]}`), `alertmanager_config` a
    plain Alertmanager config; both as `gpuaas.manifests.observability` builds them.
    """

    def __init__(self, *, scrape_targets: Iterable[str | dict[str, Any]] = (), rule_groups: dict[str, Any] | None = None,
                 alertmanager_config: dict[str, Any] | None = None, scrape_interval_s: float = 1.0,
                 evaluation_interval_s: float = 1.0, job: str = "dcgm-exporter",
                 target_labels: dict[str, str] | None = None, honor_labels: bool = False,
                 workdir: str | Path | None = None) -> None:
        # "host:port", or a static_configs entry {"targets": [...], "labels": {...}}: target labels
        # such as pod/namespace make Prometheus rename the exporter's own to exported_pod/... .
        self.static_configs: list[dict[str, Any]] = [
            t if isinstance(t, dict) else {"targets": [t], "labels": {}} for t in scrape_targets]
        for entry in self.static_configs:
            entry.setdefault("labels", {})
            entry["labels"] = {**(target_labels or {}), **entry["labels"]}
        self.scrape_targets = [t for entry in self.static_configs for t in entry["targets"]]
        self.rule_groups = rule_groups
        self.alertmanager_config = alertmanager_config
        self.scrape_interval_s = scrape_interval_s
        self.evaluation_interval_s = evaluation_interval_s
        self.job = job
        self.honor_labels = honor_labels
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else None
        self.prometheus: PrometheusProcess | None = None
        self.alertmanager: AlertmanagerProcess | None = None

    @property
    def prometheus_url(self) -> str:
        if self.prometheus is None:
            raise RuntimeError("monitoring is not started")
        return self.prometheus.url

    @property
    def alertmanager_url(self) -> str | None:
        return self.alertmanager.url if self.alertmanager else None

    def _prometheus_config(self) -> dict[str, Any]:
        interval = _duration(self.scrape_interval_s)
        config: dict[str, Any] = {
            "global": {"scrape_interval": interval, "scrape_timeout": interval,
                       "evaluation_interval": _duration(self.evaluation_interval_s)},
            "scrape_configs": [{
                "job_name": self.job, "honor_labels": self.honor_labels,
                "static_configs": self.static_configs,
            }],
        }
        if self.rule_groups is not None:
            config["rule_files"] = [str(self.workdir / "rules.yml")]
        if self.alertmanager is not None:
            config["alerting"] = alerting(self.alertmanager.port)
        return config

    def start(self, timeout_s: float = 15.0) -> Monitoring:
        found = availability()
        if not found.prometheus or (self.alertmanager_config is not None and not found.alertmanager):
            raise MonitoringUnavailable(found.reason)
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="gpuaas-monitoring-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            if self.alertmanager_config is not None:
                self.alertmanager = AlertmanagerProcess(self.workdir, found.alertmanager)  # type: ignore[arg-type]
                (self.workdir / "alertmanager.yml").write_text(yaml.safe_dump(self.alertmanager_config, sort_keys=False))
                self.alertmanager.start(timeout_s)
            if self.rule_groups is not None:
                (self.workdir / "rules.yml").write_text(yaml.safe_dump(self.rule_groups, sort_keys=False))
            (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(self._prometheus_config(), sort_keys=False))
            self.prometheus = PrometheusProcess(self.workdir, found.prometheus)
            self.prometheus.start(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def query(self, promql: str) -> list[dict[str, Any]]:
        """A small stdlib instant query, for readiness checks (the product uses the gateway)."""
        status, body = _http_get(f"{self.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        if status != 200:
            raise MonitoringUnavailable(f"Prometheus query {promql!r} failed with HTTP {status}: {body[:200]!r}")
        return json.loads(body)["data"]["result"]

    def wait_for_targets_up(self, timeout_s: float = 20.0) -> None:
        """Block until every scrape target has been scraped successfully (`up == 1`).

        Prometheus's first scrape comes a few seconds after start (service discovery settles first).
        """
        expected = len(self.scrape_targets)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            up = self.query(f'up{{job="{self.job}"}} == 1')
            if len(up) >= expected:
                return
            time.sleep(0.2)
        raise MonitoringUnavailable(f"scrape targets {self.scrape_targets} not up within {timeout_s:g}s; "
                                    f"Prometheus log:\n{self.prometheus.log_tail() if self.prometheus else ''}")

    def wait_for(self, promql: str, timeout_s: float = 30.0, poll_s: float = 0.2) -> list[dict[str, Any]]:
        """Block until `promql` returns a non-empty result; return it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            result = self.query(promql)
            if result:
                return result
            time.sleep(poll_s)
        raise TimeoutError(f"{promql!r} returned nothing within {timeout_s:g}s")

    def alerts(self) -> list[dict[str, Any]]:
        """Prometheus's current alerts (pending and firing)."""
        status, body = _http_get(f"{self.prometheus_url}/api/v1/alerts")
        if status != 200:
            raise MonitoringUnavailable(f"GET /api/v1/alerts failed with HTTP {status}")
        return json.loads(body)["data"]["alerts"]

    def stop(self) -> None:
        for process in (self.prometheus, self.alertmanager):
            if process is not None:
                process.stop()
        self.prometheus = None
        self.alertmanager = None
        if self.workdir is not None:
            _stop_unrecorded_children(self.workdir)
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def promtool_test_rules(rule_groups: dict[str, Any], tests: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """Run `promtool test rules` on a rule file and a unit-test file given as dicts."""
    found = availability()
    if not found.promtool:
        raise MonitoringUnavailable(found.reason)
    with tempfile.TemporaryDirectory(prefix="gpuaas-promtool-") as tmp:
        rules_path = Path(tmp) / "rules.yml"
        rules_path.write_text(yaml.safe_dump(rule_groups, sort_keys=False))
        test_path = Path(tmp) / "tests.yml"
        test_path.write_text(yaml.safe_dump({"rule_files": [rules_path.name], **tests}, sort_keys=False))
        return subprocess.run([found.promtool, "test", "rules", test_path.name], check=False, cwd=tmp,
                              capture_output=True, text=True, timeout=60, env={**os.environ})
