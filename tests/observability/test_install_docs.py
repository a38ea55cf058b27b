"""The install steps create every Secret the rendered AlertmanagerConfig references.

The Prometheus Operator resolves each Secret an AlertmanagerConfig names (a receiver's
`urlSecret`, an `httpConfig` credential) before it accepts the object, and REJECTS THE WHOLE
AlertmanagerConfig when one is missing (prometheus-operator v0.93.1,
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


# --- the matcher strategy (docs/observability.md) ------------------------------------------------------

OBSERVABILITY = ROOT / "docs" / "observability.md"


def test_every_product_alert_names_the_namespace_of_the_alertmanager_config() -> None:
    """With the operator's default strategy (OnNamespace) the route of `gpuaas-idle` gets namespace="<its
    namespace>": every product alert must carry that namespace, or the route takes none of them."""
    from gpuaas.manifests import observability as obs

    config = _alertmanager_config()
    alerts = [r for g in obs.rule_groups()["groups"] for r in g["rules"] if "alert" in r]
    assert alerts and all(r["labels"]["namespace"] == config["metadata"]["namespace"] for r in alerts), alerts
    idle = next(r for r in config["spec"]["route"]["routes"] if r["receiver"] == obs.RECEIVER)
    assert obs.WORKLOAD_NAMESPACE_LABEL in idle["groupBy"] and "namespace" not in idle["groupBy"], idle


def test_the_docs_no_longer_ask_to_move_the_config_or_change_the_strategy() -> None:
    text = OBSERVABILITY.read_text() + (ROOT / "docs" / "install.md").read_text()
    assert "kubectl patch alertmanager" not in text and "Move `gpuaas-idle`" not in text
