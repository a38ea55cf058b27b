"""The DCGM-like exporter of the real-stack cluster: KWOK's GPUs, attributed to the pods that hold them.

A STAND-IN for NVIDIA's dcgm-exporter, which needs real GPUs and the kubelet's pod-resources API;
KWOK nodes have neither. It serves the project's exporter (engine/exporter.py: dcgm-exporter's
series and labels) for every GPU the KWOK GPU nodes advertise, and every second lists the Running
pods on those nodes through the apiserver and gives each pod as many GPUs of its node as it
requests, as the device plugin would. The utilization of a pod's GPUs is the pod's annotation
`gpuaas.io/emulated-gpu-utilization` (percent, default 100): tests drive idleness by annotating.
A GPU node's annotation `gpuaas.io/emulated-gpu-xid` (an XID code) is the last XID of all its GPUs
(DCGM_FI_DEV_XID_ERRORS): tests raise the product's GPUXidError health alert with it.

    python -m gpuaas.cluster.gpu_exporter --kubeconfig ADMIN --port PORT
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

UTILIZATION_ANNOTATION = "gpuaas.io/emulated-gpu-utilization"
XID_ANNOTATION = "gpuaas.io/emulated-gpu-xid"
GPU = "nvidia.com/gpu"


def _requested_gpus(pod: Any) -> int:
    total = 0
    for container in pod.spec.containers or []:
        limits = (container.resources.limits if container.resources else None) or {}
        requests = (container.resources.requests if container.resources else None) or {}
        total += int(limits.get(GPU) or requests.get(GPU) or 0)
    return total


def _utilization(pod: Any) -> float:
    raw = (pod.metadata.annotations or {}).get(UTILIZATION_ANNOTATION, "100")
    try:
        return max(0.0, min(100.0, float(raw)))
    except ValueError:
        return 100.0


def sync(exporter: Any, core: Any) -> None:
    """Attribute GPUs to the Running pods on GPU nodes; free the GPUs of pods that are gone."""
    from kubernetes.client import ApiException
    try:
        nodes = core.list_node(label_selector="nvidia.com/gpu.present=true").items
        pods = core.list_pod_for_all_namespaces(field_selector="status.phase=Running").items
    except (ApiException, OSError):
        return  # the apiserver may be restarting; try again next second
    known = {g.hostname for g in exporter.gpus()}
    for node in nodes:
        if node.metadata.name not in known:
            for index in range(int((node.status.capacity or {}).get(GPU, 0))):
                exporter.add_gpu(node.metadata.name, index)
        xid = (node.metadata.annotations or {}).get(XID_ANNOTATION, "0")
        for gpu in exporter.gpus():
            if gpu.hostname == node.metadata.name and str(gpu.xid) != xid and xid.isdigit():
                exporter.set(gpu.uuid, xid=int(xid))
    wanted: dict[tuple[str, str], tuple[str, int, float]] = {}
    for pod in pods:
        count = _requested_gpus(pod)
        if count and pod.spec.node_name:
            wanted[(pod.metadata.namespace, pod.metadata.name)] = (pod.spec.node_name, count, _utilization(pod))
    held: dict[tuple[str, str], list[str]] = {}
    for gpu in exporter.gpus():
        key = (gpu.namespace, gpu.pod)
        if gpu.pod and key not in wanted:
            exporter.unassign(gpu.uuid)
        elif gpu.pod:
            held.setdefault(key, []).append(gpu.uuid)
    for (namespace, name), (node, count, utilization) in wanted.items():
        have = held.get((namespace, name), [])
        free = [g.uuid for g in exporter.gpus() if g.hostname == node and not g.pod]
        for uuid in free[:max(0, count - len(have))]:
            exporter.assign(uuid, namespace=namespace, pod=name, container="main")
        exporter.set_pod_utilization(namespace, name, utilization)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--label-style", choices=("plain", "exported"), default="plain")
    args = parser.parse_args(argv)

    from kubernetes import client, config

    from engine.exporter import DcgmExporter

    config.load_kube_config(config_file=args.kubeconfig)
    core = client.CoreV1Api()
    exporter = DcgmExporter(label_style=args.label_style, port=args.port)
    print(f"serving DCGM-like metrics on {exporter.start()}/metrics", flush=True)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    while not stopping.wait(1.0):
        sync(exporter, core)
    exporter.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
