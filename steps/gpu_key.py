"""Which GPU a DCGM series is about: a whole GPU, or one MIG slice of it; and which metrics a slice reports.

dcgm-exporter (NVIDIA/dcgm-exporter, internal/pkg/collector/gpu_collector.go and
internal/pkg/rendermetrics/render_metrics.go, main at d5e5f510) labels every series with the
PHYSICAL GPU's `UUID`, `gpu` (index) and `Hostname`/`hostname`; a series of a MIG instance also
carries `GPU_I_ID` (the GPU instance id) and `GPU_I_PROFILE` (e.g. `1g.10gb`), and in Kubernetes
mode the pod that holds that slice. So the slices of one GPU share a UUID: a GPU is keyed by
UUID **plus** `GPU_I_ID` everywhere, or two pods' slices (or two slices of one pod) merge into one
"GPU" whose samples, coverage and activity mix theirs.

`DCGM_FI_DEV_GPU_UTIL` is not reported for MIG instances (it reads 0, or is absent): NVIDIA's
maintainers, dcgm-exporter issues 216, 105 and 430 ("use DCGM_FI_PROF_GR_ENGINE_ACTIVE"). A slice is
therefore judged on `DCGM_FI_PROF_GR_ENGINE_ACTIVE` only; without profiling metrics it has no
activity at all, and "no data" is never idle.

This module is the one place that knows it: the key type (`GpuKey`), the rule (`reports`), and the
PromQL label sets the rules and queries use (`BY_GPU`, `whole_gpu_only`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
"""Fraction of time the graphics/compute engine was active (0-1); needs DCGM profiling metrics; MIG reports it."""
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
"""Coarse GPU utilisation in percent (0-100); NOT reported for MIG slices (0 or absent)."""

UUID_LABEL = "UUID"
INSTANCE_LABEL = "GPU_I_ID"
PROFILE_LABEL = "GPU_I_PROFILE"
HOSTNAME_LABELS = ("Hostname", "hostname")
"""dcgm-exporter's node label: `Hostname`, renamed `hostname` on its main branch after 4.5.3."""

NOT_REPORTED_ON_MIG = frozenset({GPU_UTIL})
"""Metrics a MIG slice does not report: never read as its activity."""

BY_GPU = ("Hostname", "hostname", "gpu", UUID_LABEL, INSTANCE_LABEL)
"""The labels that identify one GPU or one MIG slice in PromQL `by (...)` clauses (absent labels are
empty, so whole GPUs keep one series each)."""


def by_gpu(*extra: str) -> str:
    """A `by (...)` label list: `extra` (e.g. namespace, pod) then the GPU key labels."""
    return ", ".join((*extra, *BY_GPU))


def whole_gpu_only(metric: str) -> str:
    """The extra matcher a selector of `metric` needs so no MIG slice is read on it ('' when none)."""
    return f'{INSTANCE_LABEL}=""' if metric in NOT_REPORTED_ON_MIG else ""


def reports(metric: str, labels: Mapping[str, str]) -> bool:
    """Whether a series of `metric` with `labels` is a real reading (False: GPU_UTIL of a MIG slice)."""
    return not (metric in NOT_REPORTED_ON_MIG and bool(labels.get(INSTANCE_LABEL)))


@dataclass(frozen=True, order=True)
class GpuKey:
    """One GPU, or one MIG slice of it (`instance` = GPU_I_ID; '' for a whole GPU)."""

    uuid: str
    instance: str = ""

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> GpuKey:
        """The key of a DCGM series: UUID (else node/index, for exporters without it) plus GPU_I_ID."""
        uuid = labels.get(UUID_LABEL) or labels.get("uuid") or \
            f"{next((labels[h] for h in HOSTNAME_LABELS if labels.get(h)), '?')}/{labels.get('gpu', '?')}"
        return cls(uuid, labels.get(INSTANCE_LABEL) or "")

    @property
    def is_mig(self) -> bool:
        return bool(self.instance)

    def __str__(self) -> str:
        """`GPU-…` for a whole GPU, `GPU-…/GI3` for MIG instance 3 of it (stable: used as a key in records)."""
        return f"{self.uuid}/GI{self.instance}" if self.instance else self.uuid
