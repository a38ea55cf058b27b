"""The product on the monitoring platforms users run, judged by the real Prometheus Operator (issue 17).

A cluster of its own per profile (`gpuaas cluster up --monitoring PROFILE`, no real node: nothing here needs
Argo, so it does not wait for the machine's node lock): the Prometheus Operator v0.93.1 reconciles the
platform's `Prometheus` and `Alertmanager` resources (gpuaas.cluster.profiles, transcribed from the
platform's source), and Debian's Prometheus and Alertmanager run on the configuration it generates
(gpuaas.cluster.monitoring_pods). Then the platform's install block of docs/install.md runs as written
(only `YOUR-ALERT-WEBHOOK` becomes this test's receiver), and:

1. the operator selects the product's PrometheusRule (and not the same rule without the platform's label),
   and Prometheus evaluates its groups;
2. GPUWorkloadIdle fires for an idle GPU pod, with `namespace: gpuaas` and the workload's namespace in
   `workload_namespace`, and the Alertmanager, configured by the operator from the product's
   AlertmanagerConfig (route with the `OnNamespace` matcher, bearer token from the Secret), POSTs it to the
   webhook EventSource's URL with the token (the stack's webhook proxy logs each POST; no EventSource runs
   here, so it answers 503: the release itself is test_argo_idle's);
3. a GPU health alert (GPUXidError) reaches the admins' receiver named by Secret gpuaas-admin-alerts;
4. the ScaledObject on-admitted makes for an inference server, with the Prometheus address and
   authentication of the overlay's ConfigMap gpuaas-prometheus, is served by KEDA: its external metric
   answers (KEDA's scaler reached Prometheus at the URL the overlay names).

The PrometheusRule is applied again after the install with the stack's idle window (30 s, `for` 5 s;
the rendered one uses the policy's 30 min): its labels, namespace and every other field stay as the
overlay rendered them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from gpuaas.cluster import profiles, prometheus_operator
from gpuaas.cluster.binaries import build_all, program
from gpuaas.cluster.gpu_exporter import UTILIZATION_ANNOTATION, XID_ANNOTATION
from gpuaas.cluster.stack import Cluster, ClusterError
from gpuaas.manifests import observability as obs
from tests.realstack.test_kueue_admission import _condition
from tests.support.real_cluster import RealCluster, eventually
from tests.support.real_steps import RealSteps

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "docs" / "install.md"
REUSE_ENV = "GPUAAS_REAL_KPS_CLUSTER"
TENANT = "team-a"
SERVING = "team-b"
"""The example tenant whose policy enforces (team-a's is dry-run: on-admitted would only record its ScaledObject)."""
SUFFIX = uuid.uuid4().hex[:5]
"""The workloads' names carry it: a cluster reused across runs (REUSE_ENV) keeps an earlier run's."""
XID_NODE = f"gpu-node-{1 + int(SUFFIX, 16) % 3}"
XID = str((48, 63, 64, 74, 79, 92, 94, 95)[int(SUFFIX, 16) % 8])
"""A GPU-fault XID (not an application one): GPUXidError pages once per NEW code (the same code within 15 min
does not page again), so a run on a reused cluster picks its own."""
"""The node whose GPUs report an XID: Alertmanager groups health alerts by node, and a group an earlier run
(REUSE_ENV) notified waits its group_interval (5 min) before the next notification."""
WINDOW, FOR = "30s", "5s"
KEEP_RUNNING = {"pod-complete.stage.kwok.x-k8s.io/delay": "900s", "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "900s"}


def install_block(platform: str) -> list[str]:
    """The command lines of docs/install.md's block for `platform` (after `<!-- install:PLATFORM -->`)."""
    text = INSTALL.read_text()
    marker = f"<!-- install:{platform} -->"
    assert marker in text, f"expected {marker} before the platform's bash block in docs/install.md"
    block = re.search(r"```bash\n(.*?)```", text[text.index(marker):], re.DOTALL)
    assert block, f"expected a ```bash block after {marker}"
    lines = [line for line in block.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert len(lines) <= 6, f"the {platform} install is {len(lines)} commands; the docs promise at most six"
    return lines


class Receiver:
    """The admins' alert webhook: records every POSTed Alertmanager body."""

    def __init__(self) -> None:
        received: list[dict[str, Any]] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/gpu-admins"

    def alerts(self) -> list[dict[str, Any]]:
        return [alert for body in self.received for alert in body.get("alerts") or []]


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def _query(prometheus: str, promql: str) -> list[dict[str, Any]]:
    return _get(f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))["data"]["result"]


def _start(monitoring: str) -> Iterator[RealCluster]:
    reused = os.environ.get(REUSE_ENV)
    if reused:
        cluster = Cluster(Path(reused))
        status = cluster.status()
        if status["phase"] != "ready" or cluster.load().monitoring != monitoring:  # type: ignore[union-attr]
            pytest.fail(f"expected the cluster in ${REUSE_ENV}={reused} ready with --monitoring {monitoring}, found "
                        f"{status['phase']}; start it with `gpuaas cluster up --monitoring {monitoring} "
                        f"--state-dir {reused}` or unset {REUSE_ENV}")
        yield RealCluster(cluster, Path(status["kubeconfig"]))
        return
    build_all(progress=print)
    state_dir = Path(tempfile.mkdtemp(prefix=f"gpuaas-{monitoring}-", dir="/var/tmp"))
    cluster = Cluster(state_dir, progress=print)
    started = time.monotonic()
    try:
        state = cluster.up(timeout_s=900, monitoring=monitoring)
    except ClusterError as error:
        shutil.rmtree(state_dir, ignore_errors=True)
        pytest.fail(f"the real stack with --monitoring {monitoring} did not start: {error}")
    print(f"cluster --monitoring {monitoring} ready in {time.monotonic() - started:.0f}s")
    try:
        yield RealCluster(cluster, Path(state.kubeconfig))
    finally:
        cluster.down(quiet=True)
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def receiver() -> Receiver:
    return Receiver()


def _install(cluster: RealCluster, platform: str, receiver: Receiver) -> None:
    """docs/install.md's block for `platform`, as written (the receiver's URL for YOUR-ALERT-WEBHOOK)."""
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig),
           "PATH": f"{program('kubernetes', 'kubectl').parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    # a reused cluster (REUSE_ENV) holds the Secret with an earlier run's receiver: this run's is created
    cluster.kubectl("-n", "gpuaas", "delete", "secret", obs.ADMINS_SECRET, "--ignore-not-found", check=False)
    for line in install_block(platform):
        line = line.replace("https://YOUR-ALERT-WEBHOOK", receiver.url)
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", line], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=300, check=False)
        exists = "AlreadyExists" in done.stderr or "already exists" in done.stderr
        assert done.returncode == 0 or (" create " in line and exists), \
            f"install step failed ({done.returncode}): {line}\n{done.stderr[-2000:]}"


@pytest.fixture
def kps(receiver: Receiver) -> Iterator[RealCluster]:
    """Function scope: one profile's cluster up at a time (each test is its profile's whole scenario)."""
    for cluster in _start("kube-prometheus-stack"):
        _install(cluster, "kube-prometheus-stack", receiver)
        yield cluster


def _short_window_rule(cluster: RealCluster) -> dict[str, Any]:
    """The PrometheusRule as the install left it, with the stack's idle window (timing only)."""
    rule = json.loads(cluster.kubectl("get", "prometheusrule", "gpuaas-gpu", "-n", "gpuaas", "-o", "json").stdout)
    return {"apiVersion": rule["apiVersion"], "kind": rule["kind"],
            "metadata": {"name": rule["metadata"]["name"], "namespace": rule["metadata"]["namespace"],
                         "labels": rule["metadata"]["labels"]},
            "spec": obs.rule_groups(WINDOW, FOR, product_namespace="gpuaas")}


def _rule_groups(prometheus: str) -> set[str]:
    return {g["name"] for g in _get(f"{prometheus}/api/v1/rules")["data"]["groups"]}


def test_kube_prometheus_stack_loads_the_rules_routes_the_alerts_and_serves_keda(
        kps: RealCluster, receiver: Receiver, tmp_path: Path) -> None:
    core, batch, apps = client.CoreV1Api(kps.admin), client.BatchV1Api(kps.admin), client.AppsV1Api(kps.admin)
    custom = client.CustomObjectsApi(kps.admin)
    profile = profiles.KUBE_PROMETHEUS_STACK
    (router,) = profile.routers
    prometheus = kps.endpoint("prometheus")

    # 1. The operator's rule selection: the product's rule (labelled release: kube-prometheus-stack by the
    # overlay) loads; the same rule without the label never does.
    rule = _short_window_rule(kps)
    assert rule["metadata"]["labels"].get("release") == profiles.KPS_RELEASE, rule["metadata"]["labels"]
    unlabelled = {**rule, "metadata": {"name": "gpuaas-gpu-unlabelled", "namespace": "gpuaas",
                                        "labels": {"app.kubernetes.io/part-of": "gpuaas-tests"}},
                  "spec": {"groups": [{**g, "name": f"unselected-{g['name']}"} for g in rule["spec"]["groups"]]}}
    kps.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=gpuaas-tests", "-f", "-",
                input_text=json.dumps({"apiVersion": "v1", "kind": "List", "items": [unlabelled, rule]}))
    def reloaded() -> set[str] | None:
        groups = _get(f"{prometheus}/api/v1/rules")["data"]["groups"]
        idle = [r for g in groups for r in g["rules"] if r["name"] == obs.ALERT_NAME and f"[{WINDOW}]" in r["query"]]
        return {g["name"] for g in groups} if idle else None
    groups = eventually(reloaded, timeout_s=120, what="the operator's rule ConfigMap with the stack's window loaded "
                                                      "into Prometheus (the operator's config-reloader)")
    assert {obs.RULE_GROUP, "gpuaas-gpu-health"} <= groups and not {g for g in groups if g.startswith("unselected-")}, \
        groups

    # The operator's AlertmanagerConfig conversion: the route in the generated config carries namespace="gpuaas"
    # (OnNamespace: the chart sets no strategy) and the webhook's bearer token from the Secret.
    token = core.read_namespaced_secret(obs.WEBHOOK_SECRET, "gpuaas").data[obs.WEBHOOK_SECRET_KEY]
    generated = yaml.safe_load(prometheus_operator.generated_config(
        kps.cluster, profiles.KPS_NAMESPACE, f"alertmanager-{router.name}-generated", "alertmanager.yaml.gz"))
    ours = [r for r in generated["route"]["routes"] if str(r.get("receiver", "")).startswith("gpuaas/gpuaas-idle/")]
    assert ours and 'namespace="gpuaas"' in ours[0]["matchers"], generated["route"]
    webhook = next(r for r in generated["receivers"] if r["name"] == f"gpuaas/gpuaas-idle/{obs.RECEIVER}")
    import base64
    assert webhook["webhook_configs"][0]["http_config"]["authorization"]["credentials"] == \
        base64.b64decode(token).decode(), "the operator did not inline the webhook token from the Secret"
    assert webhook["webhook_configs"][0]["url"] == prometheus_operator.webhook_url(), webhook

    # 2. An idle GPU pod of the tenant: the alert fires with the product's namespace, and reaches the webhook.
    job = batch.create_namespaced_job(TENANT, _gpu_job(f"kps-idle-{SUFFIX}", {UTILIZATION_ANNOTATION: "0", **KEEP_RUNNING}))
    eventually(lambda: [p for p in core.list_namespaced_pod(TENANT, label_selector=f"batch.kubernetes.io/job-name="
                                                             f"{job.metadata.name}").items if p.status.phase == "Running"],
               timeout_s=120, what="the idle Job's pod Running (Kueue admitted it)")
    firing = eventually(lambda: [a for a in _get(f"{prometheus}/api/v1/alerts")["data"]["alerts"]
                                 if a["labels"].get("alertname") == obs.ALERT_NAME and a["state"] == "firing"
                                 and a["labels"].get(obs.WORKLOAD_NAMESPACE_LABEL) == TENANT],
                        timeout_s=180, what="GPUWorkloadIdle firing for the tenant's pod")
    assert firing[0]["labels"]["namespace"] == "gpuaas", firing[0]["labels"]
    components = {c["name"]: c for c in kps.cluster.status()["components"]}
    proxy_log = Path(components["webhook-proxy"]["log"])
    try:
        eventually(lambda: [line for line in proxy_log.read_text(errors="replace").splitlines()
                            if line.startswith(f"POST {obs.WEBHOOK_PATH}") and "(bearer)" in line],
                   timeout_s=300, what="Alertmanager POSTing GPUWorkloadIdle to the webhook with the token")
    except AssertionError as error:
        alertmanager = kps.endpoint("alertmanager")
        pod_logs = sorted(Path(kps.cluster.state_dir / "pods").glob("alertmanager-*/alertmanager.log"))
        raise AssertionError(f"{error}\nAlertmanager alerts: {_get(f'{alertmanager}/api/v2/alerts')}\n"
                             f"Alertmanager log: {pod_logs[0].read_text()[-3000:] if pod_logs else 'none'}\n"
                             f"proxy log: {proxy_log.read_text()[-1500:]}") from None

    # 3. A GPU health alert reaches the admins' receiver (the URL of Secret gpuaas-admin-alerts).
    core.patch_node(XID_NODE, {"metadata": {"annotations": {XID_ANNOTATION: XID}}})
    try:
        got = eventually(lambda: [a for a in receiver.alerts() if a["labels"].get("alertname") == "GPUXidError"],
                         timeout_s=180, what="GPUXidError at the admins' receiver")
        assert got[0]["labels"]["node"] == XID_NODE and got[0]["labels"]["namespace"] == "gpuaas", got[0]
    finally:
        core.patch_node(XID_NODE, {"metadata": {"annotations": {XID_ANNOTATION: None}}})

    # 4. An inference server admitted: on-admitted (as gpuaas-steps, with the overlay's gpuaas-prometheus
    # environment, what the pod's envFrom gives it) makes its ScaledObject; KEDA's scaler answers through
    # the URL it names.
    settings = core.read_namespaced_config_map("gpuaas-prometheus", "gpuaas").data
    apps.create_namespaced_deployment(SERVING, _server(f"kps-server-{SUFFIX}"))
    workload = eventually(lambda: _admitted_workload(custom, f"kps-server-{SUFFIX}"), timeout_s=120,
                          what="the server's pod Workload admitted")
    steps = RealSteps(kps, tmp_path / "steps", environ=settings)
    run = steps.run("on-admitted", namespace=SERVING, workload=workload)
    assert run.outcome == "applied", run.describe()
    scaled = eventually(lambda: [s for s in custom.list_namespaced_custom_object(
        "keda.sh", "v1alpha1", SERVING, "scaledobjects")["items"] if s["spec"]["scaleTargetRef"]["name"] == f"kps-server-{SUFFIX}"],
        timeout_s=60, what="the server's ScaledObject")[0]
    assert scaled["spec"]["triggers"][0]["metadata"]["serverAddress"] == settings["GPUAAS_PROMETHEUS_URL"]
    _keda_metric_answers(kps, custom, scaled)


