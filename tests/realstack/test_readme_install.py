"""The README's install section, followed as written against `gpuaas cluster up`: Helm, then kustomize.

Each command line of the README's blocks runs in bash from the repository root, with the kubectl and
helm built from the pinned modules first on PATH and the admin kubeconfig as KUBECONFIG: what a user
does after `export KUBECONFIG=...`. A `kubectl create` of an object that already exists (the stack
made Secret gpuaas-alertmanager-webhook, other tests namespace gpuaas) counts as done.

- With Helm (the block after "On a cluster with Argo Workflows"), on the Argo stack, before any other
  test installs the product there (tests/realstack/conftest.py orders it first): `my-values.yaml` is
  this stack's values file, examples/values/kubernetes.yaml with gpuaas.cluster.product.stack_values()
  (its step image, Prometheus, EventBus, pod placement and the sweep every minute; no node pool: no Cluster
  API here). Then the EventSource and Sensors listen; a model server admitted in team-a runs
  `gpuaas-on-admitted` through the chart's objects (the Sensor's run, a step pod on the real node, the
  marker on the Workload); a GPU Job's admission, which the Sensor leaves to the catch-up sweep, is
  recorded by the chart's CronWorkflow without a pod (so the workflow-controller accepted the CronWorkflow
  although Helm creates it before its WorkflowTemplate: the chart's post-install hook, steps/install_hook.py,
  ran and was deleted); `helm upgrade` changes the policy, and `helm uninstall` removes the product (CronWorkflow included)
  and keeps the tenants' namespaces.
- With kustomize (the block after "With kustomize instead"), on the plain control plane: the Helm
  block's namespace and Secret lines, then the overlay the README names and the one its comment offers
  (the namespaces an overlay writes into that the platform brings are made first, as the platform has them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import yaml
from kubernetes import client

from benchmarks.burst import server
from gpuaas.cluster import audit
from gpuaas.cluster.binaries import program
from gpuaas.cluster.install import LISTENING, wait_listening
from gpuaas.cluster.product import stack_values
from gpuaas.manifests.values import coalesce
from tests.realstack.argo_product import (
    PRODUCT_NAMESPACE,
    admitted_workload_of_owner,
    finished_workflow,
    gpu_job,
    reaction_run,
    reaction_runs,
    sensor_run,
    workload_of,
)
from tests.realstack.test_kueue_admission import _condition
from tests.support.helm import pinned_helm
from tests.support.real_cluster import RealCluster, audited_since, eventually
from tests.support.run_attribution import expect_sweep

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
HELM_INTRO = "On a cluster with Argo Workflows"
KUSTOMIZE_INTRO = "With kustomize instead"
TENANT = "team-a"


def readme_block(intro: str) -> list[str]:
    """The command lines of the first ```bash block after `intro` (comments kept: bash ignores them)."""
    text = README.read_text()
    start = text.index(intro)
    block = re.search(r"```bash\n(.*?)```", text[start:], re.DOTALL)
    assert block, f"expected a ```bash block after {intro!r} in README.md"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _env(cluster: RealCluster, home: Path) -> dict[str, str]:
    tools = os.pathsep.join(str(program(component, name).parent) for component, name in
                            (("kubernetes", "kubectl"), ("helm", "helm")))
    return {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}",
            "KUBECONFIG": str(cluster.kubeconfig), "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data")}


def _platform_namespaces(env: dict[str, str], *overlays: str) -> None:
    """The namespaces the overlays write into that the platform brings (OpenShift's openshift-keda and
    openshift-machine-api), made here as the platform would have them: a plain `cluster up` has none, and the
    README's block does not create what is the platform's. Namespaces an overlay creates itself, and gpuaas (the
    block's first line), are left to the block."""
    wanted: set[str] = set()
    for path in overlays:
        built = _run(f"kubectl kustomize {path}", env)
        assert built.returncode == 0, built.stderr
        objects = [o for o in yaml.load_all(built.stdout, Loader=yaml.BaseLoader) if o]  # `matchType: =` is a tag to safe_load
        created = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
        wanted |= {o["metadata"]["namespace"] for o in objects if o["metadata"].get("namespace")} - created
    for namespace in sorted(wanted - {"gpuaas"}):
        made = _run(f"kubectl create namespace {namespace}", env)
        assert made.returncode == 0 or "AlreadyExists" in made.stderr, made.stderr


