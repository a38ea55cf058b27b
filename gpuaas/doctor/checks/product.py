"""The product's own objects running: EventSource and Sensor pods, Argo Workflows watching the product's
namespace, the step image pinned and pullable."""

from __future__ import annotations

from gpuaas.doctor.checks.components import not_installed
from gpuaas.doctor.facts import EventObject, Facts
from gpuaas.doctor.findings import Finding, Skipped, blocks, ok
from sensors import all_event_sources, all_sensors


def _names(objects: list[dict]) -> tuple[str, ...]:
    return tuple(o["metadata"]["name"] for o in objects)


EXPECTED = {"EventSource": _names(all_event_sources()), "Sensor": _names(all_sensors())}
"""The product's EventSources and Sensors, as `gpuaas render` builds them (manifests/base/events)."""
PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
RENDERED_STEP_IMAGE = "gpuaas-step"
STUCK_S = 120.0
"""A Workflow older than this without a phase: no workflow-controller processes its namespace."""


def _why_not_running(obj: EventObject) -> str:
    if obj.deployment is None:
        status, reason, message = obj.conditions.get("Deployed", ("", "", ""))
        said = f" (condition Deployed={status} {reason}: {message})" if status else " and it has no status"
        return f"the Argo Events controller made no Deployment for it{said}"
    waiting = [w for p in obj.pods for w in p.waiting]
    if waiting:
        container, reason, message, image = waiting[0]
        return f"container {container} is {reason}: {message[:160]}" + (f" (image {image})" if image else "")
    if not obj.pods:
        return f"its Deployment has {obj.deployment[0]} of {obj.deployment[1]} replicas ready and no pod"
    pod = obj.pods[0]
    return f"pod {pod.name} is {pod.phase}{'' if pod.ready else ', not ready'}"


def event_pods_finding(facts: Facts) -> Finding | Skipped:
    check = "argo-events.pods"
    if not_installed(facts, "eventsources.argoproj.io"):
        return Skipped(check, not_installed(facts, "eventsources.argoproj.io") or "")
    if "event-objects" in facts.unreadable:
        return Skipped(check, facts.unreadable["event-objects"])
    present = {(o.kind, o.name): o for o in facts.event_objects}
    missing = [f"{kind} {name}" for kind, names in EXPECTED.items() for name in names if (kind, name) not in present]
    if missing:
        return blocks(check, f"{', '.join(missing)} missing from {facts.namespace}",
                      "apply the product's manifests: kubectl apply -k manifests/overlays/<yours>")
    down = []
    for kind, names in EXPECTED.items():
        for name in names:
            obj = present[(kind, name)]
            running = obj.deployment is not None and obj.deployment[0] >= 1 and any(
                p.phase == "Running" and p.ready for p in obj.pods)
            if not running:
                down.append(f"{kind} {name}: {_why_not_running(obj)}")
    details = [f"{len(EXPECTED['EventSource'])} EventSources and {len(EXPECTED['Sensor'])} Sensors"]
    simulated = [(f"{kind} {name}", p) for kind, names in EXPECTED.items() for name in names
                 for p in present[(kind, name)].pods if p.node in facts.kwok_nodes and p.phase == "Running"]
    details += [f"{what}: pod {p.name} on KWOK node {p.node}" for what, p in simulated]
    if down:
        pull = any(reason in PULL_FAILURES for o in facts.event_objects for p in o.pods for _, reason, _, _ in p.waiting)
        fix = ("the Argo Events image cannot be pulled: check the controller's ARGO_EVENTS_IMAGE and the nodes' access "
               "to its registry" if pull else
               f"kubectl -n {facts.namespace} describe eventsources,sensors; kubectl -n {facts.namespace} get pods "
               "-l 'eventsource-name' ; kubectl -n argo-events logs deploy/controller-manager  (a missing Secret, the "
               "EventBus, or no Argo Events controller watching)")
        return blocks(check, f"{len(down)} of the product's EventSource/Sensor pods are not running: events and alerts "
                             "are not turned into workflows", fix, *down, *details)
    if simulated:
        nodes = ", ".join(sorted({p.node for _, p in simulated}))
        # blocks, as `down` does: docs/doctor.md's "the product cannot react" (a review of the walk's B2 fix)
        return blocks(check, f"{len(simulated)} of the product's EventSource/Sensor pods are Running on KWOK nodes "
                           f"({nodes}): KWOK only simulates them, nothing runs them, so no event is turned into a "
                           "workflow",
                    "place them on nodes that run containers: the values' events.podTemplate (nodeSelector, "
                    "tolerations; with kustomize your overlay's patch of spec.template), then helm upgrade or "
                    "kubectl apply -k", *details)
    return ok(check, "every EventSource and Sensor pod is running", *details)


