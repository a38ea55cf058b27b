"""`gpuaas audit --argo-server` against the real Argo Server v4 and its PostgreSQL archive (issue 9 part 4).

The judge here is the real server (`argo server --auth-mode server --auth-mode client`, the archive in
PostgreSQL), not the stand-in of tests/support/argo_server.py. The runs are real: an admin hand-submits
two of the product's WorkflowTemplates with the real argo CLI, with names and a label of this module's
own (the shared cluster runs other sessions' workflows too, so every assertion is about these runs only):

- `<id>-ok`: `gpuaas-on-admitted` for a batch Job of this module's, admitted by Kueue: Succeeded, a plan;
- `<id>-bad`: `gpuaas-resume-workers` with an event that is not JSON: the step records `rejected-input`.

Both are waited for in the archive; then the bad one is deleted from Kubernetes (archived only) and the
ok one stays live (live and archived: listed once). The CLI runs as a user runs it, in its own process (`python -m gpuaas.cli`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from gpuaas.cluster.binaries import program
from gpuaas.cluster.readiness import http_status
from tests.realstack.argo_product import PRODUCT_NAMESPACE, gpu_job, install, workload_of
from tests.realstack.test_kueue_admission import _condition
from tests.support.real_cluster import RealCluster, eventually

TENANT = "team-a"
RUN_ID = f"audit-{uuid.uuid4().hex[:6]}"
LABEL = "gpuaas-tests/audit-run"
OK, BAD = f"{RUN_ID}-ok", f"{RUN_ID}-bad"
FINISHED = ("Succeeded", "Failed", "Error")


def gpuaas(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ARGO_")}
    return subprocess.run([sys.executable, "-m", "gpuaas.cli", *argv], capture_output=True, text=True, timeout=300,
                          env={**clean, **(env or {})}, check=False)


def audit_json(server: str, *argv: str, token: str | None = None) -> object:
    extra = ("--token", token) if token else ()
    done = gpuaas("audit", *argv, "--argo-server", server, "--argo-namespace", PRODUCT_NAMESPACE, *extra)
    assert done.returncode == 0, f"{argv}: {done.returncode}\n{done.stderr}"
    return json.loads(done.stdout)


def argo_cli(cluster: RealCluster, *argv: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARGO_")}
    done = subprocess.run([str(program("argo-workflows", "argo")), f"--kubeconfig={cluster.kubeconfig}",
                           "-n", PRODUCT_NAMESPACE, *argv], capture_output=True, text=True, timeout=120,
                          env=env, check=False)
    assert done.returncode == 0, f"argo {' '.join(argv)}: {done.returncode}\n{done.stderr}"
    return done.stdout


def workflow(custom: client.CustomObjectsApi, name: str) -> dict | None:
    try:
        return custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows", name)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def archived_items(server: str, selector: str) -> list[dict]:
    code, body = http_status(f"{server}/api/v1/archived-workflows?namespace={PRODUCT_NAMESPACE}"
                             f"&listOptions.labelSelector={selector}", timeout=30)
    assert code == 200, body[:300]
    return json.loads(body).get("items") or []


class Runs:
    def __init__(self, cluster: RealCluster, server: str, workload: str, uids: dict[str, str]) -> None:
        self.cluster, self.server, self.workload, self.uids = cluster, server, workload, uids


@pytest.fixture(scope="module")
def runs(argo_cluster: RealCluster) -> Iterator[Runs]:
    cluster = install(argo_cluster)
    server = cluster.cluster.status()["endpoints"]["argo-server"]
    batch, custom = client.BatchV1Api(cluster.admin), client.CustomObjectsApi(cluster.admin)
    uid = batch.create_namespaced_job(TENANT, gpu_job(TENANT, name=RUN_ID)).metadata.uid

    def admitted() -> dict | None:
        found = workload_of(custom, TENANT, uid)
        return found if found and _condition(found, "Admitted") == "True" else None

    workload = eventually(admitted, timeout_s=120, what=f"the Workload of Job {RUN_ID} admitted")["metadata"]["name"]
    # As an admin would: the argo CLI, the template by name, parameters by hand, a label of our own.
    argo_cli(cluster, "submit", "--from", "workflowtemplate/gpuaas-on-admitted", "--name", OK, "-l", f"{LABEL}={RUN_ID}",
             "-p", f"namespace={TENANT}", "-p", f"workload={workload}", "-p", f"tenant={TENANT}")
    argo_cli(cluster, "submit", "--from", "workflowtemplate/gpuaas-resume-workers", "--name", BAD,
             "-l", f"{LABEL}={RUN_ID}", "-p", f"namespace={TENANT}", "-p", f"workload={RUN_ID}-missing",
             "-p", "event={not json")
    for name in (OK, BAD):
        done = eventually(lambda name=name: (w := workflow(custom, name)) and w.get("status", {}).get("phase")
                          in FINISHED and w, timeout_s=300, what=f"Workflow {name} finished")
        assert done["status"]["phase"] == "Succeeded", (name, done["status"].get("message"))
    archived = eventually(lambda: len(items := archived_items(server, f"{LABEL}={RUN_ID}")) == 2 and items,
                          timeout_s=120, what=f"{OK} and {BAD} in the Argo Server's archive")
    uids = {item["metadata"]["name"]: item["metadata"]["uid"] for item in archived}
    # BAD lives on only in the archive; OK is both live and archived.
    custom.delete_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows", BAD)
    eventually(lambda: workflow(custom, BAD) is None, timeout_s=60, what=f"Workflow {BAD} gone from Kubernetes")
    yield Runs(cluster, server, workload, uids)
    # Our objects only; the archive keeps the runs (it is the history an auditor reads).
    batch.delete_namespaced_job(RUN_ID, TENANT, propagation_policy="Background")
    custom.delete_collection_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows",
                                                      label_selector=f"{LABEL}={RUN_ID}")


def mine(runs: list[dict], *also: str) -> dict[str, list[dict]]:
    """This module's runs (by name) in a listing, every copy of each."""
    found: dict[str, list[dict]] = {}
    for run in runs:
        if run["workflow"].startswith(RUN_ID) or run["workflow"] in also:
            found.setdefault(run["workflow"], []).append(run)
    return found


