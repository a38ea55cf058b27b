"""`gpuaas cluster up | down | status`: the real control plane on loopback, started in order.

Order and why:
1. PKI and kubeconfigs (gpuaas.cluster.certificates, .kubeconfig), once per state dir.
2. etcd, then kube-apiserver (RBAC, ServiceAccount tokens, aggregation layer), then the
   controller-manager and the scheduler.
3. CRDs (Kueue's and KEDA's installs, and the upstream kinds gpuaas touches), Established; then the
   rest of Kueue's and KEDA's installs rewritten for loopback (gpuaas.cluster.objects).
4. KWOK and its nodes (Ready), Kueue (webhooks answering a server-side dry run), KEDA (operator,
   admission webhooks, metrics API server: its APIService Available).
5. The operators of the job kinds (KubeRay, the Kubeflow training-operator: gpuaas.cluster.operators).
6. The DCGM-like exporter (a stand-in, gpuaas.cluster.gpu_exporter) and real Prometheus scraping it
   and Kueue's metrics endpoint. With the events part, Prometheus also evaluates the product's
   rendered rules and alerts to a real Alertmanager that POSTs GPUWorkloadIdle to the webhook
   EventSource through the webhook proxy (gpuaas.cluster.alerting, gpuaas.cluster.webhook_proxy).
kube-apiserver writes an audit log of the product's ServiceAccounts (gpuaas.cluster.audit).
Then the optional parts (`up --with PART`, see PARTS): the real node (kubelet, containerd) that
runs pods, Argo Workflows (gpuaas.cluster.argo_workflows) and Argo Events (gpuaas.cluster.argo_events).
A component that fails stops everything started so far and reports its last log lines.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from engine import monitoring
from gpuaas.cluster import (
    alerting,
    argo_events,
    argo_workflows,
    audit,
    certificates,
    crds,
    kwok,
    mount_namespace,
    objects,
    operators,
    processes,
    profiles,
    prometheus_operator,
    readiness,
    services,
)
from gpuaas.cluster.binaries import BuildFailed, cache_dir, program
from gpuaas.cluster.certificates import KeyPair
from gpuaas.cluster.debian import ToolMissing
from gpuaas.cluster.images import ImageBuildError
from gpuaas.cluster.kubeconfig import write_kubeconfig
from gpuaas.cluster.state import ClusterState, ProcessRecord, default_state_dir, port_free
from gpuaas.invocation import command
from gpuaas.stops import signals_deferred
from gpuaas.upstream import pins

KUEUE = "sigs.k8s.io/kueue"
KEDA = "github.com/kedacore/keda/v2"
SERVICE_CIDR = str(services.SERVICE_RANGE)
KWOK_POD_CIDR = "10.245.0.0/16"
"""Pod IPs KWOK hands its fake pods: apart from 10.244.0.0/16, where the real node's pods get theirs."""
ISSUER = "https://kubernetes.default.svc.cluster.local"
KUEUE_SA = ("kueue-system", "kueue-controller-manager")
KEDA_SA = ("keda", "keda-operator")
KUEUE_FRAMEWORKS = ["batch/job", "ray.io/rayjob", "ray.io/raycluster", "kubeflow.org/pytorchjob", "deployment",
                    "statefulset", "pod", "leaderworkerset.x-k8s.io/leaderworkerset"]
"""Kueue integrations the product's reactions act on (the Pod integration backs Deployments)."""

PARTS: dict[str, str] = {
    "node": "a real node (kubelet, containerd, runc) that runs pods: the step image's, Argo's; needs root",
    "argo": "Argo Workflows: PostgreSQL archive, workflow-controller, Argo Server (API; the UI if built)",
    "events": "Argo Events: NATS JetStream for the EventBus, the controller (a pod on the node); the product's "
              "alert rules in Prometheus and Alertmanager POSTing to the webhook EventSource",
}
"""Optional parts of the stack, started after the control plane in this order."""
REQUIRES: dict[str, set[str]] = {"events": {"node", "argo"}}
"""Parts another part cannot run without: Argo Events' controller and its EventSources and Sensors are
pods (the node), and the Sensors submit workflows (the workflow-controller runs them)."""
NODE_NAME = "gpuaas-node"
APPLY_ATTEMPTS = 3
CLIENT_TIMEOUTS = ("Client.Timeout exceeded", "context deadline exceeded", "TLS handshake timeout")
"""kubectl's own request timeouts (the API server busy, not the objects wrong): `apply` tries again."""

CONTENT_HASH = "gpuaas.io/content-hash"
"""Annotation with a digest of what `gpuaas cluster up` applied, to skip unchanged CRDs on restart."""

KEDA_WEBHOOK_PROBE: dict[str, Any] = {
    "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
    "metadata": {"name": "gpuaas-readiness-probe-" + "x" * 50, "namespace": KEDA_SA[0]},
    "spec": {"scaleTargetRef": {"name": "gpuaas-readiness-probe"}, "minReplicaCount": 0, "maxReplicaCount": 1,
             "triggers": [{"type": "prometheus", "metadata": {"serverAddress": "http://127.0.0.1:1",
                                                               "query": "vector(0)", "threshold": "1"}}]},
}
"""A ScaledObject only KEDA's admission webhook refuses: its name is longer than the 63 characters KEDA
copies into a label (`verifyName`, apis/keda/v1alpha1/scaledobject_webhook.go, v2.20.2); no CRD rule
refuses it. Sent as a server-side dry run, so nothing is stored."""

Progress = Callable[[str], None]


def keda_webhooks_answer(done: subprocess.CompletedProcess[str]) -> str | None:
    """None when the dry run of KEDA_WEBHOOK_PROBE was refused by KEDA's webhook, else what happened.

    Why a refusal and not /readyz: upstream's KEDA webhooks are `failurePolicy: Ignore`, so an
    apiserver that cannot reach them (a wrong port, Service or caBundle) admits every ScaledObject
    unjudged; only the webhook's own refusal proves the apiserver reaches it.
    """
    if done.returncode == 0:
        return f"the probe ScaledObject was admitted unjudged: {done.stdout.strip()[-200:]}"
    if 'admission webhook "vscaledobject.kb.io" denied the request' in done.stderr:
        return None
    return (done.stderr or done.stdout).strip()[-300:]


class ClusterError(RuntimeError):
    """Starting or stopping failed; the message says which component and carries its log tail."""


def _service_account_user(namespace: str, name: str) -> tuple[str, tuple[str, ...]]:
    """The user and groups a ServiceAccount token authenticates as; a client certificate can carry them."""
    return (f"system:serviceaccount:{namespace}:{name}",
            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}"))


