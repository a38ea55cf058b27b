"""The idle half of the real loop (issue 9 part 3): idle GPUs -> alert -> Argo -> release -> queue moves.

Every link is the real program, and each one is asserted:

1. the stack's DCGM-like exporter (gpuaas.cluster.gpu_exporter, a stand-in for dcgm-exporter: KWOK
   has no GPUs) reports 0 % for the GPUs of a batch Job's pods (annotation
   `gpuaas.io/emulated-gpu-utilization: "0"`);
2. the stack's own Prometheus (`gpuaas cluster up --with events`, gpuaas.cluster.alerting) evaluates
   the product's RENDERED rules (gpuaas.manifests.observability `rule_groups`, the stack's idle
   window: 30 s by default, `for` 5 s) and the stack's real Alertmanager with the product's routing
   (`alertmanager_config`) POSTs the GPUWorkloadIdle group, through the stack's webhook proxy (the
   EventSource's Service as this machine reaches it), to the cluster's real webhook EventSource
   `gpuaas-alertmanager` with the bearer token;
3. the product's Sensor `gpuaas-on-idle` (a pod on the real node) execs the argo CLI, which submits
   `gpuaas-on-idle`; the workflow-controller runs `idle-alerts` and the fanned-out `on-idle` step(s)
   on the real node; the step reads the evidence from the stack's Prometheus and releases the Job
   (a batch Job's strategy is deactivate-workload: Workload spec.active=false, the record on it);
4. Kueue evicts the Workload, and admits the Job queued behind it into the freed quota;
5. `gpuaas-resume-workers`, submitted BY HAND with the real argo CLI as an admin would, brings the
   released Job back; it completes; `gpuaas-on-finished` runs Succeeded.

One Prometheus, the stack's: it raises the alert (its rules, its Alertmanager) and the on-idle step,
a pod on the real node, reads its evidence from it, at the fixed ClusterIP the node forwards
(gpuaas.cluster.services), which the product on this stack names (gpuaas.cluster.product). (Before
`cluster up` ran the rules and an Alertmanager, this module started a pair of its own,
engine.monitoring, scraping the cluster's exporter; nothing here starts one now.)

The tenant is this module's own (namespace, LocalQueue, ClusterQueue outside the cohort with 2
GPUs; unique names) so no other Job takes its quota and provision-quota (which splits the cohort)
leaves it alone. Its idle policy (short window, short minimum runtime, enforce) is added to the
product's policy ConfigMap for the test (and put back each second while the module runs, should another
module's install re-apply the rendered policy) and removed after. Why a batch Job: its release is the
plainest real one on KWOK (Kueue evicts the deactivated Workload, suspends the Job, its pods go,
the quota is free) and its resume is one field (spec.active back to true).
"""

from __future__ import annotations

import base64
import json
import subprocess
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from engine.executor import item_label
from gpuaas.cluster import processes
from gpuaas.cluster.binaries import program
from gpuaas.cluster.gpu_exporter import UTILIZATION_ANNOTATION
from gpuaas.manifests import observability as obs
from steps.policy import KEY, parse_duration, parse_policy
from tests.realstack.argo_product import (
    PRODUCT_NAMESPACE,
    gpu_job,
    logs,
    policy_with,
    product_with_tenant,
    workload_of,
)
from tests.realstack.test_kueue_admission import _condition
from tests.support.real_cluster import LogSince, RealCluster, eventually
from tests.support.run_attribution import alert_group, expect_by_hand, expect_sensor, expect_sweep

WINDOW_S = 30
"""The tenant's policy window (seconds instead of 30 min); the stack's idle rule may not be longer."""
MIN_RUNTIME_S = 10
COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
COMPLETE_JITTER = "pod-complete.stage.kwok.x-k8s.io/jitter-delay"
"""KWOK v0.8.0 waits the jitter-delay (default 5 s) whenever it is not longer than the delay
(pkg/utils/lifecycle Stage.Delay): a pod kept running needs both."""
SUFFIX = uuid.uuid4().hex[:6]
TENANT = f"idle-{SUFFIX}"
FLAVOR = "gpu-a100"


