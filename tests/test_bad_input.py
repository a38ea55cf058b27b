"""Every command answers bad input with one line, a non-zero exit and no traceback.

One table per command (`gpuaas render|route|demo|audit`, `python -m steps`): the argv, the exit
code, and words the message must contain (what was expected, or what was found). Each row checks
the same promise: stderr is exactly one line, it starts with the command's name, it has no
traceback, nothing lands on stdout, and the exit code is the documented one.

The `gpuaas` rows run in-process through `gpuaas.cli.main` (an uncaught exception fails the row
with its traceback); the rows whose point is the process (`python -m steps`, a render with no Go
on PATH) run as subprocesses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpuaas.cli import main
from tests.audit.workflows import history, write_archive

REPO = Path(__file__).resolve().parents[1]
RUN = "gpuaas-on-admitted-a1b2c"  # a run of tests.audit.workflows.history()


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with the inputs the tables name: a run archive, snapshots, bad files."""
    for name in ("ARGO_SERVER", "ARGO_TOKEN", "ARGO_NAMESPACE", "KUBECONFIG", "GPUAAS_KUBE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUAAS_TRACEBACK", "1")  # a defect raises here (the row fails with it), not one line
    monkeypatch.chdir(tmp_path)
    write_archive(tmp_path / "runs.db", list(history().values()))
    (tmp_path / "cluster-snapshot.json").write_text(json.dumps({"objects": []}))
    (tmp_path / "a-file").write_text("not a folder\n")
    (tmp_path / "broken.json").write_text("{\n")
    (tmp_path / "list.json").write_text("[]\n")
    (tmp_path / "object.json").write_text("{}\n")
    (tmp_path / "empty-folder").mkdir()
    (tmp_path / "not-a-report").mkdir()
    (tmp_path / "not-a-report" / "thesis.tex").write_text("an admin's own file\n")
    for name in ("empty.json", "empty.jsonl", "empty.db", "empty.yaml"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "blank.jsonl").write_text("\n  \n")
    (tmp_path / "params.json").write_text(json.dumps([{"name": "namespace", "value": "team-a"},
                                                      {"name": "workload", "value": "job-train-1"}]))
    (tmp_path / "kubeconfig").write_text("garbage\n")
    (tmp_path / "latin1.json").write_bytes(b'{"source": "caf\xe9"}\n')  # not UTF-8
    (tmp_path / "deep.json").write_text("[" * 1000 + "]" * 1000 + "\n")  # issue 10 item 10
    (tmp_path / "deeper.json").write_text('{"a":' * 100_000 + "1" + "}" * 100_000 + "\n")
    return tmp_path


def check_one_line_error(code: int, out: str, err: str, *, expected_code: int, prefix: str,
                         words: tuple[str, ...]) -> None:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert code == expected_code, f"exit {code}, expected {expected_code}; stderr: {err}"
    assert len(lines) == 1, f"expected one line on stderr, found {len(lines)}:\n{err}"
    assert lines[0].startswith(prefix), lines[0]
    for word in words:
        assert word in lines[0], f"{word!r} missing from: {lines[0]}"
    assert out == "", f"nothing on stdout for bad input, found: {out[:300]}"


