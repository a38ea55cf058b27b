"""The end-to-end probe's finding (gpuaas.doctor.probe sends it; this judges what it saw)."""

from __future__ import annotations

from gpuaas.doctor.facts import Facts
from gpuaas.doctor.findings import Finding, blocks, ok


def probe_finding(facts: Facts) -> Finding | None:
    probe = facts.probe
    if probe is None:
        return None
    check = "probe"
    alert = ", ".join(f"{k}={v}" for k, v in probe.alert.items())
    details = [f"test alert: {alert}", f"sent to {probe.sent_to}"]
    if not probe.accepted:
        return blocks(check, f"Alertmanager did not accept the test alert: {probe.error}",
                      "check --alertmanager and its credentials (the probe POSTs /api/v2/alerts)", *details)
    if probe.arrived_after_s is None:
        return blocks(check, f"the test alert did not reach the product within {probe.waited_s:.0f}s: no "
                             "gpuaas-on-idle run carries it",
                      "follow the path: the alertmanager.routing, webhook.token, argo-events.pods and argo-events.bus "
                      "findings, then the webhook "
                      "EventSource's and the gpuaas-on-idle Sensor's logs (kubectl -n gpuaas logs -l "
                      "eventsource-name=gpuaas-alertmanager; kubectl -n gpuaas logs -l sensor-name=gpuaas-on-idle)",
                      *details)
    details.append(f"arrived after {probe.arrived_after_s:.0f}s as Workflow {probe.workflow} ({probe.phase or 'running'})")
    if probe.released:
        return blocks(check, f"the probe's run {probe.workflow} released something: {probe.outcome}",
                      "report this: the probe alert names a pod that does not exist", *details)
    if probe.phase not in ("Succeeded",):
        return blocks(check, f"the test alert arrived, but its run {probe.workflow} ended {probe.phase or 'unfinished'}: "
                             f"{probe.outcome}",
                      f"argo -n {facts.namespace} get {probe.workflow}  (the step's error is in its record)", *details)
    return ok(check, f"a test alert went through Alertmanager's routing to the webhook EventSource and ran "
                     f"gpuaas-on-idle in {probe.arrived_after_s:.0f}s; nothing was released", *details,
              f"the run's record: {probe.outcome}")
