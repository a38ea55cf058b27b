"""`gpuaas demo --stack real` (issue 9 part 3): the demo scenario's reactions through real Argo, counted twice.

The demo runs as a user runs it (its own process, `python -m gpuaas.cli demo --stack real --state-dir`) on the
session's Argo cluster, then the test reads the reactions in two ways and both must tell the story:

- the report the demo wrote (summary.json `reactions`, keyed by WorkflowTemplate, the same code as the fast demo);
- the real Argo Server's own workflow list (live and archived, PostgreSQL), independently of the demo's code.

What the story expects (engine/demo.py `story`): `gpuaas-on-admitted` once per admission (notebook,
inference server, model server, Ray cluster, batch Job, PyTorchJob, and the Ray cluster's re-admission: 7),
`gpuaas-on-finished` for eval-batch and train-llm, `gpuaas-on-idle` releasing ray-vision, the hand-submitted
`gpuaas-resume-workers` Succeeded and applied, and train-llm admitted only after the release.

Every run counted, in both lists, is attributed (tests.support.run_attribution): each reaction's run was
submitted by its own Sensor (label `events.argoproj.io/sensor`) with the event the story caused (decoded:
the Workload's Admitted or Finished event for the run's own Workload, the GPUWorkloadIdle group of
ray-vision's pods), and the resume alone by hand (no Sensor label, no event). A demo that submitted a
reaction by hand, as it rightly does the resume, fails here; so does an `events_routed` that counts any run
but the Sensors' submissions.

The demo needs 11 of the stack's 12 KWOK GPUs at once: conftest orders this module first among the Argo tests.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from gpuaas.cluster.readiness import http_status
from steps.delivery import event_path_runs, owner_kinds
from tests.support.processes import processes_naming
from tests.support.real_cluster import RealCluster
from tests.support.run_attribution import (
    alert_group,
    attribution,
    expect_by_hand,
    expect_sensor,
    expect_sweep,
    resource_condition,
)

DEMO_NAMESPACES = {"team-research", "team-vision", "team-serving"}
FINISHED = ("Succeeded", "Failed", "Error")
REPO = Path(__file__).resolve().parents[2]


def _parameters(run: dict) -> dict[str, str]:
    return {p["name"]: p.get("value") for p in ((run.get("spec") or {}).get("arguments") or {}).get("parameters") or []}


def _time(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def _server_runs(server: str, since: float) -> list[dict]:
    """The Argo Server's workflow list (Argo v4 lists live and archived runs together), the demo's tenants'."""
    query = urllib.parse.urlencode({"listOptions.labelSelector": "gpuaas.io/reaction"})
    code, body = http_status(f"{server}/api/v1/workflows/gpuaas?{query}", timeout=60)
    assert code == 200, body[:300]
    items = json.loads(body).get("items") or []
    return [i for i in items if _parameters(i).get("namespace") in DEMO_NAMESPACES
            and _time(i["metadata"]["creationTimestamp"]) >= since - 1]


def _template(run: dict) -> str:
    """The run's WorkflowTemplate by the product's reaction label (the server's list gives `spec.arguments`
    only, without `workflowTemplateRef`; a Sensor's run has no workflow-template label)."""
    return f"gpuaas-{run['metadata']['labels']['gpuaas.io/reaction']}"


def _full(server: str, run: dict) -> dict:
    """The whole run from the Argo Server (live, or from its archive), nodes and outputs included."""
    code, body = http_status(f"{server}/api/v1/workflows/gpuaas/{run['metadata']['name']}", timeout=60)
    assert code == 200, body[:300]
    return json.loads(body)


def _step_outputs(run: dict, template: str) -> list[dict[str, str]]:
    return [{p["name"]: p.get("value") for p in (n.get("outputs") or {}).get("parameters") or []}
            for n in (run.get("status") or {}).get("nodes", {}).values()
            if n.get("templateName") == template and n.get("type") == "Pod"]


