"""What the doctor gathered from the cluster, Prometheus and Alertmanager: plain data, no clients.

Every field the gatherer could not read is None (or empty) with the reason in `Facts.unreadable`
under the name the checks look up (UNREADABLE_KEYS), so a check can tell "absent" from "not known".
Tests build these by hand.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

JSON = dict[str, Any]


@dataclass(frozen=True)
class Crd:
    name: str
    served: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Controller:
    """A Deployment running a controller the product needs (found by its image)."""

    component: str
    namespace: str
    name: str
    image: str
    ready: int = 0
    desired: int = 1
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class KueueConfig:
    """Kueue's Configuration, from the ConfigMap its Deployment mounts."""

    source: str
    """`ConfigMap kueue-system/kueue-manager-config`."""
    namespace: str
    managed_jobs_namespace_selector: JSON | None = None
    """None: not set (Kueue's default: every namespace but kube-system and Kueue's own)."""
    enable_cluster_queue_resources: bool = False
    frameworks: tuple[str, ...] = ()
    red_hat_build: bool = False
    """Written by the Red Hat build of Kueue's operator (openshift/kueue-operator), which fixes the selector to
    `kueue.openshift.io/managed: "true"`: change the namespaces' labels, not the ConfigMap."""


@dataclass(frozen=True)
class RuleGroup:
    name: str
    file: str = ""
    health: str = "ok"
    """ok | err | unknown: the worst of its rules'."""
    last_error: str = ""
    last_evaluation_age_s: float | None = None
    interval_s: float = 60.0
    rules: dict[str, str] = field(default_factory=dict)
    """rule name (record or alert) -> the query as loaded (namespace enforcement shows here)."""


@dataclass
class Prometheus:
    url: str
    reachable: bool = False
    error: str = ""
    rule_groups: list[RuleGroup] | None = None
    alertmanagers: tuple[str, ...] = ()
    """The Alertmanagers Prometheus sends to (activeAlertmanagers)."""


@dataclass
class Dcgm:
    """DCGM series in Prometheus now (instant queries)."""

    gpus: int = 0
    """Distinct GPUs (UUID) reporting any activity metric."""
    engine_active: int = 0
    """Series of DCGM_FI_PROF_GR_ENGINE_ACTIVE."""
    gpu_util: int = 0
    held_plain: int = 0
    """Activity series with the pod in `pod`/`namespace` (outside the exporter's namespaces)."""
    held_exported: int = 0
    """Activity series with the pod in `exported_pod`/`exported_namespace`."""
    mig_slices: int = 0
    mig_slices_without_engine_active: tuple[str, ...] = ()
    """`node/UUID/GI<n>` of slices that report no engine-active (no activity at all: never released)."""


@dataclass
class Metrics:
    """Which series the product's rules read exist in Prometheus now."""

    present: dict[str, int] = field(default_factory=dict)
    """metric name -> number of series (0: absent)."""
    tenant_label_namespaces: tuple[str, ...] = ()
    """Namespaces kube-state-metrics exports with label_gpuaas_io_tenant."""
    gpu_requests: int = 0
    """Series of kube_pod_container_resource_requests{resource="nvidia_com_gpu"} (GPUs requested by pods)."""
    dcgm: Dcgm = field(default_factory=Dcgm)
    versions: dict[str, str] = field(default_factory=dict)
    """component -> version, from its build_info metric (kueue_build_info, keda_build_info...)."""


@dataclass(frozen=True)
class MonitoringResource:
    """A Prometheus, ThanosRuler or Alertmanager custom resource (the operator's view of who selects what)."""

    kind: str
    namespace: str
    name: str
    spec: JSON = field(default_factory=dict)
    conditions: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    """The operator's status conditions (Reconciled, Available): type -> (status, reason, message)."""


@dataclass(frozen=True)
class ProductObject:
    """The product's PrometheusRule or AlertmanagerConfig as it is in the cluster."""

    kind: str
    namespace: str
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    spec: JSON = field(default_factory=dict)
    status: JSON = field(default_factory=dict)


@dataclass
class Alertmanager:
    url: str
    reachable: bool = False
    error: str = ""
    config: JSON | None = None
    """The running configuration (`/api/v2/status` config.original, parsed)."""
    version: str = ""


@dataclass(frozen=True)
class SecretFact:
    namespace: str
    name: str
    exists: bool
    digests: dict[str, str] = field(default_factory=dict)
    """key -> sha256 of the value (first 16 hex digits; the value itself is never kept); '' for an empty value."""


@dataclass(frozen=True)
class PodFact:
    namespace: str
    name: str
    phase: str = "Running"
    ready: bool = True
    waiting: tuple[tuple[str, str, str, str], ...] = ()
    """(container, reason, message, image) of containers that are waiting (ImagePullBackOff, CrashLoopBackOff)."""
    labels: dict[str, str] = field(default_factory=dict)
    node: str = ""
    """`spec.nodeName`: '' until the scheduler placed it."""
    unscheduled: str = ""
    """`reason: message` of its PodScheduled condition when that is False (the scheduler's why), else ''."""
    claims: tuple[str, ...] = ()
    """The PersistentVolumeClaims its volumes name."""