GPUAAS_CASES = [
    # (id, argv, exit code, words the one line must contain)
    ("no-command", [], 2, ("required: COMMAND", "--help")),
    ("unknown-command", ["bogus"], 2, ("unknown command 'bogus'", "expected one of render, route, demo")),
    ("misspelt-command", ["demoo"], 2, ("unknown command 'demoo'; did you mean demo?",)),
    ("misspelt-option", ["audit", "--archvie", "runs.db"], 2, ("unknown option --archvie; did you mean --archive?",)),
    ("misspelt-option-after-a-value", ["audit", "--archive", "runs.db", "--sinse", "1h"], 2,
     ("unknown option --sinse; did you mean --since?",)),
    ("misspelt-action", ["audit", "shwo", "x", "--archive", "runs.db"], 2, ("unknown action 'shwo'; did you mean show?",)),
    ("misspelt-option-of-an-action", ["audit", "show", "x", "--archvie", "runs.db"], 2,
     ("unknown option --archvie; did you mean --archive?",)),
    ("unknown-option-far-from-all", ["route", "--zzzzzz", "object.json"], 2, ("unknown option --zzzzzz",)),
    ("misspelt-short-option", ["audit", "resubmit", RUN, "--archive", "runs.db", "-P", "dry-run=true"], 2,
     ("unknown option -P; did you mean -p?",)),
    ("misspelt-value", ["route", "--output", "jsno", "object.json"], 2, ("--output: unknown value 'jsno'; did you mean json?",)),
    ("misspelt-cluster-action", ["cluster", "staus"], 2, ("unknown action 'staus'; did you mean status?",)),
    ("misspelt-quota-command", ["quota", "advice"], 2, ("unknown command 'advice'; did you mean advise?",)),
    # render
    ("render-out-is-a-file", ["render", "--out", "a-file", "--no-validate"], 2, ("expected a folder", "found a file")),
    ("render-out-unwritable", ["render", "--out", "/proc/gpuaas", "--no-validate"], 2, ("expected a folder this user can write",)),
    ("render-check-out-is-a-file", ["render", "--out", "a-file", "--check", "--no-validate"], 2, ("found a file",)),
    ("render-workload-version", ["render", "--workload-version", "v9"], 2, ("--workload-version: unknown value 'v9'", "expected one of v1beta2, v1beta1")),
    # route
    ("route-no-event", ["route"], 2, ("give exactly one of",)),
    ("route-event-and-events", ["route", "object.json", "--events", "object.json"], 2, ("give exactly one of",)),
    ("route-missing-file", ["route", "nope.json"], 2, ("cannot read nope.json",)),
    ("route-folder-as-event", ["route", "empty-folder"], 2, ("cannot read empty-folder",)),
    ("route-not-json", ["route", "broken.json"], 2, ("not a JSON CloudEvent",)),
    ("route-not-an-object", ["route", "list.json"], 2, ("expected a CloudEvent JSON object", "found list")),
    ("route-no-source", ["route", "object.json"], 2, ("'source'", "expected the EventSource name")),
    ("route-events-missing", ["route", "--events", "nope.jsonl"], 2, ("cannot read --events nope.jsonl",)),
    ("route-events-bad-line", ["route", "--events", "broken.json"], 2, ("broken.json:1",)),
    ("route-not-utf8", ["route", "latin1.json"], 2, ("latin1.json", "expected UTF-8", "found")),
    ("route-events-not-utf8", ["route", "--events", "latin1.json"], 2, ("latin1.json", "expected UTF-8", "found")),
    ("route-json-1000-deep", ["route", "deep.json"], 2, ("deep.json", "nested")),
    ("route-json-100000-deep", ["route", "deeper.json"], 2, ("deeper.json", "nested")),
    ("route-events-json-1000-deep", ["route", "--events", "deep.json"], 2, ("deep.json:1", "nested")),
    ("route-manifests-missing", ["route", "--manifests", "nope", "object.json"], 2, ("does not exist",)),
    ("route-manifests-without-sensors", ["route", "--manifests", "empty-folder", "object.json"], 2,
     ("no Sensor found",)),
    ("route-json-lines-as-one-event", ["route", str(REPO / "examples" / "events" / "admission-check.jsonl")], 2,
     ("not a JSON CloudEvent", "pass it with --events")),
    ("route-event-empty", ["route", "empty.json"], 2, ("empty.json: expected a JSON CloudEvent, found an empty file",)),
    ("route-events-empty", ["route", "--events", "empty.jsonl"], 2,
     ("--events empty.jsonl: expected one JSON CloudEvent per line, found an empty file",)),
    ("route-events-blank", ["route", "--events", "blank.jsonl"], 2, ("found 2 blank line(s)",)),
    ("route-empty-argument", ["route", ""], 2, ("found an empty one",)),
    ("route-manifests-empty", ["route", "--manifests", "", "object.json"], 2, ("--manifests: expected a value",)),
    ("route-output", ["route", "--output", "yaml", "object.json"], 2, ("--output: unknown value 'yaml'", "expected one of json, text")),
    # demo (each fails before the engine starts)
    ("demo-speed-zero", ["demo", "--speed", "0"], 2, ("expected a number from 1 to 1000", "found 0")),
    ("demo-speed-negative", ["demo", "--speed", "-5"], 2, ("expected a number from 1 to 1000", "found -5")),
    ("demo-speed-nan", ["demo", "--speed", "nan"], 2, ("found nan",)),
    ("demo-speed-word", ["demo", "--speed", "fast"], 2, ("found 'fast'",)),
    ("demo-speed-below-real-time", ["demo", "--speed", "1e-300"], 2, ("expected a number from 1 to 1000", "found 1e-300")),
    # above 1000 the story's wall-bound waits (Prometheus start, the idle window) run the clock past midnight
    ("demo-speed-wraps-the-clock", ["demo", "--speed", "5000"], 2, ("expected a number from 1 to 1000", "found 5000")),
    ("demo-speed-infinite", ["demo", "--speed", "inf"], 2, ("expected a number from 1 to 1000", "found inf")),
    ("demo-output-dir-is-a-file", ["demo", "--output-dir", "a-file"], 2, ("expected a folder", "found a file")),
    ("demo-output-dir-empty", ["demo", "--output-dir", ""], 2, ("--output-dir: expected a value, found an empty one",)),
    ("demo-output-dir-current-folder", ["demo", "--output-dir", "."], 2, ("found the current folder",)),
    ("demo-output-dir-not-a-report", ["demo", "--output-dir", "not-a-report"], 2,
     ("expected a new or empty folder or an earlier demo report", "thesis.tex")),
    ("demo-manifests-empty-value", ["demo", "--manifests", ""], 2, ("--manifests: expected a value",)),
    ("demo-real-state-dir-missing", ["demo", "--stack", "real", "--state-dir", "nope"], 2,
     ("expected the folder of a cluster started with `", "cluster up --with events --state-dir nope`", "found no folder")),
    ("demo-real-state-dir-is-a-file", ["demo", "--stack", "real", "--state-dir", "a-file"], 2,
     ("expected the folder of a cluster", "found a file")),
    ("demo-real-state-dir-not-a-cluster", ["demo", "--stack", "real", "--state-dir", "."], 2,
     ("expected a ready cluster", "found phase absent", "gpuaas cluster up --with events --state-dir")),
    ("demo-state-dir-without-real", ["demo", "--state-dir", "."], 2, ("--state-dir: only with --stack real",)),
    ("demo-real-manifests", ["demo", "--stack", "real", "--manifests", "manifests"], 2,
     ("--manifests: only with --stack local",)),
    ("demo-real-steps", ["demo", "--stack", "real", "--steps", "subprocess"], 2, ("only with --stack local",)),
    ("demo-stack-unknown", ["demo", "--stack", "kind"], 2, ("--stack", "'kind'")),
    ("demo-output-dir-unwritable", ["demo", "--output-dir", "/proc/gpuaas"], 2, ("this user can write",)),
    ("demo-manifests-missing", ["demo", "--manifests", "nope"], 2, ("not found", "gpuaas render")),
    ("demo-manifests-empty", ["demo", "--manifests", "empty-folder"], 2, ("found no WorkflowTemplate",)),
    # cluster
    ("cluster-no-action", ["cluster"], 2, ("required: ACTION",)),
    ("cluster-build-unknown-component", ["cluster", "build", "kubelet"], 2, ("expected components among", "found kubelet")),
    ("cluster-up-state-dir-is-a-file", ["cluster", "up", "--no-build", "--state-dir", "a-file"], 2,
     ("expected a folder", "found a file")),
    ("cluster-status-state-dir-is-a-file", ["cluster", "status", "--state-dir", "a-file"], 2, ("found a file",)),
    ("cluster-up-timeout-negative", ["cluster", "up", "--no-build", "--timeout", "-5"], 2,
     ("--timeout: expected seconds from 10 to 86400", "found -5")),
    ("cluster-up-timeout-nan", ["cluster", "up", "--no-build", "--timeout", "nan"], 2, ("found nan",)),
    ("cluster-up-timeout-infinite", ["cluster", "up", "--no-build", "--timeout", "1e400"], 2, ("found inf",)),
    ("cluster-up-timeout-word", ["cluster", "up", "--no-build", "--timeout", "soon"], 2, ("'soon'",)),
    ("cluster-up-with-empty", ["cluster", "up", "--no-build", "--with", ""], 2, ("--with: expected a value",)),
    ("cluster-up-with-commas", ["cluster", "up", "--no-build", "--with", ","], 2,
     ("--with: expected parts among node, argo, events", "found an empty value")),
    ("cluster-up-idle-window-huge", ["cluster", "up", "--no-build", "--with", "events", "--idle-window",
                                     "99999999999999999999h"], 2, ("--idle-window", "at most 24h")),
    ("cluster-up-idle-window-short", ["cluster", "up", "--no-build", "--with", "events", "--idle-window", "5s"], 2,
     ("--idle-window", "at least 10s")),
    # quota (each fails before anything is read)
    ("quota-since-huge", ["quota", "advise", "--prometheus", "http://127.0.0.1:9", "--since", "99999999999999d"], 2,
     ("--since: expected a window of at most 366d",)),
    ("quota-since-zero", ["quota", "advise", "--prometheus", "http://127.0.0.1:9", "--since", "0s"], 2,
     ("--since: expected a duration like 7d", "'0s'")),
    ("quota-prometheus-empty", ["quota", "advise", "--prometheus", ""], 2, ("--prometheus: expected a value",)),
    # simulate (each fails before the history is read)
    ("simulate-step-below-a-second", ["simulate", "--synthesize", "--step", "1ms"], 2, ("--step", "at least 1s")),
    ("simulate-step-zero", ["simulate", "--synthesize", "--step", "0s"], 2, ("--step", "at least 1s")),
    ("simulate-step-above-a-day", ["simulate", "--synthesize", "--step", "2d"], 2, ("--step", "at most 1d")),
    ("simulate-step-word", ["simulate", "--synthesize", "--step", "often"], 2, ("--step", "'often'")),
    ("simulate-reaction-delay-huge", ["simulate", "--synthesize", "--reaction-delay", "9999999999999999999d"], 2,
     ("--reaction-delay: expected at most 1h",)),
    ("simulate-windows-huge", ["simulate", "--synthesize", "--windows", "99999999999999999999d"], 2,
     ("--windows: expected idle windows of at most 1d",)),
    ("simulate-windows-below-step", ["simulate", "--synthesize", "--windows", "30s"], 2, ("at least --step",)),
    ("simulate-days-tiny", ["simulate", "--synthesize", "--days", "0.0000001"], 2, ("--days", "an hour")),
    ("simulate-days-infinite", ["simulate", "--synthesize", "--days", "1e400"], 2, ("--days", "found inf")),
    ("simulate-days-beyond-the-trace", ["simulate", "--synthesize", "--days", "1000"], 2, ("--days: expected at most",)),
    ("simulate-seed-negative", ["simulate", "--synthesize", "--seed", "-1"], 2, ("--seed",)),
    ("simulate-since-huge", ["simulate", "--prometheus", "http://127.0.0.1:9", "--since", "99999999999d"], 2,
     ("--since", "at most 36500d")),
    ("simulate-policy-empty", ["simulate", "--synthesize", "--policy", "empty.yaml"], 2, ("found an empty file",)),
    ("simulate-observability-empty", ["simulate", "--synthesize", "--observability", "empty.yaml"], 2,
     ("found an empty file",)),
    ("simulate-no-history", ["simulate"], 2, ("one of the arguments --trace --prometheus --synthesize is required",)),
    # audit
    ("audit-no-source", ["audit"], 2, ("no history source",)),
    ("audit-two-sources", ["audit", "--archive", "runs.db", "--argo-server", "127.0.0.1:9"], 2, ("not both",)),
    ("audit-archive-missing", ["audit", "--archive", "nope.db"], 2, ("found no file at nope.db",)),
    ("audit-archive-not-sqlite", ["audit", "--archive", "broken.json"], 2, ("expected a SQLite run archive",)),
    ("audit-archive-a-folder", ["audit", "--archive", "empty-folder"], 2, ("--archive",)),
    ("audit-reaction-unknown", ["audit", "--archive", "runs.db", "--reaction", "bogus"], 2,
     ("expected one of", "on-admitted", "found 'bogus'")),
    ("audit-since", ["audit", "--archive", "runs.db", "--since", "yesterday"], 2, ("found 'yesterday'",)),
    ("audit-since-huge", ["audit", "--archive", "runs.db", "--since", "99999999999d"], 2, ("at most 36500d",)),
    ("audit-until-huge", ["audit", "--archive", "runs.db", "--until", "9999999999999999999999w"], 2,
     ("--until", "at most 36500d")),
    ("audit-since-zero", ["audit", "--archive", "runs.db", "--since", "0h"], 2, ("an age above 0",)),
    ("audit-since-empty", ["audit", "--archive", "runs.db", "--since", ""], 2, ("--since: expected a value",)),
    ("audit-tenant-empty", ["audit", "--archive", "runs.db", "--tenant", ""], 2, ("--tenant: expected a value",)),
    ("audit-archive-empty-file", ["audit", "--archive", "empty.db"], 2, ("found an empty file",)),
    ("audit-until", ["audit", "--archive", "runs.db", "--until", "5x"], 2, ("found '5x'",)),
    ("audit-outcome", ["audit", "--archive", "runs.db", "--outcome", "weird"], 2, ("--outcome: unknown value 'weird'",)),
    ("audit-ca-file", ["audit", "--argo-server", "https://127.0.0.1:9", "--ca-file", "nope.pem"], 2,
     ("found no file at nope.pem",)),
    ("audit-argo-unreachable", ["audit", "--argo-server", "http://127.0.0.1:9"], 2, ("cannot connect",)),
    ("audit-show-unknown-run", ["audit", "show", "nope", "--archive", "runs.db"], 2, ("found no run 'nope'",)),
    ("audit-show-no-run", ["audit", "show", "--archive", "runs.db"], 2, ("required: RUN",)),
    ("audit-report-no-html", ["audit", "report", "--archive", "runs.db"], 2, ("required: --html",)),
    ("audit-report-onto-a-file", ["audit", "report", "--html", "a-file", "--archive", "runs.db"], 2,
     ("expected a folder", "found a file")),
    ("audit-report-unwritable", ["audit", "report", "--html", "/proc/gpuaas", "--archive", "runs.db"], 2,
     ("this user can write",)),
    ("audit-report-reaction-unknown", ["audit", "report", "--html", "out", "--archive", "runs.db", "--reaction", "x"],
     2, ("found 'x'",)),
    ("audit-resubmit-bad-snapshot", ["audit", "resubmit", RUN, "--archive", "runs.db", "--snapshot", "broken.json"],
     2, ("--snapshot broken.json", "cannot read it")),
    ("audit-resubmit-snapshot-shape", ["audit", "resubmit", RUN, "--archive", "runs.db", "--snapshot", "list.json"],
     2, ("--snapshot list.json", "expected")),
    ("audit-resubmit-snapshot-empty", ["audit", "resubmit", RUN, "--archive", "runs.db", "--snapshot", "empty.json"],
     2, ("--snapshot empty.json", "found an empty file")),
    ("audit-resubmit-parameter-empty", ["audit", "resubmit", RUN, "--archive", "runs.db", "-p", ""], 2,
     ("-p: expected a value",)),
    ("audit-resubmit-snapshot-missing", ["audit", "resubmit", RUN, "--archive", "runs.db", "--snapshot", "nope.json"],
     2, ("found no file at nope.json",)),
    ("audit-resubmit-parameter-value", ["audit", "resubmit", RUN, "--archive", "runs.db", "-p", "dry-run=maybe"], 2,
     ("dry-run", "'maybe'", "fix the -p value")),
    ("audit-resubmit-parameter-unknown", ["audit", "resubmit", RUN, "--archive", "runs.db", "-p", "nope=1"], 2,
     ("expected one of the run's parameters",)),
    ("audit-resubmit-parameter-form", ["audit", "resubmit", RUN, "--archive", "runs.db", "-p", "dry-run"], 2,
     ("expected NAME=VALUE",)),
    ("audit-resubmit-unknown-run", ["audit", "resubmit", "nope", "--archive", "runs.db"], 2, ("found no run 'nope'",)),
]