def _admitted_after_the_release(admitted: list[dict], idle_runs: list[dict]) -> None:
    """One on-idle step released ray-vision (vision's 4 GPUs), and train-llm was admitted into the quota it
    freed: its admission (the on-admitted run's event, Kueue's Admitted condition) after that step started."""
    applied = [(r, o) for r in idle_runs for o in _step_outputs(r, "on-idle") if o.get("outcome") == "applied"]
    assert len(applied) == 1, [_step_outputs(r, "on-idle") for r in idle_runs]
    release_run, release = applied[0]
    assert release["tenant"] == "vision" and release["gpus-released"] == "4", release
    assert "ray-vision" in release["record"]
    (train,) = [r for r in admitted if _parameters(r)["workload"].startswith("pytorchjob-train-llm-")]
    event = json.loads(_parameters(train)["event"])
    # a PyTorchJob's admission is recorded by the catch-up sweep: its event's data is the object it read
    data = event["data"]
    body = (json.loads(base64.b64decode(data)) if isinstance(data, str) else data)["body"]
    admitted_at = next(c["lastTransitionTime"] for c in body["status"]["conditions"]
                       if c["type"] == "Admitted" and c["status"] == "True")
    (release_node,) = [n for n in release_run["status"]["nodes"].values()
                        if n.get("templateName") == "on-idle" and n.get("type") == "Pod"]
    released_after = release_node["startedAt"]  # the step released ray-vision after its pod started
    assert _time(admitted_at) >= _time(released_after) - 1, (admitted_at, released_after)  # whole seconds


SUBMITTED_BY = {"gpuaas-on-admitted": ("gpuaas-on-admitted", resource_condition("Admitted")),
                "gpuaas-on-finished": ("gpuaas-on-finished", resource_condition("Finished")),
                "gpuaas-on-idle": ("gpuaas-on-idle", alert_group("GPUWorkloadIdle", "team-vision", "ray-vision-"))}
"""Per WorkflowTemplate: the Sensor that submits it in the story and the event it must carry."""
SWEPT = ("gpuaas-on-admitted", "gpuaas-on-finished")
"""The templates whose job-kind transitions the catch-up sweep answers instead of a Sensor (docs/catch-up.md)."""


def _attribution_problems(runs: list[dict]) -> list[str]:
    """What is wrong with "each run came from the Sensor and event the story says, the resume by hand"."""
    problems = []
    for run in runs:
        template = _template(run)
        if template == "gpuaas-resume-workers":
            problems += expect_by_hand(run)
            where = (_parameters(run).get("namespace"), _parameters(run).get("workload") or "")
            if where[0] != "team-vision" or not where[1].startswith("raycluster-ray-vision-"):
                problems.append(f"{run['metadata']['name']}: the resume is vision's Ray cluster's, found {where}")
        elif template in SWEPT and not attribution(run).sensor:
            # A transition the Sensor does not take (a job kind's, writing nothing) is answered by the catch-up
            # sweep; one the Sensor takes must not be (in a healthy story no event is lost).
            reaction = template.removeprefix("gpuaas-")
            problems += expect_sweep(run, reaction.removeprefix("on-"))
            body = ((attribution(run).event or {}).get("data") or {}).get("body") or {}
            if body and event_path_runs(reaction, body):
                problems.append(f"{run['metadata']['name']}: made by the sweep for a transition the Sensor "
                                f"{template} takes (owners {owner_kinds(body)}): the event path lost it")
        elif template in SUBMITTED_BY:
            problems += expect_sensor(run, *SUBMITTED_BY[template])
        else:
            problems.append(f"{run['metadata']['name']}: {template} is no part of the story "
                            f"({attribution(run).describe()})")
    return problems


