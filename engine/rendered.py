"""The rendered manifests under manifests/: what the engine runs, read as a cluster would get them.

The engine never imports workflows/ or sensors/: it reads the YAML that `gpuaas render` wrote (the
same bytes an admin applies with `kubectl apply -k`), so what the demo shows is what a cluster runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"


@dataclass
class RenderedManifests:
    """Every rendered object, indexed by kind and name."""

    root: Path
    objects: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, root: Path | str = DEFAULT_MANIFESTS) -> RenderedManifests:
        root = Path(root)
        if not root.is_dir():
            raise FileNotFoundError(f"manifests directory {root}: not found; run `gpuaas render` first "
                                    "or pass --manifests DIR")
        objects: list[dict[str, Any]] = []
        for path in sorted(root.rglob("*.y*ml")):
            if path.name.startswith("kustomization"):
                continue
            try:
                documents = list(yaml.safe_load_all(path.read_text()))
            except yaml.YAMLError as error:
                raise ValueError(f"{path}: not valid YAML ({error}); re-render with `gpuaas render`") from error
            for document in documents:
                if isinstance(document, dict) and "kind" in document:
                    if document.get("kind", "").endswith("List") and isinstance(document.get("items"), list):
                        objects.extend(item for item in document["items"] if isinstance(item, dict))
                    else:
                        objects.append(document)
        return cls(root=root, objects=objects)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        """Objects of one kind, first occurrence per name (overlays may repeat the base)."""
        seen: dict[str, dict[str, Any]] = {}
        for obj in self.objects:
            if obj.get("kind") == kind:
                seen.setdefault((obj.get("metadata") or {}).get("name", ""), obj)
        return list(seen.values())

    def workflow_templates(self) -> dict[str, dict[str, Any]]:
        return {t["metadata"]["name"]: t for t in self.of_kind("WorkflowTemplate")}

    def sensors(self) -> list[dict[str, Any]]:
        return self.of_kind("Sensor")

    def event_sources(self) -> list[dict[str, Any]]:
        return self.of_kind("EventSource")

    def cron_workflows(self) -> list[dict[str, Any]]:
        return self.of_kind("CronWorkflow")
