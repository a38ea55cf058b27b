"""The alert path `gpuaas cluster up --with events` configures: the rules, Prometheus's alerting, Alertmanager.

What the stack writes is checked by the Debian packages' own tools (`promtool check rules`,
`promtool check config`, `amtool check-config`), and the route from a real Alertmanager through the
webhook proxy to a receiver that demands the bearer token (the EventSource's check) is run for real.
Starting it inside a cluster is tests/realstack/test_argo_idle.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine import monitoring, ports
from gpuaas.cluster import alerting, webhook_proxy
from gpuaas.cluster.stack import Cluster, ClusterError
from gpuaas.manifests import observability as obs
from tests.support.prometheus import AlertWebhookReceiver, require_monitoring


def _tool(name: str) -> str:
    found = shutil.which(name)
    assert found, f"{name} missing: it comes with the Debian packages prometheus / prometheus-alertmanager (make setup)"
    return found


def _write(path: Path, body: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


@pytest.mark.parametrize(("window", "expected"), [("30s", ("30s", "5s")), ("1m", ("1m", "10s")),
                                                  ("10s", ("10s", "5s")), ("30m", ("30m", "5m")),
                                                  ("1h30m", ("90m", "15m")), ("90", ("90s", "15s"))])
def test_the_idle_rule_takes_the_window_and_a_sixth_of_it_as_for(window: str, expected: tuple[str, str]) -> None:
    rule = alerting.IdleRule.from_window(window)
    assert (rule.window, rule.for_) == expected


@pytest.mark.parametrize("window", ["5s", "abc", "1.5s", "", "-30s"])
def test_an_idle_window_the_stack_cannot_use_is_refused_with_the_reason(window: str) -> None:
    with pytest.raises(ValueError, match="--idle-window"):
        alerting.IdleRule.from_window(window)


def test_up_refuses_a_bad_idle_window_before_it_starts_anything(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "state")
    with pytest.raises(ClusterError, match="expected whole seconds, at least 10s"):
        cluster.up(timeout_s=5, parts={"events"}, idle_window="2s")
    assert cluster.load() is None


def test_the_cli_refuses_an_idle_window_without_the_events_part(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from gpuaas.cli import main

    code = main(["cluster", "up", "--no-build", "--idle-window", "1m", "--state-dir", str(tmp_path / "state")])
    assert code == 2
    assert "add `--with events`" in capsys.readouterr().err
    code = main(["cluster", "up", "--no-build", "--with", "events", "--idle-window", "3s",
                 "--state-dir", str(tmp_path / "state")])
    assert code == 2  # bad usage, before anything is built or started
    assert "gpuaas cluster up: --idle-window: expected whole seconds, at least 10s" in capsys.readouterr().err
    assert not (tmp_path / "state").exists()


def test_the_rules_file_is_the_rendered_rules_with_the_stacks_window_and_promtool_accepts_it(tmp_path: Path) -> None:
    rules = alerting.rules_file(alerting.IdleRule.from_window("30s"))
    assert rules == obs.rule_groups("30s", "5s")
    (idle,) = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == obs.ALERT_NAME]
    assert idle["for"] == "5s" and "[30s]" in idle["expr"] and "offset 30s" in idle["expr"]
    done = subprocess.run([_tool("promtool"), "check", "rules", str(_write(tmp_path / "rules.yml", rules))],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def _stack_prometheus_config(tmp_path: Path, *, with_alerting: bool) -> dict[str, Any]:
    token = tmp_path / "token"
    token.write_text("t")
    rules = _write(tmp_path / "rules.yml", alerting.rules_file(alerting.IdleRule.from_window("30s")))
    return alerting.prometheus_file([
        {"job_name": "dcgm-exporter", "static_configs": [{"targets": ["127.0.0.1:9400"]}]},
        {"job_name": "kueue", "scheme": "https", "tls_config": {"insecure_skip_verify": True},
         "authorization": {"credentials_file": str(token)}, "static_configs": [{"targets": ["127.0.0.1:8443"]}]},
    ], rules=rules if with_alerting else None, alertmanager_port=9093 if with_alerting else None)


def test_prometheus_loads_the_rules_and_alerts_to_the_stacks_alertmanager_and_promtool_accepts_it(
        tmp_path: Path) -> None:
    config = _stack_prometheus_config(tmp_path, with_alerting=True)
    assert config["rule_files"] == [str(tmp_path / "rules.yml")]
    assert config["alerting"] == {"alertmanagers": [{"static_configs": [{"targets": ["127.0.0.1:9093"]}]}]}
    done = subprocess.run([_tool("promtool"), "check", "config", str(_write(tmp_path / "prometheus.yml", config))],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    count = sum(len(g["rules"]) for g in yaml.safe_load((tmp_path / "rules.yml").read_text())["groups"])
    assert f"SUCCESS: {count} rules found" in done.stdout, done.stdout  # promtool read the rule file too


def test_without_the_events_part_prometheus_has_no_rules_and_no_alerting(tmp_path: Path) -> None:
    config = _stack_prometheus_config(tmp_path, with_alerting=False)
    assert "rule_files" not in config and "alerting" not in config


def test_alertmanager_posts_idle_alerts_to_the_proxy_with_the_token_file_and_amtool_accepts_it(tmp_path: Path) -> None:
    token = tmp_path / "webhook-token"
    token.write_text("secret")
    config = alerting.alertmanager_file(43210, token)
    (idle,) = [r for r in config["receivers"] if r["name"] == obs.RECEIVER]
    assert idle["webhook_configs"] == [{
        "url": "http://127.0.0.1:43210/alertmanager", "send_resolved": False,
        "http_config": {"authorization": {"type": "Bearer", "credentials_file": str(token)}}}]
    path = _write(tmp_path / "alertmanager.yml", config)
    done = subprocess.run([_tool("amtool"), "check-config", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    routed = subprocess.run([_tool("amtool"), "config", "routes", "test", f"--config.file={path}",
                             f"alertname={obs.ALERT_NAME}", "namespace=team-a", "pod=p"],
                            capture_output=True, text=True, check=False)
    assert routed.stdout.strip() == obs.RECEIVER, routed.stdout + routed.stderr


def test_the_proxy_is_told_the_event_sources_service_as_the_product_renders_it() -> None:
    assert webhook_proxy.ServiceRef.parse(alerting.proxy_service()) == webhook_proxy.ServiceRef(
        "gpuaas", "gpuaas-alertmanager-eventsource-svc", 12000)
    rendered = yaml.safe_load_all(Path(__file__).resolve().parents[2].joinpath(
        "manifests/base/events/eventsource-gpuaas-alertmanager.yaml").read_text())
    (source,) = list(rendered)
    # Argo Events names the Service <EventSource>-eventsource-svc, with the ports of spec.service.
    assert f"{source['metadata']['name']}-eventsource-svc" == obs.WEBHOOK_SERVICE
    assert [p["port"] for p in source["spec"]["service"]["ports"]] == [obs.WEBHOOK_PORT]
    assert source["spec"]["webhook"]["idle"]["endpoint"] == obs.WEBHOOK_PATH


class _FixedResolver:
    """Stands in for webhook_proxy.Resolver: the endpoint it would have read from the API server."""

    def __init__(self, target: tuple[str, int] | None) -> None:
        self.service = webhook_proxy.ServiceRef("gpuaas", obs.WEBHOOK_SERVICE, obs.WEBHOOK_PORT)
        self.target = target

    def endpoint(self) -> tuple[str, int] | None:
        return self.target

    def slices(self) -> list[dict[str, Any]]:
        return []


@pytest.fixture
def receiver() -> Iterator[AlertWebhookReceiver]:
    found = AlertWebhookReceiver()
    found.start()
    yield found
    found.stop()


def _proxy(resolver: _FixedResolver) -> tuple[int, Any]:
    server = webhook_proxy.serve(resolver, ports.free_port())  # type: ignore[arg-type]
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1], server


def test_a_real_alertmanager_reaches_the_token_checking_receiver_through_the_proxy(
        tmp_path: Path, receiver: AlertWebhookReceiver) -> None:
    found = require_monitoring()
    host, port = receiver.url.removeprefix("http://").split("/")[0].split(":")
    proxy_port, server = _proxy(_FixedResolver((host, int(port))))
    am_port = ports.free_port()
    config = _write(tmp_path / "alertmanager.yml", alerting.alertmanager_file(proxy_port,
                                                                              receiver.write_credentials(tmp_path)))
    process = subprocess.Popen(monitoring.alertmanager_argv(found.alertmanager, config, tmp_path / "data", am_port),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{am_port}/-/ready", timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, "Alertmanager not ready within 15 s"
                time.sleep(0.1)
        alert = [{"labels": {"alertname": obs.ALERT_NAME, "namespace": "team-a", "pod": "idle-0"}}]
        request = urllib.request.Request(f"http://127.0.0.1:{am_port}/api/v2/alerts", data=json.dumps(alert).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        urllib.request.urlopen(request, timeout=5).close()
        post = receiver.wait_for(lambda p: p.body["commonLabels"].get("namespace") == "team-a", timeout_s=20)
    finally:
        process.terminate()
        process.wait(timeout=10)
        server.shutdown()
    assert post.path == obs.WEBHOOK_PATH
    assert post.body["status"] == "firing" and post.body["receiver"] == obs.RECEIVER
    assert receiver.rejected == 0


def test_without_a_ready_endpoint_the_proxy_answers_503_and_says_to_install_the_product() -> None:
    proxy_port, server = _proxy(_FixedResolver(None))
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{proxy_port}/alertmanager", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 503
        assert "install the product" in refused.value.read().decode()
        with urllib.request.urlopen(f"http://127.0.0.1:{proxy_port}{webhook_proxy.READY_PATH}", timeout=5) as ready:
            assert ready.status == 200
    finally:
        server.shutdown()


def _slice(port_name: str, port: int, *endpoints: tuple[str, bool | None]) -> dict[str, Any]:
    return {"ports": [{"name": port_name, "port": port}],
            "endpoints": [{"addresses": [address], **({"conditions": {"ready": ready}} if ready is not None else {})}
                          for address, ready in endpoints]}


SERVICE = {"spec": {"ports": [{"name": "webhook", "port": 12000, "targetPort": 12000}]}}


def test_the_proxy_picks_a_ready_endpoint_of_the_service_port() -> None:
    slices = [_slice("other", 9000, ("10.244.0.3", True)),
              _slice("webhook", 12000, ("10.244.0.4", False), ("10.244.0.5", None))]
    assert webhook_proxy.ready_endpoint(SERVICE, slices, 12000) == ("10.244.0.5", 12000)


def test_the_proxy_finds_nothing_when_no_endpoint_is_ready_or_the_port_is_not_the_services() -> None:
    assert webhook_proxy.ready_endpoint(SERVICE, [_slice("webhook", 12000, ("10.244.0.4", False))], 12000) is None
    assert webhook_proxy.ready_endpoint(SERVICE, [], 12000) is None
    assert webhook_proxy.ready_endpoint(SERVICE, [_slice("webhook", 12000, ("10.244.0.4", True))], 8080) is None


@pytest.mark.parametrize("text", ["gpuaas/svc", "svc:1", "gpuaas/svc:http", "/svc:1"])
def test_a_service_reference_must_be_namespace_name_port(text: str) -> None:
    with pytest.raises(ValueError, match="NAMESPACE/NAME:PORT"):
        webhook_proxy.ServiceRef.parse(text)


def test_the_readiness_check_sees_the_rules_and_the_alertmanager_in_a_real_prometheus(tmp_path: Path) -> None:
    found = require_monitoring()
    config = _stack_prometheus_config(tmp_path, with_alerting=True)
    am_port, port = ports.free_port(), ports.free_port()
    config["alerting"] = monitoring.alerting(am_port)
    path = _write(tmp_path / "prometheus.yml", config)
    process = subprocess.Popen(monitoring.prometheus_argv(found.prometheus, path, tmp_path / "tsdb", port),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while (said := alerting.prometheus_wired(url, tmp_path / "rules.yml", am_port) if _answers(url) else "down"):
            assert time.monotonic() < deadline, said
            time.sleep(0.2)
        other = alerting.prometheus_wired(url, tmp_path / "rules.yml", am_port + 1)
        assert other and f"127.0.0.1:{am_port + 1} not among the active ones" in other
        more = _write(tmp_path / "more.yml", {"groups": [{"name": "not-loaded", "rules": []}]})
        missing = alerting.prometheus_wired(url, more, am_port)
        assert missing and "not-loaded" in missing
    finally:
        process.terminate()
        process.wait(timeout=10)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as answer:
            return answer.status == 200
    except OSError:
        return False
