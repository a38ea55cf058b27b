"""Argo Events on the stack (`gpuaas cluster up --with events`): NATS JetStream and the controller.

The EventBus. Argo Events v1.9.11 knows four forms (pkg/apis/events/v1alpha1/eventbus_types.go):
`nats` (NATS Streaming, deprecated) and `jetstream`, for which the controller creates a
StatefulSet of upstream's `nats` image with PersistentVolumeClaims; `kafka`; and `jetstreamExotic`,
which points at an existing JetStream server (`pkg/reconciler/eventbus/installer/exotic_jetstream.go`:
the controller deploys nothing, marks the bus "Skipped", and hands `url`, `accessSecret` and
`streamConfig` to every EventSource and Sensor). Here there is no registry for the `nats` image
and no volume provisioner for the claims, so the bus is `jetstreamExotic`: the pinned nats-server
(stack/nats) runs on 127.0.0.1 with JetStream, its store in the state dir, and user/password
authentication; pods reach it at the fixed ClusterIP of Service `argo-events/eventbus-nats`
(gpuaas.cluster.services), which the node's stand-in for kube-proxy forwards. The product's
rendered EventBus (`jetstream`, three replicas) is what a cluster runs; applied to this stack, it
is replaced by `exotic_event_bus()` (same name, `default` in `gpuaas`), which the EventSources and
Sensors find as they would the rendered one.

The controller runs as upstream installs it, a Deployment (`manifests/cluster-install` of the
pinned module, CRDs left out: the control plane installed them) on the real node, because its
configuration path `/etc/argo-events` is compiled in (a ConfigMap volume in a pod, one file per
machine for a host process). Changed for this machine: the image (`gpuaas.local/argo-events`,
built here: gpuaas.cluster.images), `imagePullPolicy: Never` for it and, through upstream's
`IMAGE_PULL_POLICY` variable, for the EventSource and Sensor Deployments it creates, and the real
node's nodeSelector and toleration.

For the product, `up` also writes two Secrets into the product's namespace `gpuaas`: the bus
credentials (`gpuaas-eventbus-auth`, key `auth.yaml`, as Argo Events mounts it) and the
Alertmanager webhook token (`gpuaas-alertmanager-webhook`, key `token`, as the README has users
create it); the token is also in `<state>/events/webhook-token` for the stack's Alertmanager
(gpuaas.cluster.alerting), which posts with it.
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuaas.cluster import certificates, objects, readiness, services
from gpuaas.cluster.argo_workflows import node_placement
from gpuaas.cluster.binaries import program
from gpuaas.cluster.images import ARGO_EVENTS_IMAGE

if TYPE_CHECKING:
    from gpuaas.cluster.stack import Cluster

MODULE = "github.com/argoproj/argo-events"
NAMESPACE = "argo-events"
CONTROLLER = "controller-manager"
PRODUCT_NAMESPACE = "gpuaas"
BUS_USER = "gpuaas-eventbus"
BUS_SECRET = "gpuaas-eventbus-auth"
BUS_SECRET_KEY = "auth.yaml"
WEBHOOK_SECRET = "gpuaas-alertmanager-webhook"

JSON = dict[str, Any]


def _secret_file(path: Path) -> str:
    """A random secret kept in the state dir (readable by root only), the same across restarts."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_hex(24))
        path.chmod(0o600)
    return path.read_text().strip()


def nats_config(port: int, monitor_port: int, store: Path, password: str, cert: Path, key: Path) -> str:
    """nats-server's configuration: JetStream on 127.0.0.1 over TLS, one user (the EventBus clients).

    TLS because Argo Events' JetStream client always asks for it: with no `tls` in the bus config it
    connects with `nats.Secure(InsecureSkipVerify)` (pkg/eventbus/jetstream/base/jetstream.go,
    v1.9.11), which a plain-text server refuses. The certificate is the cluster CA's.
    """
    return "\n".join([
        f"listen: 127.0.0.1:{port}", f"http: 127.0.0.1:{monitor_port}", "server_name: gpuaas-eventbus",
        f'tls {{ cert_file: "{cert}", key_file: "{key}" }}',
        f'jetstream {{ store_dir: "{store}", max_file_store: 1G, max_memory_store: 256M }}',
        f'authorization {{ user: "{BUS_USER}", password: "{password}" }}', ""])


def start(cluster: Cluster) -> None:
    """NATS, the Secrets the overlay names, the controller's install; waits for the controller pod."""
    _nats(cluster)
    _secrets(cluster)
    _controller(cluster)


def _nats(cluster: Cluster) -> None:
    cluster.progress("NATS JetStream (the EventBus's server, jetstreamExotic)")
    folder = cluster.state_dir / "events"
    folder.mkdir(parents=True, exist_ok=True)
    port, monitor = cluster.state.port("nats"), cluster.state.port("nats-monitor")
    config = folder / "nats.conf"
    serving = certificates.issue(cluster.ca, cluster.pki, "nats", "eventbus-nats.argo-events.svc", server=True,
                                 dns_names=("localhost", *certificates.service_dns_names("eventbus-nats", "argo-events")),
                                 ip_addresses=("127.0.0.1", services.NATS.cluster_ip))
    config.write_text(nats_config(port, monitor, folder / "jetstream", _secret_file(folder / "nats-password"),
                                  serving.cert, serving.key))
    config.chmod(0o600)
    record = cluster.start_process("nats", [str(program("nats", "nats-server")), "-c", str(config)],
                                   endpoint=f"nats://127.0.0.1:{port}")
    cluster.wait_ready(record, readiness.http_ok(f"http://127.0.0.1:{monitor}/healthz?js-enabled-only=true"), cap=30)


