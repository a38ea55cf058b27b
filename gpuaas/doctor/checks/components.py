"""The controllers the product needs: installed (their CRDs, at the versions the product uses), running,
and at a version it works with. One finding per component.

Running is proven by what the controller does, not by where it runs (a Deployment, an operator's
pods, or processes outside the cluster): its Deployment's ready replicas when one is visible, its
admission webhook answering a server-side dry run (Kueue, KEDA), KEDA's metrics APIService being
Available, the product's EventSources and Sensors deployed (Argo Events), the product's Workflows
getting a phase (Argo Workflows). Versions: the controller's image tag, else its build_info metric,
else what its CRDs say (prometheus-operator annotates them).
"""

from __future__ import annotations

from gpuaas.doctor import versions as V
from gpuaas.doctor.facts import Facts
from gpuaas.doctor.findings import Finding, Skipped, blocks, ok, warn

MINIMUM_REASON = {
    "argo-workflows": "the WorkflowTemplates use synchronization.mutexes, which needs v3.6+",
    "argo-events": "the product is validated against v1.9.11",
    "kueue": "kueue_cluster_queue_resource_pending appears in v0.18: before it the GPU node pool never grows and "
             "pending GPUs read 0",
    "keda": "the ScaledObjects use idleReplicaCount and initialCooldownPeriod as KEDA v2.17+ implements them",
    "prometheus-operator": "OnNamespaceExceptForAlertmanagerNamespace, which the documented routing uses, "
                           "arrived in v0.84.0",
}
BELOW_MINIMUM_BLOCKS = frozenset({"argo-workflows"})
"""Components below whose minimum the product cannot run at all (else it runs degraded)."""
CRD_VERSION_ANNOTATIONS = ("operator.prometheus.io/version", "app.kubernetes.io/version")


def not_installed(facts: Facts, crd: str) -> str | None:
    """Why checks that need `crd` cannot run ("Argo Events is not installed"), when the CRDs were read and it is
    absent; None otherwise. The component's own finding names it; its dependents stay silent."""
    if "crds" in facts.unreadable or crd in facts.crds:
        return None
    owner = next((c.title for c in V.COMPONENTS for name, _ in c.crds if name == crd), crd)
    return f"{owner} is not installed (no CRD {crd}): see its finding"


def version_of(facts: Facts, component: V.Component) -> tuple[tuple[int, int, int] | None, str]:
    """(version, where it was read) from the controller's image tag, its build_info metric, or its CRDs."""
    for controller in facts.controllers_of(component.key):
        found = V.parse_version(V.image_name_and_tag(controller.image)[1])
        if found:
            return found, f"image {controller.image}"
    metric = (facts.metrics.versions.get(component.key) if facts.metrics else None) or ""
    if V.parse_version(metric):
        return V.parse_version(metric), f"{component.key.replace('-', '_')}_build_info {metric}"
    for name, _ in component.crds:
        crd = facts.crds.get(name)
        for key in CRD_VERSION_ANNOTATIONS:
            value = (crd.annotations.get(key) or crd.labels.get(key)) if crd else None
            if V.parse_version(value):
                return V.parse_version(value), f"CRD {name} {key}={value}"
    return None, ""


def running_evidence(facts: Facts, key: str) -> tuple[bool | None, str]:
    """(True: proven running, False: proven not running, None: not visible; and the evidence)."""
    deployments = facts.controllers_of(key)
    stopped = [d for d in deployments if d.ready < 1]
    ready = [d for d in deployments if d.ready >= 1]
    if key in facts.webhooks and facts.webhooks[key] is not None:
        return False, f"its admission webhook did not answer a server-side dry run: {facts.webhooks[key]}"
    if key == "keda":
        available, message = facts.api_services.get("v1beta1.external.metrics.k8s.io", (None, ""))
        if available is False:
            return False, f"APIService v1beta1.external.metrics.k8s.io (KEDA's metrics server) is not Available: {message}"
    if ready:
        return True, ", ".join(f"Deployment {d.namespace}/{d.name} {d.ready}/{d.desired} ready" for d in ready)
    if stopped:
        return False, ", ".join(f"Deployment {d.namespace}/{d.name} has {d.ready} of {d.desired} replicas ready"
                                for d in stopped)
    if key in facts.webhooks:
        return True, "its admission webhook answered a server-side dry run"
    if key == "argo-events":
        deployed = [o for o in facts.event_objects if o.kind in ("EventSource", "Sensor") and o.deployment is not None]
        if deployed:
            return True, f"it deployed {len(deployed)} of the product's EventSources and Sensors"
    if key == "prometheus-operator":
        reconciled = [r for r in [*facts.prometheus_resources, *facts.alertmanager_resources]
                      if r.conditions.get("Reconciled", ("",))[0] == "True"]
        if reconciled:
            return True, (f"it reconciled {len(reconciled)} Prometheus/Alertmanager resource(s) (Reconciled=True on "
                          f"{reconciled[0].kind} {reconciled[0].namespace}/{reconciled[0].name})")
    if key == "argo-workflows":
        ran = [w for w in facts.workflows if w.phase]
        if ran:
            return True, f"{len(ran)} Workflow(s) in {facts.namespace} got a phase (latest {ran[0].name}: {ran[0].phase})"
    return None, "no Deployment with its image is visible and nothing it did was seen"


