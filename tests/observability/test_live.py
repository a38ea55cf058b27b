"""Real Prometheus scraping the DCGM-like exporters (both label spellings), read by the metrics
gateway; and the whole alert path: rule fires -> real Alertmanager -> webhook with the Bearer token."""

from __future__ import annotations

import re
import time

import pytest

from engine.exporter import DcgmExporter
from gpuaas.manifests import observability as obs
from steps.gateways.metrics import (
    ENGINE_ACTIVE,
    GPU_UTIL,
    MetricsGateway,
    MetricsQueryError,
    MetricsUnavailable,
)
from tests.observability.conftest import WINDOW_S, GpuStack

THRESHOLD = 0.05


@pytest.fixture
def gateway(gpu_stack: GpuStack) -> MetricsGateway:
    gpu_stack.wait_for_history(WINDOW_S + 1)
    return MetricsGateway(gpu_stack.monitoring.prometheus_url)


def test_exporter_serves_both_spellings_in_prometheus_text_format() -> None:
    with DcgmExporter(label_style="exported") as exporter:
        uuid = exporter.add_gpu("node-z", 1).uuid
        exporter.assign(uuid, namespace="team-z", pod="p-0")
        exporter.set_utilization(uuid, 37)
        text = exporter.render()
    assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in text
    assert re.search(r'DCGM_FI_DEV_GPU_UTIL\{gpu="1",UUID="GPU-[0-9a-f-]+",pci_bus_id="[^"]+",device="nvidia1",'
                     r'modelName="[^"]+",Hostname="node-z",exported_pod="p-0",exported_namespace="team-z",'
                     r'exported_container="main"\} 37\n', text)
    assert re.search(r"DCGM_FI_PROF_GR_ENGINE_ACTIVE\{.*\} 0.37\n", text)


@pytest.mark.parametrize(("namespace", "pod", "spelling", "metric", "gpus"), [
    ("team-a", "nb-idle", "plain", ENGINE_ACTIVE, 2),
    ("team-b", "train-idle", "exported", ENGINE_ACTIVE, 1),   # renamed by Prometheus itself
    ("team-c", "infer-idle", "exported", GPU_UTIL, 1),        # exporter wrote exported_*, no profiling
])
def test_idle_pod_is_confirmed_in_every_spelling(gateway: MetricsGateway, namespace: str, pod: str,
                                                  spelling: str, metric: str, gpus: int) -> None:
    activity = gateway.gpu_activity(namespace, pod, WINDOW_S)
    assert activity.idle_confirmed(THRESHOLD), activity.as_dict()
    assert len(activity.gpus) == gpus
    assert {(g.namespace, g.pod, g.label_spelling, g.metric) for g in activity.gpus} == {(namespace, pod, spelling, metric)}
    assert activity.coverage >= 0.9


def test_busy_pod_is_not_idle_and_says_why(gateway: MetricsGateway) -> None:
    activity = gateway.gpu_activity("team-a", "nb-busy", WINDOW_S)
    assert activity.max_activity == pytest.approx(0.7)
    assert not activity.idle_confirmed(THRESHOLD)
    assert "node-a/gpu2 reached 70%" in (activity.why_not_idle(THRESHOLD) or "")


def test_partly_busy_pod_is_not_idle(gateway: MetricsGateway) -> None:
    activity = gateway.gpu_activity("team-b", "train-partly", WINDOW_S)
    assert sorted(g.max_activity for g in activity.gpus) == [0.0, 0.5]
    assert not activity.idle_confirmed(THRESHOLD)


def test_all_pods_of_a_workload_count(gateway: MetricsGateway) -> None:
    activity = gateway.gpu_activity("team-a", ["nb-idle", "nb-busy"], WINDOW_S)
    assert len(activity.gpus) == 3 and not activity.idle_confirmed(THRESHOLD)


def test_no_data_is_not_idle(gateway: MetricsGateway) -> None:
    activity = gateway.gpu_activity("team-a", "no-such-pod", WINDOW_S)
    assert not activity.has_data and activity.max_activity is None
    assert "no DCGM samples" in (activity.why_not_idle(THRESHOLD) or "")


def test_window_longer_than_the_data_is_not_idle(gateway: MetricsGateway) -> None:
    activity = gateway.gpu_activity("team-a", "nb-idle", 600)
    assert activity.max_activity == 0.0
    assert activity.coverage < 0.5
    assert "cover" in (activity.why_not_idle(THRESHOLD) or "")


def test_a_gpu_nobody_holds_is_no_workload(gpu_stack: GpuStack, gateway: MetricsGateway) -> None:
    # It carries only the exporter pod's target labels; the recorded activity must not show it.
    assert gpu_stack.monitoring.query('DCGM_FI_DEV_GPU_UTIL{pod="nvidia-dcgm-exporter-b7x9q", exported_pod=""}')
    assert gpu_stack.monitoring.query(f'{obs.GPU_ACTIVITY}{{pod="nvidia-dcgm-exporter-b7x9q"}}') == []


def test_unreachable_prometheus_is_transient() -> None:
    with pytest.raises(MetricsUnavailable, match="unreachable") as caught:
        MetricsGateway("http://127.0.0.1:9", retries=0).gpu_activity("team-a", "nb-idle", 30)
    assert caught.value.transient is True


def test_rejected_query_is_permanent(gateway: MetricsGateway) -> None:
    with pytest.raises(MetricsQueryError, match="rejected the query"):
        gateway.query("sum(")


def test_bad_arguments_name_the_field(gateway: MetricsGateway) -> None:
    with pytest.raises(ValueError, match="^namespace:"):
        gateway.gpu_activity("", "p", 10)
    with pytest.raises(ValueError, match="^pods:"):
        gateway.gpu_activity("team-a", [], 10)
    with pytest.raises(ValueError, match="^window_seconds:"):
        gateway.gpu_activity("team-a", "p", 0)


def test_idle_alert_reaches_the_webhook_with_bearer_token(gpu_stack: GpuStack) -> None:
    receiver = gpu_stack.receiver
    wanted = {("team-a", "nb-idle"), ("team-b", "train-idle"), ("team-c", "infer-idle")}

    def seen() -> set[tuple[str, str]]:
        return {(a["labels"]["workload_namespace"], a["labels"]["pod"]) for p in receiver.posts for a in p.body["alerts"]}

    started = time.time()
    receiver.wait_for(lambda _post: wanted <= seen(), timeout_s=45)
    print(f"all three idle alerts delivered {time.time() - gpu_stack.ready_at:.1f}s after the first scrape "
          f"(waited {time.time() - started:.1f}s here)")
    post = receiver.posts[0]
    assert post.headers["Authorization"] == f"Bearer {receiver.token}"
    assert post.path == "/alertmanager"
    body = post.body
    assert body["version"] == "4" and body["status"] == "firing" and body["receiver"] == obs.RECEIVER
    assert body["groupLabels"]["alertname"] == obs.ALERT_NAME
    for alert in (a for p in receiver.posts for a in p.body["alerts"]):
        assert alert["status"] == "firing" and alert["labels"]["alertname"] == obs.ALERT_NAME
        assert set(alert) >= {"labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}
        assert alert["annotations"]["summary"].startswith("GPUs of pod ")
    # busy, partly busy and the GPU nobody holds never alert
    assert not seen() & {("team-a", "nb-busy"), ("team-b", "train-partly"), ("gpu-operator", "nvidia-dcgm-exporter-b7x9q")}
    assert receiver.rejected == 0
