"""The trace directory format (`gpuaas simulate --trace DIR`), documented in docs/simulate.md.

`workloads.csv` (header required; one line per workload):

| column | meaning |
|---|---|
| `workload` | name, unique in the trace (activity.csv refers to it) |
| `namespace`, `tenant` | where it runs; tenant = ClusterQueue, which selects the policy's overrides |
| `kind` | owner kind (`Notebook`, `RayCluster`, `PyTorchJob`, `Deployment`, ...); the culler baseline reads it |
| `gpus` | GPUs it holds (whole number >= 1) |
| `start`, `end` | admission and finish: RFC 3339 (`2026-03-01T08:00:00Z`) or Unix seconds; end > start |
| `exempt` | optional: `true` when annotated `gpuaas.io/idle-policy: exempt` |
| `signal` | optional: the kind's own source the workload exposes: `jupyter`, `ray-jobs`, `requests`, `progress`, or empty (none) |
| `submitted` | optional: when it was submitted (it queued until `start`) |

`activity.csv` or `activity.csv.gz` (header required; one line per GPU sample):

| column | meaning |
|---|---|
| `time` | RFC 3339 or Unix seconds, within the workload's `[start, end)` |
| `workload` | a name from workloads.csv |
| `gpu` | GPU index 0 .. gpus-1 |
| `activity` | 0..1 (DCGM engine-active, or GPU utilisation / 100); empty = no sample |
| `pod` | optional: the pod holding the GPU (the alert is per pod); default one pod named after the workload |

A missing sample is "no data", never idle. Samples are binned to the replay's step (`--step`); a
bin holding several samples keeps the highest. Every reader error names the file, line and column.

`signals.csv` or `signals.csv.gz` (optional; header required): when each workload's own source
showed work (`flag` = `work`: a kernel busy or talked to, a Ray job pending or running, requests
served, progress made) or had a client connected (`flag` = `client`: a notebook's kernel connection),
as intervals `workload,flag,start,end` (times as above; a slot is flagged when its time is in
`[start, end)`). A workload with a `signal` source and no interval showed no work at all.

`queue.json` (optional): the cohort's queue, `{"capacity": GPUs, "jobs": {"submitted": [...],
"admitted": [... or null when never admitted], "gpus": [...], "duration": [...], "workload": [name or
null]}}` (gpuaas.simulate.demand).
"""

from __future__ import annotations

import csv
import gzip
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from gpuaas.simulate.demand import Queue
from gpuaas.simulate.history import (
    CLIENT,
    SOURCES,
    WORK,
    History,
    Pods,
    Signals,
    Workloads,
    allocate,
    grid_origin,
)

