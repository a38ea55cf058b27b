"""A stand-in Argo Server on loopback that cannot drift from the real API.

It answers the routes `gpuaas audit` uses (list/get live workflows, list/get archived workflows,
resubmit live and archived) and, before sending anything, validates the body against the
response schema that Argo's own OpenAPI document (`api/openapi-spec/swagger.json` of the pinned Argo Workflows module)
declares for that operation and status code; request bodies are validated the same way. The
validation is strict: every object definition of the swagger is closed
(`additionalProperties: false`) so a field Argo does not have (a typo, or an engine-only field)
fails the test instead of passing silently. A body that does not validate is answered with a 500
naming the schema error, and recorded in `server.schema_errors`.

It also demands `Authorization: Bearer <token>` (401 otherwise, as the real server), applies label
selectors (`=`, `==`, `!=`, `in`, `notin`, exists, `!key`), `listOptions.limit`/`continue`
paging (the continue token is an offset; the workflow list's as upstream gives it, see
`_workflow_page`), `namePrefix`, and answers as Argo Server v4.0.5 does
(checked against the real one in tests/realstack/test_argo_audit.py; upstream
server/workflow/workflow_server.go, server/workflow/store/sqlite_store.go, persist/sqldb):

- the workflow LIST (`/api/v1/workflows/{ns}`) is live AND archived: the live workflows that are not
  archived yet, then the archive's rows; a workflow both live and archived comes once, from the archive;
- archived rows in a list are summaries: metadata, `spec.arguments`, phase/times/progress, no nodes and
  no outputs (callers must get each one to read its records), labelled
  `workflows.argoproj.io/workflow-archiving-status: Persisted`;
- GET `/api/v1/workflows/{ns}/{name}` (and resubmit) falls back to the archive (the latest run of that
  name, or the `uid` asked for), labelled Persisted, as GET `/api/v1/archived-workflows/{uid}` is.

    with argo_server(live=[wf1], archived=[wf2], token="t0ken") as server:
        WorkflowsService(host=server.url, token="t0ken", namespace="gpuaas").list_workflows()
"""

from __future__ import annotations

import copy
import json
import re
import ssl
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema

RESUBMITTED_FROM = "workflows.argoproj.io/resubmitted-from-workflow"
ARCHIVING_STATUS = "workflows.argoproj.io/workflow-archiving-status"
_CONTROLLER_LABELS = ("workflows.argoproj.io/completed", "workflows.argoproj.io/phase")


@cache
def swagger() -> dict[str, Any]:
    """Argo Server's OpenAPI document, from the pinned Argo Workflows module."""
    from gpuaas.manifests.validation import ARGO_WORKFLOWS
    from gpuaas.upstream import upstream_file

    return json.loads(upstream_file(ARGO_WORKFLOWS, "api/openapi-spec/swagger.json").read_text())


@cache
def _strict_definitions() -> dict[str, Any]:
    definitions = copy.deepcopy(swagger()["definitions"])
    for definition in definitions.values():
        if definition.get("type") == "object" and "properties" in definition \
                and "additionalProperties" not in definition:
            definition["additionalProperties"] = False
    return definitions


def validator(schema: dict[str, Any]) -> jsonschema.Draft4Validator:
    """A validator for a swagger schema fragment, resolving #/definitions/... strictly."""
    return jsonschema.Draft4Validator({**schema, "definitions": _strict_definitions()})


def response_schema(method: str, path: str, status: int) -> dict[str, Any]:
    """The schema Argo's swagger declares for an operation's response with this status code."""
    responses = swagger()["paths"][path][method]["responses"]
    return (responses.get(str(status)) or responses["default"])["schema"]


def request_schema(method: str, path: str) -> dict[str, Any] | None:
    for parameter in swagger()["paths"][path][method].get("parameters", []):
        if parameter.get("in") == "body":
            return parameter["schema"]
    return None


