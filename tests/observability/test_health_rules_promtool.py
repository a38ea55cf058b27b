"""`promtool test rules` for the GPU health alerts, with the PRODUCTION thresholds and durations,
in both DCGM label spellings (every case runs twice: `pod`/`namespace` as dcgm-exporter writes them,
and `exported_pod`/`exported_namespace` plus the exporter pod's own labels, as behind a ServiceMonitor).

Health is keyed by the GPU (`node`, `gpu`, `UUID`, `modelName`), so a GPU that changes hands (a new
pod label set mid-way) is still one series: an ECC counter that ticks right when a new pod takes the
GPU must still page.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from engine.monitoring import promtool_test_rules
from gpuaas.manifests import gpu_health as health
from gpuaas.manifests import observability as obs
from tests.support.prometheus import require_monitoring

SPELLINGS = ("plain", "exported")
MODEL = "NVIDIA A100-SXM4-80GB"
ALERTS = {rule["alert"]: rule for rule in health.rule_group()["rules"] if "alert" in rule}  # with namespace: gpuaas


def dcgm(metric: str, *, host: str = "node-a", gpu: int = 0, spelling: str = "plain", ns: str = "",
         pod: str = "", **extra: str) -> str:
    """A dcgm-exporter series as Prometheus stores it in the given spelling (pod labels only if a pod holds it)."""
    labels = {"gpu": str(gpu), "UUID": f"GPU-{host}-{gpu}", "pci_bus_id": f"00000000:{0x10 + gpu:02X}:00.0",
              "device": f"nvidia{gpu}", "modelName": MODEL, "Hostname": host, **extra}
    if spelling == "plain":
        if pod:
            labels.update(namespace=ns, pod=pod, container="main")
    else:
        if pod:
            labels.update(exported_namespace=ns, exported_pod=pod, exported_container="main")
        labels.update(namespace="gpu-operator", pod=f"nvidia-dcgm-exporter-{host}", container="nvidia-dcgm-exporter",
                      job="nvidia-dcgm-exporter", instance=f"10.0.0.{gpu}:9400")
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{metric}{{{body}}}"


def gpu_labels(host: str = "node-a", gpu: int = 0) -> dict[str, str]:
    return {"node": host, "gpu": str(gpu), "UUID": f"GPU-{host}-{gpu}", "modelName": MODEL}


def _expand(template: str, labels: dict[str, str], value: str) -> str:
    out = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)
    return out.replace("{{ $value }}", value)


def firing(alert: str, value: str, host: str = "node-a", gpu: int = 0) -> dict[str, Any]:
    rule = ALERTS[alert]
    labels = gpu_labels(host, gpu)
    return {"exp_labels": {**labels, **rule["labels"]},
            "exp_annotations": {k: _expand(v, labels, value) for k, v in rule["annotations"].items()}}


def _run(series: list[tuple[str, str]], checks: list[tuple[str, str, list[dict[str, Any]]]]) -> None:
    require_monitoring()
    test = {"interval": "1m", "input_series": [{"series": s, "values": v} for s, v in series],
            "alert_rule_test": [{"eval_time": t, "alertname": a, "exp_alerts": exp} for t, a, exp in checks]}
    result = promtool_test_rules(obs.rule_groups(), {"evaluation_interval": "1m", "tests": [test]})
    assert result.returncode == 0, f"promtool failed:\n{result.stdout}\n{result.stderr}"


TEMP, XID, UTIL = "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_UTIL"
DBE, SBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
REMAP_U, REMAP_FAIL = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE"


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_temperature_fires_after_15_minutes_above_85(spelling: str) -> None:
    _run([(dcgm(TEMP, spelling=spelling, ns="team-a", pod="train-0"), "91x40"),
          (dcgm(TEMP, gpu=1, spelling=spelling, ns="team-a", pod="train-0"), "84x40")],  # warm, not hot
         [("14m", health.ALERT_TEMPERATURE, []),
          ("15m", health.ALERT_TEMPERATURE, [firing(health.ALERT_TEMPERATURE, "91")]),
          ("40m", health.ALERT_TEMPERATURE, [firing(health.ALERT_TEMPERATURE, "91")])])


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_temperature_is_one_series_while_the_gpu_changes_hands(spelling: str) -> None:
    # Hot for 20 minutes across two pods (10 min each): the 15 minute `for` still completes.
    _run([(dcgm(TEMP, spelling=spelling, ns="team-a", pod="nb-0"), "90x9"),
          (dcgm(TEMP, spelling=spelling, ns="team-b", pod="train-0"), "_x10 90x20")],
         [("16m", health.ALERT_TEMPERATURE, [firing(health.ALERT_TEMPERATURE, "90")])])


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_brief_spike_does_not_page(spelling: str) -> None:
    _run([(dcgm(TEMP, spelling=spelling), "70x5 95x10 70x20")],
         [("15m", health.ALERT_TEMPERATURE, []), ("30m", health.ALERT_TEMPERATURE, [])])


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_new_xid_pages_once_per_code(spelling: str) -> None:
    # promtool: "a x n" is n+1 samples, "_ x n" n gaps. XID 79 from 11m (sticky), XID 48 from 42m.
    # Each pages for the 15 minutes after it appeared.
    _run([(dcgm(XID, spelling=spelling, ns="team-a", pod="nb-0"), "0x10 79x30 48x30")],
         [("10m", health.ALERT_XID, []),
          ("11m", health.ALERT_XID, [firing(health.ALERT_XID, "79")]),
          ("25m", health.ALERT_XID, [firing(health.ALERT_XID, "79")]),
          ("26m", health.ALERT_XID, []),   # still 79, but no longer new
          ("42m", health.ALERT_XID, [firing(health.ALERT_XID, "48")]),
          ("57m", health.ALERT_XID, [])])


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_xid_with_err_code_labels_of_newer_exporters(spelling: str) -> None:
    # dcgm-exporter 3.3.6+ labels the XID gauge with err_code/err_msg: a new code is a new series.
    _run([(dcgm(XID, spelling=spelling, err_code="0", err_msg="No Error"), "0x10"),
          (dcgm(XID, spelling=spelling, err_code="79", err_msg="GPU has fallen off the bus"), "_x10 79x30")],
         [("11m", health.ALERT_XID, [firing(health.ALERT_XID, "79")])])


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_application_xids_do_not_page(spelling: str) -> None:
    _run([(dcgm(XID, spelling=spelling, ns="team-a", pod="nb-0"), "0x5 13x10 31x10 43x10 45x10")],
         [(f"{m}m", health.ALERT_XID, []) for m in (6, 16, 26, 36, 46)])


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("counter", [DBE, REMAP_U])
def test_uncorrectable_memory_errors_page(spelling: str, counter: str) -> None:
    _run([(dcgm(counter, spelling=spelling, ns="team-a", pod="nb-0"), "0x10 1x30"),
          (dcgm(SBE, spelling=spelling, ns="team-a", pod="nb-0"), "0x10 5x30")],  # correctable: no page
         [("10m", health.ALERT_MEMORY, []),
          ("11m", health.ALERT_MEMORY, [firing(health.ALERT_MEMORY, "1")]),
          ("20m", health.ALERT_MEMORY, [firing(health.ALERT_MEMORY, "1")]),
          ("21m", health.ALERT_MEMORY, [])])


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_uncorrectable_error_counted_while_a_new_pod_takes_the_gpu(spelling: str) -> None:
    # The counter is per GPU; the pod labels change at 10m and the error comes with the new pod.
    _run([(dcgm(DBE, spelling=spelling, ns="team-a", pod="nb-0"), "2x9"),
          (dcgm(DBE, spelling=spelling, ns="team-b", pod="train-0"), "_x10 3x30")],
         [("12m", health.ALERT_MEMORY, [firing(health.ALERT_MEMORY, "1")])])


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_correctable_errors_alone_do_not_page(spelling: str) -> None:
    _run([(dcgm(SBE, spelling=spelling), "0+3x40"),
          (dcgm("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", spelling=spelling), "0+1x40")],
         [(f"{m}m", health.ALERT_MEMORY, []) for m in (10, 20, 30)])


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_row_remap_failure_pages(spelling: str) -> None:
    _run([(dcgm(REMAP_FAIL, spelling=spelling), "0x5 1x30")],
         [("10m", health.ALERT_REMAP_FAILURE, []),
          ("11m", health.ALERT_REMAP_FAILURE, [firing(health.ALERT_REMAP_FAILURE, "1")])])


def _node(name: str, values: str, kernel: str = "6.1.0") -> tuple[str, str]:
    series = (f'kube_node_info{{node="{name}",kernel_version="{kernel}",kubelet_version="v1.36.3",'
              f'job="kube-state-metrics"}}')
    return (series, values)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_gpu_that_vanishes_from_an_existing_node_pages(spelling: str) -> None:
    # gpu1 of node-a stops reporting after 30m (out of the 5m lookback at 36m); `for` 5m: fires at 41m.
    _run([(dcgm(UTIL, gpu=0, spelling=spelling, ns="team-a", pod="nb-0"), "50x90"),
          (dcgm(UTIL, gpu=1, spelling=spelling, ns="team-a", pod="nb-0"), "50x30"),
          _node("node-a", "1x90")],
         [("40m", health.ALERT_VANISHED, []),
          ("41m", health.ALERT_VANISHED, [firing(health.ALERT_VANISHED, "1", gpu=1)]),
          ("90m", health.ALERT_VANISHED, [firing(health.ALERT_VANISHED, "1", gpu=1)])])


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_gpu_that_does_not_come_back_after_a_node_upgrade_pages(spelling: str) -> None:
    # kube_node_info carries kernel_version, kubelet_version, os_image...: node-a rebooted into a new
    # kernel at 20m, so its old info series ended and a new one began. The node still exists; gpu1
    # did not come back after the reboot and must page like any vanished GPU.
    _run([(dcgm(UTIL, gpu=0, spelling=spelling, ns="team-a", pod="nb-0"), "50x90"),
          (dcgm(UTIL, gpu=1, spelling=spelling, ns="team-a", pod="nb-0"), "50x30"),
          _node("node-a", "1x19"), _node("node-a", "_x20 1x70", kernel="6.12.0")],
         [("40m", health.ALERT_VANISHED, []),
          ("41m", health.ALERT_VANISHED, [firing(health.ALERT_VANISHED, "1", gpu=1)])])


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_node_removed_on_purpose_is_not_a_vanished_gpu(spelling: str) -> None:
    # node-b is scaled down: its GPUs and its Node object go together. node-c's exporter dies: both page.
    _run([(dcgm(UTIL, host="node-b", gpu=0, spelling=spelling), "0x30"),
          (dcgm(UTIL, host="node-b", gpu=1, spelling=spelling), "0x30"),
          _node("node-b", "1x30"),
          (dcgm(UTIL, host="node-c", gpu=0, spelling=spelling), "0x30"),
          (dcgm(UTIL, host="node-c", gpu=1, spelling=spelling), "0x30"),
          _node("node-c", "1x90")],
         [("45m", health.ALERT_VANISHED, [firing(health.ALERT_VANISHED, "1", host="node-c", gpu=0),
                                          firing(health.ALERT_VANISHED, "1", host="node-c", gpu=1)])])


def test_hostname_of_newer_exporters_is_the_node_too() -> None:
    """dcgm-exporter after 4.5.3-4.8.2 (main, commit d5e5f51) spells the label `hostname`."""
    series = dcgm(TEMP).replace('Hostname="node-a"', 'hostname="node-a"')
    _run([(series, "95x30")], [("20m", health.ALERT_TEMPERATURE, [firing(health.ALERT_TEMPERATURE, "95")])])


def test_a_wrong_health_expectation_fails() -> None:
    """The harness can fail: a warm GPU claimed to page must be reported by promtool."""
    with pytest.raises(AssertionError, match="promtool failed"):
        _run([(dcgm(TEMP), "80x30")], [("20m", health.ALERT_TEMPERATURE, [firing(health.ALERT_TEMPERATURE, "80")])])
