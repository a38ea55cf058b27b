"""The gpuaas namespace and what runs in it: service accounts, the EventBus, the policy ConfigMap.

Three service accounts, one per kind of process, so each gets only its own permissions (rbac.py):
`gpuaas-eventsources` (watches Workloads and Nodes), `gpuaas-sensors` (submits Workflows),
`gpuaas-steps` (the reaction pods and Argo's executor in them).
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]

NAMESPACE = "gpuaas"
STEPS_ACCOUNT = "gpuaas-steps"
SENSORS_ACCOUNT = "gpuaas-sensors"
EVENT_SOURCES_ACCOUNT = "gpuaas-eventsources"
SWEEP_ACCOUNT = "gpuaas-sweep"
POLICY_CONFIGMAP = "gpuaas-policy"
POLICY_KEY = "policy.yaml"


def labels(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "gpuaas", "app.kubernetes.io/part-of": "gpuaas",
            "app.kubernetes.io/component": component}


def namespace(name: str = NAMESPACE) -> JSON:
    # The step containers meet Pod Security "restricted" (non-root, no capabilities, RuntimeDefault seccomp),
    # but Argo's executor sidecar and Argo Events' bus/sensor pods do not set all of that by default:
    # enforce "baseline", and let "restricted" warn and audit so the gap stays visible.
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {**labels("platform"),
                                                  "pod-security.kubernetes.io/enforce": "baseline",
                                                  "pod-security.kubernetes.io/warn": "restricted",
                                                  "pod-security.kubernetes.io/audit": "restricted"}}}


def service_account(name: str, component: str, ns: str = NAMESPACE) -> JSON:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": ns, "labels": labels(component)}}


def service_accounts(ns: str = NAMESPACE) -> list[JSON]:
    return [service_account(STEPS_ACCOUNT, "reaction", ns), service_account(SENSORS_ACCOUNT, "sensor", ns),
            service_account(EVENT_SOURCES_ACCOUNT, "event-source", ns), service_account(SWEEP_ACCOUNT, "sweep", ns)]


def event_bus(ns: str = NAMESPACE) -> JSON:
    """JetStream, three replicas with persistence: events survive a bus pod restart (at-least-once)."""
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "EventBus",
            "metadata": {"name": "default", "namespace": ns, "labels": labels("event-bus")},
            "spec": {"jetstream": {"version": "latest", "replicas": 3,
                                   "persistence": {"accessMode": "ReadWriteOnce", "volumeSize": "5Gi"},
                                   "containerTemplate": {"resources": {"requests": {"cpu": "100m",
                                                                                    "memory": "256Mi"}}}}}}


def policy_configmap(ns: str = NAMESPACE, document: str | None = None) -> JSON:
    """ConfigMap gpuaas-policy with the steps' own documented example (steps/policy.py), so the
    rendered policy is exactly the format the steps parse."""
    if document is None:
        from steps.policy import default_policy_text

        document = default_policy_text()
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": POLICY_CONFIGMAP, "namespace": ns, "labels": labels("policy")},
            "data": {POLICY_KEY: document}}


PROMETHEUS_CONFIGMAP = "gpuaas-prometheus"
"""Every step's environment (envFrom, workflows/reaction.py): where the steps query Prometheus and what
KEDA's scalers of the ScaledObjects on-admitted creates use; one per platform (gpuaas.manifests.platforms)."""
DEFAULT_PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"
"""The Service the Prometheus Operator makes for a Prometheus in namespace `monitoring`."""


def prometheus_configmap(ns: str = NAMESPACE, settings: dict[str, str] | None = None) -> JSON:
    """ConfigMap gpuaas-prometheus: GPUAAS_PROMETHEUS_URL and, where the platform needs them,
    GPUAAS_PROMETHEUS_TOKEN_FILE, GPUAAS_PROMETHEUS_CA_FILE, GPUAAS_KEDA_AUTHENTICATION."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": PROMETHEUS_CONFIGMAP, "namespace": ns, "labels": labels("prometheus")},
            "data": settings or {"GPUAAS_PROMETHEUS_URL": DEFAULT_PROMETHEUS_URL}}