WORKLOAD_COLUMNS = ("workload", "namespace", "tenant", "kind", "gpus", "start", "end")
SIGNAL_FLAGS = {"work": WORK, "client": CLIENT}
ACTIVITY_COLUMNS = ("time", "workload", "gpu", "activity")
_WHOLE = re.compile(r"[0-9]{1,9}")
"""A whole number in ASCII digits (str.isdigit() takes "²", which int() refuses, and any length)."""
_NUMBER = re.compile(r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$")


class TraceError(ValueError):
    """A trace file is wrong. The message names the file, line and column and says what to do."""

    def __init__(self, path: Path | str, line: int | None, column: str | None, problem: str) -> None:
        where = str(path) + (f" line {line}" if line else "") + (f", column {column!r}" if column else "")
        super().__init__(f"{where}: {problem}")
        self.path, self.line, self.column = str(path), line, column


def parse_time(text: str) -> float:
    """Unix seconds from RFC 3339 or a number; ValueError otherwise."""
    value = text.strip()
    if _NUMBER.match(value):
        return float(value)
    moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return moment.timestamp()


def activity_path(directory: Path) -> Path:
    for name in ("activity.csv", "activity.csv.gz"):
        if (directory / name).is_file():
            return directory / name
    raise TraceError(directory, None, None, "expected activity.csv or activity.csv.gz in the trace directory, "
                     "found neither (see docs/simulate.md for the format)")


def read_workloads(path: Path) -> Workloads:
    """workloads.csv, validated line by line (it is small)."""
    if not path.is_file():
        raise TraceError(path, None, None, "expected workloads.csv in the trace directory, found no such file")
    names: list[str] = []
    columns: dict[str, list] = {c: [] for c in (*WORKLOAD_COLUMNS, "exempt", "signal", "submitted")}
    with path.open(newline="", encoding="utf-8-sig") as handle:  # -sig: spreadsheets write a byte order mark
        reader = csv.reader(handle)
        header = [h.strip() for h in next(reader, [])]
        missing = [c for c in WORKLOAD_COLUMNS if c not in header]
        if missing:
            raise TraceError(path, 1, missing[0], f"expected a header with {', '.join(WORKLOAD_COLUMNS)} "
                             f"(exempt optional), found {', '.join(header) or 'an empty file'}")
        at = {c: header.index(c) for c in header}
        seen: dict[str, int] = {}
        for line, row in enumerate(reader, start=2):
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) < len(header):
                raise TraceError(path, line, header[len(row)], f"expected {len(header)} columns, found {len(row)}")
            if len(row) > len(header):
                raise TraceError(path, line, None, f"expected {len(header)} columns (as many as the header), "
                                 f"found {len(row)}")

            def cell(name: str, row: list[str] = row) -> str:
                return row[at[name]].strip()

            name = cell("workload")
            if not name:
                raise TraceError(path, line, "workload", "expected a name, found an empty cell")
            if name in seen:
                raise TraceError(path, line, "workload", f"expected unique names, found {name!r} again "
                                 f"(first on line {seen[name]})")
            seen[name] = line
            for column in ("namespace", "tenant", "kind"):
                if not cell(column):
                    raise TraceError(path, line, column, "expected a value, found an empty cell")
            gpus_text = cell("gpus")
            if not _WHOLE.fullmatch(gpus_text) or int(gpus_text) < 1:  # not isdigit(): "²" and 5,000 digits
                raise TraceError(path, line, "gpus", f"expected a whole number >= 1, found {gpus_text!r}")
            times = {}
            for column in ("start", "end"):
                try:
                    times[column] = parse_time(cell(column))
                except ValueError:
                    raise TraceError(path, line, column, "expected RFC 3339 (2026-03-01T08:00:00Z) or Unix seconds, "
                                     f"found {cell(column)!r}") from None
            if times["end"] <= times["start"]:
                raise TraceError(path, line, "end", f"expected a time after start ({cell('start')}), "
                                 f"found {cell('end')!r}")
            exempt_text = cell("exempt").lower() if "exempt" in at and len(row) > at["exempt"] else ""
            if exempt_text not in ("", "true", "false", "yes", "no", "1", "0"):
                raise TraceError(path, line, "exempt", f"expected true or false, found {exempt_text!r}")
            signal = cell("signal") if "signal" in at and len(row) > at["signal"] else ""
            if signal not in ("", *SOURCES):
                raise TraceError(path, line, "signal", f"expected one of {', '.join(SOURCES)} or nothing, found {signal!r}")
            submitted_text = cell("submitted") if "submitted" in at and len(row) > at["submitted"] else ""
            submitted = times["start"]
            if submitted_text:
                try:
                    submitted = parse_time(submitted_text)
                except ValueError:
                    raise TraceError(path, line, "submitted", "expected RFC 3339 or Unix seconds, found "
                                     f"{submitted_text!r}") from None
                if submitted > times["start"]:
                    raise TraceError(path, line, "submitted", f"expected a time at or before start ({cell('start')}), "
                                     f"found {submitted_text!r}")
            columns["signal"].append(signal)
            columns["submitted"].append(submitted)
            names.append(name)
            for column in ("namespace", "tenant", "kind"):
                columns[column].append(cell(column))
            columns["gpus"].append(int(gpus_text))
            columns["start"].append(times["start"])
            columns["end"].append(times["end"])
            columns["exempt"].append(exempt_text in ("true", "yes", "1"))
    if not names:
        raise TraceError(path, None, None, "expected at least one workload, found none")
    workloads = Workloads.build(name=names, namespace=columns["namespace"], tenant=columns["tenant"],
                                kind=columns["kind"], gpus=columns["gpus"], start=columns["start"], end=columns["end"],
                                exempt=columns["exempt"])
    workloads.extras = {"signal": np.asarray(columns["signal"], dtype=object),  # type: ignore[attr-defined]
                        "submitted": np.asarray(columns["submitted"], dtype=np.float64),
                        "has_signal": "signal" in header, "has_submitted": "submitted" in header}
    return workloads