def _run(line: str, env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", line], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


def _follow(lines: list[str], env: dict[str, str]) -> dict[str, float]:
    """Each line in bash; an AlreadyExists of a `kubectl create` counts as done. Seconds per line."""
    seconds = {}
    for line in lines:
        started = time.monotonic()
        done = _run(line, env)
        seconds[line] = time.monotonic() - started
        exists = "AlreadyExists" in done.stderr or "already exists" in done.stderr
        if done.returncode != 0 and line.lstrip().startswith("kubectl") and " create " in line and exists:
            continue
        assert done.returncode == 0, f"README install step failed ({done.returncode}): {line}\n{done.stderr[-3000:]}"
    return seconds


def stack_values_file(path: Path) -> Path:
    """examples/values/kubernetes.yaml for this stack: its tenants, the stack's settings, no node pool."""
    example = yaml.safe_load((ROOT / "examples" / "values" / "kubernetes.yaml").read_text())
    values = coalesce(coalesce(example, stack_values(create_namespace=False)), {"nodePool": {"enabled": False}})
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def _judge_the_hooks_grants(env: dict[str, str], seen: list[audit.Request]) -> None:
    """Least privilege for the chart's install hook, from kube-apiserver's audit log (what
    test_least_privilege does for manifests/base/rbac.yaml, which does not hold the hook): every grant of
    the hook's Role, as this release installed it (`helm get hooks`), was used by the hook's own requests
    since the install began, each of its resourceNames named, and nothing the hook asked was denied."""
    hooks = _run("helm get hooks gpuaas -n gpuaas", env)
    assert hooks.returncode == 0, hooks.stderr
    granted = audit.grants([o for o in yaml.safe_load_all(hooks.stdout) if o])
    assert granted, f"expected the release's hooks to grant the install hook a Role, found none in:\n{hooks.stdout}"
    users = {g.user for g in granted}
    mine = [r for r in seen if r.user in users]
    denied = sorted({(r.verb, r.rbac_resource, r.namespace, r.name) for r in mine if r.denied})
    assert not denied, f"kube-apiserver denied the install hook: {denied}"
    unused = [g.describe() for g in audit.unused(granted, mine)]
    assert not unused, "grants of the install hook its requests never needed (remove them):\n  " + "\n  ".join(unused)
    names = {g.describe(): audit.unused_names(g, mine) for g in granted}
    assert not any(names.values()), f"resourceNames the install hook never named: {names}"


def _raise_gpu_quota(custom: client.CustomObjectsApi, cluster_queue: str, by: int) -> None:
    """Change the ClusterQueue's nvidia.com/gpu nominalQuota by `by`, as the steps write it."""
    groups = custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues",
                                              cluster_queue)["spec"]["resourceGroups"]
    changed = [r for g in groups for f in g["flavors"] for r in f["resources"] if r["name"] == "nvidia.com/gpu"]
    assert changed, f"ClusterQueue {cluster_queue} has no nvidia.com/gpu quota: {groups}"
    for resource in changed:
        resource["nominalQuota"] = int(resource["nominalQuota"]) + by
    custom.patch_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", cluster_queue,
                                       {"spec": {"resourceGroups": groups}}, field_manager="gpuaas")


