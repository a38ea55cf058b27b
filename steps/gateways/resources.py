"""The Kubernetes kinds the product reads or writes, as plain values.

The gateway is generic (dict in, dict out) so a reaction names *what* it touches with one of
these constants instead of picking a typed API class: adding a kind is one line here, and the
step process never pays for the client's thousand generated models.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote


@dataclass(frozen=True, slots=True)
class Resource:
    """One REST resource: where it lives in the API and whether it is namespaced."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """The `apiVersion` field value: `v1` for the core group, else `group/version`."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        """The URL path of the collection, or of one object (and its subresource).

        For a namespaced resource without a namespace this is the all-namespaces collection
        (`/apis/g/v/plural`), which is what list and watch across namespaces use.
        """
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [prefix]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{quote(namespace, safe='')}")
        parts.append(self.plural)
        if name is not None:
            parts.append(quote(name, safe=""))
            if subresource:
                parts.append(subresource)
        return "/".join(parts)

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}/{self.version}" if self.group else f"{self.plural}/{self.version}"


# --- Kueue (kueue.x-k8s.io): v1beta2 is the storage version since v0.16, v1beta1 is deprecated.
WORKLOAD = Resource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload")
WORKLOAD_V1BETA1 = Resource("kueue.x-k8s.io", "v1beta1", "workloads", "Workload")
CLUSTER_QUEUE = Resource("kueue.x-k8s.io", "v1beta2", "clusterqueues", "ClusterQueue", namespaced=False)
CLUSTER_QUEUE_V1BETA1 = Resource("kueue.x-k8s.io", "v1beta1", "clusterqueues", "ClusterQueue",
                                 namespaced=False)
LOCAL_QUEUE = Resource("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue")
LOCAL_QUEUE_V1BETA1 = Resource("kueue.x-k8s.io", "v1beta1", "localqueues", "LocalQueue")
RESOURCE_FLAVOR = Resource("kueue.x-k8s.io", "v1beta2", "resourceflavors", "ResourceFlavor", namespaced=False)
RESOURCE_FLAVOR_V1BETA1 = Resource("kueue.x-k8s.io", "v1beta1", "resourceflavors", "ResourceFlavor",
                                   namespaced=False)
COHORT = Resource("kueue.x-k8s.io", "v1beta2", "cohorts", "Cohort", namespaced=False)
COHORT_V1BETA1 = Resource("kueue.x-k8s.io", "v1beta1", "cohorts", "Cohort", namespaced=False)

# --- KEDA
SCALED_OBJECT = Resource("keda.sh", "v1alpha1", "scaledobjects", "ScaledObject")

# --- apps/v1
DEPLOYMENT = Resource("apps", "v1", "deployments", "Deployment")
HORIZONTAL_POD_AUTOSCALER = Resource("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler")
"""Someone else's autoscaler on a target: KEDA refuses a second one (its webhook), so gpuaas leaves it be."""
STATEFUL_SET = Resource("apps", "v1", "statefulsets", "StatefulSet")
REPLICA_SET = Resource("apps", "v1", "replicasets", "ReplicaSet")

# --- core/v1
POD = Resource("", "v1", "pods", "Pod")
NODE = Resource("", "v1", "nodes", "Node", namespaced=False)
CONFIG_MAP = Resource("", "v1", "configmaps", "ConfigMap")
EVENT = Resource("", "v1", "events", "Event")
NAMESPACE = Resource("", "v1", "namespaces", "Namespace", namespaced=False)

# --- batch/v1
JOB = Resource("batch", "v1", "jobs", "Job")

# --- KubeRay
RAY_CLUSTER = Resource("ray.io", "v1", "rayclusters", "RayCluster")
RAY_JOB = Resource("ray.io", "v1", "rayjobs", "RayJob")

# --- Kubeflow
PYTORCH_JOB = Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")
NOTEBOOK = Resource("kubeflow.org", "v1", "notebooks", "Notebook")

# --- KServe
INFERENCE_SERVICE = Resource("serving.kserve.io", "v1beta1", "inferenceservices", "InferenceService")

# --- LeaderWorkerSet
LEADER_WORKER_SET = Resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet")

# --- Argo Workflows: the catch-up sweep (steps/reactions/sweep.py) lists runs in flight and submits runs; the
# chart's install hook (steps/install_hook.py) has the CronWorkflows validated again against their templates
WORKFLOW = Resource("argoproj.io", "v1alpha1", "workflows", "Workflow")
CRON_WORKFLOW = Resource("argoproj.io", "v1alpha1", "cronworkflows", "CronWorkflow")
WORKFLOW_TEMPLATE = Resource("argoproj.io", "v1alpha1", "workflowtemplates", "WorkflowTemplate")

# --- Node capacity owners: OpenShift Machine API and Cluster API
MACHINE_SET = Resource("machine.openshift.io", "v1beta1", "machinesets", "MachineSet")
MACHINE_DEPLOYMENT = Resource("cluster.x-k8s.io", "v1beta1", "machinedeployments", "MachineDeployment")

ALL: tuple[Resource, ...] = (
    WORKLOAD, WORKLOAD_V1BETA1, CLUSTER_QUEUE, CLUSTER_QUEUE_V1BETA1, LOCAL_QUEUE, LOCAL_QUEUE_V1BETA1,
    RESOURCE_FLAVOR, RESOURCE_FLAVOR_V1BETA1, COHORT, COHORT_V1BETA1, SCALED_OBJECT,
    DEPLOYMENT, HORIZONTAL_POD_AUTOSCALER, STATEFUL_SET, REPLICA_SET, POD, NODE, CONFIG_MAP, EVENT, NAMESPACE, JOB,
    RAY_CLUSTER, RAY_JOB, PYTORCH_JOB, NOTEBOOK, INFERENCE_SERVICE, LEADER_WORKER_SET,
    MACHINE_SET, MACHINE_DEPLOYMENT, WORKFLOW, CRON_WORKFLOW, WORKFLOW_TEMPLATE,
)

# Kinds whose /scale subresource the product (and KEDA) uses.
SCALABLE: frozenset[Resource] = frozenset({DEPLOYMENT, STATEFUL_SET, REPLICA_SET, MACHINE_SET,
                                           MACHINE_DEPLOYMENT, LEADER_WORKER_SET})

_BY_API_VERSION_KIND: dict[tuple[str, str], Resource] = {(r.api_version, r.kind): r for r in ALL}


def for_kind(api_version: str, kind: str) -> Resource | None:
    """The Resource for an `apiVersion`/`kind` pair (an ownerReference, a scaleTargetRef).

    Returns None for a kind the product does not know, so callers can say which kind they met
    instead of guessing a plural.
    """
    return _BY_API_VERSION_KIND.get((api_version, kind))
