"""Where run history comes from: Argo's workflow archive in SQLite (the local engine's `runs.db`)
or a live Argo Server (live plus archived workflows, through Hera's `WorkflowsService`).

Both answer the same two questions, "which runs match this label selector" and "which run is
this name or uid", and both return parsed `Run`s, so everything after this module is the same
for a demo on a laptop and a production cluster.
"""

from __future__ import annotations

import json
import re
import sqlite3
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpuaas.audit.run import Run, parse_workflow, unreadable_run
from gpuaas.invocation import command

_UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
PAGE_SIZE = 200
ARCHIVING_STATUS_LABEL = "workflows.argoproj.io/workflow-archiving-status"
# Argo Server v4.0.5 ListWorkflows (server/workflow/workflow_server.go) gives the next `continue` only if the
# ARCHIVE has a row past offset + limit (HasMoreWorkflows), so live runs beyond the first page were never
# listed over a small archive; asked for the remaining count, it counts live and archived rows.
COUNT_REMAINING = "ext.showRemainingItemCount=true"


def _said(error: Exception) -> str:
    """The server's own message from Hera's "Server returned status code N with message: `...`"."""
    text = str(error.args[0] if error.args else error)
    message = text.split("with message: ", 1)[-1].strip().strip("`")
    return f"the server said: {message[:300]}"


class HistoryError(RuntimeError):
    """The history source cannot answer (missing file, refused token, server down): says what to do."""


class RunNotFound(HistoryError):
    pass


class History(Protocol):
    where: str

    def runs(self, label_selector: str | None = None) -> list[Run]: ...

    def find(self, ref: str) -> Run: ...


def _selector_pairs(label_selector: str | None) -> list[tuple[str, str]]:
    """`key=value,key2=value2` (the only selectors the audit builds) as pairs."""
    pairs: list[tuple[str, str]] = []
    for term in (label_selector or "").split(","):
        if term.strip():
            key, _, value = term.replace("==", "=").partition("=")
            pairs.append((key.strip(), value.strip()))
    return pairs


class ArchiveHistory:
    """Reader of the run archive (ARCHITECTURE section 6), opened read-only: auditing never writes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.where = f"archive {self.path}"
        if not self.path.is_file():
            raise HistoryError(f"--archive: expected a run archive (SQLite, e.g. demo-report/runs.db), "
                               f"found no file at {self.path}; run `{command()} demo` first or give the right path")
        try:
            self._db = sqlite3.connect(f"file:{self.path.resolve()}?mode=ro", uri=True)
            tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except sqlite3.DatabaseError as error:
            raise HistoryError(f"--archive {self.path}: expected a SQLite run archive, found a file SQLite "
                               f"cannot read ({error})") from error
        if "archived_workflows" not in tables and self.path.stat().st_size == 0:
            raise HistoryError(f"--archive {self.path}: expected a SQLite run archive, found an empty file; pass the "
                               "runs.db a demo wrote (or the archive an admin exported)")
        if "archived_workflows" not in tables:
            raise HistoryError(f"--archive {self.path}: expected table archived_workflows (ARCHITECTURE section 6), "
                               f"found tables {sorted(tables) or 'none'}")
        self._has_labels = "archived_workflows_labels" in tables

    def _rows(self, where: str = "", args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        query = ("SELECT uid, name, namespace, phase, started_at, finished_at, workflow FROM archived_workflows w"
                 f" {where} ORDER BY started_at, name")
        return self._db.execute(query, args).fetchall()

    def _run(self, row: tuple[Any, ...]) -> Run:
        uid, name, namespace, phase, started, finished, text = row
        try:
            workflow = json.loads(text) if text else None
        except ValueError as error:
            return unreadable_run(uid or "", name or "", namespace or "", phase or "", started, finished,
                                  f"archive row holds no readable Workflow JSON ({error})")
        if not isinstance(workflow, dict):
            return unreadable_run(uid or "", name or "", namespace or "", phase or "", started, finished,
                                  "archive row holds no Workflow object")
        return parse_workflow(workflow, archived=True)

    def runs(self, label_selector: str | None = None) -> list[Run]:
        pairs = _selector_pairs(label_selector)
        if not pairs:
            return [self._run(row) for row in self._rows()]
        if not self._has_labels:
            raise HistoryError(f"--archive {self.path}: has no archived_workflows_labels table to filter by label")
        joins = " ".join(f"JOIN archived_workflows_labels l{i} ON l{i}.uid = w.uid AND l{i}.key = ? AND l{i}.value = ?"
                         for i in range(len(pairs)))
        args = tuple(part for pair in pairs for part in pair)
        query = ("SELECT w.uid, w.name, w.namespace, w.phase, w.started_at, w.finished_at, w.workflow "
                 f"FROM archived_workflows w {joins} ORDER BY w.started_at, w.name")
        return [self._run(row) for row in self._db.execute(query, args).fetchall()]

    def find(self, ref: str) -> Run:
        rows = self._rows("WHERE uid = ? OR name = ?", (ref, ref))
        if not rows:
            raise RunNotFound(f"RUN: expected a workflow name or uid in {self.where}, found no run {ref!r}; "
                              f"list them with `{command()} audit --archive {self.path}`")
        return self._run(rows[-1])

    def close(self) -> None:
        self._db.close()


@dataclass(frozen=True)
class ArgoConnection:
    """How to reach an Argo Server: URL, bearer token, TLS verification and the workflows' namespace."""

    url: str
    token: str | None
    namespace: str
    verify: bool | str = True  # False (--insecure-skip-verify) or a CA bundle path (--ca-file)


