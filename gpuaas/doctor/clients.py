"""The doctor's three edges: the Kubernetes API (the official client), Prometheus (prometheus-api-client)
and Alertmanager (HTTP). Each read returns data or raises `Unreadable` with what went wrong and what
to do; nothing here judges."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]
PARTIAL_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


class Unreadable(Exception):
    """A read failed; the message says what was asked, what the server said, and (for 403) the grant needed."""


@dataclass
class Kube:
    """GET/POST on API paths with the official client's ApiClient (dicts in and out)."""

    api: Any
    """kubernetes.client.ApiClient."""

    @classmethod
    def connect(cls, kubeconfig: str | None = None, context: str | None = None, url: str | None = None) -> Kube:
        """`url`: a plain-HTTP API without auth (the local engine); else the kubeconfig (or in-cluster config)."""
        from kubernetes import client, config

        if url:
            configuration = client.Configuration(host=url.rstrip("/"))
            return cls(client.ApiClient(configuration))
        import os

        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
            config.load_incluster_config()
            return cls(client.ApiClient())
        return cls(config.new_client_from_config(config_file=kubeconfig, context=context))

    @property
    def server(self) -> str:
        return str(self.api.configuration.host)

    def request(self, method: str, path: str, *, query: dict[str, str] | None = None, body: Any = None,
                accept: str = "application/json") -> JSON | None:
        """The decoded answer; None for a GET answered 404 (absent is a fact); Unreadable for any other failure."""
        try:
            method_, url, headers, body_, post = self.api.param_serialize(
                method, path, query_params=list((query or {}).items()) or None,
                header_params={"Accept": accept, "Content-Type": "application/json"}, body=body,
                auth_settings=["BearerToken"])
            response = self.api.call_api(method_, url, header_params=headers, body=body_, post_params=post,
                                         _request_timeout=20)
            response.read()
        except Exception as error:  # noqa: BLE001 - urllib3's connection errors: one line, not a traceback
            raise Unreadable(f"{method} {self.server}{path}: {type(error).__name__}: {str(error)[:200]}") from None
        data = response.data or b""
        if response.status == 404 and method == "GET":
            return None
        if not 200 <= response.status < 300:
            raise Unreadable(_api_error(method, path, response.status, data))
        return json.loads(data) if data else {}

    def get(self, path: str, **options: Any) -> JSON | None:
        return self.request("GET", path, **options)

    def items(self, path: str, *, label_selector: str = "", field_selector: str = "") -> list[JSON]:
        """A list's items ([] when the resource is not served)."""
        query = {k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v}
        found = self.get(path, query=query or None)
        return list((found or {}).get("items") or [])


def _api_error(method: str, path: str, status: int, data: bytes) -> str:
    try:
        message = json.loads(data or b"{}").get("message") or data[:200].decode("utf-8", "replace")
    except ValueError:
        message = data[:200].decode("utf-8", "replace")
    text = f"{method} {path}: HTTP {status} {message}"
    if status in (401, 403):
        text += " (the doctor needs the permissions `gpuaas doctor --print-role` lists)"
    return text


@dataclass
class Http:
    """Prometheus' and Alertmanager's HTTP APIs, with an optional bearer token and CA (kube-rbac-proxy, OpenShift)."""

    url: str
    session: Any
    """requests.Session, shared with prometheus-api-client. Every request passes `verify` itself: requests lets
    $REQUESTS_CA_BUNDLE override a session's own CA otherwise (Session.merge_environment_settings), and --ca-file
    must win (seen: an SSL error against thanos-querier's service-CA certificate in an environment setting it)."""

    @classmethod
    def connect(cls, url: str, *, token: str | None = None, ca_file: str | None = None) -> Http:
        import requests

        session = requests.Session()
        if token:
            session.headers["Authorization"] = f"Bearer {token}"
        if ca_file:
            session.verify = ca_file
        return cls(url.rstrip("/"), session)

    def prometheus(self) -> Any:
        """A prometheus-api-client PrometheusConnect on the same session."""
        from prometheus_api_client import PrometheusConnect

        return PrometheusConnect(url=self.url, session=self.session, timeout=20)

    def get_json(self, path: str) -> Any:
        import requests

        try:
            response = self.session.get(self.url + path, timeout=20, verify=self.session.verify)
        except requests.RequestException as error:
            raise Unreadable(f"GET {self.url}{path}: {type(error).__name__}: {str(error)[:200]}") from None
        if response.status_code != 200:
            raise Unreadable(f"GET {self.url}{path}: HTTP {response.status_code} {response.text[:200]}")
        try:
            return response.json()
        except ValueError:
            raise Unreadable(f"GET {self.url}{path}: not JSON: {response.text[:120]!r}") from None

    def post_json(self, path: str, body: Any) -> None:
        import requests

        try:
            response = self.session.post(self.url + path, json=body, timeout=20, verify=self.session.verify)
        except requests.RequestException as error:
            raise Unreadable(f"POST {self.url}{path}: {type(error).__name__}: {str(error)[:200]}") from None
        if response.status_code >= 300:
            raise Unreadable(f"POST {self.url}{path}: HTTP {response.status_code} {response.text[:200]}")
