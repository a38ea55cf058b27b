"""Kubeconfig files: the admin's (printed as `export KUBECONFIG=...`) and one per component identity.

Why one per identity: each control-plane program authenticates with its own client certificate
(CN = user, O = groups), so the apiserver's RBAC judges it as it would in a real cluster: the
controller-manager as `system:kube-controller-manager`, Kueue and KEDA as the ServiceAccounts their
upstream RBAC binds.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from gpuaas.cluster.certificates import KeyPair


def write_kubeconfig(path: Path, *, server: str, ca: Path, client: KeyPair, user: str, cluster: str = "gpuaas") -> Path:
    """A kubeconfig with one cluster, one user (client certificate files) and one current context."""
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(client.cert), "client-key": str(client.key)}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
