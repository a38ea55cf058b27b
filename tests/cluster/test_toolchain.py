"""The Kubernetes binaries the real node and the test control plane build say which release they are."""

from __future__ import annotations

import re

from gpuaas.cluster.toolchain import (
    KUBE_APISERVER,
    KUBE_CONTROLLER_MANAGER,
    KUBE_SCHEDULER,
    KUBELET,
    program_ldflags,
)
from gpuaas.upstream import STACK_DIR


def test_the_kubernetes_programs_carry_the_pinned_version_stamp() -> None:
    """A plain `go install` leaves component-base's version at v0.0.0-master; the stamp is the go.mod pin,
    as `gpuaas cluster build` sets it."""
    pinned = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", (STACK_DIR / "kubernetes" / "go.mod").read_text(), re.MULTILINE)
    assert pinned
    for program in (KUBELET, KUBE_APISERVER, KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER):
        assert f"k8s.io/component-base/version.gitVersion={pinned.group(1)}" in program_ldflags(program), program.binary
