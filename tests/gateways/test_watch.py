"""Contract: watch from a resourceVersion (list-then-watch without gaps), over chunked HTTP."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator

import pytest

from engine.apiserver import ApiServer
from steps.gateways import resources as R
from steps.gateways.errors import PermanentError
from steps.gateways.kubernetes import KubernetesGateway, RetryPolicy


def wl(name: str, namespace: str = "team-a", **labels: str) -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": {}}


def take(events: Iterator[tuple[str, dict]], count: int) -> list[tuple[str, dict]]:
    """The first `count` events; closing the watch early keeps the tests fast."""
    out = list(itertools.islice(events, count))
    events.close()  # type: ignore[attr-defined]
    return out


def names(events: list[tuple[str, dict]]) -> list[tuple[str, str]]:
    return [(kind, obj["metadata"]["name"]) for kind, obj in events]


def test_watch_from_a_list_version_replays_exactly_what_came_after(kube: KubernetesGateway) -> None:
    kube.create(R.WORKLOAD, wl("before"))
    _, rv = kube.list_with_version(R.WORKLOAD)
    kube.create(R.WORKLOAD, wl("between"))           # written after the list, before the watch
    events = []
    for kind, obj in kube.watch(R.WORKLOAD, resource_version=rv, timeout_seconds=1):  # ends on the timeout
        events.append((kind, obj))
        if obj["metadata"]["name"] == "between" and kind == "ADDED":
            kube.merge_patch(R.WORKLOAD, "between", {"spec": {"active": False}}, "team-a")  # live
        elif kind == "MODIFIED":
            kube.delete(R.WORKLOAD, "between", "team-a")
    assert names(events) == [("ADDED", "between"), ("MODIFIED", "between"), ("DELETED", "between")]
    versions = [int(obj["metadata"]["resourceVersion"]) for _, obj in events]
    assert versions == sorted(versions) and versions[0] > int(rv)
    assert events[1][1]["spec"] == {"active": False} and events[0][1]["kind"] == "Workload"


def test_watch_without_a_version_starts_with_the_current_objects(kube: KubernetesGateway) -> None:
    kube.create(R.WORKLOAD, wl("a"))
    kube.create(R.WORKLOAD, wl("b", "team-b"))
    kube.create(R.CONFIG_MAP, {"metadata": {"name": "c", "namespace": "team-a"}})
    stream = kube.watch(R.WORKLOAD, timeout_seconds=5)
    first = take(stream, 2)
    assert names(first) == [("ADDED", "a"), ("ADDED", "b")]
    # The abandoned stream's connection is closed, not reused mid-stream by the next call.
    assert kube.get(R.CONFIG_MAP, "c", "team-a")["metadata"]["name"] == "c"


def test_watch_filters_by_namespace_kind_and_labels(kube: KubernetesGateway) -> None:
    _, rv = kube.list_with_version(R.WORKLOAD)
    kube.create(R.WORKLOAD, wl("other-ns", "team-b", app="ray"))
    kube.create(R.WORKLOAD, wl("unlabelled"))
    kube.create(R.CONFIG_MAP, {"metadata": {"name": "other-kind", "namespace": "team-a", "labels": {"app": "ray"}}})
    kube.create(R.WORKLOAD, wl("wanted", app="ray"))
    kube.create(R.WORKLOAD, wl("last", app="ray"))
    events = kube.watch(R.WORKLOAD, "team-a", resource_version=rv, timeout_seconds=5, label_selector="app=ray")
    assert names(take(events, 2)) == [("ADDED", "wanted"), ("ADDED", "last")]


def test_in_process_writes_reach_http_watchers(api: ApiServer, kube: KubernetesGateway) -> None:
    _, rv = kube.list_with_version(R.CLUSTER_QUEUE)
    api.store.create(R.CLUSTER_QUEUE, {"metadata": {"name": "tenant-a"}, "spec": {}})
    api.store.patch(R.CLUSTER_QUEUE, "tenant-a", {"status": {"pendingWorkloads": 1}}, subresource="status")
    events = take(kube.watch(R.CLUSTER_QUEUE, resource_version=rv, timeout_seconds=5), 2)
    assert names(events) == [("ADDED", "tenant-a"), ("MODIFIED", "tenant-a")]
    assert events[1][1]["status"] == {"pendingWorkloads": 1}


def test_in_process_subscription_sees_http_writes_of_every_kind(api: ApiServer, kube: KubernetesGateway) -> None:
    subscription = api.store.subscribe()
    kube.create(R.WORKLOAD, wl("a"))
    kube.create(R.NODE, {"metadata": {"name": "gpu-1"}})
    seen = [(change.type, change.object["kind"]) for change in (subscription.next(5), subscription.next(5))]
    subscription.close()
    assert subscription.next(5) is None
    assert seen == [("ADDED", "Workload"), ("ADDED", "Node")]


def test_a_version_older_than_the_history_is_410_gone() -> None:
    with ApiServer(history=3) as api:
        kube = KubernetesGateway(url=api.url, retry=RetryPolicy(attempts=1))
        for n in range(6):
            kube.create(R.CONFIG_MAP, {"metadata": {"name": f"c{n}", "namespace": "n"}})
        with pytest.raises(PermanentError) as caught:
            list(kube.watch(R.CONFIG_MAP, resource_version="2", timeout_seconds=5))
        assert caught.value.status == 410
        recent = take(kube.watch(R.CONFIG_MAP, resource_version="5", timeout_seconds=5), 2)
        assert [n for _, n in names(recent)] == ["c4", "c5"]


def test_stop_ends_open_watches(api: ApiServer, kube: KubernetesGateway) -> None:
    seen: list[str] = []
    connected = threading.Event()

    def watch_forever() -> None:
        for kind, _ in kube.watch(R.WORKLOAD, resource_version=str(api.store.resource_version)):
            seen.append(kind)
            connected.set()

    watcher = threading.Thread(target=watch_forever, daemon=True)
    watcher.start()
    while not connected.is_set():
        kube.create(R.WORKLOAD, {"metadata": {"generateName": "w-", "namespace": "n"}})
        connected.wait(0.05)
    api.stop()
    watcher.join(timeout=10)
    assert not watcher.is_alive() and seen


def test_a_selector_watch_sees_objects_enter_and_leave_the_selection(kube: KubernetesGateway) -> None:
    kube.create(R.POD, {"metadata": {"name": "p", "namespace": "n", "labels": {"idle": "false"}}})
    _, rv = kube.list_with_version(R.POD)
    kube.merge_patch(R.POD, "p", {"metadata": {"labels": {"idle": "true"}}}, "n")
    kube.merge_patch(R.POD, "p", {"metadata": {"annotations": {"seen": "1"}}}, "n")
    kube.merge_patch(R.POD, "p", {"metadata": {"labels": {"idle": "false"}}}, "n")
    kube.merge_patch(R.POD, "p", {"metadata": {"annotations": {"seen": "2"}}}, "n")  # not selected: nothing
    kube.create(R.POD, {"metadata": {"name": "q", "namespace": "n", "labels": {"idle": "true"}}})
    events = take(kube.watch(R.POD, "n", resource_version=rv, timeout_seconds=5, label_selector="idle=true"), 4)
    assert names(events) == [("ADDED", "p"), ("MODIFIED", "p"), ("DELETED", "p"), ("ADDED", "q")]


def test_a_watcher_that_hangs_up_is_forgotten(api: ApiServer, kube: KubernetesGateway) -> None:
    kube.create(R.POD, {"metadata": {"name": "p", "namespace": "n"}})
    stream = kube.watch(R.POD)  # no timeout: only the hang-up can end it on the server
    assert names(take(stream, 1)) == [("ADDED", "p")]
    for _ in range(100):  # the server notices on its next idle wake-up (every 0.5 s)
        if not api.store._subscribers:
            break
        threading.Event().wait(0.05)
    assert api.store._subscribers == []
