"""Alertmanager: does the RUNNING configuration deliver GPUWorkloadIdle to the idle webhook (and the GPU
health alerts to the admins), with which matcher; and is the webhook token the same on both sides.

The routing is judged on what Alertmanager itself runs (`/api/v2/status` config.original), walked
with Alertmanager's semantics (gpuaas.doctor.selectors) for an alert shaped like the rule's: the
workload's namespace, not the product's. When the idle receiver is not reached, the Prometheus
Operator's side explains why (prometheus-operator v0.93): an Alertmanager with a `null`
alertmanagerConfigSelector reads no AlertmanagerConfig; a `null` alertmanagerConfigNamespaceSelector
reads its own namespace only; the matcher strategy `OnNamespace` (the default) adds
`namespace="<the AlertmanagerConfig's namespace>"` to its route (pkg/alertmanager/amcfg.go).
"""

from __future__ import annotations

from typing import Any

from gpuaas.doctor.facts import Facts, MonitoringResource, ProductObject
from gpuaas.doctor.findings import Finding, Skipped, blocks, ok, warn
from gpuaas.doctor.selectors import (
    Route,
    blocking_matchers,
    deliveries,
    describe_selector,
    labels_that_satisfy,
    paths_to,
    selects,
)
from gpuaas.manifests import gpu_health
from gpuaas.manifests import observability as obs


def alert_labels(rule_labels: dict[str, str], workload_namespace: str, product_namespace: str,
                 **series: str) -> dict[str, str]:
    """The labels an alert of the rendered rule carries for a series of `workload_namespace`: the series' own
    labels, then the rule's (its templates filled in), the product's namespace where the rule names it."""
    labels = {"namespace": workload_namespace, **series}
    for key, value in rule_labels.items():
        value = str(value).replace("{{ $labels.namespace }}", workload_namespace)
        labels[key] = product_namespace if key == "namespace" and value == obs.DEFAULT_NAMESPACE else value
    return labels


def idle_alert_labels(facts: Facts) -> dict[str, str]:
    """The labels a real GPUWorkloadIdle carries for a tenant's pod (the rule as rendered decides which
    label holds the product's namespace and which the workload's)."""
    from gpuaas.doctor.checks.kueue import tenant_namespaces

    namespace = next(iter(tenant_namespaces(facts)), "team-a")
    return {"alertname": obs.ALERT_NAME, **alert_labels(obs.idle_alert()["labels"], namespace, facts.namespace,
                                                         pod=f"{namespace}-workload-0")}


def health_alert_labels(facts: Facts) -> dict[str, str]:
    rule = next(r for r in gpu_health.rule_group()["rules"] if r.get("alert") == gpu_health.ALERT_TEMPERATURE)
    return {"alertname": gpu_health.ALERT_TEMPERATURE,
            **alert_labels(rule["labels"], facts.namespace, facts.namespace, node="gpu-node-1", gpu="0")}


def is_receiver(name: str, wanted: str) -> bool:
    """`gpuaas-idle-webhook` as written, or `<namespace>/<AlertmanagerConfig>/gpuaas-idle-webhook` as the
    Prometheus Operator names it in the generated configuration."""
    return name == wanted or name.endswith("/" + wanted)