def component_findings(facts: Facts) -> list[Finding | Skipped]:
    if "crds" in facts.unreadable:
        return [Skipped(c.key, f"the API's discovery was not read: {facts.unreadable['crds']}") for c in V.COMPONENTS]
    return [component_finding(facts, component) for component in V.COMPONENTS]


def component_finding(facts: Facts, component: V.Component) -> Finding:
    key, title = component.key, component.title
    missing = [name for name, _ in component.crds if name not in facts.crds]
    if missing:
        fix = component.install
        if key == "prometheus-operator":
            fix = (f"{component.install}\n(only the CRDs are needed if another Prometheus loads the rules: "
                   "`kubectl apply -k` fails on the PrometheusRule and AlertmanagerConfig without them; "
                   "OpenShift ships the operator)")
        return blocks(key, f"{title} is not installed: CRD {', '.join(missing)} missing", fix)
    unserved = [(name, version) for name, version in component.crds if version not in facts.crds[name].served]
    if unserved:
        name, version = unserved[0]
        served = ", ".join(facts.crds[name].served) or "nothing"
        fix = f"upgrade {title} to v{component.validated}: {component.install}"
        if key == "kueue" and "v1beta1" in facts.crds[name].served:
            fix = (f"upgrade Kueue to v0.18+ ({component.install}), or render the product for v1beta1 and apply it "
                   "again: `gpuaas render --workload-version v1beta1 && kubectl apply -k manifests/overlays/<yours>`")
        return blocks(key, f"{title}'s {name} serves {served}, the product uses {version}", fix)
    version, source = version_of(facts, component)
    running, evidence = running_evidence(facts, key)
    details = [f"CRDs: {', '.join(f'{n} ({v})' for n, v in component.crds)}",
               f"version: {V.show(version)}" + (f" ({source})" if source else " (no tagged image, build_info or "
                                                                             "CRD annotation to read it from)"),
               f"running: {evidence}"]
    if running is False:
        fix = {"kueue": "kubectl -n kueue-system get pods,events  # Kueue's controller-manager serves its webhooks; "
                        "restart it: kubectl -n kueue-system rollout restart deployment/kueue-controller-manager",
               "keda": "kubectl -n keda get pods,apiservice v1beta1.external.metrics.k8s.io  # restart: "
                       "kubectl -n keda rollout restart deployment/keda-operator deployment/keda-operator-metrics-apiserver",
               }.get(key, "kubectl describe " + ", ".join(f"-n {d.namespace} deployment/{d.name}"
                                                          for d in facts.controllers_of(key)))
        return blocks(key, f"{title} is installed but not running: {evidence}", fix, *details)
    minimum = V.parse_version(component.minimum)
    if version is not None and minimum is not None and version < minimum:
        reason = MINIMUM_REASON[key]
        fix = f"upgrade {title} to v{component.validated}: {component.install}"
        if key in BELOW_MINIMUM_BLOCKS:
            return blocks(key, f"{title} {V.show(version)} is older than v{component.minimum}: {reason}", fix, *details)
        return warn(key, f"{title} {V.show(version)} is older than v{component.minimum}: {reason}", fix, *details)
    state = "running" if running else "installed (running not visible from here)"
    return ok(key, f"{title} {V.show(version) if version else ''} {state}".replace("  ", " "), *details)
