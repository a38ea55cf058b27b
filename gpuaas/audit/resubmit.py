"""Resubmitting a run: what to type, and doing it against the local engine.

On a cluster the Argo Server does the work (`ArgoServerHistory.resubmit`). For a local archive the
engine re-runs the same WorkflowTemplate with the same arguments against its cluster snapshot
(demo-report/cluster-snapshot.json), and the new run is appended to the same archive. Either way
the event may be stale by now, which is why a resubmission re-runs the steps (they observe the
live state again) instead of replaying the old plan.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from gpuaas.audit.history import HistoryError
from gpuaas.audit.run import RESUBMITTED_FROM_LABEL, Run, parse_workflow
from gpuaas.invocation import command

# Labels Argo's controller owns; a resubmitted workflow gets fresh ones.
_CONTROLLER_LABEL_PREFIX = "workflows.argoproj.io/"
_KEPT_CONTROLLER_LABELS = frozenset({"workflows.argoproj.io/workflow-template"})


class ResubmitError(HistoryError):
    pass


def parse_overrides(values: list[str]) -> dict[str, str]:
    """`-p name=value` options (Argo's resubmit `parameters` format)."""
    overrides: dict[str, str] = {}
    for value in values:
        name, sep, text = value.partition("=")
        if not sep or not name:
            raise ResubmitError(f"--parameter: expected NAME=VALUE (e.g. dry-run=true), found {value!r}")
        overrides[name] = text
    return overrides


def resubmission(workflow: dict[str, Any], overrides: dict[str, str]) -> dict[str, Any]:
    """The new Workflow Argo's resubmit would create: same template reference and arguments
    (with overrides), user labels and annotations, plus the resubmitted-from label."""
    metadata = workflow.get("metadata") or {}
    spec = workflow.get("spec") or {}
    template = (spec.get("workflowTemplateRef") or {}).get("name")
    if not template:
        raise ResubmitError(f"run {metadata.get('name')!r}: spec.workflowTemplateRef.name: expected the "
                            f"WorkflowTemplate it ran from, found none; only template runs can be resubmitted")
    parameters = [dict(p) for p in (spec.get("arguments") or {}).get("parameters") or []]
    known = {p.get("name") for p in parameters}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ResubmitError(f"--parameter: {', '.join(unknown)}: expected one of the run's parameters "
                            f"({', '.join(sorted(n for n in known if n))})")
    for parameter in parameters:
        if parameter.get("name") in overrides:
            parameter["value"] = overrides[parameter["name"]]
    labels = {k: v for k, v in (metadata.get("labels") or {}).items()
              if not k.startswith(_CONTROLLER_LABEL_PREFIX) or k in _KEPT_CONTROLLER_LABELS}
    labels[RESUBMITTED_FROM_LABEL] = str(metadata.get("name") or "")
    new_metadata: dict[str, Any] = {"generateName": f"{template}-", "labels": labels}
    if metadata.get("namespace"):
        new_metadata["namespace"] = metadata["namespace"]
    if metadata.get("annotations"):
        new_metadata["annotations"] = dict(metadata["annotations"])
    return {"apiVersion": workflow.get("apiVersion", "argoproj.io/v1alpha1"), "kind": "Workflow",
            "metadata": new_metadata,
            "spec": {"workflowTemplateRef": {"name": template}, "arguments": {"parameters": parameters}}}


def resubmit_locally(archive: Path, snapshot: Path, run: Run, overrides: dict[str, str],
                     prometheus_url: str | None = None) -> Run:
    """Re-run an archived run on the local engine restored from `snapshot`; the new run is appended
    to `archive` by the engine. Without `prometheus_url` the engine runs no Prometheus, so a
    reaction that must measure GPU activity (on-idle) fails as transient, as it would on a cluster
    whose Prometheus is down."""
    if not run.raw:
        raise ResubmitError(f"run {run.workflow or run.uid}: its Workflow JSON is unreadable in the archive; "
                            f"nothing to resubmit from")
    if not snapshot.is_file():
        raise ResubmitError(f"--snapshot: expected the cluster snapshot the demo writes next to the archive "
                            f"(cluster-snapshot.json), found no file at {snapshot}; run `{command()} demo` again "
                            f"or pass --snapshot FILE")
    workflow = resubmission(run.raw, overrides)
    try:
        from engine.runtime import LocalEngine
    except ImportError as error:
        raise ResubmitError(f"local resubmit needs the local engine (engine.runtime.LocalEngine): {error}") from error
    from engine.executor import SubmissionRejected

    options = {"prometheus_url": prometheus_url} if prometheus_url else {}
    try:
        with LocalEngine.from_snapshot(snapshot, archive_path=archive, **options) as engine:
            archived = engine.submit(workflow)
    except SubmissionRejected as error:  # what Argo's admission would answer: nothing ran
        raise ResubmitError(f"the template {workflow['spec']['workflowTemplateRef']['name']} refuses the "
                            f"resubmission: {error}; fix the -p value") from None
    except ValueError as error:  # a snapshot that is not the demo's (engine.cluster_state says which part)
        text = str(error)
        raise ResubmitError(f"--{text}" if text.startswith(f"snapshot {snapshot}") else f"--snapshot {snapshot}: {text}") \
            from None
    return parse_workflow(archived, archived=True)


def resubmit_commands(run: Run, archive: Path | None = None, argo_server: str | None = None) -> list[str]:
    """The exact commands that resubmit this run, for `gpuaas audit show`."""
    commands: list[str] = []
    if archive is not None:
        commands.append(f"{command()} audit resubmit {shlex.quote(run.workflow)} --archive {shlex.quote(str(archive))}")
    else:
        server = f" --argo-server {shlex.quote(argo_server)}" if argo_server else ""
        commands.append(f"{command()} audit resubmit {shlex.quote(run.workflow)}{server} "
                        f"--argo-namespace {shlex.quote(run.argo_namespace)}")
    if run.archived:
        commands.append(f"argo archive resubmit {shlex.quote(run.uid)} -n {shlex.quote(run.argo_namespace)}")
    else:
        commands.append(f"argo resubmit {shlex.quote(run.workflow)} -n {shlex.quote(run.argo_namespace)}")
    commands.append("# dry run first: add -p dry-run=true to either command")
    if archive is not None and run.reaction == "on-idle":  # the demo's Prometheus stopped with it
        commands.append("# on-idle confirms idleness in Prometheus: a local re-run needs --prometheus URL (one that "
                        "holds the workload's GPU metrics), else it ends failed: MetricsUnavailable")
    return commands
