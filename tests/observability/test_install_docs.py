"""The install steps create every Secret the rendered AlertmanagerConfig references.

The Prometheus Operator resolves each Secret an AlertmanagerConfig names (a receiver's
`urlSecret`, an `httpConfig` credential) before it accepts the object, and REJECTS THE WHOLE
AlertmanagerConfig when one is missing (prometheus-operator v0.93.0,
pkg/alertmanager/operator.go: checkAlertmanagerConfigResource -> checkWebhookConfigs ->
store.GetSecretKey; the rejected object is skipped with an InvalidConfiguration event). A Secret
the install steps forget therefore silently takes the idle reaction's route down with it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
INSTALL_PAGES = (ROOT / "docs" / "install.md", ROOT / "README.md")


def _secret_refs(node: Any) -> set[str]:
    """Names of the Secrets an AlertmanagerConfig spec refers to ({name, key} selectors)."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("urlSecret", "credentials", "password", "apiKey", "routingKey", "serviceKey",
                       "apiURL", "token", "bearerTokenSecret") and isinstance(value, dict) and "name" in value:
                found.add(value["name"])
            else:
                found |= _secret_refs(value)
    elif isinstance(node, list):
        for item in node:
            found |= _secret_refs(item)
    return found


def _alertmanager_config() -> dict[str, Any]:
    docs = yaml.safe_load_all((ROOT / "manifests" / "base" / "observability.yaml").read_text())
    return next(d for d in docs if d and d.get("kind") == "AlertmanagerConfig")


def test_the_alertmanager_config_names_both_secrets() -> None:
    """The check below has something to check: the webhook token and the admins' alert target."""
    assert _secret_refs(_alertmanager_config()["spec"]) == {"gpuaas-alertmanager-webhook", "gpuaas-admin-alerts"}


@pytest.mark.parametrize("page", INSTALL_PAGES, ids=lambda p: p.name)
def test_install_steps_create_every_secret_the_alertmanager_config_needs(page: Path) -> None:
    text = page.read_text()
    created = set(re.findall(r"create secret generic\s+(?:\\\n\s*)?([a-z0-9-]+)", text))
    missing = sorted(_secret_refs(_alertmanager_config()["spec"]) - created)
    assert missing == [], (f"{page.name} never creates Secret(s) {missing}: the Prometheus Operator would reject "
                           "the whole AlertmanagerConfig gpuaas-idle (idle route included)")


# --- the matcher strategy the docs recommend (docs/observability.md) -----------------------------------

OBSERVABILITY = ROOT / "docs" / "observability.md"
STRATEGY_SECTION = "### Which alerts the route sees"
RECOMMENDED = "OnNamespaceExceptForAlertmanagerNamespace"


def _strategy_section() -> str:
    text = OBSERVABILITY.read_text()
    start = text.index(STRATEGY_SECTION)
    return text[start:text.index("\n## ", start)]


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", _strategy_section(), re.MULTILINE | re.DOTALL)


def _overlay() -> dict[str, Any]:
    (block,) = [b for b in _blocks("yaml") if "kind: Kustomization" in b]
    return yaml.safe_load(block)


def _target_namespace() -> str:
    (patch,) = _overlay()["patches"]
    (operation,) = yaml.safe_load(patch["patch"])
    assert operation["path"] == "/metadata/namespace"
    return operation["value"]


def test_the_recommended_strategy_is_one_the_pinned_operator_knows() -> None:
    """The pinned Alertmanager CRD (prometheus-operator v0.93.0, stack/crds) accepts the documented type."""
    from gpuaas.manifests.validation import PROMETHEUS_OPERATOR
    from gpuaas.upstream import upstream_file

    crd = yaml.safe_load(upstream_file(PROMETHEUS_OPERATOR, "example/prometheus-operator-crd/"
                                                            "monitoring.coreos.com_alertmanagers.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    strategy = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "alertmanagerConfigMatcherStrategy"]["properties"]["type"]
    assert set(strategy["enum"]) == {"OnNamespace", RECOMMENDED, "None"} and strategy["default"] == "OnNamespace"
    (command,) = [line for block in _blocks("bash") for line in block.replace("\\\n", " ").splitlines()
                  if "kubectl patch alertmanager" in line]
    assert f'"type":"{RECOMMENDED}"' in command and f"-n {_target_namespace()} " in command


def test_the_documented_commands_create_both_secrets_where_the_moved_config_reads_them() -> None:
    """The operator reads an AlertmanagerConfig's Secrets from its own namespace: moved, it needs them there,
    and the EventSource still reads the webhook token in gpuaas (the same token: one shell variable)."""
    text = "\n".join(_blocks("bash")).replace("\\\n", " ")
    created = set(re.findall(r"kubectl -n ([a-z0-9-]+) create secret generic ([a-z0-9-]+)", text))
    wanted = {(_target_namespace(), name) for name in _secret_refs(_alertmanager_config()["spec"])}
    assert wanted <= created and ("gpuaas", "gpuaas-alertmanager-webhook") in created, created
    tokens = set(re.findall(r"create secret generic gpuaas-alertmanager-webhook (--from-literal=token=\S+)", text))
    assert tokens == {'--from-literal=token="$token"'}, tokens


@pytest.mark.parametrize("base", ["kubernetes", "openshift"])
def test_the_documented_overlay_moves_only_the_alertmanager_config(tmp_path: Path, base: str) -> None:
    """`kubectl kustomize` (the pinned kubectl) on the docs' overlay, next to the shipped ones as the docs say."""
    import shutil
    import subprocess

    from gpuaas.manifests.validation import YamlLoader
    from tests.support.kubectl import pinned_kubectl

    for folder in ("manifests", "examples"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    overlay = _overlay()
    overlay["resources"] = [f"../{base}"]
    mine = tmp_path / "manifests" / "overlays" / "mine"
    mine.mkdir()
    (mine / "kustomization.yaml").write_text(yaml.safe_dump(overlay))

    def build(folder: Path) -> dict[tuple[str, str], dict[str, Any]]:
        done = subprocess.run([str(pinned_kubectl()), "kustomize", str(folder)], capture_output=True, text=True,
                              check=False)
        assert done.returncode == 0, done.stderr
        return {(d["kind"], d["metadata"]["name"]): d for d in yaml.load_all(done.stdout, Loader=YamlLoader) if d}

    shipped, moved = build(tmp_path / "manifests" / "overlays" / base), build(mine)
    key = ("AlertmanagerConfig", "gpuaas-idle")
    assert shipped[key]["metadata"]["namespace"] == "gpuaas"
    assert moved[key]["metadata"]["namespace"] == _target_namespace() != "gpuaas"
    assert moved[key]["spec"] == shipped[key]["spec"]
    assert {k: v for k, v in moved.items() if k != key} == {k: v for k, v in shipped.items() if k != key}
