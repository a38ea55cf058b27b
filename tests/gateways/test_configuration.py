"""Contract: where the gateway finds the API, and what importing it costs (modules, not time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine.apiserver import ApiServer
from steps.gateways import resources as R
from steps.gateways.kubernetes import KubernetesGateway, load_configuration

REPO = Path(__file__).resolve().parents[2]


def test_gpuaas_kube_url_wins(api: ApiServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "does-not-exist"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert load_configuration().host == api.url
    KubernetesGateway().create(R.CONFIG_MAP, {"metadata": {"name": "c", "namespace": "n"}})
    assert api.store.get(R.CONFIG_MAP, "c", "n") is not None


def test_kubeconfig_is_used_without_the_env_var(api: ApiServer, monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "local",
        "clusters": [{"name": "local", "cluster": {"server": api.url}}],
        "users": [{"name": "admin", "user": {"token": "secret-token"}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}]}))
    monkeypatch.delenv("GPUAAS_KUBE_URL", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    kube = KubernetesGateway()
    assert kube.configuration.host == api.url
    assert kube._auth_headers() == {"authorization": "Bearer secret-token"}
    kube.create(R.CONFIG_MAP, {"metadata": {"name": "c", "namespace": "n"}})
    assert api.writes["create"] == 1


def test_importing_the_gateway_loads_no_config_loader_or_typed_api() -> None:
    probe = ("import sys, json, steps.gateways.kubernetes; "
             "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('kubernetes', 'jsonschema')))))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True,
                         check=True).stdout
    loaded = set(json.loads(out))
    assert "kubernetes.client.rest" in loaded
    heavy = {"kubernetes.config.kube_config", "kubernetes.dynamic", "jsonschema", "kubernetes.client.api",
             "kubernetes.client.models", "kubernetes.client.api_client"}
    assert not (loaded & heavy)


def test_a_later_plain_import_of_kubernetes_still_works() -> None:
    probe = ("import steps.gateways.kubernetes, kubernetes; from kubernetes import client, config; "
             "print(client.CoreV1Api.__name__, callable(config.load_kube_config), kubernetes.__version__)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.startswith("CoreV1Api True ")
