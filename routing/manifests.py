"""Reading rendered Sensors and EventSources from a manifests folder.

Two ways, both without running kustomize:

* the folder (or a folder below it) is a kustomization root (`kustomization.yaml` present):
  follow its `resources:` (files and folders, recursively, as `kubectl apply -k` would), and
  give objects without a namespace the namespace of the outermost kustomization that sets one.
  `patches` are NOT applied (a warning says so); point at the base to see the Sensors as rendered;
* otherwise every YAML/JSON document under the folder (recursively).

Only objects of kind Sensor and EventSource (`argoproj.io/*`) are kept. The same object found
twice (a base and an overlay copy, with or without a namespace) is kept once; if the copies
differ, the first wins and a warning says which file was ignored.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ARGO_EVENTS_KINDS = ("Sensor", "EventSource")
_MAY_HOLD_ARGO_EVENTS = re.compile(r"""["']?kind["']?\s*:\s*["']?(?:Sensor|EventSource|\w*List)\b""")
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_KUSTOMIZATION_NAMES = ("kustomization.yaml", "kustomization.yml", "Kustomization")


class ManifestError(ValueError):
    """The manifests folder cannot be read; the message names the file and the problem."""


@dataclass
class LoadedObjects:
    objects: list[dict[str, Any]] = field(default_factory=list)
    origins: dict[tuple[str, str, str], Path] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def load_argo_events_objects(root: Path) -> LoadedObjects:
    """All Sensors and EventSources under `root` (a folder or a single YAML file)."""
    root = Path(root)
    if not root.exists():
        raise ManifestError(f"manifests path {root} does not exist; pass the folder `gpuaas render` writes (manifests/)")
    loaded = LoadedObjects()
    forced: dict[Path, str | None] = {}
    if root.is_dir() and _kustomization_file(root) is not None:
        files = []
        _kustomize_resources(root, None, files, forced, loaded.warnings, set())
    else:
        files = [root] if root.is_file() else sorted(
            p for p in root.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml", ".json")
        )
    namespaces: dict[Path, str | None] = {}
    for path in files:
        if path.name in _KUSTOMIZATION_NAMES:
            continue
        text = ""
        try:
            text = path.read_text(encoding="utf-8")
            if not _MAY_HOLD_ARGO_EVENTS.search(text):
                continue  # dashboards, rules, RBAC...: not worth parsing
            documents = list(yaml.load_all(text, Loader=_LOADER)) if path.suffix != ".json" else [json.loads(text)]
        except (yaml.YAMLError, ValueError, UnicodeDecodeError) as exc:
            if any(f"kind: {k}" in text or f'"kind": "{k}"' in text
                   for k in ARGO_EVENTS_KINDS):
                raise ManifestError(f"{path}: not valid YAML/JSON: {exc}") from None
            loaded.warnings.append(f"{path}: skipped, not valid YAML/JSON ({str(exc).splitlines()[0]})")
            continue
        for doc in documents:
            for obj in _items(doc):
                if obj.get("kind") not in ARGO_EVENTS_KINDS or not str(obj.get("apiVersion", "")).startswith("argoproj.io/"):
                    continue
                metadata = obj.setdefault("metadata", {}) or {}
                if not isinstance(metadata, dict):
                    raise ManifestError(f"{path}: a {obj['kind']}'s metadata: expected an object, found {metadata!r}")
                obj["metadata"] = metadata
                if not metadata.get("name"):
                    loaded.warnings.append(f"{path}: a {obj['kind']} without metadata.name was ignored")
                    continue
                if forced.get(path):
                    metadata["namespace"] = forced[path]
                elif not metadata.get("namespace"):
                    namespace = _kustomize_namespace(path.parent, root if root.is_dir() else path.parent, namespaces)
                    if namespace:
                        metadata["namespace"] = namespace
                # One install holds one Sensor of a name: a base and its overlay copies are the same
                # object (an overlay without `namespace:` would otherwise look like a second Sensor).
                key = (obj["kind"], "", str(metadata["name"]))
                if key in loaded.origins:
                    first = next(o for o in loaded.objects if _key(o) == key)
                    if _without_namespace(first) != _without_namespace(obj):
                        loaded.warnings.append(
                            f"{path}: {key[0]} {key[2]} also defined in {loaded.origins[key]} with different "
                            f"content; using the one from {loaded.origins[key]}"
                        )
                    continue
                loaded.origins[key] = path
                loaded.objects.append(obj)
    return loaded


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    metadata = obj.get("metadata") or {}
    return (obj.get("kind", ""), "", str(metadata.get("name", "")))


def _without_namespace(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "namespace"}
    return {**obj, "metadata": metadata}


def _items(doc: Any) -> list[dict[str, Any]]:
    if not isinstance(doc, dict):
        return []
    if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
        return [i for i in doc["items"] if isinstance(i, dict)]
    return [doc]


def _kustomize_namespace(folder: Path, stop: Path, cache: dict[Path, str | None]) -> str | None:
    if folder in cache:
        return cache[folder]
    namespace: str | None = None
    for name in _KUSTOMIZATION_NAMES:
        candidate = folder / name
        if candidate.is_file():
            try:
                data = yaml.safe_load(candidate.read_text(encoding="utf-8")) or {}
            except yaml.YAMLError:
                data = {}
            if isinstance(data, dict) and data.get("namespace"):
                namespace = str(data["namespace"])
            break
    if namespace is None and folder != stop and stop in folder.parents:
        namespace = _kustomize_namespace(folder.parent, stop, cache)
    cache[folder] = namespace
    return namespace


def _kustomization_file(folder: Path) -> Path | None:
    return next((folder / n for n in _KUSTOMIZATION_NAMES if (folder / n).is_file()), None)


def _kustomize_resources(folder: Path, namespace: str | None, files: list[Path], forced: dict[Path, str | None],
                         warnings: list[str], seen: set[Path]) -> None:
    """Collect the resource files a kustomization includes; the outermost `namespace:` wins."""
    folder = folder.resolve()
    if folder in seen:
        return
    seen.add(folder)
    kustomization = _kustomization_file(folder)
    if kustomization is None:
        warnings.append(f"{folder}: listed as a kustomize resource but has no kustomization.yaml; skipped")
        return
    try:
        data = yaml.safe_load(kustomization.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ManifestError(f"{kustomization}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ManifestError(f"{kustomization}: expected a Kustomization object")
    namespace = namespace or data.get("namespace")
    for key in ("patches", "patchesStrategicMerge", "patchesJson6902"):
        if data.get(key):
            warnings.append(f"{kustomization}: {key} are not applied by gpuaas route (objects are read as rendered)")
    for entry in data.get("resources") or []:
        target = (folder / str(entry)).resolve()
        if target.is_dir():
            _kustomize_resources(target, namespace, files, forced, warnings, seen)
        elif target.is_file():
            if target not in files:
                files.append(target)
                forced[target] = namespace
        else:
            warnings.append(f"{kustomization}: resource {entry} not found (remote resources are not fetched)")
