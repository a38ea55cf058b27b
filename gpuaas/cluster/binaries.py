"""The real components' programs: built from the Go modules pinned under `stack/`, found in the cache.

Why a driver rather than a Makefile loop: a user runs `gpuaas cluster build` on a fresh machine and
needs to see which component is compiling (Kubernetes alone takes minutes on two cores) and how long
each took; a second run must be a cache hit. Each `stack/<component>/go.mod` names its programs
with `tool` lines; `go install tool` in that folder builds exactly those, with the same
`-trimpath -ldflags` every time so the Go build cache (GOCACHE) is reused, into
`<cache>/bin/<component>/`. The version strings the programs report (`kube-apiserver --version`,
Kueue's and KEDA's start-up log) are set from the pinned versions with `-X`, as upstream's release
builds do.

The cache folder is `$GPUAAS_STACK_CACHE`, else `<checkout>/.stack-cache` (git-ignored).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuaas.upstream import STACK_DIR, _directives, pins

CACHE_ENV = "GPUAAS_STACK_CACHE"

RENAMED: dict[tuple[str, str], str] = {
    ("etcd", "server"): "etcd",          # go.etcd.io/etcd/server/v3 is the etcd server's main package
    ("argo-events", "cmd"): "argo-events",  # github.com/argoproj/argo-events/cmd is its one binary
}
"""Programs whose Go package name is not the name users know them by: (component, built) -> name."""


GENERATED_FILES: dict[str, dict[str, dict[str, str]]] = {
    # component -> module -> {path in the module: content}
    "argo-workflows": {"github.com/argoproj/argo-workflows/v4": {
        # `go:embed dist/app` in ui/embed.go: the UI is built by npm and is not in the module zip.
        # Upstream's Makefile writes this same placeholder when built with STATIC_FILES=false.
        "ui/dist/app/index.html": "Built without static files\n"}},
}
"""Files a module's build needs that its published zip lacks (upstream generates them before `go build`)."""


UNBUILDABLE: dict[str, str] = {
    "github.com/argoproj/argo-workflows/v4/cmd/argoexec":
        "upstream's workflow/executor/osspecific/signal_linux.go is a symlink, which module zips omit, so "
        "argoexec does not compile for Linux from the module as is; gpuaas.cluster.toolchain builds it "
        "(static, from a copy with the link restored) for the step pods' image",
}
"""Tools a go.mod pins that cannot be built from the published module, and why (skipped, reported)."""


class BuildFailed(RuntimeError):
    """`go install` failed for one component; the message carries its last output lines."""


def _built_name(tool: str) -> str:
    """The file `go install` writes for a package path: its last element, or the one before a `/vN` suffix."""
    parts = tool.split("/")
    return parts[-2] if re.fullmatch(r"v\d+", parts[-1]) and len(parts) > 1 else parts[-1]


def cache_dir() -> Path:
    """Where binaries (and cluster state, by default) live: `$GPUAAS_STACK_CACHE` or `.stack-cache`."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser().resolve() if configured else STACK_DIR.parent / ".stack-cache"


def bin_dir(component: str) -> Path:
    return cache_dir() / "bin" / component


@dataclass(frozen=True)
class Component:
    """One `stack/<name>/go.mod` that builds programs."""

    name: str
    gomod_dir: Path
    tools: tuple[str, ...]

    @property
    def programs(self) -> tuple[str, ...]:
        """The names the built programs are known by (after RENAMED); UNBUILDABLE tools left out."""
        return tuple(RENAMED.get((self.name, _built_name(tool)), _built_name(tool)) for tool in self.tools
                     if tool not in UNBUILDABLE)


def components() -> list[Component]:
    """Every pinned module folder with `tool` lines, in build order (smallest first, Kubernetes last)."""
    found = []
    for gomod in sorted(STACK_DIR.glob("*/go.mod")):
        tools = tuple(t.strip() for t in _directives(gomod, "tool") if t.strip())
        if tools:
            found.append(Component(gomod.parent.name, gomod.parent, tools))
    order = {"etcd": 0, "nats": 1, "kwok": 2, "kueue": 3, "keda": 4, "argo-events": 5, "argo-workflows": 6,
             "kubernetes": 7}
    return sorted(found, key=lambda c: (order.get(c.name, 5), c.name))


def _version(module: str) -> str:
    return pins()[module].version


def _module_time(component: Component, module: str) -> str:
    """The pinned module's commit time (RFC 3339), a reproducible `buildDate` for Kubernetes."""
    done = subprocess.run(["go", "list", "-m", "-f", "{{.Time.UTC.Format \"2006-01-02T15:04:05Z\"}}", module],
                          cwd=component.gomod_dir, capture_output=True, text=True, check=False, timeout=120)
    return done.stdout.strip() or "1970-01-01T00:00:00Z"


