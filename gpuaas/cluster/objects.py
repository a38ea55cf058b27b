"""Upstream manifests as Python objects, and the small rewrites that put them on loopback.

Why rewrite instead of writing our own: the webhooks, APIServices, CRDs and RBAC that Kueue and
KEDA install are the contract the real apiserver enforces, so they come from the pinned module's
own `config/` (rendered with the built `kubectl kustomize`). Only what a pod network would provide
is changed: a Service becomes `type: ExternalName` pointing at `localhost`, and every reference to
it carries the port its process listens on. The apiserver's service resolver
(k8s.io/apiserver/pkg/util/proxy ResolveCluster, v0.36) dials `https://<externalName>:<port>` for an
ExternalName Service with the port the webhook/APIService names, while TLS still checks the name
`<service>.<namespace>.svc`, which the serving certificates carry.
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from gpuaas.upstream import module_dir

JSON = dict[str, Any]


class YamlLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's safe loader (20 MB of upstream CRDs parse in seconds, not a minute), reading a bare
    `=` (a Kueue enum value) as a string rather than YAML 1.1's "value" tag."""


YamlLoader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))

DROPPED_KINDS = {"Deployment"}
"""Kinds of the upstream install that are replaced by local processes."""


def kustomize(kubectl: Path, directory: Path) -> list[JSON]:
    """`kubectl kustomize DIR` (the kustomize built into the pinned kubectl) as a list of objects."""
    done = subprocess.run([str(kubectl), "kustomize", str(directory)], capture_output=True, text=True, check=False,
                          timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"expected `kubectl kustomize {directory}` to render, it failed: {done.stderr.strip()}")
    return [doc for doc in yaml.load_all(done.stdout, Loader=YamlLoader) if doc]


def upstream_install(kubectl: Path, module: str, path: str) -> list[JSON]:
    """A pinned module's kustomization (e.g. Kueue's `config/default`), rendered."""
    return kustomize(kubectl, module_dir(module) / path)


def yaml_files(module: str, paths: Iterable[str]) -> list[JSON]:
    """Objects from files of a pinned module (CRDs), in the order given."""
    objects: list[JSON] = []
    root = module_dir(module)
    for path in paths:
        with (root / path).open() as handle:
            objects += [doc for doc in yaml.load_all(handle, Loader=YamlLoader) if doc]
    return objects


def local_yaml_file(path: Path) -> list[JSON]:
    """Objects from a file of this project (a vendored CRD)."""
    with path.open() as handle:
        return [doc for doc in yaml.load_all(handle, Loader=YamlLoader) if doc]


def on_loopback(objects: list[JSON], ports: dict[tuple[str, str], int], ca_bundle: bytes | None = None) -> list[JSON]:
    """The objects with Services made ExternalName `localhost` and their users pointed at local ports.

    `ports` maps (namespace, service) to the port the local process serves webhooks/APIs on.
    `ca_bundle` (PEM) is set on webhooks and APIServices that name one of those Services, when the
    process serves a certificate from the cluster's CA; None leaves caBundle to the component
    (Kueue injects its own).
    """
    encoded = base64.b64encode(ca_bundle).decode() if ca_bundle else None
    out: list[JSON] = []
    for original in objects:
        obj = copy.deepcopy(original)
        kind = obj.get("kind")
        meta = obj.get("metadata", {})
        if kind in DROPPED_KINDS:
            continue
        if kind == "Service" and (meta.get("namespace"), meta.get("name")) in ports:
            port = ports[(meta["namespace"], meta["name"])]
            obj["spec"] = {"type": "ExternalName", "externalName": "localhost",
                           "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}
        elif kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            for webhook in obj.get("webhooks", []):
                _point(webhook.get("clientConfig", {}), ports, encoded)
        elif kind == "APIService":
            service = obj["spec"].get("service") or {}
            key = (service.get("namespace"), service.get("name"))
            if key in ports:
                service["port"] = ports[key]
                if encoded and not obj["spec"].get("insecureSkipTLSVerify"):
                    obj["spec"]["caBundle"] = encoded
        elif kind == "CustomResourceDefinition":
            webhook = (obj["spec"].get("conversion") or {}).get("webhook")
            if webhook:
                _point(webhook.get("clientConfig", {}), ports, encoded)
        out.append(obj)
    return out


def _point(client_config: JSON, ports: dict[tuple[str, str], int], encoded: str | None) -> None:
    service = client_config.get("service")
    if not service:
        return
    key = (service.get("namespace"), service.get("name"))
    if key in ports:
        service["port"] = ports[key]
        if encoded:
            client_config["caBundle"] = encoded


def split_crds(objects: list[JSON]) -> tuple[list[JSON], list[JSON]]:
    """(CRDs and Namespaces, everything else): the first group must be Established before the rest."""
    first = [o for o in objects if o.get("kind") in ("CustomResourceDefinition", "Namespace")]
    return first, [o for o in objects if o.get("kind") not in ("CustomResourceDefinition", "Namespace")]


def dump(objects: list[JSON]) -> str:
    """A `v1/List` as JSON: what `kubectl apply -f -` reads fastest (YAML dumping 20 MB takes seconds)."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