def _first_bad_line(path: Path, column: str, check: callable) -> tuple[int, str]:  # type: ignore[valid-type]
    """Scan the file with the csv module for the first cell of `column` that `check` rejects."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="", encoding="utf-8-sig") as handle:  # type: ignore[operator]
        reader = csv.reader(handle)
        header = [h.strip() for h in next(reader, [])]
        index = header.index(column)
        for line, row in enumerate(reader, start=2):
            if len(row) <= index:
                return line, f"expected {len(header)} columns, found {len(row)}"
            problem = check(row[index])
            if problem:
                return line, problem
    return 0, ""


def _first_ragged_line(path: Path) -> tuple[int, str]:
    """The first data line with more or fewer cells than the header (0 when there is none)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="", encoding="utf-8-sig") as handle:  # type: ignore[operator]
        reader = csv.reader(handle)
        width = len(next(reader, []))
        for line, row in enumerate(reader, start=2):
            if row and len(row) != width:
                return line, f"expected {width} columns (as many as the header), found {len(row)}"
    return 0, ""


def _time_problem(text: str) -> str:
    try:
        parse_time(text)
        return ""
    except ValueError:
        return f"expected RFC 3339 or Unix seconds, found {text!r}"


def _number_problem(kind: str) -> callable:  # type: ignore[valid-type]
    def check(text: str) -> str:
        value = text.strip()
        if kind == "activity" and value == "":
            return ""
        if kind == "gpu":
            return "" if _WHOLE.fullmatch(value) else f"expected a GPU index (0, 1, ...), found {text!r}"
        return "" if _NUMBER.match(value) else f"expected a number between 0 and 1 (or an empty cell), found {text!r}"
    return check


def _activity_header(path: Path) -> list[str]:
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as handle:  # type: ignore[operator]
            header_bytes = handle.readline()
    except (OSError, EOFError) as error:
        raise TraceError(path, None, None, f"cannot read it ({error})") from None
    header = [h.strip() for h in next(csv.reader([header_bytes.decode("utf-8-sig", "replace").strip()]), [])]
    missing = [c for c in ACTIVITY_COLUMNS if c not in header]
    if missing:
        raise TraceError(path, 1, missing[0], f"expected a header with {', '.join(ACTIVITY_COLUMNS)} (pod optional), "
                         f"found {', '.join(header) or ('an empty file' if not header_bytes.strip() else 'nothing')}")
    return header