@pytest.mark.parametrize(("argv", "code", "words"), [c[1:] for c in GPUAAS_CASES], ids=[c[0] for c in GPUAAS_CASES])
def test_gpuaas_answers_bad_input_with_one_line(workdir: Path, capsys: pytest.CaptureFixture[str],
                                                argv: list[str], code: int, words: tuple[str, ...]) -> None:
    try:
        exit_code = main(argv)
    except SystemExit as stop:  # argparse
        exit_code = int(stop.code or 0)
    captured = capsys.readouterr()
    command = "gpuaas" + (f" {argv[0]}" if argv and argv[0] in ("render", "route", "demo", "audit") else "")
    check_one_line_error(exit_code, captured.out, captured.err, expected_code=code, prefix=command, words=words)


def test_the_archive_is_untouched_by_a_refused_resubmission(workdir: Path) -> None:
    import sqlite3

    def rows() -> list[tuple[str, str]]:
        with sqlite3.connect(workdir / "runs.db") as db:
            return db.execute("SELECT uid, name FROM archived_workflows ORDER BY uid").fetchall()

    before = rows()
    assert main(["audit", "resubmit", RUN, "--archive", "runs.db", "-p", "dry-run=maybe"]) == 2
    assert rows() == before


def _process(argv: list[str], cwd: Path, **env: str) -> tuple[int, str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "GPUAAS_KUBE_URL")}
    done = subprocess.run(argv, cwd=cwd, env={**environ, **env}, capture_output=True, text=True, timeout=120,
                          check=False)
    return done.returncode, done.stdout, done.stderr


