"""The gatherer's conversions from API objects to facts, and the probe's reading of its run (pure parts).
The reads themselves run against the real stack (tests/realstack/test_doctor.py)."""

from __future__ import annotations

import json
import time

from gpuaas.doctor import probe, versions
from gpuaas.doctor.facts import ClaimFact, StatefulSetFact
from gpuaas.doctor.gather import _quantity, cluster_queue_fact, pod_fact, workflow_fact
from gpuaas.manifests import observability as obs


def test_a_pod_that_cannot_pull_its_image_says_which_container_and_image() -> None:
    pod = {"metadata": {"namespace": "gpuaas", "name": "p", "labels": {"sensor-name": "gpuaas-on-idle"}},
           "status": {"phase": "Pending", "containerStatuses": [{"name": "main", "ready": False,
                                                                 "image": "quay.io/acme/gpuaas-step:0.1.0",
                                                                 "state": {"waiting": {"reason": "ImagePullBackOff",
                                                                                       "message": "unauthorized"}}}]}}
    fact = pod_fact(pod)
    assert fact.waiting == (("main", "ImagePullBackOff", "unauthorized", "quay.io/acme/gpuaas-step:0.1.0"),)
    assert not fact.ready and fact.labels == {"sensor-name": "gpuaas-on-idle"}


def test_a_workflow_fact_carries_its_template_phase_parameters_and_outputs() -> None:
    workflow = {"metadata": {"name": "gpuaas-on-idle-x", "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                            time.gmtime(time.time() - 30)),
                             "labels": {"workflows.argoproj.io/workflow-template": "gpuaas-on-idle"}},
                "spec": {"arguments": {"parameters": [{"name": "event", "value": "{...}"}]}},
                "status": {"phase": "Succeeded", "nodes": {"n1": {"displayName": "idle-alerts", "outputs": {
                    "parameters": [{"name": "outcome", "value": "no-op"}]}}}}}
    fact = workflow_fact(workflow, time.time())
    assert (fact.template, fact.phase, fact.parameters) == ("gpuaas-on-idle", "Succeeded", {"event": "{...}"})
    assert fact.outputs == {"idle-alerts": {"outcome": "no-op"}} and 25 < fact.age_s < 60


def test_a_cluster_queue_fact_has_its_gpu_quota_its_active_condition_and_whether_it_is_being_deleted() -> None:
    cq = {"metadata": {"name": "team-a", "deletionTimestamp": "2026-12-07T03:33:00Z",
                       "finalizers": ["kueue.x-k8s.io/resource-in-use"]},
          "spec": {"resourceGroups": [{"flavors": [{"name": "a100", "resources": [
              {"name": "cpu", "nominalQuota": "8"}, {"name": "nvidia.com/gpu", "nominalQuota": "2"}]}]}]},
          "status": {"conditions": [{"type": "Active", "status": "False", "reason": "Terminating",
                                     "message": "Can't admit new workloads; clusterQueue is terminating"}]}}
    fact = cluster_queue_fact(cq)
    assert (fact.name, fact.gpu_quota, fact.active, fact.terminating) == ("team-a", 2.0, False, True)
    assert fact.message == "Terminating: Can't admit new workloads; clusterQueue is terminating"
    del cq["metadata"]["deletionTimestamp"], cq["status"]
    assert (cluster_queue_fact(cq).active, cluster_queue_fact(cq).terminating) == (True, False)


def test_quantities_and_versions() -> None:
    assert (_quantity("8"), _quantity(4), _quantity("500m"), _quantity(None), _quantity("x")) == (8, 4, 0.5, 0, 0)
    assert versions.parse_version("v0.19.2") == (0, 19, 2) and versions.parse_version("2.20") == (2, 20, 0)
    assert versions.parse_version("v0.0.0-main") is None and versions.parse_version("latest") is None
    assert versions.image_name_and_tag("quay.io/argoproj/workflow-controller:v4.0.5") == ("workflow-controller", "v4.0.5")
    assert versions.image_name_and_tag("localhost:5000/kueue@sha256:abc") == ("kueue", "")


def test_the_probe_alert_has_the_rendered_labels_without_severity() -> None:
    alert = probe.probe_alert("1a2b3c4d", "gpuaas")
    rule = obs.idle_alert()["labels"]
    assert alert["alertname"] == obs.ALERT_NAME and alert["gpuaas_probe"] == "1a2b3c4d"
    assert "severity" not in alert and alert["gpuaas_reaction"] == rule["gpuaas_reaction"]
    assert alert["pod"] == "gpuaas-doctor-probe-1a2b3c4d"
    assert "gpuaas-doctor-probe-1a2b3c4d" in alert.values()  # the workload's namespace: a name no tenant uses


