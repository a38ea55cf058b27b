"""Metrics gateway: how busy a workload's GPUs really were, read from Prometheus.

An idle alert is only a hint: by the time a step runs, the workload may be busy again, or the
alert may rest on a gap in the data (exporter restarted, node unreachable). So the on-idle
reaction asks Prometheus again, over the policy window, and releases GPUs only when every GPU
of the workload's pods stayed at or below the threshold AND samples cover the window. "No data"
never counts as "idle".

DCGM series reach Prometheus under two label spellings: the exporter's own `pod`/`namespace`
(with `honorLabels: true` or relabelling), or `exported_pod`/`exported_namespace` (the usual
ServiceMonitor, where the target's own `pod`/`namespace` labels win). Both are queried.

`prometheus_api_client` (and with it `requests`) is imported on first use, so a step process that
never reads metrics does not pay ~0.2 s for it.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from prometheus_api_client import PrometheusConnect

DEFAULT_PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"
TOKEN_FILE_ENV = "GPUAAS_PROMETHEUS_TOKEN_FILE"
"""A file whose content is sent as `Authorization: Bearer` (OpenShift's thanos-querier: the pod's own
ServiceAccount token, /var/run/secrets/kubernetes.io/serviceaccount/token, bound to cluster-monitoring-view)."""
CA_FILE_ENV = "GPUAAS_PROMETHEUS_CA_FILE"
"""PEM file of the CA that signed the query endpoint's serving certificate (OpenShift: the service CA,
`service-ca.crt`); without it an https endpoint is checked against the system's trusted CAs."""

ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
"""Fraction of time the graphics/compute engine was active (0-1); needs DCGM profiling metrics."""
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
"""Coarse GPU utilisation in percent (0-100); always available. Used when ENGINE_ACTIVE is absent."""

LABEL_SPELLINGS: tuple[tuple[str, str], ...] = (("namespace", "pod"), ("exported_namespace", "exported_pod"))
"""(namespace label, pod label) as Prometheus may store them; see the module docstring."""


class MetricsError(Exception):
    """Base of the metrics gateway's errors."""


class MetricsUnavailable(MetricsError):
    """Prometheus could not be reached or answered 5xx: TRANSIENT, the step should exit 75."""

    transient = True


class MetricsQueryError(MetricsError):
    """Prometheus rejected the query (4xx): a bug or a bad parameter, not worth retrying."""

    transient = False


