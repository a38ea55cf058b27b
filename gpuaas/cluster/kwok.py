"""KWOK's fake nodes: three GPU nodes and one CPU node, and the stages that move their pods.

Why these labels and taints: the example ResourceFlavor `gpu-a100` (manifests/examples/tenants)
selects nodes by `nvidia.com/gpu.product` and tolerates the `nvidia.com/gpu` NoSchedule taint, as
GPU nodes carry it (the NVIDIA GPU operator's labels); Kueue injects the flavor's node selector and
tolerations into admitted pods, so they land on these nodes. The CPU node takes pods that no queue
manages. Pod lifecycles come from KWOK's own `general` stages (read from the pinned module): pods
become Ready; pods owned by a Job complete after `pod-complete.stage.kwok.x-k8s.io/delay` (default
1 s with a jitter-delay of 5 s: between 1 and 5 s), which a test sets to keep a Job running, together
with `pod-complete.stage.kwok.x-k8s.io/jitter-delay`: KWOK waits the jitter-delay (default 5 s) whenever it
is not longer than the delay (v0.8.0 pkg/utils/lifecycle Stage.Delay), so a delay of 600 s alone
still completes the pod within 5 s. The changes to upstream's
stages: pods owned by a PyTorchJob complete the same way (COMPLETING_OWNERS), as a training
script's processes exit, and the training-operator then marks the PyTorchJob Succeeded; a pod
annotated to fail never completes. Ray's pods (owned by a RayCluster) run until deleted, as Ray's
head and workers do. One stage is the project's own (`pod_fail_stage`): a running pod annotated
`pod-fail.stage.gpuaas.io/delay` ends Failed with exit code 1 after that delay, as a crashing
process does (a RayJob's submitter, whose `ray job submit` would find no Ray dashboard: a KWOK
pod runs no Ray).
"""

from __future__ import annotations

from typing import Any

import yaml

from gpuaas.upstream import module_dir

KWOK = "sigs.k8s.io/kwok"
MANAGED_LABEL = ("type", "kwok")
GPU_PRODUCT = "NVIDIA-A100-SXM4-80GB"
GPU_NODES = 3
GPUS_PER_NODE = 4
FAIL_DELAY = "pod-fail.stage.gpuaas.io/delay"
COMPLETING_OWNERS = ("Job", "PyTorchJob")
"""Owner kinds whose pods KWOK completes (upstream's `pod-complete` stage names only Job)."""

STAGES = ("kustomize/stage/node/fast/node-initialize.yaml",
          "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
          *(f"kustomize/stage/pod/general/{name}.yaml" for name in
            ("pod-create", "pod-init-container-running", "pod-init-container-completed", "pod-ready",
             "pod-complete", "pod-delete")))


def stages_config() -> str:
    """KWOK's `--config` file: the upstream stages, one YAML document each."""
    root = module_dir(KWOK)
    docs = []
    for path in STAGES:
        docs += [doc for doc in yaml.safe_load_all((root / path).read_text()) if doc]
    for doc in docs:
        if doc["metadata"]["name"] == "pod-complete":
            owners = next(e for e in doc["spec"]["selector"]["matchExpressions"]
                          if e["key"] == ".metadata.ownerReferences.[].kind")
            owners["values"] = list(COMPLETING_OWNERS)
            doc["spec"]["selector"]["matchExpressions"].append(  # a pod meant to fail never completes
                {"key": f'.metadata.annotations["{FAIL_DELAY}"]', "operator": "DoesNotExist"})
    docs.append(pod_fail_stage())
    return yaml.safe_dump_all(docs, sort_keys=False)


def pod_fail_stage() -> dict[str, Any]:
    """A KWOK Stage: a Running, Ready pod annotated FAIL_DELAY fails (exit code 1) after that delay."""
    status = """{{ $now := Now }}
containerStatuses:
{{ range $index, $item := .spec.containers }}
- image: {{ $item.image | Quote }}
  name: {{ $item.name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: 1
      finishedAt: {{ $now | Quote }}
      reason: Error
      startedAt: {{ $now | Quote }}
{{ end }}
phase: Failed"""
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "gpuaas-pod-fail"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": [
                {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                {"key": '.status.conditions.[] | select( .type == "Ready" ) | .status', "operator": "In",
                 "values": ["True"]},
                {"key": f'.metadata.annotations["{FAIL_DELAY}"]', "operator": "Exists"},
            ]},
            "weight": 1,
            "delay": {"durationMilliseconds": 1000, "durationFrom": {
                "expressionFrom": f'.metadata.annotations["{FAIL_DELAY}"]'}},
            "next": {"delete": False, "statusTemplate": status},
        },
    }


def _node(name: str, *, labels: dict[str, str], capacity: dict[str, str], taints: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                                   "kwok.x-k8s.io/node": "fake"},
                     "labels": {MANAGED_LABEL[0]: MANAGED_LABEL[1], "kubernetes.io/hostname": name,
                                "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                                "node-role.kubernetes.io/worker": "", **labels}},
        "spec": {"taints": taints},
        "status": {"allocatable": capacity, "capacity": capacity,
                   "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "fake",
                                "kubeProxyVersion": "fake", "machineID": name, "systemUUID": name, "bootID": name,
                                "kernelVersion": "kwok", "osImage": "kwok", "containerRuntimeVersion": "kwok"}},
    }


def nodes() -> list[dict[str, Any]]:
    """GPU nodes `gpu-node-1..3` (4 `nvidia.com/gpu` each, tainted) and `cpu-node-1`."""
    gpu_capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(GPUS_PER_NODE)}
    out = [_node(f"gpu-node-{i}", labels={"nvidia.com/gpu.product": GPU_PRODUCT, "nvidia.com/gpu.present": "true",
                                           "nvidia.com/gpu.count": str(GPUS_PER_NODE)},
                 capacity=gpu_capacity, taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
           for i in range(1, GPU_NODES + 1)]
    out.append(_node("cpu-node-1", labels={}, capacity={"cpu": "32", "memory": "128Gi", "pods": "110"}, taints=[]))
    return out