STEPS_CASES = [
    ("no-arguments", [], ("usage: python -m steps <reaction> PARAMS_FILE",)),
    ("unknown-reaction", ["bogus", "params.json"], ("expected a reaction", "release-workers", "found 'bogus'")),
    ("option-as-reaction", ["-x"], ("found '-x'",)),
    ("no-params-file", ["release-workers"], ("expected release-workers PARAMS_FILE", "found 0 argument")),
    ("too-many-arguments", ["release-workers", "params.json", "extra"], ("found 2 argument",)),
    ("params-file-missing", ["release-workers", "nope.json"], ("found nothing at nope.json",)),
    ("params-file-a-folder", ["release-workers", "empty-folder"], ("found a folder",)),
]


@pytest.mark.parametrize(("argv", "words"), [c[1:] for c in STEPS_CASES], ids=[c[0] for c in STEPS_CASES])
def test_steps_answers_a_wrong_command_line_with_one_line_and_writes_nothing(workdir: Path, argv: list[str],
                                                                           words: tuple[str, ...]) -> None:
    outputs = workdir / "outputs"
    code, out, err = _process([sys.executable, "-m", "steps", *argv], workdir, GPUAAS_OUTPUTS_DIR=str(outputs))
    check_one_line_error(code, out, err, expected_code=2, prefix="python -m steps: ", words=words)
    assert not outputs.exists(), "a wrong command line is not a reaction run: no outputs, no record"


