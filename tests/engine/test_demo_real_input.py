"""`gpuaas demo --stack real` without a cluster: the state dir's checks and the demo tenants' policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from engine import demo_cluster
from gpuaas import demo_real
from gpuaas.cluster.stack import Cluster
from steps.policy import KEY, parse_policy

REPO = Path(__file__).resolve().parents[2]


def _status(monkeypatch: pytest.MonkeyPatch, status: dict[str, Any]) -> None:
    monkeypatch.setattr(Cluster, "status", lambda self: {"stateDir": str(self.state_dir), **status})


def test_a_ready_cluster_without_the_events_part_is_refused_with_what_to_do(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _status(monkeypatch, {"phase": "ready", "parts": ["node", "argo"]})
    with pytest.raises(demo_real.StackNotReady, match=r"expected the events part .*found parts \['node', 'argo'\]"
                                                      r".*gpuaas cluster up --with events --state-dir"):
        demo_real.check_stack(tmp_path)


def test_a_cluster_still_starting_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _status(monkeypatch, {"phase": "starting", "parts": ["node", "argo", "events"]})
    with pytest.raises(demo_real.StackNotReady, match="expected a ready cluster, found phase starting"):
        demo_real.check_stack(tmp_path)


def test_a_ready_cluster_with_events_is_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _status(monkeypatch, {"phase": "ready", "parts": ["node", "argo", "events"]})
    assert demo_real.check_stack(tmp_path)["phase"] == "ready"


def test_the_demo_tenants_idle_with_the_stacks_window_and_a_second_demo_replaces_the_first() -> None:
    rendered = yaml.safe_load((REPO / "manifests" / "base" / "policy.yaml").read_text())["data"][KEY]
    once = demo_real.with_demo_tenants(rendered, "30s")
    twice = demo_real.with_demo_tenants(once, "45s")
    policy = parse_policy(twice)
    for tenant in demo_cluster.TENANTS:
        settings = policy.idle_for(tenant.name)
        assert (settings.window_seconds, settings.min_runtime_seconds, settings.mode) == (45, 0, "enforce")
    assert twice.count("added by `gpuaas demo --stack real`") == 1
    assert parse_policy(twice).raw["tenants"]["team-a"] == parse_policy(rendered).raw["tenants"]["team-a"]


def test_the_stack_tenants_need_no_fake_nodes_and_tolerate_the_gpu_taint() -> None:
    objects = demo_real.platform_objects()
    kinds = {o["kind"] for o in objects}
    assert "Node" not in kinds and "ConfigMap" not in kinds
    (flavor,) = [o for o in objects if o["kind"] == "ResourceFlavor"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in flavor["spec"]["tolerations"]
    assert sorted(o["metadata"]["name"] for o in objects if o["kind"] == "ClusterQueue") == [
        "research", "serving", "vision"]


def _live(kind: str, name: str, managers: list[str], labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A live object as the apiserver serves it: who wrote it is in managedFields (status writers by subresource)."""
    fields = [{"manager": m.split(":")[0], "operation": "Update" if ":" in m else "Apply",
               **({"subresource": m.split(":")[1]} if ":" in m else {})} for m in managers]
    return {"kind": kind, "metadata": {"name": name, "labels": labels or {}, "managedFields": fields}}


def test_a_namespace_or_queue_of_the_same_name_the_demo_did_not_make_is_never_taken_over() -> None:
    """The demo deletes its namespaces from an earlier run and applies its ClusterQueues and flavor with
    --force-conflicts: an object of the same name that someone else made must stop it before anything changes."""
    demo = demo_real.FIELD_MANAGER
    mine = {demo_real.DEMO_LABEL: demo_real.FIELD_MANAGER}
    foreign = demo_real.not_the_demos([
        _live("Namespace", "team-vision", ["kubectl-create"]),  # a user's namespace: would be deleted
        _live("Namespace", "team-serving", [demo, "kubectl-label"]),  # an earlier demo's, since labelled by hand
        _live("Namespace", "team-research", [demo]),  # an earlier demo's (made before the label existed)
        _live("ClusterQueue", "research", ["kubectl-client-side-apply", "kueue:status"]),  # a user's queue
        _live("ClusterQueue", "vision", [demo, "kueue:status"]),  # an earlier demo's
        _live("ClusterQueue", "serving", ["someone", "kueue:status"], mine),  # labelled by the demo
        _live("ResourceFlavor", "a100", ["kubectl-create"]),  # a user's flavor: would lose its node labels
    ])
    assert [(kind, name) for kind, name, _ in foreign] == [
        ("Namespace", "team-vision"), ("Namespace", "team-serving"), ("ClusterQueue", "research"),
        ("ResourceFlavor", "a100")]
    assert foreign[0][2] == ["kubectl-create"]


def test_the_demos_own_objects_carry_its_label() -> None:
    for obj in demo_real.platform_objects():
        if obj["kind"] in ("Namespace", "ClusterQueue", "ResourceFlavor", "LocalQueue"):
            assert obj["metadata"]["labels"][demo_real.DEMO_LABEL] == demo_real.FIELD_MANAGER, obj["metadata"]