def schema_problems(schema: dict[str, Any], body: Any) -> list[str]:
    return [f"{'/'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in validator(schema).iter_errors(body)]


# -- label selectors -----------------------------------------------------------------------------

_SET_TERM = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_terms(selector: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [t.strip() for t in terms if t.strip()]


def selector_matches(selector: str | None, labels: dict[str, str]) -> bool:
    for term in _split_terms(selector or ""):
        set_term = _SET_TERM.match(term)
        if set_term:
            key, operator, values = set_term.groups()
            wanted = {v.strip() for v in values.split(",")}
            if (operator == "in") != (key in labels and labels[key] in wanted):
                return False
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = (s.strip() for s in term.replace("==", "=").split("=", 1))
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term not in labels:
            return False
    return True


# -- the server ----------------------------------------------------------------------------------

class ArgoServerStandIn:
    """State of the stand-in: live and archived workflows, request log, resubmissions, schema errors."""

    def __init__(self, live: list[dict[str, Any]], archived: list[dict[str, Any]], token: str) -> None:
        self.live = [copy.deepcopy(w) for w in live]
        self.archived = [copy.deepcopy(w) for w in archived]
        self.token = token
        self.requests: list[tuple[str, str]] = []
        self.resubmitted: list[dict[str, Any]] = []
        self.schema_errors: list[str] = []
        self.url = ""
        self._lock = threading.Lock()

    def _archived_rows(self, namespace: str | None, selector: str | None, prefix: str = "") -> list[dict[str, Any]]:
        """The archive's rows as its list serves them: summaries, newest start first."""
        rows = [_archived_summary(w) for w in self.archived
                if (not namespace or w["metadata"].get("namespace") == namespace)
                and w["metadata"]["name"].startswith(prefix)]
        rows = [r for r in rows if selector_matches(selector, r["metadata"].get("labels") or {})]
        return sorted(rows, key=lambda r: r["status"].get("startedAt") or "", reverse=True)

    def _from_archive(self, namespace: str, name: str, uid: str | None) -> dict[str, Any] | None:
        """persist/sqldb GetWorkflow: by uid, else the latest run of that name; labelled Persisted."""
        rows = [w for w in self.archived if (w["metadata"].get("uid") == uid if uid else
                                            (w["metadata"].get("namespace"), w["metadata"]["name"]) == (namespace, name))]
        if not rows:
            return None
        return _persisted(max(rows, key=lambda w: (w.get("status") or {}).get("startedAt") or ""))

    def _get(self, namespace: str, name: str, uid: str | None) -> dict[str, Any] | None:
        """workflow_server.go getWorkflow: the live one (of that uid, if asked), else the archive's."""
        for workflow in self.live:
            if (workflow["metadata"].get("namespace"), workflow["metadata"]["name"]) == (namespace, name) \
                    and (not uid or workflow["metadata"].get("uid") == uid):
                return workflow
        return self._from_archive(namespace, name, uid)

    # Each handler returns (swagger path, status, body).
    def route(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[str, int, Any]:
        parts = [p for p in path.split("/") if p]
        if parts[:3] == ["api", "v1", "workflows"] and method == "get" and len(parts) == 4:
            selector = query.get("listOptions.labelSelector")
            archived = {w["metadata"].get("uid") for w in self.archived}
            live = [w for w in self.live if w["metadata"].get("namespace") == parts[3]
                    and w["metadata"].get("uid") not in archived  # the server's store skips archived ones
                    and selector_matches(selector, w["metadata"].get("labels") or {})]
            return "/api/v1/workflows/{namespace}", 200, self._workflow_page(
                live, self._archived_rows(parts[3], selector), query, len(self._archived_rows(parts[3], None)))
        if parts[:3] == ["api", "v1", "workflows"] and method == "get" and len(parts) == 5:
            found = self._get(parts[3], parts[4], query.get("uid"))
            if found is None:
                return "/api/v1/workflows/{namespace}/{name}", 404, \
                    _error(5, f'workflows.argoproj.io "{parts[4]}" not found')
            return "/api/v1/workflows/{namespace}/{name}", 200, found
        if parts[:3] == ["api", "v1", "workflows"] and method == "put" and len(parts) == 6 and parts[5] == "resubmit":
            spec_path = "/api/v1/workflows/{namespace}/{name}/resubmit"
            found = self._get(parts[3], parts[4], None)
            if found is None:
                return spec_path, 404, _error(5, f'workflows.argoproj.io "{parts[4]}" not found')
            return spec_path, 200, self._resubmit(found, body)
        if parts == ["api", "v1", "archived-workflows"] and method == "get":
            items = self._archived_rows(query.get("namespace"), query.get("listOptions.labelSelector"),
                                        query.get("namePrefix") or "")
            return "/api/v1/archived-workflows", 200, self._page(items, query)
        if parts[:3] == ["api", "v1", "archived-workflows"] and len(parts) >= 4:
            found = next((w for w in self.archived if w["metadata"].get("uid") == parts[3]), None)
            if method == "get" and len(parts) == 4:
                if found is None:
                    return "/api/v1/archived-workflows/{uid}", 404, _error(5, "not found")
                return "/api/v1/archived-workflows/{uid}", 200, _persisted(found)
            if method == "put" and len(parts) == 5 and parts[4] == "resubmit":
                if found is None:
                    return "/api/v1/archived-workflows/{uid}/resubmit", 404, _error(5, "not found")
                return "/api/v1/archived-workflows/{uid}/resubmit", 200, self._resubmit(found, body)
        return "", 404, _error(5, f"no route {method.upper()} {path}")

    def _page(self, items: list[dict[str, Any]], query: dict[str, str]) -> dict[str, Any]:
        start = int(query.get("listOptions.continue") or 0)
        limit = int(query.get("listOptions.limit") or 0) or len(items) or 1
        page = items[start:start + limit]
        metadata: dict[str, Any] = {"resourceVersion": "1"}
        if start + limit < len(items):
            metadata["continue"] = str(start + limit)
        return {"metadata": metadata, "items": page}

    def _workflow_page(self, live: list[dict[str, Any]], archived: list[dict[str, Any]],
                       query: dict[str, str], archived_unselected: int) -> dict[str, Any]:
        """The workflow list's page as v4.0.5 ListWorkflows cuts it (server/workflow/workflow_server.go): live
        rows then the archive's from offset `continue`; the next `continue` is given only if the ARCHIVE
        has a row past offset + limit (HasMoreWorkflows), unless the field selector asks for
        `ext.showRemainingItemCount=true`, which counts live and archived rows: then `continue` is the
        offset plus the rows given, while live + archived - offset - rows given > 0. On a page after
        the first (limit and offset both set) the archive's count ignores the label selector
        (persist/sqldb countWorkflowsOptimized): `archived_unselected`, every archived row of the
        namespace. So a label-selected list past its end answers empty pages with the same `continue`."""
        start = int(query.get("listOptions.continue") or 0)
        limit = int(query.get("listOptions.limit") or 0)
        items = live + archived
        page = items[start:start + limit] if limit else items[start:]
        fields = (query.get("listOptions.fieldSelector") or "").split(",")
        if "ext.showRemainingItemCount=true" in fields:
            counted = archived_unselected if limit > 0 and start > 0 else len(archived)
            more = len(live) + counted - start - len(page) > 0
        else:
            more = len(archived) > start + limit
        metadata: dict[str, Any] = {"resourceVersion": "1"}
        if more:
            metadata["continue"] = str(start + len(page))
        return {"metadata": metadata, "items": page}

    def _resubmit(self, original: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
        """What Argo's FormulateResubmitWorkflow (v4.0.5 workflow/util) does that matters here: a new
        Workflow named from the original's generateName (else its name + "-"), its spec (parameter
        overrides first, as overrideParameters puts them), its annotations, its labels but the
        controller's and the archiving status, plus
        resubmitted-from; answered as created, before the controller saw it (no phase)."""
        overrides = [dict(zip(("name", "value"), p.split("=", 1), strict=True))
                     for p in request.get("parameters") or []]
        spec = copy.deepcopy(original.get("spec") or {})
        if overrides:  # overrideParameters: the given ones first, then the original's others
            given = {p["name"] for p in overrides}
            arguments = spec.setdefault("arguments", {})
            arguments["parameters"] = overrides + [p for p in arguments.get("parameters") or []
                                                   if p["name"] not in given]
        labels = {k: v for k, v in (original["metadata"].get("labels") or {}).items() if k not in _CONTROLLER_LABELS}
        labels.pop(ARCHIVING_STATUS, None)
        labels[RESUBMITTED_FROM] = original["metadata"]["name"]
        generate = original["metadata"].get("generateName") or original["metadata"]["name"] + "-"
        created = {
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": f"{generate}{uuid.uuid4().hex[:5]}", "generateName": generate,
                         "namespace": original["metadata"].get("namespace"), "uid": str(uuid.uuid4()),
                         "labels": labels, "resourceVersion": "1",
                         **({"annotations": dict(original["metadata"]["annotations"])}
                            if original["metadata"].get("annotations") else {}),
                         "creationTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")},
            "spec": spec,
            "status": {},
        }
        self.live.append(created)
        self.resubmitted.append({"from": original["metadata"]["name"], "request": request, "created": created})
        return created


def _error(code: int, message: str) -> dict[str, Any]:
    return {"code": code, "message": message}


def _persisted(workflow: dict[str, Any]) -> dict[str, Any]:
    """A workflow as read back from the archive: upstream labels it Persisted."""
    copied = copy.deepcopy(workflow)
    copied["metadata"]["labels"] = {**(copied["metadata"].get("labels") or {}), ARCHIVING_STATUS: "Persisted"}
    return copied


def _archived_summary(workflow: dict[str, Any]) -> dict[str, Any]:
    """One row of the archive in a list (persist/sqldb ListWorkflows' columns): no nodes, no outputs."""
    status = workflow.get("status") or {}
    metadata = _persisted(workflow)["metadata"]
    return {"metadata": {k: v for k, v in metadata.items()
                         if k in ("name", "namespace", "uid", "labels", "annotations", "creationTimestamp")},
            "spec": {"arguments": (workflow.get("spec") or {}).get("arguments") or {}},
            "status": {k: status[k] for k in ("phase", "startedAt", "finishedAt", "progress", "message",
                                              "estimatedDuration", "resourcesDuration") if status.get(k)}}


def _handler(state: ArgoServerStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _serve(self, method: str) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            with state._lock:
                state.requests.append((method.upper(), self.path))
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.headers.get("Authorization") != f"Bearer {state.token}":
                self._send(401, _error(16, "token not valid for running mode"))
                return
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                self._send(400, _error(3, "request body is not JSON"))
                return
            with state._lock:
                if method in ("put", "post"):
                    probe = _request_path(url.path)
                    schema = request_schema(method, probe) if probe else None
                    problems = schema_problems(schema, body) if schema else []
                    if problems:
                        state.schema_errors += [f"request {url.path}: {p}" for p in problems]
                        self._send(400, _error(3, f"request does not validate: {problems[0]}"))
                        return
                spec_path, status, response = state.route(method, url.path, query, body)
                if spec_path:
                    problems = schema_problems(response_schema(method, spec_path, status), response)
                    if problems:
                        state.schema_errors += [f"response {method.upper()} {url.path}: {p}" for p in problems]
                        self._send(500, _error(13, f"stand-in response does not validate: {problems[0]}"))
                        return
            self._send(status, response)

        def do_GET(self) -> None:
            self._serve("get")

        def do_PUT(self) -> None:
            self._serve("put")

        def do_POST(self) -> None:
            self._serve("post")

    return Handler


def _request_path(path: str) -> str | None:
    if re.fullmatch(r"/api/v1/workflows/[^/]+/[^/]+/resubmit", path):
        return "/api/v1/workflows/{namespace}/{name}/resubmit"
    if re.fullmatch(r"/api/v1/archived-workflows/[^/]+/resubmit", path):
        return "/api/v1/archived-workflows/{uid}/resubmit"
    return None


@contextmanager
def argo_server(live: list[dict[str, Any]] | None = None, archived: list[dict[str, Any]] | None = None,
                token: str = "stand-in-token", tls: tuple[Path, Path] | None = None) -> Iterator[ArgoServerStandIn]:
    """Run the stand-in on a free loopback port for the duration of the block; `tls` =
    (certificate, key) PEM files serves HTTPS as the Argo Server does by default."""
    state = ArgoServerStandIn(live or [], archived or [], token)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    scheme = "http"
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(tls[0]), str(tls[1]))
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    state.url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="argo-server-stand-in", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