@dataclass(frozen=True)
class GpuObservation:
    """One physical GPU as seen in the window: who used it and how busy it got."""

    uuid: str
    hostname: str
    gpu: str
    namespace: str
    pod: str
    metric: str
    """The series the activity came from: ENGINE_ACTIVE, or GPU_UTIL when profiling is off."""
    label_spelling: str
    """"plain" (pod/namespace) or "exported" (exported_pod/exported_namespace)."""
    max_activity: float
    """Highest activity in the window, normalised to 0-1."""
    samples: int
    first_seen: float
    last_seen: float
    coverage: float | None = None
    """Share (0-1) of the window covered by THIS GPU's own samples (gaps over the tolerance uncovered);
    None when only the window's coverage is known (then GpuActivity.coverage stands for every GPU)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid, "hostname": self.hostname, "gpu": self.gpu, "namespace": self.namespace,
            "pod": self.pod, "metric": self.metric, "labelSpelling": self.label_spelling,
            "maxActivity": self.max_activity, "samples": self.samples,
            "coverage": None if self.coverage is None else round(self.coverage, 4),
        }


# -- the judgement (pure; the on-idle step and `gpuaas simulate` both call it) -----------------------
NO_DATA = "no-data"
SHORT_COVERAGE = "short-coverage"
BUSY = "busy"
IDLENESS_CHECKS = (NO_DATA, SHORT_COVERAGE, BUSY)
"""The checks idleness must pass, in the order a failure is reported."""


def idleness_failures(observations: Any, coverage: Any, max_activity: Any, threshold: Any,
                      min_coverage: Any) -> tuple[Any, Any, Any]:
    """Whether each of IDLENESS_CHECKS FAILS: (no data, samples cover too little, a GPU went above the threshold).

    `observations` counts what was seen in the window (GPUs or samples: 0 means no data),
    `coverage` is the covered share (0-1), `max_activity` the highest activity (0-1; NaN or None
    when there is no data). Only comparisons are used, so every argument may also be a numpy
    array: `gpuaas simulate` judges millions of windows with this one rule without steps/ importing
    numpy. "No data" is never idle, and the threshold is inclusive (activity == threshold is idle).
    """
    no_data = observations == 0
    short = coverage < min_coverage
    busy = (max_activity > threshold) if max_activity is not None else False
    return no_data, short, busy


def first_idleness_failure(observations: int, coverage: float, max_activity: float | None, threshold: float,
                           min_coverage: float) -> str | None:
    """The first check of IDLENESS_CHECKS that fails for one window, or None when idleness is confirmed."""
    for name, failed in zip(IDLENESS_CHECKS, idleness_failures(observations, coverage, max_activity, threshold,
                                                                min_coverage), strict=True):
        if failed:
            return name
    return None


@dataclass(frozen=True)
class GpuActivity:
    """The GPU activity of some pods over one window, and how much of the window the data covers."""

    namespace: str
    pods: tuple[str, ...]
    window_seconds: float
    evaluated_at: float
    gpus: tuple[GpuObservation, ...] = ()
    coverage: float = 0.0
    """The LOWEST per-GPU coverage (0 without data): every GPU must be seen over the window, one GPU's
    samples say nothing about another's. Gaps longer than `gap_tolerance_seconds` are uncovered."""
    largest_gap_seconds: float = 0.0
    gap_tolerance_seconds: float = 0.0
    notes: tuple[str, ...] = field(default=())

    @property
    def max_activity(self) -> float | None:
        """Highest activity of any GPU (0-1), or None when there is no data at all."""
        return max((g.max_activity for g in self.gpus), default=None)

    @property
    def has_data(self) -> bool:
        return bool(self.gpus)

    def idle_confirmed(self, threshold: float, min_coverage: float = 0.9) -> bool:
        """True only when there IS data, it covers at least `min_coverage` of the window, and no
        GPU exceeded `threshold` (0-1). A partly busy pod (one GPU of two working) is not idle."""
        return self.why_not_idle(threshold, min_coverage) is None

    def why_not_idle(self, threshold: float, min_coverage: float = 0.9,
                     expected: Mapping[str, int] | None = None, held: int = 0) -> str | None:
        """The reason idleness is NOT confirmed, as a sentence for the audit record; None if it is.

        The checks of IDLENESS_CHECKS (first_idleness_failure, shared with `gpuaas simulate`), with
        coverage judged per GPU (`coverage` is the lowest GPU's), plus the evidence rule: `expected`
        are the GPUs each pod requests, every one must have its own samples covering `min_coverage` of
        the window, and at least `held` GPUs (what the admission holds) must. One GPU's samples say
        nothing about another's: missing evidence for any GPU is never idle."""
        failed = first_idleness_failure(len(self.gpus), self.coverage, self.max_activity, threshold, min_coverage)
        target = f"{self.namespace}/{','.join(self.pods)}"
        if failed == NO_DATA:
            return (f"no DCGM samples for pod {target} in the last {self.window_seconds:g}s "
                    f"(neither {ENGINE_ACTIVE} nor {GPU_UTIL}, in either label spelling): idleness not confirmed")
        thin = min(self.gpus, key=self.gpu_coverage)
        if failed == SHORT_COVERAGE or self.gpu_coverage(thin) < min_coverage:
            return (f"DCGM samples for {thin.hostname}/gpu{thin.gpu} (pod {self.namespace}/{thin.pod}) cover "
                    f"{self.gpu_coverage(thin):.0%} of the {self.window_seconds:g}s window (need every GPU covering at least "
                    f"{min_coverage:.0%}; largest gap {self.largest_gap_seconds:.1f}s): idleness not confirmed")
        missing = self._missing_evidence(min_coverage, expected or {}, held)
        if missing:
            return missing
        if failed is None:
            return None
        busy = [g for g in self.gpus if g.max_activity > threshold]
        parts = ", ".join(f"{g.hostname}/gpu{g.gpu} reached {g.max_activity:.0%}" for g in busy)
        return f"pod {target} used its GPUs in the last {self.window_seconds:g}s ({parts}; threshold {threshold:.0%})"

    def gpu_coverage(self, gpu: GpuObservation) -> float:
        """One GPU's coverage: its own when measured, else the window's."""
        return self.coverage if gpu.coverage is None else gpu.coverage

    def _missing_evidence(self, min_coverage: float, expected: Mapping[str, int], held: int) -> str | None:
        covered = [g for g in self.gpus if self.gpu_coverage(g) >= min_coverage]
        for pod, count in sorted(expected.items()):
            seen = sum(1 for g in covered if g.pod == pod)
            if count > 0 and seen < count:
                return (f"pod {self.namespace}/{pod} holds {count} GPU(s); {seen} of them have DCGM samples covering "
                        f"at least {min_coverage:.0%} of the {self.window_seconds:g}s window: idleness not confirmed "
                        "for every GPU")
        if held and len(covered) < held:
            return (f"the workload holds {held} GPU(s) but DCGM samples cover {len(covered)} of them: "
                    "idleness not confirmed for every GPU")
        return None

    def as_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace, "pods": list(self.pods), "windowSeconds": self.window_seconds,
            "evaluatedAt": self.evaluated_at, "maxActivity": self.max_activity,
            "coverage": round(self.coverage, 4), "largestGapSeconds": round(self.largest_gap_seconds, 3),
            "gpus": [g.as_dict() for g in self.gpus], "notes": list(self.notes),
        }