@dataclass(frozen=True)
class ClaimFact:
    """A PersistentVolumeClaim of the EventBus's StatefulSet (one per bus pod)."""

    name: str
    phase: str = "Bound"
    """Pending (no volume bound yet), Bound or Lost."""
    storage_class: str | None = None
    """`spec.storageClassName`. None: not set, the cluster's default StorageClass applies (Kubernetes 1.28+ also
    gives it to a claim made before a default existed); '': explicitly none (only a pre-made volume binds)."""


@dataclass(frozen=True)
class StatefulSetFact:
    name: str
    ready: int = 0
    desired: int = 1
    claim_storage_class: str | None = None
    """`spec.volumeClaimTemplates[0].spec.storageClassName` (None: not set). A StatefulSet's claim templates never
    change (the API server refuses it), so this can lag behind the EventBus's spec."""


@dataclass(frozen=True)
class EventBusFact:
    """The EventBus the product's EventSources and Sensors use (`default`), and what Argo Events made of it.

    For a native bus (`jetstream`, or the deprecated `nats`) the controller runs a StatefulSet
    `eventbus-<name>-js` (`-stan`) whose pods and claims carry `controller: eventbus-controller` and
    `eventbus-name: <name>` (argo-events v1.9.11 pkg/reconciler/eventbus/installer). Its `Deployed` condition
    is True once the StatefulSet exists, whether or not a pod ever runs: the pods themselves are the evidence.
    """

    name: str
    form: str
    """The spec's key: jetstream, nats (NATS Streaming), kafka, jetstreamExotic, nats.exotic; '' when none."""
    spec: JSON = field(default_factory=dict)
    conditions: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    """Deployed, Configured: type -> (status, reason, message)."""
    helm_release: str = ""
    """Annotation `meta.helm.sh/release-name` (installed by Helm), else ''."""
    stateful_set: StatefulSetFact | None = None
    pods: tuple[PodFact, ...] = ()
    claims: tuple[ClaimFact, ...] = ()
    storage_classes: dict[str, bool] | None = None
    """StorageClass name -> is the cluster's default; read only when a claim is not Bound (None: not read)."""

    @property
    def native(self) -> bool:
        """Argo Events runs the bus's servers (pods to judge); an exotic or Kafka bus is someone else's."""
        return self.form in ("jetstream", "nats")


@dataclass(frozen=True)
class EventObject:
    """An EventSource, Sensor or EventBus of the product, with what the Argo Events controller made of it."""

    kind: str
    name: str
    conditions: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    """condition type -> (status, reason, message)."""
    auth_secret: tuple[str, str] | None = None
    """EventSource webhook `authSecret` (Secret name, key)."""
    deployment: tuple[int, int] | None = None
    """(ready, desired) of the Deployment the controller made for it; None when there is none."""
    pods: tuple[PodFact, ...] = ()


@dataclass(frozen=True)
class WorkflowFact:
    name: str
    template: str
    age_s: float
    phase: str = ""
    message: str = ""
    parameters: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)
    """node display name -> its output parameters (the probe reads idle-alerts' record)."""


@dataclass(frozen=True)
class CronWorkflowFact:
    """The catch-up sweep's CronWorkflow as the workflow-controller left it (argo-workflows v4.0.5
    `CronWorkflowStatus`). Ages are seconds before the doctor read it; None where the field is not set."""

    name: str
    age_s: float
    """Since its creationTimestamp."""
    schedules: tuple[str, ...] = ()
    """`spec.schedules` (v3.6 and on), else `spec.schedule` (earlier releases)."""
    timezone: str = ""
    suspend: bool = False
    phase: str = ""
    """`status.phase`: Active, or Stopped once a `spec.stopStrategy` expression held."""
    last_scheduled_at: str = ""
    last_scheduled_age_s: float | None = None
    """`status.lastScheduledTime`: the scheduled time of the last pass the controller created."""
    revalidated_age_s: float | None = None
    """Since its `gpuaas.io/revalidated-at` annotation (the install hook's, or the admin's after `kubectl apply -k`)."""
    active: tuple[str, ...] = ()
    """`status.active`: the passes running now (with concurrencyPolicy Forbid no new pass starts meanwhile)."""
    conditions: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    """type -> (status, reason, message): SpecError, SubmissionError (written by a scheduled run, not on add)."""
    template: str = ""
    """The WorkflowTemplate it runs (`spec.workflowSpec.workflowTemplateRef.name`)."""
    when: str = ""
    stop_strategy: str = ""


@dataclass(frozen=True)
class SweepPass:
    """One Workflow of the sweep (label gpuaas.io/reaction=sweep): a scheduled pass, or one submitted by hand."""

    name: str
    age_s: float
    """Since its creationTimestamp."""
    phase: str = ""
    message: str = ""
    finished_at: str = ""
    scheduled: bool = True
    """Created by the CronWorkflow (label workflows.argoproj.io/cron-workflow); False: submitted by hand."""


@dataclass
class Sweep:
    """The catch-up sweep (docs/catch-up.md): its CronWorkflow (None: not there) and its passes, newest first."""

    cron: CronWorkflowFact | None = None
    passes: list[SweepPass] = field(default_factory=list)


