"""Backfilled history in a real Prometheus: hours of series written in seconds, with Prometheus's own tools.

Proving a dashboard or a quota recommendation needs hours (or days) of DCGM, kube-state-metrics,
Kueue and Argo series; scraping them live would take that long. Prometheus ships the way to write
the past: `promtool tsdb create-blocks-from openmetrics` turns an OpenMetrics file with timestamps
into TSDB blocks, and `promtool tsdb create-blocks-from rules` evaluates recording rules over a
time range against a running Prometheus and writes their results as blocks too. Both exist in the
Debian Prometheus 2.42.

Rules backfill evaluates each rule against what the Prometheus already holds, so a rule that reads
another recording rule only sees it once the first one's blocks are loaded: `rule_stages` orders
the recording rules by dependency, and `BackfilledPrometheus` loads one stage at a time (start
Prometheus, backfill the stage, stop, move the blocks into the TSDB).

    history = OpenMetricsHistory()
    history.add("kueue_cluster_queue_nominal_quota", {"cluster_queue": "a", ...}, t, 4)
    with BackfilledPrometheus(history, rule_groups, start=t0, end=t1) as prometheus:
        prometheus.query_range(...)
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Self

import yaml

from engine.monitoring import Monitoring, MonitoringUnavailable, availability

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


class OpenMetricsHistory:
    """Samples with timestamps, written as one OpenMetrics file (families grouped, time ascending)."""

    def __init__(self) -> None:
        self._series: dict[str, dict[tuple[tuple[str, str], ...], dict[float, float]]] = defaultdict(dict)

    def add(self, name: str, labels: dict[str, str], timestamp: float, value: float) -> None:
        """One sample; `timestamp` in Unix seconds. A second value at the same time replaces the first."""
        if not _NAME.fullmatch(name):
            raise ValueError(f"name: expected a Prometheus metric name, found {name!r}")
        key = tuple(sorted((k, str(v)) for k, v in labels.items() if v != ""))
        self._series[name].setdefault(key, {})[round(float(timestamp), 3)] = float(value)

    def add_samples(self, samples: Iterable[Any], timestamp: float) -> None:
        """Objects with `.name`, `.labels`, `.value` (engine.exporter.Sample): an exporter's state at one time."""
        for sample in samples:
            self.add(sample.name, sample.labels, timestamp, sample.value)

    @property
    def series_count(self) -> int:
        return sum(len(by_labels) for by_labels in self._series.values())

    @property
    def sample_count(self) -> int:
        return sum(len(points) for by_labels in self._series.values() for points in by_labels.values())

    def time_range(self) -> tuple[float, float]:
        times = [t for by_labels in self._series.values() for points in by_labels.values() for t in points]
        if not times:
            raise ValueError("the history is empty: add samples first")
        return min(times), max(times)

    def render(self) -> str:
        # TYPE unknown: dcgm-exporter's counters do not end in _total, which OpenMetrics requires of
        # counters; the TSDB stores no type anyway.
        lines: list[str] = []
        for name in sorted(self._series):
            lines.append(f"# TYPE {name} unknown")
            for key, points in sorted(self._series[name].items()):
                body = ",".join(f'{k}="{_escape(v)}"' for k, v in key)
                prefix = f"{name}{{{body}}}" if body else name
                for timestamp in sorted(points):
                    lines.append(f"{prefix} {_number(points[timestamp])} {timestamp:.3f}")
        lines.append("# EOF")
        return "\n".join(lines) + "\n"


def _promtool() -> str:
    found = availability()
    if not found.promtool:
        raise MonitoringUnavailable(found.reason)
    return found.promtool


def create_blocks(history: OpenMetricsHistory, tsdb_dir: Path) -> subprocess.CompletedProcess[str]:
    """`promtool tsdb create-blocks-from openmetrics` into `tsdb_dir` (load it by starting Prometheus there)."""
    tsdb_dir.mkdir(parents=True, exist_ok=True)
    source = tsdb_dir.parent / "history.om.txt"
    source.write_text(history.render())
    result = subprocess.run([_promtool(), "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(source),
                             str(tsdb_dir)], capture_output=True, text=True, check=False, timeout=300)
    if result.returncode != 0:
        raise MonitoringUnavailable(f"promtool could not import the history ({source}): {result.stderr[-2000:]}")
    return result


