"""Every rendered manifest, judged by the real apiserver, CRD schemas and admission webhooks, and the
Argo Events objects by Argo Events' own validation, which the apiserver does not run.

`manifests/base` and every overlay is rendered with the kustomize built into the pinned kubectl
(what `kubectl apply -k` runs), then applied server-side: first with dryRun=All (nothing stored,
every admission step run), then for real. A rejection here is a defect of the rendered YAML (or of
the Python that renders it), not of the test.

What judges what: Kubernetes' own kinds, Kueue's and KEDA's objects (their CRD schemas and admission
webhooks, which run here), the Prometheus Operator's and Argo Workflows' (their CRDs' full schemas) are
judged by the apply. Argo Events v1.9.11's CRDs are not: their `spec` is `x-kubernetes-preserve-unknown-fields`
with no schema, and no Argo Events admission webhook runs here (upstream ships it apart, as
`manifests/install-validating-webhook.yaml`; the plain install has none), so
the apiserver stores any spec. Its controller validates each EventSource and Sensor when it reconciles it
(`ValidateEventSource`, `ValidateSensor`); the same code is `argo-events lint --strict` of the pinned module
(cmd/commands/lint.go, built by `gpuaas cluster build`), which this test runs on the very objects it applied.
`test_the_apiserver_stores_a_sensor_argo_events_rejects` shows the gap: a Sensor whose trigger has no
dependency passes the server-side dry run and fails Argo Events' validation.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuaas.manifests.validation import YamlLoader
from tests.support.real_cluster import RealCluster
from tests.test_upstream_lint import EVENT_KINDS, _events_verdicts, argo_events_lint

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
TREES = ["base", "overlays/kubernetes", "overlays/kube-prometheus-stack", "overlays/openshift"]


def _render(real_cluster: RealCluster, tree: str) -> list[dict]:
    done = real_cluster.kubectl("kustomize", str(MANIFESTS / tree))
    return [doc for doc in yaml.load_all(done.stdout, Loader=YamlLoader) if doc]


def _namespaces(real_cluster: RealCluster, objects: list[dict]) -> None:
    """Namespaces first, for real: a dry run of a Namespace does not create it for the objects in it."""
    namespaces = [o for o in objects if o["kind"] == "Namespace"]
    wanted = {o["metadata"].get("namespace") for o in objects} - {None} - {n["metadata"]["name"] for n in namespaces}
    namespaces += [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in sorted(wanted)]
    real_cluster.kubectl("apply", "--server-side", "--field-manager=gpuaas-tests", "-f", "-",
                         input_text=yaml.safe_dump_all(namespaces))


@pytest.mark.parametrize("tree", TREES)
def test_rendered_manifests_pass_a_server_side_dry_run_then_apply(real_cluster: RealCluster, tree: str,
                                                                 tmp_path: Path) -> None:
    objects = _render(real_cluster, tree)
    assert objects, f"kubectl kustomize {tree} rendered nothing"
    _namespaces(real_cluster, objects)
    text = yaml.safe_dump_all(objects, sort_keys=False)
    for dry_run in (["--dry-run=server"], []):
        done = real_cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=gpuaas-tests",
                                    *dry_run, "-f", "-", input_text=text, check=False)
        assert done.returncode == 0, (f"the real apiserver rejected manifests/{tree} "
                                      f"({'dry run' if dry_run else 'apply'}):\n{done.stderr}")
    events = []
    for obj in objects:
        if obj["kind"] in EVENT_KINDS:
            events.append(tmp_path / f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml")
            events[-1].write_text(yaml.safe_dump(obj, sort_keys=False))
    assert {path.name.split("-", 1)[0] for path in events} == {"eventsource", "sensor"}, events
    linted = argo_events_lint(events)
    assert linted.returncode == 0 and _events_verdicts(linted.stdout) == {str(path): "✓" for path in events}, (
        f"Argo Events' validation rejected objects of manifests/{tree}:\n{linted.stdout}{linted.stderr}")
    for obj in objects:
        group = obj["apiVersion"].rpartition("/")[0]
        resource = f"{obj['kind']}.{group}" if group else obj["kind"]
        where = ["-n", obj["metadata"]["namespace"]] if obj["metadata"].get("namespace") else []
        got = real_cluster.kubectl("get", resource, obj["metadata"]["name"], *where, "-o", "name", check=False)
        assert got.returncode == 0, f"expected {resource} {obj['metadata']['name']} stored, found: {got.stderr}"


def test_the_example_kustomize_site_passes_a_server_side_dry_run(real_cluster: RealCluster) -> None:
    """manifests/examples/site (examples/values/site.yaml with kustomize's fields and patch files): every
    patched object is still one the real apiserver, the CRD schemas and the admission webhooks accept.
    A dry run only: its ClusterRoleBindings name the site's namespace and would take the product's grants
    from the other tests."""
    objects = _render(real_cluster, "examples/site")
    assert objects, "kubectl kustomize examples/site rendered nothing"
    _namespaces(real_cluster, objects)
    done = real_cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=gpuaas-tests",
                                "--dry-run=server", "-f", "-", input_text=yaml.safe_dump_all(objects, sort_keys=False),
                                check=False)
    assert done.returncode == 0, f"the real apiserver rejected manifests/examples/site (dry run):\n{done.stderr}"


def test_the_apiserver_stores_a_sensor_argo_events_rejects(real_cluster: RealCluster, tmp_path: Path) -> None:
    """Why the Argo Events objects need their own judge: a Sensor whose trigger names no dependency is taken by
    the real apiserver (its CRD checks no `spec`) and refused by Argo Events' own validation."""
    objects = _render(real_cluster, "base")
    _namespaces(real_cluster, objects)
    sensor = next(o for o in objects if o["kind"] == "Sensor")
    sensor["spec"]["dependencies"] = []
    sensor["metadata"]["name"] = "gpuaas-tests-broken"
    done = real_cluster.kubectl("apply", "--server-side", "--dry-run=server", "--field-manager=gpuaas-tests", "-f",
                                "-", input_text=yaml.safe_dump(sensor), check=False)
    assert done.returncode == 0, f"expected the apiserver to store any Sensor spec, it refused: {done.stderr}"
    path = tmp_path / "sensor-broken.yaml"
    path.write_text(yaml.safe_dump(sensor, sort_keys=False))
    linted = argo_events_lint([path])
    assert linted.returncode != 0 and _events_verdicts(linted.stdout) == {str(path): "✗"}, linted.stdout