def routing_finding(facts: Facts) -> Finding | Skipped:
    check = "alertmanager.routing"
    am = facts.alertmanager
    if am is None:
        return warn(check, "no Alertmanager given or found: the routing of GPUWorkloadIdle was not checked",
                    "gpuaas doctor --alertmanager URL (e.g. after `kubectl -n monitoring port-forward "
                    "svc/alertmanager-operated 9093`)")
    if not am.reachable or am.config is None:
        return blocks(check, f"Alertmanager at {am.url} did not answer /api/v2/status: {am.error}",
                      "check --alertmanager (the URL of its API) and --bearer-token-file/--ca-file")
    try:
        root = Route.parse(am.config.get("route") or {})
    except ValueError as error:
        return blocks(check, f"the running Alertmanager configuration has a matcher gpuaas cannot read: {error}",
                      "report it with the configuration (amtool config show)")
    labels = idle_alert_labels(facts)
    receivers = deliveries(root, labels)
    shown = ", ".join(f"{k}={v}" for k, v in labels.items())
    details = [f"an idle alert ({shown}) is delivered to: {', '.join(receivers)}"]
    idle = [r for r in receivers if is_receiver(r, obs.RECEIVER)]
    health = deliveries(root, health_alert_labels(facts))
    if not any(is_receiver(r, obs.ADMINS_RECEIVER) for r in health):
        details.append(f"GPUTemperatureHigh is delivered to: {', '.join(health)} (not {obs.ADMINS_RECEIVER})")
    if idle:
        urls = _webhook_urls(am.config, idle[0])
        details.append(f"{idle[0]} POSTs to {', '.join(urls) or '(no webhook_configs)'}")
        wrong = [u for u in urls if not _reaches_event_source(u, facts.namespace)]
        if wrong:
            return blocks(check, f"{idle[0]} POSTs to {', '.join(wrong)}, not the webhook EventSource "
                                 f"(http://{obs.WEBHOOK_SERVICE}.{facts.namespace}.svc:{obs.WEBHOOK_PORT}{obs.WEBHOOK_PATH})",
                          "point the receiver's webhook at the EventSource's Service (AlertmanagerConfig "
                          "spec.receivers[].webhookConfigs[].url)", *details)
        if not any(is_receiver(r, obs.ADMINS_RECEIVER) for r in health):
            return warn(check, "GPUWorkloadIdle reaches the idle webhook, but the GPU health alerts do not reach the "
                               f"admins' receiver {obs.ADMINS_RECEIVER}",
                        "route alerts labelled gpuaas_notify=\"gpu-admins\" to the admins (the AlertmanagerConfig "
                        "gpuaas-idle does)", *details)
        return ok(check, f"Alertmanager delivers GPUWorkloadIdle to {idle[0]}", *details)
    paths = [p for p in _paths(root) if p]
    if paths:
        path = paths[0]
        failing = blocking_matchers(path, labels)
        route = " > ".join(", ".join(str(m) for m in r.matchers) or "(root)" for r in path)
        details.append(f"route to {path[-1].receiver}: {route}")
        if failing:
            text = ", ".join(str(m) for m in failing)
            return blocks(check, f"the route to {path[-1].receiver} requires {text}, which GPUWorkloadIdle "
                                 f"(namespace={labels.get('namespace')}) does not carry: idle alerts never reach the "
                                 "webhook", _matcher_fix(facts, failing), *details)
        return blocks(check, f"an earlier route takes GPUWorkloadIdle before {path[-1].receiver}: it is delivered to "
                             f"{', '.join(receivers)}",
                      "put the product's route first or give the earlier route `continue: true`", *details)
    return blocks(check, "the running Alertmanager has no route to the idle webhook: GPUWorkloadIdle never reaches "
                         "the product", *_why_no_route(facts), *details)


def _paths(root: Route) -> list[list[Route]]:
    out: list[list[Route]] = []
    for name in {r for r in _receivers(root) if is_receiver(r, obs.RECEIVER)}:
        out += paths_to(root, name)
    return out


def _receivers(route: Route) -> set[str]:
    return {route.receiver, *(name for child in route.routes for name in _receivers(child))}


def _webhook_urls(config: dict[str, Any], receiver: str) -> list[str]:
    for entry in config.get("receivers") or []:
        if entry.get("name") == receiver:
            return [str(w.get("url") or "<url from a file or Secret>") for w in entry.get("webhook_configs") or []]
    return []


