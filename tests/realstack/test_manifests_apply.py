"""Every rendered manifest, judged by the real apiserver, CRD schemas and admission webhooks.

`manifests/base` and every overlay is rendered with the kustomize built into the pinned kubectl
(what `kubectl apply -k` runs), then applied server-side: first with dryRun=All (nothing stored,
every admission step run), then for real. A rejection here is a defect of the rendered YAML (or of
the Python that renders it), not of the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuaas.manifests.validation import YamlLoader
from tests.support.real_cluster import RealCluster

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
def test_rendered_manifests_pass_a_server_side_dry_run_then_apply(real_cluster: RealCluster, tree: str) -> None:
    objects = _render(real_cluster, tree)
    assert objects, f"kubectl kustomize {tree} rendered nothing"
    _namespaces(real_cluster, objects)
    text = yaml.safe_dump_all(objects, sort_keys=False)
    for dry_run in (["--dry-run=server"], []):
        done = real_cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=gpuaas-tests",
                                    *dry_run, "-f", "-", input_text=text, check=False)
        assert done.returncode == 0, (f"the real apiserver rejected manifests/{tree} "
                                      f"({'dry run' if dry_run else 'apply'}):\n{done.stderr}")
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