def test_steps_help_lists_the_reactions_and_writes_nothing(workdir: Path) -> None:
    outputs = workdir / "outputs"
    code, out, err = _process([sys.executable, "-m", "steps", "--help"], workdir, GPUAAS_OUTPUTS_DIR=str(outputs))
    assert (code, err) == (0, "")
    assert out.startswith("usage: python -m steps <reaction> PARAMS_FILE")
    reactions = sorted(p.stem.replace("_", "-") for p in (REPO / "steps" / "reactions").glob("[a-z]*.py"))
    assert [line.strip() for line in out.split("reactions:\n", 1)[1].splitlines()] == reactions
    assert not outputs.exists()


@pytest.mark.parametrize(("case", "env", "words"), [
    ("no-kubeconfig", {"KUBECONFIG": "nope", "HOME": "."}, ("expected a Kubernetes API", "set KUBECONFIG")),
    ("garbage-kubeconfig", {"KUBECONFIG": "kubeconfig"}, ("expected a Kubernetes API", "kubeconfig: TypeError")),
])
def test_steps_without_a_kubernetes_api_records_a_failure_without_a_traceback(workdir: Path, case: str,
                                                                             env: dict[str, str],
                                                                             words: tuple[str, ...]) -> None:
    """A reaction run (the command line is right): the step contract holds (record, outputs, exit 1), and
    stderr is one line, not the client's traceback."""
    outputs = workdir / "outputs"
    code, out, err = _process([sys.executable, "-m", "steps", "release-workers", "params.json"], workdir,
                              GPUAAS_OUTPUTS_DIR=str(outputs), **env)
    assert code == 1 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("release-workers: failed: "), err
    assert all(word in lines[0] for word in words), lines[0]
    assert (outputs / "outcome").read_text() == "failed"
    assert json.loads(out)["data"]["outcome"] == "failed"


