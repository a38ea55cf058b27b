"""A Kubernetes-API-compatible server for tests: start, point the client at it, stop.

    from tests.support.apiserver import running_apiserver

    def test_release(monkeypatch):
        with running_apiserver() as api:            # GPUAAS_KUBE_URL is set inside the block
            api.store.create(WORKLOAD, {...})        # seed (keeps status) without HTTP
            ...run the step (in-process or as a subprocess: the env var is inherited)...
            assert api.writes["patch"] == 1          # HTTP write requests by verb
            assert api.write_count == 0              # "no write"

`api` is the `engine.apiserver.ApiServer` itself: `api.url`, `api.store`, `api.faults`,
`api.writes`, `api.reset_counters()`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from engine.apiserver import ApiServer

KUBE_URL_ENV = "GPUAAS_KUBE_URL"


@contextmanager
def running_apiserver(*, set_env: bool = True, require_namespaces: bool = False) -> Iterator[ApiServer]:
    """Start an ApiServer on a free loopback port; export GPUAAS_KUBE_URL for the duration."""
    server = ApiServer(require_namespaces=require_namespaces)
    url = server.start()
    previous = os.environ.get(KUBE_URL_ENV)
    if set_env:
        os.environ[KUBE_URL_ENV] = url
    try:
        yield server
    finally:
        if set_env:
            if previous is None:
                os.environ.pop(KUBE_URL_ENV, None)
            else:
                os.environ[KUBE_URL_ENV] = previous
        server.stop()


def gateway_for(server: ApiServer, **kwargs: object):  # -> KubernetesGateway (import kept lazy)
    """A KubernetesGateway bound to `server` (fast retries unless `retry=` is given)."""
    from steps.gateways.kubernetes import KubernetesGateway, RetryPolicy

    kwargs.setdefault("retry", RetryPolicy(attempts=3, first_delay=0.01))
    return KubernetesGateway(url=server.url, **kwargs)  # type: ignore[arg-type]
