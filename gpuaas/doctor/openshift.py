"""OpenShift's monitoring is configured through cluster-monitoring-operator, not the monitoring resources:
the fixes there are edits of ConfigMap openshift-user-workload-monitoring/user-workload-monitoring-config
(`config.yaml`, CMO pkg/manifests/types.go UserWorkloadConfiguration), printed as one literal
`kubectl patch` that keeps every other setting of the admin's."""

from __future__ import annotations

import json
import shlex
from typing import Any

import yaml

UWM_NAMESPACE = "openshift-user-workload-monitoring"
UWM_CONFIGMAP = "user-workload-monitoring-config"
PLATFORM_NAMESPACE = "openshift-monitoring"


def is_openshift_monitoring(namespace: str) -> bool:
    return namespace in (UWM_NAMESPACE, PLATFORM_NAMESPACE)


def patch_user_workload_config(current: str | None, change: dict[str, Any]) -> str:
    """`kubectl patch` of the user-workload config with `change` merged into its config.yaml (lists of names
    are extended, not replaced); creates the ConfigMap when there is none."""
    config = (yaml.safe_load(current or "") or {}) if current is not None else {}
    for key, value in change.items():
        if isinstance(value, list):
            config[key] = [*(config.get(key) or []), *(v for v in value if v not in (config.get(key) or []))]
        elif isinstance(value, dict):
            config[key] = {**(config.get(key) or {}), **value}
        else:
            config[key] = value
    text = yaml.safe_dump(config, sort_keys=False)
    if current is None:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": UWM_CONFIGMAP, "namespace": UWM_NAMESPACE},
                "data": {"config.yaml": text}}
        return f"echo {shlex.quote(json.dumps(body))} | kubectl apply -f -"
    patch = json.dumps({"data": {"config.yaml": text}})
    return f"kubectl -n {UWM_NAMESPACE} patch configmap {UWM_CONFIGMAP} --type=merge -p {shlex.quote(patch)}"