@pytest.mark.parametrize(("params", "words"), [
    ([{"name": "namespace", "value": "team-a"}, {"name": "workload", "value": "w"},
      {"name": "dry-run", "value": "maybe"}], ("dry-run: expected \"true\" or \"false\", found 'maybe'",)),
    ("not json", ("PARAMS_FILE: expected JSON",)),
    (b'[{"name": "namespace", "value": "caf\xe9"}]', ("PARAMS_FILE: expected UTF-8",)),
], ids=["dry-run-maybe", "params-not-json", "params-not-utf8"])
def test_steps_bad_parameter_is_recorded_rejected_input_in_one_line(workdir: Path, params: object,
                                                                  words: tuple[str, ...]) -> None:
    """A bad parameter value is a reaction's recorded outcome, not a usage error: `rejected-input`,
    exit 0 by the step contract (ARCHITECTURE section 1: Argo must not retry it), one line on stderr."""
    if isinstance(params, bytes):
        (workdir / "bad.json").write_bytes(params)
    else:
        (workdir / "bad.json").write_text(params if isinstance(params, str) else json.dumps(params))
    outputs = workdir / "outputs"
    code, out, err = _process([sys.executable, "-m", "steps", "release-workers", "bad.json"], workdir,
                              GPUAAS_OUTPUTS_DIR=str(outputs), GPUAAS_KUBE_URL="http://127.0.0.1:9")
    assert code == 0 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("release-workers: rejected-input: "), err
    assert all(word in lines[0] for word in words), lines[0]
    assert (outputs / "outcome").read_text() == "rejected-input"
    assert json.loads(out)["data"]["outcome"] == "rejected-input"