def argo_namespace_finding(facts: Facts) -> Finding | Skipped:
    check = "argo-workflows.namespace"
    if not_installed(facts, "workflows.argoproj.io"):
        return Skipped(check, not_installed(facts, "workflows.argoproj.io") or "")
    ns = facts.namespace
    instance_id = str(facts.argo_config.get("instanceID") or "")
    where = facts.argo_config.get("source", "ConfigMap argo/workflow-controller-configmap")
    if instance_id:
        cm_ns, cm_name = where.removeprefix("ConfigMap ").split("/", 1)
        return blocks(check, f"the workflow-controller runs with instanceID {instance_id!r} ({where}): it ignores "
                             "Workflows without the label workflows.argoproj.io/controller-instanceid, which the "
                             "product's Sensors do not set",
                      f"kubectl -n {cm_ns} patch configmap {cm_name} --type=json "
                      "-p '[{\"op\":\"remove\",\"path\":\"/data/instanceID\"}]'"
                      f"   # or run a second workflow-controller, without instanceID, for namespace {ns}")
    for controller in facts.controllers_of("argo-workflows"):
        args = list(controller.args)
        if "--namespaced" in args:
            managed = args[args.index("--managed-namespace") + 1] if "--managed-namespace" in args[:-1] \
                else controller.namespace
            if managed != ns:
                return blocks(check, f"workflow-controller {controller.namespace}/{controller.name} is namespaced to "
                                     f"{managed}: nothing runs the product's Workflows in {ns}",
                              f"install Argo Workflows cluster-wide (no --namespaced), or give namespace {ns} a "
                              "workflow-controller of its own (--namespaced --managed-namespace "
                              f"{ns})")
    if "workflows" in facts.unreadable:
        return Skipped(check, facts.unreadable["workflows"])
    stuck = [w for w in facts.workflows if not w.phase and w.age_s > STUCK_S]
    if stuck:
        return blocks(check, f"{len(stuck)} Workflow(s) in {ns} got no phase for over {STUCK_S:.0f}s (e.g. "
                             f"{stuck[0].name}): no workflow-controller processes namespace {ns}",
                      "run the workflow-controller cluster-wide or for this namespace (see the argo-workflows "
                      "finding), then: argo -n " + ns + " resubmit " + stuck[0].name, *(w.name for w in stuck[:5]))
    ran = [w for w in facts.workflows if w.phase]
    if ran:
        latest = ran[0]
        return ok(check, f"Argo Workflows runs the product's Workflows in {ns}",
                  f"latest: {latest.name} ({latest.template}) {latest.phase}")
    return ok(check, f"no Workflow has run in {ns} yet: `gpuaas doctor --probe` proves that one does")


def images_finding(facts: Facts) -> Finding | Skipped:
    check = "step-image"
    if not_installed(facts, "workflowtemplates.argoproj.io"):
        return Skipped(check, not_installed(facts, "workflowtemplates.argoproj.io") or "")
    if "workflow-templates" in facts.unreadable:
        return Skipped(check, facts.unreadable["workflow-templates"])
    if not facts.workflow_templates:
        return blocks(check, f"no WorkflowTemplate of the product in {facts.namespace}",
                      "apply the product's manifests: kubectl apply -k manifests/overlays/<yours>")
    unpinned = sorted(name for name, images in facts.workflow_templates.items() if RENDERED_STEP_IMAGE in images)
    if unpinned:
        return blocks(check, f"the step image is not pinned: {len(unpinned)} WorkflowTemplate(s) run "
                             f"`{RENDERED_STEP_IMAGE}`, which no registry serves (e.g. {unpinned[0]})",
                      "build and push the step image, pin it in your overlay and apply again (docs/install.md, step 1):\n"
                      "cd manifests/overlays/<yours> && kustomize edit set image "
                      "gpuaas-step=<registry>/gpuaas-step:<version> && kubectl apply -k .")
    failing = [(p, w) for p in facts.product_pods for w in p.waiting if w[1] in PULL_FAILURES]
    images = sorted({img for images in facts.workflow_templates.values() for img in images})
    if failing:
        pod, (container, reason, message, image) = failing[0]
        return blocks(check, f"{len(failing)} of the product's containers cannot pull their image: pod {pod.name} "
                             f"container {container} is {reason} ({image})",
                      f"make {image} pullable from the nodes (push it, or give the ServiceAccount an imagePullSecret: "
                      f"kubectl -n {facts.namespace} patch serviceaccount gpuaas-steps -p "
                      "'{\"imagePullSecrets\":[{\"name\":\"<secret>\"}]}'), or pin another image in your overlay",
                      f"{message[:200]}", *(f"{p.name}/{w[0]}: {w[1]}" for p, w in failing[1:5]))
    return ok(check, f"the step image is pinned ({', '.join(images)})" + (" and no product pod fails to pull it"
                                                                        if facts.product_pods else ""))
