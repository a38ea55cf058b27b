"""The helm built from the pinned module (stack/helm), for the chart's tests.

`make cluster-build` builds it (`make test` runs that first). Missing, it FAILS the calling test in one
line that says how to build it: a test never skips.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from gpuaas.manifests.validation import YamlLoader
from tests.support.kubectl import pinned_program

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpuaas"


def pinned_helm() -> Path:
    return pinned_program("helm", "helm", "helm")


def helm(*args: str, home: Path | None = None, kubeconfig: Path | None = None,
         timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    """`helm ARGS` with its caches and config in `home` (never the user's ~/.config/helm)."""
    env = {**os.environ}
    if home is not None:
        env.update(HELM_CACHE_HOME=str(home / "cache"), HELM_CONFIG_HOME=str(home / "config"),
                   HELM_DATA_HOME=str(home / "data"))
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return subprocess.run([str(pinned_helm()), *args], capture_output=True, text=True, env=env, timeout=timeout,
                          check=False)


def template(values_files: list[Path], namespace: str, home: Path, *sets: str, hooks: bool = True) -> list[dict]:
    """`helm template gpuaas charts/gpuaas -n NAMESPACE -f ...` as objects (without `hooks`: `--no-hooks`, what a
    kustomize build of the same values holds); AssertionError with helm's words."""
    args = ["template", "gpuaas", str(CHART), "--namespace", namespace, *(() if hooks else ("--no-hooks",))]
    for path in values_files:
        args += ["-f", str(path)]
    for item in sets:
        args += ["--set", item]
    done = helm(*args, home=home)
    assert done.returncode == 0, f"helm template failed ({done.returncode}): {done.stderr.strip()}"
    return [doc for doc in yaml.load_all(done.stdout, Loader=YamlLoader) if doc]
