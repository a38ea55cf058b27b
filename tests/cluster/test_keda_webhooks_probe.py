"""`gpuaas cluster up` calls KEDA's webhooks ready only once the apiserver gets an answer from them.

Why not `/readyz` alone: upstream's KEDA webhooks are `failurePolicy: Ignore`, so while the
apiserver cannot reach them (a wrong port, Service or caBundle) every ScaledObject is admitted
unjudged. The probe is a server-side dry run of a ScaledObject only the webhook refuses (a name
longer than the 63 characters KEDA puts in a label: `verifyName`, not a CRD schema rule).
"""

from __future__ import annotations

import subprocess

from gpuaas.cluster import stack


def _kubectl(returncode: int, stdout: str = "", stderr: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(["kubectl"], returncode, stdout, stderr)


def test_a_dry_run_admitted_unjudged_is_not_ready() -> None:
    verdict = stack.keda_webhooks_answer(_kubectl(0, "scaledobject.keda.sh/x created (server dry run)\n"))
    assert verdict is not None and "admitted" in verdict


def test_a_refusal_by_kedas_webhook_is_ready() -> None:
    denied = ('Error from server (Forbidden): admission webhook "vscaledobject.kb.io" denied the request: '
              'scaledobject name "gpuaas-..." is 73 characters long; must be no more than 63 characters')
    assert stack.keda_webhooks_answer(_kubectl(1, stderr=denied)) is None


def test_another_refusal_is_not_ready() -> None:
    verdict = stack.keda_webhooks_answer(_kubectl(1, stderr="The connection to the server was refused"))
    assert verdict is not None and "refused" in verdict


def test_the_probe_object_is_refused_only_by_the_webhook() -> None:
    probe = stack.KEDA_WEBHOOK_PROBE
    assert probe["kind"] == "ScaledObject" and len(probe["metadata"]["name"]) > 63
    assert len(probe["metadata"]["name"]) <= 253  # a valid object name: the CRD schema admits it
    spec = probe["spec"]
    assert spec.get("minReplicaCount", 0) <= spec.get("maxReplicaCount", 100)  # no CEL rule refuses it first
