"""The idle ScaledObject's activity query, evaluated by the real Prometheus engine (`promtool test rules`).

KEDA judges a target idle when this query is at or below the threshold; empty is an error on which
KEDA keeps the replicas. So it must be empty until the target's live pods have reported for a whole
window (a new or resumed server is not judged on its first samples) and must not count the pods the
server had before it went to 0, whose last samples are still inside the window after they are gone.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from steps.reactions.on_admitted import activity_query

WINDOW_S = 60
SERVER = {"kind": "Deployment", "metadata": {"name": "srv"}}


def _evaluate(tmp_path: Path, series: list[dict], expected: dict[str, list[dict]],
              server: dict = SERVER, interval: str = "10s", **limits: float) -> subprocess.CompletedProcess:
    """Each `expected` entry: the query's samples at that evaluation time (series sampled every `interval`
    from 0)."""
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool (Debian package prometheus) is needed: run `make setup`"
    query = activity_query("ns", server, WINDOW_S, **limits)
    (tmp_path / "test.yaml").write_text(yaml.safe_dump({
        "rule_files": [], "evaluation_interval": "10s",
        "tests": [{"interval": interval, "input_series": series,
                   "promql_expr_test": [{"expr": query, "eval_time": at, "exp_samples": samples}
                                        for at, samples in expected.items()]}]}))
    return subprocess.run([promtool, "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True,
                          check=False)


def _util(pod: str, values: str, *, exported: bool = False) -> dict:
    labels = f'exported_namespace="ns",exported_pod="{pod}"' if exported else f'namespace="ns",pod="{pod}"'
    return {"series": f'DCGM_FI_DEV_GPU_UTIL{{{labels},gpu="0"}}', "values": values}


def test_pods_that_reported_for_less_than_a_window_give_no_value(tmp_path: Path) -> None:
    done = _evaluate(tmp_path, [_util("srv-abc12-aaaaa", "_x3 0x20")],         # first sample at 30 s
                     {"40s": [], "80s": [], "90s": [{"labels": "{}", "value": 0}]})
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_pods_before_a_scale_to_zero_do_not_count_for_the_resumed_ones(tmp_path: Path) -> None:
    """Old pod: 0 until 100 s, then gone (stale). New pod from 130 s: judged from 190 s on."""
    done = _evaluate(tmp_path, [_util("srv-abc12-aaaaa", "0x10 stale"), _util("srv-abc12-bbbbb", "_x13 0x20")],
                     {"120s": [], "150s": [], "180s": [], "190s": [{"labels": "{}", "value": 0}]})
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_busiest_gpu_of_the_window_counts_in_either_label_spelling(tmp_path: Path) -> None:
    done = _evaluate(tmp_path, [_util("srv-abc12-aaaaa", "0 0 0 0 0 0 6 0 0 0 0 0 0", exported=True),
                                _util("srv-abc12-bbbbb", "1x12"), _util("other-abc12-ccccc", "90x12")],
                     {"100s": [{"labels": "{}", "value": 0.06}], "130s": [{"labels": "{}", "value": 0.01}]})
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_name_with_dashes_and_dots_is_a_valid_promql_regex(tmp_path: Path) -> None:
    """Found on the real stack: `re.escape` gave `llm\\-server`, which PromQL's string parser refuses
    ("unknown escape sequence"), so KEDA's query failed with 400 for any name with a dash."""
    done = _evaluate(tmp_path, [_util("llm-server.v2-0", "3x12"), _util("llm-serverxv2-0", "90x12")],
                     {"100s": [{"labels": "{}", "value": 0.03}]},
                     server={"kind": "StatefulSet", "metadata": {"name": "llm-server.v2"}})
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_statefulset_pod_back_under_its_old_name_is_judged_only_on_its_own_samples(tmp_path: Path) -> None:
    """A StatefulSet's pod comes back as `srv-0` again: the same series (same pod, namespace and GPU
    labels) as before the scale to 0. Old pod: 0 until 100 s, then stale; the new one reports from
    130 s. Its old, idle samples must not count: empty until the new pod has reported for a whole
    window (from 190 s), or KEDA takes a server resumed soon after it went to 0 straight back to 0."""
    done = _evaluate(tmp_path, [_util("srv-0", "0x10 stale _ 0x20")],
                     {"150s": [], "180s": [], "190s": [{"labels": "{}", "value": 0}]},
                     server={"kind": "StatefulSet", "metadata": {"name": "srv"}})
    assert done.returncode == 0, done.stdout + done.stderr