def test_the_cli_refuses_a_cluster_where_a_demo_name_is_someone_elses_before_anything_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from kubernetes import config

    from gpuaas.cli import main

    _status(monkeypatch, {"phase": "ready", "parts": ["node", "argo", "events"], "kubeconfig": "kubeconfig"})
    monkeypatch.setattr(config, "new_client_from_config", lambda **_: object())
    monkeypatch.setattr(demo_real, "existing_demo_objects",
                        lambda _: [_live("Namespace", "team-vision", ["kubectl-create"])])
    monkeypatch.setattr(demo_real, "run_real_demo", lambda *_: pytest.fail("the demo started"))
    code = main(["demo", "--stack", "real", "--state-dir", str(tmp_path), "--output-dir", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "", captured
    (line,) = captured.err.splitlines()
    assert line.startswith("gpuaas demo: expected the demo's names free") and \
        "Namespace team-vision (written by kubectl-create)" in line and "nothing was changed" in line, line


def test_the_cli_says_in_one_line_when_the_clusters_apiserver_does_not_answer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The state file says ready, the apiserver is gone (killed since): one line, exit 2, no traceback."""
    import urllib3
    from kubernetes import config

    from gpuaas.cli import main

    def refused(_: Any) -> list[dict[str, Any]]:
        raise urllib3.exceptions.MaxRetryError(None, "/api/v1/namespaces", "Connection refused")  # type: ignore[arg-type]

    _status(monkeypatch, {"phase": "ready", "parts": ["node", "argo", "events"], "kubeconfig": "kubeconfig"})
    monkeypatch.setattr(config, "new_client_from_config", lambda **_: object())
    monkeypatch.setattr(demo_real, "existing_demo_objects", refused)
    code = main(["demo", "--stack", "real", "--state-dir", str(tmp_path), "--output-dir", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "", captured
    (line,) = captured.err.splitlines()
    assert line.startswith(f"gpuaas demo: --state-dir {tmp_path}: expected its apiserver to answer") and \
        "MaxRetryError" in line, line


def test_an_api_error_during_the_demo_is_one_line_and_exit_1(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Mid-story the apiserver refuses a request (ApiException is no RuntimeError): one line, not a traceback."""
    from kubernetes import config
    from kubernetes.client.rest import ApiException

    from gpuaas.cli import main

    def forbidden(*_: Any) -> None:
        raise ApiException(status=403, reason="Forbidden")

    _status(monkeypatch, {"phase": "ready", "parts": ["node", "argo", "events"], "kubeconfig": "kubeconfig"})
    monkeypatch.setattr(config, "new_client_from_config", lambda **_: object())
    monkeypatch.setattr(demo_real, "existing_demo_objects", lambda _: [])
    monkeypatch.setattr(demo_real, "run_real_demo", forbidden)
    code = main(["demo", "--stack", "real", "--state-dir", str(tmp_path), "--output-dir", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 1, captured
    (line,) = captured.err.splitlines()
    assert line.startswith("gpuaas demo: the real stack failed: ApiException: (403)") and "Forbidden" in line, line


class _Stop(Exception):
    """Raised by a stand-in right after the demo prepared its output folder."""


def test_a_report_folder_keeps_no_file_of_the_other_stacks_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast demo writes runs.db and cluster-snapshot.json, the real one runs.json, into the same folder:
    each removes the other's, or the folder shows a stale archive or snapshot next to a report that is not theirs."""
    from kubernetes import config

    from engine import demo as fast_demo
    from engine import exporter

    def stop(*_: Any, **__: Any) -> None:
        raise _Stop

    def leftovers() -> None:
        for name in ("runs.db", "cluster-snapshot.json", "runs.json"):
            (tmp_path / name).write_text("an earlier demo's\n")

    leftovers()
    monkeypatch.setattr(config, "new_client_from_config", stop)
    with pytest.raises(_Stop):
        demo_real.RealScenario(fast_demo.DemoOptions(output_dir=tmp_path, progress=None), tmp_path,
                               {"kubeconfig": "kubeconfig"}).run()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.json"]

    leftovers()
    monkeypatch.setattr(exporter, "DcgmExporter", stop)
    with pytest.raises(_Stop):
        fast_demo.Scenario(fast_demo.DemoOptions(output_dir=tmp_path, progress=None)).run()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster-snapshot.json"]  # its own, rewritten at the end


def test_the_reports_files_give_an_audit_command_only_while_the_server_is_there() -> None:
    """Without --state-dir the demo's cluster is gone at the end: the Files section says so in words, it does
    not print that sentence as a command to run against the stopped Argo Server."""
    from engine import report

    summary = {"stack": "real", "runs_source": "Argo Server http://127.0.0.1:1 (namespace gpuaas; live and archived)",
               "stand_ins": ["KWOK"], "files": {"audit": "the demo's cluster was stopped: runs.json holds the runs"}}
    stopped = report._files(summary)
    assert "<code>the demo" not in stopped and "the demo&#x27;s cluster was stopped" in stopped, stopped
    summary["files"]["audit"] = "gpuaas audit --argo-server http://127.0.0.1:1"
    assert "audit them there: <code>gpuaas audit --argo-server http://127.0.0.1:1</code>" in report._files(summary)