def _time(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


POLICY = (f"\n  {TENANT}:            # added by tests/realstack/test_argo_idle.py, removed after\n"
          f"    idle:\n      window: {WINDOW_S}s\n      minRuntime: {MIN_RUNTIME_S}s\n      mode: enforce\n"
          f"      maxReleasesPerHour: 10\n")


def _with_tenant_policy(text: str) -> str:
    """The policy document with this module's tenant added under `tenants:` (the last section)."""
    changed = policy_with(text, POLICY)
    settings = parse_policy(changed).idle_for(TENANT)
    assert (settings.window_seconds, settings.min_runtime_seconds, settings.mode) == (WINDOW_S, MIN_RUNTIME_S,
                                                                                      "enforce"), settings
    return changed


@pytest.fixture(scope="module")
def product(argo_cluster: RealCluster) -> Iterator[RealCluster]:
    with product_with_tenant(argo_cluster, TENANT, POLICY, _with_tenant_policy, flavor=FLAVOR) as cluster:
        yield cluster


def _transition(workload: dict, kind: str, status: str = "True") -> str | None:
    for condition in (workload.get("status") or {}).get("conditions") or []:
        if condition["type"] == kind and condition["status"] == status:
            return condition["lastTransitionTime"]
    return None


def _runs(custom: client.CustomObjectsApi, reaction: str) -> list[dict]:
    items = custom.list_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows",
                                                 label_selector=f"gpuaas.io/reaction={reaction}")["items"]
    return items


def _parameters(run: dict) -> dict[str, str]:
    return {p["name"]: p.get("value") for p in run["spec"]["arguments"]["parameters"]}


def _done(run: dict) -> bool:
    return (run.get("status") or {}).get("phase") in ("Succeeded", "Failed", "Error")


def _outputs(node: dict) -> dict[str, str]:
    return {p["name"]: p.get("value") for p in (node.get("outputs") or {}).get("parameters") or []}


def _pod_nodes(run: dict, template: str) -> list[dict]:
    return [n for n in run["status"]["nodes"].values() if n.get("templateName") == template and n["type"] == "Pod"]


def _delivered(run: dict) -> dict:
    """The Alertmanager POST body as the Sensor delivered it (the `event` parameter: CloudEvent, data base64)."""
    event = json.loads(_parameters(run)["event"])
    data = event["data"]
    data = json.loads(base64.b64decode(data)) if isinstance(data, str) else data
    return data["body"]


def _get(url: str) -> dict | list:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def _query(prometheus: str, promql: str) -> list[dict]:
    return _get(f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))["data"]["result"]


def _alerts(prometheus: str) -> list[dict]:
    """The stack's Prometheus's current alerts (pending and firing)."""
    return _get(f"{prometheus}/api/v1/alerts")["data"]["alerts"]


