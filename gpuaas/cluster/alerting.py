"""The alert path on the stack (`gpuaas cluster up --with events`): rules, Alertmanager, webhook proxy.

With the events part the stack's Prometheus evaluates the product's RENDERED rules
(gpuaas.manifests.observability `rule_groups`: the recording rules, GPUWorkloadIdle and the GPU
health alerts) and sends its alerts to a real Alertmanager (Debian `prometheus-alertmanager`, as
engine.monitoring starts one, from the same argv and config builders) with the product's routing
(`alertmanager_config`): GPUWorkloadIdle to the webhook EventSource with the bearer token of
`<state>/events/webhook-token` (the token of Secret `gpuaas-alertmanager-webhook`), health alerts to
the admins' receiver, which has no target here. The webhook's URL is the webhook proxy on loopback
(gpuaas.cluster.webhook_proxy: the EventSource's Service as a program on this machine reaches it).

The idle window (`gpuaas cluster up --idle-window`, default DEFAULT_IDLE_WINDOW). The rendered
PrometheusRule uses the shortest window of the policy (30 min by default) and `for: 5m`; a stack
for trying the loop out needs the alert in seconds, so the default is 30 s, with `for` a sixth of the
window (the rendered rule's ratio, 5 s here) and at least FOR_MIN. The alert only starts the
on-idle step: the step judges the workload over its TENANT's own policy window and minimum runtime
(the policy ConfigMap), so a release also needs a tenant whose policy window the workload has been
idle for (docs/real-stack.md shows one). A longer `--idle-window` is the production behaviour.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from engine import monitoring
from gpuaas.cluster import readiness
from gpuaas.manifests import observability as obs
from steps.policy import PolicyError, parse_duration

if TYPE_CHECKING:
    from gpuaas.cluster.stack import Cluster

DEFAULT_IDLE_WINDOW = "30s"
FOR_MIN = 5.0
"""Seconds: `for` is at least one evaluation interval of the stack's Prometheus (5 s)."""
EVENT_SOURCE_NAMESPACE = "gpuaas"
"""Where the product's webhook EventSource and its Service live (manifests/base)."""


def _duration(seconds: float) -> str:
    whole = round(seconds)
    if whole % 3600 == 0:
        return f"{whole // 3600}h"
    if whole % 60 == 0:
        return f"{whole // 60}m"
    return f"{whole}s"


@dataclass(frozen=True)
class IdleRule:
    """The window and `for` of the stack's GPUWorkloadIdle rule."""

    window: str
    for_: str

    @classmethod
    def from_window(cls, window: str) -> IdleRule:
        """The rule for `--idle-window` (Go-like duration, whole seconds, at least 10 s); ValueError says why not."""
        text = window.strip()
        try:
            seconds = parse_duration("--idle-window", int(text) if text.isdigit() else text)
        except PolicyError as error:
            if "digits" not in error.expected:
                raise ValueError(f"--idle-window: expected a duration such as 30s, 2m or 1h30m (or seconds), "
                                 f"found {window!r}") from None
            seconds = math.inf  # a duration spelt with more digits than the policy reads: far above 24h
        if not 10 <= seconds <= 86400 or seconds != round(seconds):
            raise ValueError(f"--idle-window: expected whole seconds, at least 10s (two of the stack's 5 s "
                             f"scrapes) and at most 24h, found {window!r}")
        return cls(_duration(seconds), _duration(max(FOR_MIN, round(seconds / 6))))


def rules_file(rule: IdleRule) -> dict[str, Any]:
    """The product's rendered rule file with the stack's window (what Prometheus loads)."""
    return obs.rule_groups(rule.window, rule.for_)


def webhook_url(proxy_port: int) -> str:
    """Where Alertmanager POSTs GPUWorkloadIdle: the proxy, at the EventSource's own path."""
    return f"http://127.0.0.1:{proxy_port}{obs.WEBHOOK_PATH}"


def alertmanager_file(proxy_port: int, token_file: Path) -> dict[str, Any]:
    """The product's Alertmanager routing, to the webhook proxy with the bearer token file."""
    return obs.alertmanager_config(webhook_url(proxy_port), str(token_file))


def prometheus_file(scrape_configs: list[dict[str, Any]], *, rules: Path | None = None,
                    alertmanager_port: int | None = None) -> dict[str, Any]:
    """The stack's Prometheus config: its scrapes and, with the events part, the rules and the Alertmanager."""
    config: dict[str, Any] = {"global": {"scrape_interval": "5s", "evaluation_interval": "5s"},
                              "scrape_configs": scrape_configs}
    if rules is not None:
        config["rule_files"] = [str(rules)]
    if alertmanager_port is not None:
        config["alerting"] = monitoring.alerting(alertmanager_port)
    return config


