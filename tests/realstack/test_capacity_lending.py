"""Capacity tracking (provision-quota mode=capacity) and a ClusterQueue's lendingLimit, on real Kueue.

Kueue's ClusterQueue webhook refuses a lendingLimit above the nominalQuota
(pkg/webhooks/clusterqueue_webhook.go `validateLendingLimit`), on update too. When the capacity
split lowers a tenant's nominalQuota below the lendingLimit it already has, the step lowers the
limit with the quota in the same patch (a limit at the quota lends the same GPUs: all of them) and
remembers the limit the queue had, so it comes back once the quota grows past it again.

The flavor here selects one KWOK node (4 GPUs) so the capacity does not depend on other tests;
the policy is read from this test's own namespace (GPUAAS_NAMESPACE). The step runs as a process
(`python -m steps provision-quota PARAMS`), as in its pod, against the real apiserver.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from tests.support.real_cluster import RealCluster

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "lending-check"
FLAVOR = "lending-check"
COHORT = "lending-check"
GPU = "nvidia.com/gpu"
JSON = dict[str, Any]


def _cluster_queue(name: str, nominal: int, lending_limit: int | None) -> JSON:
    gpu: JSON = {"name": GPU, "nominalQuota": nominal}
    if lending_limit is not None:
        gpu["lendingLimit"] = lending_limit
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"cohortName": COHORT, "namespaceSelector": {},
                     "resourceGroups": [{"coveredResources": [GPU], "flavors": [{"name": FLAVOR, "resources": [gpu]}]}]}}


def _policy(weights: dict[str, int]) -> JSON:
    """ConfigMap gpuaas-policy in the test's namespace with per-tenant quota weights."""
    document = {"quota": {"cohort": COHORT}, "tenants": {name: {"quota": {"weight": w}} for name, w in weights.items()}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gpuaas-policy", "namespace": NAMESPACE},
            "data": {"policy.yaml": yaml.safe_dump(document)}}


def _run_capacity(real_cluster: RealCluster, tmp_path: Path, name: str) -> tuple[str, JSON]:
    params = tmp_path / f"{name}.json"
    params.write_text(json.dumps([{"name": "mode", "value": "capacity"}, {"name": "flavor", "value": FLAVOR},
                                  {"name": "cohort", "value": COHORT}, {"name": "dry-run", "value": "false"}]))
    outputs = tmp_path / f"outputs-{name}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUAAS_")}
    env.update(KUBECONFIG=str(real_cluster.kubeconfig), GPUAAS_NAMESPACE=NAMESPACE, GPUAAS_OUTPUTS_DIR=str(outputs))
    done = subprocess.run([sys.executable, "-m", "steps", "provision-quota", str(params)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    outcome = (outputs / "outcome").read_text().strip() if (outputs / "outcome").exists() else f"exit {done.returncode}"
    record = json.loads((outputs / "record").read_text()) if (outputs / "record").exists() else {}
    return outcome, record


def _gpu(real_cluster: RealCluster, name: str) -> JSON:
    cq = client.CustomObjectsApi(real_cluster.admin).get_cluster_custom_object(
        "kueue.x-k8s.io", "v1beta2", "clusterqueues", name)
    return cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]


def test_capacity_mode_lowers_a_lending_limit_with_the_quota_and_restores_it(real_cluster: RealCluster,
                                                                            tmp_path: Path) -> None:
    real_cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    objects = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR},
         "spec": {"nodeLabels": {"kubernetes.io/hostname": "gpu-node-1"}}},
        _cluster_queue("lend-a", 4, 3), _cluster_queue("lend-b", 0, None), _policy({"lend-a": 1, "lend-b": 1}),
    ]
    real_cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=gpuaas-tests", "-f", "-",
                         input_text=yaml.safe_dump_all(objects))

    # 4 GPUs split 1:1 -> lend-a 2, below its lendingLimit 3: the limit comes down with the quota.
    outcome, record = _run_capacity(real_cluster, tmp_path, "split-even")
    assert outcome == "applied", record.get("data", {}).get("errors")
    assert _gpu(real_cluster, "lend-a") == {"name": GPU, "nominalQuota": 2, "lendingLimit": 2}
    assert _gpu(real_cluster, "lend-b")["nominalQuota"] == 2
    reasons = " ".join(a["reason"] for a in record["data"]["plan"]["actions"])
    assert "lendingLimit 3 -> 2" in reasons, reasons

    # Nothing changed: nothing to write.
    outcome, _ = _run_capacity(real_cluster, tmp_path, "again")
    assert outcome == "no-op"

    # 4 GPUs split 3:1 -> lend-a 3: the lendingLimit it had (3) is back.
    real_cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=gpuaas-tests", "-f", "-",
                         input_text=yaml.safe_dump(_policy({"lend-a": 3, "lend-b": 1})))
    outcome, record = _run_capacity(real_cluster, tmp_path, "split-3-1")
    assert outcome == "applied", record.get("data", {}).get("errors")
    assert _gpu(real_cluster, "lend-a") == {"name": GPU, "nominalQuota": 3, "lendingLimit": 3}
    assert _gpu(real_cluster, "lend-b")["nominalQuota"] == 1
