"""The upstream CRDs of the kinds gpuaas touches, read from the pinned Go modules.

Kueue's, KEDA's, KubeRay's and the training-operator's CRDs come with their installs (their
controllers run: gpuaas.cluster.stack, .operators); these are the kinds gpuaas touches whose
controllers do not run here (the real-stack tier judges objects of these kinds by the real CRD
schemas; nothing reconciles them). Each entry is (pinned module, file in it); the Kubeflow
Notebook CRD is vendored (VENDORED_CRDS).
"""

from __future__ import annotations

from pathlib import Path

KSERVE = "github.com/kserve/kserve"
OPENSHIFT_API = "github.com/openshift/api"
CLUSTER_API = "sigs.k8s.io/cluster-api"
LWS = "sigs.k8s.io/lws"
PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator"
ARGO_WORKFLOWS = "github.com/argoproj/argo-workflows/v4"
ARGO_EVENTS = "github.com/argoproj/argo-events"

PRODUCT_CRDS: dict[str, tuple[str, ...]] = {
    KSERVE: ("config/crd/full/serving.kserve.io_inferenceservices.yaml",
             "config/crd/full/serving.kserve.io_servingruntimes.yaml"),
    OPENSHIFT_API: ("machine/v1beta1/zz_generated.crd-manifests/0000_10_machine-api_01_machinesets-Default.crd.yaml",),
    CLUSTER_API: ("config/crd/bases/cluster.x-k8s.io_machinedeployments.yaml",),
    LWS: ("config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml",),
    PROMETHEUS_OPERATOR: tuple(f"example/prometheus-operator-crd/monitoring.coreos.com_{plural}.yaml"
                               for plural in ("prometheusrules", "servicemonitors", "podmonitors",
                                              "alertmanagerconfigs")),
    ARGO_WORKFLOWS: tuple(f"manifests/base/crds/full/argoproj.io_{plural}.yaml"
                          for plural in ("workflows", "workflowtemplates", "clusterworkflowtemplates",
                                         "cronworkflows", "workflowtaskresults", "workflowtasksets",
                                         "workflowartifactgctasks", "workfloweventbindings")),
    ARGO_EVENTS: tuple(f"manifests/base/crds/argoproj.io_{plural}.yaml"
                       for plural in ("eventbus", "eventsources", "sensors")),
}

VENDORED_CRDS: tuple[Path, ...] = (
    Path(__file__).resolve().parents[2] / "stack" / "vendored" / "kubeflow-notebooks" / "kubeflow.org_notebooks.yaml",
)
"""CRDs with no Go module the proxy serves, copied with their license and provenance (PROVENANCE.md)."""
