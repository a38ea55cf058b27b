"""Gather the facts (thin edges): each reader fills its part of `Facts` or records why it could not.

Reads only, except two server-side dry runs (`dryRun=All`: nothing is stored) that prove Kueue's and
KEDA's admission webhooks answer. What it reads, and so which permissions it needs, is
gpuaas.doctor.permissions (`gpuaas doctor --print-role`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import yaml

from gpuaas.doctor import versions as V
from gpuaas.doctor.clients import JSON, PARTIAL_METADATA, Http, Kube, Unreadable
from gpuaas.doctor.facts import Alertmanager as AlertmanagerFact
from gpuaas.doctor.facts import (
    ClaimFact,
    ClusterQueueFact,
    Controller,
    Crd,
    CronWorkflowFact,
    Dcgm,
    EventBusFact,
    EventObject,
    Facts,
    InferenceServiceFact,
    KueueConfig,
    LocalQueueFact,
    Metrics,
    MonitoringResource,
    PodFact,
    ProductObject,
    Prometheus,
    RuleGroup,
    SecretFact,
    StatefulSetFact,
    SweepPass,
    WorkflowFact,
)
from gpuaas.manifests.gpu_health import GROUP as HEALTH_GROUP
from gpuaas.manifests.observability import RULE_GROUP
from steps.gpu_key import ENGINE_ACTIVE, GPU_UTIL
from steps.install_hook import REVALIDATED_AT
from steps.reactions.sweep import CRON_NAME as SWEEP_CRON
from steps.reactions.sweep import REACTION_LABEL

PRODUCT_GROUPS = (RULE_GROUP, HEALTH_GROUP)

PART_OF = "app.kubernetes.io/part-of=gpuaas"
CRON_LABEL = "workflows.argoproj.io/cron-workflow"
"""On every Workflow a CronWorkflow created (argo-workflows v4.0.5 workflow/common/convert.go)."""
KUEUE_CONFIGMAP = "kueue-manager-config"
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"
KUEUE_NAMESPACES = ("kueue-system", "openshift-kueue-operator")
KUEUE_WEBHOOKS = "kueue-validating-webhook-configuration"
KSERVE_CONFIG_NAMESPACES = ("kserve", "redhat-ods-applications", "opendatahub")
ARGO_CONFIGMAP = "workflow-controller-configmap"
UWM_NAMESPACE, UWM_CONFIGMAP = "openshift-user-workload-monitoring", "user-workload-monitoring-config"
EXPORTER_NAMESPACES = "gpu-operator|nvidia-gpu-operator"
ACTIVITY = f'__name__=~"{ENGINE_ACTIVE}|{GPU_UTIL}"'
KEDA_PROBE_NAME = "gpuaas-doctor-webhook-probe-" + "x" * 50
"""Longer than the 63 characters KEDA copies into a label: only KEDA's webhook refuses it (gpuaas.cluster.stack)."""
BUS_NAME = "default"
"""The EventBus the product's EventSources and Sensors use (they name none)."""
BUS_CONTROLLER = "controller=eventbus-controller"
"""Argo Events v1.9.11 puts `controller: eventbus-controller` and `eventbus-name: <bus>` on a native bus's
StatefulSet and pods (pkg/reconciler/eventbus/installer/installer.go getLabels); the StatefulSet's selector
copies them onto its claims."""
DEFAULT_CLASS_ANNOTATIONS = ("storageclass.kubernetes.io/is-default-class",
                             "storageclass.beta.kubernetes.io/is-default-class")
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
"""What KWOK's controller selects its nodes by, by default (and gpuaas.cluster.kwok's nodes carry)."""
KWOK_LABEL = ("type", "kwok")
"""The label gpuaas.cluster.kwok's nodes carry and the stack's KWOK selects (--manage-nodes-with-label-selector)."""
PRESENT_METRICS = ("kueue_cluster_queue_resource_usage", "kueue_cluster_queue_resource_pending", "kueue_build_info",
                   "kueue_admitted_active_workloads", "kueue_cluster_queue_status", "kube_namespace_labels",
                   "kube_pod_container_resource_requests")


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16] if value else ""


def _age(stamp: str | None, now: float) -> float:
    if not stamp:
        return 0.0
    return max(0.0, now - datetime.fromisoformat(stamp).timestamp())


def _conditions(obj: JSON) -> dict[str, tuple[str, str, str]]:
    return {str(c.get("type")): (str(c.get("status") or ""), str(c.get("reason") or ""), str(c.get("message") or ""))
            for c in ((obj.get("status") or {}).get("conditions") or [])}


def _images(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("image"), str):
            yield node["image"]
        for value in node.values():
            yield from _images(value)
    elif isinstance(node, list):
        for value in node:
            yield from _images(value)