def _gpu_job(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": TENANT, "labels": {"kueue.x-k8s.io/queue-name": TENANT}},
            "spec": {"parallelism": 1, "completions": 1, "suspend": True, "template": {
                "metadata": {"annotations": annotations},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "registry.invalid/train:1", "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"}}}]}}}}


def _server(name: str, utilization: str = "50", namespace: str = SERVING) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": {"kueue.x-k8s.io/queue-name": namespace}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}, "annotations": {UTILIZATION_ANNOTATION: utilization}},
                "spec": {"containers": [{"name": "server", "image": "registry.invalid/llm-server:1",
                                         "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                                                       "limits": {"nvidia.com/gpu": "1"}}}]}}}}


def _admitted_workload(custom: client.CustomObjectsApi, app: str, namespace: str = SERVING) -> str | None:
    for workload in custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "workloads")["items"]:
        owners = workload["metadata"].get("ownerReferences") or []
        if any(o["kind"] == "Pod" and o["name"].startswith(f"{app}-") for o in owners) and \
                _condition(workload, "Admitted") == "True":
            return workload["metadata"]["name"]
    return None


def _keda_metric_answers(cluster: RealCluster, custom: client.CustomObjectsApi, scaled: dict[str, Any]) -> None:
    """KEDA's scaler reaches Prometheus with the product's trigger: same serverAddress and authentication, with
    `vector(1)` as the query. (The product's own query answers nothing until the server's pods have reported
    for the tenant's whole window: on-admitted's activity_query; KEDA then keeps the replicas.) Its external
    metric answering proves the URL resolves, the token is accepted and the CA trusted."""
    trigger = scaled["spec"]["triggers"][0]
    probe = f"keda-probe-{SUFFIX}"
    client.AppsV1Api(cluster.admin).create_namespaced_deployment(SERVING, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": probe},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": probe}}, "template": {
            "metadata": {"labels": {"app": probe}},
            "spec": {"containers": [{"name": "main", "image": "registry.invalid/probe:1",
                                     "resources": {"requests": {"cpu": "10m"}}}]}}}})
    custom.create_namespaced_custom_object("keda.sh", "v1alpha1", SERVING, "scaledobjects", {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": probe},
        "spec": {"scaleTargetRef": {"name": probe}, "minReplicaCount": 1, "maxReplicaCount": 1, "pollingInterval": 5,
                 "triggers": [{**trigger, "name": "probe", "metadata": {**trigger["metadata"], "query": "vector(1)"}}]}})
    metric = eventually(lambda: ((custom.get_namespaced_custom_object(
        "keda.sh", "v1alpha1", SERVING, "scaledobjects", probe).get("status") or {}).get("externalMetricNames")
        or [None])[0], timeout_s=60, what="KEDA naming the probe's external metric")
    selector = urllib.parse.quote(f"scaledobject.keda.sh/name={probe}")

    def answer() -> str | None:
        done = cluster.kubectl("get", "--raw", f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{SERVING}/{metric}"
                               f"?labelSelector={selector}", check=False, timeout=60)
        return done.stdout if done.returncode == 0 and '"value"' in done.stdout else None
    eventually(answer, timeout_s=120, what=f"KEDA's external metric {metric} answered through the product's "
                                           f"serverAddress {trigger['metadata']['serverAddress']}")