def _quote(value: str) -> str:
    """A PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _pod_matcher(pods: Iterable[str]) -> str:
    """A RE2 alternation matching exactly the given pod names (Prometheus anchors =~ matchers)."""
    return "|".join(re.escape(p) for p in sorted(set(pods)))


def activity_selectors(namespace: str, pods: Iterable[str], window_seconds: float) -> dict[str, str]:
    """The range-vector selectors the gateway sends, keyed by label spelling ("plain", "exported").

    Exposed so the README and tests show exactly what is asked of Prometheus.
    """
    pods = list(pods)
    names = f"{ENGINE_ACTIVE}|{GPU_UTIL}"
    window = f"{max(1, math.ceil(window_seconds))}s"
    out: dict[str, str] = {}
    for spelling, (ns_label, pod_label) in zip(("plain", "exported"), LABEL_SPELLINGS, strict=True):
        # A plain-spelling series that also has exported_pod is the exporter pod's own target labels.
        extra = ', exported_pod=""' if spelling == "plain" else ""
        out[spelling] = (f'{{__name__=~"{names}", {ns_label}={_quote(namespace)}, '
                         f'{pod_label}=~{_quote(_pod_matcher(pods))}{extra}}}[{window}]')
    return out


def _coverage(timestamps: list[float], start: float, end: float, tolerance: float) -> tuple[float, float]:
    """(covered share of [start, end], largest gap). Gaps longer than `tolerance` are uncovered,
    including the stretch before the first and after the last sample."""
    window = end - start
    if window <= 0 or not timestamps:
        return 0.0, window
    points = sorted(set(timestamps))
    covered = 0.0
    largest = 0.0
    edges = [start] + points + [end]
    for left, right in itertools.pairwise(edges):
        gap = right - left
        largest = max(largest, gap)
        covered += gap if gap <= tolerance else 0.0
    return min(1.0, covered / window), largest


class MetricsGateway:
    """Reads GPU activity from Prometheus with `prometheus-api-client`.

    `url` defaults to `$GPUAAS_PROMETHEUS_URL`, else the in-cluster Prometheus Operator service.
    """

    def __init__(self, url: str | None = None, *, timeout_seconds: float = 10.0, retries: int = 2,
                 headers: dict[str, str] | None = None, token_file: str | None = None,
                 ca_file: str | None = None) -> None:
        self.url = (url or os.environ.get("GPUAAS_PROMETHEUS_URL") or DEFAULT_PROMETHEUS_URL).rstrip("/")
        self.timeout_seconds = timeout_seconds
        self.retries = retries
        self.headers = headers
        self.token_file = token_file if token_file is not None else os.environ.get(TOKEN_FILE_ENV) or None
        self.ca_file = ca_file if ca_file is not None else os.environ.get(CA_FILE_ENV) or None
        self._client: PrometheusConnect | None = None

    def _headers(self) -> dict[str, str] | None:
        """The configured headers plus the bearer token, read now (a projected token is rotated in place)."""
        if not self.token_file:
            return self.headers
        try:
            with open(self.token_file, encoding="utf-8") as handle:
                token = handle.read().strip()
        except OSError as error:
            raise MetricsUnavailable(f"cannot read the Prometheus bearer token from {self.token_file} "
                                     f"({TOKEN_FILE_ENV}): {error}; check the pod's ServiceAccount token mount") from error
        return {**(self.headers or {}), "Authorization": f"Bearer {token}"}

    # -- edges -------------------------------------------------------------------------------
    def _connect(self) -> PrometheusConnect:
        if self._client is None:
            from prometheus_api_client.prometheus_connect import PrometheusConnect
            from urllib3.util.retry import Retry

            # Short, bounded retries: the step itself is retried by Argo on exit code 75.
            retry = Retry(total=self.retries, backoff_factor=0.2, status_forcelist=[502, 503, 504],
                          allowed_methods=["GET", "POST"], raise_on_status=False)
            self._client = PrometheusConnect(url=self.url, headers=self._headers(), retry=retry,
                                             timeout=self.timeout_seconds)
            # An https endpoint is verified: against the configured CA (OpenShift's service CA), else the system's.
            self._client._session.verify = self.ca_file or True
        return self._client

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """Run an instant query; translate failures into MetricsUnavailable / MetricsQueryError."""
        import requests
        from prometheus_api_client.exceptions import PrometheusApiClientException

        params = {"time": f"{at:.3f}"} if at is not None else None
        try:
            return self._connect().custom_query(promql, params=params)
        except requests.exceptions.RequestException as exc:
            raise MetricsUnavailable(
                f"Prometheus at {self.url} is unreachable ({type(exc).__name__}: {exc}); "
                "check GPUAAS_PROMETHEUS_URL and that Prometheus is running; the step will be retried"
            ) from exc
        except PrometheusApiClientException as exc:
            text = str(exc)
            match = re.search(r"HTTP Status Code (\d+)", text)
            status = int(match.group(1)) if match else 0
            if status >= 500 or status in (408, 429) or status == 0:
                raise MetricsUnavailable(f"Prometheus at {self.url} failed ({text}); the step will be retried") from exc
            raise MetricsQueryError(f"Prometheus at {self.url} rejected the query {promql!r}: {text}") from exc
        except ValueError as exc:  # a non-JSON answer: not Prometheus, or a proxy error page
            raise MetricsUnavailable(f"Prometheus at {self.url} answered something that is not JSON: {exc}") from exc

    def ready(self) -> bool:
        """True when Prometheus answers a trivial query."""
        try:
            self.query("vector(1)")
            return True
        except MetricsError:
            return False

    # -- the kinds' own metrics: requests served, training progress ------------------------------
    def _scalar(self, promql: str, at: float | None) -> float | None:
        """The single value of an aggregated instant query; None when no series matched."""
        result = self.query(promql, at=at)
        if not result:
            return None
        value = float(result[0].get("value", [0, "nan"])[1])
        return None if math.isnan(value) else value

    def _selector(self, names: Iterable[str], namespace: str, pods: Iterable[str], window_seconds: float) -> str:
        pattern = "|".join(re.escape(n) for n in names)
        window = f"{max(1, math.ceil(window_seconds))}s"
        return (f'{{__name__=~"{pattern}", namespace={_quote(namespace)}, pod=~{_quote(_pod_matcher(pods))}}}'
                f"[{window}]")

    def counter_increase(self, names: Iterable[str], namespace: str, pods: Iterable[str], window_seconds: float,
                         *, at: float | None = None) -> float | None:
        """How much the counters `names` of the pods grew over the window (summed); None without a series."""
        names = list(names)
        if not names:
            return None
        return self._scalar(f"sum(increase({self._selector(names, namespace, pods, window_seconds)}))", at)

    def gauge_max(self, names: Iterable[str], namespace: str, pods: Iterable[str], window_seconds: float,
                  *, at: float | None = None) -> float | None:
        """The highest value of the gauges `names` of the pods over the window; None without a series."""
        names = list(names)
        if not names:
            return None
        return self._scalar(f"max(max_over_time({self._selector(names, namespace, pods, window_seconds)}))", at)

    # -- the question the reactions ask ----------------------------------------------------------
    def gpu_activity(self, namespace: str, pods: str | Iterable[str], window_seconds: float,
                     *, at: float | None = None, gap_tolerance_seconds: float | None = None) -> GpuActivity:
        """GPU activity of `pods` in `namespace` over the `window_seconds` before `at` (default now).

        Per GPU (UUID, else Hostname+gpu index), ENGINE_ACTIVE is preferred; GPU_UTIL/100 is used
        when a GPU has no ENGINE_ACTIVE series. Coverage counts time between consecutive samples no
        further apart than `gap_tolerance_seconds` (default: 3x the median scrape interval, at
        least 1 s), so an exporter outage inside the window lowers the coverage.
        """
        if not namespace:
            raise ValueError("namespace: expected a Kubernetes namespace name, found an empty string")
        pod_list = [pods] if isinstance(pods, str) else list(pods)
        pod_list = [p for p in pod_list if p]
        if not pod_list:
            raise ValueError("pods: expected at least one pod name, found none")
        if not window_seconds or window_seconds <= 0:
            raise ValueError(f"window_seconds: expected a positive number of seconds, found {window_seconds!r}")
        end = time.time() if at is None else at
        start = end - window_seconds

        per_gpu: dict[tuple[str, str], dict[str, Any]] = {}
        for spelling, selector in activity_selectors(namespace, pod_list, window_seconds).items():
            ns_label, pod_label = LABEL_SPELLINGS[0] if spelling == "plain" else LABEL_SPELLINGS[1]
            for series in self.query(selector, at=end):
                labels = series.get("metric", {})
                values = series.get("values") or []
                name = labels.get("__name__", "")
                if name not in (ENGINE_ACTIVE, GPU_UTIL) or not values:
                    continue
                scale = 0.01 if name == GPU_UTIL else 1.0
                points = [(float(ts), float(v) * scale) for ts, v in values
                          if not math.isnan(float(v)) and float(ts) > start]
                if not points:
                    continue
                gpu_key = labels.get("UUID") or f"{labels.get('Hostname', labels.get('hostname', '?'))}/{labels.get('gpu', '?')}"
                entry = per_gpu.setdefault((gpu_key, name), {
                    "labels": labels, "spelling": spelling, "points": [],
                    "namespace": labels.get(ns_label, ""), "pod": labels.get(pod_label, ""),
                })
                entry["points"].extend(points)

        chosen: list[tuple[str, str, dict[str, Any], list[tuple[float, float]]]] = []
        intervals: list[float] = []
        for uuid in sorted({k[0] for k in per_gpu}):
            metric = ENGINE_ACTIVE if (uuid, ENGINE_ACTIVE) in per_gpu else GPU_UTIL
            entry = per_gpu[(uuid, metric)]
            points = sorted(entry["points"])
            chosen.append((uuid, metric, entry, points))
            stamps = sorted({ts for ts, _ in points})
            intervals.extend(b - a for a, b in itertools.pairwise(stamps) if b > a)
        if gap_tolerance_seconds is None:
            steps = sorted(intervals)
            median = steps[len(steps) // 2] if steps else window_seconds
            gap_tolerance_seconds = max(1.0, 3 * median)

        observations: list[GpuObservation] = []
        largest = window_seconds if not chosen else 0.0
        for uuid, metric, entry, points in chosen:
            covered, gap = _coverage([ts for ts, _ in points], start, end, gap_tolerance_seconds)
            largest = max(largest, gap)
            labels = entry["labels"]
            observations.append(GpuObservation(
                uuid=uuid, hostname=labels.get("Hostname", labels.get("hostname", "")), gpu=labels.get("gpu", ""),
                namespace=entry["namespace"], pod=entry["pod"], metric=metric,
                label_spelling=entry["spelling"], max_activity=max(v for _, v in points),
                samples=len(points), first_seen=points[0][0], last_seen=points[-1][0], coverage=covered,
            ))
        coverage = min((o.coverage or 0.0 for o in observations), default=0.0)

        notes: list[str] = []
        if any(o.metric == GPU_UTIL for o in observations):
            notes.append(f"{GPU_UTIL}/100 used where {ENGINE_ACTIVE} is absent (DCGM profiling metrics off)")
        return GpuActivity(
            namespace=namespace, pods=tuple(sorted(set(pod_list))), window_seconds=float(window_seconds),
            evaluated_at=end, gpus=tuple(observations), coverage=coverage, largest_gap_seconds=largest,
            gap_tolerance_seconds=gap_tolerance_seconds, notes=tuple(notes),
        )