def test_the_readme_helm_install_runs_a_reaction_on_the_argo_stack(argo_cluster: RealCluster, tmp_path: Path) -> None:
    pinned_helm()
    assert shutil.which("openssl"), "the README's install block runs `openssl rand`: install openssl"
    lines = readme_block(HELM_INTRO)
    installs = [line for line in lines if line.startswith("helm install ")]
    assert installs and "-f my-values.yaml" in installs[0], f"expected `helm install ... -f my-values.yaml`: {lines}"
    values = stack_values_file(tmp_path / "my-values.yaml")
    env = _env(argo_cluster, tmp_path / "helm")
    log = argo_cluster.cluster.audit_log
    audited = sum(1 for _ in audit.requests(log))
    started = time.monotonic()
    seconds = _follow([line.replace("my-values.yaml", str(values)) for line in lines], env)

    # The chart's objects, as helm applied them: listening, and a reaction through them.
    core, custom = client.CoreV1Api(argo_cluster.admin), client.CustomObjectsApi(argo_cluster.admin)
    template = custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE,
                                                   "workflowtemplates", "gpuaas-on-admitted")
    assert template["metadata"]["annotations"]["meta.helm.sh/release-name"] == "gpuaas"
    wait_listening(argo_cluster.admin, LISTENING)
    listening = time.monotonic() - started
    batch, apps = client.BatchV1Api(argo_cluster.admin), client.AppsV1Api(argo_cluster.admin)
    job = batch.create_namespaced_job(TENANT, gpu_job(TENANT, generate_name="chart-"))
    served = f"chart-serve-{int(time.time()) % 100000}"
    apps.create_namespaced_stateful_set(TENANT, server(TENANT, served))
    try:
        # A model server's admission: the event path (the Sensor's run, a step pod on the real node, the marker).
        admitted = eventually(lambda: admitted_workload_of_owner(custom, TENANT, served), timeout_s=90,
                              what=f"StatefulSet {served} admitted")
        workload = admitted["metadata"]["name"]
        run = sensor_run(custom, core, TENANT, workload)
        finished = finished_workflow(custom, run["metadata"]["name"])
        assert finished["status"]["phase"] == "Succeeded", finished["status"].get("message")
        step = next(n for n in finished["status"]["nodes"].values()
                    if n.get("templateName") == "on-admitted" and n["type"] == "Pod")
        outputs = {p["name"]: p.get("value") for p in step["outputs"]["parameters"]}
        assert outputs["outcome"] == "applied" and workload in outputs["record"], outputs
        assert step["hostNodeName"] == "gpuaas-node"  # the real node: KWOK would "succeed" it without running it
        marker = json.loads(custom.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", TENANT, "workloads",
                                                                 workload)["metadata"]["annotations"][
            "gpuaas.io/handled-on-admitted"])
        assert marker["run"] == run["metadata"]["uid"] and marker["via"] == "event", marker
        reacted = time.monotonic() - started

        # A Job's admission: the Sensor starts nothing; the chart's CronWorkflow runs the sweep, which records it
        # without a pod. Within minutes only if the workflow-controller accepted the CronWorkflow, which Helm
        # creates before its WorkflowTemplate: the chart's hook had it validated again, and is gone.
        cron = custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "cronworkflows",
                                                   "gpuaas-sweep")
        assert "gpuaas.io/template-resource-version" in cron["metadata"].get("annotations", {}), cron["metadata"]
        assert not batch.list_namespaced_job(PRODUCT_NAMESPACE, label_selector="app.kubernetes.io/component="
                                             "install-hook").items, "the hook's Job was not deleted after it succeeded"
        _judge_the_hooks_grants(env, audited_since(log, audited))
        job_workload = eventually(lambda: (w := workload_of(custom, TENANT, job.metadata.uid))
                                  and _condition(w, "Admitted") == "True" and w["metadata"]["name"], timeout_s=90,
                                  what=f"the Workload of Job {job.metadata.name} admitted")
        recorded = eventually(lambda: reaction_run(custom, "on-admitted", TENANT, job_workload), timeout_s=240,
                              what=f"the sweep's gpuaas-on-admitted for {job_workload} (every minute here)")
        recorded = finished_workflow(custom, recorded["metadata"]["name"])
        assert recorded["status"]["phase"] == "Succeeded", recorded["status"].get("message")
        assert recorded["metadata"]["labels"].get("gpuaas.io/recorded-by") == "sweep", recorded["metadata"]["labels"]
        assert not expect_sweep(recorded, "admitted"), expect_sweep(recorded, "admitted")
        assert not [n for n in recorded["status"]["nodes"].values() if n["type"] == "Pod"], recorded["status"]["nodes"]
        assert len(reaction_runs(custom, "on-admitted", TENANT, job_workload)) == 1
        swept = time.monotonic() - started

        # The product owns the quota after install: a loan or capacity tracking rewrites team-a's resource
        # groups as the steps do (a merge patch; field manager "gpuaas", their User-Agent). CI once saw the
        # product's quota here by chance: with server-side apply, the upgrade then failed on a conflict.
        _raise_gpu_quota(custom, TENANT, by=1)
        # An admin changes a value: helm upgrade rewrites the policy the steps read, and leaves the quota to the
        # product (the values' quota did not change). Judged by who wrote the field, not by its value: the
        # product's capacity tracking (Sensor gpuaas-provision-quota, on Node events) may set it again meanwhile.
        upgrade = _run(f"helm upgrade gpuaas charts/gpuaas -n gpuaas -f {values} --set policy.idle.mode=dry-run", env)
        assert upgrade.returncode == 0, upgrade.stderr
        policy = core.read_namespaced_config_map("gpuaas-policy", PRODUCT_NAMESPACE).data["policy.yaml"]
        assert yaml.safe_load(policy) == {"idle": {"mode": "dry-run"}}, policy
        live = custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", TENANT)
        writers = {entry["manager"] for entry in live["metadata"]["managedFields"]
                   if "f:resourceGroups" in json.dumps(entry.get("fieldsV1") or {})}
        assert "gpuaas" in writers and "helm" not in writers, (writers, live["spec"]["resourceGroups"])
    finally:
        batch.delete_namespaced_job(job.metadata.name, TENANT, propagation_policy="Background")
        apps.delete_namespaced_stateful_set(served, TENANT)

    # Uninstall removes the product and keeps the tenants' namespaces (they hold the tenants' work).
    removed = _run("helm uninstall gpuaas -n gpuaas --wait --timeout 5m", env)
    assert removed.returncode == 0, removed.stderr
    for plural in ("workflowtemplates", "cronworkflows"):
        left = custom.list_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, plural)
        assert left["items"] == [], (plural, [i["metadata"]["name"] for i in left["items"]])
    assert core.read_namespace(TENANT).metadata.annotations["helm.sh/resource-policy"] == "keep"
    # The next tests install the product with kubectl: none of this release's event pods may be left to
    # answer for theirs (a terminating pod still logs "listening").
    eventually(lambda: not core.list_namespaced_pod(PRODUCT_NAMESPACE, label_selector="eventsource-name").items
               and not core.list_namespaced_pod(PRODUCT_NAMESPACE, label_selector="sensor-name").items,
               timeout_s=180, what="the release's EventSource and Sensor pods gone")
    print(json.dumps({"helm_install_seconds": round(sum(s for line, s in seconds.items() if "helm" in line), 1),
                      "install_to_listening_seconds": round(listening, 1),
                      "install_to_reaction_succeeded_seconds": round(reacted, 1),
                      "install_to_sweep_record_seconds": round(swept, 1),
                      "whole_test_seconds": round(time.monotonic() - started, 1)}))