def cluster_queue_fact(cq: JSON) -> ClusterQueueFact:
    """A ClusterQueue's GPU quota (nominal, all flavors), its Active condition, and whether it is being deleted."""
    quota = 0.0
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                if resource.get("name") == "nvidia.com/gpu":
                    quota += _quantity(resource.get("nominalQuota"))
    meta = cq.get("metadata") or {}
    active = _conditions(cq).get("Active")
    return ClusterQueueFact(str(meta.get("name")), quota, active is None or active[0] == "True",
                            "" if active is None else f"{active[1]}: {active[2]}",
                            terminating=bool(meta.get("deletionTimestamp")))


def pod_fact(pod: JSON) -> PodFact:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    waiting = tuple((str(s.get("name")), str(w.get("reason") or ""), str(w.get("message") or ""), str(s.get("image") or ""))
                    for s in statuses for w in [((s.get("state") or {}).get("waiting") or {})] if w)
    ready = bool(status.get("containerStatuses")) and all(s.get("ready") for s in status.get("containerStatuses") or [])
    scheduled = _conditions(pod).get("PodScheduled")
    unscheduled = f"{scheduled[1]}: {scheduled[2]}".strip(": ") if scheduled and scheduled[0] == "False" else ""
    claims = tuple(str(v["persistentVolumeClaim"].get("claimName")) for v in spec.get("volumes") or []
                   if isinstance(v.get("persistentVolumeClaim"), dict))
    return PodFact(str(meta.get("namespace")), str(meta.get("name")), str(status.get("phase") or ""), ready, waiting,
                   dict(meta.get("labels") or {}), str(spec.get("nodeName") or ""), unscheduled, claims)


def bus_form(spec: JSON) -> str:
    """Which of Argo Events v1.9.11's four bus kinds an EventBus spec names (nats with `exotic`: nats.exotic)."""
    for form in ("jetstream", "jetstreamExotic", "kafka"):
        if spec.get(form) is not None:
            return form
    nats = spec.get("nats")
    if nats is None:
        return ""
    return "nats.exotic" if (nats or {}).get("exotic") is not None else "nats"


def stateful_set_fact(statefulset: JSON) -> StatefulSetFact:
    meta, spec, status = statefulset.get("metadata") or {}, statefulset.get("spec") or {}, statefulset.get("status") or {}
    templates = spec.get("volumeClaimTemplates") or [{}]
    name = (templates[0].get("spec") or {}).get("storageClassName")
    return StatefulSetFact(str(meta.get("name")), int(status.get("readyReplicas") or 0),
                           int(spec["replicas"]) if spec.get("replicas") is not None else 1,
                           None if name is None else str(name))


def claim_fact(claim: JSON) -> ClaimFact:
    name = (claim.get("spec") or {}).get("storageClassName")
    return ClaimFact(str((claim.get("metadata") or {}).get("name")), str((claim.get("status") or {}).get("phase") or ""),
                     None if name is None else str(name))


def is_default_class(storage_class: JSON) -> bool:
    annotations = (storage_class.get("metadata") or {}).get("annotations") or {}
    return any(annotations.get(key) == "true" for key in DEFAULT_CLASS_ANNOTATIONS)


def is_kwok(node: JSON) -> bool:
    meta = node.get("metadata") or {}
    return (meta.get("annotations") or {}).get(KWOK_ANNOTATION[0]) == KWOK_ANNOTATION[1] or \
        (meta.get("labels") or {}).get(KWOK_LABEL[0]) == KWOK_LABEL[1]


