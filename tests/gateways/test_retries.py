"""Contract: bounded backoff on 5xx/429/timeouts, no retry on other 4xx, and conflict re-planning.

Faults are injected by the server (`api.faults`) and travel over real sockets: the gateway sees
exactly what it would see from an overloaded API server.
"""

from __future__ import annotations

import threading

import pytest

from engine.apiserver import ApiServer
from steps.gateways import resources as R
from steps.gateways.errors import NotFound, PermanentError, TransientError
from steps.gateways.kubernetes import KubernetesGateway, RetryPolicy


def test_retry_policy_doubles_from_the_first_delay() -> None:
    policy = RetryPolicy()
    assert [policy.delay(n) for n in range(3)] == [0.2, 0.4, 0.8]
    assert policy.attempts == 4


@pytest.mark.parametrize("status", [500, 503, 429])
def test_transient_failures_are_retried_until_success(api: ApiServer, kube: KubernetesGateway, status: int) -> None:
    kube.create(R.WORKLOAD, {"metadata": {"name": "w", "namespace": "n"}, "spec": {}})
    api.reset_counters()
    api.faults.fail_next(2, status=status)
    assert kube.get(R.WORKLOAD, "w", "n")["metadata"]["name"] == "w"
    assert api.requests["GET"] == 3


def test_giving_up_raises_transient_error_with_the_api_message(api: ApiServer, kube: KubernetesGateway) -> None:
    api.faults.fail_next(10, status=503, method="PATCH")
    kube.create(R.WORKLOAD, {"metadata": {"name": "w", "namespace": "n"}, "spec": {}})
    api.reset_counters()
    with pytest.raises(TransientError) as caught:
        kube.merge_patch(R.WORKLOAD, "w", {"spec": {"active": False}}, "n")
    assert caught.value.status == 503 and "injected fault (503)" in caught.value.message
    assert "gave up after 3 attempts" in caught.value.message
    assert api.requests["PATCH"] == 3
    assert api.write_count == 0  # refused before reaching the API: nothing written


def test_other_client_errors_are_not_retried(api: ApiServer, kube: KubernetesGateway) -> None:
    api.faults.fail_next(1, status=403)
    with pytest.raises(PermanentError) as caught:
        kube.list(R.WORKLOAD)
    assert caught.value.status == 403 and api.requests["GET"] == 1


def test_a_slow_answer_is_a_timeout_and_is_retried(api: ApiServer) -> None:
    kube = KubernetesGateway(url=api.url, retry=RetryPolicy(attempts=2, first_delay=0.01), timeout=0.2)
    api.store.create(R.WORKLOAD, {"metadata": {"name": "w", "namespace": "n"}, "spec": {}})
    api.faults.delay_next(1, 1.0, method="GET")
    assert kube.get(R.WORKLOAD, "w", "n") is not None
    api.faults.delay_next(2, 1.0, method="GET")
    with pytest.raises(TransientError) as caught:
        kube.get(R.WORKLOAD, "w", "n")
    assert caught.value.reason == "Unavailable" and "Timeout" in caught.value.message


def test_a_refused_connection_is_transient() -> None:
    with ApiServer() as api:
        url = api.url
    kube = KubernetesGateway(url=url, retry=RetryPolicy(attempts=2, first_delay=0.01), timeout=1.0)
    with pytest.raises(TransientError):
        kube.get(R.WORKLOAD, "w", "n")


def test_update_with_retry_replans_on_a_concurrent_write(api: ApiServer, kube: KubernetesGateway) -> None:
    kube.create(R.CLUSTER_QUEUE, {"metadata": {"name": "tenant-a"}, "spec": {"nominalQuota": 4, "lent": 0}})
    seen: list[int] = []

    def lend_two(queue: dict) -> dict:
        seen.append(queue["spec"]["nominalQuota"])
        if len(seen) == 1:  # another controller writes between our read and our write
            api.store.patch(R.CLUSTER_QUEUE, "tenant-a", {"spec": {"nominalQuota": 8}})
        return {"spec": {"nominalQuota": queue["spec"]["nominalQuota"] - 2, "lent": 2}}

    written = kube.update_with_retry(R.CLUSTER_QUEUE, "tenant-a", lend_two)
    assert seen == [4, 8]
    assert written["spec"] == {"nominalQuota": 6, "lent": 2}


def test_update_with_retry_gives_up_as_transient_after_the_attempts(api: ApiServer,
                                                                   kube: KubernetesGateway) -> None:
    kube.create(R.CONFIG_MAP, {"metadata": {"name": "c", "namespace": "n"}, "data": {"n": "0"}})
    calls = []

    def always_overtaken(obj: dict) -> dict:
        calls.append(obj)
        api.store.patch(R.CONFIG_MAP, "c", {"data": {"n": str(len(calls))}}, "n")
        return {"data": {"mine": "1"}}

    with pytest.raises(TransientError) as caught:
        kube.update_with_retry(R.CONFIG_MAP, "c", always_overtaken, "n", attempts=3)
    assert caught.value.status == 409 and len(calls) == 3
    assert "mine" not in kube.get(R.CONFIG_MAP, "c", "n")["data"]


def test_update_with_retry_writes_nothing_when_mutate_declines(api: ApiServer, kube: KubernetesGateway) -> None:
    kube.create(R.CONFIG_MAP, {"metadata": {"name": "c", "namespace": "n"}, "data": {}})
    api.reset_counters()
    assert kube.update_with_retry(R.CONFIG_MAP, "c", lambda obj: None, "n")["metadata"]["name"] == "c"
    assert api.write_count == 0
    with pytest.raises(NotFound):
        kube.update_with_retry(R.CONFIG_MAP, "ghost", lambda obj: {}, "n")


def test_concurrent_writers_through_update_with_retry_lose_no_update(kube: KubernetesGateway) -> None:
    kube.create(R.CONFIG_MAP, {"metadata": {"name": "counter", "namespace": "n"}, "data": {"n": "0"}})

    def increment() -> None:
        for _ in range(5):
            kube.update_with_retry(R.CONFIG_MAP, "counter",
                                   lambda obj: {"data": {"n": str(int(obj["data"]["n"]) + 1)}}, "n", attempts=50)

    workers = [threading.Thread(target=increment) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert kube.get(R.CONFIG_MAP, "counter", "n")["data"]["n"] == "20"


def test_too_many_requests_with_retry_after_is_retried(api: ApiServer, kube: KubernetesGateway) -> None:
    api.faults.fail_next(1, status=429, retry_after=0.01)
    assert kube.list(R.WORKLOAD) == []
    assert api.requests["GET"] == 2 and api.faults.injected == 1