def test_the_readme_kustomize_install_works_against_gpuaas_cluster_up(real_cluster: RealCluster,
                                                                      tmp_path: Path) -> None:
    assert shutil.which("openssl"), "the README's install block runs `openssl rand`: install openssl"
    prepare = [line for line in readme_block(HELM_INTRO) if line.startswith("kubectl ")]
    applies = [line for line in readme_block(KUSTOMIZE_INTRO) if "kubectl apply -k manifests/overlays/" in line]
    assert prepare and applies, "expected the namespace and Secret lines, and `kubectl apply -k manifests/overlays/...`"
    alternative = re.search(r"#\s*or:\s*(manifests/overlays/\S+)", applies[0])
    assert alternative, f"expected the README to name the other overlay in a comment: {applies[0]}"
    overlay = re.search(r"manifests/overlays/\S+", applies[0].split("#")[0])
    assert overlay
    env = _env(real_cluster, tmp_path / "helm")
    _platform_namespaces(env, overlay.group(0), alternative.group(1))
    _follow([*prepare, *applies, applies[0].split("#")[0].replace(overlay.group(0), alternative.group(1))], env)

    listed = _run("kubectl get clusterqueues,workloads -A", env)
    assert listed.returncode == 0 and "error" not in listed.stderr.lower(), listed.stderr
    product = _run("kubectl -n gpuaas get sensors,eventsources,workflowtemplates,serviceaccounts -o name", env)
    assert product.returncode == 0, product.stderr
    names = set(product.stdout.split())
    for expected in ("sensor.argoproj.io/gpuaas-on-admitted", "eventsource.argoproj.io/gpuaas-workloads",
                     "workflowtemplate.argoproj.io/gpuaas-release-workers", "serviceaccount/gpuaas-steps"):
        assert expected in names, f"expected {expected} after the README's install; found {sorted(names)}"