class Gatherer:
    """Reads everything the checks judge. `kube` is required; Prometheus and Alertmanager are optional."""

    def __init__(self, kube: Kube, namespace: str = "gpuaas", *, prometheus: Http | None = None,
                 alertmanager: Http | None = None, progress: Callable[[str], None] | None = None,
                 discover_alertmanager: Callable[[str], Http] | None = None) -> None:
        self.kube = kube
        self.namespace = namespace
        self.prometheus_http = prometheus
        self.alertmanager_http = alertmanager
        self.progress = progress or (lambda line: None)
        self.discover_alertmanager = discover_alertmanager
        self.facts = Facts(namespace=namespace)
        self.bus_object: JSON | None = None
        """The EventBus `default` as read with the other event objects (read_event_bus judges it)."""
        self.event_objects_read = False
        self.served: dict[str, dict[str, set[str]]] = {}
        """group -> version -> resource plurals served (API discovery)."""

    # -- plumbing ----------------------------------------------------------------------------------
    def _read(self, key: str, reader: Callable[[], None]) -> None:
        try:
            reader()
        except Unreadable as error:
            self.facts.unreadable[key] = str(error)
        except (ValueError, KeyError, TypeError, yaml.YAMLError) as error:
            self.facts.unreadable[key] = f"unexpected content: {type(error).__name__}: {str(error)[:200]}"

    def serves(self, group: str, plural: str) -> list[str]:
        """The versions of `group` that serve `plural` (API discovery)."""
        return sorted(v for v, plurals in self.served.get(group, {}).items() if plural in plurals)

    def gather(self) -> Facts:
        steps: list[tuple[str, str, Callable[[], None]]] = [
            ("crds", "API discovery and CRDs", self.read_crds),
            ("controllers", "controllers (Deployments)", self.read_controllers),
            ("api-services", "APIServices", self.read_api_services),
            ("webhooks", "admission webhooks (server-side dry runs)", self.read_webhooks),
            ("kueue-config", "Kueue's configuration", self.read_kueue_config),
            ("tenants", "tenants: ClusterQueues, LocalQueues, namespaces, policy", self.read_tenants),
            ("monitoring-resources", "Prometheus Operator resources", self.read_monitoring_resources),
            ("openshift", "OpenShift user-workload monitoring settings", self.read_openshift),
            ("product-objects", "the product's PrometheusRule and AlertmanagerConfig", self.read_product_objects),
            ("event-objects", "EventSources, Sensors, EventBus and their pods", self.read_event_objects),
            ("event-bus", "the EventBus's StatefulSet and claims", self.read_event_bus),
            ("nodes", "the nodes the event pods are on", self.read_nodes),
            ("workflow-templates", "WorkflowTemplates", self.read_workflow_templates),
            ("workflows", "Workflows", self.read_workflows),
            ("sweep", "the catch-up sweep: its CronWorkflow and passes", self.read_sweep),
            ("argo-config", "the workflow-controller's ConfigMap", self.read_argo_config),
            ("secrets", "the webhook token Secrets (digests only)", self.read_secrets),
            ("kserve", "KServe", self.read_kserve),
            ("data-science-pipelines", "DataScienceClusters", self.read_pipelines),
            ("prometheus", "Prometheus: rules and Alertmanagers", self.read_prometheus),
            ("metrics", "Prometheus: the series the rules read", self.read_metrics),
            ("alertmanager", "Alertmanager: the running configuration", self.read_alertmanager),
        ]
        for key, what, reader in steps:
            started = time.monotonic()
            self._read(key, reader)
            self.progress(f"read {what} ({time.monotonic() - started:.1f}s)"
                          + (f": {self.facts.unreadable[key][:120]}" if key in self.facts.unreadable else ""))
        return self.facts

    # -- Kubernetes ----------------------------------------------------------------------------------
    def read_crds(self) -> None:
        discovery = self.kube.get("/apis")
        if discovery is None:
            raise Unreadable(f"GET {self.kube.server}/apis: 404: this API serves no discovery (not a Kubernetes API "
                             "server?), so which CRDs are served is unknown")
        groups = discovery.get("groups") or []
        wanted = {name.split(".", 1)[1] for c in V.COMPONENTS for name, _ in c.crds}
        wanted |= {"serving.kserve.io", "serving.knative.dev", "datasciencecluster.opendatahub.io",
                   "monitoring.coreos.com", "apiregistration.k8s.io"}
        for group in groups:
            name = group.get("name")
            if name not in wanted:
                continue
            for version in group.get("versions") or []:
                listing = self.kube.get(f"/apis/{version['groupVersion']}") or {}
                self.served.setdefault(name, {})[version["version"]] = {
                    r["name"] for r in listing.get("resources") or [] if "/" not in r["name"]}
        for component in V.COMPONENTS:
            for crd_name, _ in component.crds:
                plural, group = crd_name.split(".", 1)
                served = tuple(self.serves(group, plural))
                if not served:
                    continue
                meta = (self.kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd_name}",
                                      accept=PARTIAL_METADATA) or {}).get("metadata") or {}
                self.facts.crds[crd_name] = Crd(crd_name, served, dict(meta.get("labels") or {}),
                                                dict(meta.get("annotations") or {}))

    def read_controllers(self) -> None:
        for deployment in self.kube.items("/apis/apps/v1/deployments"):
            meta, spec = deployment.get("metadata") or {}, deployment.get("spec") or {}
            labels = meta.get("labels") or {}
            if "eventsource-name" in labels or "sensor-name" in labels:
                continue  # the product's own EventSource/Sensor Deployments run the argo-events image too
            for container in ((spec.get("template") or {}).get("spec") or {}).get("containers") or []:
                name, _ = V.image_name_and_tag(str(container.get("image") or ""))
                component = next((key for key, names in V.IMAGE_NAMES.items() if name in names), None)
                if component is None:
                    continue
                status = deployment.get("status") or {}
                self.facts.controllers.append(Controller(
                    component, str(meta.get("namespace")), str(meta.get("name")), str(container.get("image")),
                    int(status.get("readyReplicas") or 0), int(spec.get("replicas") if spec.get("replicas") is not None
                                                                else 1),
                    tuple(str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])])))
                break

    def read_api_services(self) -> None:
        name = "v1beta1.external.metrics.k8s.io"
        found = self.kube.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}")
        if found is not None:
            available = _conditions(found).get("Available", ("", "", ""))
            self.facts.api_services[name] = (available[0] == "True", available[2])

    def read_webhooks(self) -> None:
        if self.serves("kueue.x-k8s.io", "resourceflavors"):
            version = "v1beta2" if "v1beta2" in self.serves("kueue.x-k8s.io", "resourceflavors") else "v1beta1"
            probe = {"apiVersion": f"kueue.x-k8s.io/{version}", "kind": "ResourceFlavor",
                     "metadata": {"name": "gpuaas-doctor-webhook-probe"}, "spec": {}}
            try:
                self.kube.request("POST", f"/apis/kueue.x-k8s.io/{version}/resourceflavors", query={"dryRun": "All"},
                                  body=probe)
                self.facts.webhooks["kueue"] = None
            except Unreadable as error:
                text = str(error)
                self.facts.webhooks["kueue"] = None if "AlreadyExists" in text else text[-300:]
        if self.serves("keda.sh", "scaledobjects"):
            probe = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
                     "metadata": {"name": KEDA_PROBE_NAME, "namespace": self.namespace},
                     "spec": {"scaleTargetRef": {"name": "gpuaas-doctor-webhook-probe"}, "minReplicaCount": 0,
                              "maxReplicaCount": 1, "triggers": [{"type": "prometheus", "metadata": {
                                  "serverAddress": "http://127.0.0.1:1", "query": "vector(0)", "threshold": "1"}}]}}
            try:
                self.kube.request("POST", f"/apis/keda.sh/v1alpha1/namespaces/{self.namespace}/scaledobjects",
                                  query={"dryRun": "All"}, body=probe)
                self.facts.webhooks["keda"] = ("the probe ScaledObject was admitted unjudged: KEDA's webhook "
                                               "(failurePolicy Ignore) was not reached")
            except Unreadable as error:
                text = str(error)
                self.facts.webhooks["keda"] = None if "denied the request" in text else text[-300:]

    def read_kueue_config(self) -> None:
        namespaces = list(KUEUE_NAMESPACES)
        hooks = self.kube.get(f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{KUEUE_WEBHOOKS}")
        for hook in (hooks or {}).get("webhooks") or []:
            service = (hook.get("clientConfig") or {}).get("service") or {}
            if service.get("namespace"):
                namespaces.insert(0, service["namespace"])
                break
        for namespace in dict.fromkeys(namespaces):
            found = self.kube.get(f"/api/v1/namespaces/{namespace}/configmaps/{KUEUE_CONFIGMAP}")
            if found is None:
                continue
            config = yaml.safe_load((found.get("data") or {}).get(KUEUE_CONFIG_KEY) or "{}") or {}
            owners = (found.get("metadata") or {}).get("ownerReferences") or []
            red_hat = namespace == "openshift-kueue-operator" or any(
                str(o.get("apiVersion", "")).startswith("kueue.openshift.io") for o in owners)
            self.facts.kueue = KueueConfig(
                f"ConfigMap {namespace}/{KUEUE_CONFIGMAP}", str(config.get("namespace") or namespace),
                config.get("managedJobsNamespaceSelector"),
                bool((config.get("metrics") or {}).get("enableClusterQueueResources")),
                tuple(str(f) for f in ((config.get("integrations") or {}).get("frameworks") or [])), red_hat)
            return
        self.facts.unreadable["kueue-config"] = (f"ConfigMap {KUEUE_CONFIGMAP} not found in "
                                                 f"{', '.join(dict.fromkeys(namespaces))}")

    def read_tenants(self) -> None:
        from steps.policy import parse_policy

        tenants = self.facts.tenants
        version = "v1beta2" if "v1beta2" in self.serves("kueue.x-k8s.io", "clusterqueues") else "v1beta1"
        for cq in self.kube.items(f"/apis/kueue.x-k8s.io/{version}/clusterqueues"):
            tenants.cluster_queues.append(cluster_queue_fact(cq))
        for lq in self.kube.items(f"/apis/kueue.x-k8s.io/{version}/localqueues"):
            meta = lq.get("metadata") or {}
            tenants.local_queues.append(LocalQueueFact(str(meta.get("namespace")), str(meta.get("name")),
                                                       str((lq.get("spec") or {}).get("clusterQueue") or "")))
        for ns in self.kube.items("/api/v1/namespaces"):
            meta = ns.get("metadata") or {}
            tenants.namespaces[str(meta.get("name"))] = dict(meta.get("labels") or {})
        policy = self.kube.get(f"/api/v1/namespaces/{self.namespace}/configmaps/gpuaas-policy")
        text = ((policy or {}).get("data") or {}).get("policy.yaml")
        if text:
            try:
                tenants.policy_tenants = tuple(sorted(parse_policy(text).tenants))
            except ValueError:
                pass  # the steps reject a bad policy themselves, with a record; not a prerequisite

    def read_monitoring_resources(self) -> None:
        for plural, kind, target in (("prometheuses", "Prometheus", self.facts.prometheus_resources),
                                     ("thanosrulers", "ThanosRuler", self.facts.prometheus_resources),
                                     ("alertmanagers", "Alertmanager", self.facts.alertmanager_resources)):
            if not self.serves("monitoring.coreos.com", plural):
                continue
            for obj in self.kube.items(f"/apis/monitoring.coreos.com/v1/{plural}"):
                meta = obj.get("metadata") or {}
                target.append(MonitoringResource(kind, str(meta.get("namespace")), str(meta.get("name")),
                                                 dict(obj.get("spec") or {}), _conditions(obj)))

    def read_openshift(self) -> None:
        found = self.kube.get(f"/api/v1/namespaces/{UWM_NAMESPACE}/configmaps/{UWM_CONFIGMAP}")
        if found is not None:
            self.facts.openshift_user_workload_config = str((found.get("data") or {}).get("config.yaml") or "")

    def read_product_objects(self) -> None:
        for plural, version, attribute, name in (("prometheusrules", "v1", "prometheus_rule", "gpuaas-gpu"),
                                                 ("alertmanagerconfigs", "v1alpha1", "alertmanager_config", "gpuaas-idle")):
            if not self.serves("monitoring.coreos.com", plural):
                continue
            found = [o for o in self.kube.items(f"/apis/monitoring.coreos.com/{version}/{plural}", label_selector=PART_OF)
                     if (o.get("metadata") or {}).get("name") == name]
            found.sort(key=lambda o: (o["metadata"].get("namespace") != self.namespace, o["metadata"].get("namespace")))
            if found:
                obj, meta = found[0], found[0]["metadata"]
                setattr(self.facts, attribute, ProductObject(obj.get("kind") or plural, str(meta.get("namespace")), name,
                                                             dict(meta.get("labels") or {}), dict(obj.get("spec") or {}),
                                                             dict(obj.get("status") or {})))

    def read_event_objects(self) -> None:
        ns = self.namespace
        pods = self.kube.items(f"/api/v1/namespaces/{ns}/pods")
        self.facts.product_pods = [pod_fact(p) for p in pods]
        deployments = self.kube.items(f"/apis/apps/v1/namespaces/{ns}/deployments")
        for plural, kind, label in (("eventsources", "EventSource", "eventsource-name"),
                                    ("sensors", "Sensor", "sensor-name"), ("eventbus", "EventBus", "")):
            for obj in self.kube.items(f"/apis/argoproj.io/v1alpha1/namespaces/{ns}/{plural}"):
                name = str((obj.get("metadata") or {}).get("name"))
                auth = None
                for webhook in ((obj.get("spec") or {}).get("webhook") or {}).values():
                    secret = (webhook or {}).get("authSecret") or {}
                    if secret.get("name"):
                        auth = (str(secret["name"]), str(secret.get("key") or "token"))
                deployment = None
                if label:
                    mine = [d for d in deployments if ((d.get("metadata") or {}).get("labels") or {}).get(label) == name]
                    if mine:
                        status = mine[0].get("status") or {}
                        deployment = (int(status.get("readyReplicas") or 0),
                                      int((mine[0].get("spec") or {}).get("replicas") or 1))
                own_pods = tuple(pod_fact(p) for p in pods
                                 if label and ((p.get("metadata") or {}).get("labels") or {}).get(label) == name)
                self.facts.event_objects.append(EventObject(kind, name, _conditions(obj), auth, deployment, own_pods))
                if kind == "EventBus" and name == BUS_NAME:
                    self.bus_object = obj
        self.event_objects_read = True

    def read_event_bus(self) -> None:
        """The EventBus `default` and, for a bus Argo Events runs itself, its StatefulSet, pods and claims (and the
        StorageClasses when a claim is not bound: why not)."""
        if not self.event_objects_read:
            return  # the EventBus itself was not read: event-objects says why
        obj = self.bus_object
        if obj is None:
            return
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        bus = EventBusFact(BUS_NAME, bus_form(spec), dict(spec), _conditions(obj),
                           str((meta.get("annotations") or {}).get("meta.helm.sh/release-name") or ""))
        if bus.native:
            ns, selector = self.namespace, f"{BUS_CONTROLLER},eventbus-name={BUS_NAME}"
            statefulsets = self.kube.items(f"/apis/apps/v1/namespaces/{ns}/statefulsets", label_selector=selector)
            claims = tuple(sorted((claim_fact(c) for c in self.kube.items(
                f"/api/v1/namespaces/{ns}/persistentvolumeclaims", label_selector=selector)), key=lambda c: c.name))
            classes = None
            if any(c.phase != "Bound" for c in claims):
                classes = {str((c.get("metadata") or {}).get("name")): is_default_class(c)
                           for c in self.kube.items("/apis/storage.k8s.io/v1/storageclasses")}
            pods = tuple(p for p in self.facts.product_pods
                         if p.labels.get("controller") == "eventbus-controller" and p.labels.get("eventbus-name") == BUS_NAME)
            bus = dataclasses.replace(bus, stateful_set=stateful_set_fact(statefulsets[0]) if statefulsets else None,
                                      pods=pods, claims=claims, storage_classes=classes)
        self.facts.event_bus = bus

    def read_nodes(self) -> None:
        """The nodes the event pods and the bus's pods are on: which of them KWOK only simulates."""
        pods = [p for o in self.facts.event_objects for p in o.pods]
        pods += list(self.facts.event_bus.pods if self.facts.event_bus is not None else ())
        kwok = []
        for name in sorted({p.node for p in pods if p.node}):
            node = self.kube.get(f"/api/v1/nodes/{name}", accept=PARTIAL_METADATA)
            if node is not None and is_kwok(node):
                kwok.append(name)
        self.facts.kwok_nodes = tuple(kwok)

    def read_workflow_templates(self) -> None:
        for template in self.kube.items(f"/apis/argoproj.io/v1alpha1/namespaces/{self.namespace}/workflowtemplates"):
            name = str((template.get("metadata") or {}).get("name"))
            self.facts.workflow_templates[name] = tuple(sorted(set(_images(template.get("spec") or {}))))

    def read_workflows(self) -> None:
        now = time.time()
        found = []
        for workflow in self.kube.items(f"/apis/argoproj.io/v1alpha1/namespaces/{self.namespace}/workflows"):
            found.append(workflow_fact(workflow, now))
        self.facts.workflows = sorted(found, key=lambda w: w.age_s)

    def read_sweep(self) -> None:
        """CronWorkflow gpuaas-sweep (a `get` by name: absent is a fact) and the sweep's passes (by label)."""
        if not self.serves("argoproj.io", "cronworkflows"):
            return  # the argo-workflows finding names the missing CRD
        now = time.time()
        base = f"/apis/argoproj.io/v1alpha1/namespaces/{self.namespace}"
        found = self.kube.get(f"{base}/cronworkflows/{SWEEP_CRON}")
        self.facts.sweep.cron = None if found is None else cron_workflow_fact(found, now)
        passes = self.kube.items(f"{base}/workflows", label_selector=f"{REACTION_LABEL}=sweep")
        self.facts.sweep.passes = sorted((sweep_pass(w, now) for w in passes), key=lambda p: p.age_s)

    def read_argo_config(self) -> None:
        namespaces = [c.namespace for c in self.facts.controllers_of("argo-workflows")] or ["argo"]
        for namespace in namespaces:
            found = self.kube.get(f"/api/v1/namespaces/{namespace}/configmaps/{ARGO_CONFIGMAP}")
            if found is not None:
                data = found.get("data") or {}
                self.facts.argo_config = {"source": f"ConfigMap {namespace}/{ARGO_CONFIGMAP}",
                                          "instanceID": str(data.get("instanceID") or ""),
                                          "namespace": str(data.get("namespace") or "")}
                return

    def read_secrets(self) -> None:
        wanted: list[tuple[str, str]] = []
        for obj in self.facts.event_objects:
            if obj.auth_secret:
                wanted.append((self.namespace, obj.auth_secret[0]))
        amc = self.facts.alertmanager_config
        if amc is not None:
            from gpuaas.doctor.checks.routing import _amc_credentials
            from gpuaas.manifests.observability import ADMINS_SECRET

            credentials = _amc_credentials(amc)
            if credentials:
                wanted.append((amc.namespace, credentials[0]))
            wanted.append((amc.namespace, ADMINS_SECRET))
        for namespace, name in dict.fromkeys(wanted):
            found = self.kube.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
            digests = {}
            if found is not None:
                import base64

                digests = {key: _digest(base64.b64decode(value or "").decode("utf-8", "replace").strip())
                           for key, value in (found.get("data") or {}).items()}
            self.facts.secrets[f"{namespace}/{name}"] = SecretFact(namespace, name, found is not None, digests)

    def read_kserve(self) -> None:
        kserve = self.facts.kserve
        versions = self.serves("serving.kserve.io", "inferenceservices")
        kserve.installed = bool(versions)
        kserve.knative_serving = bool(self.serves("serving.knative.dev", "services"))
        if not versions:
            return
        for namespace in KSERVE_CONFIG_NAMESPACES:
            found = self.kube.get(f"/api/v1/namespaces/{namespace}/configmaps/inferenceservice-config")
            if found is not None:
                deploy = json.loads(((found.get("data") or {}).get("deploy")) or "{}")
                kserve.default_mode = str(deploy.get("defaultDeploymentMode") or "")
                kserve.config_source = f"ConfigMap {namespace}/inferenceservice-config"
                break
        from steps.model.owners import kserve_mode

        for isvc in self.kube.items(f"/apis/serving.kserve.io/{versions[-1]}/inferenceservices"):
            meta = isvc.get("metadata") or {}
            kserve.inference_services.append(InferenceServiceFact(str(meta.get("namespace")), str(meta.get("name")),
                                                                  kserve_mode(isvc)))

    def read_pipelines(self) -> None:
        versions = self.serves("datasciencecluster.opendatahub.io", "datascienceclusters")
        self.facts.pipelines.installed = bool(versions)
        if not versions:
            return
        for dsc in self.kube.items(f"/apis/datasciencecluster.opendatahub.io/{versions[-1]}/datascienceclusters"):
            components = (dsc.get("spec") or {}).get("components") or {}
            key = "aipipelines" if "aipipelines" in components else "datasciencepipelines"
            pipelines = components.get(key) or {}
            self.facts.pipelines.clusters.append({
                "name": (dsc.get("metadata") or {}).get("name"), "component": key,
                "managementState": pipelines.get("managementState") or "",
                "argoWorkflowsControllers": ((pipelines.get("argoWorkflowsControllers") or {}).get("managementState")
                                             or "")})

    # -- Prometheus ------------------------------------------------------------------------------------
    def read_prometheus(self) -> None:
        http = self.prometheus_http
        if http is None:
            return
        facts = Prometheus(http.url)
        self.facts.prometheus = facts
        try:
            http.get_json("/api/v1/query?query=vector(1)")
            facts.reachable = True
        except Unreadable as error:
            facts.error = str(error)
            return
        facts.rule_groups = self._rule_groups(http)
        fresh = [g for g in facts.rule_groups if g.name in PRODUCT_GROUPS and g.last_evaluation_age_s is None]
        if fresh:  # just loaded (a reload a moment ago): wait for its first evaluation, once, bounded
            time.sleep(min(max(g.interval_s for g in fresh) + 1.0, 35.0))
            facts.rule_groups = self._rule_groups(http)
        deadline = time.monotonic() + 15.0
        while True:
            try:
                active = ((http.get_json("/api/v1/alertmanagers").get("data") or {}).get("activeAlertmanagers")) or []
            except Unreadable:
                break  # a querier (thanos-querier) has no such API
            facts.alertmanagers = tuple(str(a.get("url")) for a in active)
            if facts.alertmanagers or time.monotonic() > deadline:
                break
            time.sleep(1.0)  # right after a configuration reload the list is empty until discovery runs

    @staticmethod
    def _rule_groups(http: Http) -> list[RuleGroup]:
        now = time.time()
        groups = []
        for group in (http.get_json("/api/v1/rules").get("data") or {}).get("groups") or []:
            rules = {str(r.get("name")): str(r.get("query") or "") for r in group.get("rules") or []}
            health = "err" if any(r.get("health") == "err" for r in group.get("rules") or []) else "ok"
            errors = [str(r.get("lastError")) for r in group.get("rules") or [] if r.get("lastError")]
            last = group.get("lastEvaluation")
            age = None if not last or last.startswith("0001-") else _age(last, now)
            groups.append(RuleGroup(str(group.get("name")), str(group.get("file") or ""), health,
                                    "; ".join(errors)[:300], age, float(group.get("interval") or 60), rules))
        return groups

    def read_metrics(self) -> None:
        http = self.prometheus_http
        if http is None or self.facts.prometheus is None or not self.facts.prometheus.reachable:
            self.facts.unreadable.setdefault("metrics", "Prometheus was not given or did not answer")
            return
        prometheus = http.prometheus()

        def query(promql: str) -> list[JSON]:
            try:
                return prometheus.custom_query(promql)
            except Exception as error:  # noqa: BLE001 - prometheus-api-client raises its own and requests' errors
                raise Unreadable(f"query {promql[:80]!r} at {http.url}: {type(error).__name__}: {str(error)[:200]}") \
                    from None

        def count(promql: str) -> int:
            result = query(f"count({promql})")
            return int(float(result[0]["value"][1])) if result else 0

        metrics = Metrics()
        names = "|".join(PRESENT_METRICS)
        for series in query(f'count by (__name__) ({{__name__=~"{names}"}})'):
            metrics.present[series["metric"]["__name__"]] = int(float(series["value"][1]))
        for name, label, component in (("kueue_build_info", "git_version", "kueue"),
                                       ("keda_build_info", "version", "keda")):
            for series in query(name):
                if V.parse_version(series["metric"].get(label)):
                    metrics.versions[component] = series["metric"][label]
        metrics.tenant_label_namespaces = tuple(sorted(
            s["metric"].get("namespace", "") for s in
            query('group by (namespace) (kube_namespace_labels{label_gpuaas_io_tenant!=""})')))
        metrics.gpu_requests = count('kube_pod_container_resource_requests{resource="nvidia_com_gpu"}')
        slices = 'group by (UUID, GPU_I_ID, Hostname, hostname) ({__name__=~"DCGM_FI_.*", GPU_I_ID!=""})'
        without = query(f"{slices} unless on (UUID, GPU_I_ID) {ENGINE_ACTIVE}")
        metrics.dcgm = Dcgm(
            gpus=count(f"group by (UUID, Hostname, hostname, gpu) ({{{ACTIVITY}}})"),
            engine_active=count(ENGINE_ACTIVE), gpu_util=count(GPU_UTIL),
            held_plain=count(f'{{{ACTIVITY}, exported_pod="", pod!="", namespace!~"{EXPORTER_NAMESPACES}"}}'),
            held_exported=count(f'{{{ACTIVITY}, exported_pod!=""}}'),
            mig_slices=count(slices),
            mig_slices_without_engine_active=tuple(sorted(
                f"{s['metric'].get('Hostname') or s['metric'].get('hostname') or '?'}/{s['metric'].get('UUID')}"
                f"/GI{s['metric'].get('GPU_I_ID')}" for s in without)))
        self.facts.metrics = metrics

    # -- Alertmanager ----------------------------------------------------------------------------------
    def read_alertmanager(self) -> None:
        http = self.alertmanager_http
        if http is None and self.facts.prometheus is not None and self.facts.prometheus.alertmanagers \
                and self.discover_alertmanager is not None:
            url = self.facts.prometheus.alertmanagers[0].rsplit("/api/", 1)[0]
            http = self.discover_alertmanager(url)
            self.alertmanager_http = http
        if http is None:
            return
        facts = AlertmanagerFact(http.url)
        self.facts.alertmanager = facts
        try:
            status = http.get_json("/api/v2/status")
        except Unreadable as error:
            facts.error = str(error)
            return
        facts.reachable = True
        facts.config = yaml.safe_load(((status.get("config") or {}).get("original")) or "{}") or {}
        facts.version = str((status.get("versionInfo") or {}).get("version") or "")


def workflow_fact(workflow: JSON, now: float) -> WorkflowFact:
    meta, status, spec = workflow.get("metadata") or {}, workflow.get("status") or {}, workflow.get("spec") or {}
    labels = meta.get("labels") or {}
    parameters = {str(p.get("name")): str(p.get("value") or "") for p in (spec.get("arguments") or {}).get("parameters") or []}
    outputs = {str(n.get("displayName")): {str(p.get("name")): str(p.get("value") or "")
                                           for p in (n.get("outputs") or {}).get("parameters") or []}
               for n in (status.get("nodes") or {}).values() if (n.get("outputs") or {}).get("parameters")}
    template = labels.get("workflows.argoproj.io/workflow-template") or \
        str((spec.get("workflowTemplateRef") or {}).get("name") or "")
    return WorkflowFact(str(meta.get("name")), template, _age(meta.get("creationTimestamp"), now),
                        str(status.get("phase") or ""), str(status.get("message") or ""), parameters, outputs)


def cron_workflow_fact(cron: JSON, now: float) -> CronWorkflowFact:
    meta, spec, status = cron.get("metadata") or {}, cron.get("spec") or {}, cron.get("status") or {}
    schedules = spec.get("schedules") or ([spec["schedule"]] if spec.get("schedule") else [])
    last = str(status.get("lastScheduledTime") or "")
    revalidated = str((meta.get("annotations") or {}).get(REVALIDATED_AT) or "")
    try:
        revalidated_age = _age(revalidated, now) if revalidated else None
    except ValueError:
        revalidated_age = None  # written by hand in another format: not evidence of a validation
    return CronWorkflowFact(
        str(meta.get("name")), _age(meta.get("creationTimestamp"), now), tuple(str(s) for s in schedules),
        str(spec.get("timezone") or ""), bool(spec.get("suspend")), str(status.get("phase") or ""), last,
        _age(last, now) if last else None, revalidated_age,
        tuple(str(a.get("name")) for a in status.get("active") or []), _conditions(cron),
        str(((spec.get("workflowSpec") or {}).get("workflowTemplateRef") or {}).get("name") or ""),
        str(spec.get("when") or ""), str((spec.get("stopStrategy") or {}).get("expression") or ""))


def sweep_pass(workflow: JSON, now: float) -> SweepPass:
    meta, status = workflow.get("metadata") or {}, workflow.get("status") or {}
    return SweepPass(str(meta.get("name")), _age(meta.get("creationTimestamp"), now), str(status.get("phase") or ""),
                     str(status.get("message") or ""), str(status.get("finishedAt") or ""),
                     CRON_LABEL in (meta.get("labels") or {}))


def _quantity(value: Any) -> float:
    """A Kubernetes quantity of whole devices ("8", 8, "8000m")."""
    text = str(value or "0")
    try:
        return float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        return 0.0


def now_utc() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
