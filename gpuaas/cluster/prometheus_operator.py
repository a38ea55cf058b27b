"""The Prometheus Operator on the stack (`gpuaas cluster up --monitoring kube-prometheus-stack|openshift`).

The real operator (prometheus-operator v0.93.1, built from `stack/prometheus-operator`) runs as a process
with upstream's RBAC (its `example/rbac/prometheus-operator`, as ServiceAccount default/prometheus-operator)
and reconciles the profile's `Prometheus` and `Alertmanager` resources (gpuaas.cluster.profiles, each
transcribed from the platform's source) and whatever the product installs: which PrometheusRules load,
the namespace enforcement, the AlertmanagerConfig conversion and its matcher are the operator's own.
Its output (StatefulSets, the gzipped config Secrets, the rule ConfigMaps) is run by
gpuaas.cluster.monitoring_pods: Debian's Prometheus and Alertmanager with the operator's files, reloaded
by the operator's own prometheus-config-reloader when they change. `spec.version` of each resource is
the version of the Debian program that runs it (read from `--version` at start), so the operator
generates what that version understands.

What the stack adapts, and why (every other field is the platform's):
- `replicas: 1` (one process per resource on one machine);
- scrape and evaluation every 5 s (the plain stack's interval: an idle window of seconds);
- the scrape jobs of the stack's stand-ins (the DCGM-like exporter, Kueue's metrics endpoint) as
  `additionalScrapeConfigs`: they are programs on loopback, and Endpoints may not hold loopback
  addresses, so a ServiceMonitor could not reach them;
- the Alertmanager is named statically (`additionalAlertManagerConfigs`, its pod's loopback address) instead
  of `alerting.alertmanagers`: Debian's Prometheus 2.42 is built without Kubernetes service discovery
  (`kubernetes_sd_configs` is an unknown field to it: seen at the first start), and the operator renders
  `alerting.alertmanagers` as Kubernetes endpoints discovery. The chart's endpoint (Service, port
  `http-web`, API v2) is what it stands in for.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpuaas.cluster import certificates, objects, openshift_platform, profiles, readiness
from gpuaas.cluster.binaries import program
from gpuaas.cluster.kubeconfig import write_kubeconfig
from gpuaas.cluster.monitoring_pods import pod_ip

if TYPE_CHECKING:
    from gpuaas.cluster.stack import Cluster

JSON = dict[str, Any]
MODULE = "github.com/prometheus-operator/prometheus-operator"
OPERATOR_SA = ("default", "prometheus-operator")
CRD_PLURALS = ("alertmanagerconfigs", "alertmanagers", "podmonitors", "probes", "prometheusagents", "prometheuses",
               "prometheusrules", "scrapeconfigs", "servicemonitors", "thanosrulers")
RBAC_FILES = tuple(f"example/rbac/prometheus-operator/prometheus-operator-{name}.yaml"
                   for name in ("cluster-role", "cluster-role-binding", "service-account"))
PROMETHEUS_ROLE_FILE = "example/rbac/prometheus/prometheus-cluster-role.yaml"
SCRAPE_SECRET = "gpuaas-stack-scrape-configs"
RELOADER_IMAGE = f"quay.io/prometheus-operator/prometheus-config-reloader:{profiles.PROMETHEUS_OPERATOR_VERSION}"
"""The image the operator names in its pods' templates; the stack runs the built program instead."""
NOT_RUN = "gpuaas.io/stack-runs-no-pod"
"""Annotation on a profile resource whose pod the stack does not run (the operator still reconciles it, so its
generated configuration can be read): e.g. OpenShift's alertmanager-main, which the product never reaches."""
INTERVAL = "5s"


def crd_files() -> list[str]:
    return [f"example/prometheus-operator-crd/monitoring.coreos.com_{plural}.yaml" for plural in CRD_PLURALS]


def debian_version(binary: str) -> str:
    """`v2.42.0` from `prometheus --version` (`prometheus, version 2.42.0+ds (...)`)."""
    path = shutil.which(binary)
    if path is None:
        raise FileNotFoundError(f"expected the `{binary}` program (Debian) on PATH, found none; run `make setup`")
    done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False)
    match = re.search(r"version (\d+\.\d+\.\d+)", done.stdout + done.stderr)
    if not match:
        raise RuntimeError(f"expected `{binary} --version` to print a version, it printed: {done.stdout}{done.stderr}")
    return f"v{match.group(1)}"