def test_render_without_the_go_toolchain_is_its_own_exit_code(workdir: Path) -> None:
    """`render --check` must not say "stale" (1) when it could not check: 3, one line, what to do."""
    no_tools = workdir / "empty-folder"
    code, out, err = _process([sys.executable, "-m", "gpuaas.cli", "render", "--check"], workdir,
                              PATH=str(no_tools))
    check_one_line_error(code, out, err, expected_code=3, prefix="gpuaas render: ",
                         words=("no `go` command is on PATH", "--no-validate"))


def test_render_over_a_corrupted_manifest_is_one_line(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A committed file that is not UTF-8 (a bad merge, an editor's encoding) is stale, not a traceback."""
    out = workdir / "manifests"
    assert main(["render", "--out", str(out), "--no-validate"]) == 0
    victim = next(out.joinpath("base").glob("*.yaml"))
    victim.write_bytes(b"caf\xe9: 1\n")
    capsys.readouterr()
    assert main(["render", "--check", "--out", str(out), "--no-validate"]) == 1
    assert capsys.readouterr().out == f"would change: {victim}\n"
    assert main(["render", "--out", str(out), "--no-validate"]) == 0
    assert main(["render", "--check", "--out", str(out), "--no-validate"]) == 0


@contextmanager
def _http_server(status: int, content_type: str, body: bytes) -> Iterator[str]:
    """A real HTTP server on loopback that answers every GET the same way (not an Argo Server)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.mark.parametrize(("status", "content_type", "body", "words"), [
    (404, "application/json", (b'{"kind": "Status", "code": 404, "message": "the server could not find the '
                               b'requested resource"}'), ("404", "expected the Argo Server's API", "check --argo-server")),
    (200, "text/html", b"<html><body>Log in with OpenShift</body></html>",
     ("expected JSON from the Argo Server's API", "found an HTML page", "check --argo-server")),
], ids=["answers-404", "answers-a-login-page"])
@pytest.mark.parametrize("action", [[], ["show", "gpuaas-on-admitted-a1b2c"],
                                    ["report", "--html", "report"]], ids=["list", "show", "report"])
def test_audit_against_a_server_that_is_not_argo_is_one_line(workdir: Path, capsys: pytest.CaptureFixture[str],
                                                             status: int, content_type: str, body: bytes,
                                                             words: tuple[str, ...], action: list[str]) -> None:
    """A wrong --argo-server (the Kubernetes API, a UI path, a login proxy in front of Argo) is the
    commonest mistake with a live source: one line that says so, never the HTTP client's traceback."""
    with _http_server(status, content_type, body) as url:
        try:
            exit_code = main(["audit", *action[:1], "--argo-server", url, *action[1:]])
        except SystemExit as stop:
            exit_code = int(stop.code or 0)
    captured = capsys.readouterr()
    check_one_line_error(exit_code, captured.out, captured.err, expected_code=2, prefix="gpuaas audit",
                         words=words)


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port something already listens on (what `python -m engine.apiserver 8080` meets when
    8080 is taken)."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


ENGINE_CASES = [
    # (id, argv after `python -m`, words); {busy} is a port in use
    ("apiserver-port-word", ["engine.apiserver", "abc"], ("expected a TCP port", "found 'abc'")),
    ("apiserver-port-range", ["engine.apiserver", "99999"], ("expected a TCP port", "found '99999'")),
    ("apiserver-port-busy", ["engine.apiserver", "{busy}"], ("already in use", "another port")),
    ("apiserver-two-ports", ["engine.apiserver", "1", "2"], ("expected one PORT", "found 2")),
    ("cluster-state-no-file", ["engine.cluster_state"], ("usage: python -m engine.cluster_state FILE",)),
    ("cluster-state-missing", ["engine.cluster_state", "nope.json"], ("nope.json", "cannot read it")),
    ("cluster-state-not-json", ["engine.cluster_state", "broken.json"], ("broken.json", "cannot read it")),
    ("cluster-state-shape", ["engine.cluster_state", "list.json"], ("expected {\"objects\": [...]}", "found list")),
    ("cluster-state-empty", ["engine.cluster_state", "empty.json"], ("empty.json", "found an empty file")),
    ("cluster-state-not-utf8", ["engine.cluster_state", "latin1.json"], ("latin1.json", "cannot read it")),
    ("cluster-state-no-api", ["engine.cluster_state", "cluster-snapshot.json"], ("expected a Kubernetes API",)),
]


@pytest.mark.parametrize(("argv", "words"), [c[1:] for c in ENGINE_CASES], ids=[c[0] for c in ENGINE_CASES])
def test_the_engine_commands_the_docs_show_answer_bad_input_with_one_line(workdir: Path, busy_port: int,
                                                                          argv: list[str],
                                                                          words: tuple[str, ...]) -> None:
    """docs/reactions.md and docs/local-engine.md tell users to run these two by hand."""
    argv = [word.replace("{busy}", str(busy_port)) for word in argv]
    code, out, err = _process([sys.executable, "-m", *argv], workdir, HOME=str(workdir),
                              PYTHONPATH=str(REPO))
    check_one_line_error(code, out, err, expected_code=2, prefix=f"python -m {argv[0]}", words=words)