def test_a_demo_stopped_mid_story_keeps_the_users_cluster_and_the_previous_report(argo_cluster: RealCluster,
                                                                                 tmp_path: Path) -> None:
    """Issue 18 item 2 on the real stack: SIGTERM to `gpuaas demo --stack real --state-dir` mid-story. The cluster is
    the user's (handed over by `cluster up`): it stays up. The demo's own commands (kubectl, argo) are gone, the
    report folder is the previous report, nothing is left beside it, and it says so in one line. First in the
    module: the full demo below deletes the namespaces this one leaves, as a second demo does."""
    report = tmp_path / "demo-report"
    report.mkdir()
    (report / "summary.json").write_text('{"runs": 1}\n')
    before = set(processes_naming(str(argo_cluster.state_dir)))
    """The cluster's own processes (its `argo server` among them): not the demo's commands."""
    process = subprocess.Popen([sys.executable, "-m", "gpuaas.cli", "demo", "--stack", "real", "--state-dir",
                                str(argo_cluster.state_dir), "--output-dir", str(report)], cwd=REPO, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                               env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        seen.append(line)
        if "research: opens notebook" in line:
            break
    else:
        pytest.fail(f"the demo ended before its story began:\n{''.join(seen)}{process.stderr.read() if process.stderr else ''}")
    os.kill(process.pid, signal.SIGTERM)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 143, f"exit {process.returncode}:\n{''.join(seen)}{out}\n{err}"
    (line,) = err.strip().splitlines()
    assert line.startswith("gpuaas demo: stopped by SIGTERM: ") and "stays up" in line, line
    assert "keeps the previous report" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo-report"]
    assert sorted(p.name for p in report.iterdir()) == ["summary.json"]
    assert (report / "summary.json").read_text() == '{"runs": 1}\n'
    time.sleep(0.5)
    commands = [p for p in set(processes_naming(str(argo_cluster.state_dir))) - before
                if p.split(": ", 1)[1].split(" ", 1)[0].rsplit("/", 1)[-1] in ("kubectl", "argo")]
    assert commands == [], commands
    status = argo_cluster.cluster.status()
    assert status["phase"] == "ready", [(c["name"], c["state"]) for c in status["components"] if not c["running"]]


@pytest.fixture(scope="module")
def demo(argo_cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, float, float]]:
    """The demo's run; after the module its namespaces go: its pods hold 9 of the 12 KWOK GPUs at the end
    (the demo leaves them for inspection), which the Argo tests after this module need."""
    output = tmp_path_factory.mktemp("demo-real")
    started = time.time()
    done = subprocess.run([sys.executable, "-m", "gpuaas.cli", "demo", "--stack", "real", "--state-dir",
                           str(argo_cluster.state_dir), "--output-dir", str(output)],
                          cwd=REPO, capture_output=True, text=True, timeout=1800, check=False,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))
    wall = time.time() - started
    print(done.stdout[-6000:])
    assert done.returncode == 0, f"gpuaas demo --stack real exited {done.returncode}:\n{done.stdout[-4000:]}\n" \
                                 f"{done.stderr[-4000:]}"
    print(f"gpuaas demo --stack real: {wall:.0f}s wall")
    try:
        yield output, started, wall
    finally:
        argo_cluster.kubectl("delete", "namespace", *sorted(DEMO_NAMESPACES), "--wait=true", "--timeout=300s",
                             check=False, timeout=330)
        left = argo_cluster.kubectl("get", "namespace", *sorted(DEMO_NAMESPACES), "--ignore-not-found", "-o",
                                    "name", check=False).stdout.strip()
        assert not left, f"the demo's namespaces not deleted after 300 s: {left}"


def _not_succeeded(output: Path) -> list[tuple]:
    """Each run of runs.json that did not succeed: its name, Argo's message, and its nodes that did not
    succeed (the step, the exit handler...) with theirs, so a failure says where it happened."""
    found = []
    for run in json.loads((output / "runs.json").read_text()):
        status = run.get("status") or {}
        if status.get("phase") != "Succeeded":
            nodes = [(n.get("displayName"), n.get("type"), n.get("phase"), n.get("message"))
                     for n in (status.get("nodes") or {}).values() if n.get("phase") not in ("Succeeded", "Skipped")]
            found.append((run["metadata"]["name"], status.get("phase"), status.get("message"), nodes))
    return found


