"""Fixtures for the Kubernetes gateway contract tests: a fresh API server per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine.apiserver import ApiServer
from steps.gateways.kubernetes import KubernetesGateway, RetryPolicy
from tests.support.apiserver import running_apiserver


@pytest.fixture
def api() -> Iterator[ApiServer]:
    with running_apiserver() as server:
        yield server


@pytest.fixture
def kube(api: ApiServer) -> Iterator[KubernetesGateway]:
    """A gateway with short backoff (same algorithm, smaller delays) so retry tests stay fast."""
    gateway = KubernetesGateway(url=api.url, retry=RetryPolicy(attempts=3, first_delay=0.01), timeout=5.0)
    yield gateway
    gateway.close()