class Cluster:
    """One cluster's state dir and the operations on it."""

    def __init__(self, state_dir: Path | None = None, progress: Progress | None = None) -> None:
        self.state_dir = (state_dir or default_state_dir()).resolve()
        self.progress: Progress = progress or (lambda line: None)
        self.pki = self.state_dir / "pki"
        self.logs = self.state_dir / "logs"
        self.admin_kubeconfig = self.state_dir / "kubeconfig"
        self.audit_log = self.logs / "audit.log"
        self.stopped_on_failure = 0
        """How many processes a failed or interrupted `up` had started and stopped again."""

    # -- state -----------------------------------------------------------------------------------
    def load(self) -> ClusterState | None:
        return ClusterState.load(self.state_dir)

    def running(self, state: ClusterState | None = None) -> list[ProcessRecord]:
        """The recorded processes still alive: `state`'s records (up's own, in memory), else the state dir's."""
        state = state or self.load()
        return [r for r in state.processes.values() if processes.alive(r)] if state else []

    # -- up --------------------------------------------------------------------------------------
    def up(self, timeout_s: float = 300.0, parts: set[str] | frozenset[str] = frozenset(),
           idle_window: str = alerting.DEFAULT_IDLE_WINDOW, monitoring: str = "plain") -> ClusterState:
        """Start every component (and the `parts` asked for) and return when all are ready (module docstring).

        `idle_window`: the window of the GPUWorkloadIdle rule the events part loads (gpuaas.cluster.alerting).
        `monitoring`: the monitoring profile (gpuaas.cluster.profiles): `plain` writes Prometheus' and
        Alertmanager's files; the others run the Prometheus Operator with that platform's resources
        (gpuaas.cluster.prometheus_operator), and the product's own PrometheusRule and AlertmanagerConfig,
        once installed, decide what loads and where alerts go.
        """
        try:
            idle_rule = alerting.IdleRule.from_window(idle_window)
            self.profile = profiles.profile(monitoring)
        except ValueError as error:
            raise ClusterError(str(error)) from None
        if self.profile.operator_managed and os.geteuid() != 0:
            raise ClusterError(f"expected root for --monitoring {monitoring} (the operator's pods run in mount "
                               f"namespaces: gpuaas.cluster.monitoring_pods), found uid {os.geteuid()}")
        parts = set(parts)
        for part in list(parts):
            parts |= REQUIRES.get(part, set())
        unknown = parts - set(PARTS)
        if unknown:
            raise ClusterError(f"expected parts among {', '.join(PARTS)}, found {', '.join(sorted(unknown))}")
        if "node" in parts and os.geteuid() != 0:
            raise ClusterError("expected root for the real node (kubelet, containerd, network namespaces, cgroups), "
                               f"found uid {os.geteuid()}; run as root, or leave out --with node/events")
        if self.running():
            raise ClusterError(f"expected no cluster running from {self.state_dir}, found "
                               f"{', '.join(r.name for r in self.running())} running; use it "
                               f"(export KUBECONFIG={self.admin_kubeconfig}), or `{command()} cluster down` first, "
                               "or pass another --state-dir")
        previous = self.load()
        state = ClusterState(state_dir=str(self.state_dir), started_at=time.time(),
                             ports={name: port for name, port in (previous.ports if previous else {}).items()
                                    if port_free(port)},  # the same ports keep a user's KUBECONFIG valid
                             parts=[part for part in PARTS if part in parts],
                             idle_rule={"window": idle_rule.window, "for": idle_rule.for_} if "events" in parts
                             else {}, monitoring=monitoring, service_range=SERVICE_CIDR)
        etcd_data = self.state_dir / "etcd"
        if previous is not None and previous.service_range != SERVICE_CIDR and etcd_data.exists():
            # Its Services hold ClusterIPs of another range (immutable): the cluster starts from an empty etcd,
            # and the old one is kept beside it (what a user made there is theirs to copy out or delete).
            kept = self.state_dir / f"etcd.before-{time.strftime('%Y%m%d-%H%M%S')}"
            etcd_data.rename(kept)
            self.progress(f"the state dir's etcd holds Services of the range {previous.service_range or '10.96.0.0/16'} "
                          f"(an earlier version); starting from an empty etcd in {SERVICE_CIDR}; the old one is "
                          f"kept in {kept} (delete it when you no longer need it)")
        self.idle_rule = idle_rule
        self.state = state
        self.deadline = time.monotonic() + timeout_s
        started = time.monotonic()
        report = self.progress
        self.progress = lambda line: report(f"[{time.monotonic() - started:6.1f}s] {line}")
        try:
            self._pki()
            self._etcd()
            self._apiserver()
            self._controllers()
            self._install()
            self._kwok()
            self._kueue()
            self._operators()
            self._keda()
            self._monitoring()
            if "node" in parts:
                self._node()
            if "argo" in parts:
                argo_workflows.start(self)
            if "events" in parts:
                argo_events.start(self)
        except BaseException as error:
            # a failure, Ctrl-C or SIGTERM (gpuaas.stops.Stopped), a defect: everything started so far is stopped,
            # nothing was handed over yet (the stack is the user's only once `up` returns ready). The stop works
            # from the records in memory: a state file that cannot be written (a full disk) must not leave the
            # processes running with nothing to find them by.
            state.phase = "failed"
            _save_if_possible(state)
            self.stopped_on_failure = len(self.running(state))
            if isinstance(error, Exception):  # an interrupted start says it in its one line (gpuaas cluster up)
                self.progress(f"start-up failed: stopping the {self.stopped_on_failure} processes started")
            self.down(quiet=True, state=state)
            state.phase = "failed"  # down() marked each process stopped
            _save_if_possible(state)
            # BuildFailed: a program is missing; ImageBuildError, ToolMissing: the real node's images or packages
            if isinstance(error, (readiness.NotReady, ClusterError, BuildFailed, ImageBuildError, ToolMissing)):
                raise ClusterError(str(error)) from None
            raise
        finally:
            self.progress = report
        state.phase = "ready"
        state.ready_seconds = round(time.monotonic() - started, 1)
        state.versions = {module: pin.version for module, pin in pins().items()}
        state.save()
        return state

    def _remaining(self, cap: float) -> float:
        return max(1.0, min(cap, self.deadline - time.monotonic()))

    remaining = _remaining

    @staticmethod
    def error(message: str) -> ClusterError:
        """The error `up` reports (and stops everything for), for the parts in other modules."""
        return ClusterError(message)

    def _start(self, name: str, argv: list[str], *, endpoint: str = "", env: dict[str, str] | None = None,
               **options: Any) -> ProcessRecord:
        self.progress(f"  starting {name}")
        # Ctrl-C or SIGTERM waits until the process is recorded: one arriving between the fork and the record
        # (seen: kube-scheduler left running by a SIGTERM to `cluster up`) started what `down` could not find
        with signals_deferred():
            try:
                record = processes.start(name, argv, log=self.logs / f"{name}.log", env=env, cwd=self.state_dir,
                                         endpoint=endpoint, **options)
            except OSError as error:
                raise ClusterError(f"expected to start {name} ({argv[0]}), the system said: {error}; run "
                                   f"`{command()} cluster build` if a program is missing") from None
            self.state.processes[name] = record
            self.state.save()
        return record

    def _ready(self, record: ProcessRecord, check: Callable[[], str | None], cap: float = 120.0) -> None:
        readiness.wait(record.name, check, timeout_s=self._remaining(cap), record=record)
        record.state = "ready"
        record.ready_seconds = round(time.time() - record.started_at, 2)
        self.state.save()
        self.progress(f"  {record.name} ready ({record.ready_seconds:.1f}s after start)")

    start_process = _start
    wait_ready = _ready

    # -- outages (the fault tier: tests/realstack/test_catchup_faults.py, benchmarks/scale.py) --------------
    def stop_component(self, name: str) -> ProcessRecord:
        """Stop one running process of the cluster (its stop signal, then SIGKILL), keeping its record to
        start it again; the others run on. Raises ClusterError when no such process runs."""
        state = self.load()
        record = state.processes.get(name) if state else None
        if record is None or not processes.alive(record):
            raise ClusterError(f"expected process {name} of the cluster in {self.state_dir} running, found "
                               f"{'none' if record is None else 'it stopped'}; running: "
                               f"{', '.join(r.name for r in self.running()) or 'nothing'}")
        processes.stop(record)
        record.state = "stopped"
        assert state is not None
        state.save()
        return record

    def start_component(self, name: str) -> ProcessRecord:
        """Start a stopped process again with the argv, environment and user `up` gave it (same ports,
        same state on disk: etcd's data, NATS's JetStream store, Alertmanager's notification log)."""
        state = self.load()
        record = state.processes.get(name) if state else None
        if record is None:
            raise ClusterError(f"expected a process named {name} in the cluster in {self.state_dir}, found none")
        if processes.alive(record):
            raise ClusterError(f"expected process {name} stopped before starting it again, found it running "
                               f"(pid {record.pid})")
        started = processes.start(name, record.argv, log=Path(record.log), env=record.env or None,
                                  cwd=self.state_dir, endpoint=record.endpoint, user=record.user,
                                  stop_signal=record.stop_signal, stop_seconds=record.stop_seconds)
        started.state = "ready"
        assert state is not None
        state.processes[name] = started
        state.save()
        return started

    def restart(self, name: str) -> ProcessRecord:
        """Stop and start one process (a controller's crash and restart, an upgrade's rollout)."""
        self.stop_component(name)
        return self.start_component(name)

    def identity_kubeconfig(self, name: str, namespace: str, service_account: str) -> Path:
        """A kubeconfig whose client certificate authenticates as that ServiceAccount's user (once per state dir)."""
        user, groups = _service_account_user(namespace, service_account)
        pair = certificates.issue(self.ca, self.pki, f"client-{name}", user, organizations=groups, client=True)
        return write_kubeconfig(self.state_dir / "kubeconfigs" / f"{name}.kubeconfig", server=self.apiserver_url,
                                ca=self.ca.cert, client=pair, user=user)

    def _pki(self) -> None:
        self.progress("certificates and kubeconfigs")
        pki = self.pki
        self.ca = certificates.certificate_authority(pki, "ca", "gpuaas-cluster-ca")
        self.front_proxy_ca = certificates.certificate_authority(pki, "front-proxy-ca", "gpuaas-front-proxy-ca")
        self.front_proxy_client = certificates.issue(self.front_proxy_ca, pki, "front-proxy-client",
                                                     "front-proxy-client", client=True)
        self.kubelet_client = certificates.issue(self.ca, pki, "apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                                                 organizations=("system:masters",), client=True)
        self.sa = certificates.service_account_keys(pki)
        self.apiserver_cert = certificates.issue(
            self.ca, pki, "apiserver", "kube-apiserver", server=True,
            dns_names=("localhost", *certificates.service_dns_names("kubernetes", "default")),
            ip_addresses=("127.0.0.1", services.KUBERNETES))
        self.keda_cert = certificates.issue(
            self.ca, pki, "keda", "keda", server=True, client=True,
            dns_names=("localhost", *certificates.service_dns_names("keda-admission-webhooks", "keda"),
                       *certificates.service_dns_names("keda-metrics-apiserver", "keda"),
                       *certificates.service_dns_names("keda-operator", "keda")),
            ip_addresses=("127.0.0.1",))
        identities: dict[str, tuple[str, tuple[str, ...]]] = {
            "admin": ("gpuaas-admin", ("system:masters",)),
            "controller-manager": ("system:kube-controller-manager", ()),
            "scheduler": ("system:kube-scheduler", ()),
            "kwok": ("gpuaas-kwok", ("system:masters",)),  # stands in for every kubelet
            "kueue": _service_account_user(*KUEUE_SA),
            "keda": _service_account_user(*KEDA_SA),
            "kuberay": _service_account_user(*operators.KUBERAY_SA),
            "training-operator": _service_account_user(*operators.TRAINING_OPERATOR_SA),
        }
        server = f"https://127.0.0.1:{self.state.port('apiserver')}"
        self.kubeconfigs: dict[str, Path] = {}
        for name, (user, groups) in identities.items():
            pair = certificates.issue(self.ca, pki, f"client-{name}", user, organizations=groups, client=True)
            path = self.admin_kubeconfig if name == "admin" else self.state_dir / "kubeconfigs" / f"{name}.kubeconfig"
            self.kubeconfigs[name] = write_kubeconfig(path, server=server, ca=self.ca.cert, client=pair, user=user)
        self.admin = KeyPair(pki / "client-admin.crt", pki / "client-admin.key")
        self.state.kubeconfig = str(self.admin_kubeconfig)

    def _etcd(self) -> None:
        self.progress("etcd")
        client, peer = self.state.port("etcd"), self.state.port("etcd-peer")
        record = self._start("etcd", [
            str(program("etcd", "etcd")), "--name=gpuaas", f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{client}", f"--advertise-client-urls=http://127.0.0.1:{client}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}", f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=gpuaas=http://127.0.0.1:{peer}", "--unsafe-no-fsync", "--log-level=warn",
        ], endpoint=f"http://127.0.0.1:{client}")
        self._ready(record, readiness.http_ok(f"http://127.0.0.1:{client}/health"), cap=30)

    @property
    def apiserver_url(self) -> str:
        return f"https://127.0.0.1:{self.state.port('apiserver')}"

    def _apiserver(self) -> None:
        self.progress("kube-apiserver")
        pki = self.pki
        audit_policy = self.state_dir / "audit-policy.yaml"
        audit_policy.write_text(yaml.safe_dump(audit.policy(), sort_keys=False))
        record = self._start("kube-apiserver", [
            str(program("kubernetes", "kube-apiserver")),
            f"--etcd-servers=http://127.0.0.1:{self.state.port('etcd')}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.state.port('apiserver')}",
            f"--tls-cert-file={self.apiserver_cert.cert}", f"--tls-private-key-file={self.apiserver_cert.key}",
            f"--client-ca-file={self.ca.cert}",
            f"--service-account-issuer={ISSUER}", f"--api-audiences={ISSUER}",
            f"--service-account-key-file={self.sa.cert}", f"--service-account-signing-key-file={self.sa.key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--authorization-mode=Node,RBAC", "--allow-privileged=true",
            "--enable-admission-plugins=NodeRestriction",
            # The real node (--with node): the API server reaches its kubelet (logs, exec) by the node's
            # InternalIP (node names do not resolve here) with a client certificate, and checks the
            # kubelet's serving certificate against the cluster CA.
            f"--kubelet-client-certificate={self.kubelet_client.cert}", f"--kubelet-client-key={self.kubelet_client.key}",
            f"--kubelet-certificate-authority={self.ca.cert}", "--kubelet-preferred-address-types=InternalIP",
            # Endpoints may not hold a loopback address, so the default `lease` reconciler fails to publish
            # 127.0.0.1 for Service default/kubernetes every 10 s; the real node's stand-in for kube-proxy
            # forwards that Service's ClusterIP itself (gpuaas.cluster.node), and nothing dials its endpoints.
            "--endpoint-reconciler-type=none",
            f"--requestheader-client-ca-file={self.front_proxy_ca.cert}", "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={self.front_proxy_client.cert}",
            f"--proxy-client-key-file={self.front_proxy_client.key}",
            f"--cert-dir={pki / 'apiserver-generated'}", "--profiling=false", "--v=0",
            f"--audit-policy-file={audit_policy}", f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json", "--audit-log-maxsize=200", "--audit-log-maxbackup=1",
        ], endpoint=self.apiserver_url)
        self._ready(record, readiness.http_ok(f"{self.apiserver_url}/readyz", ca=self.ca.cert, client=self.admin),
                    cap=90)

    def _controllers(self) -> None:
        self.progress("kube-controller-manager and kube-scheduler")
        kcm_port, scheduler_port = self.state.port("kube-controller-manager"), self.state.port("kube-scheduler")
        kcm_config = str(self.kubeconfigs["controller-manager"])
        kcm = self._start("kube-controller-manager", [
            str(program("kubernetes", "kube-controller-manager")),
            f"--kubeconfig={kcm_config}", f"--authentication-kubeconfig={kcm_config}",
            f"--authorization-kubeconfig={kcm_config}", "--bind-address=127.0.0.1", f"--secure-port={kcm_port}",
            f"--cert-dir={self.state_dir / 'kube-controller-manager'}", "--leader-elect=false",
            f"--service-account-private-key-file={self.sa.key}", f"--root-ca-file={self.ca.cert}",
            "--use-service-account-credentials=true", f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--cluster-signing-cert-file={self.ca.cert}", f"--cluster-signing-key-file={self.ca.key}",
            "--controllers=*", "--profiling=false",
            # its FlexVolume prober creates this folder (default /usr/libexec/kubernetes/kubelet-plugins/volume/exec/)
            f"--flex-volume-plugin-dir={self.state_dir / 'kube-controller-manager' / 'flexvolume'}",
        ], endpoint=f"https://127.0.0.1:{kcm_port}")
        scheduler_config = str(self.kubeconfigs["scheduler"])
        scheduler = self._start("kube-scheduler", [
            str(program("kubernetes", "kube-scheduler")),
            f"--kubeconfig={scheduler_config}", f"--authentication-kubeconfig={scheduler_config}",
            f"--authorization-kubeconfig={scheduler_config}", "--bind-address=127.0.0.1",
            f"--secure-port={scheduler_port}", f"--cert-dir={self.state_dir / 'kube-scheduler'}",
            "--leader-elect=false", "--profiling=false",
        ], endpoint=f"https://127.0.0.1:{scheduler_port}")
        self._ready(kcm, readiness.http_ok(f"https://127.0.0.1:{kcm_port}/healthz", verify=False))
        self._ready(scheduler, readiness.http_ok(f"https://127.0.0.1:{scheduler_port}/healthz", verify=False))

    # -- objects ---------------------------------------------------------------------------------
    def kubectl(self, *args: str, input_text: str | None = None, timeout: float = 120.0,
                check: bool = True) -> subprocess.CompletedProcess[str]:
        """The built kubectl as the cluster admin."""
        done = subprocess.run([str(program("kubernetes", "kubectl")), f"--kubeconfig={self.admin_kubeconfig}", *args],
                              input=input_text, capture_output=True, text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise ClusterError(f"expected `kubectl {' '.join(args)}` to succeed, it failed: "
                               f"{(done.stderr or done.stdout).strip()[-2000:]}")
        return done

    def apply(self, items: list[dict[str, Any]], what: str) -> None:
        """Server-side apply (idempotent), again after a client timeout of kubectl's own.

        Why again: kubectl first fetches the API server's OpenAPI document with a fixed 32 s timeout, and
        the first request after dozens of CRDs makes the API server build it (Argo's CRDs alone are
        11 MB); seen with two clusters starting at once at load 15: `context deadline exceeded` on
        /openapi/v2 in both. The document is cached once built, so the next attempt gets it."""
        if not items:
            return
        started = time.monotonic()
        arguments = ("apply", "--server-side", "--force-conflicts", "--field-manager=gpuaas-cluster", "-f", "-")
        for attempt in range(1, APPLY_ATTEMPTS + 1):
            done = self.kubectl(*arguments, input_text=objects.dump(items), timeout=self._remaining(600), check=False)
            if done.returncode == 0:
                break
            error = (done.stderr or done.stdout).strip()
            if attempt == APPLY_ATTEMPTS or not any(sign in error for sign in CLIENT_TIMEOUTS):
                raise ClusterError(f"expected `kubectl {' '.join(arguments)}` to succeed, it failed: {error[-2000:]}")
            self.progress(f"  kubectl timed out waiting for the API server ({attempt}/{APPLY_ATTEMPTS}); applying "
                          f"the {what} again")
        self.progress(f"  applied {len(items)} {what} ({time.monotonic() - started:.1f}s)")

    def _install(self) -> None:
        self.progress("CRDs and the Kueue and KEDA installs (webhooks, APIServices, RBAC)")
        kubectl = program("kubernetes", "kubectl")
        self.kueue_ports = {("kueue-system", "kueue-webhook-service"): self.state.port("kueue-webhook"),
                            ("kueue-system", "kueue-visibility-server"): self.state.port("kueue-visibility"),
                            ("kueue-system", "kueue-controller-manager-metrics-service"): self.state.port("kueue-metrics")}
        self.keda_ports = {("keda", "keda-admission-webhooks"): self.state.port("keda-webhooks"),
                           ("keda", "keda-metrics-apiserver"): self.state.port("keda-metrics-apiserver"),
                           ("keda", "keda-operator"): self.state.port("keda-operator-grpc")}
        kueue_objects = objects.on_loopback(objects.upstream_install(kubectl, KUEUE, "config/default"), self.kueue_ports)
        keda_objects = objects.on_loopback(objects.upstream_install(kubectl, KEDA, "config/default"), self.keda_ports,
                                           ca_bundle=self.ca.cert.read_bytes())
        operator_objects = [obj for install in operators.INSTALLS for obj in objects.on_loopback(
            operators.without_dropped(install, objects.upstream_install(kubectl, install.module, install.path)),
            operators.loopback_ports(self.state.port))]
        product = [obj for module, paths in crds.PRODUCT_CRDS.items() for obj in objects.yaml_files(module, paths)]
        product += [obj for path in crds.VENDORED_CRDS for obj in objects.local_yaml_file(path)]
        first_kueue, rest_kueue = objects.split_crds(kueue_objects)
        first_keda, rest_keda = objects.split_crds(keda_objects)
        first_operators, rest_operators = objects.split_crds(operator_objects)
        first = first_kueue + first_keda + first_operators + product + [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "monitoring"}}]
        self.apply(self._changed_crds(first), "CRDs and namespaces (new or changed)")
        names = [f"crd/{o['metadata']['name']}" for o in first if o["kind"] == "CustomResourceDefinition"]
        self.kubectl("wait", "--for=condition=Established", f"--timeout={int(self._remaining(120))}s", *names,
                     timeout=self._remaining(130))
        self.progress(f"  {len(names)} CRDs Established")
        self.apply(rest_kueue + rest_keda + rest_operators, "Kueue, KEDA and operator objects")

    def changed_crds(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self._changed_crds(items)

    def _changed_crds(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The objects whose content differs from what the cluster stores (by a hash annotation).

        Why: a server-side apply of an unchanged multi-megabyte CRD (Argo's full CRDs are 11 MB)
        still costs the apiserver seconds of managed-fields work; a restart on an existing state
        dir (etcd kept) skips them.
        """
        for item in items:
            digest = hashlib.sha256(json.dumps(item, sort_keys=True).encode()).hexdigest()[:16]
            item.setdefault("metadata", {}).setdefault("annotations", {})[CONTENT_HASH] = digest
        stored: dict[tuple[str, str], str | None] = {}
        for kind, path in (("CustomResourceDefinition", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"),
                           ("Namespace", "/api/v1/namespaces")):
            # Metadata only: the stored CRDs are megabytes that this decision does not need.
            status, body = readiness.http_status(
                self.apiserver_url + path, ca=self.ca.cert, client=self.admin, timeout=self._remaining(60),
                headers={"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"})
            if status != 200:
                raise ClusterError(f"expected to list {kind}s (HTTP 200), got HTTP {status}: {body[:300]}")
            for entry in json.loads(body).get("items") or []:
                stored[(kind, entry["metadata"]["name"])] = (entry["metadata"].get("annotations") or {}).get(CONTENT_HASH)
        return [i for i in items
                if stored.get((i["kind"], i["metadata"]["name"])) != i["metadata"]["annotations"][CONTENT_HASH]]

    def _kwok(self) -> None:
        self.progress("KWOK and its GPU nodes")
        config = self.state_dir / "kwok.yaml"
        config.write_text(kwok.stages_config())
        port = self.state.port("kwok")
        record = self._start("kwok", [
            str(program("kwok", "kwok")), f"--kubeconfig={self.kubeconfigs['kwok']}", f"--config={config}",
            "--manage-all-nodes=false", f"--manage-nodes-with-label-selector={'='.join(kwok.MANAGED_LABEL)}",
            f"--server-address=127.0.0.1:{port}", "--node-lease-duration-seconds=40", f"--cidr={KWOK_POD_CIDR}",
        ], endpoint=f"http://127.0.0.1:{port}")
        self._ready(record, readiness.http_ok(f"http://127.0.0.1:{port}/healthz"), cap=60)
        self.apply(kwok.nodes(), "nodes")
        names = [f"node/{n['metadata']['name']}" for n in kwok.nodes()]
        self.kubectl("wait", "--for=condition=Ready", f"--timeout={int(self._remaining(60))}s", *names,
                     timeout=self._remaining(70))
        self.progress(f"  {len(names)} nodes Ready")

    def _kueue_configuration(self) -> dict[str, Any]:
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
            "namespace": KUEUE_SA[0],
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.state.port('kueue-health')}"},
            "metrics": {"bindAddress": f"127.0.0.1:{self.state.port('kueue-metrics')}",
                        "enableClusterQueueResources": True},
            "webhook": {"port": self.state.port("kueue-webhook"), "host": "127.0.0.1",
                        "certDir": str(self.state_dir / "kueue" / "certs")},
            "visibilityServer": {"bindAddress": "127.0.0.1", "bindPort": self.state.port("kueue-visibility")},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": True, "webhookServiceName": "kueue-webhook-service",
                                       "webhookSecretName": "kueue-webhook-server-cert"},
            "clientConnection": {"qps": 300, "burst": 500},
            "integrations": {"frameworks": KUEUE_FRAMEWORKS},
            **self._kueue_platform(),
        }

    def _kueue_platform(self) -> dict[str, Any]:
        """Kueue as the platform's operator configures it (`--monitoring openshift`: the Red Hat build of Kueue's
        namespace selection, OpenShift AI's default frameworks: gpuaas.cluster.profiles.OPENSHIFT_KUEUE)."""
        settings = self.profile.kueue
        if settings is None:
            return {}
        names = {"RayJob": "ray.io/rayjob", "RayCluster": "ray.io/raycluster", "PyTorchJob": "kubeflow.org/pytorchjob",
                 "Pod": "pod", "Deployment": "deployment", "StatefulSet": "statefulset"}
        return {"managedJobsNamespaceSelector": settings.managed_jobs_namespace_selector,
                "integrations": {"frameworks": [names[f] for f in settings.frameworks]}}

    def _kueue(self) -> None:
        self.progress("Kueue")
        config = self.state_dir / "kueue" / "configuration.yaml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(yaml.safe_dump(self._kueue_configuration(), sort_keys=False))
        # The ConfigMap a Deployment of Kueue mounts its configuration from, holding what this Kueue runs with
        # (upstream's install applied its own default there): what reads Kueue's configuration from the
        # cluster, as `gpuaas doctor` does, sees the selector and frameworks in force.
        self.apply([{"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "kueue-manager-config", "namespace": KUEUE_SA[0]},
                     "data": {"controller_manager_config.yaml": config.read_text()}}], "Kueue's configuration ConfigMap")
        self._kueue_certificates()
        health = self.state.port("kueue-health")
        # --kubeconfig, not $KUBECONFIG: Kueue's visibility API server reads the flag for its delegated
        # authentication (pkg/visibility/server.go), and falls back to in-cluster config without it.
        record = self._start("kueue", [str(program("kueue", "kueue")), f"--config={config}", "--zap-log-level=2",
                                       f"--kubeconfig={self.kubeconfigs['kueue']}"],
                             endpoint=f"https://127.0.0.1:{self.state.port('kueue-webhook')}")
        self._ready(record, readiness.http_ok(f"http://127.0.0.1:{health}/readyz"), cap=120)
        probe = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                 "metadata": {"name": "gpuaas-webhook-probe"}, "spec": {}}

        def webhooks_answer() -> str | None:
            done = self.kubectl("create", "--dry-run=server", "-o", "name", "-f", "-", input_text=json.dumps(probe),
                                check=False, timeout=30)
            return None if done.returncode == 0 else done.stderr.strip()[-300:]
        readiness.wait("Kueue's webhooks", webhooks_answer, timeout_s=self._remaining(90), record=record)
        self.progress("  Kueue's webhooks answer")

    def _kueue_certificates(self) -> None:
        """Kueue's webhook certificate, in its Secret and in its cert dir, before Kueue starts.

        With `internalCertManagement`, Kueue's cert rotator (open-policy-agent/cert-controller)
        keeps the certificate in the Secret `kueue-webhook-server-cert` and waits for the kubelet to
        mount that Secret into `webhook.certDir`, then injects the CA into its webhook
        configurations and CRDs. There is no kubelet volume here, so gpuaas does the mount's part:
        it issues the pair the rotator would (a `kueue-ca` CA, serving `<service>.kueue-system.svc`),
        stores it in the Secret and writes the same files. The rotator then finds a valid
        certificate, keeps it, and injects the CA as in a cluster.
        """
        namespace, service = KUEUE_SA[0], "kueue-webhook-service"
        kueue_ca = certificates.certificate_authority(self.pki, "kueue-ca", "kueue-ca", rsa_key=True,
                                                        dns_names=("kueue-ca",))
        serving = certificates.issue(kueue_ca, self.pki, "kueue-webhook", f"{service}.{namespace}.svc", server=True,
                                     dns_names=certificates.service_dns_names(service, namespace))
        files = {"ca.crt": kueue_ca.cert, "ca.key": kueue_ca.key, "tls.crt": serving.cert, "tls.key": serving.key}
        cert_dir = self.state_dir / "kueue" / "certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        for name, source in files.items():
            if name != "ca.key":
                shutil.copyfile(source, cert_dir / name)
        self.apply([{"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                     "metadata": {"name": "kueue-webhook-server-cert", "namespace": namespace},
                     "data": {name: base64.b64encode(path.read_bytes()).decode() for name, path in files.items()}}],
                   "Kueue webhook certificate Secret")

    def _operators(self) -> None:
        """KubeRay and the training-operator, as their ServiceAccounts (gpuaas.cluster.operators)."""
        self.progress("operators: KubeRay, Kubeflow training-operator")
        ray_health = self.state.port("kuberay-health")
        kuberay = self._start("kuberay-operator", operators.kuberay_argv(
            program("kuberay", "ray-operator"), self.kubeconfigs["kuberay"], self.state.port("kuberay-metrics"),
            ray_health), endpoint=f"http://127.0.0.1:{self.state.port('kuberay-metrics')}/metrics")
        secret, certs = operators.training_operator_certificates(self.pki, self.state_dir)
        self.apply([secret], "training-operator webhook certificate Secret")
        health, webhook = self.state.port("training-operator-health"), self.state.port("training-operator-webhook")
        argv = operators.training_operator_argv(
            program("training-operator", "training-operator.v1"), self.kubeconfigs["training-operator"],
            self.state.port("training-operator-metrics"), health, webhook)
        try:
            wrapped = operators.with_certificates_mounted(certs, argv)
        except FileNotFoundError as error:
            raise ClusterError(str(error)) from None
        training = self._start("training-operator", wrapped, env=operators.training_operator_env(),
                               endpoint=f"https://127.0.0.1:{webhook}")
        training.argv = argv  # after `exec`, /proc shows the operator's own command line (what `down` checks)
        self.state.save()
        self._ready(kuberay, readiness.http_ok(f"http://127.0.0.1:{ray_health}/readyz"), cap=60)
        self._ready(training, readiness.http_ok(f"http://127.0.0.1:{health}/readyz"), cap=120)

        def webhook_answers() -> str | None:
            done = self.kubectl("create", "--dry-run=server", "-o", "name", "-f", "-",
                                input_text=json.dumps(operators.probe_pytorchjob()), check=False, timeout=30)
            return None if done.returncode == 0 else done.stderr.strip()[-300:]
        readiness.wait("the training-operator's webhooks", webhook_answers, timeout_s=self._remaining(60),
                       record=training)
        self.progress("  the training-operator's webhooks answer")

    def _keda(self) -> None:
        self.progress("KEDA (operator, admission webhooks, metrics API server)")
        cert_dir = self.state_dir / "keda" / "certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        for name, source in (("tls.crt", self.keda_cert.cert), ("tls.key", self.keda_cert.key), ("ca.crt", self.ca.cert)):
            shutil.copyfile(source, cert_dir / name)
        env = {"KUBECONFIG": str(self.kubeconfigs["keda"]), "POD_NAMESPACE": KEDA_SA[0], "WATCH_NAMESPACE": "",
               "KEDA_CLUSTER_OBJECT_NAMESPACE": KEDA_SA[0], "KEDA_HTTP_DEFAULT_TIMEOUT": "3000"}
        # The platform's KEDA reads ClusterTriggerAuthentication references from its own namespace (OpenShift's
        # Custom Metrics Autoscaler: openshift-keda; the values' keda.namespace names the same)
        env["KEDA_CLUSTER_OBJECT_NAMESPACE"] = self.profile.keda_namespace
        keda_kubeconfig = str(self.kubeconfigs["keda"])
        operator_health, webhooks_health = self.state.port("keda-operator-health"), self.state.port("keda-webhooks-health")
        operator_argv = [
            str(program("keda", "operator")), "--leader-elect=false", "--zap-log-level=info",
            f"--metrics-bind-address=127.0.0.1:{self.state.port('keda-operator-metrics')}",
            f"--health-probe-bind-address=127.0.0.1:{operator_health}",
            f"--metrics-service-bind-address=127.0.0.1:{self.state.port('keda-operator-grpc')}",
            f"--cert-dir={cert_dir}", "--enable-cert-rotation=false", "--enable-webhook-patching=false",
            "--enable-apiservice-patching=false",
        ]
        if self.profile.operator_managed:
            # KEDA's scalers query the URL the product's ScaledObjects name (a Service of the profile's
            # Prometheus): resolved, as cluster DNS would, by an /etc/hosts of its own (monitoring_pods.with_hosts).
            from gpuaas.cluster.monitoring_pods import hosts_file, with_hosts

            names = prometheus_operator.cluster_names(self.profile, self.state_dir)
            operator_argv = with_hosts(operator_argv, hosts_file(self.state_dir / "keda" / "etc-hosts", names))
        operator = self._start("keda-operator", operator_argv, env=env,
                               endpoint=f"127.0.0.1:{self.state.port('keda-operator-grpc')}")
        operator.argv = operator_argv[operator_argv.index(str(program("keda", "operator"))):]
        self.state.save()
        webhooks = self._start("keda-admission-webhooks", [
            str(program("keda", "webhooks")), "--zap-log-level=info", f"--cert-dir={cert_dir}",
            f"--port={self.state.port('keda-webhooks')}",
            f"--metrics-bind-address=127.0.0.1:{self.state.port('keda-webhooks-metrics')}",
            f"--health-probe-bind-address=127.0.0.1:{webhooks_health}",
        ], env=env, endpoint=f"https://127.0.0.1:{self.state.port('keda-webhooks')}")
        adapter = self._start("keda-metrics-apiserver", [
            str(program("keda", "adapter")), "--bind-address=127.0.0.1",
            f"--secure-port={self.state.port('keda-metrics-apiserver')}",
            f"--client-ca-file={self.ca.cert}", f"--tls-cert-file={cert_dir / 'tls.crt'}",
            f"--tls-private-key-file={cert_dir / 'tls.key'}", f"--cert-dir={cert_dir}",
            f"--lister-kubeconfig={keda_kubeconfig}", f"--authentication-kubeconfig={keda_kubeconfig}",
            f"--authorization-kubeconfig={keda_kubeconfig}",
            f"--metrics-service-address=127.0.0.1:{self.state.port('keda-operator-grpc')}",
            f"--port={self.state.port('keda-adapter-metrics')}", "--zap-log-level=error",
        ], env=env, endpoint=f"https://127.0.0.1:{self.state.port('keda-metrics-apiserver')}")
        self._ready(operator, readiness.http_ok(f"http://127.0.0.1:{operator_health}/readyz"))
        self._ready(webhooks, readiness.http_ok(f"http://127.0.0.1:{webhooks_health}/readyz"))
        readiness.wait("KEDA's webhooks", lambda: keda_webhooks_answer(self.kubectl(
            "create", "--dry-run=server", "-o", "name", "-f", "-", input_text=json.dumps(KEDA_WEBHOOK_PROBE),
            check=False, timeout=30)), timeout_s=self._remaining(90), record=webhooks)
        self.progress("  KEDA's webhooks answer")

        def api_service_available() -> str | None:
            done = self.kubectl("get", "apiservice", "v1beta1.external.metrics.k8s.io", "-o",
                                "jsonpath={.status.conditions[?(@.type=='Available')].status} "
                                "{.status.conditions[?(@.type=='Available')].message}", check=False, timeout=30)
            return None if done.stdout.startswith("True") else done.stdout or done.stderr
        self._ready(adapter, api_service_available)

    # -- monitoring ------------------------------------------------------------------------------
    def _monitoring(self) -> None:
        self.progress("DCGM-like exporter (stand-in) and Prometheus")
        exporter_port = self.state.port("gpu-exporter")
        exporter = self._start("gpu-exporter", [
            sys.executable, "-m", "gpuaas.cluster.gpu_exporter", f"--kubeconfig={self.admin_kubeconfig}",
            f"--port={exporter_port}"], endpoint=f"http://127.0.0.1:{exporter_port}/metrics",
            env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        self._ready(exporter, readiness.http_ok(f"http://127.0.0.1:{exporter_port}/metrics"), cap=30)
        token = self._prometheus_token()
        if self.profile.operator_managed:
            host = alerting.webhook_host(self.state_dir)
            alerting.start_proxy(self, host, alerting.OPERATOR_WEBHOOK_PORT)
            self.state.endpoints.update(prometheus_operator.start(self, self.profile, token, host))
            self.state.save()
            return
        binary = shutil.which("prometheus")
        if binary is None:
            raise ClusterError("expected the `prometheus` program (Debian package prometheus) on PATH, found none; "
                               "run `make setup` (it installs it) or `apt-get install -y prometheus`")
        rules, alertmanager_port = None, None
        if "events" in self.state.parts:
            rules, alertmanager_port = alerting.start(self, self.idle_rule, argo_events.webhook_token_file(self))
            self.progress("Prometheus (with the product's rules, alerting to Alertmanager)")
        port = self.state.port("prometheus")
        config = self.state_dir / "prometheus" / "prometheus.yml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(yaml.safe_dump(alerting.prometheus_file([
            {"job_name": "dcgm-exporter", "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}]},
            {"job_name": "kueue", "scheme": "https", "tls_config": {"insecure_skip_verify": True},
             "authorization": {"credentials_file": str(token)},
             "static_configs": [{"targets": [f"127.0.0.1:{self.state.port('kueue-metrics')}"]}]},
        ], rules=rules, alertmanager_port=alertmanager_port), sort_keys=False))
        record = self._start("prometheus", monitoring.prometheus_argv(binary, config, config.parent / "tsdb", port),
                             endpoint=f"http://127.0.0.1:{port}")
        self._ready(record, readiness.http_ok(f"http://127.0.0.1:{port}/-/ready"), cap=30)
        if rules is not None:
            readiness.wait("Prometheus's rules and Alertmanager", lambda: alerting.prometheus_wired(
                f"http://127.0.0.1:{port}", rules, alertmanager_port), timeout_s=self._remaining(30), record=record)
            self.progress("  Prometheus evaluates the product's rules and knows the Alertmanager")

    def _prometheus_token(self) -> Path:
        """A ServiceAccount token Prometheus presents to Kueue's authenticated metrics endpoint."""
        self.apply([
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "prometheus", "namespace": "monitoring"}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": "gpuaas-prometheus-kueue-metrics"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kueue-metrics-reader"},
             "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]},
        ], "Prometheus identity objects")
        done = self.kubectl("create", "token", "prometheus", "-n", "monitoring", "--duration=720h")
        path = self.state_dir / "prometheus" / "token"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(done.stdout.strip())
        path.chmod(0o600)
        return path

    # -- the real node --------------------------------------------------------------------------
    def _node(self) -> None:
        """The real node (gpuaas.cluster.node) as one process of the cluster.

        Its images are built first (cached by their inputs), then `python -m gpuaas.cluster.node`
        signs the kubelet's certificates with the cluster CA, starts containerd, the kubelet and
        the stand-in for kube-proxy (the `kubernetes` Service and the Services of
        gpuaas.cluster.services), and imports the images; ready once its Node is Ready. Labelled
        and tainted `gpuaas.io/pod-runtime=kubelet`: only pods that ask for it (Argo's, through the
        controller's workflowDefaults; Argo Events') land on it, never a tenant's pod meant for KWOK.
        containerd's image store is kept in the cache (`<cache>/node/containerd`, or `containerd-2`... while
        another cluster's node holds it), so a second start imports nothing. Nodes of several clusters
        run side by side (gpuaas.cluster.mount_namespace).
        """
        from gpuaas.cluster import images

        self.progress("the real node: images (built once, cached), kubelet, containerd, service forwarder")
        parts = set(self.state.parts)
        built = [images.build_pause_image(), images.build_argoexec_image(), images.build_step_image()]
        if "events" in parts:
            built.append(images.build_argo_events_image())
        forwarded = services.for_parts(parts, self.profile.name)
        self.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                    for ns in sorted({service.namespace for service in forwarded})]
                   + [service.service() for service in forwarded], "Services for programs on loopback")
        ready_file = self.state_dir / "node.json"
        key, value = argo_workflows.NODE_LABEL
        record = self._start("node", [
            sys.executable, "-m", "gpuaas.cluster.node", f"--server={self.apiserver_url}", f"--ca-cert={self.ca.cert}",
            f"--ca-key={self.ca.key}", f"--name={NODE_NAME}", f"--workdir={self.state_dir / 'node'}",
            f"--image-root={cache_dir() / 'node' / 'containerd'}", f"--ready-file={ready_file}",
            f"--label={key}={value}", f"--taint={key}={value}:NoSchedule",
            *(f"--forward={s.cluster_ip}:{s.port}={self._forward_target(s)}" for s in forwarded),
            *(f"--image={image.archive}" for image in built),
        ], env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])}, stop_seconds=90)
        self._ready(record, lambda: None if ready_file.exists() else "the node has not registered Ready yet",
                    cap=600)
        report = json.loads(ready_file.read_text())
        record.endpoint = f"{report['node_ip']} ({report['bridge']})"
        self.state.endpoints["node"] = f"{NODE_NAME} {report['node_ip']}"
        self.state.save()
        imported = {name: seconds for name, seconds in report["import_s"].items() if seconds}
        self.progress(f"  node Ready {report['ready_s']:.1f}s after start; images imported: "
                      f"{', '.join(f'{n} {s:.1f}s' for n, s in imported.items()) or 'none needed'}")

    def _forward_target(self, service: services.LocalService) -> str:
        """HOST:PORT of the program behind a forwarded Service: with a monitoring profile, Prometheus is the
        operator's pod at its loopback address (gpuaas.cluster.monitoring_pods)."""
        if service is services.PROMETHEUS and self.profile.operator_managed:
            return self.state.endpoints["prometheus"].split("://", 1)[1]
        if service is services.THANOS_QUERIER:
            return self.state.endpoints["thanos-querier"].split("://", 1)[1]
        return f"127.0.0.1:{self.state.port(service.state_port)}"

    # -- down and status -------------------------------------------------------------------------
    def down(self, quiet: bool = False, state: ClusterState | None = None) -> list[str]:
        """Stop every recorded process, last started first; the names stopped. `state`: the records to stop (up's
        own, when its start failed), else the state dir's."""
        state = state or self.load()
        if state is None:
            return []
        stopped = []
        for record in sorted(state.processes.values(), key=lambda r: r.started_at, reverse=True):
            if processes.stop(record):
                stopped.append(record.name)
                if not quiet:
                    self.progress(f"  stopped {record.name} (pid {record.pid})")
            record.state = "stopped"
        # a node SIGKILLed after its stop_seconds (or killed by the OOM killer) left its programs in its
        # mount namespace: kill them now, or they would keep the node registered and its mounts alive
        reaped = mount_namespace.reap(self.state_dir / "node" / "host")
        if reaped and not quiet:
            self.progress(f"  killed {len(reaped)} processes left in the node's mount namespace")
        state.phase = "stopped"
        _save_if_possible(state)
        return stopped

    def status(self) -> dict[str, Any]:
        """Each component with its state, pid, endpoint, log file and memory."""
        state = self.load()
        if state is None:
            return {"stateDir": str(self.state_dir), "phase": "absent", "components": []}
        components = []
        for record in sorted(state.processes.values(), key=lambda r: r.started_at):
            running = processes.alive(record)
            rss = processes.rss_bytes(record)
            components.append({"name": record.name, "state": record.state if running else
                               ("stopped" if record.state in ("stopped", "ready") else record.state),
                               "running": running, "pid": record.pid, "endpoint": record.endpoint,
                               "log": record.log, "rssBytes": rss, "readySeconds": record.ready_seconds})
        all_running = bool(components) and all(c["running"] for c in components)
        phase = state.phase if (state.phase != "ready" or all_running) else "degraded"
        return {"stateDir": state.state_dir, "phase": phase, "kubeconfig": state.kubeconfig,
                "readySeconds": state.ready_seconds, "versions": state.versions, "parts": state.parts,
                **({"idleRule": state.idle_rule} if state.idle_rule else {}),
                # no URL of a process that stopped: a stopped cluster's endpoints are not where anything answers
                "endpoints": {**state.endpoints, **(argo_events.live_endpoints(self) if running_parts(state) else {})}
                if any(c["running"] for c in components) else {},
                "components": components}


def running_parts(state: ClusterState) -> bool:
    """Whether the events part was started and its processes may answer (live endpoints are looked up)."""
    return "events" in state.parts and state.phase == "ready"


def state_as_json(state: ClusterState) -> str:
    return json.dumps(asdict(state), indent=2)


def _save_if_possible(state: ClusterState) -> bool:
    """Save the state; on a full or read-only disk say so on stderr and go on (what is being stopped is stopped
    from the records in memory)."""
    try:
        state.save()
    except OSError as error:
        print(f"gpuaas cluster: could not write {state.state_dir}: {error}; stopping the processes anyway",
              file=sys.stderr, flush=True)
        return False
    return True
