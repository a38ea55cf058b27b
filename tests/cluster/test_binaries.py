"""The build driver reads what to build from stack/*/go.mod and stamps the pinned versions."""

from __future__ import annotations

from gpuaas.cluster.binaries import components, ldflags


def test_every_pinned_program_is_built_under_the_name_users_know() -> None:
    programs = {c.name: c.programs for c in components()}
    assert programs["etcd"] == ("etcd",)
    assert programs["argo-events"] == ("argo-events",)
    assert set(programs["kubernetes"]) >= {"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"}
    assert set(programs["keda"]) == {"adapter", "operator", "webhooks"}
    assert programs["kueue"] == ("kueue",) and programs["kwok"] == ("kwok",)
    assert [c.name for c in components()][-1] == "kubernetes"  # the long one last: progress shows early


def test_version_stamps_come_from_the_pinned_versions() -> None:
    by_name = {c.name: c for c in components()}
    kubernetes = ldflags(by_name["kubernetes"])
    assert "-X k8s.io/component-base/version.gitVersion=v1.36.3" in kubernetes
    assert "-X k8s.io/component-base/version.gitMinor=36" in kubernetes
    assert "buildDate=20" in kubernetes  # the module's commit time, not the time of the build
    assert ldflags(by_name["kueue"]).endswith("-X sigs.k8s.io/kueue/pkg/version.GitVersion=v0.19.2")
    assert ldflags(by_name["etcd"]) == "-s -w"