def activity_batches(path: Path, header: list[str],
                     rows_per_batch: int = 2_000_000) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """activity.csv[.gz] as batches of arrays: (index of the batch's first data row, arrays: time (Unix
    seconds), workload_names/_codes, gpu, activity (NaN = no sample), pod_names/_codes).

    The file is parsed by Arrow's multi-threaded CSV reader with typed columns (a month of 1,000 GPUs,
    47 M rows, holds about 1.2 GB as Arrow columns), then handed out in batches so the numpy work
    stays bounded. The time column is read as numbers, else RFC 3339, else as text parsed per value
    (mixed files)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    failure: Exception | None = None
    table = None
    for time_type in (pa.float64(), pa.timestamp("ns", tz="UTC"), pa.string()):
        types = {"time": time_type, "workload": pa.dictionary(pa.int32(), pa.string()), "gpu": pa.int32(),
                 "activity": pa.float32()}
        if "pod" in header:
            types["pod"] = pa.dictionary(pa.int32(), pa.string())
        convert = pacsv.ConvertOptions(column_types=types, null_values=[""], strings_can_be_null=False,
                                       include_columns=[c for c in header if c in types])
        try:
            table = pacsv.read_csv(path, convert_options=convert, read_options=pacsv.ReadOptions(block_size=1 << 24))
            break
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as error:
            failure = error
    if table is None:
        line, problem = _first_ragged_line(path)
        if line:
            raise TraceError(path, line, None, problem) from None
        for column, check in (("gpu", _number_problem("gpu")), ("activity", _number_problem("activity")),
                              ("time", _time_problem)):
            line, problem = _first_bad_line(path, column, check)
            if line:
                raise TraceError(path, line, column, problem) from None
        raise TraceError(path, None, None, f"not a valid CSV file ({failure})") from None
    offset = 0
    try:
        for batch in table.to_batches(max_chunksize=rows_per_batch):
            yield offset, _batch_arrays(batch, path, pa, pc)
            offset += batch.num_rows
    finally:
        del table
        pa.default_memory_pool().release_unused()


def _batch_arrays(batch, path: Path, pa, pc) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    times = batch.column("time")
    if pa.types.is_floating(times.type):
        time = times.to_numpy(zero_copy_only=False)
    elif pa.types.is_timestamp(times.type):
        time = times.cast(pa.int64()).to_numpy(zero_copy_only=False) / 1e9
    else:
        numeric = pc.match_substring_regex(times, _NUMBER.pattern).to_numpy(zero_copy_only=False)
        time = np.empty(len(times), dtype=np.float64)
        time[numeric] = pc.cast(times.filter(pa.array(numeric)), pa.float64()).to_numpy(zero_copy_only=False)
        try:
            stamps = pc.cast(times.filter(pa.array(~numeric)), pa.timestamp("ns", tz="UTC"))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            line, problem = _first_bad_line(path, "time", _time_problem)
            raise TraceError(path, line or None, "time", problem or "expected RFC 3339 or Unix seconds") from None
        time[~numeric] = stamps.cast(pa.int64()).to_numpy(zero_copy_only=False) / 1e9
    workload = batch.column("workload")
    out = {"time": time, "workload_names": np.asarray(workload.dictionary.to_pylist(), dtype=object),
           "workload_codes": workload.indices.to_numpy(zero_copy_only=False),
           "gpu": batch.column("gpu").to_numpy(zero_copy_only=False),
           "activity": batch.column("activity").to_numpy(zero_copy_only=False).astype(np.float32)}
    if "pod" in batch.schema.names:
        pod = batch.column("pod")
        out["pod_names"] = np.asarray(pod.dictionary.to_pylist(), dtype=object)
        out["pod_codes"] = pod.indices.to_numpy(zero_copy_only=False)
    return out


def _first_row(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _workloads_of(data: dict[str, np.ndarray], lookup: dict[str, int], path: Path, offset: int) -> np.ndarray:
    codes = np.asarray([lookup.get(name, -1) for name in data["workload_names"].tolist()], dtype=np.int64)
    workload = codes[data["workload_codes"]] if len(data["workload_codes"]) else np.zeros(0, np.int64)
    if np.any(workload < 0):
        row = _first_row(workload < 0)
        raise TraceError(path, offset + row + 2, "workload", f"expected a workload of workloads.csv, found "
                         f"{data['workload_names'][data['workload_codes'][row]]!r}")
    return workload


def read_trace(directory: Path | str, step: float = 60.0) -> History:
    """A trace directory as a History on a grid of `step` seconds, in one pass over activity.csv.

    Samples go into columns in GPU order; pods (the optional `pod` column) are collected on the way
    and the columns regrouped by pod at the end."""
    directory = Path(directory)
    if not directory.is_dir():
        raise TraceError(directory, None, None, "expected a trace directory with workloads.csv and activity.csv[.gz]")
    workloads = read_workloads(directory / "workloads.csv")
    path = activity_path(directory)
    header = _activity_header(path)
    lookup = {name: index for index, name in enumerate(workloads.name.tolist())}
    history = allocate(grid_origin(workloads.start, step), step, workloads, workloads.gpus,
                       source=f"trace {directory}")
    pods = _PodsSeen(workloads, path) if "pod" in header else None
    for offset, data in activity_batches(path, header):
        workload = _workloads_of(data, lookup, path, offset)
        gpu, activity, time = data["gpu"], data["activity"], data["time"]
        held = workloads.gpus[workload]
        if len(gpu) and (np.any(gpu < 0) or np.any(gpu >= held)):
            row = _first_row((gpu < 0) | (gpu >= held))
            raise TraceError(path, offset + row + 2, "gpu", f"expected 0 .. {held[row] - 1} (the workload holds "
                             f"{held[row]} GPU(s)), found {gpu[row]}")
        sampled = ~np.isnan(activity)
        if np.any(sampled & ((activity < 0) | (activity > 1))):
            row = _first_row(sampled & ((activity < 0) | (activity > 1)))
            raise TraceError(path, offset + row + 2, "activity",
                             f"expected a number between 0 and 1, found {activity[row]:g}")
        outside = (time < workloads.start[workload]) | (time >= workloads.end[workload])
        if np.any(outside):
            row = _first_row(outside)
            w = workload[row]
            raise TraceError(path, offset + row + 2, "time", f"expected a time within {workloads.name[w]}'s "
                             f"lifetime [{_iso(workloads.start[w])}, {_iso(workloads.end[w])}), found {_iso(time[row])}")
        if pods is not None:
            pods.add(workload, gpu, data, offset)
        _scatter(history, workload[sampled], gpu[sampled], time[sampled], activity[sampled])
    if pods is not None:
        pods.regroup(history)
    extras = getattr(workloads, "extras", {})
    if extras.get("has_submitted"):
        history.submitted = extras["submitted"]
    signals = _signals_path(directory)
    if extras.get("has_signal") or signals is not None:
        history.signals = read_signals(history, signals, extras.get("signal"))
    if (directory / "queue.json").is_file():
        history.queue = read_queue(directory / "queue.json", lookup)
    return history


def _signals_path(directory: Path) -> Path | None:
    for name in ("signals.csv", "signals.csv.gz"):
        if (directory / name).is_file():
            return directory / name
    return None


def read_signals(history: History, path: Path | None, sources: np.ndarray | None) -> Signals:
    """signals.csv[.gz] (intervals) onto the history's rows, vectorised (pyarrow reads the file)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    signals = Signals.none(history)
    if sources is not None:
        signals.source = np.asarray(sources, dtype=object)
    if path is None:
        return signals
    workloads = history.workloads
    lookup = {name: index for index, name in enumerate(workloads.name.tolist())}
    try:
        table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
            column_types={"workload": pa.string(), "flag": pa.string(), "start": pa.string(), "end": pa.string()}))
    except (pa.ArrowInvalid, OSError) as error:
        raise TraceError(path, None, None, f"expected CSV with workload, flag, start, end, found: {error}") from None
    missing = [c for c in ("workload", "flag", "start", "end") if c not in table.column_names]
    if missing:
        raise TraceError(path, 1, missing[0], f"expected a header with workload, flag, start, end, found "
                         f"{', '.join(table.column_names)}")
    names = table.column("workload").to_pylist()
    flags = table.column("flag").to_pylist()
    try:
        begin = np.asarray([parse_time(v) for v in table.column("start").to_pylist()], dtype=np.float64)
        end = np.asarray([parse_time(v) for v in table.column("end").to_pylist()], dtype=np.float64)
    except (ValueError, TypeError):
        raise TraceError(path, None, "start", "expected RFC 3339 or Unix seconds for start and end") from None
    unknown = next((i for i, n in enumerate(names) if n not in lookup), None)
    if unknown is not None:
        raise TraceError(path, unknown + 2, "workload", f"expected a workload of workloads.csv, found {names[unknown]!r}")
    bad = next((i for i, f in enumerate(flags) if f not in SIGNAL_FLAGS), None)
    if bad is not None:
        raise TraceError(path, bad + 2, "flag", f"expected work or client, found {flags[bad]!r}")
    workload = np.asarray([lookup[n] for n in names], dtype=np.int64)
    bits = np.asarray([SIGNAL_FLAGS[f] for f in flags], dtype=np.uint8)
    rows = history.rows
    first, slots, start = history.first[workload], history.slots[workload], workloads.start[workload]

    def row_of(when: np.ndarray) -> np.ndarray:
        """The first row of each workload whose time (slot start, the first clipped to the start) is >= when."""
        local = np.ceil((when - history.t0) / history.step - first - 1e-9).astype(np.int64)
        return np.where(start >= when, 0, np.clip(local, 0, slots))

    low, high = row_of(begin), row_of(end)
    for bit in (WORK, CLIENT):
        chosen = (bits == bit) & (high > low)
        marks = np.zeros(len(signals.flags) + 1, dtype=np.int64)
        np.add.at(marks, rows.start[workload[chosen]] + low[chosen], 1)
        np.add.at(marks, rows.start[workload[chosen]] + high[chosen], -1)
        signals.flags[np.cumsum(marks[:-1]) > 0] |= bit
    return signals