def proxy_service() -> str:
    """The EventSource's Service as the webhook proxy's `--service` (NAMESPACE/NAME:PORT)."""
    return f"{EVENT_SOURCE_NAMESPACE}/{obs.WEBHOOK_SERVICE}:{obs.WEBHOOK_PORT}"


OPERATOR_WEBHOOK_PORT = obs.WEBHOOK_PORT
"""With the Prometheus Operator (`--monitoring` other than plain) Alertmanager POSTs to the URL of the product's
AlertmanagerConfig, `http://gpuaas-alertmanager-eventsource-svc.gpuaas.svc:12000/alertmanager`, unchanged: its
pod's /etc/hosts (gpuaas.cluster.monitoring_pods) names `webhook_host()`, where the proxy listens on 12000."""


def webhook_host(state_dir: Path) -> str:
    """A loopback address of this cluster's own (127.77.x.y, from the state dir) for the proxy on port 12000:
    clusters beside each other on one machine each get theirs."""
    import hashlib

    digest = hashlib.sha256(str(state_dir).encode()).digest()
    return f"127.77.{digest[0]}.{max(1, digest[1])}"


def start_proxy(cluster: Cluster, host: str, port: int) -> None:
    """The webhook proxy on host:port (gpuaas.cluster.webhook_proxy), ready."""
    cluster.progress(f"webhook proxy (Alertmanager -> Service {proxy_service()}) on {host}:{port}")
    cluster.state.ports.setdefault("webhook-proxy", port)
    proxy = cluster.start_process("webhook-proxy", [
        sys.executable, "-m", "gpuaas.cluster.webhook_proxy", f"--kubeconfig={cluster.admin_kubeconfig}",
        f"--host={host}", f"--port={port}", f"--service={proxy_service()}"],
        endpoint=f"http://{host}:{port}{obs.WEBHOOK_PATH}", env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    cluster.wait_ready(proxy, readiness.http_ok(f"http://{host}:{port}/-/ready"), cap=30)


def start(cluster: Cluster, rule: IdleRule, token_file: Path) -> tuple[Path, int]:
    """The webhook proxy and Alertmanager, ready; (the rules file, Alertmanager's port) for Prometheus."""
    found = monitoring.availability()
    if found.alertmanager is None:
        raise cluster.error("expected the `prometheus-alertmanager` program (Debian package prometheus-alertmanager) "
                            "on PATH for the events part, found none; run `make setup` (it installs it) or "
                            "`apt-get install -y prometheus-alertmanager`")
    folder = cluster.state_dir / "alertmanager"
    folder.mkdir(parents=True, exist_ok=True)

    proxy_port = cluster.state.port("webhook-proxy")
    start_proxy(cluster, "127.0.0.1", proxy_port)

    cluster.progress(f"Alertmanager (GPUWorkloadIdle -> the webhook EventSource; window {rule.window}, "
                     f"for {rule.for_})")
    port = cluster.state.port("alertmanager")
    config = folder / "alertmanager.yml"
    config.write_text(yaml.safe_dump(alertmanager_file(proxy_port, token_file), sort_keys=False))
    record = cluster.start_process("alertmanager", monitoring.alertmanager_argv(
        found.alertmanager, config, folder / "data", port), endpoint=f"http://127.0.0.1:{port}")
    cluster.wait_ready(record, readiness.http_ok(f"http://127.0.0.1:{port}/-/ready"), cap=30)
    cluster.state.endpoints["alertmanager"] = f"http://127.0.0.1:{port}"

    rules = cluster.state_dir / "prometheus" / "rules.yml"
    rules.parent.mkdir(parents=True, exist_ok=True)
    rules.write_text(yaml.safe_dump(rules_file(rule), sort_keys=False))
    cluster.state.save()
    return rules, port


def prometheus_wired(url: str, rules: Path, alertmanager_port: int | None) -> str | None:
    """None when Prometheus at `url` evaluates every group of `rules` and has the Alertmanager among its
    active ones, else what is missing (a readiness check: `/-/ready` says neither)."""
    expected = {group["name"] for group in yaml.safe_load(rules.read_text())["groups"]}
    status, body = readiness.http_status(f"{url}/api/v1/rules")
    if status != 200:
        return f"GET {url}/api/v1/rules: HTTP {status} {body[:200]}"
    loaded = {group["name"] for group in json.loads(body)["data"]["groups"]}
    if expected - loaded:
        return f"rule groups not loaded: {sorted(expected - loaded)} (loaded: {sorted(loaded)})"
    if alertmanager_port is None:
        return None
    status, body = readiness.http_status(f"{url}/api/v1/alertmanagers")
    if status != 200:
        return f"GET {url}/api/v1/alertmanagers: HTTP {status} {body[:200]}"
    active = [a["url"] for a in json.loads(body)["data"]["activeAlertmanagers"]]
    if not any(f"127.0.0.1:{alertmanager_port}/" in address for address in active):
        return f"Alertmanager 127.0.0.1:{alertmanager_port} not among the active ones: {active}"
    return None