@dataclass(frozen=True)
class ClusterQueueFact:
    name: str
    gpu_quota: float = 0.0
    active: bool = True
    message: str = ""
    terminating: bool = False
    """Deleted (metadata.deletionTimestamp): Kueue keeps it, inactive, until its admitted Workloads are gone."""


@dataclass(frozen=True)
class LocalQueueFact:
    namespace: str
    name: str
    cluster_queue: str


@dataclass
class Tenants:
    cluster_queues: list[ClusterQueueFact] = field(default_factory=list)
    local_queues: list[LocalQueueFact] = field(default_factory=list)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    """namespace -> labels, for every namespace (Kueue's selector and the tenant label are judged on them)."""
    policy_tenants: tuple[str, ...] = ()
    """Tenants the policy ConfigMap names."""


@dataclass(frozen=True)
class InferenceServiceFact:
    namespace: str
    name: str
    mode: str = ""


@dataclass
class KServe:
    installed: bool = False
    """The InferenceService CRD is served."""
    config_source: str = ""
    """Where the default mode was read (ConfigMap inferenceservice-config); '' when not found."""
    default_mode: str = ""
    knative_serving: bool = False
    """Knative Serving's CRDs are served (Serverless mode needs them)."""
    inference_services: list[InferenceServiceFact] = field(default_factory=list)


@dataclass
class DataSciencePipelines:
    """OpenShift AI / Open Data Hub DataScienceClusters and their pipelines component."""

    installed: bool = False
    clusters: list[JSON] = field(default_factory=list)
    """{name, managementState, argoWorkflowsControllers}."""


@dataclass(frozen=True)
class ProbeResult:
    """What the end-to-end probe saw (gpuaas.doctor.probe)."""

    alert: dict[str, str]
    sent_to: str
    accepted: bool
    error: str = ""
    arrived_after_s: float | None = None
    workflow: str = ""
    phase: str = ""
    outcome: str = ""
    """What the run recorded about the test alert (idle-alerts' record: skipped, and why)."""
    released: bool = False
    waited_s: float = 0.0


UNREADABLE_KEYS = ("crds", "controllers", "api-services", "webhooks", "kueue-config", "prometheus", "metrics",
                   "monitoring-resources", "product-objects", "alertmanager", "secrets", "event-objects", "event-bus",
                   "nodes", "product-pods", "workflows", "workflow-templates", "argo-config", "sweep", "tenants", "kserve",
                   "data-science-pipelines")
"""The names `Facts.unreadable` uses, one per gatherer."""


@dataclass
class Facts:
    namespace: str = "gpuaas"
    crds: dict[str, Crd] = field(default_factory=dict)
    controllers: list[Controller] = field(default_factory=list)
    api_services: dict[str, tuple[bool, str]] = field(default_factory=dict)
    """name -> (Available, message)."""
    webhooks: dict[str, str | None] = field(default_factory=dict)
    """component -> None when its admission webhook answered a server-side dry run, else what happened."""
    kueue: KueueConfig | None = None
    prometheus: Prometheus | None = None
    metrics: Metrics | None = None
    prometheus_resources: list[MonitoringResource] = field(default_factory=list)
    """Prometheus and ThanosRuler resources."""
    alertmanager_resources: list[MonitoringResource] = field(default_factory=list)
    prometheus_rule: ProductObject | None = None
    alertmanager_config: ProductObject | None = None
    alertmanager: Alertmanager | None = None
    secrets: dict[str, SecretFact] = field(default_factory=dict)
    """`namespace/name` -> the Secret (exists or not)."""
    event_objects: list[EventObject] = field(default_factory=list)
    event_bus: EventBusFact | None = None
    """The EventBus `default` (None: there is none)."""
    kwok_nodes: tuple[str, ...] = ()
    """Nodes the product's event pods are on that KWOK simulates (annotation `kwok.x-k8s.io/node: fake` or label
    `type: kwok`): it reports their pods Running, but nothing runs them."""
    product_pods: list[PodFact] = field(default_factory=list)
    workflow_templates: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """WorkflowTemplate name -> the images its templates run."""
    workflows: list[WorkflowFact] = field(default_factory=list)
    sweep: Sweep = field(default_factory=Sweep)
    argo_config: JSON = field(default_factory=dict)
    """The workflow-controller ConfigMap's keys that matter: instanceID, namespace, where it was read."""
    tenants: Tenants = field(default_factory=Tenants)
    kserve: KServe = field(default_factory=KServe)
    pipelines: DataSciencePipelines = field(default_factory=DataSciencePipelines)
    openshift_user_workload_config: str | None = None
    """OpenShift: `config.yaml` of ConfigMap openshift-user-workload-monitoring/user-workload-monitoring-config
    (cluster-monitoring-operator's user-workload settings), None elsewhere."""
    probe: ProbeResult | None = None
    unreadable: dict[str, str] = field(default_factory=dict)

    def controllers_of(self, component: str) -> list[Controller]:
        return [c for c in self.controllers if c.component == component]

    def to_dict(self) -> JSON:
        return asdict(self)
