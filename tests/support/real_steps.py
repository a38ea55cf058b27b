"""Run a reaction step on the real stack exactly as its WorkflowTemplate would: `python -m steps
<reaction> PARAMS_FILE` as the template's ServiceAccount.

    steps = RealSteps(real_cluster, tmp_path)
    run = steps.run("release-workers", namespace="team-b", workload="job-train-1a2b3")
    run.outcome, run.plan, run.record, run.actions, run.reasons, run.account

Each reaction runs as the ServiceAccount of the rendered WorkflowTemplate `gpuaas-<reaction>`
(`spec.serviceAccountName` in manifests/base/workflows; the on-idle fan-out `idle-alerts` runs in
`gpuaas-on-idle`). The process gets a kubeconfig holding a token from the TokenRequest API for
that account (never the admin's credentials, and no GPUAAS_KUBE_URL), the stack's Prometheus as GPUAAS_PROMETHEUS_URL,
and its own outputs dir. Every run is checked for a 403 (a denied call is a defect of the RBAC or
of the code, whatever the outcome says) and for an exit code other than 0; kube-apiserver's audit log (gpuaas.cluster.audit) is read for
any request of that account it denied while the step ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from gpuaas.cluster import audit
from tests.support.real_cluster import RealCluster

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "manifests" / "base" / "workflows"
STEPS_NAMESPACE = "gpuaas"
JSON = dict[str, Any]
TEMPLATE_OF = {"idle-alerts": "on-idle", "record-outcome": None}


@cache
def _template(reaction: str) -> JSON:
    template = TEMPLATE_OF.get(reaction, reaction)
    if template is None:
        raise ValueError(f"{reaction} runs in every template (exit handler): name the template's reaction instead")
    return yaml.safe_load((WORKFLOWS / f"gpuaas-{template}.yaml").read_text())


def retry_strategy(reaction: str) -> tuple[int, float, float]:
    """(limit, first backoff seconds, factor) of the step's retryStrategy in its rendered template."""
    for step_template in (_template(reaction).get("spec") or {}).get("templates") or []:
        command = (step_template.get("script") or {}).get("command") or []
        strategy = step_template.get("retryStrategy")
        if strategy and reaction in command:
            backoff = strategy.get("backoff") or {}
            return (int(strategy.get("limit", 0)), float(str(backoff.get("duration", "1s")).rstrip("s")),
                    float(backoff.get("factor", 1)))
    return 0, 0.0, 1.0


@cache
def template_account(reaction: str) -> str:
    """The ServiceAccount the rendered WorkflowTemplate of `reaction` runs its pods as."""
    template = TEMPLATE_OF.get(reaction, reaction)
    if template is None:
        raise ValueError(f"{reaction} runs in every template (exit handler): name the template's reaction instead")
    document = yaml.safe_load((WORKFLOWS / f"gpuaas-{template}.yaml").read_text())
    account = (document.get("spec") or {}).get("serviceAccountName")
    if not account:
        raise AssertionError(f"expected spec.serviceAccountName in WorkflowTemplate gpuaas-{template}, found none")
    return account


@dataclass
class StepRun:
    reaction: str
    params: dict[str, str]
    exit_code: int
    outcome: str
    record: JSON
    stdout: str
    stderr: str
    account: str = ""
    outputs: dict[str, str] = field(default_factory=dict)

    @property
    def data(self) -> JSON:
        return self.record.get("data") or {}

    @property
    def plan(self) -> JSON:
        return self.data.get("plan") or {}

    @property
    def actions(self) -> list[JSON]:
        return self.data.get("actions") or []

    @property
    def applied(self) -> list[str]:
        """Names of the actions that wrote something."""
        return [a["action"] for a in self.actions if a.get("result") == "applied"]

    @property
    def reasons(self) -> list[str]:
        return self.plan.get("reasons") or []

    def describe(self) -> str:
        return (f"{self.reaction} {self.params.get('namespace', '')}/{self.params.get('workload', '')}: exit "
                f"{self.exit_code}, outcome {self.outcome}, actions {[(a['action'], a.get('result')) for a in self.actions]}, "
                f"errors {self.data.get('errors')}, reasons {self.reasons}\nstderr: {self.stderr[-1500:]}")