def ldflags(component: Component) -> str:
    """`-s -w` plus the version stamps upstream's own release builds set (see the module docstring)."""
    stamps: list[str] = []
    if component.name == "kubernetes":
        version = _version("k8s.io/kubernetes")
        major, minor = version.lstrip("v").split(".")[:2]
        built = _module_time(component, "k8s.io/kubernetes")
        for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            stamps += [f"-X {package}.gitVersion={version}", f"-X {package}.gitMajor={major}",
                       f"-X {package}.gitMinor={minor}", f"-X {package}.gitTreeState=clean",
                       f"-X {package}.buildDate={built}"]
    elif component.name == "kueue":
        stamps.append(f"-X sigs.k8s.io/kueue/pkg/version.GitVersion={_version('sigs.k8s.io/kueue')}")
    elif component.name == "keda":
        stamps.append(f"-X github.com/kedacore/keda/v2/version.Version={_version('github.com/kedacore/keda/v2')}")
    elif component.name == "argo-workflows":
        version = _version("github.com/argoproj/argo-workflows/v4")
        stamps.append(f"-X github.com/argoproj/argo-workflows/v4.version={version}")
    elif component.name == "argo-events":
        stamps.append(f"-X github.com/argoproj/argo-events.version={_version('github.com/argoproj/argo-events')}")
    return " ".join(["-s", "-w", *stamps])


@dataclass(frozen=True)
class BuildResult:
    component: str
    seconds: float
    programs: tuple[str, ...]
    cached: bool
    """True when every program was already up to date (the installed bytes did not change)."""


def _digests(component: Component) -> dict[str, str]:
    """Content digests of the installed programs: `go install` rewrites an up-to-date binary from the
    build cache (so its mtime changes), but its bytes are the same."""
    out = {}
    for tool in component.tools:
        if tool in UNBUILDABLE:
            continue
        path = bin_dir(component.name) / _built_name(tool)
        out[tool] = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""
    return out


