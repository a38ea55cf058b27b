"""GPU health: per-GPU recording rules and the alerts that page the GPU admins.

Health is about the hardware, not the workload, so every series here is keyed by the GPU itself
(`node`, `gpu`, `UUID`, `modelName`) and never by the pod that holds it: the pod labels come and go
with the workloads (and come in two spellings, `pod`/`namespace` or `exported_pod`/
`exported_namespace`), while a GPU's temperature or error counters must stay ONE continuous series,
otherwise `increase()` misses the jump of an error counter the moment a new pod takes the GPU.

`node` is dcgm-exporter's `Hostname` (renamed `hostname` on its main branch after 4.5.3-4.8.2), which the
exporter takes from `NODE_NAME` (set by the GPU Operator) and otherwise from the host name.

Field names are dcgm-exporter's (etc/default-counters.csv): `DCGM_FI_DEV_GPU_TEMP`,
`DCGM_FI_DEV_POWER_USAGE`, `DCGM_FI_DEV_FB_USED`/`_FREE`, `DCGM_FI_DEV_XID_ERRORS` (the LAST XID code,
which stays until the exporter restarts; newer exporters add `err_code`/`err_msg` labels),
`DCGM_FI_DEV_ECC_SBE_VOL_TOTAL`/`_DBE_VOL_TOTAL` (commented out in the default CSV: enable them),
`DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS`/`_UNCORRECTABLE_REMAPPED_ROWS`, `DCGM_FI_DEV_ROW_REMAP_FAILURE`.

Every alert carries `gpuaas_notify: gpu-admins` (the AlertmanagerConfig routes on it to the admins'
receiver) and never `gpuaas_reaction` (only GPUWorkloadIdle goes to the idle reaction's webhook).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GROUP = "gpuaas-gpu-health"
NOTIFY_LABEL = "gpuaas_notify"
NOTIFY_ADMINS = "gpu-admins"
GPU_KEY = "node, gpu, UUID, modelName"
DOCS = "https://github.com/gpuaas/gpuaas/blob/main/docs/observability.md"

# Recording rules: one continuous series per GPU.
GPU_INFO = "gpuaas:gpu_info"
TEMPERATURE = "gpuaas:gpu_temperature:celsius"
MEMORY_TEMPERATURE = "gpuaas:gpu_memory_temperature:celsius"
POWER = "gpuaas:gpu_power:watts"
FRAMEBUFFER_USED = "gpuaas:gpu_framebuffer_used:mib"
FRAMEBUFFER_RATIO = "gpuaas:gpu_framebuffer_used:ratio"
XID_LAST = "gpuaas:gpu_xid:last"
MEMORY_ERRORS = "gpuaas:gpu_memory_errors:total"
ROW_REMAP_FAILURE = "gpuaas:gpu_row_remap_failure:max"

# (DCGM counter, `kind` label) for gpuaas:gpu_memory_errors:total.
MEMORY_ERROR_COUNTERS = (
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "ecc-correctable"),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc-uncorrectable"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "remapped-rows-correctable"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "remapped-rows-uncorrectable"),
)
UNCORRECTABLE_KINDS = ("ecc-uncorrectable", "remapped-rows-uncorrectable")

# XIDs NVIDIA lists as usually caused by the application (its own fault, not the GPU's): they are
# shown on the dashboard but do not page. 13 graphics engine exception, 31 MMU fault, 43 GPU stopped
# processing, 45 preemptive cleanup.
APPLICATION_XIDS = (13, 31, 43, 45)

ALERT_TEMPERATURE = "GPUTemperatureHigh"
ALERT_XID = "GPUXidError"
ALERT_MEMORY = "GPUUncorrectableMemoryErrors"
ALERT_REMAP_FAILURE = "GPURowRemapFailure"
ALERT_VANISHED = "GPUVanished"
ALERTS = (ALERT_TEMPERATURE, ALERT_XID, ALERT_MEMORY, ALERT_REMAP_FAILURE, ALERT_VANISHED)


@dataclass(frozen=True)
class HealthSettings:
    """Thresholds and durations of the health alerts (production defaults; tests shorten `for`)."""

    temperature_c: float = 85.0
    temperature_for: str = "15m"
    xid_window: str = "15m"
    errors_window: str = "10m"
    vanished_window: str = "3h"
    vanished_for: str = "5m"
    remap_failure_for: str = "5m"


DEFAULT_SETTINGS = HealthSettings()


def per_gpu(metric: str, aggregation: str = "max") -> str:
    """`metric` as one series per GPU: pod labels (either spelling) dropped, `node` from Hostname/hostname."""
    node = (f'label_replace(label_replace({metric}, "node", "$1", "Hostname", "(.+)"), '
            f'"node", "$1", "hostname", "(.+)")')
    return f"{aggregation} by ({GPU_KEY}) ({node})"


def _memory_errors_expr() -> str:
    parts = [f'label_replace({per_gpu(metric)}, "kind", "{kind}", "", "")' for metric, kind in MEMORY_ERROR_COUNTERS]
    return "\nor\n".join(parts)


def recording_rules() -> list[dict[str, Any]]:
    """Per-GPU health series, in evaluation order."""
    return [
        {"record": GPU_INFO, "expr": per_gpu("DCGM_FI_DEV_GPU_UTIL", "group")},
        {"record": TEMPERATURE, "expr": per_gpu("DCGM_FI_DEV_GPU_TEMP")},
        {"record": MEMORY_TEMPERATURE, "expr": per_gpu("DCGM_FI_DEV_MEMORY_TEMP")},
        {"record": POWER, "expr": per_gpu("DCGM_FI_DEV_POWER_USAGE")},
        {"record": FRAMEBUFFER_USED, "expr": per_gpu("DCGM_FI_DEV_FB_USED")},
        {"record": FRAMEBUFFER_RATIO,
         "expr": (f"{per_gpu('DCGM_FI_DEV_FB_USED')}\n/ on ({GPU_KEY})\n"
                  f"({per_gpu('DCGM_FI_DEV_FB_USED')} + on ({GPU_KEY}) {per_gpu('DCGM_FI_DEV_FB_FREE')})")},
        {"record": XID_LAST, "expr": per_gpu("DCGM_FI_DEV_XID_ERRORS")},
        {"record": MEMORY_ERRORS, "expr": _memory_errors_expr()},
        {"record": ROW_REMAP_FAILURE, "expr": per_gpu("DCGM_FI_DEV_ROW_REMAP_FAILURE")},
    ]


def _labels(severity: str) -> dict[str, str]:
    return {"severity": severity, NOTIFY_LABEL: NOTIFY_ADMINS}


def _annotations(summary: str, description: str, runbook: str, anchor: str) -> dict[str, str]:
    return {"summary": summary, "description": description, "runbook": runbook,
            "runbook_url": f"{DOCS}#{anchor}"}


GPU_NAME = "{{ $labels.node }}/gpu{{ $labels.gpu }} ({{ $labels.modelName }}, {{ $labels.UUID }})"


def xid_expr(window: str) -> str:
    """A NEW XID: the last code is not 0, not an application XID, and differs from `window` ago.

    The gauge keeps the last code until the exporter restarts, so "is not 0" alone would page
    forever after one error; comparing with `window` ago pages once per new code.
    """
    app = "".join(f" != {code}" for code in APPLICATION_XIDS)
    return (f"({XID_LAST} > 0{app})\n"
            f"unless on ({GPU_KEY})\n"
            f"({XID_LAST} == on ({GPU_KEY}) ({XID_LAST} offset {window}))")


def alerts(settings: HealthSettings = DEFAULT_SETTINGS) -> list[dict[str, Any]]:
    s = settings
    uncorrectable = "|".join(UNCORRECTABLE_KINDS)
    return [
        {"alert": ALERT_TEMPERATURE,
         "expr": f"{TEMPERATURE} > {s.temperature_c:g}",
         "for": s.temperature_for,
         "labels": _labels("warning"),
         "annotations": _annotations(
             f"GPU {GPU_NAME} at {{{{ $value }}}} C for {s.temperature_for}",
             f"GPU temperature (DCGM_FI_DEV_GPU_TEMP) stayed above {s.temperature_c:g} C for {s.temperature_for}. "
             "The GPU slows itself down (thermal throttling) and long runs at this temperature wear it out.",
             "Check the node's cooling (fans, airflow, data-centre inlet temperature) and whether other GPUs of "
             "the node are hot too (dashboard row GPUs). If only this GPU is hot, cordon the node "
             "(kubectl cordon NODE), let its workloads finish or move them, and have the hardware checked.",
             "gputemperaturehigh")},
        {"alert": ALERT_XID,
         "expr": xid_expr(s.xid_window),
         "labels": _labels("critical"),
         "annotations": _annotations(
             f"XID {{{{ $value }}}} on GPU {GPU_NAME}",
             "The NVIDIA driver reported XID {{ $value }} for this GPU (DCGM_FI_DEV_XID_ERRORS, the last XID seen). "
             f"XIDs {', '.join(map(str, APPLICATION_XIDS))} are usually the application's fault and do not page.",
             "Look the code up in NVIDIA's XID catalogue; read the node's kernel log (dmesg | grep -i xid). "
             "48/63/64/92/94/95 are memory errors, 74 NVLink, 79 the GPU fell off the bus, 119/120 GSP: drain the "
             "node (kubectl drain NODE --ignore-daemonsets), reset the GPU or reboot, and run DCGM diagnostics "
             "(dcgmi diag -r 3) before uncordoning.",
             "gpuxiderror")},
        {"alert": ALERT_MEMORY,
         "expr": (f'sum by ({GPU_KEY}) (increase({MEMORY_ERRORS}{{kind=~"{uncorrectable}"}}[{s.errors_window}])) > 0'),
         "labels": _labels("critical"),
         "annotations": _annotations(
             f"Uncorrectable memory errors on GPU {GPU_NAME}",
             f"{{{{ $value }}}} uncorrectable ECC errors or rows remapped for uncorrectable errors in the last "
             f"{s.errors_window} (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS). "
             "The workload on this GPU may have read corrupted memory.",
             "Drain the node, reset the GPU (nvidia-smi -r) or reboot so the pending row remap takes effect, then "
             "run dcgmi diag -r 3. Tell the tenant whose workload held the GPU (dashboard row GPUs) that its "
             "results since the error are suspect. Repeated errors: RMA the GPU.",
             "gpuuncorrectablememoryerrors")},
        {"alert": ALERT_REMAP_FAILURE,
         "expr": f"{ROW_REMAP_FAILURE} > 0",
         "for": s.remap_failure_for,
         "labels": _labels("critical"),
         "annotations": _annotations(
             f"Row remapping failed on GPU {GPU_NAME}",
             "DCGM_FI_DEV_ROW_REMAP_FAILURE: the GPU ran out of spare memory rows to replace failing ones.",
             "Take the GPU out of service: cordon and drain the node, and RMA the GPU.",
             "gpurowremapfailure")},
        # Deleted nodes are matched on `node` alone: kube_node_info also carries kernel_version,
        # kubelet_version, os_image..., so a node upgraded and rebooted gets a NEW info series, and
        # matching on every label would take it for a deleted node and hide the GPU it lost.
        {"alert": ALERT_VANISHED,
         "expr": (f"max_over_time({GPU_INFO}[{s.vanished_window}])\n"
                  f"unless on (UUID) {GPU_INFO}\n"
                  f"unless on (node) (max by (node) (max_over_time(kube_node_info[{s.vanished_window}]))\n"
                  f"                  unless on (node) kube_node_info)"),
         "for": s.vanished_for,
         "labels": _labels("critical"),
         "annotations": _annotations(
             f"GPU {GPU_NAME} vanished from DCGM",
             f"dcgm-exporter reported this GPU in the last {s.vanished_window} but no longer does, and its node "
             "still exists. The GPU fell off the bus, the driver lost it, or the node's dcgm-exporter is down "
             "(then every GPU of the node is listed). Nodes deleted on purpose (scale-down) are not reported.",
             "Check the node's dcgm-exporter pod (kubectl -n gpu-operator get pods -o wide | grep NODE) and "
             "nvidia-smi on the node. A GPU missing from nvidia-smi needs a reboot or a reseat; look for XID 79 "
             "in dmesg. Cordon the node until it reports every GPU again.",
             "gpuvanished")},
    ]


def rule_group(settings: HealthSettings = DEFAULT_SETTINGS, interval: str | None = None,
               product_namespace: str = "gpuaas") -> dict[str, Any]:
    """The health group; each alert carries `namespace: <product_namespace>`, the namespace of the product's
    AlertmanagerConfig, so the operator's default `OnNamespace` matcher lets it through
    (gpuaas.manifests.observability.WORKLOAD_NAMESPACE_LABEL says why)."""
    group: dict[str, Any] = {"name": GROUP}
    if interval:
        group["interval"] = interval
    rules = [*recording_rules(), *alerts(settings)]
    for rule in rules:
        if "alert" in rule:
            rule["labels"] = {**rule["labels"], "namespace": product_namespace}
    group["rules"] = rules
    return group
