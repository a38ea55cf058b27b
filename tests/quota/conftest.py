"""Fixtures for the quota area: a real API server on loopback, the gateway over it, a demo clock."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from engine.apiserver import ApiServer
from engine.kueue import KueueController
from steps.gateways.kubernetes import KubernetesGateway
from tests.support.apiserver import gateway_for, running_apiserver


class DemoClock:
    """A clock the test moves by hand: condition timestamps and queue order depend on it."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def server() -> Iterator[ApiServer]:
    with running_apiserver() as api:
        yield api


@pytest.fixture
def gateway(server: ApiServer) -> KubernetesGateway:
    return gateway_for(server)


@pytest.fixture
def clock() -> DemoClock:
    return DemoClock()


@pytest.fixture
def kueue(server: ApiServer, clock: DemoClock) -> KueueController:
    return KueueController.over_url(server.url, clock=clock)
