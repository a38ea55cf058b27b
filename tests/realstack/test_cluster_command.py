"""`gpuaas cluster status` and the admin kubeconfig, as a user meets them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from kubernetes import client

from tests.support.real_cluster import RealCluster

EXPECTED = {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kueue",
            "keda-operator", "keda-admission-webhooks", "keda-metrics-apiserver", "gpu-exporter", "prometheus",
            "kuberay-operator", "training-operator"}


def test_status_json_lists_every_component_running_with_its_endpoint(real_cluster: RealCluster) -> None:
    done = subprocess.run([sys.executable, "-m", "gpuaas.cli", "cluster", "status", "--output", "json",
                           "--state-dir", str(real_cluster.state_dir)], capture_output=True, text=True, check=True)
    report = json.loads(done.stdout)
    assert report["phase"] == "ready"
    components = {c["name"]: c for c in report["components"]}
    assert set(components) == EXPECTED
    for name, component in components.items():
        assert component["running"] and component["state"] == "ready", (name, component)
        assert component["endpoint"] and component["pid"] > 0 and component["log"], (name, component)
        assert component["rssBytes"] and component["rssBytes"] > 0, (name, component)


def test_a_user_lists_kueue_objects_with_kubectl_and_the_printed_kubeconfig(real_cluster: RealCluster) -> None:
    done = real_cluster.kubectl("get", "clusterqueues,workloads", "-A")
    assert "error" not in done.stderr.lower(), done.stderr
    nodes = real_cluster.kubectl("get", "nodes", "-o", "json")
    gpus = {n["metadata"]["name"]: n["status"]["allocatable"].get("nvidia.com/gpu")
            for n in json.loads(nodes.stdout)["items"]}
    assert {name: count for name, count in gpus.items() if count} == {
        "gpu-node-1": "4", "gpu-node-2": "4", "gpu-node-3": "4"}


def test_external_metrics_api_is_served_by_keda_through_the_aggregation_layer(real_cluster: RealCluster) -> None:
    done = real_cluster.kubectl("get", "--raw", "/apis/external.metrics.k8s.io/v1beta1")
    assert json.loads(done.stdout)["groupVersion"] == "external.metrics.k8s.io/v1beta1"


def test_prometheus_scrapes_the_exporter_and_kueues_authenticated_metrics(real_cluster: RealCluster) -> None:
    import time
    import urllib.request

    url = real_cluster.endpoint("prometheus")
    deadline = time.monotonic() + 60
    health: dict[str, str] = {}
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{url}/api/v1/targets", timeout=5) as response:
            targets = json.load(response)["data"]["activeTargets"]
        health = {t["labels"]["job"]: f"{t['health']} {t['lastError']}".strip() for t in targets}
        if health and all(h == "up" for h in health.values()):
            break
        time.sleep(1)
    assert health == {"dcgm-exporter": "up", "kueue": "up"}


def test_every_kind_the_product_touches_is_served_by_the_real_apiserver(real_cluster: RealCluster) -> None:
    from steps.gateways import resources

    touched = {value for value in vars(resources).values() if isinstance(value, resources.Resource)}
    missing = []
    for resource in sorted(touched, key=str):
        group_version = f"{resource.group}/{resource.version}" if resource.group else resource.version
        prefix = "/apis" if resource.group else "/api"
        done = real_cluster.kubectl("get", "--raw", f"{prefix}/{group_version}", check=False)
        served = {r["name"]: r for r in json.loads(done.stdout)["resources"]} if done.returncode == 0 else {}
        entry = served.get(resource.plural)
        if entry is None or entry["namespaced"] != resource.namespaced or entry["kind"] != resource.kind:
            missing.append(str(resource))
    assert not missing, f"kinds steps/gateways/resources.py names that the real cluster does not serve: {missing}"


def test_the_apiserver_does_not_fail_to_publish_its_loopback_address_as_endpoints(real_cluster: RealCluster) -> None:
    # The apiserver binds and advertises 127.0.0.1; Endpoints may not hold a loopback address, so with
    # the default `lease` endpoint reconciler it logged "unable to sync kubernetes service" within
    # seconds of its start and every 10 s after, for as long as it ran (and published no endpoints).
    # The absence means something only for a log that covers a running apiserver past the first syncs: this
    # start's part of the log (from its `==== ... starting:` line), which shows the apiserver serving, of a
    # process up for more than 3 sync intervals, whose bootstrap controller made Service default/kubernetes.
    component = next(c for c in real_cluster.cluster.status()["components"] if c["name"] == "kube-apiserver")
    up = int(subprocess.run(["ps", "-o", "etimes=", "-p", str(component["pid"])], capture_output=True, text=True,
                            check=True).stdout.strip())
    if up < 35:
        time.sleep(35 - up)
    client.CoreV1Api(real_cluster.admin).read_namespaced_service("kubernetes", "default")
    text = Path(component["log"]).read_text(errors="replace")
    assert "\n==== " in text, f"expected the start marker `==== ... starting:` in {component['log']}"
    log = text.rpartition("\n==== ")[2]  # this start's part
    assert "starting:" in log.splitlines()[0] and "kube-apiserver" in log.splitlines()[0], log[:300]
    assert "Serving securely on" in log, f"expected this start's log to show the apiserver serving, found:\n{log[:2000]}"
    failures = [line for line in log.splitlines() if "unable to sync kubernetes service" in line
                or "Unable to perform initial Kubernetes service initialization" in line]
    assert not failures, f"{len(failures)} failed syncs of Service default/kubernetes, e.g. {failures[0][:300]}"
