"""One real Prometheus + Alertmanager for this folder, scraping three DCGM-like exporters.

The GPUs and who holds them (every label spelling a cluster produces):

| exporter | how Prometheus sees it | GPUs |
|---|---|---|
| plain    | `pod`/`namespace` as the exporter wrote them (honorLabels: true) | node-a: team-a/nb-idle x2 at 0%, team-a/nb-busy at 70% |
| renamed  | the exporter writes `pod`/`namespace`, the scrape adds the exporter pod's own, Prometheus itself renames the GPU's to `exported_*` (a ServiceMonitor with honorLabels: false) | node-b: team-b/train-idle 0%, team-b/train-partly 0% + 50%, one GPU nobody holds |
| exported | the exporter writes `exported_*` directly, no profiling metrics (GPU_UTIL only) | node-c: team-c/infer-idle 0% |
| plain (MIG) | slices of one GPU: the physical UUID plus `GPU_I_ID`, GPU_UTIL reading 0 | node-m GPU 0: team-m/mig-idle (GI 1) 0%, team-m/mig-partly (GI 2) 60% + (GI 3) 0%; GPU 1: team-m/mig-noprof (GI 4) without profiling metrics |

Rules use a 4 s window and a 2 s `for`, evaluated every 0.5 s, so the idle alert reaches the
webhook receiver ~10 s after start instead of 35 minutes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.exporter import DcgmExporter
from engine.monitoring import Monitoring
from gpuaas.manifests import observability as obs
from tests.support.prometheus import AlertWebhookReceiver, running_monitoring

WINDOW_S, FOR_S = 4, 2


@dataclass
class GpuStack:
    monitoring: Monitoring
    receiver: AlertWebhookReceiver
    plain: DcgmExporter
    renamed: DcgmExporter
    exported: DcgmExporter
    ready_at: float
    """Wall time when every target had been scraped once."""

    def wait_for_history(self, seconds: float) -> None:
        """Sleep until the TSDB holds at least `seconds` of samples."""
        remaining = self.ready_at + seconds - time.time()
        if remaining > 0:
            time.sleep(remaining)


def _hold(exporter: DcgmExporter, host: str, index: int, ns: str, pod: str, percent: float, **fields: object) -> str:
    device = exporter.add_gpu(host, index, **fields)
    exporter.assign(device.key, namespace=ns, pod=pod)
    exporter.set_utilization(device.key, percent)
    return device.key


@pytest.fixture(scope="session")
def gpu_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GpuStack]:
    tmp: Path = tmp_path_factory.mktemp("gpu-stack")
    plain, renamed, exported = DcgmExporter(), DcgmExporter(), DcgmExporter(label_style="exported")
    _hold(plain, "node-a", 0, "team-a", "nb-idle", 0)
    _hold(plain, "node-a", 1, "team-a", "nb-idle", 0)
    _hold(plain, "node-a", 2, "team-a", "nb-busy", 70)
    _hold(renamed, "node-b", 0, "team-b", "train-idle", 0)
    _hold(renamed, "node-b", 1, "team-b", "train-partly", 0)
    _hold(renamed, "node-b", 2, "team-b", "train-partly", 50)
    renamed.add_gpu("node-b", 3)  # nobody holds it: only the exporter pod's labels
    _hold(exported, "node-c", 0, "team-c", "infer-idle", 0, profiling=False)
    for index, instance, pod, percent, extra in ((0, "1", "mig-idle", 0, {}), (0, "2", "mig-partly", 60, {}),
                                                 (0, "3", "mig-partly", 0, {}),
                                                 (1, "4", "mig-noprof", 0, {"profiling": False})):
        _hold(plain, "node-m", index, "team-m", pod, percent, mig_instance=instance, mig_profile="3g.40gb", **extra)
    receiver = AlertWebhookReceiver()
    for exporter in (plain, renamed, exported):
        exporter.start()
    receiver.start()
    credentials = receiver.write_credentials(tmp)
    try:
        with running_monitoring(
            scrape_targets=[
                plain.target,
                {"targets": [renamed.target], "labels": {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-b7x9q",
                                                         "container": "nvidia-dcgm-exporter"}},
                exported.target,
            ],
            rule_groups=obs.rule_groups(f"{WINDOW_S}s", f"{FOR_S}s"),
            alertmanager_config=obs.alertmanager_config(receiver.url, str(credentials)),
            scrape_interval_s=0.5, evaluation_interval_s=0.5,
        ) as monitoring:
            yield GpuStack(monitoring, receiver, plain, renamed, exported, ready_at=time.time())
    finally:
        receiver.stop()
        for exporter in (plain, renamed, exported):
            exporter.stop()