def _alertmanager_service(namespace: str, name: str, port_name: str, selector: JSON) -> JSON:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/managed-by": "gpuaas-cluster"}},
            "spec": {"selector": selector, "ports": [{"name": port_name, "port": 9093, "targetPort": 9093}]}}


def _binding(name: str, role: str, account: tuple[str, str]) -> JSON:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account[1], "namespace": account[0]}]}


def _account(namespace: str, name: str) -> JSON:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}


ALERTMANAGERS_SECRET = "gpuaas-stack-alertmanagers"


def static_alertmanager(state_dir: Path, namespace: str, alertmanager: str) -> JSON:
    """The Secret of `additionalAlertManagerConfigs`: the Alertmanager's pod at its loopback address here
    (gpuaas.cluster.monitoring_pods.pod_ip), API v2 (module docstring: why not discovery)."""
    ip = pod_ip(state_dir, f"alertmanager-{alertmanager}-0")
    configs = [{"api_version": "v2", "static_configs": [{"targets": [f"{ip}:9093"]}]}]
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": ALERTMANAGERS_SECRET, "namespace": namespace},
            "stringData": {"alertmanagers.yaml": yaml.safe_dump(configs, sort_keys=False)}}


def kube_prometheus_stack(env: StackEnv) -> list[JSON]:
    """The chart's Prometheus and Alertmanager with default values (templates/prometheus/prometheus.yaml,
    templates/alertmanager/alertmanager.yaml, values.yaml of kube-prometheus-stack 88.5.3), adapted as the
    module docstring says."""
    p = profiles.KUBE_PROMETHEUS_STACK
    (evaluator,), (router,) = p.evaluators, p.routers
    ns, release = profiles.KPS_NAMESPACE, profiles.KPS_RELEASE
    prometheus_sa, alertmanager_sa = f"{release}-prometheus", f"{release}-alertmanager"
    selector = {"matchLabels": {"release": release}}
    default_config = {  # values.yaml alertmanager.config
        "global": {"resolve_timeout": "5m"},
        "inhibit_rules": [
            {"source_matchers": ["severity = critical"], "target_matchers": ["severity =~ warning|info"],
             "equal": ["namespace", "alertname"]},
            {"source_matchers": ["severity = warning"], "target_matchers": ["severity = info"],
             "equal": ["namespace", "alertname"]},
            {"source_matchers": ["alertname = InfoInhibitor"], "target_matchers": ["severity = info"],
             "equal": ["namespace"]},
            {"target_matchers": ["alertname = InfoInhibitor"]}],
        "route": {"group_by": ["namespace"], "group_wait": "30s", "group_interval": "5m", "repeat_interval": "12h",
                  "receiver": "null", "routes": [{"receiver": "null", "matchers": ['alertname = "Watchdog"']}]},
        "receivers": [{"name": "null"}],
    }
    return [
        _account(ns, prometheus_sa), _account(ns, alertmanager_sa),
        _binding(prometheus_sa, "prometheus", (ns, prometheus_sa)),
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": router.config_secret, "namespace": ns},
         "stringData": {"alertmanager.yaml": yaml.safe_dump(default_config, sort_keys=False)}},
        _alertmanager_service(ns, router.name, "http-web", {"app.kubernetes.io/name": "alertmanager",
                                                             "alertmanager": router.name}),
        env.scrape_secret(ns), static_alertmanager(env.state_dir, ns, router.name),
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
         "metadata": {"name": evaluator.name, "namespace": ns, "labels": {"release": release}},
         "spec": {"version": env.prometheus_version, "replicas": 1, "serviceAccountName": prometheus_sa,
                  "scrapeInterval": INTERVAL, "evaluationInterval": INTERVAL,
                  "ruleSelector": evaluator.rule_selector, "ruleNamespaceSelector": evaluator.rule_namespace_selector,
                  "serviceMonitorSelector": selector, "serviceMonitorNamespaceSelector": {},
                  "podMonitorSelector": selector, "podMonitorNamespaceSelector": {},
                  "probeSelector": selector, "probeNamespaceSelector": {},
                  "additionalScrapeConfigs": {"name": SCRAPE_SECRET, "key": "scrape.yaml"},
                  "additionalAlertManagerConfigs": {"name": ALERTMANAGERS_SECRET, "key": "alertmanagers.yaml"}}},
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "Alertmanager",
         "metadata": {"name": router.name, "namespace": ns, "labels": {"release": release}},
         "spec": {"version": env.alertmanager_version, "replicas": 1, "serviceAccountName": alertmanager_sa,
                  "portName": "http-web", "routePrefix": "/",
                  "alertmanagerConfigSelector": router.config_selector,
                  "alertmanagerConfigNamespaceSelector": router.config_namespace_selector}},
    ]


