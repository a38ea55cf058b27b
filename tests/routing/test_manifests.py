"""Reading Sensors and EventSources from a rendered manifests folder (kustomize layout)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from routing import ManifestError, Router, load_argo_events_objects
from tests.routing.builders import event_source, sensor


def write(path: Path, *docs: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")


def test_kustomize_layout_namespace_and_duplicates(tmp_path: Path) -> None:
    s = sensor()
    del s["metadata"]["namespace"]
    write(tmp_path / "base" / "sensors.yaml", s, event_source())
    (tmp_path / "base" / "kustomization.yaml").write_text("namespace: gpuaas-system\nresources: [sensors.yaml]\n")
    write(tmp_path / "overlays" / "openshift" / "sensors.yaml", s)  # same object again, same namespace via parent
    (tmp_path / "overlays" / "openshift" / "kustomization.yaml").write_text("resources: [../../base]\n")
    (tmp_path / "overlays" / "openshift" / "dashboard.json").write_text("{not json")
    (tmp_path / "overlays" / "openshift" / "broken-list.yaml").write_text("kind: List\nitems: [\n")
    loaded = load_argo_events_objects(tmp_path)
    kinds = sorted((o["kind"], o["metadata"].get("namespace")) for o in loaded.objects)
    assert kinds == [("EventSource", "gpuaas"), ("Sensor", "gpuaas-system")]
    assert not any("different content" in w for w in loaded.warnings)
    assert all("dashboard.json" not in str(origin) for origin in loaded.origins.values())
    assert any("broken-list.yaml: skipped" in w for w in loaded.warnings)


def test_conflicting_copies_keep_the_first_and_warn(tmp_path: Path) -> None:
    first, second = sensor(), sensor()
    second["spec"]["triggers"][0]["template"]["name"] = "other"
    write(tmp_path / "a.yaml", first)
    write(tmp_path / "b.yaml", second)
    loaded = load_argo_events_objects(tmp_path)
    assert len(loaded.objects) == 1 and loaded.objects[0]["spec"]["triggers"][0]["template"]["name"] == "run"
    assert any("different content" in w for w in loaded.warnings)


def test_broken_sensor_file_is_an_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "sensor.yaml").write_text("kind: Sensor\nmetadata: {name: x\n")
    with pytest.raises(ManifestError, match="sensor.yaml: not valid YAML"):
        load_argo_events_objects(tmp_path)


def test_missing_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="does not exist"):
        Router.from_manifests(tmp_path / "nope")


def test_dependency_on_unknown_event_is_warned(tmp_path: Path) -> None:
    s = sensor()
    s["spec"]["dependencies"][0]["eventName"] = "typo"
    router = Router([event_source(), s])
    assert any("does not define" in w and "typo" in w for w in router.load_warnings)


def test_fixture_sensors_are_valid_argo_events_objects() -> None:
    """The hand-written fixture must be something Argo Events accepts, or the tests prove nothing."""
    import json

    import jsonschema

    from gpuaas.manifests.validation import schema_file
    from tests.routing.conftest import FIXTURE_MANIFESTS

    schema_path = schema_file("argo-events")
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    loaded = load_argo_events_objects(FIXTURE_MANIFESTS)
    assert len(loaded.objects) == 5
    for obj in loaded.objects:
        definition = {"$ref": f"#/definitions/io.argoproj.events.v1alpha1.{obj['kind']}",
                      "definitions": schema["definitions"]}
        jsonschema.Draft7Validator(definition).validate(obj)


def test_overlay_folder_follows_its_resources_with_the_overlay_namespace(tmp_path: Path) -> None:
    write(tmp_path / "base" / "sensors.yaml", sensor())
    write(tmp_path / "base" / "eventsources.yaml", event_source())
    write(tmp_path / "base" / "unlisted.yaml", {**sensor(), "metadata": {"name": "not-in-kustomization"}})
    (tmp_path / "base" / "kustomization.yaml").write_text(
        "namespace: base-ns\nresources: [sensors.yaml, eventsources.yaml]\n")
    overlay = tmp_path / "overlays" / "openshift"
    overlay.mkdir(parents=True)
    (overlay / "kustomization.yaml").write_text(
        "namespace: overlay-ns\nresources: [../../base, https://example.invalid/remote.yaml]\n"
        "patches: [{path: p.yaml}]\n")
    loaded = load_argo_events_objects(overlay)
    assert sorted((o["kind"], o["metadata"]["name"], o["metadata"]["namespace"]) for o in loaded.objects) == [
        ("EventSource", "demo-source", "overlay-ns"), ("Sensor", "demo", "overlay-ns")]
    assert any("patches are not applied" in w for w in loaded.warnings)
    assert any("not found" in w for w in loaded.warnings)
    workflow = Router(loaded.objects).route(
        {"id": "overlay-1", "source": "demo-source", "subject": "demo-event", "data": {}}).workflows[0]
    assert workflow["metadata"]["namespace"] == "overlay-ns"
