"""Issue 9 part 6: the rendered manifests pass Argo's own linters, the pinned programs' real code.

- `argo lint --offline --strict` (Argo Workflows v4.0.5, stack/argo-workflows) on every
  WorkflowTemplate: offline, a `templateRef` resolves against the files given, so all of them go in
  one call.
- `argo-events lint --strict` (Argo Events v1.9.11, stack/argo-events) on every EventSource and
  Sensor: upstream's own command (cmd/commands/lint.go), which runs the controller's admission
  checks (`ValidateEventSource`, `ValidateSensor` against a JetStream EventBus).

What is linted: the committed base (manifests/base) and each overlay as kustomize builds it
(`kubectl kustomize`, the built kubectl), each object written to a file of its own, so a patch an
overlay adds is linted too. Neither linter says anything about a file without its kinds
(`argo-events lint` exits 0 and prints nothing), so every file must be named in a "valid" line:
a file the linter skipped fails the test. A broken copy of each kind must fail, so the checks are
not vacuous.

The programs come from `gpuaas cluster build` (`make test` runs it first); a missing one fails.
"""

from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaas.cluster.binaries import program
from gpuaas.cluster.objects import kustomize

REPOSITORY = Path(__file__).resolve().parents[1]
BASE = REPOSITORY / "manifests" / "base"
OVERLAYS = sorted(path.parent for path in (REPOSITORY / "manifests" / "overlays").glob("*/kustomization.yaml"))
WORKFLOW_KINDS = {"WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow", "Workflow"}
EVENT_KINDS = {"EventSource", "Sensor"}

JSON = dict[str, Any]


def _split(objects: list[JSON], folder: Path) -> tuple[list[Path], list[Path]]:
    """One file per Argo object: (workflow kinds, event kinds)."""
    folder.mkdir(parents=True, exist_ok=True)
    workflows, events = [], []
    for obj in objects:
        kind = obj.get("kind")
        if kind not in WORKFLOW_KINDS | EVENT_KINDS:
            continue
        path = folder / f"{kind.lower()}-{obj['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(obj, sort_keys=False))
        (workflows if kind in WORKFLOW_KINDS else events).append(path)
    return workflows, events


def _rendered(name: str, tmp_path: Path) -> tuple[list[Path], list[Path]]:
    folder = BASE if name == "base" else REPOSITORY / "manifests" / "overlays" / name
    return _split(kustomize(program("kubernetes", "kubectl"), folder), tmp_path / name)


def argo_lint(files: list[Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(program("argo-workflows", "argo")), "lint", "--offline", "--strict", "--output",
                           "simple", *map(str, files)], capture_output=True, text=True, check=False, timeout=300)


def argo_events_lint(files: list[Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(program("argo-events", "argo-events")), "lint", "--strict", *map(str, files)],
                          capture_output=True, text=True, check=False, timeout=300)


def _events_verdicts(output: str) -> dict[str, str]:
    """`argo-events lint`'s lines `✓ FILE: Sensor is valid` / `✗ FILE: ...` / `! FILE: ...` by file."""
    return {match.group(2): match.group(1) for match in re.finditer(r"^([✓✗!]) (\S+?): ", output, re.MULTILINE)}


@pytest.mark.parametrize("name", ["base", *(overlay.name for overlay in OVERLAYS)])
def test_every_workflow_template_passes_argo_lint_offline(name: str, tmp_path: Path) -> None:
    workflows, _ = _rendered(name, tmp_path)
    assert len(workflows) >= 6, f"expected the product's WorkflowTemplates in {name}, found {workflows}"
    done = argo_lint(workflows)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "no linting errors found" in output, output


@pytest.mark.parametrize("name", ["base", *(overlay.name for overlay in OVERLAYS)])
def test_every_event_source_and_sensor_passes_argo_events_lint(name: str, tmp_path: Path) -> None:
    _, events = _rendered(name, tmp_path)
    assert {path.name.split("-", 1)[0] for path in events} == {"eventsource", "sensor"}, events
    done = argo_events_lint(events)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert _events_verdicts(done.stdout) == {str(path): "✓" for path in events}, output


def test_argo_lint_rejects_a_template_whose_entrypoint_does_not_exist(tmp_path: Path) -> None:
    workflows, _ = _rendered("base", tmp_path)
    path = next(p for p in workflows if yaml.safe_load(p.read_text())["kind"] == "WorkflowTemplate")
    template = yaml.safe_load(path.read_text())
    broken = copy.deepcopy(template)
    broken["spec"]["entrypoint"] = "no-such-template"
    path.write_text(yaml.safe_dump(broken, sort_keys=False))
    done = argo_lint(workflows)
    assert done.returncode != 0, done.stdout + done.stderr
    assert "no-such-template" in done.stdout + done.stderr


def test_argo_events_lint_rejects_a_sensor_with_a_trigger_on_no_dependency(tmp_path: Path) -> None:
    _, events = _rendered("base", tmp_path)
    sensor_file = next(path for path in events if path.name.startswith("sensor-"))
    sensor = yaml.safe_load(sensor_file.read_text())
    sensor["spec"]["dependencies"] = []
    sensor_file.write_text(yaml.safe_dump(sensor, sort_keys=False))
    done = argo_events_lint([sensor_file])
    assert done.returncode != 0, done.stdout + done.stderr
    assert _events_verdicts(done.stdout) == {str(sensor_file): "✗"}, done.stdout + done.stderr
