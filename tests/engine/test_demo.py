"""The demo in reduced form (admissions, a backlog, a finish; metrics in-process so no Prometheus
start) writes a valid report: summary.json with runs, gpu_hours_reclaimed and reactions keyed by
WorkflowTemplate name, index.html with its PNG charts, the run archive and the cluster snapshot."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from engine.archive import RunArchive
from engine.demo import DemoOptions, run_demo


def test_reduced_demo_writes_a_complete_report(tmp_path: Path) -> None:
    lines: list[str] = []
    result = run_demo(DemoOptions(output_dir=tmp_path, speed=3000.0, metrics="in-process", short=True,
                                  progress=lines.append))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary == json.loads(json.dumps(result.summary))

    archive = RunArchive(tmp_path / "runs.db")
    assert summary["runs"] + summary["sweep"]["passes"] == len(archive) > 0
    templates = {run["metadata"]["labels"]["workflows.argoproj.io/workflow-template"] for run in archive}
    assert set(summary["reactions"]) == templates - {"gpuaas-sweep"}
    assert summary["sweep"]["recorded"] > 0  # the job kinds' transitions, without a pod
    assert {"gpuaas-on-admitted", "gpuaas-on-finished"} <= templates
    assert sum(r["runs"] for r in summary["reactions"].values()) == summary["runs"]
    assert summary["gpu_hours_reclaimed"] == 0.0  # nothing went idle in the reduced story
    assert "IN-PROCESS FALLBACK" in summary["metrics"]

    assert any("train-llm queued" in row["event"] and row["outcome"] == "backlog"
               for row in summary["timeline"])  # the backlog
    assert any(row["template"] == "gpuaas-on-finished" for row in summary["timeline"])
    assert lines and any("gpuaas-on-admitted" in line for line in lines)  # progress while it ran

    page = (tmp_path / "index.html").read_text()
    png = (tmp_path / "gpu-allocation.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert f'src="data:image/png;base64,{base64.b64encode(png).decode()}"' in page  # embedded: one file to send
    assert "demo clock" in page and summary["marks"][0]["what"] == "train-llm queued"
    assert summary["demo_time"]["clock_start"] == "08:00"
    snapshot = json.loads((tmp_path / "cluster-snapshot.json").read_text())
    kinds = {obj["kind"] for obj in snapshot["objects"]}
    assert {"Workload", "ClusterQueue", "LocalQueue", "Node", "PyTorchJob"} <= kinds


def test_reclaimed_gpu_hours_are_the_records_figure_on_the_demo_clock() -> None:
    """One definition (the records' gpuHoursReclaimed: release to resume), two clocks said plainly."""
    from engine.demo import build_summary

    record = {"data": {"reaction": "resume-workers", "outcome": "applied",
                       "workload": {"namespace": "team-vision", "name": "raycluster-ray-vision-1a2b3"},
                       "metrics": {"gpuHoursReclaimed": 0.0125}}}
    run = {"metadata": {"name": "gpuaas-resume-workers-x1y2z",
                        "labels": {"workflows.argoproj.io/workflow-template": "gpuaas-resume-workers"}},
           "status": {"phase": "Succeeded", "nodes": {"n": {"type": "Pod", "name": "gpuaas-resume-workers-x1y2z[0]",
                                                            "outputs": {"parameters": [
                                                                {"name": "record", "value": json.dumps(record)}]}}}}}
    summary = build_summary([run], [], [], speed=300.0, wall_seconds=60.0, metrics_mode="", step_mode="in-process",
                            events_routed=0)
    assert summary["gpu_hours_reclaimed_wall"] == 0.0125
    assert summary["gpu_hours_reclaimed"] == 3.75
    assert summary["gpu_hours_reclaimed_by_workload"] == {"team-vision/raycluster-ray-vision-1a2b3": 3.75}


def _mark(tenant: str, hours: float, what: str) -> dict:
    return {"tenant": tenant, "hours": hours, "time": "", "what": what}


def test_the_chart_shades_every_wait_for_quota_not_only_the_first_job() -> None:
    """The full story has two waits: train-llm (research) until the release, and ray-vision (vision) from its
    resume until train-llm finishes. Each `<workload> queued` mark opens a span its next admission closes."""
    from engine.report import queued_spans

    marks = [_mark("research", 1.6, "train-llm queued"), _mark("vision", 2.2, "GPUs idle"),
             _mark("vision", 3.1, "idle alert"), _mark("vision", 3.1, "released (on-idle)"),
             _mark("research", 3.2, "train-llm admitted"), _mark("vision", 4.2, "resumed (by hand)"),
             _mark("vision", 4.2, "ray-vision queued"), _mark("vision", 5.3, "ray-vision admitted again")]
    assert queued_spans(marks) == {"research": [(1.6, 3.2)], "vision": [(4.2, 5.3)]}
    # a wait that never ended in the run (the reduced story) is not drawn as if it had
    assert queued_spans(marks[:1]) == {}


def test_a_label_takes_the_lowest_row_where_it_overlaps_no_earlier_label() -> None:
    """Counting the overlapping labels put a third label on the row of the second one it overlapped (the
    1000x demo drew `resumed (by hand)` over `idle alert -> released (on-idle)`)."""
    from engine.report import label_rows

    assert label_rows([(4.25, 5.6), (4.2, 7.3), (6.6, 8.5)]) == [0, 1, 0]
    assert label_rows([(0, 2), (1, 3), (1.5, 4)]) == [0, 1, 2]
    assert label_rows([(0, 1), (2, 3)]) == [0, 0]


def test_the_demo_clock_starts_with_the_story_not_with_the_engine() -> None:
    """Starting the engine and Prometheus takes wall seconds that the demo clock used to count too: at 300x
    half an hour before the first event, more on a loaded machine, and every later time moved with it. The
    clock now reads 08:00:00 until the story begins, then runs `speed` times wall time."""
    from engine.demo import DemoClock

    wall = [100.0]
    clock = DemoClock(300.0, monotonic=lambda: wall[0])
    wall[0] = 130.0  # the engine, the exporter and Prometheus starting
    assert clock.now().strftime("%H:%M:%S") == "08:00:00" and clock.hours() == 0.0
    clock.begin()
    wall[0] = 142.0
    assert clock.now().strftime("%H:%M:%S") == "09:00:00" and clock.hours() == 1.0
    clock.begin()  # once only: a second call does not restart the story
    assert clock.hours() == 1.0