class StackEnv:
    """What the profile's resources need of this stack: versions, ports, the stand-ins' scrape targets."""

    def __init__(self, cluster: Cluster, token: Path) -> None:
        self.cluster = cluster
        self.prometheus_version = debian_version("prometheus")
        self.alertmanager_version = debian_version("prometheus-alertmanager")
        self.state_dir = cluster.state_dir
        self.token = token

    def scrape_secret(self, namespace: str) -> JSON:
        """The stand-ins' scrape jobs (the plain stack's), as additionalScrapeConfigs."""
        port = self.cluster.state.port
        jobs = [
            {"job_name": "dcgm-exporter", "static_configs": [{"targets": [f"127.0.0.1:{port('gpu-exporter')}"]}]},
            {"job_name": "kueue", "scheme": "https", "tls_config": {"insecure_skip_verify": True},
             "authorization": {"credentials_file": str(self.token)},
             "static_configs": [{"targets": [f"127.0.0.1:{port('kueue-metrics')}"]}]},
        ]
        return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SCRAPE_SECRET, "namespace": namespace},
                "stringData": {"scrape.yaml": yaml.safe_dump(jobs, sort_keys=False)}}


def openshift(env: StackEnv) -> list[JSON]:
    return openshift_platform.resources(env)


PROFILE_RESOURCES = {"kube-prometheus-stack": kube_prometheus_stack, "openshift": openshift}


def _wait_for(cluster: Cluster, kind: str, namespace: str, name: str, cap: float, record: Any) -> None:
    def exists() -> str | None:
        done = cluster.kubectl("get", kind, name, "-n", namespace, "-o", "name", check=False, timeout=30)
        return None if done.returncode == 0 else f"{kind} {namespace}/{name} not made yet: {done.stderr.strip()[-200:]}"
    readiness.wait(f"the operator's {kind} {namespace}/{name}", exists, timeout_s=cluster.remaining(cap), record=record)


def start(cluster: Cluster, profile: profiles.Profile, token: Path, webhook_ip: str) -> dict[str, str]:
    """The operator, the profile's resources, and the pods that judge; returns the endpoints for `status`."""
    cluster.progress(f"Prometheus Operator {profiles.PROMETHEUS_OPERATOR_VERSION} and the {profile.name} "
                     "monitoring profile")
    crds = objects.yaml_files(MODULE, crd_files())
    cluster.apply(cluster.changed_crds(crds), "Prometheus Operator CRDs (new or changed)")
    cluster.kubectl("wait", "--for=condition=Established", f"--timeout={int(cluster.remaining(120))}s",
                    *[f"crd/{c['metadata']['name']}" for c in crds], timeout=cluster.remaining(130))
    cluster.apply(objects.yaml_files(MODULE, [*RBAC_FILES, PROMETHEUS_ROLE_FILE]), "Prometheus Operator RBAC")
    user = f"system:serviceaccount:{OPERATOR_SA[0]}:{OPERATOR_SA[1]}"
    pair = certificates.issue(cluster.ca, cluster.pki, "client-prometheus-operator", user,
                              organizations=("system:serviceaccounts", f"system:serviceaccounts:{OPERATOR_SA[0]}"),
                              client=True)
    port = cluster.state.port("prometheus-operator")
    operator = cluster.start_process("prometheus-operator", [
        str(program("prometheus-operator", "operator")), f"--apiserver={cluster.apiserver_url}",
        f"--cert-file={pair.cert}", f"--key-file={pair.key}", f"--ca-file={cluster.ca.cert}",
        f"--web.listen-address=127.0.0.1:{port}", "--log-level=info",
        f"--prometheus-config-reloader={RELOADER_IMAGE}",
    ], endpoint=f"http://127.0.0.1:{port}")
    cluster.wait_ready(operator, readiness.http_ok(f"http://127.0.0.1:{port}/healthz"), cap=60)

    env = StackEnv(cluster, token)
    resources = PROFILE_RESOURCES[profile.name](env)
    cluster.apply(resources, f"{profile.name} monitoring resources (Prometheus {env.prometheus_version}, "
                             f"Alertmanager {env.alertmanager_version})")
    endpoints: dict[str, str] = {}
    hosts = {profiles_webhook_host(): webhook_ip}
    pods = [(r["kind"], r["metadata"]["namespace"], r["metadata"]["name"]) for r in resources
            if r["kind"] in PREFIX and not r["metadata"].get("annotations", {}).get(NOT_RUN)]
    if profile.name == "openshift":
        endpoints.update(_openshift(cluster, env, operator, hosts))
        pods.append(("Alertmanager", openshift_platform.UWM, profiles.OPENSHIFT_ALERTMANAGER_USER_WORKLOAD.name))
    for kind, namespace, name in sorted(pods, key=lambda p: list(PREFIX).index(p[0])):
        endpoints.update(_run_pod(cluster, operator, kind, namespace, name, hosts, endpoints))
    return endpoints


