"""The local API server speaks well enough for the official client's typed APIs and its Watch,
which the engine's resource watcher uses (list, then watch from the list's resourceVersion)."""

from __future__ import annotations

from engine.apiserver import ApiServer


def test_typed_core_api_and_custom_objects_watch(api: ApiServer) -> None:
    from kubernetes import client, watch

    api_client = client.ApiClient(client.Configuration(host=api.url))
    core = client.CoreV1Api(api_client)
    created = core.create_namespaced_config_map("n", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="policy", labels={"app": "gpuaas"}), data={"policy.yaml": "{}"}))
    assert created.metadata.uid and created.metadata.resource_version
    listed = core.list_namespaced_config_map("n", label_selector="app=gpuaas")
    assert [c.metadata.name for c in listed.items] == ["policy"]

    custom = client.CustomObjectsApi(api_client)
    workloads = custom.list_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "workloads")
    custom.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", "team-a", "workloads",
                                           {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                                            "metadata": {"name": "w"}, "spec": {}})
    stream = watch.Watch().stream(custom.list_cluster_custom_object, "kueue.x-k8s.io", "v1beta2", "workloads",
                                  resource_version=workloads["metadata"]["resourceVersion"], timeout_seconds=5)
    event = next(stream)
    stream.close()
    assert event["type"] == "ADDED" and event["object"]["metadata"]["name"] == "w"
    api_client.close()
