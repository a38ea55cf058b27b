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
              server: dict = SERVER) -> subprocess.CompletedProcess:
    """Each `expected` entry: the query's samples at that evaluation time (series sampled every 10 s from 0)."""
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool (Debian package prometheus) is needed: run `make setup`"
    query = activity_query("ns", server, WINDOW_S)
    (tmp_path / "test.yaml").write_text(yaml.safe_dump({
        "rule_files": [], "evaluation_interval": "10s",
        "tests": [{"interval": "10s", "input_series": series,
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