def read_queue(path: Path, lookup: dict[str, int]) -> Queue:
    import json

    try:
        document = json.loads(path.read_text())
        jobs = document["jobs"]
        admitted = np.asarray([np.inf if a is None else float(a) for a in jobs["admitted"]])
        workload = np.asarray([-1 if n is None else lookup[str(n)] for n in jobs["workload"]], dtype=np.int64)
        return Queue(capacity=int(document["capacity"]), submitted=np.asarray(jobs["submitted"], dtype=np.float64),
                     admitted=admitted, gpus=np.asarray(jobs["gpus"], dtype=np.int64),
                     duration=np.asarray(jobs["duration"], dtype=np.float64), workload=workload)
    except (ValueError, KeyError, TypeError) as error:
        raise TraceError(path, None, None, f"expected the queue as gpuaas writes it (capacity and jobs: submitted, "
                         f"admitted, gpus, duration, workload), found a problem: {error!r}") from None


class _PodsSeen:
    """Which pod holds each (workload, GPU), collected batch by batch; a GPU must stay in one pod."""

    def __init__(self, workloads: Workloads, path: Path) -> None:
        self.workloads = workloads
        self.path = path
        self.widest = int(workloads.gpus.max())
        self.pod_of = np.full(len(workloads) * self.widest, -1, dtype=np.int32)
        self.first_line = np.zeros(len(workloads) * self.widest, dtype=np.int64)
        self.names: list[str] = []
        self.ids: dict[str, int] = {}

    def add(self, workload: np.ndarray, gpu: np.ndarray, data: dict[str, np.ndarray], offset: int) -> None:
        local_ids = np.asarray([self.ids.setdefault(str(n), len(self.ids)) for n in data["pod_names"].tolist()],
                               dtype=np.int32)
        self.names = list(self.ids)
        pod = local_ids[data["pod_codes"]] if len(data["pod_codes"]) else np.zeros(0, np.int32)
        key = workload * self.widest + gpu
        fresh = self.pod_of[key] < 0
        lines = offset + np.arange(len(key), dtype=np.int64) + 2
        # the first row of each fresh key in this batch claims it
        order = np.flatnonzero(fresh)[::-1]
        self.pod_of[key[order]] = pod[order]
        self.first_line[key[order]] = lines[order]
        moved = self.pod_of[key] != pod
        if np.any(moved):
            row = _first_row(moved)
            k = int(key[row])
            raise TraceError(self.path, offset + row + 2, "pod", f"expected GPU {k % self.widest} of "
                             f"{self.workloads.name[k // self.widest]} to stay in pod "
                             f"{self.names[self.pod_of[k]]!r} (line {self.first_line[k]}), found "
                             f"{self.names[pod[row]]!r}")

    def regroup(self, history: History) -> None:
        """Group each workload's columns by pod (pods by name, GPUs by index) and set history.pods."""
        workloads = self.workloads
        names: list[str] = []
        owners: list[int] = []
        firsts: list[int] = []
        widths: list[int] = []
        for w in range(len(workloads)):
            gpus = int(workloads.gpus[w])
            seen = self.pod_of[w * self.widest:w * self.widest + gpus].tolist()
            known = sorted({self.names[p] for p in seen if p >= 0})
            default = known[0] if known else str(workloads.name[w])
            by_gpu = [self.names[p] if p >= 0 else default for p in seen]
            order = sorted(range(gpus), key=lambda g, by_gpu=by_gpu: (by_gpu[g], g))
            column = 0
            for pod_name in sorted(set(by_gpu)):
                width = sum(1 for g in order if by_gpu[g] == pod_name)
                names.append(pod_name)
                owners.append(w)
                firsts.append(column)
                widths.append(width)
                column += width
            if order != list(range(gpus)):
                block = history.block(w)
                block[:] = block[:, order]
        history.pods = Pods(name=np.asarray(names, dtype=object), workload=np.asarray(owners, dtype=np.int64),
                            first_column=np.asarray(firsts, dtype=np.int64), columns=np.asarray(widths, dtype=np.int64))


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(float(seconds), UTC).isoformat().replace("+00:00", "Z")