def test_list_shows_each_run_once_live_or_archived_with_what_it_decided(runs: Runs) -> None:
    listed = mine(audit_json(runs.server, "--output", "json"))
    assert sorted(listed) == [BAD, OK] and all(len(copies) == 1 for copies in listed.values()), \
        {name: [(c["archived"], c["outcome"]) for c in copies] for name, copies in listed.items()}
    ok, bad = listed[OK][0], listed[BAD][0]
    assert (ok["archived"], ok["phase"], ok["reaction"], ok["outcome"]) == (False, "Succeeded", "on-admitted", "no-op")
    assert (ok["tenant"], ok["namespace"], ok["workload"]) == (TENANT, TENANT, runs.workload)
    assert ok["uid"] == runs.uids[OK]
    assert (bad["archived"], bad["phase"], bad["reaction"], bad["outcome"]) == \
        (True, "Succeeded", "resume-workers", "rejected-input")
    assert bad["uid"] == runs.uids[BAD] and "event" in (bad["reason"] or ""), bad
    # The server-side label selector (--reaction) and the record's filters, on the real server.
    assert list(mine(audit_json(runs.server, "--reaction", "resume-workers", "--output", "json"))) == [BAD]
    assert list(mine(audit_json(runs.server, "--workload", runs.workload, "--output", "json"))) == [OK]
    table = gpuaas("audit", "--argo-server", runs.server, "--outcome", "rejected-input")
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if line.rstrip().endswith(BAD))
    assert "resume-workers" in row and "rejected-input" in row


