"""The trace directory format: what it accepts, and errors that name the file, line and column."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from gpuaas.simulate.synthesis import synthesize
from gpuaas.simulate.trace import TraceError, read_trace, write_trace
from tests.simulate.conftest import T0, at

WORKLOADS = "workload,namespace,tenant,kind,gpus,start,end\n"
GOOD_WORKLOAD = f"a,team-a,tenant-a,Job,2,{T0},{T0 + 600}\n"


def write(directory: Path, workloads: str, activity: str, name: str = "activity.csv") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "workloads.csv").write_text(workloads)
    if name.endswith(".gz"):
        with gzip.open(directory / name, "wt") as handle:
            handle.write(activity)
    else:
        (directory / name).write_text(activity)
    return directory


@pytest.mark.parametrize(("workloads", "activity", "where", "says"), [
    (WORKLOADS + GOOD_WORKLOAD + f"a,team-a,tenant-a,Job,1,{T0},{T0 + 60}\n", "time,workload,gpu,activity\n",
     "workloads.csv line 3, column 'workload'", "unique names, found 'a' again (first on line 2)"),
    (WORKLOADS + f"a,team-a,tenant-a,Job,zero,{T0},{T0 + 60}\n", "time,workload,gpu,activity\n",
     "workloads.csv line 2, column 'gpus'", "a whole number >= 1, found 'zero'"),
    (WORKLOADS + f"a,team-a,tenant-a,Job,²,{T0},{T0 + 60}\n", "time,workload,gpu,activity\n",
     "workloads.csv line 2, column 'gpus'", "a whole number >= 1, found '²'"),
    (WORKLOADS + f"a,team-a,tenant-a,Job,{'9' * 5000},{T0},{T0 + 60}\n", "time,workload,gpu,activity\n",
     "workloads.csv line 2, column 'gpus'", "a whole number >= 1, found '999"),
    (WORKLOADS + GOOD_WORKLOAD, f"time,workload,gpu,activity\n{T0},a,0,0.5\n{T0},a,¹,0.5\n",
     "activity.csv line 3, column 'gpu'", "a GPU index"),
    (WORKLOADS + f"a,team-a,tenant-a,Job,1,yesterday,{T0 + 60}\n", "time,workload,gpu,activity\n",
     "workloads.csv line 2, column 'start'", "RFC 3339"),
    (WORKLOADS + f"a,team-a,tenant-a,Job,1,{T0 + 60},{T0}\n", "time,workload,gpu,activity\n",
     "workloads.csv line 2, column 'end'", "a time after start"),
    ("workload,namespace,gpus\n", "time,workload,gpu,activity\n", "workloads.csv line 1, column 'tenant'",
     "expected a header with"),
    (WORKLOADS + GOOD_WORKLOAD, f"time,workload,gpu,activity\n{T0},a,0,0.5\n{T0 + 60},b,0,0.5\n",
     "activity.csv line 3, column 'workload'", "a workload of workloads.csv, found 'b'"),
    (WORKLOADS + GOOD_WORKLOAD, f"time,workload,gpu,activity\n{T0},a,0,0.5\n{T0},a,2,0.5\n",
     "activity.csv line 3, column 'gpu'", "expected 0 .. 1 (the workload holds 2 GPU(s)), found 2"),
    (WORKLOADS + GOOD_WORKLOAD, f"time,workload,gpu,activity\n{T0},a,0,0.5\n{T0},a,1,50\n",
     "activity.csv line 3, column 'activity'", "between 0 and 1, found 50"),
    (WORKLOADS + GOOD_WORKLOAD, f"time,workload,gpu,activity\n{T0},a,0,0.5\n{T0},a,1,busy\n",
     "activity.csv line 3, column 'activity'", "found 'busy'"),
    (WORKLOADS + GOOD_WORKLOAD, f"time,workload,gpu,activity\n{T0},a,0,0.5\n{T0},a,x,0.5\n",
     "activity.csv line 3, column 'gpu'", "a GPU index"),
    (WORKLOADS + GOOD_WORKLOAD, f"time,workload,gpu,activity\n{T0},a,0,0.5\n{T0 + 600},a,0,0.5\n",
     "activity.csv line 3, column 'time'", "within a's lifetime"),
    (WORKLOADS + GOOD_WORKLOAD, f"time,workload,gpu,activity\n{T0},a,0,0.5\nlater,a,0,0.5\n",
     "activity.csv line 3, column 'time'", "RFC 3339 or Unix seconds, found 'later'"),
    (WORKLOADS + GOOD_WORKLOAD, "when,workload,gpu,activity\n", "activity.csv line 1, column 'time'",
     "expected a header with"),
    (WORKLOADS + GOOD_WORKLOAD + "", f"time,workload,gpu,activity,pod\n{T0},a,0,0.5,p0\n{T0 + 60},a,0,0.5,p1\n",
     "activity.csv line 3, column 'pod'", "to stay in pod 'p0'"),
    (WORKLOADS + GOOD_WORKLOAD, f"time,workload,gpu,activity\n{T0},a,0,0.5\n{T0},a,1,0.5,1\n",
     "activity.csv line 3", "expected 4 columns (as many as the header), found 5"),
    (WORKLOADS + GOOD_WORKLOAD + f"b,team-a,tenant-a,Job,1,{T0},{T0 + 60},true\n", "time,workload,gpu,activity\n",
     "workloads.csv line 3", "expected 7 columns (as many as the header), found 8"),
])
def test_errors_name_file_line_and_column(tmp_path: Path, workloads: str, activity: str, where: str, says: str) -> None:
    with pytest.raises(TraceError) as caught:
        read_trace(write(tmp_path / "t", workloads, activity))
    message = str(caught.value)
    assert where in message and says in message, message
    assert "\n" not in message


def test_missing_files_say_what_is_expected(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="expected a trace directory"):
        read_trace(tmp_path / "nowhere")
    (tmp_path / "t").mkdir()
    with pytest.raises(TraceError, match="expected workloads.csv"):
        read_trace(tmp_path / "t")
    (tmp_path / "t" / "workloads.csv").write_text(WORKLOADS + GOOD_WORKLOAD)
    with pytest.raises(TraceError, match=r"activity.csv or activity.csv.gz"):
        read_trace(tmp_path / "t")


def test_rfc3339_gzip_empty_cells_and_binning(tmp_path: Path) -> None:
    start = "2023-11-14T22:20:00Z"  # T0
    activity = ("time,workload,gpu,activity\n"
                f"{start},a,0,0.2\n"
                "2023-11-14T22:20:20Z,a,0,0.7\n"   # same minute: the bin keeps the highest
                "2023-11-14T22:21:00+00:00,a,0,\n"  # an empty cell is no sample
                f"{T0 + 120},a,1,0.0\n")
    directory = write(tmp_path / "t", WORKLOADS + f"a,ns,t,Job,2,{start},{T0 + 600}\n", activity, "activity.csv.gz")
    history = read_trace(directory)
    block = history.block(0)
    assert block.shape == (10, 2)
    assert block[0, 0] == pytest.approx(0.7) and np.isnan(block[1, 0]) and block[2, 1] == 0.0
    assert int(np.count_nonzero(~np.isnan(block))) == 2


def test_pods_group_the_gpus(tmp_path: Path) -> None:
    activity = ("time,workload,gpu,activity,pod\n"
                f"{T0},a,0,0.0,a-worker-1\n{T0},a,1,0.0,a-head\n{T0},a,2,0.9,a-worker-1\n")
    history = read_trace(write(tmp_path / "t", WORKLOADS + f"a,ns,t,RayCluster,3,{T0},{T0 + 60}\n", activity))
    pods = history.pods
    assert pods.name.tolist() == ["a-head", "a-worker-1"] and pods.columns.tolist() == [1, 2]
    assert history.block(0)[0].tolist() == pytest.approx([0.0, 0.0, 0.9])


def test_write_then_read_gives_the_same_history(tmp_path: Path) -> None:
    history = synthesize(seed=3, days=0.25)
    write_trace(history, tmp_path / "trace")
    again = read_trace(tmp_path / "trace", history.step)
    assert again.workloads.name.tolist() == history.workloads.name.tolist()
    assert np.array_equal(again.pods.columns, history.pods.columns)
    assert np.allclose(again.activity, history.activity, atol=1e-4, equal_nan=True)
    assert again.samples == history.samples


def test_times_are_unix_seconds_or_rfc3339_in_workloads(tmp_path: Path) -> None:
    directory = write(tmp_path / "t", WORKLOADS + "a,ns,t,Job,1,2023-11-14T22:20:00Z,1700001000\n",
                      f"time,workload,gpu,activity\n{T0},a,0,0.5\n")
    history = read_trace(directory)
    assert history.workloads.start[0] == at(0) and history.workloads.end[0] == at(10)


def test_a_byte_order_mark_is_not_part_of_the_header(tmp_path: Path) -> None:
    """Spreadsheets write UTF-8 with a byte order mark; the header is still the header."""
    directory = write(tmp_path / "t", "\ufeff" + WORKLOADS + GOOD_WORKLOAD, f"\ufefftime,workload,gpu,activity\n{T0},a,0,0.5\n")
    history = read_trace(directory)
    assert history.workloads.name.tolist() == ["a"] and history.samples == 20
