"""What OpenShift AI brings along: KServe's deployment mode, and Data Science Pipelines beside a separate
Argo Workflows.

KServe (kserve/kserve pkg/constants, pkg/apis/serving/v1beta1/inference_service_defaults.go): an
InferenceService's mode is its annotation `serving.kserve.io/deploymentMode` (Serverless, renamed
Knative; RawDeployment, renamed Standard; ModelMesh), else the ConfigMap inferenceservice-config's
`deploy.defaultDeploymentMode`. In the Knative modes the predictor Deployment is a Knative Revision's,
scaled to zero by Knative itself; gpuaas leaves it alone (steps/model/owners.py).

Data Science Pipelines (opendatahub-io/opendatahub-operator, datasciencepipelines_controller_actions.go
`checkPreConditions`): with a `workflows.argoproj.io` CRD that lacks the label
`app.opendatahub.io/data-science-pipelines-operator: "true"` the component stops reconciling, unless
`argoWorkflowsControllers.managementState` is `Removed` (it then uses the Argo Workflows installed
separately, which gpuaas also uses).
"""

from __future__ import annotations

import json

from gpuaas.doctor.facts import Facts
from gpuaas.doctor.findings import Finding, Skipped, ok, warn

KNATIVE_MODES = ("Serverless", "Knative")
DSP_LABEL = "app.opendatahub.io/data-science-pipelines-operator"


def kserve_finding(facts: Facts) -> Finding | Skipped:
    check = "kserve"
    if "kserve" in facts.unreadable:
        return Skipped(check, facts.unreadable["kserve"])
    kserve = facts.kserve
    if not kserve.installed:
        return ok(check, "not applicable: KServe is not installed (no InferenceService CRD)")
    modes = {}
    for isvc in kserve.inference_services:
        mode = isvc.mode or kserve.default_mode or "unknown"
        modes.setdefault(mode, []).append(f"{isvc.namespace}/{isvc.name}")
    details = [f"default mode: {kserve.default_mode or 'unknown'}"
               + (f" ({kserve.config_source})" if kserve.config_source else " (ConfigMap inferenceservice-config not found)")]
    details += [f"{mode}: {', '.join(names)}" for mode, names in sorted(modes.items())]
    if not kserve.config_source and not kserve.inference_services:
        return ok(check, "not applicable: the InferenceService CRD is installed but no KServe controller "
                         "configuration was found and no InferenceService exists", *details)
    knative = [name for mode in KNATIVE_MODES for name in modes.get(mode, [])]
    if kserve.default_mode in KNATIVE_MODES or knative:
        summary = (f"KServe serves through Knative (mode {kserve.default_mode or 'per InferenceService'}): those "
                   "servers are left to Knative, which scales them to zero itself; gpuaas makes no ScaledObject for "
                   "them and never releases them")
        if knative:
            summary += f" ({len(knative)} now)"
        if kserve.default_mode in KNATIVE_MODES and not kserve.knative_serving:
            fix = ("kubectl patch datasciencecluster <name> --type=merge -p '{\"spec\":{\"components\":{\"kserve\":"
                   "{\"defaultDeploymentMode\":\"RawDeployment\"}}}}'   # or install OpenShift Serverless (Knative)")
            if facts.pipelines.installed is False and kserve.config_source.startswith("ConfigMap "):
                cm_ns, cm_name = kserve.config_source.removeprefix("ConfigMap ").split("/", 1)
                deploy = json.dumps(json.dumps({"defaultDeploymentMode": "RawDeployment"}))
                fix = (f"kubectl -n {cm_ns} patch configmap {cm_name} --type=merge -p '{{\"data\":{{\"deploy\":{deploy}}}}}'"
                       "   # or install Knative Serving")
            return warn(check, summary + "; and Knative Serving's CRDs are missing, so new Serverless "
                                         "InferenceServices will not start", fix, *details)
        details.append("to have gpuaas scale a server to zero when idle: create it with the annotation "
                       "serving.kserve.io/deploymentMode: RawDeployment (the mode cannot change later)")
        return ok(check, summary, *details)
    return ok(check, f"KServe serves raw Deployments (mode {kserve.default_mode or 'RawDeployment'}): gpuaas scales "
                     "idle servers to zero with KEDA", *details)


def pipelines_finding(facts: Facts) -> Finding | Skipped:
    check = "data-science-pipelines"
    if "data-science-pipelines" in facts.unreadable:
        return Skipped(check, facts.unreadable["data-science-pipelines"])
    pipelines = facts.pipelines
    if not pipelines.installed:
        return ok(check, "not applicable: no DataScienceCluster (OpenShift AI / Open Data Hub) here")
    workflows_crd = facts.crds.get("workflows.argoproj.io")
    owned = workflows_crd is not None and workflows_crd.labels.get(DSP_LABEL) == "true"
    conflicts = []
    for cluster in pipelines.clusters:
        managed = cluster.get("managementState") == "Managed"
        removed = cluster.get("argoWorkflowsControllers") == "Removed"
        if managed and not removed and workflows_crd is not None and not owned:
            conflicts.append(str(cluster.get("name")))
    if conflicts:
        name = conflicts[0]
        component = next(str(c.get("component") or "datasciencepipelines") for c in pipelines.clusters
                         if str(c.get("name")) == name)
        return warn(check, f"Data Science Pipelines stops reconciling in DataScienceCluster {name}: Argo Workflows was "
                           "installed separately (its workflows.argoproj.io CRD is not OpenShift AI's), and the "
                           "component still manages its own Argo controllers",
                    f"kubectl patch datasciencecluster {name} --type=merge -p '{{\"spec\":{{\"components\":"
                    f"{{\"{component}\":{{\"argoWorkflowsControllers\":{{\"managementState\":\"Removed\"}}}}}}}}}}'"
                    "   # pipelines then run on the separately installed Argo Workflows, which gpuaas uses too",
                    f"workflows.argoproj.io lacks the label {DSP_LABEL}=true")
    states = ", ".join(f"{c.get('name')}: pipelines {c.get('managementState') or 'unset'}, Argo controllers "
                       f"{c.get('argoWorkflowsControllers') or 'Managed'}" for c in pipelines.clusters)
    return ok(check, "Data Science Pipelines and the separately installed Argo Workflows do not conflict", states)
