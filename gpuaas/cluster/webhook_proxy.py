"""The stack's way from this machine to a Service's pods: the Alertmanager's POSTs to the webhook EventSource.

A STAND-IN for kube-proxy, the other way round from the node's (gpuaas.cluster.node.ServiceForwarder,
pods -> programs on loopback): a program on this machine reaches a Service whose pods run on the
real node. In a cluster the product's AlertmanagerConfig POSTs to
`http://gpuaas-alertmanager-eventsource-svc.gpuaas.svc:12000/alertmanager`, the Service Argo Events
makes for the webhook EventSource. Here that name does not resolve and nothing routes its ClusterIP
on this machine; the pod's own IP is reachable, but it is not known when `gpuaas cluster up` starts
Alertmanager (the product is installed later) and it changes when the pod restarts; and the pinned
Debian Alertmanager (0.25) reads a webhook's URL only from its config (`url_file` came later). So
Alertmanager POSTs to this proxy on 127.0.0.1, which looks up the Service's ready endpoints
(EndpointSlices, as kube-proxy does) at EACH request and forwards the request as it came (method,
path, body, the `Authorization` header: the EventSource checks the bearer token itself), answering
with the pod's answer. No ready endpoint: 503, with what to do in the body and the proxy's log.

    python -m gpuaas.cluster.webhook_proxy --kubeconfig ADMIN --port PORT \\
        --service gpuaas/gpuaas-alertmanager-eventsource-svc:12000

`GET /-/ready` is the proxy's own: 200 once it listens and can read EndpointSlices.
"""

from __future__ import annotations

import argparse
import http.client
import json
import signal
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

READY_PATH = "/-/ready"
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
              "transfer-encoding", "upgrade", "host", "accept-encoding"}
"""Headers not forwarded: the hop-by-hop ones, Host (the pod's), and Accept-Encoding (the answer is passed
back without its Content-Encoding, so it is asked for plain)."""


@dataclass(frozen=True)
class ServiceRef:
    namespace: str
    name: str
    port: int

    @classmethod
    def parse(cls, text: str) -> ServiceRef:
        """`NAMESPACE/NAME:PORT`."""
        namespace, _, rest = text.partition("/")
        name, _, port = rest.rpartition(":")
        if not (namespace and name and port.isdigit()):
            raise ValueError(f"expected NAMESPACE/NAME:PORT, found {text!r}")
        return cls(namespace, name, int(port))

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}:{self.port}"


def ready_endpoint(service: dict[str, Any], slices: list[dict[str, Any]], port: int) -> tuple[str, int] | None:
    """(address, port) of one ready endpoint behind the Service's `port`, as kube-proxy picks among them.

    `service` and `slices` are the API's objects as JSON (a Service, its discovery.k8s.io/v1
    EndpointSlices). The Service port's name selects the slices' port (its targetPort may be a name);
    an endpoint counts unless its `ready` condition is false (nil means ready, as in the API).
    """
    ports = [p for p in (service.get("spec") or {}).get("ports") or [] if p.get("port") == port]
    if not ports:
        return None
    name = ports[0].get("name") or ""
    for item in slices:
        target = next((p.get("port") for p in item.get("ports") or [] if (p.get("name") or "") == name), None)
        if target is None:
            continue
        for endpoint in item.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is False or not endpoint.get("addresses"):
                continue
            return endpoint["addresses"][0], int(target)
    return None


class Resolver:
    """Reads the Service and its EndpointSlices through the API server (the admin kubeconfig)."""

    def __init__(self, kubeconfig: str, service: ServiceRef) -> None:
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=kubeconfig)
        self.core = client.CoreV1Api(api)
        self.discovery = client.DiscoveryV1Api(api)
        self.service = service

    def slices(self) -> list[dict[str, Any]]:
        found = self.discovery.list_namespaced_endpoint_slice(
            self.service.namespace, label_selector=f"kubernetes.io/service-name={self.service.name}",
            _preload_content=False, _request_timeout=10)
        return json.loads(found.data).get("items") or []

    def endpoint(self) -> tuple[str, int] | None:
        from kubernetes.client import ApiException

        try:
            answer = self.core.read_namespaced_service(self.service.name, self.service.namespace,
                                                       _preload_content=False, _request_timeout=10)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return ready_endpoint(json.loads(answer.data), self.slices(), self.service.port)


def handler(resolver: Resolver, log: Any = sys.stderr) -> type[BaseHTTPRequestHandler]:
    service = resolver.service

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per request is written in _forward

        def _answer(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _forward(self) -> None:
            started = time.monotonic()
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if self.command == "GET" and self.path == READY_PATH:
                try:
                    resolver.slices()
                except Exception as error:  # noqa: BLE001 - any failure to read the API means not ready
                    self._answer(503, f"cannot read EndpointSlices of {service}: {error}\n".encode())
                    return
                self._answer(200, b"ready\n")
                return
            try:
                target = resolver.endpoint()
            except Exception as error:  # noqa: BLE001 - reported to the caller and the log
                target, problem = None, f"cannot read Service {service} and its EndpointSlices: {error}"
            else:
                problem = (f"no ready endpoint behind Service {service}: the product's webhook EventSource is not "
                           "running; install the product on this stack (its EventSource `gpuaas-alertmanager`) "
                           "and check its pod in namespace " + service.namespace)
            if target is None:
                bearer = "bearer" if (self.headers.get("Authorization") or "").startswith("Bearer ") else "no token"
                print(f"{self.command} {self.path}: 503 ({bearer}) {problem}", file=log, flush=True)
                self._answer(503, (problem + "\n").encode())
                return
            host, port = target
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            connection = http.client.HTTPConnection(host, port, timeout=30)
            try:
                connection.request(self.command, self.path, body=body, headers=headers)
                answer = connection.getresponse()
                data = answer.read()
            except OSError as error:
                print(f"{self.command} {self.path} -> {host}:{port}: 502 {error}", file=log, flush=True)
                self._answer(502, f"forwarding to {host}:{port} (Service {service}) failed: {error}\n".encode())
                return
            finally:
                connection.close()
            bearer = "bearer" if (self.headers.get("Authorization") or "").startswith("Bearer ") else "no token"
            print(f"{self.command} {self.path} -> {host}:{port}: {answer.status} "
                  f"({(time.monotonic() - started) * 1000:.0f} ms, {bearer})", file=log, flush=True)
            self._answer(answer.status, data, answer.getheader("Content-Type") or "text/plain")

        do_GET = do_POST = do_PUT = _forward

    return Forward


def serve(resolver: Resolver, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """A server on host:port forwarding to the Service (serve_forever() it; shutdown() stops it)."""
    return ThreadingHTTPServer((host, port), handler(resolver))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuaas.cluster.webhook_proxy", description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--port", type=int, required=True, help="listen on HOST:PORT")
    parser.add_argument("--host", default="127.0.0.1", help="a loopback address to listen on (127.0.0.1)")
    parser.add_argument("--service", required=True, type=ServiceRef.parse, metavar="NAMESPACE/NAME:PORT")
    args = parser.parse_args(argv)
    server = serve(Resolver(args.kubeconfig, args.service), args.port, args.host)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    print(f"forwarding {args.host}:{args.port} to the ready endpoints of Service {args.service}", file=sys.stderr,
          flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
