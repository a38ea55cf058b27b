"""The product installed on the real Argo stack (`gpuaas cluster up --with events`), listening.

Used by `gpuaas demo --stack real`, the real-stack tests (tests/realstack/argo_product.py) and
benchmarks/real_loop.py (`python -m gpuaas.cluster.install`) alike:
the product for this stack's values (gpuaas.cluster.product: its EventBus, step image, Prometheus), the
example tenants, and the EventSource and Sensor pods not just Running but listening. Idempotent
(server-side apply): a second install costs a few seconds.

Why "listening" and not "Running": the EventSource's informer lists after leader election and the
EventBus connection, and a Sensor only gets what is published after it subscribed. A Job admitted
before then comes to the informer already admitted (an ADD), and no Sensor fires (seen: a run whose
Job was admitted 1 s before the informer started). Upstream's log lines mark both moments.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from gpuaas.cluster.binaries import program
from gpuaas.cluster.product import release_objects, stack_objects
from steps.install_hook import TEMPLATE_VERSION

PRODUCT_NAMESPACE = "gpuaas"
EXAMPLE_TENANTS = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "tenants"
FIELD_MANAGER = "gpuaas-install"

LISTENING = (("eventsource-name=gpuaas-workloads", "listening to resource events"),
             ("sensor-name=gpuaas-on-admitted", "started subscribing to events"),
             ("sensor-name=gpuaas-on-finished", "started subscribing to events"))
"""Upstream's log lines that mark an EventSource's informer running and a Sensor subscribed."""

IDLE_LISTENING = (*LISTENING,
                  ("eventsource-name=gpuaas-alertmanager", "listening to payloads for the route"),
                  ("sensor-name=gpuaas-on-idle", "started subscribing to events"))
"""With the idle path: the webhook EventSource (argo-events v1.9.11 webhook.go) and the on-idle Sensor."""


class InstallError(RuntimeError):
    """The product did not come up listening on the stack: says what was awaited and what was seen."""


def kubectl(kubeconfig: Path, *args: str, input_text: str | None = None, check: bool = True,
            timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """The kubectl built from the pinned Kubernetes module, with this kubeconfig."""
    done = subprocess.run([str(program("kubernetes", "kubectl")), f"--kubeconfig={kubeconfig}", *args],
                          input=input_text, capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise InstallError(f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def apply(kubeconfig: Path, objects: list[dict[str, Any]], field_manager: str = FIELD_MANAGER) -> None:
    """Server-side apply, Namespaces first (the rest lives in them)."""
    namespaces = [o for o in objects if o["kind"] == "Namespace"]
    rest = [o for o in objects if o["kind"] != "Namespace"]
    for batch in (namespaces, rest):
        if batch:
            kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", f"--field-manager={field_manager}",
                    "-f", "-", input_text=yaml.safe_dump_all(batch, sort_keys=False))


def wait_until(check: Callable[[], Any], *, timeout_s: float, what: str, poll_s: float = 0.5) -> Any:
    """Poll `check` until it returns a truthy value (returned); InstallError with the last value seen."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(poll_s)
    raise InstallError(f"expected {what} within {timeout_s:g}s; last seen: {last!r}")


def running_pod(core: Any, label: str) -> Any:
    """The product's pod with this label, Running with every container ready (or None)."""
    for pod in core.list_namespaced_pod(PRODUCT_NAMESPACE, label_selector=label).items:
        statuses = pod.status.container_statuses or []
        if pod.status.phase == "Running" and statuses and all(s.ready for s in statuses):
            return pod
    return None


def logs(core: Any, label: str, tail_lines: int | None = 40) -> str:
    from kubernetes import client

    out = []
    for pod in core.list_namespaced_pod(PRODUCT_NAMESPACE, label_selector=label).items:
        try:
            out.append(f"--- {pod.metadata.name}\n" + core.read_namespaced_pod_log(
                pod.metadata.name, PRODUCT_NAMESPACE, tail_lines=tail_lines))
        except client.ApiException as error:
            out.append(f"--- {pod.metadata.name}: no log ({error.status})")
    return "\n".join(out)


