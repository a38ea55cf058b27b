"""The malformed inputs issue 10 (item 10) names, each through the whole step: `rejected-input` with
a one-line error naming what was expected and what was found; never `failed`, never a traceback.
(tests/fuzz/ throws 10,000 generated cases at each entry point; these are the named ones.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.apiserver import ApiServer
from steps.names import is_dns_label, is_dns_subdomain

DEEP = "[" * 1000 + "]" * 1000
GROUP = {"version": "4", "status": "firing", "alerts": [
    {"status": "firing", "labels": {"alertname": "GPUWorkloadIdle", "namespace": "team-a", "pod": "nb-\ud800"}}]}


def params(**values: str) -> bytes:
    return json.dumps([{"name": k.replace("_", "-"), "value": v} for k, v in values.items()]).encode()


CASES = [
    ("json-1000-deep-params", "release-workers", DEEP.encode(), "PARAMS_FILE: expected JSON nested at most 64"),
    ("json-1000-deep-event", "on-admitted", params(namespace="team-a", workload="w", event=DEEP),
     "event: expected JSON nested at most 64"),
    ("params-not-utf8", "release-workers", b'[{"name": "namespace", "value": "caf\xe9"}]',
     "PARAMS_FILE: expected UTF-8 JSON text, found bytes that are not UTF-8"),
    ("lone-surrogate-in-alert-labels", "idle-alerts", params(event=json.dumps(GROUP)),
     "event: expected valid Unicode text, found a lone surrogate"),
    ("lone-surrogate-in-a-name", "release-workers", params(namespace="team-a", workload="w\udc80"),
     "PARAMS_FILE: expected valid Unicode text"),
    ("gpus-thousands-of-digits", "provision-quota", params(tenant="t", flavor="a100", gpus="9" * 5000),
     "gpus: expected a whole number of GPUs from 0 to 1000000 (ASCII digits)"),
    ("gpus-non-ascii-digits", "provision-quota", params(tenant="t", flavor="a100", gpus="٣"),
     "gpus: expected a whole number of GPUs"),
    ("gpus-superscript", "provision-quota", params(tenant="t", flavor="a100", gpus="²"),
     "gpus: expected a whole number of GPUs"),
    ("borrowing-limit-superscript", "provision-quota", params(tenant="t", flavor="a100", gpus="8", borrowing_limit="²"),
     "borrowing-limit: expected a whole number of GPUs from 0 to 1000000 (ASCII digits)"),
    ("lending-limit-thousands-of-digits", "provision-quota",
     params(tenant="t", flavor="a100", gpus="8", lending_limit="9" * 5000),
     "lending-limit: expected a whole number of GPUs from 0 to 1000000 (ASCII digits)"),
    ("borrowing-limit-non-ascii-digits", "provision-quota", params(tenant="t", flavor="a100", gpus="8",
                                                                   borrowing_limit="٣"),
     "borrowing-limit: expected a whole number of GPUs"),
    ("borrowing-limit-beyond-any-cluster", "provision-quota", params(tenant="t", flavor="a100", gpus="8",
                                                                     borrowing_limit="9" * 23),
     "borrowing-limit: expected a whole number of GPUs"),
    ("non-ascii-namespace", "release-workers", params(namespace="tëam-a", workload="w"),
     "namespace: expected a namespace name"),
    ("non-ascii-digits-in-a-name", "release-workers", params(namespace="team-a", workload="job-١٢٣"),
     "workload: expected a Kubernetes object name"),
    ("cloudevent-without-id", "on-admitted", params(namespace="team-a", workload="w", event=json.dumps(
        {"specversion": "1.0", "source": "gpuaas-workloads", "type": "resource", "data": {"type": "ADD", "body": {
            "metadata": {"name": "w"}}}})), "event.id: expected the CloudEvent id"),
    ("sensor-event-without-id", "on-admitted", params(namespace="team-a", workload="w", event=json.dumps(
        {"context": {"type": "resource"}, "data": {"type": "ADD", "body": {"metadata": {"name": "w"}}}})),
     "event.context.id: expected the CloudEvent id"),
    ("integer-beyond-64-bits", "on-admitted", params(namespace="team-a", workload="w", event="1" * 4000),
     "event: expected integers within 64 bits"),
    ("nan-in-an-alert", "on-idle", params(namespace="team-a", workload="w", alert='{"labels": {}, "x": NaN}'),
     "alert: expected finite numbers"),
]


@pytest.mark.parametrize(("reaction", "content", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_input_is_rejected_input(api: ApiServer, tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                           reaction: str, content: bytes, message: str) -> None:
    from steps.entrypoint import main

    (tmp_path / "params").write_bytes(content)
    code = main([reaction, str(tmp_path / "params")], outputs_dir=str(tmp_path / "out"),
                environ={"GPUAAS_KUBE_URL": api.url})
    record = json.loads((tmp_path / "out" / "record").read_text())
    assert "Traceback" not in capfd.readouterr().err
    assert code == 0 and record["data"]["outcome"] == "rejected-input", record["data"]
    assert record["data"]["errors"][0].startswith(message), record["data"]["errors"]
    assert "\n" not in record["data"]["errors"][0]
    assert api.write_count == 0


@pytest.mark.parametrize("name", ["tëam", "team-١", "ｔｅａｍ", "a\u0301", "TEAM", "team_a", "-a", "a-", "a" * 64])
def test_dns_labels_are_ascii(name: str) -> None:
    assert not is_dns_label(name)


@pytest.mark.parametrize(("name", "ok"), [("team-a", True), ("a.b-c", True), ("a" * 253, True), ("a" * 254, False),
                                          ("ünicode", False), ("a..b", False), ("job-٣", False), ("a\n", False)])
def test_dns_subdomains_are_ascii(name: str, ok: bool) -> None:
    assert is_dns_subdomain(name) is ok