def test_show_a_live_run_by_name_and_an_archived_run_by_name_and_uid(runs: Runs) -> None:
    ok = audit_json(runs.server, "show", OK, "--output", "json")
    assert ok["archived"] is False and ok["outcome"] == "no-op" and ok["uid"] == runs.uids[OK]
    step = next(s for s in ok["steps"] if s["role"] == "reaction")
    data = step["record"]["data"]
    assert data["reaction"] == "on-admitted" and data["workload"]["name"] == runs.workload
    assert "observed" in data and "plan" in data, sorted(data)
    assert f"argo resubmit {OK} -n {PRODUCT_NAMESPACE}" in ok["resubmit"]
    for ref in (BAD, runs.uids[BAD]):
        bad = audit_json(runs.server, "show", ref, "--output", "json")
        assert bad["workflow"] == BAD and bad["archived"] is True and bad["outcome"] == "rejected-input", ref
        assert f"argo archive resubmit {runs.uids[BAD]} -n {PRODUCT_NAMESPACE}" in bad["resubmit"]
    text = gpuaas("audit", "show", BAD, "--argo-server", runs.server)
    assert text.returncode == 0, text.stderr
    assert f"Run {BAD}  (uid {runs.uids[BAD]}, namespace {PRODUCT_NAMESPACE}, archived)" in text.stdout
    missing = gpuaas("audit", "show", f"{RUN_ID}-never", "--argo-server", runs.server)
    assert missing.returncode == 2 and "found no run" in missing.stderr, missing.stderr


def test_report_of_the_real_history(runs: Runs, tmp_path: Path) -> None:
    done = gpuaas("audit", "report", "--html", str(tmp_path / "report"), "--argo-server", runs.server,
                  "--namespace", TENANT)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "report" / "index.html").read_text()
    assert OK in page and BAD in page and "rejected-input" in page


def test_resubmit_the_archived_run_runs_on_the_node_and_is_listed_linked_to_it(runs: Runs) -> None:
    done = gpuaas("audit", "resubmit", BAD, "--argo-server", runs.server)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    # Argo names the new run from the original's generateName (`argo submit --from` set it to the template's).
    assert first.startswith(f"resubmitted {BAD} as gpuaas-resume-workers-"), done.stdout
    new = first.split(" as ")[1].split()[0]
    custom = client.CustomObjectsApi(runs.cluster.admin)
    created = eventually(lambda: (w := workflow(custom, new)) and w.get("status", {}).get("phase") in FINISHED and w,
                         timeout_s=300, what=f"the resubmitted Workflow {new} finished")
    labels = created["metadata"]["labels"]
    assert labels["workflows.argoproj.io/resubmitted-from-workflow"] == BAD and labels[LABEL] == RUN_ID
    pods = [n for n in created["status"]["nodes"].values() if n["type"] == "Pod"]
    assert pods and all(n.get("hostNodeName") == "gpuaas-node" for n in pods)
    listed = mine(audit_json(runs.server, "--reaction", "resume-workers", "--output", "json"), new)
    (again,) = listed[new]
    assert again["resubmittedFrom"] == BAD and again["outcome"] == "rejected-input", again
    assert again["reaction"] == "resume-workers" and again["phase"] == "Succeeded"
    assert len(listed[BAD]) == 1 and listed[BAD][0]["archived"] is True
    shown = gpuaas("audit", "show", new, "--argo-server", runs.server)
    assert shown.returncode == 0 and f"resubmitted from: {BAD}" in shown.stdout, shown.stdout[:600]


AUDITOR_ROLE = "gpuaas-auditor"