def install(kubeconfig: Path, api_client: Any, listening: tuple[tuple[str, str], ...] = LISTENING,
            field_manager: str = FIELD_MANAGER, base: Path | None = None) -> None:
    """The product and the example tenants on the cluster, with the named pods listening, then the CronWorkflows
    (apply_crons). `base`: another release's rendered manifests/base instead of this stack's values
    (benchmarks/scale.py's "before")."""
    objects = release_objects(program("kubernetes", "kubectl"), base) if base else stack_objects()
    crons = [o for o in objects if o["kind"] == "CronWorkflow"]
    apply(kubeconfig, [o for o in objects if o["kind"] != "CronWorkflow"], field_manager)
    # --force-conflicts: on a reused cluster the product's gpuaas-provision-quota (run by the capacity-clock
    # EventSource) has since set the ClusterQueues' quotas as field manager "gpuaas".
    kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", f"--field-manager={field_manager}", "-k",
            str(EXAMPLE_TENANTS))
    wait_listening(api_client, listening)
    apply_crons(kubeconfig, api_client, crons, field_manager)


def wait_listening(api_client: Any, listening: tuple[tuple[str, str], ...] = LISTENING) -> None:
    """The named EventSource and Sensor pods Running on the real node and logging that they listen."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    for label, _ in listening:
        try:
            pod = wait_until(lambda label=label: running_pod(core, label), timeout_s=240,
                             what=f"the pod with {label} Running and ready")
        except InstallError as error:
            raise InstallError(f"{error}\n{logs(core, label)}") from None
        if pod.spec.node_name != "gpuaas-node":
            raise InstallError(f"expected the pod with {label} on the real node gpuaas-node, found it on "
                               f"{pod.spec.node_name} (KWOK would report it Running without running it)")
    for label, line in listening:
        try:
            wait_until(lambda label=label, line=line: line in logs(core, label, tail_lines=None), timeout_s=120,
                       what=f"the pod with {label} logging {line!r}")
        except InstallError as error:
            raise InstallError(f"{error}\n{logs(core, label)}") from None


def apply_crons(kubeconfig: Path, api_client: Any, crons: list[dict[str, Any]], field_manager: str) -> None:
    """The CronWorkflows, last and annotated with their WorkflowTemplate's resourceVersion.

    argo-workflows v4.0.5 workflow/cron/controller.go validates a CronWorkflow against the controller's
    WorkflowTemplate informer when the CronWorkflow is added or updated; one applied in the same batch
    as its template is rejected ("WorkflowTemplate Informer cannot find WorkflowTemplate"), the error is
    only logged, and the CronWorkflow is not looked at again until it changes or the informer's 20-minute
    resync (seen: no sweep for the first minutes of a benchmark). Applied after the listening wait, the
    template has long been in the informer; the annotation changes whenever the template did, so a
    re-install re-validates a CronWorkflow an earlier install left rejected. (The same annotation is what the
    chart's install hook, steps/install_hook.py, writes after `helm install` and `helm upgrade`.)"""
    if not crons:
        return
    from kubernetes import client

    custom = client.CustomObjectsApi(api_client)
    for cron in crons:
        ref = cron["spec"]["workflowSpec"].get("workflowTemplateRef", {}).get("name")
        if ref:
            template = custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", cron["metadata"].get("namespace", PRODUCT_NAMESPACE),
                                                           "workflowtemplates", ref)
            cron["metadata"].setdefault("annotations", {})[TEMPLATE_VERSION] = \
                template["metadata"]["resourceVersion"]
    apply(kubeconfig, crons, field_manager)


def main(argv: list[str] | None = None) -> int:
    """`python -m gpuaas.cluster.install --kubeconfig ADMIN [--idle]`: for scripts outside the package
    (benchmarks/real_loop.py), which may not import gpuaas (ARCHITECTURE.md)."""
    import argparse
    import sys

    from kubernetes import config

    parser = argparse.ArgumentParser(prog="python -m gpuaas.cluster.install", description=install.__doc__)
    parser.add_argument("--kubeconfig", type=Path, required=True, help="the cluster's admin kubeconfig")
    parser.add_argument("--idle", action="store_true", help="also wait for the webhook EventSource and on-idle")
    parser.add_argument("--base", type=Path, help="install this manifests/base instead of the checkout's")
    args = parser.parse_args(argv)
    try:
        install(args.kubeconfig, config.new_client_from_config(str(args.kubeconfig)),
                IDLE_LISTENING if args.idle else LISTENING, base=args.base)
    except InstallError as error:
        print(f"install: {error}", file=sys.stderr)
        return 1
    print("the product is installed and its EventSource and Sensor pods listen")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