PREFIX = {"Prometheus": ("prometheus", 9090), "Alertmanager": ("alertmanager", 9093),
          "ThanosRuler": ("thanos-ruler", 10902)}
"""Kind -> the prefix of the StatefulSet the operator makes and the port of its main container."""


def _run_pod(cluster: Cluster, operator: Any, kind: str, namespace: str, name: str, hosts: dict[str, str],
             endpoints: dict[str, str]) -> dict[str, str]:
    """Pod `<statefulset>-0` run here (gpuaas.cluster.monitoring_pods); {endpoint name: URL} for `status`."""
    prefix, port = PREFIX[kind]
    statefulset = f"{prefix}-{name}"
    ip = pod_ip(cluster.state_dir, f"{statefulset}-0")
    # the first Prometheus and Alertmanager keep the plain stack's names (`status`, the tests' endpoint())
    process = prefix if prefix not in endpoints and prefix != "thanos-ruler" else statefulset
    extra: list[str] = []
    if kind == "ThanosRuler":
        extra = [f"--thanos-query={endpoints['prometheus']}",
                 f"--thanos-alertmanager={pod_ip(cluster.state_dir, uwm_alertmanager_pod())}:9093"]
    later = kind == "Alertmanager" and namespace == "openshift-user-workload-monitoring"
    if not later:
        _wait_for(cluster, "statefulset", namespace, statefulset, 90, operator)
    pod = cluster.start_process(process, [
        sys.executable, "-m", "gpuaas.cluster.monitoring_pods", f"--kubeconfig={cluster.admin_kubeconfig}",
        f"--namespace={namespace}", f"--statefulset={statefulset}",
        f"--dir={cluster.state_dir / 'pods' / (statefulset + '-0')}", f"--ca={cluster.ca.cert}",
        f"--apiserver=127.0.0.1:{cluster.state.port('apiserver')}",
        f"--reloader={program('prometheus-operator', 'prometheus-config-reloader')}", f"--ip={ip}",
        *[f"--host={host}={address}" for host, address in hosts.items()], *extra,
    ], endpoint=f"http://{ip}:{port}", env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        stop_seconds=30)
    if later:
        # made by cluster-monitoring-operator (here its stand-in) once the admin's ConfigMap asks for it
        cluster.wait_ready(pod, lambda: None, cap=5)
        return {f"{process}:{namespace}/{name}": f"http://{ip}:{port}"}
    cluster.wait_ready(pod, readiness.http_ok(f"http://{ip}:{port}/-/ready"), cap=120)
    out = {f"{process}:{namespace}/{name}": f"http://{ip}:{port}"}
    if prefix not in endpoints and prefix != "thanos-ruler":
        out[prefix] = f"http://{ip}:{port}"
    return out


def uwm_alertmanager_pod() -> str:
    return f"alertmanager-{profiles.OPENSHIFT_ALERTMANAGER_USER_WORKLOAD.name}-0"


def querier_ip(state_dir: Path) -> str:
    return pod_ip(state_dir, "thanos-querier")