def _referenced_records(expr: str, records: set[str]) -> set[str]:
    return {name for name in _NAME.findall(expr) if name in records}


def rule_stages(rule_groups: dict[str, Any]) -> list[dict[str, Any]]:
    """The recording rules as rule files in dependency order: stage n reads only raw series and stages < n.

    Alerting rules are left out (promtool backfills recording rules only).
    """
    rules = [(group["name"], rule) for group in rule_groups["groups"] for rule in group["rules"] if "record" in rule]
    records = {rule["record"] for _, rule in rules}
    depth: dict[str, int] = {}
    remaining = list(rules)
    level = 0
    while remaining:
        ready = [(g, r) for g, r in remaining
                 if all(depth.get(dep, math.inf) < level for dep in _referenced_records(r["expr"], records) - {r["record"]})]
        if not ready:
            names = ", ".join(r["record"] for _, r in remaining)
            raise ValueError(f"recording rules depend on each other in a cycle: {names}")
        for group, rule in ready:
            depth[rule["record"]] = level
        remaining = [item for item in remaining if item not in ready]
        level += 1
    stages: list[dict[str, Any]] = []
    for n in range(level):
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for group, rule in rules:
            if depth[rule["record"]] == n:
                groups[group].append({"record": rule["record"], "expr": rule["expr"]})
        stages.append({"groups": [{"name": f"{name}-stage{n}", "rules": items} for name, items in groups.items()]})
    return stages


class BackfilledPrometheus:
    """A real Prometheus whose TSDB holds `history` plus the recording rules evaluated over it.

    After the backfill the Prometheus runs with the full `rule_groups` (alerts included), so rules
    also evaluate live from `end` on. Use `evaluation_interval_s` small to get alerts quickly.
    """

    def __init__(self, history: OpenMetricsHistory, rule_groups: dict[str, Any], *, start: float, end: float,
                 eval_interval: str = "60s", evaluation_interval_s: float = 1.0,
                 workdir: str | Path | None = None) -> None:
        self.history = history
        self.rule_groups = rule_groups
        self.start_time, self.end_time = start, end
        self.eval_interval = eval_interval
        self.evaluation_interval_s = evaluation_interval_s
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="gpuaas-backfill-"))
        self.monitoring: Monitoring | None = None
        self.stages_loaded = 0

    @property
    def url(self) -> str:
        if self.monitoring is None:
            raise RuntimeError("not started")
        return self.monitoring.prometheus_url

    def _backfill_stage(self, stage: dict[str, Any], index: int) -> None:
        rules_file = self.workdir / f"stage{index}.rules.yml"
        rules_file.write_text(yaml.safe_dump(stage, sort_keys=False))
        output = self.workdir / f"stage{index}-blocks"
        with Monitoring(workdir=self.workdir) as loader:
            result = subprocess.run(
                [_promtool(), "tsdb", "create-blocks-from", "rules", f"--url={loader.prometheus_url}",
                 f"--start={int(self.start_time)}", f"--end={math.ceil(self.end_time)}",
                 f"--eval-interval={self.eval_interval}", f"--output-dir={output}", str(rules_file)],
                capture_output=True, text=True, check=False, timeout=600, cwd=self.workdir)
        if result.returncode != 0:
            raise MonitoringUnavailable(f"rules backfill of stage {index} failed: {result.stderr[-2000:]}")
        for block in output.iterdir():
            if block.is_dir():
                shutil.move(str(block), str(self.workdir / "tsdb" / block.name))
        shutil.rmtree(output, ignore_errors=True)

    def start(self) -> Self:
        create_blocks(self.history, self.workdir / "tsdb")
        try:
            for index, stage in enumerate(rule_stages(self.rule_groups)):
                self._backfill_stage(stage, index)
                self.stages_loaded += 1
            self.monitoring = Monitoring(rule_groups=self.rule_groups, workdir=self.workdir,
                                         evaluation_interval_s=self.evaluation_interval_s)
            self.monitoring.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.monitoring is not None:
            self.monitoring.stop()
            self.monitoring = None
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
