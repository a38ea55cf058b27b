"""The shipped examples do what the docs say (docs/route.md, docs/reactions.md).

examples/events/ are CloudEvents as the rendered EventSources publish them; examples/cluster/ is
a tenant with an admitted training Job as a snapshot (`python -m engine.cluster_state` applies it,
status included); examples/steps/ are step parameter files. The step recipe runs exactly as
documented: two processes against a Kubernetes API server over HTTP.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from routing import Router
from steps.gateways import resources as R
from tests.support.apiserver import running_apiserver

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
WORKLOAD = ("team-a", "statefulset-llm-server-7c9f2")
"""The Workload of the event examples: a StatefulSet's (a model server), whose transitions the Sensors take."""
JOB_WORKLOAD = ("team-a", "job-llm-finetune-7c9f2")
"""The admitted training Job of examples/cluster/team-a.json and examples/steps/."""


@pytest.fixture(scope="module")
def router() -> Router:
    return Router.from_manifests(REPO / "manifests")


def fired(router: Router, event: dict) -> list[tuple[str, dict[str, str]]]:
    result = router.route(event)
    return [(wf["spec"]["workflowTemplateRef"]["name"],
             {p["name"]: p.get("value", "") for p in wf["spec"]["arguments"]["parameters"]}) for wf in result.workflows]


@pytest.mark.parametrize(("example", "template"), [
    ("workload-admitted.json", "gpuaas-on-admitted"),
    ("workload-finished.json", "gpuaas-on-finished"),
])
def test_workload_event_starts_its_reaction_for_that_workload(router: Router, example: str, template: str) -> None:
    event = json.loads((EXAMPLES / "events" / example).read_text())
    [(name, params)] = fired(router, event)
    assert name == template
    assert (params["namespace"], params["workload"]) == WORKLOAD


def test_a_jobs_admission_starts_no_run_the_sweep_records_it(router: Router) -> None:
    """A batch Job's admission needs no write: the Sensor leaves it to the catch-up sweep (docs/catch-up.md),
    and `gpuaas route` says which filter said so."""
    result = router.route(json.loads((EXAMPLES / "events" / "workload-admitted-job.json").read_text()))
    assert result.workflows == []
    skipped = result.to_dict()["skipped"]
    [reason] = [s["reason"] for s in skipped if s["sensor"] == "gpuaas-on-admitted"]
    assert "ownerReferences" in reason and '[[\\"Job\\"]]' in reason, reason


def test_idle_alert_group_starts_one_on_idle_run(router: Router) -> None:
    event = json.loads((EXAMPLES / "events" / "idle-alert-group.json").read_text())
    [(name, params)] = fired(router, event)
    assert name == "gpuaas-on-idle" and params["namespace"] == "team-a"


def test_admission_check_lines_fire_only_when_admitted(router: Router) -> None:
    """Quota reserved while an admission check is pending starts nothing; the admission does."""
    lines = (EXAMPLES / "events" / "admission-check.jsonl").read_text().splitlines()
    first, second = (fired(router, json.loads(line)) for line in lines)
    assert first == []
    assert [name for name, _ in second] == ["gpuaas-on-admitted"]


def test_every_example_event_matches_an_event_source_without_warnings(router: Router) -> None:
    for path in sorted((EXAMPLES / "events").iterdir()):
        for line in path.read_text().splitlines() if path.suffix == ".jsonl" else [path.read_text()]:
            assert router.route(json.loads(line)).warnings == [], path.name