def test_pods_younger_than_the_minimum_runtime_give_no_value(tmp_path: Path) -> None:
    """The tenant's minimum runtime is longer than the window: a server resumed long after KEDA took it
    to 0 (its cooldown long over) must not be judged before its pods have run that long either."""
    done = _evaluate(tmp_path, [_util("srv-abc12-aaaaa", "_x3 0x30")],          # first sample at 30 s
                     {"90s": [], "140s": [], "150s": [{"labels": "{}", "value": 0}]}, min_runtime_seconds=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_pods_are_not_judged_before_a_whole_window_between_the_presence_steps(tmp_path: Path) -> None:
    """The stack's Prometheus scrapes every 5 s, so a pod's first sample need not fall on the query's
    10 s presence steps. First sample at 35 s: at 91 s every step of the last 60 s (40 s .. 90 s) has
    it, yet the pod has reported for 56 s only; it is judged from 95 s (a whole window) on, and with
    a minimum runtime of 75 s from 110 s on."""
    pod = _util("srv-abc12-aaaaa", "_x7 0x40")                                   # first sample at 35 s
    done = _evaluate(tmp_path, [pod], {"91s": [], "94s": [], "95s": [{"labels": "{}", "value": 0}]}, interval="5s")
    assert done.returncode == 0, done.stdout + done.stderr
    done = _evaluate(tmp_path, [pod], {"101s": [], "109s": [], "110s": [{"labels": "{}", "value": 0}]},
                     interval="5s", min_runtime_seconds=75)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_resumed_server_is_not_judged_while_its_old_pods_still_terminate(tmp_path: Path) -> None:
    """Seen on the real stack: KEDA took the server to 0 and it was resumed at once; the old pods were
    still terminating (a terminating pod still holds its GPU, so the exporter still reports it) and
    had reported for far longer than a window, so the query read their idle samples and KEDA took the
    resumed server straight back to 0 at its next poll. While any pod of the target is younger than
    the window (here: the new one, from 130 s), nothing is judged."""
    done = _evaluate(tmp_path, [_util("srv-abc12-aaaaa", "0x20"), _util("srv-abc12-bbbbb", "_x13 0x20")],
                     {"150s": [], "180s": [], "190s": [{"labels": "{}", "value": 0}]})
    assert done.returncode == 0, done.stdout + done.stderr


def _mig(metric: str, pod: str, values: str) -> dict:
    return {"series": f'{metric}{{namespace="ns",pod="{pod}",gpu="0",UUID="GPU-1",GPU_I_ID="3",'
                      f'GPU_I_PROFILE="3g.40gb"}}', "values": values}


def test_a_server_on_a_mig_slice_is_never_judged_on_gpu_util(tmp_path: Path) -> None:
    """MIG does not report GPU_UTIL (0 or absent): a slice with only GPU_UTIL gives NO value (KEDA keeps the
    replicas), never 0 (which would take a busy server to 0); engine-active is its activity."""
    done = _evaluate(tmp_path, [_mig("DCGM_FI_DEV_GPU_UTIL", "srv-abc12-aaaaa", "0x13")], {"120s": []})
    assert done.returncode == 0, done.stdout + done.stderr
    done = _evaluate(tmp_path, [_mig("DCGM_FI_DEV_GPU_UTIL", "srv-abc12-aaaaa", "0x13"),
                                _mig("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "srv-abc12-aaaaa", "0.5x13")],
                     {"120s": [{"labels": "{}", "value": 0.5}]})
    assert done.returncode == 0, done.stdout + done.stderr
