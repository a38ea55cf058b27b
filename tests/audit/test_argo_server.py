"""`gpuaas audit` over an Argo Server (Hera's WorkflowsService) against the swagger-validated stand-in."""

from __future__ import annotations

import copy

import pytest

from tests.support.argo_server import argo_server

TOKEN = "s3cret-token"
LIVE = ("gpuaas-on-admitted-a1b2c", "gpuaas-provision-quota-r6t7y")
ARCHIVED = ("gpuaas-on-admitted-a1b2c", "gpuaas-on-idle-x9y8z", "gpuaas-on-finished-q1w2e",
            "gpuaas-release-workers-c4r5t", "gpuaas-resume-workers-g7h8j", "gpuaas-on-preempted-m3n4b")


@pytest.fixture
def server(workflows):
    with argo_server(live=[workflows[n] for n in LIVE], archived=[workflows[n] for n in ARCHIVED],
                     token=TOKEN) as running:
        yield running
        assert running.schema_errors == []


def argo(server, *extra):
    return ("--argo-server", server.url, "--token", TOKEN, *extra)


def test_lists_live_and_archived_runs_once(cli, server, workflows):
    runs = cli.json("audit", *argo(server, "--output", "json"))
    assert sorted(r["workflow"] for r in runs) == sorted(set(LIVE) | set(ARCHIVED))
    by_name = {r["workflow"]: r for r in runs}
    assert by_name["gpuaas-on-admitted-a1b2c"]["archived"] is False  # live copy wins
    # Archived rows come without nodes, in the workflow list too (as Argo v4's): the client got each one
    # once to read its records; the one still live came back live (its record, archived False).
    assert by_name["gpuaas-on-idle-x9y8z"]["outcome"] == "failed" and by_name["gpuaas-on-idle-x9y8z"]["archived"]
    assert by_name["gpuaas-on-admitted-a1b2c"]["outcome"] == "applied"
    assert by_name["gpuaas-resume-workers-g7h8j"]["outcome"] == "unknown"
    fetched = [path for method, path in server.requests
               if path.split("?")[0].count("/") == 5 and path.startswith("/api/v1/workflows/")
               or path.startswith("/api/v1/archived-workflows/")]
    assert len(fetched) == len(ARCHIVED), fetched


def test_reaction_filter_is_sent_as_a_label_selector(cli, server):
    runs = cli.json("audit", *argo(server, "--reaction", "on-admitted", "--output", "json"))
    assert [r["workflow"] for r in runs] == ["gpuaas-on-admitted-a1b2c"]
    lists = [path for _, path in server.requests if "labelSelector" in path]
    assert lists and all("gpuaas.io%2Freaction%3Don-admitted" in path for path in lists)


def test_token_from_environment_and_refused_token(cli, server, monkeypatch):
    code, _, err = cli("audit", "--argo-server", server.url, "--token", "wrong")
    assert code == 2 and "401 Unauthorized" in err and "ARGO_TOKEN" in err
    # The server's own reason is kept: the real one says why (an expired token, or a server that cannot
    # build clients from tokens at all: "failed to create REST config").
    assert "the server said: token not valid for running mode" in err
    monkeypatch.setenv("ARGO_TOKEN", TOKEN)
    monkeypatch.setenv("ARGO_SERVER", server.url)
    code, out, _ = cli("audit", "--tenant", "vision")
    assert code == 0 and "gpuaas-on-finished-q1w2e" in out


def test_paging_follows_continue_tokens(cli, workflows, monkeypatch):
    from gpuaas.audit import history

    monkeypatch.setattr(history, "PAGE_SIZE", 2)
    with argo_server(archived=list(workflows.values()), token=TOKEN) as running:
        runs = cli.json("audit", *argo(running, "--output", "json"))
        assert len(runs) == len(workflows)
        assert any("listOptions.continue=4" in path for _, path in running.requests)
        assert running.schema_errors == []


def test_paging_reaches_every_live_run_when_the_archive_has_fewer(cli, workflows, monkeypatch):
    """Argo Server v4.0.5 ListWorkflows gives the next `continue` only if the ARCHIVE has a row past
    offset + limit (HasMoreWorkflows), unless asked for ext.showRemainingItemCount; more live runs than
    a page over a small archive must still all be listed (upstream server/workflow/workflow_server.go)."""
    from gpuaas.audit import history

    monkeypatch.setattr(history, "PAGE_SIZE", 2)
    with argo_server(live=list(workflows.values()), token=TOKEN) as running:
        runs = cli.json("audit", *argo(running, "--output", "json"))
        assert sorted(r["workflow"] for r in runs) == sorted(workflows)
        assert running.schema_errors == []