# -- OpenShift ----------------------------------------------------------------------------------------------

@pytest.fixture
def openshift(receiver: Receiver) -> Iterator[RealCluster]:
    for cluster in _start("openshift"):
        _install(cluster, "openshift", receiver)
        yield cluster


def _rule_file(cluster: RealCluster, namespace: str, configmap: str, rule_namespace: str) -> str:
    """The rule file the operator generated for PrometheusRules of `rule_namespace` into `configmap`."""
    found = json.loads(cluster.kubectl("get", "configmap", configmap, "-n", namespace, "-o", "json").stdout)
    texts = [v for k, v in (found.get("data") or {}).items() if k.startswith(f"{rule_namespace}-")]
    assert texts, f"no rule file of namespace {rule_namespace} in {namespace}/{configmap}: {sorted(found.get('data', {}))}"
    return texts[0]


def _query_as_a_pod(cluster: RealCluster, tmp: Path, url: str, token: str, ca: Path, promql: str) -> str:
    """The steps' MetricsGateway query at the overlay's URL, as a pod makes it: the Service name resolved (an
    /etc/hosts of its own: the querier's address), the token from its file, the service CA from its file."""
    from gpuaas.cluster.monitoring_pods import hosts_file, with_hosts
    from gpuaas.cluster.prometheus_operator import cluster_names

    token_file = tmp / f"token-{len(token)}"
    token_file.write_text(token)
    hosts = hosts_file(tmp / "etc-hosts", cluster_names(profiles.OPENSHIFT, cluster.state_dir))
    script = ("import sys\nfrom steps.gateways.metrics import MetricsGateway\n"
              "try:\n    found = MetricsGateway(sys.argv[1], token_file=sys.argv[2], ca_file=sys.argv[3], retries=0)"
              ".query(sys.argv[4])\n    print(f'GPU series: {len(found)}')\n"
              "except Exception as error:\n    print(f'{type(error).__name__}: {error}')\n")
    done = subprocess.run(with_hosts([sys.executable, "-c", script, url, str(token_file) if token else "", str(ca),
                                      promql], hosts), cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=False)
    return done.stdout + done.stderr


