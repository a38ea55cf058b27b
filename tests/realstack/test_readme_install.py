"""The README's install section, followed as written against `gpuaas cluster up`.

The commands of the README's install block (the `bash` block after "On a cluster with Argo
Workflows, ...") run in bash, one line at a time, from the repository root, with the kubectl built
from the pinned Kubernetes module first on PATH and the admin kubeconfig `gpuaas cluster up` printed
as KUBECONFIG: what a user does after `export KUBECONFIG=...`. The overlay the README names is
applied, and so is the one its comment offers instead. Then `kubectl get clusterqueues,workloads -A`
works, and the product's objects are in namespace gpuaas.

A `kubectl create` of an object that already exists (this session's other tests made namespace
gpuaas) counts as done: on a fresh cluster it creates it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import yaml

from gpuaas.cluster.binaries import program
from tests.support.real_cluster import RealCluster

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
INTRO = "On a cluster with Argo Workflows"


def install_commands() -> list[str]:
    """The command lines of the README's install block (comments kept: bash ignores them)."""
    text = README.read_text()
    start = text.index(INTRO)
    block = re.search(r"```bash\n(.*?)```", text[start:], re.DOTALL)
    assert block, f"expected a ```bash block after {INTRO!r} in README.md"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _platform_namespaces(env: dict[str, str], *overlays: str) -> None:
    """The namespaces the overlays write into that the platform brings (OpenShift's openshift-keda and
    openshift-machine-api), made here as the platform would have them: a plain `cluster up` has none, and the
    README's block does not create what is the platform's. Namespaces an overlay creates itself, and gpuaas (the
    block's first line), are left to the block."""
    wanted: set[str] = set()
    for path in overlays:
        built = _run(f"kubectl kustomize {path}", env)
        assert built.returncode == 0, built.stderr
        objects = [o for o in yaml.load_all(built.stdout, Loader=yaml.BaseLoader) if o]  # `matchType: =` is a tag to safe_load
        created = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
        wanted |= {o["metadata"]["namespace"] for o in objects if o["metadata"].get("namespace")} - created
    for namespace in sorted(wanted - {"gpuaas"}):
        made = _run(f"kubectl create namespace {namespace}", env)
        assert made.returncode == 0 or "AlreadyExists" in made.stderr, made.stderr


def _run(line: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", line], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=180, check=False)


def test_the_readme_install_section_works_against_gpuaas_cluster_up(real_cluster: RealCluster) -> None:
    assert shutil.which("openssl"), "the README's install block runs `openssl rand`: install openssl"
    commands = install_commands()
    applies = [line for line in commands if "kubectl apply -k manifests/overlays/" in line]
    assert applies, f"expected a `kubectl apply -k manifests/overlays/...` in the README's install block: {commands}"
    alternative = re.search(r"#\s*or:\s*(manifests/overlays/\S+)", applies[0])
    assert alternative, f"expected the README to name the other overlay in a comment: {applies[0]}"
    kubectl_dir = str(program("kubernetes", "kubectl").parent)
    env = {**os.environ, "PATH": f"{kubectl_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "KUBECONFIG": str(real_cluster.kubeconfig)}
    overlay = re.search(r"manifests/overlays/\S+", applies[0].split("#")[0])
    assert overlay
    _platform_namespaces(env, overlay.group(0), alternative.group(1))
    lines = [*commands, applies[0].split("#")[0].replace(overlay.group(0), alternative.group(1))]
    for line in lines:
        done = _run(line, env)
        exists = "AlreadyExists" in done.stderr or "already exists" in done.stderr
        if done.returncode != 0 and line.lstrip().startswith("kubectl") and " create " in line and exists:
            continue
        assert done.returncode == 0, f"README install step failed ({done.returncode}): {line}\n{done.stderr[-2000:]}"

    listed = _run("kubectl get clusterqueues,workloads -A", env)
    assert listed.returncode == 0 and "error" not in listed.stderr.lower(), listed.stderr
    product = _run("kubectl -n gpuaas get sensors,eventsources,workflowtemplates,serviceaccounts -o name", env)
    assert product.returncode == 0, product.stderr
    names = set(product.stdout.split())
    for expected in ("sensor.argoproj.io/gpuaas-on-admitted", "eventsource.argoproj.io/gpuaas-workloads",
                     "workflowtemplate.argoproj.io/gpuaas-release-workers", "serviceaccount/gpuaas-steps"):
        assert expected in names, f"expected {expected} after the README's install; found {sorted(names)}"
