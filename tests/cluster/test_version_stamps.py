"""The Kubernetes binaries the real node and the control plane run say which release they are."""

from __future__ import annotations

import re

from gpuaas.cluster.binaries import components, ldflags
from gpuaas.upstream import STACK_DIR


def test_the_kubernetes_programs_carry_the_pinned_version_stamp() -> None:
    """A plain `go install` leaves component-base's version at v0.0.0-master (the node's kubeletVersion);
    `gpuaas cluster build`, the one build path, stamps the go.mod pin into every Kubernetes program,
    kubelet included."""
    pinned = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", (STACK_DIR / "kubernetes" / "go.mod").read_text(), re.MULTILINE)
    assert pinned
    kubernetes = next(c for c in components() if c.name == "kubernetes")
    assert {"kubelet", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} <= set(kubernetes.programs)
    flags = ldflags(kubernetes)
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"{package}.gitVersion={pinned.group(1)}" in flags
