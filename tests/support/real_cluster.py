"""The real control plane for tests: an admin client, ServiceAccount clients from TokenRequest tokens.

    from tests.support.real_cluster import RealCluster
    cluster.admin                       # kubernetes.client.ApiClient as the cluster admin (system:masters)
    cluster.service_account_client("gpuaas", "gpuaas-reactions")   # an ApiClient acting as that SA
    cluster.service_account_kubeconfig("gpuaas", "gpuaas-reactions", path)  # for `python -m steps` ($KUBECONFIG)
    cluster.kubectl("get", "workloads", "-A")                        # the built kubectl, as admin

Tokens come from the TokenRequest API (`serviceaccounts/<name>/token`), never from the admin's
credentials, so what a client may do is exactly what RBAC grants that ServiceAccount.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from gpuaas.cluster.stack import Cluster


@dataclass
class RealCluster:
    """A running `gpuaas cluster` and clients for it."""

    cluster: Cluster
    kubeconfig: Path

    def __post_init__(self) -> None:
        self.admin: client.ApiClient = config.new_client_from_config(config_file=str(self.kubeconfig))
        loaded = yaml.safe_load(self.kubeconfig.read_text())
        self.server: str = loaded["clusters"][0]["cluster"]["server"]
        self.ca_file: str = loaded["clusters"][0]["cluster"]["certificate-authority"]
        self.audit_start = self._audit_lines()
        """Requests in kube-apiserver's audit log before this session (a reused cluster keeps older ones)."""

    def _audit_lines(self) -> int:
        path = self.cluster.audit_log
        if not path.is_file():
            return 0
        with path.open("rb") as handle:
            return sum(1 for line in handle if line.strip())

    def audited(self) -> list[Any]:
        """This session's audited requests of the product's ServiceAccounts (gpuaas.cluster.audit)."""
        return audited_since(self.cluster.audit_log, self.audit_start)

    @property
    def state_dir(self) -> Path:
        return self.cluster.state_dir

    def endpoint(self, component: str) -> str:
        """The endpoint `gpuaas cluster status` reports for a component (e.g. prometheus)."""
        for entry in self.cluster.status()["components"]:
            if entry["name"] == component:
                return entry["endpoint"]
        raise KeyError(f"expected a component named {component!r} in {self.state_dir}")

    def kubectl(self, *args: str, input_text: str | None = None, check: bool = True,
                timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """The kubectl built from the pinned Kubernetes module, as the admin; a failure fails the test."""
        from gpuaas.cluster.install import InstallError
        from gpuaas.cluster.install import kubectl as run_kubectl

        try:
            return run_kubectl(self.kubeconfig, *args, input_text=input_text, check=check, timeout=timeout)
        except InstallError as error:
            raise AssertionError(str(error)) from None

    def service_account_token(self, namespace: str, name: str, seconds: int = 3600) -> str:
        """A token for the ServiceAccount from the TokenRequest API (the SA must exist)."""
        request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
            audiences=[], expiration_seconds=seconds))
        issued = client.CoreV1Api(self.admin).create_namespaced_service_account_token(name, namespace, request)
        return issued.status.token

    def service_account_client(self, namespace: str, name: str) -> client.ApiClient:
        """An ApiClient that authenticates as the ServiceAccount, and nothing more."""
        configuration = client.Configuration()
        configuration.host = self.server
        configuration.ssl_ca_cert = self.ca_file
        configuration.api_key = {"authorization": self.service_account_token(namespace, name)}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(configuration)

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path) -> Path:
        """A kubeconfig file with the ServiceAccount's token, for processes (`python -m steps`, kubectl)."""
        user = f"system:serviceaccount:{namespace}:{name}"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "gpuaas", "cluster": {"server": self.server, "certificate-authority": self.ca_file}}],
            "users": [{"name": user, "user": {"token": self.service_account_token(namespace, name)}}],
            "contexts": [{"name": "gpuaas", "context": {"cluster": "gpuaas", "user": user, "namespace": namespace}}],
            "current-context": "gpuaas"}, sort_keys=False))
        path.chmod(0o600)
        return path


def eventually(check: Callable[[], Any], *, timeout_s: float = 60.0, poll_s: float = 0.5, what: str = "") -> Any:
    """Poll `check` until it returns a truthy value (returned); fail the test with the last value seen."""
    from gpuaas.cluster.install import InstallError, wait_until

    try:
        return wait_until(check, timeout_s=timeout_s, what=what or "the condition", poll_s=poll_s)
    except InstallError as error:
        raise AssertionError(str(error)) from None


def audited_since(log: Path, start: int) -> list[Any]:
    """The audited requests after the first `start` ones, refusing a log that holds fewer: kube-apiserver rotates
    it (--audit-log-maxsize), and a slice past a rotated log's end is empty, which would judge nothing."""
    from gpuaas.cluster import audit

    every = list(audit.requests(log))
    if len(every) < start:
        raise AssertionError(f"expected kube-apiserver's audit log {log} to hold at least the {start} requests seen "
                             f"when this began, found {len(every)}: it was rotated meanwhile (--audit-log-maxsize), "
                             f"so what happened since cannot be judged; run again on a fresh cluster")
    return every[start:]


@dataclass(frozen=True)
class LogSince:
    """A component's log read from where a test began: an earlier module's lines (the demo's POSTs) or an
    earlier run's on a reused cluster are not the test's."""

    path: Path
    start: int

    @classmethod
    def now(cls, path: Path | str) -> LogSince:
        path = Path(path)
        return cls(path, path.stat().st_size if path.is_file() else 0)

    def lines(self) -> list[str]:
        with self.path.open("rb") as handle:
            handle.seek(self.start)
            return handle.read().decode(errors="replace").splitlines()