def _reaches_event_source(url: str, namespace: str) -> bool:
    """A URL naming a Service must name the EventSource's; any other (a proxy, an IP) is not judged here."""
    if ".svc" not in url:
        return url.rstrip("/").endswith(obs.WEBHOOK_PATH) or url.startswith("<")
    return f"{obs.WEBHOOK_SERVICE}.{namespace}.svc" in url and url.rstrip("/").endswith(obs.WEBHOOK_PATH)


def _alertmanagers(facts: Facts) -> list[MonitoringResource]:
    return [r for r in facts.alertmanager_resources if r.kind == "Alertmanager"]


def _matcher_fix(facts: Facts, failing: list[Any]) -> str:
    """The operator's OnNamespace strategy adds namespace="<the AlertmanagerConfig's namespace>"; the product's
    alerts carry namespace=<the product's namespace>, so the AlertmanagerConfig belongs there."""
    namespaced = [m for m in failing if m.name == "namespace"]
    if namespaced:
        where = namespaced[0].value
        amc = facts.alertmanager_config
        if where != facts.namespace:
            return (f"kubectl -n {where} delete alertmanagerconfig {amc.name if amc else 'gpuaas-idle'} && "
                    "kubectl apply -k manifests/overlays/<yours>   # the product's AlertmanagerConfig belongs in "
                    f"{facts.namespace}: its alerts carry namespace={facts.namespace}, which the operator's OnNamespace "
                    "matcher lets through")
        return ("kubectl apply -k manifests/overlays/<yours>   # the loaded rules are older than this gpuaas: its "
                f"alerts carry namespace={facts.namespace}")
    return "remove or widen the matcher(s) above on the route to the idle webhook"


def _why_no_route(facts: Facts) -> tuple[str, ...]:
    """(fix, *details) when the running configuration has no route to the idle webhook."""
    amc = facts.alertmanager_config
    managed = _alertmanagers(facts)
    if not managed:
        return (("add the product's routing to this Alertmanager's configuration: the routes and receivers of "
                "`gpuaas.manifests.observability.alertmanager_config()` (docs/observability.md, Routing), with the "
                "webhook token of Secret gpuaas-alertmanager-webhook as the bearer credentials"),
                "no Alertmanager resource is visible (no Prometheus Operator manages this Alertmanager)")
    if amc is None:
        return ((f"apply the product's manifests (AlertmanagerConfig gpuaas-idle is absent from {facts.namespace}): "
                "kubectl apply -k manifests/overlays/<yours>"),)
    from gpuaas.doctor.openshift import is_openshift_monitoring, patch_user_workload_config

    details, fixes = [], []
    selecting = [am for am in managed if not _not_selected(am, amc, facts.tenants.namespaces)]
    if selecting and len(selecting) < len(managed):
        names = ", ".join(f"{am.namespace}/{am.name}" for am in selecting)
        fixes.append(f"# Alertmanager {names} reads AlertmanagerConfig {amc.namespace}/{amc.name}, the others do not: "
                     "give --alertmanager its URL (and check that the rules' evaluator alerts to it: "
                     "the prometheus finding lists where it sends)")
    for am in managed:
        why = _not_selected(am, amc, facts.tenants.namespaces)
        if not why:
            details.append(f"Alertmanager {am.namespace}/{am.name} selects AlertmanagerConfig {amc.namespace}/{amc.name}: "
                           "if --alertmanager is that one, the operator rejected the AlertmanagerConfig (kubectl -n "
                           f"{amc.namespace} describe alertmanagerconfig {amc.name}: a missing Secret such as "
                           "gpuaas-admin-alerts rejects all of it); if not, give --alertmanager that one's URL")
            continue
        details.append(f"Alertmanager {am.namespace}/{am.name}: " + "; ".join(why))
        selector = am.spec.get("alertmanagerConfigSelector")
        if selector is None and selecting:
            continue  # another Alertmanager reads it: pointing the doctor there is the fix (above)
        if selector is None:
            if is_openshift_monitoring(am.namespace):
                fixes.append(patch_user_workload_config(facts.openshift_user_workload_config, {
                    "alertmanager": {"enabled": True, "enableAlertmanagerConfig": True}})
                    + f"   # alertmanager-main reads no AlertmanagerConfig; the user-workload Alertmanager reads "
                      f"{amc.namespace}'s: give --alertmanager that one")
            else:
                fixes.append(f"# Alertmanager {am.namespace}/{am.name} reads no AlertmanagerConfig (its "
                             "alertmanagerConfigSelector is null): set one that selects gpuaas-idle, e.g.\n"
                             f"kubectl -n {am.namespace} patch alertmanager {am.name} --type=merge -p "
                             "'{\"spec\":{\"alertmanagerConfigSelector\":{\"matchLabels\":{\"alertmanagerConfig\":"
                             "\"gpuaas\"}},\"alertmanagerConfigNamespaceSelector\":{}}}'")
            continue
        wanted = labels_that_satisfy(selector)
        if wanted and any("alertmanagerConfigSelector" in w for w in why):
            fixes.append(f"kubectl -n {amc.namespace} label alertmanagerconfig {amc.name} "
                         + " ".join(f"{k}={v}" for k, v in wanted.items()))
        if any("NamespaceSelector" in w for w in why):
            ns_selector = am.spec.get("alertmanagerConfigNamespaceSelector")
            ns_labels = labels_that_satisfy(ns_selector) if ns_selector is not None else None
            fixes.append(f"kubectl label namespace {amc.namespace} " + " ".join(f"{k}={v}" for k, v in ns_labels.items())
                         if ns_labels else
                         f"kubectl -n {am.namespace} patch alertmanager {am.name} --type=merge -p "
                         "'{\"spec\":{\"alertmanagerConfigNamespaceSelector\":{}}}'")
    return ("\n".join(dict.fromkeys(fixes)) or "see the details", *details)