def _argo(cluster: RealCluster, *args: str) -> str:
    done = subprocess.run([str(program("argo-workflows", "argo")), f"--kubeconfig={cluster.kubeconfig}",
                           "-n", PRODUCT_NAMESPACE, *args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"argo {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}"
    return done.stdout


def test_idle_gpus_are_released_through_real_alerting_and_argo_and_the_queue_moves(product: RealCluster) -> None:
    batch = client.BatchV1Api(product.admin)
    custom = client.CustomObjectsApi(product.admin)
    core = client.CoreV1Api(product.admin)
    status = product.cluster.status()
    endpoints = status["endpoints"]
    components = {c["name"]: c for c in status["components"]}
    # The stack's alert path: Alertmanager and the webhook proxy are processes of the stack, ready, in status.
    for name in ("alertmanager", "webhook-proxy", "prometheus"):
        assert components[name]["running"] and components[name]["state"] == "ready", components.get(name)
    alertmanager = endpoints["alertmanager"]
    assert alertmanager == components["alertmanager"]["endpoint"]
    prometheus = product.endpoint("prometheus")
    window = status["idleRule"]["window"]
    window_seconds = parse_duration("idleRule.window", window)
    assert window_seconds <= WINDOW_S, (f"expected the stack's idle window at most the tenant's {WINDOW_S}s, found "
                                        f"{window}: start the cluster with --idle-window {WINDOW_S}s or less")
    rules = _get(f"{prometheus}/api/v1/rules")["data"]["groups"]
    (idle_rule,) = [r for g in rules for r in g["rules"] if r["name"] == obs.ALERT_NAME]
    assert f"[{window}]" in idle_rule["query"] and idle_rule["duration"] == parse_duration(
        "idleRule.for", status["idleRule"]["for"]), idle_rule
    active = [a["url"] for a in _get(f"{prometheus}/api/v1/alertmanagers")["data"]["activeAlertmanagers"]]
    assert any(url.startswith(alertmanager + "/") for url in active), (alertmanager, active)
    # The proxy's log is read from here on: an earlier module's (the demo's) POSTs are not this test's.
    proxy_log = LogSince.now(components["webhook-proxy"]["log"])

    # The idle Job: 2 pods x 1 GPU at 0 %, kept running by KWOK; it takes the tenant's whole quota.
    idle = batch.create_namespaced_job(TENANT, gpu_job(TENANT, name="idle", pods=2, gpus_per_pod=1, annotations={
        UTILIZATION_ANNOTATION: "0", COMPLETE_DELAY: "900s", COMPLETE_JITTER: "900s"}))
    admitted = eventually(lambda: (w := workload_of(custom, TENANT, idle.metadata.uid)) and
                          _condition(w, "Admitted") == "True" and w, timeout_s=90,
                          what="the idle Job's Workload admitted")
    workload = admitted["metadata"]["name"]
    pods = eventually(lambda: (p := [x for x in core.list_namespaced_pod(
        TENANT, label_selector=f"batch.kubernetes.io/job-name={idle.metadata.name}").items
        if x.status.phase == "Running"]) and len(p) == 2 and p, timeout_s=90, what="the idle Job's 2 pods Running")
    names = sorted(p.metadata.name for p in pods)
    # The exporter attributes one GPU to each pod, at 0 %: what the rules read.
    series = eventually(lambda: (r := _query(prometheus, f'DCGM_FI_DEV_GPU_UTIL{{namespace="{TENANT}"}}'))
                        and len(r) == 2 and r, timeout_s=60, what="the exporter's series of the 2 pods scraped")
    assert sorted({s["metric"]["pod"] for s in series}) == names and all(
        float(s["value"][1]) == 0 for s in series), series

    # Queued behind it: a Job of 2 GPUs that completes as soon as it runs.
    queued = batch.create_namespaced_job(TENANT, gpu_job(TENANT, name="queued", pods=1, gpus_per_pod=2, annotations={
        COMPLETE_DELAY: "2s"}))
    pending = eventually(lambda: (w := workload_of(custom, TENANT, queued.metadata.uid)) and
                         _transition(w, "QuotaReserved", "False") and w, timeout_s=60,
                         what="the queued Job's Workload waiting for quota")
    assert _condition(pending, "Admitted") != "True"

    # The alert fires in the stack's Prometheus; its Alertmanager POSTs it; the Sensor submits gpuaas-on-idle.
    firing = eventually(lambda: [a for a in _alerts(prometheus) if a["labels"].get(obs.WORKLOAD_NAMESPACE_LABEL) == TENANT
                                 and a["state"] == "firing"], timeout_s=window_seconds * 2 + 60,
                        what="GPUWorkloadIdle firing for the tenant's pods")
    assert {a["labels"]["alertname"] for a in firing} == {obs.ALERT_NAME}
    assert {a["labels"]["pod"] for a in firing} <= set(names)
    eventually(lambda: [a for a in _get(f"{alertmanager}/api/v2/alerts") if a["labels"].get(obs.WORKLOAD_NAMESPACE_LABEL) == TENANT],
               timeout_s=30, what="the stack's Alertmanager holding the tenant's alerts")

    def on_idle_runs() -> list[dict]:
        return [r for r in _runs(custom, "on-idle") if _parameters(r).get("namespace") == TENANT]
    try:
        eventually(lambda: [r for r in on_idle_runs() if _done(r)], timeout_s=300,
                   what=f"a gpuaas-on-idle Workflow for namespace {TENANT} finished")
    except AssertionError as error:
        raise AssertionError(f"{error}\nPrometheus alerts: {_alerts(prometheus)}\n"
                             f"Alertmanager alerts: {_get(f'{alertmanager}/api/v2/alerts')}\n"
                             f"Alertmanager log:\n{processes.log_tail(components['alertmanager']['log'], 30)}\n"
                             f"webhook proxy log:\n{processes.log_tail(components['webhook-proxy']['log'], 30)}\n"
                             f"EventSource:\n{logs(core, 'eventsource-name=gpuaas-alertmanager', 15)}\n"
                             f"Sensor:\n{logs(core, 'sensor-name=gpuaas-on-idle', 15)}") from None
    # The POSTs went through the stack's proxy to the EventSource's pod, which took them (200), since this test began.
    proxied = proxy_log.lines()
    assert [line for line in proxied if line.startswith(f"POST {obs.WEBHOOK_PATH} -> ") and ": 200 (" in line], \
        (f"no POST answered 200 in the webhook proxy's log since byte {proxy_log.start} (this test's start): "
         f"{proxied[-20:]}")

    # The release, in the live objects: the Workload deactivated with gpuaas' record, Kueue evicted it.
    released = eventually(lambda: (w := workload_of(custom, TENANT, idle.metadata.uid)) and
                          _transition(w, "Evicted") and _transition(w, "QuotaReserved", "False") and w,
                          timeout_s=120, what=f"Workload {workload} evicted by Kueue after the release")
    assert released["spec"]["active"] is False
    record = json.loads(released["metadata"]["annotations"]["gpuaas.io/release"])
    assert record["strategy"] == "deactivate-workload" and record["by"] == "on-idle" and record["gpus"] == 2, record
    eventually(lambda: batch.read_namespaced_job(idle.metadata.name, TENANT).spec.suspend is True, timeout_s=60,
               what="Kueue suspended the released Job")
    eventually(lambda: not core.list_namespaced_pod(
        TENANT, label_selector=f"batch.kubernetes.io/job-name={idle.metadata.name}").items,
        timeout_s=120, what="the released Job's pods gone")

    # ... and in the runs: every run Succeeded, exactly one child released 2 GPUs, the others saw it released.
    runs = eventually(lambda: (r := on_idle_runs()) and all(_done(x) for x in r) and r, timeout_s=300,
                      what="every gpuaas-on-idle run for the tenant finished")
    children = []
    for run in runs:
        assert run["status"]["phase"] == "Succeeded", run["status"].get("message")
        # submitted by the on-idle Sensor, for the alert group of this tenant's idle pods
        problems = expect_sensor(run, "gpuaas-on-idle", alert_group(obs.ALERT_NAME, TENANT, "idle-"))
        assert not problems, problems
        body = _delivered(run)
        assert body["status"] == "firing" and body["commonLabels"][obs.WORKLOAD_NAMESPACE_LABEL] == TENANT
        (alerts_node,) = _pod_nodes(run, "idle-alerts")
        listed = json.loads(_outputs(alerts_node)["alerts"])
        # A later group (Alertmanager re-sends it with the second pod's alert) may find the pods gone: no item.
        assert {a["namespace"] for a in listed} <= {TENANT} and {a["pod"] for a in listed} <= set(names), listed
        nodes = _pod_nodes(run, "on-idle")
        # One child per alert (withParam): a Retry node (the template's retryStrategy), its attempts Pods
        # named after it plus "(attempt)" (v4.0.5 operator.go executeTemplate, processNodeRetries: "%s(%d)";
        # test_argo_pods sees `flaky(0)`, `flaky(1)`), named as the local engine names it (Argo's
        # generateNodeName over object items).
        retried = [n for n in run["status"]["nodes"].values()
                   if n.get("templateName") == "on-idle" and n["type"] == "Retry"]
        expected = [f"on-idle({index}:{item_label(item)})" for index, item in enumerate(listed)]
        assert sorted(n["displayName"] for n in retried) == sorted(expected), [n["name"] for n in retried]
        # ... each with one attempt (nothing transient here).
        assert sorted(n["displayName"] for n in nodes) == sorted(f"{name}(0)" for name in expected), \
            [n["name"] for n in nodes]
        for node in nodes:
            assert node["hostNodeName"] == "gpuaas-node"
            children.append((run, node, _outputs(node)))
    outcomes = sorted((o["outcome"], o["gpus-released"]) for _, _, o in children)
    applied = [c for c in children if c[2]["outcome"] == "applied"]
    assert len(applied) == 1 and applied[0][2]["gpus-released"] == "2" and applied[0][2]["tenant"] == TENANT, outcomes
    assert all(o == ("no-op", "0") for o in outcomes if o[0] != "applied"), outcomes
    release_run, _, release_outputs = applied[0]
    assert workload in release_outputs["record"]

    # The queued Job's Workload is admitted into the freed quota, after the release.
    moved = eventually(lambda: (w := workload_of(custom, TENANT, queued.metadata.uid)) and
                       _condition(w, "Admitted") == "True" and w, timeout_s=120,
                       what="the queued Job admitted into the freed quota")
    queued_admitted = _transition(moved, "Admitted")
    assert _time(queued_admitted) >= _time(_transition(released, "Evicted")) - 1  # whole seconds
    eventually(lambda: (w := workload_of(custom, TENANT, queued.metadata.uid)) and _condition(w, "Finished") == "True",
               timeout_s=120, what="the queued Job finished")

    # An admin resumes the released Job by hand: the real argo CLI, from the WorkflowTemplate.
    submitted = json.loads(_argo(product, "submit", "--from", "workflowtemplate/gpuaas-resume-workers",
                                 "-p", f"namespace={TENANT}", "-p", f"workload={workload}", "-o", "json"))
    resume_name = submitted["metadata"]["name"]
    resumed = eventually(lambda: (r := custom.get_namespaced_custom_object(
        "argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows", resume_name)) and _done(r) and r,
        timeout_s=300, what=f"Workflow {resume_name} finished")
    assert resumed["status"]["phase"] == "Succeeded", resumed["status"].get("message")
    assert not expect_by_hand(resumed), expect_by_hand(resumed)
    (resume_node,) = _pod_nodes(resumed, "resume-workers")
    resume_outputs = _outputs(resume_node)
    assert resume_outputs["outcome"] == "applied", resume_outputs
    back = custom.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", TENANT, "workloads", workload)
    assert back["spec"]["active"] is True and "gpuaas.io/release" not in (back["metadata"].get("annotations") or {})

    # The resumed Job runs again; its pods are told to finish now (KWOK re-reads a changed pod's delay and
    # re-arms it from the change, v0.8.0 PodController.preprocess). Seen in an earlier run: the same change
    # made to the Job's template while it was released did not reach the resumed pods (they ran 900 s). Why
    # is not established: Kueue v0.19.2 puts the template's annotations back from the Workload's PodSet
    # only in the patch that suspends the Job (jobframework stopJob), before that change. gpuaas-on-finished runs.
    def resumed_pods() -> list:
        return [p for p in core.list_namespaced_pod(
            TENANT, label_selector=f"batch.kubernetes.io/job-name={idle.metadata.name}").items
            if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
    for pod in eventually(lambda: (p := resumed_pods()) and len(p) == 2 and p, timeout_s=120,
                          what="the resumed Job's 2 pods Running"):
        core.patch_namespaced_pod(pod.metadata.name, TENANT, {"metadata": {"annotations": {
            COMPLETE_DELAY: "1s", COMPLETE_JITTER: "1s"}}})
    eventually(lambda: _condition(custom.get_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", TENANT, "workloads", workload), "Finished") == "True",
        timeout_s=180, what=f"the resumed Workload {workload} finished")
    finished = eventually(lambda: [r for r in _runs(custom, "on-finished") if _parameters(r).get("workload") == workload
                                   and _done(r)], timeout_s=300, what=f"gpuaas-on-finished for {workload} finished")
    assert all(r["status"]["phase"] == "Succeeded" for r in finished), [r["status"].get("message") for r in finished]
    # A Job's finish is the catch-up sweep's to record (steps.delivery.event_path_runs: the Sensors take no job
    # kind's transitions; docs/catch-up.md), so its run is the sweep's, for this finish.
    problems = [p for r in finished for p in expect_sweep(r, "finished")]
    assert not problems, problems

    # The figure docs/real-stack.md quotes: alert firing (startsAt, as Alertmanager POSTed it) to the release.
    starts = min(_time(a["startsAt"]) for a in _delivered(release_run)["alerts"] if a["labels"][obs.WORKLOAD_NAMESPACE_LABEL] == TENANT)
    created = _time(release_run["metadata"]["creationTimestamp"])
    released_at = _time(record["releasedAt"])
    evicted = _time(_transition(released, "Evicted"))
    succeeded = _time(release_run["status"]["finishedAt"])
    print(f"\nalert firing {datetime.fromtimestamp(starts).isoformat()} -> gpuaas-on-idle "
          f"{release_run['metadata']['name']} created +{created - starts:.0f}s -> workers released (record "
          f"releasedAt) +{released_at - starts:.0f}s -> Kueue evicted the Workload +{evicted - starts:.0f}s -> "
          f"Workflow Succeeded +{succeeded - starts:.0f}s -> queued Job admitted +{_time(queued_admitted) - starts:.0f}s"
          f" (docs/real-stack.md quotes this)")
    print(f"on-idle runs: {len(runs)}, children: {outcomes}; resume {resume_name}: "
          f"gpu-hours-reclaimed {resume_outputs.get('gpu-hours-reclaimed')}")


def test_the_module_policy_leaves_the_document_parseable() -> None:
    """The policy text this module adds parses with the product's parser, and only adds its tenant."""
    base = yaml.safe_load(Path(__file__).resolve().parents[2].joinpath("manifests/base/policy.yaml").read_text())
    text = base["data"][KEY]
    changed = _with_tenant_policy(text)
    assert parse_policy(changed).raw["tenants"].keys() - parse_policy(text).raw["tenants"].keys() == {TENANT}
