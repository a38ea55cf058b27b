"""The Kubernetes binaries the real-stack tier builds say which release they are."""

from __future__ import annotations

import re
from pathlib import Path

from gpuaas.cluster.toolchain import (
    KUBE_APISERVER,
    KUBE_CONTROLLER_MANAGER,
    KUBE_SCHEDULER,
    KUBELET,
    KUBERNETES_VERSION,
)

STACK = Path(__file__).resolve().parents[2] / "stack" / "kubernetes" / "go.mod"


def test_the_version_stamp_is_the_pinned_release() -> None:
    """`go install` leaves component-base's version at v0.0.0-master; the stamp is the go.mod pin."""
    pinned = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", STACK.read_text(), re.MULTILINE)
    assert pinned and pinned.group(1) == KUBERNETES_VERSION
    for program in (KUBELET, KUBE_APISERVER, KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER):
        assert f"k8s.io/component-base/version.gitVersion={KUBERNETES_VERSION}" in program.ldflags, program.binary
