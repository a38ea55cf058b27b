"""The real Argo workflow-controller as a test harness for the node: does Argo's executor work here?

Why in the node tests: a pod runtime for the WorkflowTemplates is only right if Argo's own pods run
on it: the `init` container (argoexec init) stages the script and the emissary binary, the `main`
container runs the script under `/var/run/argo/argoexec emissary`, the `wait` sidecar collects
exit code and outputs into a WorkflowTaskResult. Those pods are made by the workflow-controller,
so it runs here (built from stack/argo-workflows, CRDs from the same pinned module), namespaced to
one namespace, with the executor image built by gpuaas.cluster.images. This is not the product's
Argo installation (`gpuaas cluster up --with argo`, branch stack): no archive, no server, no UI.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from kubernetes import client

from gpuaas.cluster.binaries import program
from gpuaas.cluster.images import ARGOEXEC_IMAGE
from gpuaas.upstream import upstream_file
from tests.realstack.control_plane import free_port

ARGO_MODULE = "github.com/argoproj/argo-workflows/v4"
CRDS = ("workflows", "workflowtemplates", "workflowtaskresults", "workflowtasksets", "workflowartifactgctasks",
        "workfloweventbindings", "clusterworkflowtemplates", "cronworkflows")


def install_crds(api_client: client.ApiClient) -> None:
    """Argo's CRDs from the pinned module (manifests/base/crds/minimal), created and waited for."""
    extensions = client.ApiextensionsV1Api(api_client)
    for plural in CRDS:
        body = yaml.safe_load(upstream_file(ARGO_MODULE, f"manifests/base/crds/minimal/argoproj.io_{plural}.yaml")
                              .read_text())
        try:
            extensions.create_custom_resource_definition(body)
        except client.ApiException as error:
            if error.status != 409:
                raise
    deadline = time.monotonic() + 30
    for plural in CRDS:
        while True:
            crd = extensions.read_custom_resource_definition(f"{plural}.argoproj.io")
            if any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or []):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"CRD {plural}.argoproj.io not Established")
            time.sleep(0.2)


def grant_executor(api_client: client.ApiClient, namespace: str, service_account: str = "default") -> None:
    """Upstream's recommended minimum for the emissary executor (quick-start `executor` Role)."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "executor"},
        "rules": [{"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"], "verbs": ["create", "patch"]}]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "executor-default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "executor"},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}]})


@dataclass
class WorkflowController:
    """workflow-controller, namespaced to `namespace`, executor image gpuaas.local/argoexec (never pulled)."""

    kubeconfig: Path
    namespace: str
    log: Path
    metrics_port: int = field(default_factory=free_port)
    """Where the controller serves /metrics on loopback (tests read their custom metrics there)."""
    process: subprocess.Popen | None = field(default=None, repr=False)

    def start(self, api_client: client.ApiClient) -> None:
        """Create the controller's ConfigMap (it exits without one), then start it."""
        core = client.CoreV1Api(api_client)
        # Metrics on a free loopback port: upstream's default is every address's :9090, which any other
        # listener on a 9090 of this machine refuses (seen: a cluster's node forwarding Prometheus's
        # ClusterIP 10.97.0.90:9090, in a real-tier shard beside this one: "bind: address already in use").
        metrics = yaml.safe_dump({"enabled": True, "path": "/metrics", "port": self.metrics_port, "secure": False})
        body = {"metadata": {"name": "workflow-controller-configmap"}, "data": {"metricsConfig": metrics}}
        try:
            core.create_namespaced_config_map(self.namespace, body)
        except client.ApiException as error:
            if error.status != 409:
                raise
            core.replace_namespaced_config_map("workflow-controller-configmap", self.namespace, body)
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), LEADER_ELECTION_DISABLE="true")
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [str(program("argo-workflows", "workflow-controller")), "--namespaced", "--managed-namespace", self.namespace,
                 "--namespace", self.namespace, "--executor-image", ARGOEXEC_IMAGE,
                 "--executor-image-pull-policy", "Never", "--loglevel", "info"],
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def require_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"workflow-controller exited {self.process.returncode}: "
                                 f"{self.log.read_text()[-1500:]}")