def test_the_probe_reads_what_its_run_recorded() -> None:
    record = {"data": {"outcome": "no-op", "plan": {"reasons": [
        "no firing GPUWorkloadIdle alert resolves to a Kueue Workload",
        "skipped gpuaas-doctor-probe-1a2b/gpuaas-doctor-probe-1a2b: pod gpuaas-doctor-probe-1a2b/... not found"]},
        "actions": []}}
    summary, released = probe._record_summary({"idle-alerts": {"record": json.dumps(record), "alerts": "[]"}}, "1a2b")
    assert summary.startswith("idle-alerts: no-op (") and "not found" in summary and not released
    applied = {"data": {"outcome": "applied", "actions": [{"result": "applied"}], "plan": {"reasons": ["1a2b"]}}}
    assert probe._record_summary({"on-idle": {"record": json.dumps(applied), "gpus-released": "2"}}, "1a2b")[1]


def test_a_bus_pod_pending_on_its_claim_carries_the_schedulers_words_and_its_claims() -> None:
    """As kube-scheduler v1.36 and the StatefulSet controller leave a JetStream bus pod whose claim cannot bind."""
    pod = {"metadata": {"namespace": "gpuaas", "name": "eventbus-default-js-0",
                        "labels": {"controller": "eventbus-controller", "eventbus-name": "default"}},
           "spec": {"volumes": [{"name": "eventbus-default-js-vol", "persistentVolumeClaim": {
               "claimName": "eventbus-default-js-vol-eventbus-default-js-0"}}, {"name": "pid", "emptyDir": {}}]},
           "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                          "reason": "Unschedulable", "message": "0/4 nodes are available: "
                                                          "pod has unbound immediate PersistentVolumeClaims."}]}}
    fact = pod_fact(pod)
    assert (fact.phase, fact.ready, fact.node) == ("Pending", False, "")
    assert fact.unscheduled == "Unschedulable: 0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims."
    assert fact.claims == ("eventbus-default-js-vol-eventbus-default-js-0",)
    pod["spec"]["nodeName"] = "worker-1"
    pod["status"] = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}],
                     "containerStatuses": [{"name": "main", "ready": True}]}
    assert (pod_fact(pod).node, pod_fact(pod).unscheduled, pod_fact(pod).ready) == ("worker-1", "", True)


def test_the_bus_its_statefulset_claims_storage_classes_and_kwok_nodes() -> None:
    from gpuaas.doctor.gather import bus_form, claim_fact, is_default_class, is_kwok, stateful_set_fact

    assert [bus_form(s) for s in ({"jetstream": {"version": "latest"}}, {"jetstreamExotic": {"url": "nats://x"}},
                                  {"kafka": {"url": "k:9092"}}, {"nats": {"native": {}}}, {"nats": {"exotic": {}}},
                                  {})] == ["jetstream", "jetstreamExotic", "kafka", "nats", "nats.exotic", ""]
    statefulset = {"metadata": {"name": "eventbus-default-js"}, "status": {"readyReplicas": 2}, "spec": {
        "replicas": 3, "volumeClaimTemplates": [{"metadata": {"name": "eventbus-default-js-vol"}, "spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}}}}]}}
    assert stateful_set_fact(statefulset) == StatefulSetFact("eventbus-default-js", 2, 3, None)
    statefulset["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] = "standard"
    statefulset["status"] = {}
    assert stateful_set_fact(statefulset) == StatefulSetFact("eventbus-default-js", 0, 3, "standard")
    assert claim_fact({"metadata": {"name": "c"}, "spec": {}, "status": {"phase": "Pending"}}) == ClaimFact("c", "Pending")
    assert claim_fact({"metadata": {"name": "c"}, "spec": {"storageClassName": ""}, "status": {"phase": "Bound"}}) \
        == ClaimFact("c", "Bound", "")
    assert is_default_class({"metadata": {"annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}})
    assert not is_default_class({"metadata": {"annotations": {"storageclass.kubernetes.io/is-default-class": "false"}}})
    assert is_kwok({"metadata": {"annotations": {"kwok.x-k8s.io/node": "fake"}}})
    assert is_kwok({"metadata": {"labels": {"type": "kwok"}}})
    assert not is_kwok({"metadata": {"labels": {"gpuaas.io/pod-runtime": "kubelet"}}})
