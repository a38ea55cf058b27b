"""`gpuaas doctor` as a command over real HTTP, on the local engine's Kubernetes API (it serves discovery for
the kinds it emulates, and no controller runs): the table and --output json, the exit code, and what it says
it could not read. What it finds on real components is tests/realstack/test_doctor.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuaas.cli import main
from steps.gateways import resources as R
from tests.support.apiserver import running_apiserver

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tenant_cluster() -> str:
    with running_apiserver() as api:
        api.store.create(R.CLUSTER_QUEUE, {"metadata": {"name": "team-a"}, "spec": {"resourceGroups": [
            {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "a100", "resources": [
                {"name": "nvidia.com/gpu", "nominalQuota": "4"}]}]}]}})
        api.store.create(R.LOCAL_QUEUE, {"metadata": {"name": "team-a", "namespace": "team-a"},
                                         "spec": {"clusterQueue": "team-a"}})
        yield api.url


def test_json_report_names_what_blocks_and_what_could_not_be_read(tenant_cluster: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["doctor", "--kube-url", tenant_cluster, "--output", "json"])
    out = capsys.readouterr()
    report = json.loads(out.out)
    assert code == 1 and report["exitCode"] == 1 and report["status"] == "blocks"
    statuses = {f["check"]: f["status"] for f in report["findings"]}
    assert statuses["argo-events.pods"] == "blocks" and statuses["prometheus"] == "warn"
    assert statuses["tenant:team-a"] == "warn"  # its namespace lacks the tenant label
    assert "metrics" in report["unreadable"]  # no Prometheus given: the series are not judged, not "missing"
    assert {"kueue.metrics", "prometheus.rules", "dcgm-exporter", "kube-state-metrics"} <= set(report["notChecked"])
    assert "read tenants" in out.err  # progress goes to stderr, the JSON alone to stdout


def test_table_by_default(tenant_cluster: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--kube-url", tenant_cluster]) == 1
    text = capsys.readouterr().out
    assert text.splitlines()[0].split() == ["status", "check", "finding"]
    assert "BLOCKS  argo-events.pods" in text and "not checked (their input could not be read):" in text
    assert text.rstrip().endswith("end-to-end probe not run (add --probe)")


def test_print_role_is_a_cluster_role_that_validates(capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    assert main(["doctor", "--print-role"]) == 0
    role = next(d for d in yaml.safe_load_all(capsys.readouterr().out) if d)
    assert role["kind"] == "ClusterRole" and role["metadata"]["name"] == "gpuaas-doctor"
    secrets = next(r for r in role["rules"] if r["resources"] == ["secrets"])
    assert secrets["verbs"] == ["get"] and secrets["resourceNames"] == ["gpuaas-alertmanager-webhook", "gpuaas-admin-alerts"]
    assert not [r for r in role["rules"] if set(r["verbs"]) - {"get", "list", "create"}]
    creates = [r for r in role["rules"] if "create" in r["verbs"]]
    assert sorted(res for r in creates for res in r["resources"]) == ["resourceflavors", "scaledobjects"]
