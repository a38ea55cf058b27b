"""The operators of the job kinds gpuaas releases and resumes: KubeRay and the Kubeflow training-operator.

Why real operators: a RayCluster's pods, a RayJob's cluster and deadline, a PyTorchJob's master
and workers, and what each does when Kueue suspends it (the consequence of a release) are these
controllers' behaviour; the Workload's Finished condition and its pods' readiness come from their
status. Each is built from its pinned module (`stack/kuberay`, `stack/training-operator`: the
versions Kueue v0.19.2 builds its integrations against), installed from its own upstream
kustomization (CRDs, RBAC, webhooks; the Deployment dropped and Services put on loopback by
gpuaas.cluster.objects, as for Kueue) and run as its ServiceAccount (a client certificate naming
it), so upstream's RBAC authorizes it.

KubeRay runs as upstream's `config/default` installs it: without webhooks. The training-operator
always serves validating webhooks (PyTorchJob and the other v1 kinds) with certificates from
open-policy-agent/cert-controller v0.12: its rotator keeps the pair in the Secret
`training-operator-webhook-cert` and waits until the kubelet has mounted that Secret at
`/tmp/k8s-webhook-server/serving-certs` (a path compiled into the operator, `pkg/cert/cert.go`),
where controller-runtime's webhook server also reads it (`os.TempDir()`). There is no kubelet, so
`up` does the mount's part: it issues the pair the rotator accepts (an RSA CA named
`training-operator-ca`, serving `training-operator.kubeflow.svc`), stores it in the Secret, and
starts the operator in a private mount namespace (`unshare --mount`) in which
`<state>/training-operator/serving-certs`, holding the same files, is bind-mounted on that path
(outside the namespace the mount point stays an empty directory). The rotator then keeps the pair
and injects its CA into the webhook configuration itself. Its webhook server has no bind-address
option: it listens on every interface (loopback only on this machine).
"""

from __future__ import annotations

import base64
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuaas.cluster import certificates

JSON = dict[str, Any]

KUBERAY = "github.com/ray-project/kuberay/ray-operator"
TRAINING_OPERATOR = "github.com/kubeflow/training-operator"
KUBERAY_SA = ("default", "kuberay-operator")
TRAINING_OPERATOR_SA = ("kubeflow", "training-operator")
TRAINING_OPERATOR_SERVICE = "training-operator"
TRAINING_OPERATOR_SECRET = "training-operator-webhook-cert"
TRAINING_OPERATOR_CA = "training-operator-ca"
CERT_MOUNT = Path("/tmp/k8s-webhook-server/serving-certs")
"""Where the training-operator expects its certificates (its pod mounts the Secret there)."""


@dataclass(frozen=True)
class Install:
    """One operator's upstream install: the pinned module and the kustomization in it."""

    module: str
    path: str
    service_account: tuple[str, str]
    dropped: frozenset[str] = frozenset()
    """Kinds of the install that `up` writes itself (the training-operator's empty cert Secret)."""


INSTALLS = (
    Install(KUBERAY, "config/default", KUBERAY_SA),
    Install(TRAINING_OPERATOR, "manifests/overlays/standalone", TRAINING_OPERATOR_SA, frozenset({"Secret"})),
)


def loopback_ports(port: Any) -> dict[tuple[str, str], int]:
    """(namespace, Service) -> the local port serving it; `port(name)` allocates from the cluster state."""
    return {(TRAINING_OPERATOR_SA[0], TRAINING_OPERATOR_SERVICE): port("training-operator-webhook")}


def without_dropped(install: Install, objects: list[JSON]) -> list[JSON]:
    return [o for o in objects if o.get("kind") not in install.dropped]


def training_operator_certificates(pki: Path, state_dir: Path) -> tuple[JSON, Path]:
    """The webhook Secret (with a pair the cert rotator keeps) and a folder holding the same files."""
    namespace = TRAINING_OPERATOR_SA[0]
    ca = certificates.certificate_authority(pki, TRAINING_OPERATOR_CA, TRAINING_OPERATOR_CA, rsa_key=True,
                                            dns_names=(TRAINING_OPERATOR_CA,))
    serving = certificates.issue(ca, pki, "training-operator-webhook",
                                 f"{TRAINING_OPERATOR_SERVICE}.{namespace}.svc", server=True,
                                 dns_names=certificates.service_dns_names(TRAINING_OPERATOR_SERVICE, namespace))
    files = {"ca.crt": ca.cert, "ca.key": ca.key, "tls.crt": serving.cert, "tls.key": serving.key}
    mounted = state_dir / "training-operator" / "serving-certs"
    mounted.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        shutil.copyfile(source, mounted / name)
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": TRAINING_OPERATOR_SECRET, "namespace": namespace},
              "data": {name: base64.b64encode(path.read_bytes()).decode() for name, path in files.items()}}
    return secret, mounted


def with_certificates_mounted(certs: Path, argv: list[str]) -> list[str]:
    """`argv` run in its own mount namespace where `certs` is mounted at CERT_MOUNT (the pod's
    Secret volume stands in).

    As root, `unshare --mount`; otherwise a user namespace maps the caller to root inside it, which
    is enough to bind-mount (unprivileged user namespaces must be enabled). `exec` keeps the pid,
    so the recorded process is the operator itself.
    """
    unshare = shutil.which("unshare")
    if unshare is None:
        raise FileNotFoundError("unshare (util-linux) is needed to give the training-operator its certificate "
                                "mount; install util-linux")
    namespaces = ["--mount"] if os.geteuid() == 0 else ["--user", "--map-root-user", "--mount"]
    mount = f'mkdir -p {CERT_MOUNT} && mount --bind "$0" {CERT_MOUNT} && exec "$@"'
    return [unshare, *namespaces, "--propagation", "private", "sh", "-c", mount, str(certs), *argv]


def kuberay_argv(program: Path, kubeconfig: Path, metrics_port: int, health_port: int) -> list[str]:
    return [str(program), f"--kubeconfig={kubeconfig}", "--enable-leader-election=false",
            f"--metrics-addr=127.0.0.1:{metrics_port}", f"--health-probe-bind-address=127.0.0.1:{health_port}",
            "--log-stdout-encoder=console"]


def training_operator_argv(program: Path, kubeconfig: Path, metrics_port: int, health_port: int,
                           webhook_port: int) -> list[str]:
    return [str(program), f"--kubeconfig={kubeconfig}", f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{health_port}", f"--webhook-server-port={webhook_port}",
            f"--webhook-service-name={TRAINING_OPERATOR_SERVICE}", f"--webhook-secret-name={TRAINING_OPERATOR_SECRET}",
            "--zap-log-level=info", "--zap-devel=false"]


def training_operator_env() -> dict[str, str]:
    """The operator reads its namespace (for the Secret and the Service DNS name) from the pod's env."""
    return {"MY_POD_NAMESPACE": TRAINING_OPERATOR_SA[0]}


def probe_pytorchjob() -> JSON:
    """A PyTorchJob for a server-side dry run: answered only once the operator's webhook serves."""
    container = {"name": "pytorch", "image": "registry.invalid/probe:1"}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "gpuaas-webhook-probe", "namespace": "default"},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "Never",
                                                        "template": {"spec": {"containers": [container]}}}}}}

