"""Argo Workflows on the stack (`gpuaas cluster up --with argo`): the archive's PostgreSQL, the
workflow-controller and `argo server` with the UI.

What is upstream's, unchanged: the CRDs (installed with the control plane), the cluster install's
RBAC, ServiceAccounts, ConfigMap and Service (`manifests/cluster-install-no-crds` of the pinned
module, rendered with the built kubectl; its two Deployments are replaced by local processes, as
for Kueue and KEDA), the programs (static builds from stack/argo-workflows, the argo CLI with the
real UI embedded). Each process authenticates with a client certificate as its ServiceAccount
(`argo/argo`, `argo/argo-server`), so upstream's RBAC is what authorizes it.

What is configured for this machine (the ConfigMap `argo/workflow-controller-configmap`):
- `persistence`: the archive in PostgreSQL (gpuaas.cluster.postgres) on 127.0.0.1, as role `argo`
  with its password in Secret `argo/argo-postgres-config`.
- `metricsConfig`: plain HTTP on a free port (upstream's default is TLS on 9090), which the stack's
  Prometheus scrapes.
- `workflowDefaults`: every workflow's pods select and tolerate the real node
  (`gpuaas.io/pod-runtime=kubelet`): without it the scheduler could put them on KWOK's CPU node,
  where KWOK would mark them Succeeded without running anything.
- the executor image `gpuaas.local/argoexec:v4.0.5`, never pulled (imported into the node).

`argo server` runs with `--auth-mode server --auth-mode client` (the UI works without a token; API
clients may present a ServiceAccount token and get exactly its permissions) and `--secure=false`:
plain HTTP, because the machine is loopback-only and the audit client and the browser test need
no CA. Neither program has a flag for its listen address: both listen on all interfaces of this
machine (loopback and the node's bridge), the workflow-controller's health server on the fixed
port 6060 (a second cluster's controller logs that the port is taken and runs on).
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

import yaml

from gpuaas.cluster import objects, postgres, readiness, services
from gpuaas.cluster.binaries import PLACEHOLDER_UI, program
from gpuaas.cluster.images import ARGOEXEC_IMAGE
from gpuaas.invocation import command

if TYPE_CHECKING:
    from gpuaas.cluster.stack import Cluster

MODULE = "github.com/argoproj/argo-workflows/v4"
NAMESPACE = "argo"
CONTROLLER_SA = (NAMESPACE, "argo")
SERVER_SA = (NAMESPACE, "argo-server")
CONFIGMAP = "workflow-controller-configmap"
POSTGRES_SECRET = "argo-postgres-config"
NODE_LABEL = ("gpuaas.io/pod-runtime", "kubelet")
"""The real node's label and taint (gpuaas.cluster.stack): what Argo's and Argo Events' pods select and tolerate."""

JSON = dict[str, Any]


def node_placement() -> JSON:
    """nodeSelector and tolerations that put a pod on the real node, and only there."""
    key, value = NODE_LABEL
    return {"nodeSelector": {key: value},
            "tolerations": [{"key": key, "operator": "Equal", "value": value, "effect": "NoSchedule"}]}


def controller_config(database_port: int, metrics_port: int, host_aliases: list[JSON] | None = None) -> dict[str, str]:
    """The ConfigMap's data (each key a YAML document, as the controller reads them)."""
    persistence = {
        "archive": True, "nodeStatusOffLoad": False,
        "postgresql": {"host": "127.0.0.1", "port": database_port, "database": postgres.DATABASE,
                       "tableName": postgres.TABLE,
                       "userNameSecret": {"name": POSTGRES_SECRET, "key": "username"},
                       "passwordSecret": {"name": POSTGRES_SECRET, "key": "password"}},
    }
    metrics = {"enabled": True, "path": "/metrics", "port": metrics_port, "secure": False}
    defaults: JSON = {"spec": node_placement()}
    if host_aliases:
        # the stack's stand-in for cluster DNS (gpuaas.cluster.services.host_aliases): the step pods reach a
        # monitoring profile's Prometheus by the name the product's values give
        defaults["spec"]["hostAliases"] = host_aliases
    return {"persistence": yaml.safe_dump(persistence, sort_keys=False),
            "metricsConfig": yaml.safe_dump(metrics, sort_keys=False),
            "workflowDefaults": yaml.safe_dump(defaults, sort_keys=False)}


def start(cluster: Cluster) -> None:
    """PostgreSQL, the install, the workflow-controller and the Argo Server, each waited for."""
    _postgres(cluster)
    _install(cluster)
    _controller(cluster)
    _server(cluster)


def _postgres(cluster: Cluster) -> None:
    cluster.progress("PostgreSQL for Argo's workflow archive (Debian's server, a cluster of our own)")
    database = postgres.Postgres(cluster.state_dir / "postgres", cluster.state.port("postgres"))
    try:
        database.initialize(owned_from=cluster.state_dir)
    except postgres.PostgresError as error:
        raise cluster.error(str(error)) from None
    record = cluster.start_process("postgres", database.argv(), endpoint=f"postgresql://127.0.0.1:{database.port}/argo",
                                   user=postgres.run_as(), stop_signal=2, stop_seconds=30)  # SIGINT: fast shutdown
    cluster.wait_ready(record, database.answers, cap=60)
    database.ensure_archive_database()
    cluster.database = database