def test_the_report_counts_each_reaction_as_the_story_expects(demo: tuple[Path, float, float]) -> None:
    output, _, _ = demo
    for name in ("index.html", "gpu-allocation.png", "summary.json", "runs.json"):
        assert (output / name).is_file() and (output / name).stat().st_size > 0, name
    summary = json.loads((output / "summary.json").read_text())
    reactions = summary["reactions"]
    assert reactions["gpuaas-on-admitted"]["runs"] == 7, reactions["gpuaas-on-admitted"]
    assert reactions["gpuaas-on-admitted"]["phases"] == {"Succeeded": 7}, _not_succeeded(output)
    assert reactions["gpuaas-on-finished"]["runs"] == 2 and reactions["gpuaas-on-finished"]["phases"] == {
        "Succeeded": 2}, (reactions["gpuaas-on-finished"], _not_succeeded(output))
    idle = reactions["gpuaas-on-idle"]
    assert set(idle["phases"]) == {"Succeeded"} and idle["steps"]["on-idle"].get("applied") == 1, idle
    resume = reactions["gpuaas-resume-workers"]
    assert resume["runs"] == 1 and resume["phases"] == {"Succeeded": 1} and resume["outcomes"] == {"applied": 1}, resume
    assert [w.split("/")[0] for w in summary["released_workloads"]] == ["team-vision"], summary["released_workloads"]
    assert "raycluster-ray-vision" in summary["released_workloads"][0]
    assert summary["gpus_released"] == 4
    assert summary["stack"] == "real" and summary["runs_source"].startswith("Argo Server ")
    # runs.json, the runs as the demo read them back: train-llm admitted after the release (the chart's
    # marks cannot tell: the story records them in that order whatever Kueue did)
    runs = json.loads((output / "runs.json").read_text())
    assert summary["runs"] == len(runs), (summary["runs"], len(runs))
    problems = _attribution_problems(runs)
    assert not problems, "runs the story does not explain:\n  " + "\n  ".join(problems)
    routed = [r for r in runs if attribution(r).sensor]
    swept = [r for r in runs if not attribution(r).sensor and _template(r) in SWEPT]
    # every run but the hand-submitted resume came from a Sensor's event or from the catch-up sweep
    assert summary["events_routed"] == len(routed) == len(runs) - 1 - len(swept), (
        summary["events_routed"], len(routed), len(swept), len(runs))
    assert summary["started_by"] == {"events": len(routed), "sweep": len(swept), "hand-submitted": 1,
                                     "resubmitted": 0}, summary["started_by"]
    _admitted_after_the_release([r for r in runs if _template(r) == "gpuaas-on-admitted"],
                                [r for r in runs if _template(r) == "gpuaas-on-idle"])


def test_the_argo_server_lists_the_same_reactions(argo_cluster: RealCluster,
                                                   demo: tuple[Path, float, float]) -> None:
    output, _, _ = demo
    # the runs since the story began: deleting an earlier demo's namespaces before it finishes their pods'
    # Workloads, and the Sensors react to that too (seen: an on-finished for the old predictor pod)
    started = _time(json.loads((output / "summary.json").read_text())["story_started_at"])
    server = argo_cluster.cluster.status()["endpoints"]["argo-server"]
    runs = _server_runs(server, started)
    assert all(r["status"]["phase"] in FINISHED for r in runs), [(r["metadata"]["name"], r["status"]) for r in runs]
    problems = _attribution_problems(runs)
    assert not problems, "runs the story does not explain:\n  " + "\n  ".join(problems)
    by_template: dict[str, list[dict]] = {}
    for run in runs:
        by_template.setdefault(_template(run), []).append(run)
    admitted = by_template["gpuaas-on-admitted"]
    per_namespace = {ns: sum(_parameters(r)["namespace"] == ns for r in admitted) for ns in DEMO_NAMESPACES}
    # research: notebook, train-llm; serving: inference server, model server; vision: Ray twice, eval-batch
    assert per_namespace == {"team-research": 2, "team-serving": 2, "team-vision": 3}, per_namespace
    ray = [r for r in admitted if _parameters(r)["workload"].startswith("raycluster-ray-vision-")]
    assert len(ray) == 2, [_parameters(r)["workload"] for r in admitted]
    finished = by_template["gpuaas-on-finished"]
    assert sorted(_parameters(r)["workload"].rsplit("-", 1)[0] for r in finished) == [
        "job-eval-batch", "pytorchjob-train-llm"], [_parameters(r)["workload"] for r in finished]
    assert all(r["status"]["phase"] == "Succeeded" for r in admitted + finished)

    idle_runs = [_full(server, r) for r in by_template["gpuaas-on-idle"]]
    _admitted_after_the_release(admitted, idle_runs)

    (resume,) = [_full(server, r) for r in by_template["gpuaas-resume-workers"]]
    assert resume["status"]["phase"] == "Succeeded"
    assert [o["outcome"] for o in _step_outputs(resume, "resume-workers")] == ["applied"]