def _openshift(cluster: Cluster, env: StackEnv, operator: Any, hosts: dict[str, str]) -> dict[str, str]:
    """OpenShift's controllers around the operator (stand-ins: gpuaas.cluster.openshift_platform), and
    thanos-querier: the real kube-rbac-proxy in front of the platform Prometheus' API."""
    service_ca = certificates.certificate_authority(cluster.pki, "service-ca", "openshift-service-serving-signer")
    controllers = cluster.start_process("openshift-platform", [
        sys.executable, "-m", "gpuaas.cluster.openshift_platform", f"--kubeconfig={cluster.admin_kubeconfig}",
        f"--service-ca={service_ca.cert}", f"--alertmanager-version={env.alertmanager_version}",
    ], env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    cluster.wait_ready(controllers, lambda: None, cap=5)
    platform_ip = pod_ip(cluster.state_dir, f"prometheus-{profiles.OPENSHIFT_PLATFORM_PROMETHEUS.name}-0")
    namespace, account = openshift_platform.MONITORING, "thanos-querier"
    user = f"system:serviceaccount:{namespace}:{account}"
    client_pair = certificates.issue(cluster.ca, cluster.pki, "client-thanos-querier", user,
                                     organizations=("system:serviceaccounts", f"system:serviceaccounts:{namespace}"),
                                     client=True)
    kubeconfig = write_kubeconfig(cluster.state_dir / "kubeconfigs" / "thanos-querier.kubeconfig",
                                  server=cluster.apiserver_url, ca=cluster.ca.cert, client=client_pair, user=user)
    serving = certificates.issue(service_ca, cluster.pki, "thanos-querier-tls", f"thanos-querier.{namespace}.svc",
                                 server=True, dns_names=certificates.service_dns_names("thanos-querier", namespace))
    config = cluster.state_dir / "thanos-querier" / "kube-rbac-proxy.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump({"authorization": {"resourceAttributes": profiles.OPENSHIFT_QUERY.authorization}}))
    ip = querier_ip(cluster.state_dir)
    proxy = cluster.start_process("thanos-querier", [
        str(program("kube-rbac-proxy", "kube-rbac-proxy")), f"--secure-listen-address={ip}:9091",
        f"--upstream=http://{platform_ip}:9090/", f"--config-file={config}", f"--kubeconfig={kubeconfig}",
        f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}",
        "--ignore-paths=/-/healthy,/-/ready", "--logtostderr=true",
    ], endpoint=f"https://{ip}:9091")
    cluster.wait_ready(proxy, lambda: None if _listening(ip, 9091) else "not listening yet", cap=60)
    hosts[f"thanos-querier.{namespace}.svc"] = ip
    return {"thanos-querier": f"https://{ip}:9091", "service-ca": str(service_ca.cert)}


def _listening(host: str, port: int) -> bool:
    import socket

    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex((host, port)) == 0


def cluster_names(profile: profiles.Profile, state_dir: Path) -> dict[str, str]:
    """Service name -> loopback address, for programs on this machine that query the profile's Prometheus by
    the URL the overlay names (KEDA's operator): what cluster DNS and the Service would resolve."""
    names: dict[str, str] = {}
    if profile.name == "openshift":
        names[f"thanos-querier.{openshift_platform.MONITORING}.svc"] = querier_ip(state_dir)
    for evaluator in profile.evaluators:
        if evaluator.kind == "Prometheus":
            names.setdefault(f"prometheus-operated.{evaluator.namespace}.svc",
                             pod_ip(state_dir, f"prometheus-{evaluator.name}-0"))
    return names


def profiles_webhook_host() -> str:
    """The webhook EventSource's Service name as the product's AlertmanagerConfig spells it."""
    from gpuaas.manifests import observability as obs

    return f"{obs.WEBHOOK_SERVICE}.{obs.DEFAULT_NAMESPACE}.svc"


def webhook_url() -> str:
    """The webhook URL the product's AlertmanagerConfig names (what the operator writes into Alertmanager's config)."""
    from gpuaas.manifests import observability as obs

    return f"http://{profiles_webhook_host()}:{obs.WEBHOOK_PORT}{obs.WEBHOOK_PATH}"


def generated_config(cluster: Cluster, namespace: str, secret: str, key: str) -> str:
    """A gzipped config the operator generated (`prometheus-<name>`'s prometheus.yaml.gz, ...), as text."""
    import base64
    import gzip

    done = cluster.kubectl("get", "secret", secret, "-n", namespace, "-o", "json")
    return gzip.decompress(base64.b64decode(json.loads(done.stdout)["data"][key])).decode()
