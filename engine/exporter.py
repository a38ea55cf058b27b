"""A DCGM-like exporter: NVIDIA dcgm-exporter's series for GPUs that exist only in the local engine.

It serves `/metrics` in the Prometheus text format on loopback, with dcgm-exporter's metric names
and labels (`gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`, and in Kubernetes mode
`pod`, `namespace`, `container` of the pod that holds the GPU), so a real Prometheus scrapes it and
the product's real rules and queries run unchanged. The demo and the tests drive the values.

Besides load (utilisation, engine-active, power, framebuffer) it emits the health fields admins
alert on, with dcgm-exporter's field names: temperatures, the last XID error (a gauge that keeps
the last code until the exporter restarts), volatile ECC error counters and row-remapping counters.
Incidents are injected with `set(uuid, temperature_c=..., xid=...)` and `add_ecc_errors(...)`.

`label_style="exported"` emits `exported_pod`/`exported_namespace`/`exported_container` instead:
what Prometheus stores behind the usual ServiceMonitor (`honorLabels: false`), where the exporter
pod's own `pod`/`namespace` target labels win. Both spellings must work end to end.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Self

from engine.http_server import QuietHTTPServer

LabelStyle = Literal["plain", "exported"]

METRICS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
)
"""dcgm-exporter's field names, types and help texts (etc/default-counters.csv; the ECC volatile
counters are commented out there and must be enabled in the metrics CSV for the ECC alert)."""


@dataclass
class GpuDevice:
    """One emulated GPU and the pod (if any) that holds it."""

    hostname: str
    gpu: int
    uuid: str
    model_name: str = "NVIDIA A100-SXM4-80GB"
    pci_bus_id: str = ""
    framebuffer_mib: float = 81920.0
    namespace: str = ""
    pod: str = ""
    container: str = ""
    utilization: float = 0.0
    """DCGM_FI_DEV_GPU_UTIL, percent 0-100."""
    engine_active: float | None = None
    """DCGM_FI_PROF_GR_ENGINE_ACTIVE 0-1; None = follow utilization/100."""
    power_watts: float | None = None
    """None = derived from utilization (idle ~60 W, busy ~400 W)."""
    fb_used_mib: float | None = None
    """None = derived: ~0 without a pod, some memory held by an idle pod, more when busy."""
    profiling: bool = True
    """False = no DCGM_FI_PROF_* series (profiling metrics disabled on this node)."""
    temperature_c: float | None = None
    """DCGM_FI_DEV_GPU_TEMP; None = derived from utilization (~32 C idle, ~72 C busy)."""
    memory_temperature_c: float | None = None
    """DCGM_FI_DEV_MEMORY_TEMP; None = derived (a few degrees above the GPU)."""
    xid: int = 0
    """DCGM_FI_DEV_XID_ERRORS: the LAST XID code seen (0 = none); it stays until the exporter restarts."""
    ecc_sbe_volatile: int = 0
    ecc_dbe_volatile: int = 0
    correctable_remapped_rows: int = 0
    uncorrectable_remapped_rows: int = 0
    row_remap_failure: bool = False

    @property
    def device(self) -> str:
        return f"nvidia{self.gpu}"

    def values(self) -> dict[str, float]:
        util = max(0.0, min(100.0, float(self.utilization)))
        active = self.engine_active if self.engine_active is not None else util / 100.0
        power = self.power_watts if self.power_watts is not None else 60.0 + 3.4 * util
        if self.fb_used_mib is not None:
            used = self.fb_used_mib
        elif self.pod:
            used = 2048.0 + (self.framebuffer_mib - 4096.0) * util / 100.0
        else:
            used = 0.0
        temperature = self.temperature_c if self.temperature_c is not None else 32.0 + 0.4 * util
        memory_temperature = (self.memory_temperature_c if self.memory_temperature_c is not None
                              else temperature + 4.0)
        out = {"DCGM_FI_DEV_GPU_UTIL": util, "DCGM_FI_DEV_POWER_USAGE": power,
               "DCGM_FI_DEV_FB_USED": used, "DCGM_FI_DEV_FB_FREE": max(0.0, self.framebuffer_mib - used),
               "DCGM_FI_DEV_GPU_TEMP": temperature, "DCGM_FI_DEV_MEMORY_TEMP": memory_temperature,
               "DCGM_FI_DEV_XID_ERRORS": float(self.xid),
               "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": float(self.ecc_sbe_volatile),
               "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": float(self.ecc_dbe_volatile),
               "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": float(self.correctable_remapped_rows),
               "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": float(self.uncorrectable_remapped_rows),
               "DCGM_FI_DEV_ROW_REMAP_FAILURE": 1.0 if self.row_remap_failure else 0.0}
        if self.profiling:
            out["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] = max(0.0, min(1.0, float(active)))
        return out


@dataclass(frozen=True)
class Sample:
    """One series value as the exporter currently exposes it."""

    name: str
    labels: dict[str, str] = field(hash=False)
    value: float


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _format_value(value: float) -> str:
    return repr(float(value)) if value != int(value) else f"{int(value)}"


class DcgmExporter:
    """Thread-safe set of emulated GPUs plus an HTTP server exposing them on 127.0.0.1."""

    def __init__(self, gpus: Iterable[GpuDevice] = (), *, label_style: LabelStyle = "plain",
                 kubernetes_mode: bool = True, host: str = "127.0.0.1", port: int = 0) -> None:
        if label_style not in ("plain", "exported"):
            raise ValueError(f"label_style: expected 'plain' or 'exported', found {label_style!r}")
        self.label_style: LabelStyle = label_style
        self.kubernetes_mode = kubernetes_mode
        self._host, self._port = host, port
        self._lock = threading.Lock()
        self._gpus: dict[str, GpuDevice] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.scrapes = 0
        for device in gpus:
            self._gpus[device.uuid] = device

    # -- GPUs ------------------------------------------------------------------------------------
    def add_gpu(self, hostname: str, gpu: int, uuid: str | None = None, **fields: Any) -> GpuDevice:
        """Add (or replace) a GPU; `uuid` defaults to a stable one derived from host and index."""
        uuid = uuid or f"GPU-{zlib.crc32(hostname.encode()):08x}-0000-4000-8000-{gpu:012d}"
        fields.setdefault("pci_bus_id", f"00000000:{0x10 + gpu:02X}:00.0")
        device = GpuDevice(hostname=hostname, gpu=gpu, uuid=uuid, **fields)
        with self._lock:
            self._gpus[uuid] = device
        return device

    def remove_gpu(self, uuid: str) -> None:
        with self._lock:
            self._gpus.pop(uuid, None)

    def gpus(self) -> list[GpuDevice]:
        with self._lock:
            return [replace(g) for g in self._gpus.values()]

    def _update(self, uuid: str, **changes: Any) -> None:
        with self._lock:
            if uuid not in self._gpus:
                raise KeyError(f"uuid: no emulated GPU {uuid!r}; known: {sorted(self._gpus)}")
            self._gpus[uuid] = replace(self._gpus[uuid], **changes)

    def assign(self, uuid: str, *, namespace: str, pod: str, container: str = "main") -> None:
        """The GPU now belongs to this pod (dcgm-exporter's Kubernetes mode attributes it)."""
        self._update(uuid, namespace=namespace, pod=pod, container=container)

    def unassign(self, uuid: str) -> None:
        """The pod went away: no pod labels, no load."""
        self._update(uuid, namespace="", pod="", container="", utilization=0.0, engine_active=None,
                     power_watts=None, fb_used_mib=None)

    def set_utilization(self, uuid: str, percent: float) -> None:
        """Drive the load: GPU_UTIL = percent, ENGINE_ACTIVE = percent/100."""
        self._update(uuid, utilization=float(percent), engine_active=None)

    def set(self, uuid: str, **changes: Any) -> None:
        """Set any field of GpuDevice (engine_active, power_watts, fb_used_mib, profiling, ...)."""
        self._update(uuid, **changes)

    def add_ecc_errors(self, uuid: str, *, correctable: int = 0, uncorrectable: int = 0) -> None:
        """Count ECC errors the way the driver does: volatile SBE/DBE counters, and on GPUs with row
        remapping (A100 and later) one remapped row per error of each kind."""
        with self._lock:
            if uuid not in self._gpus:
                raise KeyError(f"uuid: no emulated GPU {uuid!r}; known: {sorted(self._gpus)}")
            g = self._gpus[uuid]
            self._gpus[uuid] = replace(
                g, ecc_sbe_volatile=g.ecc_sbe_volatile + correctable, ecc_dbe_volatile=g.ecc_dbe_volatile + uncorrectable,
                correctable_remapped_rows=g.correctable_remapped_rows + correctable,
                uncorrectable_remapped_rows=g.uncorrectable_remapped_rows + uncorrectable)

    def set_pod_utilization(self, namespace: str, pod: str, percent: float) -> int:
        """Set the load of every GPU held by one pod; returns how many GPUs that was."""
        with self._lock:
            targets = [u for u, g in self._gpus.items() if g.namespace == namespace and g.pod == pod]
        for uuid in targets:
            self.set_utilization(uuid, percent)
        return len(targets)

    # -- exposition ------------------------------------------------------------------------------
    def _labels(self, device: GpuDevice) -> dict[str, str]:
        labels = {"gpu": str(device.gpu), "UUID": device.uuid, "pci_bus_id": device.pci_bus_id,
                  "device": device.device, "modelName": device.model_name, "Hostname": device.hostname}
        if self.kubernetes_mode and device.pod:
            prefix = "exported_" if self.label_style == "exported" else ""
            labels[f"{prefix}pod"] = device.pod
            labels[f"{prefix}namespace"] = device.namespace
            labels[f"{prefix}container"] = device.container
        return labels

    def samples(self) -> list[Sample]:
        """The series exactly as /metrics exposes them now (for in-process rule evaluation)."""
        out: list[Sample] = []
        with self._lock:
            devices = list(self._gpus.values())
        for name, _, _ in METRICS:
            for device in devices:
                values = device.values()
                if name in values:
                    out.append(Sample(name, self._labels(device), values[name]))
        return out

    def render(self) -> str:
        """The Prometheus text exposition format (version 0.0.4)."""
        samples = self.samples()
        lines: list[str] = []
        for name, kind, help_text in METRICS:
            rows = [s for s in samples if s.name == name]
            if not rows:
                continue
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            for s in rows:
                labels = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels.items())
                lines.append(f"{name}{{{labels}}} {_format_value(s.value)}")
        return "\n".join(lines) + "\n"

    # -- HTTP ------------------------------------------------------------------------------------
    def start(self) -> str:
        """Serve /metrics on a free loopback port; returns the base URL."""
        if self._server is not None:
            return self.url
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404, "only /metrics is served")
                    return
                body = exporter.render().encode()
                exporter.scrapes += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    return  # the scraper hung up (Prometheus stopping): nothing to tell anyone

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = QuietHTTPServer((self._host, self._port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="dcgm-exporter", daemon=True)
        self._thread.start()
        return self.url

    @property
    def target(self) -> str:
        """host:port, as a Prometheus static_configs target."""
        if self._server is None:
            raise RuntimeError("the exporter is not started; call start() first")
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    @property
    def url(self) -> str:
        return f"http://{self.target}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
