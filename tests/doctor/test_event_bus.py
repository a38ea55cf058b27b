"""The doctor's `argo-events.bus`: the EventBus's own pods, not its `Deployed` condition, say whether events
flow (issue 18, admin walk B2: "nothing blocks" while the three bus pods were Pending on unbound claims).

Facts are built by hand as Argo Events v1.9.11 and Kubernetes v1.36 leave them: the controller marks the bus
`Deployed=True "JetStream is deployed"` once StatefulSet `eventbus-default-js` exists
(pkg/reconciler/eventbus/installer/jetstream.go); the StatefulSet (Parallel pod management) makes claims
`eventbus-default-js-vol-eventbus-default-js-<n>` from its template; the scheduler leaves a pod whose claim
cannot bind Pending with PodScheduled=False `Unschedulable`. Each expected answer is worked out below."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from typing import Any

from gpuaas.doctor import checks
from gpuaas.doctor.facts import ClaimFact, EventBusFact, Facts, StatefulSetFact
from gpuaas.doctor.findings import Finding, Status
from gpuaas.doctor.report import render_table
from tests.doctor.healthy import NS, bus_claim, bus_pod, event_bus, healthy

CHECK = "argo-events.bus"
UNBOUND = ("Unschedulable: 0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: "
           "0/4 nodes are available: 4 Preemption is not helpful for scheduling.")
"""kube-scheduler v1.36's message for a pod whose claim is not bound (VolumeBinding's ErrReasonBindConflict...)."""
CLAIMS = " ".join(bus_claim(i) for i in range(3))


def with_bus(**changes: Any) -> Facts:
    facts = healthy()
    facts.event_bus = event_bus(**changes)
    return facts


def pending_bus(storage_classes: dict[str, bool], **changes: Any) -> EventBusFact:
    """The walk's bus: 0 of 3 ready, every pod Pending on its claim, every claim Pending with no class set."""
    return event_bus(**{"stateful_set": StatefulSetFact("eventbus-default-js", 0, 3),
                        "pods": tuple(bus_pod(i, phase="Pending", ready=False, node="", unscheduled=UNBOUND)
                                      for i in range(3)),
                        "claims": tuple(ClaimFact(bus_claim(i), "Pending", None) for i in range(3)),
                        "storage_classes": storage_classes, **changes})


def runs_as_printed(fix: str) -> bool:
    """Every line a command (kubectl, helm) or a comment, and bash parses the whole: an admin (or the real-stack
    test's `run_fix`) can run it as printed."""
    lines = fix.splitlines()
    return all(line.startswith(("kubectl ", "helm ", "# ")) for line in lines) and subprocess.run(
        ["bash", "-n", "-c", fix], check=False, capture_output=True).returncode == 0


def judged(facts: Facts) -> Finding:
    """The bus's finding, and that nothing else in the report changed from the healthy cluster's."""
    report = checks.run(facts)
    assert {check for check in report.not_ok() if check != CHECK} == set(), report.not_ok()
    return report.by_id()[CHECK]


def test_pending_pods_on_unbound_claims_block_with_the_fix() -> None:
    """The walk (B2): one StorageClass `standard`, not the default; the claims set none. Worked answer: 0 of 3
    ready blocks; each pod named Pending with the scheduler's words, each claim by name and phase; the fix sets
    the class on the EventBus, then deletes the StatefulSet (its claim template cannot change: the API server
    forbids it and Argo Events v1.9.11 only Updates, so it re-creates the one you delete) and the three unbound
    claims (no volume: no data); or, since the claims set no class, makes `standard` the default instead."""
    facts = with_bus()
    facts.event_bus = pending_bus({"standard": False})
    finding = judged(facts)
    assert finding.status == Status.BLOCKS
    assert finding.summary.startswith("EventBus default has 0 of 3 JetStream pods ready (StatefulSet "
                                      "eventbus-default-js): no event reaches any Sensor")
    for i in range(3):
        assert f"pod eventbus-default-js-{i} is Pending, not scheduled: {UNBOUND}" in finding.details
        assert (f"claim {bus_claim(i)} is Pending: it sets no storageClassName and no StorageClass is the cluster's "
                "default (StorageClasses here: standard)") in finding.details
    fix = finding.fix.splitlines()
    assert fix[1:4] == [
        (f"kubectl -n {NS} patch eventbus default --type=merge "
        "-p '{\"spec\":{\"jetstream\":{\"persistence\":{\"storageClassName\":\"standard\"}}}}'"),
        f"kubectl -n {NS} delete statefulset eventbus-default-js",
        f"kubectl -n {NS} delete pvc {CLAIMS} --wait=false"]
    assert fix[-1].startswith("# or, instead of the above, make it the cluster's default StorageClass")
    assert fix[-1].endswith("kubectl patch storageclass standard "
                            "-p '{\"metadata\":{\"annotations\":{\"storageclass.kubernetes.io/is-default-class\":\"true\"}}}'")
    assert runs_as_printed(finding.fix), finding.fix
    assert "BLOCKS  argo-events.bus" in render_table(checks.run(facts))


