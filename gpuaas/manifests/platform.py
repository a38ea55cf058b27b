"""The gpuaas namespace and what runs in it: service accounts, the EventBus, the policy ConfigMap.

Three service accounts, one per kind of process, so each gets only its own permissions (rbac.py):
`gpuaas-eventsources` (watches Workloads and Nodes), `gpuaas-sensors` (submits Workflows),
`gpuaas-steps` (the reaction pods and Argo's executor in them).
"""

from __future__ import annotations

from typing import Any

import yaml

JSON = dict[str, Any]

NAMESPACE = "gpuaas"
STEPS_ACCOUNT = "gpuaas-steps"
SENSORS_ACCOUNT = "gpuaas-sensors"
EVENT_SOURCES_ACCOUNT = "gpuaas-eventsources"
POLICY_CONFIGMAP = "gpuaas-policy"
POLICY_KEY = "policy.yaml"


def labels(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "gpuaas", "app.kubernetes.io/part-of": "gpuaas",
            "app.kubernetes.io/component": component}


def namespace(name: str = NAMESPACE) -> JSON:
    # Pod Security "restricted": the step image and templates are built for it (non-root, no caps).
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {**labels("platform"),
                                                  "pod-security.kubernetes.io/enforce": "restricted"}}}


def service_account(name: str, component: str, ns: str = NAMESPACE) -> JSON:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": ns, "labels": labels(component)}}


def service_accounts(ns: str = NAMESPACE) -> list[JSON]:
    return [service_account(STEPS_ACCOUNT, "reaction", ns), service_account(SENSORS_ACCOUNT, "sensor", ns),
            service_account(EVENT_SOURCES_ACCOUNT, "event-source", ns)]


def event_bus(ns: str = NAMESPACE) -> JSON:
    """JetStream, three replicas with persistence: events survive a bus pod restart (at-least-once)."""
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "EventBus",
            "metadata": {"name": "default", "namespace": ns, "labels": labels("event-bus")},
            "spec": {"jetstream": {"version": "latest", "replicas": 3,
                                   "persistence": {"accessMode": "ReadWriteOnce", "volumeSize": "5Gi"},
                                   "containerTemplate": {"resources": {"requests": {"cpu": "100m",
                                                                                    "memory": "256Mi"}}}}}}


EXAMPLE_POLICY: JSON = {
    # Read by the steps (steps/policy.py); every key has a default there, this file shows them.
    "idle": {
        "mode": "enforce",             # enforce | dry-run (plan and record only)
        "windowSeconds": 1800,         # GPU activity window the idle decision looks at
        "threshold": 0.05,             # highest GPU activity (0-1) that still counts as idle
        "minRuntimeSeconds": 3600,     # never release a workload younger than this
        "maxReleasesPerHour": 10,      # per tenant; 0 = never release
        "exemptAnnotation": "gpuaas.io/idle-policy",  # value "exempt" on a Workload or its owner
    },
    "quota": {
        "cohort": "gpuaas",
        "queueingStrategy": "BestEffortFIFO",
        "weight": 1,
        "guaranteedGpus": 0,
    },
    "tenants": {
        "team-a": {"idle": {"mode": "enforce"}, "quota": {"weight": 2, "guaranteedGpus": 4}},
        "team-b": {"idle": {"mode": "dry-run"}, "quota": {"weight": 1, "guaranteedGpus": 2}},
    },
}


def policy_configmap(ns: str = NAMESPACE, policy: JSON | None = None) -> JSON:
    document = yaml.safe_dump(policy if policy is not None else EXAMPLE_POLICY, sort_keys=False)
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": POLICY_CONFIGMAP, "namespace": ns, "labels": labels("policy")},
            "data": {POLICY_KEY: document}}
