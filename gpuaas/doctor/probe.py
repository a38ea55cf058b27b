"""The end-to-end probe: a harmless GPUWorkloadIdle sent through the REAL routing, seen arriving.

The test alert goes to Alertmanager's API (`POST /api/v2/alerts`), so it takes every hop a real idle
alert takes after Prometheus: Alertmanager's routing tree and matchers, the webhook receiver with its
bearer token, the webhook EventSource, the gpuaas-on-idle Sensor and its filters, Argo Workflows in
the product's namespace, the step image and the idle-alerts step. It is harmless by construction:

- its labels are the rendered rule's (so it meets the same matchers), its workload's namespace a name
  no tenant uses (`gpuaas-doctor-probe-<id>`) and its pod one that does not exist, so idle-alerts
  resolves no pod, skips it ("pod gone") and nothing is released;
- a fresh workload namespace makes a fresh Alertmanager group (the idle route groups by it), so it is
  sent after `group_wait` instead of joining a group that already fired (a whole `group_interval`);
- it carries no `severity`, so an admin's severity routes do not page anyone with it, and its
  annotations say it is a test; it ends (`endsAt`) a few minutes later on its own.

It arrives as a Workflow of `gpuaas-on-idle` whose `event` parameter carries the probe's id; the
probe waits for that run to finish and reads its idle-alerts record: skipped, and why.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from gpuaas.doctor.clients import Http, Kube, Unreadable
from gpuaas.doctor.facts import ProbeResult
from gpuaas.doctor.gather import workflow_fact
from gpuaas.manifests import observability as obs

ON_IDLE = "gpuaas-on-idle"
ON_IDLE_SELECTOR = "gpuaas.io/reaction=on-idle"
"""How the Sensor's runs are found: the label its Workflow carries (sensors/, and the template's workflowMetadata).
Not `workflows.argoproj.io/workflow-template`: only `argo submit --from` sets that one, and the Sensor submits a
Workflow that references the template (seen on the real stack: the probe's run arrived within a second, unlabelled,
and a probe listing by that label waited its whole 180 s)."""
PROBE_LABEL = "gpuaas_probe"


def _is_on_idle(workflow: dict) -> bool:
    """A run of the gpuaas-on-idle template, however it was submitted (Sensor, UI, `argo submit --from`)."""
    labels = (workflow.get("metadata") or {}).get("labels") or {}
    ref = ((workflow.get("spec") or {}).get("workflowTemplateRef") or {}).get("name")
    return ON_IDLE in (ref, labels.get("workflows.argoproj.io/workflow-template"))


def probe_alert(probe_id: str, namespace: str = obs.DEFAULT_NAMESPACE) -> dict[str, str]:
    """The rendered GPUWorkloadIdle's labels for a pod that does not exist, without `severity`."""
    from gpuaas.doctor.checks.routing import alert_labels

    workload_namespace = f"gpuaas-doctor-probe-{probe_id}"
    labels = alert_labels(obs.idle_alert()["labels"], workload_namespace, namespace,
                          pod=f"gpuaas-doctor-probe-{probe_id}")
    labels.pop("severity", None)
    return {"alertname": obs.ALERT_NAME, **labels, PROBE_LABEL: probe_id}


def send(alertmanager: Http, probe_id: str, namespace: str, lifetime_s: float = 300.0) -> dict[str, str]:
    labels = probe_alert(probe_id, namespace)
    now = datetime.now(UTC)
    alert = {"labels": labels,
             "annotations": {"summary": "gpuaas doctor probe: a test alert, nothing to do",
                             "description": "Sent by `gpuaas doctor --probe` to check that idle alerts reach the "
                                            "gpuaas webhook. Its pod does not exist: nothing is released."},
             "startsAt": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
             "endsAt": (now + timedelta(seconds=lifetime_s)).strftime("%Y-%m-%dT%H:%M:%SZ")}
    alertmanager.post_json("/api/v2/alerts", [alert])
    return labels


def _record_summary(outputs: dict[str, dict[str, str]], probe_id: str) -> tuple[str, bool]:
    """(what the run recorded about the probe alert, whether anything was released)."""
    released = False
    summary = ""
    for node, parameters in outputs.items():
        if parameters.get("gpus-released") not in (None, "", "0", "0.0"):
            released = True
        record = parameters.get("record")
        if not record:
            continue
        try:
            data = json.loads(record).get("data") or {}
        except ValueError:
            continue
        if probe_id in record:
            reasons = "; ".join(str(r) for r in ((data.get("plan") or {}).get("reasons") or []))[:300]
            summary = f"{node}: {data.get('outcome')} ({reasons})"
        if data.get("actions"):
            released = released or any(a.get("result") == "applied" for a in data["actions"])
    return summary or "no record names the probe", released


def run(kube: Kube, alertmanager: Http, namespace: str, *, timeout_s: float = 180.0,
        progress: Callable[[str], None] | None = None, poll_s: float = 2.0) -> ProbeResult:
    """Send the test alert and wait for its gpuaas-on-idle run to finish (or `timeout_s`)."""
    say = progress or (lambda line: None)
    probe_id = secrets.token_hex(4)
    try:
        labels = send(alertmanager, probe_id, namespace, lifetime_s=max(300.0, timeout_s + 60))
    except Unreadable as error:
        return ProbeResult(probe_alert(probe_id, namespace), alertmanager.url, False, str(error))
    say(f"probe {probe_id}: test alert sent to {alertmanager.url}; waiting up to {timeout_s:.0f}s for its "
        f"{ON_IDLE} run")
    started = time.monotonic()
    arrived: float | None = None
    latest = None
    path = f"/apis/argoproj.io/v1alpha1/namespaces/{namespace}/workflows"
    while time.monotonic() - started < timeout_s:
        try:
            workflows = [w for w in kube.items(path, label_selector=ON_IDLE_SELECTOR) if _is_on_idle(w)]
        except Unreadable as error:
            return ProbeResult(labels, alertmanager.url, True, str(error), waited_s=time.monotonic() - started)
        now = time.time()
        ours = [w for w in workflows if probe_id in json.dumps((w.get("spec") or {}).get("arguments") or {})]
        if ours:
            latest = workflow_fact(ours[0], now)
            if arrived is None:
                arrived = time.monotonic() - started
                say(f"probe {probe_id}: arrived after {arrived:.0f}s as Workflow {latest.name}")
            if latest.phase in ("Succeeded", "Failed", "Error"):
                break
        time.sleep(poll_s)
    waited = time.monotonic() - started
    if latest is None:
        return ProbeResult(labels, alertmanager.url, True, arrived_after_s=None, waited_s=waited)
    outcome, released = _record_summary(latest.outputs, probe_id)
    if not latest.phase or latest.phase == "Running":
        outcome = f"still {latest.phase or 'pending'} after {waited:.0f}s; {outcome}"
    return ProbeResult(labels, alertmanager.url, True, arrived_after_s=arrived, workflow=latest.name,
                       phase=latest.phase, outcome=outcome if latest.phase == "Succeeded" else
                       f"{latest.message or outcome}", released=released, waited_s=waited)
