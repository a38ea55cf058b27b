"""Contract: label and field selectors, table-driven."""

from __future__ import annotations

import pytest

from steps.gateways import resources as R
from steps.gateways.errors import PermanentError
from steps.gateways.kubernetes import KubernetesGateway

PODS = {
    "a": {"app": "ray", "tier": "gold"},
    "b": {"app": "ray", "tier": "silver"},
    "c": {"app": "notebook"},
    "d": {},
}


@pytest.fixture
def pods(kube: KubernetesGateway) -> KubernetesGateway:
    for name, labels in PODS.items():
        kube.create(R.POD, {"metadata": {"name": name, "namespace": "team-a" if name != "d" else "team-b",
                                         "labels": labels}, "spec": {}})
    return kube


@pytest.mark.parametrize(("selector", "expected"), [
    ("app=ray", "ab"),
    ("app==ray", "ab"),
    ("app!=ray", "cd"),          # != also matches objects without the key
    ("tier in (gold,silver)", "ab"),
    ("tier in (gold, bronze)", "a"),
    ("tier notin (gold)", "bcd"),
    ("tier", "ab"),
    ("!tier", "cd"),
    ("app=ray,tier!=gold", "b"),
    ("app in (ray,notebook),!tier", "c"),
    ("", "abcd"),
])
def test_label_selector(pods: KubernetesGateway, selector: str, expected: str) -> None:
    found = pods.list(R.POD, label_selector=selector)
    assert "".join(p["metadata"]["name"] for p in found) == expected


@pytest.mark.parametrize(("selector", "expected"), [
    ("metadata.name=b", "b"),
    ("metadata.name!=b", "acd"),
    ("metadata.namespace=team-b", "d"),
    ("metadata.namespace==team-a,metadata.name!=a", "bc"),
])
def test_field_selector(pods: KubernetesGateway, selector: str, expected: str) -> None:
    found = pods.list(R.POD, field_selector=selector)
    assert "".join(p["metadata"]["name"] for p in found) == expected


def test_selectors_combine_with_a_namespace(pods: KubernetesGateway) -> None:
    assert [p["metadata"]["name"] for p in pods.list(R.POD, "team-a", label_selector="!tier")] == ["c"]


@pytest.mark.parametrize("selector", ["app in (ray", "=ray", "!app=ray", "a b c"])
def test_malformed_label_selector_is_400(pods: KubernetesGateway, selector: str) -> None:
    with pytest.raises(PermanentError) as caught:
        pods.list(R.POD, label_selector=selector)
    assert caught.value.status == 400
