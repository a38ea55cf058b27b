"""What a real node costs here: image builds, node start, pod start latency, memory.

    .venv/bin/python benchmarks/pod_runtime.py [--pods 5] [--cold]

Runs the pieces as their own processes, as `gpuaas cluster up` would (this script imports no
gpuaas code): `python -m gpuaas.cluster.images --output json` builds or finds the pause,
argoexec and step images; `python -m tests.realstack.control_plane` runs etcd, kube-apiserver,
kube-controller-manager and kube-scheduler; `python -m gpuaas.cluster.node` runs the node
(containerd + kubelet), imports the images and reports when Ready. Then `python -m steps --help`
runs in N pods one after the other, each timed from the API create call to phase Succeeded as the
API reports it. The baseline, timed in the same run, is the same command as a plain process on
this machine (the project's virtualenv): the ratio is the price of a pod. Memory is the resident
size of the node's processes (kubelet, containerd, the shims) with one step pod running.
`--cold` removes the cached step image and its Debian base first (Debian mirror and PyPI; minutes).

Prints readable figures, then, last, one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMAGES = Path(os.environ.get("GPUAAS_STACK_CACHE", REPO / ".stack-cache")) / "images"


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _shim_pids(socket: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmdline[0].endswith(b"containerd-shim-runc-v2") and socket.encode() in cmdline:
                pids.append(int(entry.name))
    return pids


def _background(command: list[str]) -> tuple[subprocess.Popen, dict]:
    """Start a foreground-style component and read the JSON line it prints when up."""
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline() if process.stdout else ""
    if not line:
        process.wait()
        raise SystemExit(f"{' '.join(command[:3])} exited {process.returncode} before it was up")
    return process, json.loads(line)


def _stop(process: subprocess.Popen | None) -> None:
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def _pod(name: str, command: list[str]) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                     "containers": [{"name": "main", "image": "gpuaas.local/gpuaas-step:dev",
                                     "imagePullPolicy": "Never", "command": command}]}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=5)
    parser.add_argument("--cold", action="store_true", help="rebuild the step image and its Debian base")
    args = parser.parse_args()
    from kubernetes import client, config

    python = sys.executable
    if args.cold:
        for stale in list(IMAGES.glob("step-*")) + list(IMAGES.glob("base-*")):
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    print("images...", file=sys.stderr, flush=True)
    built = json.loads(subprocess.run([python, "-m", "gpuaas.cluster.images", "--output", "json"], cwd=REPO,
                                      check=True, capture_output=True, text=True).stdout)
    plane = node = None
    latencies, baseline = [], []
    try:
        print("control plane...", file=sys.stderr, flush=True)
        plane, cluster = _background([python, "-m", "tests.realstack.control_plane"])
        print("node...", file=sys.stderr, flush=True)
        started = time.monotonic()
        node, status = _background([python, "-m", "gpuaas.cluster.node", "--server", cluster["server"],
                                    "--ca-cert", cluster["ca_cert"], "--ca-key", cluster["ca_key"],
                                    "--name", "bench-node", *(f"--image={i['archive']}" for i in built)])
        node_up = time.monotonic() - started
        api = client.CoreV1Api(config.new_client_from_config(cluster["admin_kubeconfig"]))
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
            api.create_namespaced_pod("default", _pod(name, ["python", "-m", "steps", "--help"]))
            while (pod := api.read_namespaced_pod(name, "default")).status.phase not in ("Succeeded", "Failed"):
                time.sleep(0.05)
            latencies.append(time.monotonic() - begin)
            if pod.status.phase != "Succeeded":
                raise SystemExit(f"pod {name} {pod.status.phase}: {pod.status.container_statuses}")
            api.delete_namespaced_pod(name, "default", grace_period_seconds=0)
            begin = time.monotonic()
            subprocess.run([python, "-m", "steps", "--help"], capture_output=True, check=False, cwd=REPO)
            baseline.append(time.monotonic() - begin)
        api.create_namespaced_pod("default", _pod("bench-sleeper", [
            "python", "-c", "import steps.entrypoint, time; time.sleep(60)"]))
        while api.read_namespaced_pod("bench-sleeper", "default").status.phase != "Running":
            time.sleep(0.1)
        time.sleep(1)
        memory = {name: _rss_mib(pid) for name, pid in status["pids"].items()}
        memory["shims"] = sum(_rss_mib(pid) for pid in _shim_pids(status["containerd_socket"]))
        api.delete_namespaced_pod("bench-sleeper", "default", grace_period_seconds=0)
    finally:
        _stop(node)
        _stop(plane)

    median = statistics.median
    imported = status["import_s"]
    print("gpuaas real node (kubelet v1.36.3 + containerd 1.6 + runc, cgroup v1) on this machine")
    for image in built:
        size = Path(image["archive"]).stat().st_size / 1e6
        print(f"  image {image['reference']:30s}: {image['seconds']:7.2f} s  ({size:6.1f} MB archive)")
    print(f"  control plane up (etcd, apiserver)  : {cluster['start_s']:6.2f} s")
    print(f"  node start -> Ready                 : {status['ready_s']:6.2f} s")
    print(f"  images imported into containerd     : {sum(imported.values()):6.2f} s  "
          + ", ".join(f"{k.split('-')[0]} {v:.2f}" for k, v in imported.items()))
    print(f"  node process: start -> up and loaded: {node_up:6.2f} s (credentials, start, Ready, imports)")
    print(f"  pod create -> Succeeded ({args.pods} pods)    : median {median(latencies):.2f} s, max {max(latencies):.2f} s")
    print(f"  same command as a plain process     : median {median(baseline):.2f} s")
    print(f"  pod / plain process                 : {median(latencies) / median(baseline):.1f}x")
    print("  node memory, one step pod (RSS, MiB): " + ", ".join(f"{k} {v:.0f}" for k, v in memory.items()))
    print(json.dumps({
        "image_build_s": {i["reference"]: i["seconds"] for i in built}, "cold": args.cold,
        "control_plane_start_s": cluster["start_s"], "node_ready_s": status["ready_s"],
        "image_import_s": round(sum(imported.values()), 2), "node_up_s": round(node_up, 2),
        "pod_succeeded_median_s": round(median(latencies), 3), "pod_succeeded_max_s": round(max(latencies), 3),
        "plain_process_median_s": round(median(baseline), 3),
        "pod_over_process": round(median(latencies) / median(baseline), 2),
        "node_rss_mib_one_pod": {k: round(v, 1) for k, v in memory.items()}, "pods": args.pods}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