def test_a_label_selected_list_ends_although_the_server_counts_more_archived_rows_than_it_selects(workflows):
    """On a page after the first, v4.0.5 counts the archive without the label selector, so a
    label-selected list answers empty pages with the same `continue` past its end (seen on the real
    server: 10 minutes of empty pages). The client stops at the first empty page, with every run once."""
    import threading

    from gpuaas.audit import history

    names = sorted(workflows)
    selected = {names[0], names[1]}
    for name, workflow in workflows.items():
        workflow["metadata"].setdefault("labels", {})["paging-test"] = "yes" if name in selected else "no"
    with argo_server(live=[workflows[names[2]]], archived=[workflows[n] for n in names if n != names[2]],
                     token=TOKEN) as running:
        reader = history.ArgoServerHistory(history.ArgoConnection(url=running.url, token=TOKEN, namespace="gpuaas"))
        found: list = []
        original = history.PAGE_SIZE
        history.PAGE_SIZE = 1
        try:
            worker = threading.Thread(target=lambda: found.extend(reader.runs("paging-test=yes")), daemon=True)
            worker.start()
            worker.join(30)
        finally:
            history.PAGE_SIZE = original
        assert not worker.is_alive(), f"the list never ended: {len(running.requests)} requests"
        assert sorted(r.workflow for r in found) == sorted(selected)
        lists = [path for _, path in running.requests if "/api/v1/workflows/gpuaas?" in path]
        assert len(lists) == len(selected) + 1, lists  # one page per run, then the empty page that ends it
        assert running.schema_errors == []


def test_a_server_refusing_the_remaining_count_selector_is_listed_without_it(workflows):
    """Before v3.6 the Argo Server handed the workflow list's field selector to Kubernetes, which refuses
    `ext.showRemainingItemCount` (400): the client asks again without it."""
    from hera.exceptions import BadRequest

    from gpuaas.audit import history

    with argo_server(live=[workflows[n] for n in LIVE], token=TOKEN) as running:
        reader = history.ArgoServerHistory(history.ArgoConnection(url=running.url, token=TOKEN, namespace="gpuaas"))
        real = reader.service.list_workflows
        asked = []

        def old_server(*args, **kwargs):
            asked.append(kwargs.get("field_selector"))
            if kwargs.get("field_selector"):
                raise BadRequest('field label not supported: ext.showRemainingItemCount')
            return real(*args, **kwargs)

        reader.service.list_workflows = old_server
        assert sorted(r.workflow for r in reader.runs()) == sorted(LIVE)
        assert asked == [history.COUNT_REMAINING, None]


def test_show_live_by_name_and_archived_by_uid(cli, server, workflows):
    code, out, _ = cli("audit", "show", "gpuaas-on-admitted-a1b2c", *argo(server))
    assert code == 0 and "(uid" in out and "live)" in out
    assert "argo resubmit gpuaas-on-admitted-a1b2c -n gpuaas" in out
    uid = workflows["gpuaas-on-idle-x9y8z"]["metadata"]["uid"]
    shown = cli.json("audit", "show", uid, "--output", "json", *argo(server))
    assert shown["archived"] is True and shown["outcome"] == "failed"
    assert f"argo archive resubmit {uid} -n gpuaas" in shown["resubmit"]
    code, out, _ = cli("audit", "show", "gpuaas-on-finished-q1w2e", *argo(server))
    assert code == 0 and "archived)" in out


def test_resubmit_live_run(cli, server):
    code, out, err = cli("audit", "resubmit", "gpuaas-on-admitted-a1b2c", "-p", "dry-run=true", *argo(server))
    assert code == 0, err
    (done,) = server.resubmitted
    assert done["request"] == {"name": "gpuaas-on-admitted-a1b2c", "namespace": "gpuaas",
                               "parameters": ["dry-run=true"]}
    created = done["created"]
    assert created["metadata"]["labels"]["workflows.argoproj.io/resubmitted-from-workflow"] == "gpuaas-on-admitted-a1b2c"
    assert {p["name"]: p["value"] for p in created["spec"]["arguments"]["parameters"]}["dry-run"] == "true"
    assert f"as {created['metadata']['name']}" in out
    assert ("PUT", "/api/v1/workflows/gpuaas/gpuaas-on-admitted-a1b2c/resubmit") in server.requests


def test_resubmit_archived_run_uses_the_archive_endpoint(cli, server, workflows):
    uid = workflows["gpuaas-on-idle-x9y8z"]["metadata"]["uid"]
    code, out, err = cli("audit", "resubmit", "gpuaas-on-idle-x9y8z", *argo(server))
    assert code == 0, err
    assert ("PUT", f"/api/v1/archived-workflows/{uid}/resubmit") in server.requests
    assert server.resubmitted[0]["request"]["uid"] == uid
    assert "phase Pending, outcome unknown" in out