def _install(cluster: Cluster) -> None:
    cluster.progress("Argo Workflows' install (RBAC, ServiceAccounts, ConfigMap) and the archive's Secret")
    server_port = cluster.state.port("argo-server")
    install = objects.on_loopback(objects.upstream_install(program("kubernetes", "kubectl"), MODULE,
                                                           "manifests/cluster-install-no-crds"),
                                  {(NAMESPACE, "argo-server"): server_port})
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIGMAP, "namespace": NAMESPACE},
                 "data": controller_config(cluster.database.port, cluster.state.port("argo-controller-metrics"),
                                           services.host_aliases(cluster.profile))}
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": POSTGRES_SECRET, "namespace": NAMESPACE},
              "data": {"username": base64.b64encode(postgres.ROLE.encode()).decode(),
                       "password": base64.b64encode(cluster.database.password().encode()).decode()}}
    cluster.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}], "namespace argo")
    cluster.apply([o for o in install if o["kind"] != "ConfigMap"] + [configmap, secret], "Argo Workflows objects")


def _controller(cluster: Cluster) -> None:
    cluster.progress("Argo workflow-controller")
    metrics = cluster.state.port("argo-controller-metrics")
    kubeconfig = cluster.identity_kubeconfig("argo-workflow-controller", *CONTROLLER_SA)
    record = cluster.start_process("argo-workflow-controller", [
        str(program("argo-workflows", "workflow-controller")), f"--kubeconfig={kubeconfig}", "--namespace", NAMESPACE,
        "--configmap", CONFIGMAP, "--executor-image", ARGOEXEC_IMAGE, "--executor-image-pull-policy", "Never",
        "--loglevel", "info",
    ], env={"LEADER_ELECTION_DISABLE": "true"}, endpoint=f"http://127.0.0.1:{metrics}/metrics")
    cluster.wait_ready(record, readiness.http_ok(f"http://127.0.0.1:{metrics}/metrics"), cap=120)

    def archive_migrated() -> str | None:
        return None if _archive_table_exists(cluster) else "the controller has not created argo_archived_workflows yet"
    readiness.wait("the workflow archive's tables", archive_migrated, timeout_s=cluster.remaining(120), record=record)


def _archive_table_exists(cluster: Cluster) -> bool:
    try:
        cluster.database.archived_count()
    except postgres.PostgresError:
        return False
    return cluster.database._psql("SELECT to_regclass('public.argo_archived_workflows') IS NOT NULL",
                                  postgres.DATABASE) == "t"


def _server(cluster: Cluster) -> None:
    cluster.progress("Argo Server (API, UI, archive)")
    port = cluster.state.port("argo-server")
    kubeconfig = cluster.identity_kubeconfig("argo-server", *SERVER_SA)
    url = f"http://127.0.0.1:{port}"
    record = cluster.start_process("argo-server", [
        str(program("argo-workflows", "argo")), "server", f"--kubeconfig={kubeconfig}", "--namespace", NAMESPACE,
        "--port", str(port), "--secure=false", "--auth-mode", "server", "--auth-mode", "client",
        "--configmap", CONFIGMAP, "--loglevel", "info",
    ], env={"KUBECONFIG": str(kubeconfig)}, endpoint=url)
    # $KUBECONFIG as well as --kubeconfig: with --auth-mode client the server builds each caller's client from
    # the default loading rules (v4.0.5 util/kubeconfig DefaultRestConfig: $KUBECONFIG or ~/.kube/config, else
    # in-cluster), not from the flag; outside a pod, without it every bearer token got 401 "failed to create
    # REST config".
    cluster.wait_ready(record, readiness.http_ok(f"{url}/api/v1/version"), cap=120)

    def ui_served() -> str | None:
        status, body = readiness.http_status(f"{url}/workflows")
        if status != 200 or not ("<title>Argo</title>" in body or PLACEHOLDER_UI.strip() in body):
            return (f"GET {url}/workflows: HTTP {status}, expected the Argo UI's index.html or upstream's placeholder, "
                    f"found {body[:120]!r}")
        return None
    readiness.wait("the Argo Server's UI page", ui_served, timeout_s=cluster.remaining(30), record=record)
    _, body = readiness.http_status(f"{url}/workflows")
    cluster.state.endpoints["argo-server"] = url
    if "<title>Argo</title>" in body:
        cluster.state.endpoints.update({"argo-ui": f"{url}/workflows", "argo-archive": f"{url}/archived-workflows"})
    else:
        cluster.progress(f"  the Argo UI is not built (upstream's placeholder page): `{command()} cluster build --argo-ui`")
    cluster.state.save()