class ArgoServerHistory:
    """Live and archived workflows from an Argo Server; a run in both is shown once (live wins)."""

    def __init__(self, connection: ArgoConnection) -> None:
        from hera.workflows import WorkflowsService

        self.connection = connection
        self.where = f"Argo Server {connection.url} (namespace {connection.namespace})"
        host = connection.url if connection.url.endswith("/") else connection.url + "/"
        self.service = WorkflowsService(host=host, token=connection.token, verify_ssl=connection.verify,
                                        namespace=connection.namespace)

    def _call(self, what: str, function: Any, *args: Any, **kwargs: Any) -> Any:
        import requests
        from hera.exceptions import Forbidden, HeraException, NotFound, Unauthorized

        try:
            with warnings.catch_warnings():
                # Hera 7.1 serialises requests with pydantic's deprecated .json(); not ours to fix.
                warnings.simplefilter("ignore", DeprecationWarning)
                if self.connection.verify is False:  # asked for; the CLI warned once already
                    from urllib3.exceptions import InsecureRequestWarning
                    warnings.simplefilter("ignore", InsecureRequestWarning)
                return function(*args, **kwargs)
        except Unauthorized as error:
            raise HistoryError(f"{self.where}: {what}: 401 Unauthorized ({_said(error)}); give a valid token "
                               f"with --token or ARGO_TOKEN (`argo auth token`)") from error
        except Forbidden as error:
            namespace = self.connection.namespace
            if what.startswith("resubmit"):
                raise HistoryError(f"{self.where}: {what}: 403 Forbidden ({_said(error)}); resubmitting is a "
                                   f"change: beyond Role gpuaas-auditor's reads the token needs create on "
                                   f"workflows and get on workflowtemplates (argoproj.io) in {namespace}") from error
            raise HistoryError(f"{self.where}: {what}: 403 Forbidden ({_said(error)}); the token's user or service "
                               f"account needs get and list on workflows.argoproj.io in {namespace} (the archive "
                               f"asks the same): bind it to Role gpuaas-auditor there, e.g. `kubectl create "
                               f"rolebinding auditors -n {namespace} --role gpuaas-auditor "
                               f"--serviceaccount NAMESPACE:NAME`") from error
        except NotFound:
            raise
        except requests.exceptions.SSLError as error:
            raise HistoryError(f"{self.where}: TLS verification failed ({error}); pass --ca-file with the "
                               f"server's CA or --insecure-skip-verify") from error
        except requests.exceptions.ConnectionError as error:
            raise HistoryError(f"{self.where}: cannot connect ({error}); check --argo-server") from error
        except HeraException as error:
            raise HistoryError(f"{self.where}: {what}: {error}") from error
        except ValueError as error:  # a 200 that is not the API's JSON: a UI path, a login proxy, another server
            document = str(getattr(error, "doc", "") or "").lstrip()
            found = ("an HTML page" if document.startswith("<") else
                     f"a body of another shape ({type(error).__name__})")
            raise HistoryError(f"{self.where}: {what}: expected JSON from the Argo Server's API, found {found}; "
                               "check --argo-server: the Argo Server's base URL (e.g. https://argo-server.argo:2746), "
                               "not its UI path or a login proxy in front of it") from error

    @staticmethod
    def _dict(model: Any) -> dict[str, Any]:
        return model.model_dump(mode="json", by_alias=True, exclude_none=True)

    def _pages(self, what: str, function: Any, **kwargs: Any) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        continue_token: str | None = None
        from hera.exceptions import NotFound

        while True:
            try:
                page = self._call(what, function, limit=str(PAGE_SIZE), continue_=continue_token, **kwargs)
            except NotFound as error:  # a list never 404s on an Argo Server (an unknown namespace lists nothing)
                raise HistoryError(f"{self.where}: {what}: 404 Not Found ({error.args[0] if error.args else error}); "
                                   f"expected the Argo Server's API under {self.connection.url}/api/v1/; "
                                   "check --argo-server: the Argo Server's base URL (e.g. "
                                   "https://argo-server.argo:2746)") from error
            given = page.items or []
            items += [self._dict(item) for item in given]
            following = page.metadata.continue_ if page.metadata else None
            # An empty page ends the list even with a continue: Argo Server v4.0.5 counts the archive without
            # the label selector on later pages, and past a selected list's end answers the same offset again.
            if not following or not given or following == continue_token:
                return items
            continue_token = following

    def _workflow_list(self, **kwargs: Any) -> list[dict[str, Any]]:
        """The workflow list, every page of it (COUNT_REMAINING); a server that does not know the
        field selector (before v3.6 the list went to Kubernetes, which refuses it: 400) is asked without."""
        from hera.exceptions import BadRequest

        try:
            return self._pages("list workflows", self.service.list_workflows, field_selector=COUNT_REMAINING,
                               **kwargs)
        except HistoryError as error:
            if not isinstance(error.__cause__, BadRequest):
                raise
        return self._pages("list workflows", self.service.list_workflows, **kwargs)

    @staticmethod
    def _is_archived(workflow: dict[str, Any]) -> bool:
        """Read back from the archive: Argo labels every workflow it serves from there Persisted
        (persist/sqldb); a live one carries Pending or Archived, or no archiving label yet."""
        labels = (workflow.get("metadata") or {}).get("labels") or {}
        return labels.get(ARCHIVING_STATUS_LABEL) == "Persisted"

    def _full(self, item: dict[str, Any], archived: bool = False) -> Run:
        """A listed workflow with its records. The archive's list rows have no nodes (Argo v4 serves them
        in the workflow list too): get the run by name and uid, which answers the live copy while
        Kubernetes still has it (live wins) and the archive's otherwise."""
        from hera.exceptions import NotFound

        metadata = item.get("metadata") or {}
        uid, name = metadata.get("uid"), metadata.get("name")
        archived = archived or self._is_archived(item)
        if not archived or (item.get("status") or {}).get("nodes") or not uid:  # live: the list has it all
            return parse_workflow(item, archived=archived)
        namespace = metadata.get("namespace") or self.connection.namespace
        if name:
            try:
                found = self._dict(self._call("get workflow", self.service.get_workflow, name, namespace=namespace,
                                              uid=uid))
            except NotFound:
                found = None
            if found and (found.get("metadata") or {}).get("uid") == uid:
                return parse_workflow(found, archived=self._is_archived(found))
        try:  # an older server: no archive fallback behind GET workflow
            found = self._dict(self._call("get archived workflow", self.service.get_archived_workflow, uid))
        except NotFound:
            return parse_workflow(item, archived=True)
        return parse_workflow(found, archived=True)

    def runs(self, label_selector: str | None = None) -> list[Run]:
        """Argo v3.6+ lists live and archived runs in one list (each once); older servers list the live
        ones only, so the archive's list is read too and a run already seen is skipped."""
        namespace = self.connection.namespace
        live = self._workflow_list(namespace=namespace, label_selector=label_selector)
        archived = self._pages("list archived workflows", self.service.list_archived_workflows,
                               namespace=namespace, label_selector=label_selector)
        runs: list[Run] = []
        seen: set[str] = set()
        for item, from_archive in [(w, False) for w in live] + [(w, True) for w in archived]:
            uid = (item.get("metadata") or {}).get("uid")
            if uid and uid in seen:
                continue
            if uid:
                seen.add(uid)
            runs.append(self._full(item, archived=from_archive))
        runs.sort(key=lambda r: (r.started or "", r.workflow))
        return runs

    def find(self, ref: str) -> Run:
        from hera.exceptions import NotFound

        namespace = self.connection.namespace
        if _UID.match(ref):
            live = self._workflow_list(namespace=namespace)
            for workflow in live:
                if (workflow.get("metadata") or {}).get("uid") == ref:
                    return self._full(workflow)
            try:
                return parse_workflow(self._dict(self._call("get archived workflow",
                                                            self.service.get_archived_workflow, ref)), archived=True)
            except NotFound:
                pass
        else:
            try:  # Argo answers the live workflow, or the archive's latest run of that name (Persisted)
                found = self._dict(self._call("get workflow", self.service.get_workflow, ref, namespace=namespace))
                return parse_workflow(found, archived=self._is_archived(found))
            except NotFound:
                pass
            summaries = self._pages("list archived workflows", self.service.list_archived_workflows,
                                    namespace=namespace, name_prefix=ref)
            matches = [s for s in summaries if (s.get("metadata") or {}).get("name") == ref]
            if matches:
                return self._full(matches[-1], archived=True)
        raise RunNotFound(f"RUN: expected a workflow name or uid known to {self.where}, found no run {ref!r}; "
                          f"list them with `{command()} audit --argo-server {self.connection.url}`")

    def resubmit(self, run: Run, parameters: list[str], memoized: bool = False) -> Run:
        """Argo's own resubmit: a new workflow from the same template and arguments (the template is
        re-read, the steps re-check live state), labelled resubmitted-from the original."""
        from hera.workflows.models import ResubmitArchivedWorkflowRequest, WorkflowResubmitRequest

        if run.archived:
            request = ResubmitArchivedWorkflowRequest(uid=run.uid, name=run.workflow, namespace=run.argo_namespace,
                                                      memoized=memoized or None, parameters=parameters or None)
            created = self._call("resubmit archived workflow", self.service.resubmit_archived_workflow,
                                 run.uid, request)
        else:
            request = WorkflowResubmitRequest(name=run.workflow, namespace=run.argo_namespace,
                                              memoized=memoized or None, parameters=parameters or None)
            created = self._call("resubmit workflow", self.service.resubmit_workflow, run.workflow, request,
                                 namespace=run.argo_namespace)
        return parse_workflow(self._dict(created))
