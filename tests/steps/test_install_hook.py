"""The chart's install hook (steps/install_hook.py) against an API server over real HTTP: each CronWorkflow is
annotated, so updated, once its WorkflowTemplate exists and has settled; what is missing is named."""

from __future__ import annotations

import pytest

from engine.apiserver import ApiServer
from steps import install_hook
from steps.gateways import resources
from steps.gateways.kubernetes import KubernetesGateway
from workflows import cron_workflows, rendered

NAMESPACE = "gpuaas"


def _seed(api: ApiServer, template: bool = True) -> None:
    (cron,) = cron_workflows().values()
    api.store.create(resources.CRON_WORKFLOW, {**cron, "metadata": {**cron["metadata"], "namespace": NAMESPACE}},
                     NAMESPACE)
    if template:
        sweep = rendered()["gpuaas-sweep"]
        api.store.create(resources.WORKFLOW_TEMPLATE, {**sweep, "metadata": {**sweep["metadata"], "namespace": NAMESPACE}},
                         NAMESPACE)


def test_the_cronworkflow_is_updated_with_its_templates_version_after_the_template_settled(api: ApiServer) -> None:
    _seed(api)
    gateway = KubernetesGateway(url=api.url)
    before = gateway.get(resources.CRON_WORKFLOW, "gpuaas-sweep", NAMESPACE)
    template = gateway.get(resources.WORKFLOW_TEMPLATE, "gpuaas-sweep", NAMESPACE)
    slept: list[float] = []
    line = install_hook.revalidate(gateway, NAMESPACE, "gpuaas-sweep", sleep=slept.append)
    after = gateway.get(resources.CRON_WORKFLOW, "gpuaas-sweep", NAMESPACE)
    assert after["metadata"]["annotations"][install_hook.TEMPLATE_VERSION] == template["metadata"]["resourceVersion"]
    assert after["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"], "no update: no validation"
    assert after["spec"] == before["spec"]
    # a template created just now: the hook waited until it was SETTLE_S old (creationTimestamp has whole seconds)
    assert len(slept) == 1 and 0 < slept[0] <= install_hook.SETTLE_S, slept
    assert "gpuaas-sweep" in line and template["metadata"]["resourceVersion"] in line

    # Every run is an update, even with the template unchanged (a CronWorkflow left rejected is looked at again).
    install_hook.revalidate(gateway, NAMESPACE, "gpuaas-sweep", sleep=lambda _: None, settle_s=0)
    again = gateway.get(resources.CRON_WORKFLOW, "gpuaas-sweep", NAMESPACE)
    assert again["metadata"]["resourceVersion"] != after["metadata"]["resourceVersion"]


def test_a_template_that_never_comes_is_named_and_the_hook_fails(api: ApiServer, capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _seed(api, template=False)
    monkeypatch.setenv("GPUAAS_NAMESPACE", NAMESPACE)
    assert install_hook.main(["gpuaas-sweep"], gateway=KubernetesGateway(url=api.url), wait_s=0.0) == 1
    error = capsys.readouterr().err
    assert "expected WorkflowTemplate gpuaas/gpuaas-sweep (CronWorkflow gpuaas-sweep runs it)" in error, error
    cron = KubernetesGateway(url=api.url).get(resources.CRON_WORKFLOW, "gpuaas-sweep", NAMESPACE)
    assert install_hook.TEMPLATE_VERSION not in (cron["metadata"].get("annotations") or {})


def test_the_command_line_needs_the_pods_namespace_and_the_cronworkflows(
        api: ApiServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUAAS_NAMESPACE", raising=False)
    assert install_hook.main(["gpuaas-sweep"]) == 2
    assert "usage: GPUAAS_NAMESPACE=NAMESPACE python -m steps.install_hook" in capsys.readouterr().err
    monkeypatch.setenv("GPUAAS_NAMESPACE", NAMESPACE)
    assert install_hook.main([]) == 2
    _seed(api)
    # GPUAAS_KUBE_URL (set by the fixture) is where the gateway goes, as in a step
    assert install_hook.main(["gpuaas-sweep"]) == 0
    assert "CronWorkflow gpuaas/gpuaas-sweep: annotated" in capsys.readouterr().out