def test_the_stand_in_refuses_bodies_argo_would_not_send(workflows):
    """The guard that keeps the stand-in honest: a field Argo's NodeStatus does not have fails."""
    from hera.workflows import WorkflowsService

    drifted = copy.deepcopy(workflows["gpuaas-on-finished-q1w2e"])
    node = next(n for n in drifted["status"]["nodes"].values() if n["type"] == "Pod")
    node["podName"] = node["id"]
    with argo_server(live=[drifted], token=TOKEN) as running:
        service = WorkflowsService(host=running.url + "/", token=TOKEN, namespace="gpuaas")
        with pytest.raises(Exception, match="does not validate"):
            service.list_workflows()
        assert any("podName" in error for error in running.schema_errors)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Hera 7.1's req.json(), as in gpuaas.audit.history
def test_the_stand_in_resubmits_as_argo_formulates_it(workflows):
    """Argo v4.0.5 FormulateResubmitWorkflow (workflow/util/util.go, overrideParameters): a parameter
    given is set even if the original's arguments did not name it (the overrides first, then the
    original's others), and the original's annotations are carried over."""
    from hera.workflows import WorkflowsService
    from hera.workflows.models import WorkflowResubmitRequest

    original = copy.deepcopy(workflows["gpuaas-on-admitted-a1b2c"])
    original["metadata"]["annotations"] = {"team": "vision"}
    kept = [p["name"] for p in original["spec"]["arguments"]["parameters"]]
    with argo_server(live=[original], token=TOKEN) as running:
        service = WorkflowsService(host=running.url + "/", token=TOKEN, namespace="gpuaas")
        service.resubmit_workflow(original["metadata"]["name"], WorkflowResubmitRequest(
            name=original["metadata"]["name"], namespace="gpuaas", parameters=["not-in-the-original=1"]))
        created = running.resubmitted[0]["created"]
        assert [p["name"] for p in created["spec"]["arguments"]["parameters"]] == ["not-in-the-original", *kept]
        assert created["metadata"]["annotations"] == {"team": "vision"}
        assert running.schema_errors == []


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 (openssl CLI)."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.fail("openssl missing: install the Debian package openssl (`make setup` does)", pytrace=False)
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "server.pem", folder / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=argo-server", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key),
                    "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def test_tls_verification_ca_file_and_skip(cli, workflows, certificate):
    cert, _ = certificate
    with argo_server(archived=[workflows["gpuaas-on-finished-q1w2e"]], token=TOKEN, tls=certificate) as running:
        assert running.url.startswith("https://")
        code, _, err = cli("audit", *argo(running))
        assert code == 2 and "TLS verification failed" in err and "--ca-file" in err
        code, out, err = cli("audit", *argo(running, "--ca-file", str(cert)))
        assert code == 0 and "gpuaas-on-finished-q1w2e" in out, err
        code, out, _ = cli("audit", *argo(running, "--insecure-skip-verify"))
        assert code == 0 and "gpuaas-on-finished-q1w2e" in out


def test_local_only_options_are_refused_for_a_cluster(cli, server):
    code, _, err = cli("audit", "resubmit", "gpuaas-on-admitted-a1b2c", "--prometheus", "http://x", *argo(server))
    assert code == 2 and "local re-run (--archive) only" in err
    assert server.resubmitted == []


def test_a_refused_resubmit_names_the_grants_a_resubmission_needs():
    """Seen on the real server with an auditor's token: 403 on the template read. The hint must name what a
    resubmission needs beyond Role gpuaas-auditor, not send the user to bind the Role they already have."""
    from hera.exceptions import Forbidden

    from gpuaas.audit.history import ArgoConnection, ArgoServerHistory, HistoryError

    history = ArgoServerHistory(ArgoConnection(url="http://127.0.0.1:9", token="t", namespace="gpuaas"))

    def refused(*_args, **_kwargs):
        raise Forbidden('Server returned status code 403 with message: `workflowtemplates.argoproj.io '
                        '"gpuaas-resume-workers" is forbidden`')

    with pytest.raises(HistoryError) as raised:
        history._call("resubmit archived workflow", refused)
    message = str(raised.value)
    assert "403 Forbidden" in message and '"gpuaas-resume-workers" is forbidden' in message
    assert "create on workflows" in message and "get on workflowtemplates" in message
    with pytest.raises(HistoryError) as raised:
        history._call("list workflows", refused)
    assert "gpuaas-auditor" in str(raised.value) and "create on workflows" not in str(raised.value)