def test_a_token_with_the_documented_auditor_grants_reads_and_a_refused_token_is_told_why(runs: Runs) -> None:
    """`--auth-mode client`: the server acts with the caller's bearer token. The auditor Role the docs name
    (rendered in manifests/base/rbac.yaml) must be enough to list and show, live and archived; a
    ServiceAccount without it is refused with the CLI's clear message, and so is a token that is no token."""
    from gpuaas.manifests import rbac

    role = next((o for o in rbac.objects() if o["kind"] == "Role" and o["metadata"]["name"] == AUDITOR_ROLE), None)
    assert role is not None, f"expected a Role {AUDITOR_ROLE} in the rendered RBAC (docs/audit.md names it)"
    core = client.CoreV1Api(runs.cluster.admin)
    rbac_api = client.RbacAuthorizationV1Api(runs.cluster.admin)
    auditor, nobody = f"{RUN_ID}-auditor", f"{RUN_ID}-nobody"
    for name in (auditor, nobody):
        core.create_namespaced_service_account(PRODUCT_NAMESPACE, {"metadata": {"name": name}})
    rbac_api.create_namespaced_role_binding(PRODUCT_NAMESPACE, {
        "metadata": {"name": auditor},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": AUDITOR_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": auditor, "namespace": PRODUCT_NAMESPACE}]})
    try:
        token = runs.cluster.service_account_token(PRODUCT_NAMESPACE, auditor, seconds=900)
        listed = mine(audit_json(runs.server, "--reaction", "on-admitted", "--output", "json", token=token))
        assert [(r["workflow"], r["outcome"]) for copies in listed.values() for r in copies] == [(OK, "no-op")]
        shown = audit_json(runs.server, "show", runs.uids[BAD], "--output", "json", token=token)
        assert shown["workflow"] == BAD and shown["outcome"] == "rejected-input"
        # The token from the environment, as `argo auth token` users set it.
        by_env = gpuaas("audit", "show", OK, "--argo-server", runs.server, env={"ARGO_TOKEN": token})
        assert by_env.returncode == 0 and f"Run {OK}" in by_env.stdout, by_env.stderr
        # Read-only: resubmitting also needs create on workflows and get on the templates, and says so.
        write = gpuaas("audit", "resubmit", BAD, "--argo-server", runs.server, "--token", token)
        assert write.returncode == 2 and "403 Forbidden" in write.stderr and "create on workflows" in write.stderr, \
            write.stderr
        refused = gpuaas("audit", "--argo-server", runs.server, "--token",
                         runs.cluster.service_account_token(PRODUCT_NAMESPACE, nobody, seconds=900))
        assert refused.returncode == 2 and "403 Forbidden" in refused.stderr and AUDITOR_ROLE in refused.stderr, \
            refused.stderr
        bogus = gpuaas("audit", "--argo-server", runs.server, "--token", "not-a-token")
        assert bogus.returncode == 2 and "401 Unauthorized" in bogus.stderr and "ARGO_TOKEN" in bogus.stderr, \
            bogus.stderr
    finally:
        rbac_api.delete_namespaced_role_binding(auditor, PRODUCT_NAMESPACE)
        for name in (auditor, nobody):
            core.delete_namespaced_service_account(name, PRODUCT_NAMESPACE)


def test_paging_over_the_real_lists_returns_each_run_once(runs: Runs, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real server's continue token is an offset over live-then-archived rows; one run per page. Two
    suspended runs (live, never archived) come first, so the list must page past live runs over a small
    archive (v4.0.5 gives that continue only when asked for ext.showRemainingItemCount), and must end
    although the server then counts every archived row of the namespace (its empty pages past the end)."""
    from gpuaas.audit import history

    custom = client.CustomObjectsApi(runs.cluster.admin)
    suspended = []
    try:
        for _ in range(2):
            suspended.append(custom.create_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE,
                                                                    "workflows", {
                "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                "metadata": {"generateName": f"{RUN_ID}-waiting-", "labels": {LABEL: RUN_ID}},
                "spec": {"entrypoint": "wait", "templates": [{"name": "wait", "suspend": {}}]}})["metadata"]["name"])
        eventually(lambda: all((workflow(custom, name) or {}).get("status", {}).get("phase") == "Running"
                               for name in suspended), timeout_s=60, what=f"{suspended} Running (suspended)")
        monkeypatch.setattr(history, "PAGE_SIZE", 1)
        reader = history.ArgoServerHistory(history.ArgoConnection(url=runs.server, token=None,
                                                                  namespace=PRODUCT_NAMESPACE))
        found = reader.runs(f"{LABEL}={RUN_ID}")
        names = sorted(r.workflow for r in found)
        assert len(names) == len(set(names)) and {OK, BAD, *suspended} <= set(names), names
        assert {r.workflow: r.outcome for r in found if r.workflow in (OK, BAD)} == {OK: "no-op",
                                                                                      BAD: "rejected-input"}
        assert not any(r.archived for r in found if r.workflow in suspended)
    finally:
        for name in suspended:
            custom.delete_namespaced_custom_object("argoproj.io", "v1alpha1", PRODUCT_NAMESPACE, "workflows", name)