def webhook_token_file(cluster: Cluster) -> Path:
    """`<state>/events/webhook-token`, made the first time: the bearer token the stack's Alertmanager
    sends (gpuaas.cluster.alerting) and Secret `gpuaas-alertmanager-webhook` holds."""
    path = cluster.state_dir / "events" / "webhook-token"
    _secret_file(path)
    return path


def _secrets(cluster: Cluster) -> None:
    folder = cluster.state_dir / "events"
    auth = f"username: {BUS_USER}\npassword: {_secret_file(folder / 'nats-password')}\n"
    token = _secret_file(webhook_token_file(cluster))

    def secret(name: str, data: dict[str, str]) -> JSON:
        return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": name, "namespace": PRODUCT_NAMESPACE,
                             "labels": {"app.kubernetes.io/managed-by": "gpuaas-cluster"}},
                "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()}}
    cluster.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PRODUCT_NAMESPACE}},
                   secret(BUS_SECRET, {BUS_SECRET_KEY: auth}), secret(WEBHOOK_SECRET, {"token": token})],
                  "the EventBus and webhook Secrets the product uses here")
    cluster.state.endpoints["webhook-token-file"] = str(folder / "webhook-token")


def exotic_event_bus(name: str = "default") -> JSON:
    """The product's EventBus for this stack: `jetstreamExotic` on the local NATS (see the module docstring)."""
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "EventBus",
            "metadata": {"name": name, "namespace": PRODUCT_NAMESPACE,
                         "labels": {"app.kubernetes.io/name": "gpuaas", "app.kubernetes.io/component": "event-bus"}},
            "spec": {"jetstreamExotic": {"url": f"nats://{services.NATS.url_host}",
                                         "accessSecret": {"name": BUS_SECRET, "key": BUS_SECRET_KEY}}}}


def install_objects(kubectl: Path) -> list[JSON]:
    """Upstream's cluster install without its CRDs, the controller's Deployment set up for the real node."""
    install = [o for o in objects.upstream_install(kubectl, MODULE, "manifests/cluster-install")
               if o["kind"] != "CustomResourceDefinition"]
    for obj in install:
        if obj["kind"] == "Deployment" and obj["metadata"]["name"] == CONTROLLER:
            pod = obj["spec"]["template"]["spec"]
            pod.update(node_placement())
            for container in pod["containers"]:
                container["image"] = ARGO_EVENTS_IMAGE
                container["imagePullPolicy"] = "Never"
                env = [e for e in container.get("env", []) if e["name"] not in ("ARGO_EVENTS_IMAGE", "IMAGE_PULL_POLICY")]
                container["env"] = [*env, {"name": "ARGO_EVENTS_IMAGE", "value": ARGO_EVENTS_IMAGE},
                                    {"name": "IMAGE_PULL_POLICY", "value": "Never"}]
    return install


def _controller(cluster: Cluster) -> None:
    cluster.progress("Argo Events controller (upstream's Deployment, on the real node)")
    cluster.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                   *install_objects(program("kubernetes", "kubectl"))], "Argo Events objects")
    node = cluster.state.processes.get("node")

    def rolled_out() -> str | None:
        done = cluster.kubectl("-n", NAMESPACE, "rollout", "status", f"deployment/{CONTROLLER}", "--timeout=5s",
                               check=False, timeout=30)
        return None if done.returncode == 0 else (done.stdout + done.stderr).strip()[-300:]
    readiness.wait("the Argo Events controller's pod", rolled_out, timeout_s=cluster.remaining(180), record=node,
                   poll_s=1.0)
    cluster.progress("  Argo Events controller ready")


def live_endpoints(cluster: Cluster) -> dict[str, str]:
    """The webhook EventSources' URLs (pod IP, port, endpoint), read from the cluster now; {} if unreadable.

    Why live: the EventSource pods are the product's (applied with the overlay), and a pod's IP
    changes when it restarts. This machine reaches the node's pods on their IPs directly.
    """
    from gpuaas.cluster.binaries import BuildFailed

    try:
        listed = cluster.kubectl("get", "eventsources,pods", "-A", "-o", "json", check=False, timeout=10)
    except (subprocess.TimeoutExpired, OSError, BuildFailed):  # no kubectl built here: `status` still answers
        return {}
    if listed.returncode != 0:
        return {}
    items = json.loads(listed.stdout).get("items") or []
    pods = [i for i in items if i.get("kind") == "Pod" and (i.get("status") or {}).get("phase") == "Running"]
    found: dict[str, str] = {}
    for source in (i for i in items if i.get("kind") == "EventSource"):
        meta = source["metadata"]
        pod = next((p for p in pods if p["metadata"]["namespace"] == meta["namespace"]
                    and (p["metadata"].get("labels") or {}).get("eventsource-name") == meta["name"]), None)
        if pod is None or not pod["status"].get("podIP"):
            continue
        for event, spec in ((source.get("spec") or {}).get("webhook") or {}).items():
            found[f"webhook/{meta['namespace']}/{meta['name']}/{event}"] = \
                f"http://{pod['status']['podIP']}:{spec.get('port')}{spec.get('endpoint', '')}"
    return found