class RealSteps:
    """Runs steps as their templates' ServiceAccounts against the real apiserver."""

    def __init__(self, real_cluster: RealCluster, workdir: Path, environ: dict[str, str] | None = None) -> None:
        """`environ`: the Prometheus settings the step pod gets (ConfigMap gpuaas-prometheus, its envFrom);
        default: the stack's Prometheus as GPUAAS_PROMETHEUS_URL."""
        self.environ = environ
        self.cluster = real_cluster
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.kubeconfigs: dict[str, Path] = {}
        self.runs: list[StepRun] = []

    def kubeconfig(self, account: str) -> Path:
        if account not in self.kubeconfigs:
            self.kubeconfigs[account] = self.cluster.service_account_kubeconfig(
                STEPS_NAMESPACE, account, self.workdir / f"{account}.kubeconfig")
        return self.kubeconfigs[account]

    def run(self, reaction: str, *, expect_exit: int = 0, **params: str) -> StepRun:
        """Run one step as Argo does: an attempt that exits 75 (transient) is retried after the
        template's backoff, up to its retryStrategy limit. Fail on a 403 anywhere in an attempt's
        record, output or audit trail, or on an unexpected final exit code."""
        limit, backoff, factor = retry_strategy(reaction)
        attempt = 0
        while True:
            done = self._attempt(reaction, attempt, limit, **params)
            if done.exit_code != 75 or attempt >= limit or expect_exit == 75:
                assert done.exit_code == expect_exit, f"expected exit {expect_exit}:\n{done.describe()}"
                return done
            time.sleep(backoff * factor ** attempt)
            attempt += 1

    def _attempt(self, reaction: str, attempt: int, limit: int, **params: str) -> StepRun:
        index = len(self.runs)
        params = {"dry-run": "false", **{k.replace("_", "-"): v for k, v in params.items()}}
        params_file = self.workdir / f"{index:03d}-{reaction}.params.json"
        params_file.write_text(json.dumps([{"name": k, "value": v} for k, v in params.items()]))
        outputs = self.workdir / f"{index:03d}-{reaction}.outputs"
        outputs.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUAAS_") and k != "KUBECONFIG"}
        account = template_account(reaction)
        env.update({"KUBECONFIG": str(self.kubeconfig(account)), "GPUAAS_OUTPUTS_DIR": str(outputs),
                    "GPUAAS_NAMESPACE": STEPS_NAMESPACE, "PYTHONPATH": str(ROOT),
                    "GPUAAS_ATTEMPT": str(attempt), "GPUAAS_RETRY_LIMIT": str(limit),
                    **(self.environ if self.environ is not None
                       else {"GPUAAS_PROMETHEUS_URL": self.cluster.endpoint("prometheus")})})
        audited_before = len(list(audit.requests(self.cluster.cluster.audit_log)))
        done = subprocess.run([sys.executable, "-m", "steps", reaction, str(params_file)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=180, check=False)
        user = f"system:serviceaccount:{STEPS_NAMESPACE}:{account}"
        denied = [r for r in list(audit.requests(self.cluster.cluster.audit_log))[audited_before:]
                  if r.user == user and r.denied]
        files = {p.name: p.read_text() for p in outputs.iterdir() if p.is_file()}
        record = json.loads(files["record"]) if files.get("record") else {}
        run = StepRun(reaction, params, done.returncode, files.get("outcome", "").strip(), record, done.stdout,
                      done.stderr, account, files)
        self.runs.append(run)
        assert not denied, (f"kube-apiserver denied {user}: "
                            f"{[(r.verb, r.rbac_resource, r.namespace, r.name) for r in denied]}\n{run.describe()}")
        text = json.dumps(record) + done.stderr
        assert "403" not in json.dumps(record.get("data", {}).get("errors")) and "Forbidden" not in text, \
            f"a call of the step was denied (403):\n{run.describe()}"
        return run