def _scatter(history: History, workload: np.ndarray, column: np.ndarray, time: np.ndarray,
             values: np.ndarray) -> None:
    """Put samples into the history's blocks; a slot with several samples keeps the highest."""
    if len(workload) == 0:
        return
    slot = np.floor((time - history.t0) / history.step + 1e-9).astype(np.int64)
    local = slot - history.first[workload]
    index = history.offset[workload] + local * history.columns[workload] + column
    history.activity[index] = values
    written = history.activity[index]
    lost = written != values
    if np.any(lost):
        np.fmax.at(history.activity, index[lost], values[lost])


def write_trace(history: History, directory: Path | str, *, compress: bool = True,
                progress: callable | None = None) -> Path:  # type: ignore[valid-type]
    """Write `history` in the trace format (times as Unix seconds; one sample per slot)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    workloads = history.workloads
    signals = history.signals
    with (directory / "workloads.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        extra = (["signal"] if signals is not None else []) + (["submitted"] if history.submitted is not None else [])
        writer.writerow([*WORKLOAD_COLUMNS, "exempt", *extra])
        for w in range(len(workloads)):
            row = [workloads.name[w], workloads.namespace[w], workloads.tenant[w], workloads.kind[w],
                   int(workloads.gpus[w]), _seconds_text(workloads.start[w]),
                   _seconds_text(workloads.end[w]), "true" if workloads.exempt[w] else "false"]
            if signals is not None:
                row.append(signals.source[w])
            if history.submitted is not None:
                row.append(_seconds_text(history.submitted[w]))
            writer.writerow(row)
    if signals is not None:
        _write_signals(history, directory / ("signals.csv.gz" if compress else "signals.csv"), compress)
    if history.queue is not None:
        _write_queue(history, directory / "queue.json")
    multi_pod = len(history.pods) != len(workloads) or np.any(history.pods.name != workloads.name[history.pods.workload])
    pod_of_column = _pod_of_columns(history)
    target = directory / ("activity.csv.gz" if compress else "activity.csv")
    names = pa.array(workloads.name.tolist(), type=pa.string())
    pod_names = pa.array(history.pods.name.tolist(), type=pa.string())
    batch = max(1, 2_000_000 // max(int(history.columns.mean()) * max(int(history.slots.mean()), 1), 1))
    # gzip level 1: several times faster than the default and a few percent larger
    opener = (lambda path: gzip.open(path, "wb", compresslevel=1)) if compress else (lambda path: open(path, "wb"))  # noqa: SIM115
    with opener(target) as sink:
        header_written = False
        for begin in range(0, len(workloads), batch):
            chunk = range(begin, min(begin + batch, len(workloads)))
            table = _activity_table(history, chunk, names, pod_names, pod_of_column, multi_pod)
            if not header_written:
                sink.write((",".join(table.column_names) + "\n").encode())
                header_written = True
            buffer = pa.BufferOutputStream()
            pacsv.write_csv(table, buffer, write_options=pacsv.WriteOptions(include_header=False,
                                                                            quoting_style="none"))
            sink.write(buffer.getvalue().to_pybytes())
            if progress is not None:
                progress(chunk.stop / len(workloads))
    return directory


def _write_signals(history: History, target: Path, compress: bool) -> None:
    """The signal flags as intervals of consecutive flagged rows per workload."""
    signals = history.signals
    assert signals is not None
    rows = history.rows
    workloads = history.workloads
    owner = rows.owner
    local = np.arange(len(owner)) - rows.start[owner]
    times = np.maximum(history.t0 + (history.first[owner] + local) * history.step, workloads.start[owner])
    ends = np.minimum(history.t0 + (history.first[owner] + local + 1) * history.step, workloads.end[owner])
    opener = (lambda path: gzip.open(path, "wt", compresslevel=1, newline="")) if compress else \
        (lambda path: open(path, "w", newline=""))  # noqa: SIM115
    with opener(target) as handle:
        writer = csv.writer(handle)
        writer.writerow(["workload", "flag", "start", "end"])
        for flag_name, bit in SIGNAL_FLAGS.items():
            flagged = (signals.flags & bit) > 0
            first_row = np.zeros(len(owner), dtype=bool)
            first_row[rows.start[rows.count > 0]] = True
            previous = np.r_[False, flagged[:-1]] & ~first_row
            starts = np.flatnonzero(flagged & ~previous)
            last_row = np.zeros(len(owner), dtype=bool)
            last_row[(rows.start + rows.count - 1)[rows.count > 0]] = True
            following = np.r_[flagged[1:], False] & ~last_row
            stops = np.flatnonzero(flagged & ~following)
            for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
                writer.writerow([workloads.name[owner[a]], flag_name, _seconds_text(times[a]), _seconds_text(ends[b])])


def _write_queue(history: History, target: Path) -> None:
    import json

    queue = history.queue
    assert queue is not None
    names = history.workloads.name
    document = {"capacity": int(queue.capacity), "jobs": {
        "submitted": [float(v) for v in queue.submitted.tolist()],
        "admitted": [None if not np.isfinite(v) else float(v) for v in queue.admitted.tolist()],
        "gpus": [int(v) for v in queue.gpus.tolist()], "duration": [float(v) for v in queue.duration.tolist()],
        "workload": [None if w < 0 else str(names[w]) for w in queue.workload.tolist()]}}
    target.write_text(json.dumps(document, separators=(",", ":")))


def _seconds_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _pod_of_columns(history: History) -> list[np.ndarray]:
    pods = history.pods
    out = [np.zeros(int(c), dtype=np.int64) for c in history.columns]
    for pod in range(len(pods)):
        w = int(pods.workload[pod])
        first = int(pods.first_column[pod])
        out[w][first:first + int(pods.columns[pod])] = pod
    return out


def _activity_table(history: History, chunk: range, names, pod_names, pod_of_column: list[np.ndarray],
                    multi_pod: bool):
    import pyarrow as pa

    times, workload_idx, gpus, values, pods = [], [], [], [], []
    for w in chunk:
        block = history.block(w)
        rows_, cols = np.nonzero(block >= 0)
        if len(rows_) == 0:
            continue
        slot_time = history.t0 + (history.first[w] + rows_) * history.step
        times.append(np.maximum(slot_time, history.workloads.start[w]))
        workload_idx.append(np.full(len(rows_), w, dtype=np.int32))
        gpus.append(cols.astype(np.int64))
        values.append(block[rows_, cols])
        pods.append(pod_of_column[w][cols].astype(np.int32))
    if not times:
        empty = {"time": pa.array([], pa.float64()), "workload": pa.array([], pa.string()),
                 "gpu": pa.array([], pa.int64()), "activity": pa.array([], pa.float32())}
        if multi_pod:
            empty["pod"] = pa.array([], pa.string())
        return pa.table(empty)
    time = np.concatenate(times)
    time_array = pa.array(time.astype(np.int64)) if np.all(np.mod(time, 1) == 0) else pa.array(time)
    columns = {"time": time_array,
               "workload": pa.DictionaryArray.from_arrays(pa.array(np.concatenate(workload_idx)), names),
               "gpu": pa.array(np.concatenate(gpus)),
               "activity": pa.array(np.round(np.concatenate(values).astype(np.float64), 4))}
    if multi_pod:
        columns["pod"] = pa.DictionaryArray.from_arrays(pa.array(np.concatenate(pods)), pod_names)
    return pa.table(columns)

