"""What a real node costs here: image builds, node start, pod start latency, memory.

    .venv/bin/python benchmarks/pod_runtime.py [--pods 5] [--cold]

Builds (or takes from the cache) the pause, argoexec and step images; starts a minimal control
plane (etcd, kube-apiserver, kube-controller-manager; tests/realstack/control_plane.py) and a real
node (gpuaas.cluster.node: containerd + kubelet); imports the images; then runs `python -m steps
--help` in N pods one after the other, timing each from the API create call to the pod's phase
Succeeded as the API reports it, and to its container's startedAt. The baseline, timed in the same
run, is the same command as a plain process on this machine (the project's virtualenv), so the
ratio is the price of a pod. `--cold` removes the cached step image and its Debian base first
(needs the Debian mirror and PyPI; about 2 minutes more).

Prints readable figures, then, last, one JSON line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _pod(name: str, node_name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node_name, "restartPolicy": "Never", "automountServiceAccountToken": False,
                     "containers": [{"name": "main", "image": "gpuaas.local/gpuaas-step:dev",
                                     "imagePullPolicy": "Never", "command": ["python", "-m", "steps", "--help"]}]}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=5)
    parser.add_argument("--cold", action="store_true", help="rebuild the step image and its Debian base")
    args = parser.parse_args()

    from kubernetes import client, config

    from gpuaas.cluster import images
    from gpuaas.cluster.node import Node, NodeCredentials, NodeNetwork
    from tests.realstack.control_plane import ControlPlane

    if args.cold:
        for stale in list(images.IMAGES_DIR.glob("step-*")) + list(images.IMAGES_DIR.glob("base-*")):
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    built = {}
    for name, build in (("pause", images.build_pause_image), ("argoexec", images.build_argoexec_image),
                        ("step", images.build_step_image)):
        print(f"image {name}...", file=sys.stderr, flush=True)
        built[name] = build()

    plane = ControlPlane()
    started = time.monotonic()
    plane.start()
    plane_seconds = time.monotonic() - started
    network = NodeNetwork.choose()
    credentials = NodeCredentials.issue(plane.pki / "ca.crt", plane.pki / "ca.key", plane.server, "bench-node",
                                        plane.workdir / "node-pki", [network.node_ip])
    node = Node(credentials, network=network)
    latencies, to_start, baseline = [], [], []
    try:
        node.start()
        ready_seconds = node.wait_ready()
        imported = node.import_images([image.archive for image in built.values()])
        api = client.CoreV1Api(config.new_client_from_config(str(plane.admin_kubeconfig)))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                api.read_namespaced_service_account("default", "default")
                break
            except client.ApiException:
                time.sleep(0.3)
        for index in range(args.pods):
            name = f"bench-{index}"
            begin = time.monotonic()
            api.create_namespaced_pod("default", _pod(name, "bench-node"))
            while True:
                pod = api.read_namespaced_pod(name, "default")
                if pod.status.phase in ("Succeeded", "Failed"):
                    break
                time.sleep(0.05)
            latencies.append(time.monotonic() - begin)
            state = pod.status.container_statuses[0].state.terminated
            to_start.append((state.started_at - pod.metadata.creation_timestamp).total_seconds())
            if pod.status.phase != "Succeeded":
                raise SystemExit(f"pod {name} {pod.status.phase}: {state}")
            api.delete_namespaced_pod(name, "default", grace_period_seconds=0)
            begin = time.monotonic()
            subprocess.run([sys.executable, "-m", "steps", "--help"], capture_output=True, check=False, cwd=REPO)
            baseline.append(time.monotonic() - begin)
        idle_memory = node.memory_kib()
        sleeper = _pod("bench-sleeper", "bench-node")
        sleeper["spec"]["containers"][0]["command"] = ["python", "-c", "import steps.entrypoint, time; time.sleep(60)"]
        api.create_namespaced_pod("default", sleeper)
        while api.read_namespaced_pod("bench-sleeper", "default").status.phase != "Running":
            time.sleep(0.1)
        time.sleep(1)
        memory = node.memory_kib()
        api.delete_namespaced_pod("bench-sleeper", "default", grace_period_seconds=0)
    finally:
        node.stop()
        plane.stop()

    median = statistics.median
    print("gpuaas real node (kubelet v1.36.3 + containerd 1.6 + runc, cgroup v1) on this machine")
    for name, image in built.items():
        size = image.archive.stat().st_size / 1e6
        print(f"  image {name:9s}: {image.seconds:7.2f} s  ({size:6.1f} MB archive, {image.reference})")
    print(f"  control plane up (etcd, apiserver)  : {plane_seconds:6.2f} s")
    print(f"  images imported into containerd     : {sum(imported.values()):6.2f} s  "
          + ", ".join(f"{k.split('-')[0]} {v:.2f}" for k, v in imported.items()))
    print(f"  node start -> Ready                 : {ready_seconds:6.2f} s")
    print(f"  pod create -> Succeeded ({args.pods} pods)    : median {median(latencies):.2f} s, max {max(latencies):.2f} s")
    print(f"  pod create -> container started     : median {median(to_start):.2f} s (API timestamps, 1 s resolution)")
    print(f"  same command as a plain process     : median {median(baseline):.2f} s")
    print(f"  pod / plain process                 : {median(latencies) / median(baseline):.1f}x")
    print("  node memory, no pod (RSS, MiB)      : " + ", ".join(f"{k} {v / 1024:.0f}" for k, v in idle_memory.items()))
    print("  node memory, one step pod (RSS, MiB): " + ", ".join(f"{k} {v / 1024:.0f}" for k, v in memory.items()))
    print(json.dumps({
        "image_build_s": {name: round(image.seconds, 2) for name, image in built.items()},
        "cold": args.cold, "control_plane_start_s": round(plane_seconds, 2),
        "image_import_s": round(sum(imported.values()), 2), "node_ready_s": round(ready_seconds, 2),
        "pod_succeeded_median_s": round(median(latencies), 3), "pod_succeeded_max_s": round(max(latencies), 3),
        "plain_process_median_s": round(median(baseline), 3),
        "pod_over_process": round(median(latencies) / median(baseline), 2),
        "node_rss_mib_idle": {k: round(v / 1024, 1) for k, v in idle_memory.items()},
        "node_rss_mib_one_pod": {k: round(v / 1024, 1) for k, v in memory.items()}, "pods": args.pods}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
