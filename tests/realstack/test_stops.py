"""`gpuaas cluster up` stopped while it starts leaves nothing running (issue 18 item 2), on the real components.

`cluster up` runs as a user runs it (its own process, `python -m gpuaas.cli cluster up --no-build`) in a state
dir of its own under /var/tmp, and is stopped once etcd and kube-apiserver are up and the controllers start:
Ctrl-C to its process group (as a terminal sends it), or SIGTERM to it alone. The components run in sessions of
their own (they must outlive a `cluster up` that finished), so neither signal reaches them: `up` must stop them.
Then: exit 130 or 143, one line on stderr saying what was stopped, every pid recorded in state.json gone, and no
process left whose command line names the state dir (read from /proc).

The control plane alone, without `--with events`: what is checked is `Cluster.up`'s one cleanup path, the same
for every part (every process is recorded before it is waited for), and without the real node this test
neither waits for the machine's one node lock nor starts a second Argo stack. The real demo's own variants:
`gpuaas demo --stack real --state-dir` stopped mid-story is in test_demo_real.py (on the session's Argo
cluster); without --state-dir the demo's cluster start is this same `Cluster.up`, and its story's stop runs
the `finally` that stops that cluster (gpuaas.demo_real.run_real_demo).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from gpuaas.cluster.binaries import build_all
from tests.support.processes import processes_naming

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("how", ["ctrl-c to the process group", "sigterm to cluster up alone"])
def test_cluster_up_stopped_while_starting_stops_what_it_started(how: str) -> None:
    build_all(progress=print)
    state_dir = Path(tempfile.mkdtemp(prefix="gpuaas-stop-test-", dir="/var/tmp"))
    try:
        process = subprocess.Popen([sys.executable, "-m", "gpuaas.cli", "cluster", "up", "--no-build", "--state-dir",
                                    str(state_dir)], cwd=REPO, text=True, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, start_new_session=True,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert process.stderr is not None
        seen = []
        for line in process.stderr:  # progress goes to stderr
            seen.append(line)
            if "kube-controller-manager and kube-scheduler" in line:
                break
        else:
            pytest.fail(f"cluster up ended before starting the controllers:\n{''.join(seen)}")
        running = processes_naming(str(state_dir))
        assert any("etcd" in p for p in running) and any("kube-apiserver" in p for p in running), running
        if how.startswith("ctrl-c"):
            os.killpg(process.pid, signal.SIGINT)
            expected, words = 130, "stopped by Ctrl-C (SIGINT) while starting"
        else:
            os.kill(process.pid, signal.SIGTERM)
            expected, words = 143, "stopped by SIGTERM while starting"
        rest = process.stderr.read()
        process.wait(timeout=180)
        assert process.returncode == expected, f"exit {process.returncode}:\n{''.join(seen)}{rest}"
        assert "Traceback" not in rest, rest
        final = [line for line in rest.splitlines() if line.startswith("gpuaas cluster up:")]
        assert len(final) == 1 and words in final[0] and "processes it had started" in final[0], rest
        assert [line for line in rest.splitlines() if not line.startswith("[")] == final, rest  # progress + 1 line
        state = json.loads((state_dir / "state.json").read_text())
        assert state["phase"] == "failed"
        pids = [record["pid"] for record in state["processes"].values()]
        assert pids and not [pid for pid in pids if Path(f"/proc/{pid}").exists()
                             and "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1][:3]], pids
        time.sleep(0.5)
        assert processes_naming(str(state_dir)) == []
    finally:
        subprocess.run([sys.executable, "-m", "gpuaas.cli", "cluster", "down", "--state-dir", str(state_dir)],
                       cwd=REPO, capture_output=True, timeout=300, check=False)
        shutil.rmtree(state_dir, ignore_errors=True)