def test_local_step_recipe_plans_a_release_without_writing(tmp_path: Path) -> None:
    """docs/reactions.md: apply the example tenant, run release-workers in dry-run, read the outputs."""
    with running_apiserver(set_env=False) as api:
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {
            "GPUAAS_KUBE_URL": api.url, "GPUAAS_OUTPUTS_DIR": str(tmp_path / "out")}
        def run(*argv: str) -> None:
            done = subprocess.run([sys.executable, "-m", *argv], cwd=REPO, env=env, capture_output=True, text=True,
                                  timeout=120, check=False)
            assert done.returncode == 0, done.stderr

        run("engine.cluster_state", "examples/cluster/team-a.json")
        run("engine.cluster_state", "examples/cluster/team-a.json")  # applying twice is fine
        before = dict(api.writes)
        run("steps", "release-workers", "examples/steps/release-workers.json")
        by_step = {verb: count - before.get(verb, 0) for verb, count in api.writes.items() if count != before.get(verb, 0)}
        events = api.store.list(R.EVENT, namespace="team-a")
        live = api.store.get(R.WORKLOAD, JOB_WORKLOAD[1], namespace=JOB_WORKLOAD[0])
        job = api.store.get(R.JOB, "llm-finetune", namespace="team-a")
    assert (tmp_path / "out" / "outcome").read_text() == "applied"
    plan = json.loads((tmp_path / "out" / "plan").read_text())
    assert [a["action"] for a in plan["actions"]] == ["deactivate-workload"]
    assert live["spec"]["active"] is True and "gpuaas.io/release" not in (live["metadata"].get("annotations") or {})
    assert live["status"]["admission"]["clusterQueue"] == "team-a"  # status applied through /status
    assert live["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]  # owner uid follows the server
    assert by_step in ({}, {"POST": len(events)}), by_step  # dry-run: no patch; at most the Kubernetes Event


def test_the_documented_recipe_is_the_one_tested() -> None:
    recipe = (REPO / "docs" / "reactions.md").read_text()
    for line in (".venv/bin/python -m engine.apiserver 8080 &",
                 ".venv/bin/python -m engine.cluster_state examples/cluster/team-a.json",
                 ".venv/bin/python -m steps release-workers examples/steps/release-workers.json"):
        assert line in recipe, line


def _rendered(kind: str, name: str) -> dict:
    import yaml

    for path in (REPO / "manifests" / "base").rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc and doc.get("kind") == kind and doc["metadata"]["name"] == name:
                return doc
    raise AssertionError(f"no rendered {kind} {name}")


def test_idle_alert_group_is_what_the_products_rule_and_route_send() -> None:
    """The example group carries exactly the labels the rendered GPUWorkloadIdle rule gives its alerts
    (its `by (namespace, pod)` plus the rule's labels: `namespace` the product's, the workload's in
    `workload_namespace`), grouped as the AlertmanagerConfig's idle route
    groups, from the receiver the Prometheus Operator names `<namespace>/<AlertmanagerConfig>/<receiver>`
    (prometheus-operator v0.93.1 pkg/alertmanager/amcfg.go makeNamespacedString)."""
    event = json.loads((EXAMPLES / "events" / "idle-alert-group.json").read_text())
    body = event["data"]["body"]
    rule = next(r for g in _rendered("PrometheusRule", "gpuaas-gpu")["spec"]["groups"] for r in g["rules"]
                if r.get("alert") == "GPUWorkloadIdle")
    config = _rendered("AlertmanagerConfig", "gpuaas-idle")
    route = next(r for r in config["spec"]["route"]["routes"] if r["receiver"] == "gpuaas-idle-webhook")
    for alert in body["alerts"]:
        assert set(alert["labels"]) == {"alertname", "pod", *rule["labels"]}, alert["labels"]
        # the rule's fixed labels as they are; workload_namespace is templated from the series' namespace
        fixed = {k: v for k, v in rule["labels"].items() if "{{" not in v}
        assert {k: alert["labels"][k] for k in fixed} == fixed
        assert rule["labels"]["workload_namespace"] == "{{ $labels.namespace }}"
        assert set(alert["annotations"]) == set(rule["annotations"])
    assert set(body["groupLabels"]) == set(route["groupBy"])
    assert body["receiver"] == f"{config['metadata']['namespace']}/{config['metadata']['name']}/{route['receiver']}"


@pytest.mark.parametrize("example", sorted(p.name for p in (EXAMPLES / "events").iterdir()))
def test_example_event_data_has_the_fields_argo_events_writes(example: str) -> None:
    """argo-events v1.9.11 pkg/eventsources/events/event-data.go: ResourceEventData is {type, body, oldBody,
    group, version, resource} and WebhookEventData {header, body}; `metadata` is `omitempty` and the
    rendered EventSources set none, so a real event has no `metadata` key."""
    path = EXAMPLES / "events" / example
    for line in path.read_text().splitlines() if path.suffix == ".jsonl" else [path.read_text()]:
        event = json.loads(line)
        expected = {"resource": {"type", "body", "oldBody", "group", "version", "resource"},
                    "webhook": {"header", "body"}}[event["type"]]
        assert set(event["data"]) == expected, example