def test_a_helm_install_gets_the_values_setting_whole() -> None:
    """The chart uses `eventBus.spec` whole (values.yaml), so the setting is the bus's current spec with the class:
    a --set of the one key would drop `version`, which Argo Events requires."""
    facts = with_bus()
    facts.event_bus = pending_bus({"standard": False}, helm_release="gpuaas")
    fix = judged(facts).fix
    spec = {"jetstream": {"version": "latest", "replicas": 3,
                          "persistence": {"accessMode": "ReadWriteOnce", "volumeSize": "5Gi",
                                          "storageClassName": "standard"},
                          "containerTemplate": {"resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}}}}
    helm = (f"helm upgrade gpuaas charts/gpuaas -n {NS} --reuse-values --set-json "
            f"'eventBus.spec={json.dumps(spec, separators=(',', ':'))}'")
    assert helm in fix.splitlines() and "patch eventbus" not in fix and runs_as_printed(fix)
    assert f"kubectl -n {NS} delete statefulset eventbus-default-js" in fix.splitlines()


def test_several_or_no_storage_classes() -> None:
    """Two classes, none default: the fix cannot choose, it names both and leaves the placeholder. None at all:
    no class can be set; the fix says to install a provisioner, or to run the bus without persistence."""
    facts = with_bus()
    facts.event_bus = pending_bus({"fast-ssd": False, "standard": False})
    finding = judged(facts)
    assert '"storageClassName":"<a StorageClass of yours: fast-ssd, standard>"' in finding.fix
    facts.event_bus = pending_bus({})
    finding = judged(facts)
    assert finding.status == Status.BLOCKS and "this cluster has no StorageClass" in finding.fix
    assert runs_as_printed(finding.fix)
    assert ("kubectl -n gpuaas patch eventbus default --type=json "
            "-p '[{\"op\":\"remove\",\"path\":\"/spec/jetstream/persistence\"}]'") in finding.fix.splitlines()


def test_no_storage_class_under_helm_nulls_the_persistence_in_the_release() -> None:
    """A Helm release renders the chart's persistence again on the next upgrade, so removing it from the live
    EventBus would not last: the fix nulls it in the release, in the whole spec (the chart uses it whole; the real
    helm, given the one key, rendered a bus without the rest). A review of the walk's B2 fix found the live patch
    printed for Helm too."""
    facts = with_bus()
    facts.event_bus = pending_bus({}, helm_release="gpuaas")
    finding = judged(facts)
    lines = finding.fix.splitlines()
    (helm,) = [line for line in lines if line.startswith("helm upgrade gpuaas charts/gpuaas -n gpuaas --reuse-values")]
    import shlex
    spec = json.loads(shlex.split(helm)[-1].split("=", 1)[1])
    assert spec["jetstream"]["persistence"] is None and spec["jetstream"]["version"] == "latest", spec
    assert "patch eventbus" not in finding.fix and runs_as_printed(finding.fix)


def test_a_spec_with_a_quote_is_quoted_for_the_shell() -> None:
    """The bus's spec is copied whole into --set-json: a value with a single quote (streamConfig YAML such as
    `maxAge: '168h'`) must not break the printed line."""
    facts = with_bus()
    spec = json.loads(json.dumps(event_bus().spec))
    spec["jetstream"]["streamConfig"] = "maxAge: '168h'"
    facts.event_bus = pending_bus({"standard": False}, spec=spec, helm_release="gpuaas")
    fix = judged(facts).fix
    (helm,) = [line for line in fix.splitlines() if line.startswith("helm upgrade")]
    import shlex
    words = shlex.split(helm)
    assert json.loads(words[-1].split("=", 1)[1])["jetstream"]["streamConfig"] == "maxAge: '168h'"
    assert runs_as_printed(fix)


def test_the_half_applied_fix_says_what_is_left() -> None:
    """The admin patched the class but kept the StatefulSet: Argo Events' Update of the claim template is refused
    (Deployed=False JetStreamStatefulSetFailed), the pods stay Pending. Worked answer: no patch line any more (the
    EventBus asks for `standard`), the StatefulSet and the claims to delete."""
    facts = with_bus()
    spec = json.loads(json.dumps(event_bus().spec))
    spec["jetstream"]["persistence"]["storageClassName"] = "standard"
    refused = ("failed to update jetstream statefulset, err: StatefulSet.apps \"eventbus-default-js\" is invalid: "
               "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', ... are forbidden")
    facts.event_bus = pending_bus({"standard": False}, spec=spec, conditions={
        "Configured": ("True", "", ""), "Deployed": ("False", "JetStreamStatefulSetFailed", refused)})
    finding = judged(facts)
    assert finding.status == Status.BLOCKS and "patch eventbus" not in finding.fix and runs_as_printed(finding.fix)
    assert finding.fix.splitlines()[1:3] == [f"kubectl -n {NS} delete statefulset eventbus-default-js",
                                             f"kubectl -n {NS} delete pvc {CLAIMS} --wait=false"]
    assert ("StatefulSet eventbus-default-js still makes claims with no storageClassName; the EventBus asks for "
            "standard") in finding.details
    assert f"EventBus default: Deployed=False JetStreamStatefulSetFailed: {refused}" in finding.details


def test_all_bus_pods_ready_is_ok_with_the_count() -> None:
    finding = judged(healthy())
    assert finding.status == Status.OK
    assert finding.summary == "EventBus default: 3 of 3 JetStream pods ready (StatefulSet eventbus-default-js)"
    assert "3 claims bound" in finding.details


def test_an_external_nats_is_not_judged_and_does_not_block() -> None:
    """jetstreamExotic (the real stack's bus, and sites with their own NATS): Argo Events deploys nothing and
    marks the bus Deployed=True "Skipped"; there are no bus pods to judge."""
    facts = with_bus(form="jetstreamExotic", spec={"jetstreamExotic": {"url": "nats://nats.infra:4222"}},
                     conditions={"Deployed": ("True", "Skipped", "Skip deployment because of using exotic config.")},
                     stateful_set=None, pods=(), claims=())
    finding = judged(facts)
    assert finding.status == Status.OK
    assert finding.summary == ("EventBus default uses jetstreamExotic (nats://nats.infra:4222), external NATS: not "
                               "judged from here; --probe checks delivery end to end")


def test_two_of_three_ready_blocks_naming_the_one() -> None:
    """JetStream's stream has 3 replicas (Argo Events' default streamConfig): it is created only with all three
    servers up, and kept only with a majority, so 2 of 3 blocks too. Only pod 2 is named."""
    crashing = bus_pod(2, ready=False, waiting=(("main", "CrashLoopBackOff", ("back-off 5m0s restarting failed "
                                                 "container=main"), "nats:2.10.29"),))
    facts = with_bus(stateful_set=StatefulSetFact("eventbus-default-js", 2, 3), pods=(bus_pod(0), bus_pod(1), crashing))
    finding = judged(facts)
    assert finding.status == Status.BLOCKS
    assert finding.summary.startswith("EventBus default has 2 of 3 JetStream pods ready (StatefulSet "
                                      "eventbus-default-js): JetStream creates its stream (3 replicas by Argo "
                                      "Events' default) only with 3 servers up")
    bad = [d for d in finding.details if d.startswith("pod ")]
    assert bad == [("pod eventbus-default-js-2 is Running, not ready: container main is CrashLoopBackOff: "
                   "back-off 5m0s restarting failed container=main")]
    assert f"kubectl -n {NS} logs eventbus-default-js-2 -c main --previous" in finding.fix
    assert runs_as_printed(finding.fix)


def test_a_pod_pending_for_room_gets_the_schedulers_words() -> None:
    message = "Unschedulable: 0/4 nodes are available: 3 Insufficient memory, 1 node(s) had untolerated taint."
    facts = with_bus(stateful_set=StatefulSetFact("eventbus-default-js", 2, 3),
                     pods=(bus_pod(0), bus_pod(1), bus_pod(2, phase="Pending", ready=False, node="",
                                                            unscheduled=message)))
    finding = judged(facts)
    assert finding.status == Status.BLOCKS
    assert f"pod eventbus-default-js-2 is Pending, not scheduled: {message}" in finding.details
    assert f"kubectl -n {NS} describe pod eventbus-default-js-2" in finding.fix


def test_no_statefulset_and_no_bus() -> None:
    facts = with_bus(stateful_set=None, pods=(), claims=(), conditions={
        "Configured": ("False", "InvalidSpec", "invalid spec: a version for jetstream needs to be specified"),
        "Deployed": ("Unknown", "", "")})
    finding = judged(facts)
    assert finding.status == Status.BLOCKS and "made no StatefulSet" in finding.summary
    assert "Configured=False InvalidSpec: invalid spec: a version for jetstream needs to be specified" in finding.summary
    facts = healthy()
    facts.event_bus = None
    finding = judged(facts)
    assert finding.status == Status.BLOCKS and finding.summary.startswith(f"no EventBus default in {NS}")


def test_a_running_bus_with_a_spec_not_applied_warns() -> None:
    facts = with_bus(conditions={"Configured": ("True", "", ""), "Deployed": ("False", "JetStreamStatefulSetFailed",
                                                                              "failed to update jetstream statefulset")})
    finding = judged(facts)
    assert finding.status == Status.WARN and "has not applied the EventBus's current spec" in finding.summary


def test_unreadable_bus_facts_are_not_checked() -> None:
    facts = healthy()
    facts.unreadable["event-bus"] = "GET /api/v1/namespaces/gpuaas/persistentvolumeclaims: HTTP 403 forbidden"
    report = checks.run(facts)
    assert CHECK not in report.by_id() and "HTTP 403" in report.not_checked[CHECK]


def test_pods_running_on_kwok_nodes_block() -> None:
    """KWOK (the real stack's simulated nodes) marks the pods bound to its nodes Running and Ready, but no
    container runs: counted as running they hid that nothing reacts (walk B2, `cpu-node-1`); the product cannot
    react, so it blocks (a warning left the doctor at exit 0)."""
    facts = healthy()
    facts.kwok_nodes = ("cpu-node-1",)
    facts.event_objects = [dataclasses.replace(o, pods=tuple(dataclasses.replace(p, node="cpu-node-1") for p in o.pods))
                           for o in facts.event_objects]
    facts.event_bus = event_bus(pods=tuple(bus_pod(i, node="cpu-node-1") for i in range(3)))
    report = checks.run(facts)
    assert report.not_ok() == {CHECK: Status.BLOCKS, "argo-events.pods": Status.BLOCKS}
    pods, bus = report.by_id()["argo-events.pods"], report.by_id()[CHECK]
    assert pods.summary.startswith("8 of the product's EventSource/Sensor pods are Running on KWOK nodes "
                                   "(cpu-node-1): KWOK only simulates them")
    assert "events.podTemplate" in pods.fix
    assert bus.summary.startswith("3 of EventBus default's pods are Running on KWOK nodes (cpu-node-1)")
    assert "spec.jetstream.nodeSelector" in bus.fix