def _modfile(component: Component, go: str) -> list[str]:
    """`-modfile=` flags that build GENERATED_FILES' modules from a writable copy, else nothing.

    The module cache is read-only and `-overlay` may not replace files under it, so the module is
    copied once into the cache (`<cache>/src/<module>@<version>`), the missing files are written
    there, and a copy of the component's go.mod gains a `replace` to it; the committed go.mod and
    go.sum stay as they are.
    """
    generated = GENERATED_FILES.get(component.name)
    if not generated:
        return []
    build_dir = cache_dir() / "build" / component.name
    build_dir.mkdir(parents=True, exist_ok=True)
    replaces = []
    for module, files in generated.items():
        version = pins()[module].version
        source = cache_dir() / "src" / f"{module.replace('/', '_')}@{version}"
        if not source.is_dir():
            done = subprocess.run([go, "mod", "download", "-json", module], cwd=component.gomod_dir, capture_output=True,
                                  text=True, check=False, env={**os.environ, "GOFLAGS": "-mod=readonly"})
            if done.returncode != 0:
                raise BuildFailed(f"expected `go mod download {module}` to succeed, it failed: {done.stderr.strip()}")
            partial = source.with_name(source.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            shutil.copytree(json.loads(done.stdout)["Dir"], partial)
            for path in partial.rglob("*"):
                path.chmod(path.stat().st_mode | 0o200)  # the module cache's files are read-only
            partial.rename(source)
        for path, content in files.items():
            target = source / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists() or target.read_text() != content:
                target.write_text(content)
        replaces.append(f"replace {module} => {source}")
    modfile = build_dir / "go.mod"
    text = (component.gomod_dir / "go.mod").read_text() + "\n" + "\n".join(replaces) + "\n"
    if not modfile.exists() or modfile.read_text() != text:
        modfile.write_text(text)
    shutil.copyfile(component.gomod_dir / "go.sum", build_dir / "go.sum")
    return [f"-modfile={modfile}"]


def build(component: Component, go: str | None = None) -> BuildResult:
    """`go install -trimpath -ldflags=... tool` in the component's folder, into its bin folder."""
    go = go or shutil.which("go")
    if go is None:
        raise BuildFailed("expected the `go` command (Go 1.26+) on PATH to build the real components, found "
                          "none; install Go (https://go.dev/doc/install) and run `gpuaas cluster build` again")
    target = bin_dir(component.name)
    target.mkdir(parents=True, exist_ok=True)
    before = _digests(component)
    started = time.monotonic()
    buildable = [tool for tool in component.tools if tool not in UNBUILDABLE]
    done = subprocess.run([go, "install", *_modfile(component, go), "-trimpath", f"-ldflags={ldflags(component)}",
                           *buildable],
                          cwd=component.gomod_dir, env={**os.environ, "GOBIN": str(target), "GOFLAGS": "-mod=readonly"},
                          capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-20:])
        raise BuildFailed(f"expected `go install {' '.join(buildable)}` in stack/{component.name} to succeed, it exited with "
                          f"{done.returncode}:\n{tail}\ncheck the Go module proxy (go env GOPROXY) and disk space")
    after = _digests(component)
    for (comp, built), name in RENAMED.items():
        if comp == component.name and (target / built).exists():
            link = target / name
            link.unlink(missing_ok=True)
            os.link(target / built, link)  # a hard link: go install keeps finding `built` up to date
    return BuildResult(component.name, seconds, component.programs, cached=before == after)


def build_all(selected: list[str] | None = None,
              progress: Callable[[str], None] = lambda line: None) -> list[BuildResult]:
    """Build every component (or the `selected` ones), reporting progress before and after each."""
    chosen = [c for c in components() if not selected or c.name in selected]
    unknown = set(selected or ()) - {c.name for c in components()}
    if unknown:
        raise BuildFailed(f"expected components among {[c.name for c in components()]}, found "
                          f"{sorted(unknown)}; pick names of folders under stack/ that have tool lines")
    results = []
    for index, component in enumerate(chosen, 1):
        progress(f"[{index}/{len(chosen)}] {component.name}: go install {', '.join(component.programs)} ...")
        result = build(component)
        results.append(result)
        progress(f"[{index}/{len(chosen)}] {component.name}: {'up to date' if result.cached else 'built'} "
                 f"in {result.seconds:.1f}s")
        for tool in component.tools:
            if tool in UNBUILDABLE:
                progress(f"[{index}/{len(chosen)}] {component.name}: skipped {_built_name(tool)}: {UNBUILDABLE[tool]}")
    return results


def program(component: str, name: str) -> Path:
    """The path of one built program, or an error that says how to build it."""
    path = bin_dir(component) / name
    if not path.is_file():
        raise BuildFailed(f"expected {name} (stack/{component}) at {path}, found no such file; run "
                          f"`gpuaas cluster build` (or `make cluster-build`), or set {CACHE_ENV} to a cache "
                          "that has it")
    return path
