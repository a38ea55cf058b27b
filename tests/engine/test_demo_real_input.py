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