def _not_selected(am: MonitoringResource, amc: ProductObject, namespaces: dict[str, dict[str, str]]) -> list[str]:
    spec, why = am.spec, []
    if not selects(spec.get("alertmanagerConfigSelector"), amc.labels):
        why.append(f"its alertmanagerConfigSelector ({describe_selector(spec.get('alertmanagerConfigSelector'))}) "
                   "does not match gpuaas-idle's labels")
    ns_selector = spec.get("alertmanagerConfigNamespaceSelector")
    if ns_selector is None and amc.namespace != am.namespace:
        why.append(f"its alertmanagerConfigNamespaceSelector is null (only its own namespace {am.namespace})")
    elif ns_selector is not None and not selects(ns_selector, {"kubernetes.io/metadata.name": amc.namespace,
                                                               **namespaces.get(amc.namespace, {})}):
        why.append(f"its alertmanagerConfigNamespaceSelector ({describe_selector(ns_selector)}) does not select "
                   f"{amc.namespace}")
    return why


def token_finding(facts: Facts) -> Finding | Skipped:
    """The EventSource's token Secret exists and is not empty; the AlertmanagerConfig's is the same token."""
    check = "webhook.token"
    from gpuaas.doctor.checks.components import not_installed

    if not_installed(facts, "eventsources.argoproj.io"):
        return Skipped(check, not_installed(facts, "eventsources.argoproj.io") or "")
    if "event-objects" in facts.unreadable or "secrets" in facts.unreadable:
        return Skipped(check, facts.unreadable.get("secrets") or facts.unreadable.get("event-objects", ""))
    source = next((o for o in facts.event_objects if o.kind == "EventSource" and o.auth_secret), None)
    if source is None:
        return blocks(check, f"no EventSource in {facts.namespace} has a webhook with an authSecret: the Alertmanager "
                             "webhook EventSource is missing",
                      "apply the product's manifests: kubectl apply -k manifests/overlays/<yours>")
    secret_name, key = source.auth_secret  # type: ignore[misc]
    create = (f"kubectl -n {facts.namespace} create secret generic {secret_name} "
              f"--from-literal={key}=\"$(openssl rand -hex 32)\""
              "   # and give Alertmanager the same token (the AlertmanagerConfig's Secret, or its credentials file)")
    ours = facts.secrets.get(f"{facts.namespace}/{secret_name}")
    if ours is None or not ours.exists:
        return blocks(check, f"Secret {facts.namespace}/{secret_name} (the webhook EventSource's token) does not exist: "
                             "the EventSource cannot start, and nothing can call it", create)
    digest = ours.digests.get(key)
    if not digest:
        return blocks(check, f"Secret {facts.namespace}/{secret_name} has no non-empty key {key!r}: the EventSource "
                             "rejects every call", f"kubectl -n {facts.namespace} delete secret {secret_name} && {create}")
    details = [f"EventSource {source.name} reads {facts.namespace}/{secret_name}[{key}] (sha256 {digest}...)"]
    amc = facts.alertmanager_config
    credentials = _amc_credentials(amc)
    managed = bool(_alertmanagers(facts))
    if amc is None or credentials is None or not managed:
        details.append("the Alertmanager's side is its own configuration (a credentials file, or a Secret of the "
                       "Alertmanager's): not comparable from here; `gpuaas doctor --probe` checks it end to end")
        return ok(check, "the webhook EventSource's token exists", *details)
    name, amc_key = credentials
    theirs = facts.secrets.get(f"{amc.namespace}/{name}")
    same_secret = amc.namespace == facts.namespace and name == secret_name and amc_key == key
    if theirs is None or not theirs.exists:
        return blocks(check, f"Secret {amc.namespace}/{name}, which AlertmanagerConfig {amc.namespace}/{amc.name} "
                             "sends as the bearer token, does not exist: the operator rejects the whole "
                             "AlertmanagerConfig", _copy_secret(facts.namespace, secret_name, amc.namespace, name),
                      *details)
    details.append(f"AlertmanagerConfig {amc.namespace}/{amc.name} sends {amc.namespace}/{name}[{amc_key}] "
                   f"(sha256 {theirs.digests.get(amc_key, '')}...)")
    if not same_secret and theirs.digests.get(amc_key) != digest:
        return blocks(check, "Alertmanager sends a different token than the EventSource expects: every idle alert "
                             "is answered 401", _copy_secret(facts.namespace, secret_name, amc.namespace, name), *details)
    admins = facts.secrets.get(f"{amc.namespace}/{obs.ADMINS_SECRET}")
    if admins is not None and not admins.exists:
        return blocks(check, f"Secret {amc.namespace}/{obs.ADMINS_SECRET} (the GPU admins' webhook URL) does not "
                             "exist: the Prometheus Operator rejects the whole AlertmanagerConfig, the idle route too",
                      f"kubectl -n {amc.namespace} create secret generic {obs.ADMINS_SECRET} "
                      "--from-literal=url=https://YOUR-ALERT-WEBHOOK", *details)
    return ok(check, "the webhook token is the same on both sides", *details)


def _amc_credentials(amc: ProductObject | None) -> tuple[str, str] | None:
    if amc is None:
        return None
    for receiver in amc.spec.get("receivers") or []:
        if receiver.get("name") != obs.RECEIVER:
            continue
        for webhook in receiver.get("webhookConfigs") or []:
            credentials = (((webhook.get("httpConfig") or {}).get("authorization") or {}).get("credentials") or {})
            if credentials.get("name"):
                return str(credentials["name"]), str(credentials.get("key") or "token")
    return None


def _copy_secret(from_ns: str, from_name: str, to_ns: str, to_name: str) -> str:
    return (f"kubectl -n {to_ns} create secret generic {to_name} --dry-run=client -o yaml "
            f"--from-literal=token=\"$(kubectl -n {from_ns} get secret {from_name} -o jsonpath='{{.data.token}}' "
            "| base64 -d)\" | kubectl apply -f -")