def _token(cluster: RealCluster, namespace: str, account: str) -> str:
    return cluster.kubectl("create", "token", account, "-n", namespace, "--duration=1h").stdout.strip()


def test_openshift_user_workload_monitoring_evaluates_routes_and_serves_the_querier(
        openshift: RealCluster, receiver: Receiver, tmp_path: Path) -> None:
    from gpuaas.cluster import openshift_platform as osp

    core, apps = client.CoreV1Api(openshift.admin), client.AppsV1Api(openshift.admin)
    custom, batch = client.CustomObjectsApi(openshift.admin), client.BatchV1Api(openshift.admin)
    status = openshift.cluster.status()
    ruler = status["endpoints"][f"thanos-ruler-user-workload:{osp.UWM}/user-workload"]
    proxy_log = Path(next(c["log"] for c in status["components"] if c["name"] == "webhook-proxy"))
    proxy_log_start = proxy_log.stat().st_size if proxy_log.exists() else 0
    """Where this test's POSTs begin: a reused cluster ($GPUAAS_REAL_KPS_CLUSTER) holds an earlier run's."""

    # cluster-monitoring-operator's translation of the install's ConfigMap (its stand-in): gpuaas exempt from the
    # enforcement of Thanos Ruler, the user-workload Alertmanager reading AlertmanagerConfigs.
    eventually(lambda: [e["namespace"] for e in (custom.get_namespaced_custom_object(
        "monitoring.coreos.com", "v1", osp.UWM, "thanosrulers", "user-workload")["spec"].get("excludedFromEnforcement")
        or [])] == ["gpuaas"], timeout_s=60, what="Thanos Ruler's excludedFromEnforcement = [gpuaas]")

    # The real operator's enforcement: the product's rule in gpuaas is left as written; the same rule in a tenant's
    # namespace gets namespace="team-b" forced into every selector (the rule would see only team-b's series).
    rule = _short_window_rule(openshift)
    probe = {**rule, "metadata": {"name": "gpuaas-gpu-enforced", "namespace": "team-b",
                                  "labels": {"app.kubernetes.io/part-of": "gpuaas-tests"}},
             "spec": {"groups": [{**g, "name": f"enforced-{g['name']}"} for g in rule["spec"]["groups"]]}}
    openshift.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=gpuaas-tests", "-f", "-",
                      input_text=json.dumps({"apiVersion": "v1", "kind": "List", "items": [rule, probe]}))
    configmap = "thanos-ruler-user-workload-rulefiles-0"
    ours = eventually(lambda: (f := _rule_file(openshift, osp.UWM, configmap, "gpuaas")) and f"[{WINDOW}]" in f and f,
                      timeout_s=120, what="the operator's Thanos Ruler rule file for gpuaas with the stack's window")
    enforced = eventually(lambda: _rule_file(openshift, osp.UWM, configmap, "team-b"), timeout_s=60,
                          what="the operator's Thanos Ruler rule file for team-b")
    assert 'namespace="team-b"' in enforced and 'namespace="gpuaas"' not in ours.split("labels:")[0], ours[:800]
    eventually(lambda: (g := _rule_groups(ruler)) >= {obs.RULE_GROUP, "gpuaas-gpu-health",
                                                       f"enforced-{obs.RULE_GROUP}"} and g,
               timeout_s=120, what="Thanos Ruler (stand-in) evaluating the product's groups and the probe's")

    # alertmanager-main (the operator's config from CMO's Secret) reads no AlertmanagerConfig; the user-workload
    # Alertmanager does, with the OnNamespace matcher.
    main = yaml.safe_load(prometheus_operator.generated_config(openshift.cluster, osp.MONITORING,
                                                                "alertmanager-main-generated", "alertmanager.yaml.gz"))
    assert not [r for r in main["route"].get("routes") or [] if "gpuaas" in str(r.get("receiver"))], main["route"]
    uwm = eventually(lambda: yaml.safe_load(prometheus_operator.generated_config(
        openshift.cluster, osp.UWM, "alertmanager-user-workload-generated", "alertmanager.yaml.gz")), timeout_s=120,
        what="the user-workload Alertmanager's generated configuration")
    routes = [r for r in uwm["route"]["routes"] if str(r.get("receiver", "")).startswith("gpuaas/gpuaas-idle/")]
    assert routes and 'namespace="gpuaas"' in routes[0]["matchers"], uwm["route"]

    # OpenShift AI's Kueue frameworks: a batch Job is not managed (no Workload); a Deployment's pods are.
    batch.create_namespaced_job(TENANT, _gpu_job(f"os-job-{SUFFIX}", KEEP_RUNNING))
    apps.create_namespaced_deployment(TENANT, _server(f"os-idle-{SUFFIX}", utilization="0", namespace=TENANT))
    eventually(lambda: _admitted_workload(custom, f"os-idle-{SUFFIX}", TENANT), timeout_s=120,
               what="the idle server's pod admitted")
    assert not [w for w in custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", TENANT, "workloads")["items"]
                if any(o["kind"] == "Job" for o in w["metadata"].get("ownerReferences") or [])], \
        "Kueue made a Workload for a batch Job: OpenShift AI's default frameworks do not include batch/job"

    # The idle alert from Thanos Ruler (the platform's series through the querier) reaches the webhook.
    firing = eventually(lambda: [a for a in _get(f"{ruler}/api/v1/alerts")["data"]["alerts"]
                                 if a["labels"].get("alertname") == obs.ALERT_NAME and a["state"] == "firing"
                                 and a["labels"].get(obs.WORKLOAD_NAMESPACE_LABEL) == TENANT],
                        timeout_s=240, what="GPUWorkloadIdle firing in Thanos Ruler for the idle server")
    assert firing[0]["labels"]["namespace"] == "gpuaas", firing[0]["labels"]
    # Up to 300 s, as for kube-prometheus-stack: the route exists only once the config-reloader reloads the
    # operator's regenerated Secret, and it may take its --watch-interval poll (3 min by default) to do so (seen:
    # the AlertmanagerConfig applied about 16:07:20, the reload and the first POST at 16:08:31, 3 min after the
    # reloader started watching; the alert had been firing in the Alertmanager since 16:06:19).
    eventually(lambda: [line for line in proxy_log.read_bytes()[proxy_log_start:].decode(errors="replace").splitlines()
                        if line.startswith(f"POST {obs.WEBHOOK_PATH}") and "(bearer)" in line],
               timeout_s=300, what="the user-workload Alertmanager POSTing GPUWorkloadIdle with the token")
    core.patch_node(XID_NODE, {"metadata": {"annotations": {XID_ANNOTATION: XID}}})
    try:
        eventually(lambda: [a for a in receiver.alerts() if a["labels"].get("alertname") == "GPUXidError"],
                   timeout_s=180, what="GPUXidError at the admins' receiver")
    finally:
        core.patch_node(XID_NODE, {"metadata": {"annotations": {XID_ANNOTATION: None}}})

    # thanos-querier behind the real kube-rbac-proxy: no token 401, a token without cluster-monitoring-view 403,
    # the steps' own token (the overlay binds the role) answers, over the service CA the overlay's ConfigMap holds.
    ca = tmp_path / "service-ca.crt"
    ca.write_text(eventually(lambda: (core.read_namespaced_config_map("gpuaas-prometheus-ca", "gpuaas").data or {})
                             .get("service-ca.crt"), timeout_s=60, what="the service CA injected into gpuaas-prometheus-ca"))
    url = core.read_namespaced_config_map("gpuaas-prometheus", "gpuaas").data["GPUAAS_PROMETHEUS_URL"]
    for token, expected in (("", "401"), (_token(openshift, "gpuaas", "gpuaas-eventsources"), "403"),
                            (_token(openshift, "gpuaas", "gpuaas-steps"), "GPU series: [1-9]")):
        answer = _query_as_a_pod(openshift, tmp_path, url, token, ca, 'DCGM_FI_DEV_GPU_UTIL{namespace="team-a"}')
        assert re.search(expected, answer), (expected, answer)

    # KEDA's ScaledObject for a server, made by on-admitted with the overlay's settings, authenticates.
    settings = core.read_namespaced_config_map("gpuaas-prometheus", "gpuaas").data
    apps.create_namespaced_deployment(SERVING, _server(f"os-server-{SUFFIX}"))
    workload = eventually(lambda: _admitted_workload(custom, f"os-server-{SUFFIX}"), timeout_s=120,
                          what="the server's pod Workload admitted")
    run = RealSteps(openshift, tmp_path / "steps", environ=settings).run("on-admitted", namespace=SERVING,
                                                                          workload=workload)
    assert run.outcome == "applied", run.describe()
    scaled = eventually(lambda: [s for s in custom.list_namespaced_custom_object(
        "keda.sh", "v1alpha1", SERVING, "scaledobjects")["items"] if s["spec"]["scaleTargetRef"]["name"] == f"os-server-{SUFFIX}"],
        timeout_s=60, what="the server's ScaledObject")[0]
    assert scaled["spec"]["triggers"][0]["authenticationRef"]["kind"] == "ClusterTriggerAuthentication"
    _keda_metric_answers(openshift, custom, scaled)
