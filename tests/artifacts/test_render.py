"""The committed manifests/ are exactly what the Python renders (Hera's example/YAML pairing).

Regenerate on purpose with `gpuaas render` or `GPUAAS_REGENERATE=1 pytest tests/artifacts`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from gpuaas.commands import render
from gpuaas.manifests.files import render_files
from gpuaas.manifests.validation import YamlLoader
from tests.artifacts.conftest import MANIFESTS
from tests.support.kubectl import pinned_kubectl


def _run_render(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    render.configure(parser)
    return render.run(parser.parse_args(list(argv)))


def test_committed_manifests_match_the_render() -> None:
    if os.environ.get("GPUAAS_REGENERATE") == "1":
        assert _run_render("--out", str(MANIFESTS)) == 0
    files = render_files()
    stale = [path for path, text in files.items()
             if not (MANIFESTS / path).is_file() or (MANIFESTS / path).read_text() != text]
    assert stale == [], f"manifests/ is stale for {stale}: run `gpuaas render` (or GPUAAS_REGENERATE=1) and commit"


@pytest.mark.parametrize("module_name", __import__("workflows").MODULES)
def test_each_hera_module_renders_its_committed_yaml(module_name: str) -> None:
    """workflows/<module>.py <-> manifests/base/workflows/<template>.yaml, like Hera's examples."""
    import importlib

    module = importlib.import_module(module_name)
    committed = yaml.safe_load((MANIFESTS / "base" / "workflows" / f"{module.NAME}.yaml").read_text())
    rendered = module.workflow_template().to_dict()
    assert committed.pop("metadata").items() >= rendered.pop("metadata").items()
    assert committed == rendered


def test_render_writes_a_fresh_folder_and_check_reports_changes(tmp_path: Path) -> None:
    out = tmp_path / "manifests"
    assert _run_render("--out", str(out), "--check") == 1          # nothing there yet
    assert _run_render("--out", str(out)) == 0
    assert _run_render("--out", str(out), "--check") == 0
    (out / "base" / "policy.yaml").write_text("# edited by hand\n")
    (out / "base" / "workflows" / "gpuaas-renamed.yaml").write_text("kind: WorkflowTemplate\n")
    assert _run_render("--out", str(out), "--check") == 1
    assert _run_render("--out", str(out)) == 0
    assert not (out / "base" / "workflows" / "gpuaas-renamed.yaml").exists()
    assert (out / "base" / "policy.yaml").read_text() == render_files()["base/policy.yaml"]


def test_workload_version_v1beta1_changes_only_the_event_source(tmp_path: Path) -> None:
    v1beta2, v1beta1 = render_files("v1beta2"), render_files("v1beta1")
    changed = sorted(p for p in v1beta2 if v1beta2[p] != v1beta1[p])
    assert changed == ["base/events/eventsource-gpuaas-workloads.yaml"]
    assert "version: v1beta1" in v1beta1[changed[0]]


@pytest.mark.parametrize("overlay", ["openshift", "kubernetes", "kube-prometheus-stack"])
def test_overlay_builds_with_kustomize_and_pins_every_step_image(overlay: str) -> None:
    built = subprocess.run([str(pinned_kubectl()), "kustomize", str(MANIFESTS / "overlays" / overlay)],
                           capture_output=True, text=True, check=True).stdout
    # kustomize prints `=` (an AlertmanagerConfig matchType) unquoted; Go reads it as a string, PyYAML needs help.
    documents = [d for d in yaml.load_all(built, Loader=YamlLoader) if d]
    images = []
    for doc in documents:
        if doc["kind"] == "WorkflowTemplate":
            images += [t["script"]["image"] for t in doc["spec"]["templates"] if "script" in t]
    assert images and set(images) == {"quay.io/gpuaas/gpuaas-step:0.1.0"}
    namespaces = {(d["kind"], d["metadata"].get("namespace")) for d in documents}
    assert ("LocalQueue", "team-a") in namespaces and ("WorkflowTemplate", "gpuaas") in namespaces
    kinds = {d["kind"] for d in documents}
    target = "MachineSet" if overlay == "openshift" else "MachineDeployment"
    scaled = [d for d in documents if d["kind"] == "ScaledObject"]
    assert len(scaled) == 1 and scaled[0]["spec"]["scaleTargetRef"]["kind"] == target
    assert {"Sensor", "EventSource", "EventBus", "PrometheusRule", "ClusterQueue"} <= kinds
    # what the platform's values say (examples/values/<overlay>.yaml), as kustomize built it
    from gpuaas.manifests import site

    chosen = site.example_values(overlay)
    (rule,) = [d for d in documents if d["kind"] == "PrometheusRule"]
    assert chosen["monitoring"]["ruleLabels"].items() <= rule["metadata"]["labels"].items()
    (settings,) = [d for d in documents if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "gpuaas-prometheus"]
    assert settings["data"] == site.prometheus_settings(chosen["prometheus"])
    tenants = [d for d in documents if d["kind"] == "Namespace" and "gpuaas.io/tenant" in d["metadata"]["labels"]]
    assert tenants and all(chosen["kueue"]["namespaceLabels"].items() <= d["metadata"]["labels"].items()
                           for d in tenants)