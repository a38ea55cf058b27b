"""The components the product depends on: their CRDs, the versions it is validated against and needs,
how to install them, and how to read a version from an image tag or a build_info label (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Component:
    key: str
    title: str
    crds: tuple[tuple[str, str], ...]
    """(CRD name, the version the product uses) the product's objects need."""
    validated: str
    """The release the rendered objects are validated against (stack/ pins it)."""
    minimum: str
    """Below this the product cannot work as documented (docs/install.md#prerequisites)."""
    install: str
    """The exact command that installs the validated release."""


ARGO_WORKFLOWS = Component(
    "argo-workflows", "Argo Workflows",
    (("workflows.argoproj.io", "v1alpha1"), ("workflowtemplates.argoproj.io", "v1alpha1"),
     ("workflowtaskresults.argoproj.io", "v1alpha1"), ("cronworkflows.argoproj.io", "v1alpha1")),
    "4.0.5", "3.6.0",
    "kubectl create namespace argo && kubectl apply -n argo --server-side -f "
    "https://github.com/argoproj/argo-workflows/releases/download/v4.0.5/install.yaml")
ARGO_EVENTS = Component(
    "argo-events", "Argo Events",
    (("eventsources.argoproj.io", "v1alpha1"), ("sensors.argoproj.io", "v1alpha1"),
     ("eventbus.argoproj.io", "v1alpha1")),
    "1.9.11", "1.9.0",
    "kubectl create namespace argo-events && kubectl apply -n argo-events -f "
    "https://github.com/argoproj/argo-events/releases/download/v1.9.11/install.yaml")
KUEUE = Component(
    "kueue", "Kueue",
    (("workloads.kueue.x-k8s.io", "v1beta2"), ("clusterqueues.kueue.x-k8s.io", "v1beta2"),
     ("localqueues.kueue.x-k8s.io", "v1beta2"), ("resourceflavors.kueue.x-k8s.io", "v1beta2")),
    "0.19.2", "0.18.0",
    "kubectl apply --server-side -f https://github.com/kubernetes-sigs/kueue/releases/download/v0.19.2/manifests.yaml")
KEDA = Component(
    "keda", "KEDA",
    (("scaledobjects.keda.sh", "v1alpha1"), ("triggerauthentications.keda.sh", "v1alpha1")),
    "2.20.2", "2.17.0",
    "kubectl apply --server-side -f https://github.com/kedacore/keda/releases/download/v2.20.2/keda-2.20.2.yaml")
PROMETHEUS_OPERATOR = Component(
    "prometheus-operator", "Prometheus Operator",
    (("prometheusrules.monitoring.coreos.com", "v1"), ("alertmanagerconfigs.monitoring.coreos.com", "v1alpha1")),
    "0.93.0", "0.84.0",
    "kubectl create -f https://github.com/prometheus-operator/prometheus-operator/releases/download/v0.93.0/bundle.yaml")

COMPONENTS = (ARGO_WORKFLOWS, ARGO_EVENTS, KUEUE, KEDA, PROMETHEUS_OPERATOR)

IMAGE_NAMES: dict[str, tuple[str, ...]] = {
    "argo-workflows": ("workflow-controller",),
    "argo-events": ("argo-events",),
    "kueue": ("kueue", "kueue-rhel9"),
    "keda": ("keda", "keda-rhel9-operator", "custom-metrics-autoscaler-rhel9-operator"),
    "prometheus-operator": ("prometheus-operator", "ose-prometheus-operator", "prometheus-operator-rhel9"),
}
"""The last path element of a controller's image, per component (upstream and Red Hat builds)."""

_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """`v0.19.2`, `2.20.2`, `v1.9.11-rc1` -> (0, 19, 2); None for anything without a version (`latest`, a digest,
    a development build such as `v0.0.0-main`)."""
    if not text:
        return None
    found = _VERSION.search(text)
    if found is None:
        return None
    version = (int(found.group(1)), int(found.group(2)), int(found.group(3) or 0))
    return None if version == (0, 0, 0) else version


def image_name_and_tag(image: str) -> tuple[str, str]:
    """`quay.io/argoproj/workflow-controller:v4.0.5` -> ("workflow-controller", "v4.0.5"); digests give no tag."""
    path = image.split("@", 1)[0]
    name, _, tag = path.rpartition(":") if ":" in path.rsplit("/", 1)[-1] else (path, "", "")
    return name.rsplit("/", 1)[-1], tag


def show(version: tuple[int, int, int] | None) -> str:
    return "unknown" if version is None else "v" + ".".join(str(p) for p in version)
