"""The real components' programs: built from the Go modules pinned under `stack/`, found in the cache.

Why a driver rather than a Makefile loop: a user runs `gpuaas cluster build` on a fresh machine and
needs to see which component is compiling (Kubernetes alone takes minutes on two cores) and how long
each took; a second run must be a cache hit. Each `stack/<component>/go.mod` names its programs
with `tool` lines; `go install tool` in that folder builds exactly those, with the same
`-trimpath -ldflags` every time so the Go build cache (GOCACHE) is reused, into
`<cache>/bin/<component>/`. The version strings the programs report (`kube-apiserver --version`,
Kueue's and KEDA's start-up log) are set from the pinned versions with `-X`, as upstream's release
builds do. Argo's programs are static (CGO off, as upstream builds them), argoexec from a module
copy with upstream's one symlink put back, and `argo server` with the UI embedded when it was built
(`gpuaas cluster build --argo-ui`, gpuaas.cluster.argo_ui), else upstream's placeholder page: see SourcePatch. This is the only build path: the node's kubelet and the
images' argoexec come from here too.

The cache folder is `$GPUAAS_STACK_CACHE`, else `<checkout>/.stack-cache` (git-ignored).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from gpuaas.cluster import argo_ui
from gpuaas.invocation import command
from gpuaas.upstream import STACK_DIR, _directives, pins

CACHE_ENV = "GPUAAS_STACK_CACHE"
Progress = Callable[[str], None]

RENAMED: dict[tuple[str, str], str] = {
    ("etcd", "server"): "etcd",          # go.etcd.io/etcd/server/v3 is the etcd server's main package
    ("argo-events", "cmd"): "argo-events",  # github.com/argoproj/argo-events/cmd is its one binary
}
"""Programs whose Go package name is not the name users know them by: (component, built) -> name."""


@dataclass(frozen=True)
class SourcePatch:
    """What a module's published zip lacks that upstream's own build has, put back in a writable copy.

    The module cache is read-only and `go build -overlay` refuses files under it, so such a module
    is copied once into `<cache>/src/<module>@<version>`, patched there, and built through a copy of
    the component's go.mod with a `replace` to it; every other dependency stays the pinned,
    checksummed version, and the committed go.mod and go.sum stay as they are.
    """

    module: str
    symlinks: tuple[tuple[str, str], ...] = ()
    """Files that are symbolic links upstream: (path, target beside it). Module zips omit symlinks."""
    argo_ui: bool = False
    """`ui/dist/app` for `go:embed`: the UI built from the module's `ui/` on request, else upstream's placeholder."""


SOURCE_PATCHES: dict[str, SourcePatch] = {
    "argo-workflows": SourcePatch(
        "github.com/argoproj/argo-workflows/v4",
        # Upstream's signal_linux.go links to signal_darwin.go (every v4 release); without it argoexec
        # fails on Linux with `undefined: Setpgid` (workflow/executor/osspecific/command_unix.go).
        symlinks=(("workflow/executor/osspecific/signal_linux.go", "signal_darwin.go"),),
        # ui/embed.go embeds dist/app, which upstream's release build makes with yarn before go build.
        argo_ui=True),
}
"""Components whose module needs a patched copy to build as upstream builds it."""


STATIC: frozenset[str] = frozenset({"argo-workflows", "argo-events", "helm"})
"""Built with CGO_ENABLED=0, as upstream's Makefiles build them: argoexec, the argo CLI (in the Sensor
image) and argo-events run in images that have no C library; helm's Makefile builds it so too."""


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


@contextlib.contextmanager
def cache_lock(name: str) -> Iterator[None]:
    """One builder at a time in this cache (`<cache>/<name>.lock`): the real tier's shards each build what
    they need when they start, at the same moment; the first builds, the others then find it built."""
    path = cache_dir() / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


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
        """The names the built programs are known by (after RENAMED)."""
        return tuple(RENAMED.get((self.name, _built_name(tool)), _built_name(tool)) for tool in self.tools)


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
        module = "github.com/argoproj/argo-workflows/v4"
        # No gitCommit: the module zip does not carry it, so `argo version` says v4.0.5+unknown.
        stamps += [f"-X {module}.version={_version(module)}", f"-X {module}.buildDate={_module_time(component, module)}"]
    elif component.name == "argo-events":
        stamps.append(f"-X github.com/argoproj/argo-events.version={_version('github.com/argoproj/argo-events')}")
    elif component.name == "helm":
        # A tagged release build (helm's Makefile with GIT_TAG): the version, no "unreleased" metadata.
        stamps.append(f"-X helm.sh/helm/v4/internal/version.version={_version('helm.sh/helm/v4')}")
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
        path = bin_dir(component.name) / _built_name(tool)
        out[tool] = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""
    return out


def _patched_copy(patch: SourcePatch, component: Component, go: str, progress: Progress, build_ui: bool) -> Path:
    """The writable copy of `patch.module` with its symlinks and generated files put back (see SourcePatch)."""
    version = pins()[patch.module].version
    source = cache_dir() / "src" / f"{patch.module.replace('/', '_')}@{version}"
    if not source.is_dir():
        done = subprocess.run([go, "mod", "download", "-json", patch.module], cwd=component.gomod_dir,
                              capture_output=True, text=True, check=False, env={**os.environ, "GOFLAGS": "-mod=readonly"})
        if done.returncode != 0:
            raise BuildFailed(f"expected `go mod download {patch.module}` to succeed, it failed: {done.stderr.strip()}")
        partial = source.with_name(source.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(json.loads(done.stdout)["Dir"], partial)
        for path in partial.rglob("*"):
            path.chmod(path.stat().st_mode | 0o200)  # the module cache's files are read-only
        partial.rename(source)
    for path, target in patch.symlinks:
        link = source / path
        if not (link.is_symlink() and os.readlink(link) == target):
            link.unlink(missing_ok=True)
            link.symlink_to(target)
    if patch.argo_ui:
        _embed_ui(source, version, progress, build_ui)
    return source


UI_FAILURE = "argo-ui-build-failure.txt"
"""In the cache: why the last `--argo-ui` build failed (the UI test quotes it), until a UI is built."""


def ui_build_failure() -> str | None:
    """Why the last `gpuaas cluster build --argo-ui` of this cache could not build the UI, if it could not."""
    path = cache_dir() / UI_FAILURE
    return path.read_text().strip() if path.is_file() else None


PLACEHOLDER_UI = "Built without static files\n"
"""What upstream's Makefile writes to ui/dist/app/index.html when built with STATIC_FILES=false."""


def _embed_ui(source: Path, version: str, progress: Progress, build_ui: bool) -> None:
    """Put the Argo UI at `ui/dist/app` of the copy for `go:embed`.

    With `build_ui` (`gpuaas cluster build --argo-ui`) the UI is built from the module's `ui/` source
    (gpuaas.cluster.argo_ui: yarn and webpack, many minutes and the npm registry) unless already
    built for this module and lockfile. Without it, a UI built before is used, else upstream's own
    placeholder page (its `STATIC_FILES=false` build): `argo server` and its API work, its UI
    page says "Built without static files".
    """
    target = source / "ui" / "dist" / "app"
    app = argo_ui.built_ui(argo_ui.ui_cache(), source, version)
    failure = cache_dir() / UI_FAILURE
    if app is None and build_ui:
        try:
            app = argo_ui.build_ui(argo_ui.ui_cache(), source, version, progress)
        except argo_ui.UiBuildFailed as error:
            failure.write_text(f"{error}\n")
            raise BuildFailed(str(error)) from None
    if app is not None:
        failure.unlink(missing_ok=True)
    if app is None:
        if not (target / ".gpuaas-build.json").is_file() and (target / "index.html").is_file() \
                and (target / "index.html").read_text() == PLACEHOLDER_UI:
            return
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        (target / "index.html").write_text(PLACEHOLDER_UI)
        return
    stamp = (app.parent / "build.json").read_text()
    if (target / ".gpuaas-build.json").is_file() and (target / ".gpuaas-build.json").read_text() == stamp:
        return
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(app, target)
    (target / ".gpuaas-build.json").write_text(stamp)


def _modfile(component: Component, go: str, progress: Progress, build_ui: bool) -> list[str]:
    """`-modfile=` flags that build the component against its patched module copy, else nothing."""
    patch = SOURCE_PATCHES.get(component.name)
    if patch is None:
        return []
    source = _patched_copy(patch, component, go, progress, build_ui)
    build_dir = cache_dir() / "build" / component.name
    build_dir.mkdir(parents=True, exist_ok=True)
    modfile = build_dir / "go.mod"
    text = (component.gomod_dir / "go.mod").read_text() + f"\nreplace {patch.module} => {source}\n"
    if not modfile.exists() or modfile.read_text() != text:
        modfile.write_text(text)
    shutil.copyfile(component.gomod_dir / "go.sum", build_dir / "go.sum")
    return [f"-modfile={modfile}"]


def build(component: Component, go: str | None = None, progress: Progress = lambda line: None,
          build_ui: bool = False) -> BuildResult:
    """`go install -trimpath -ldflags=... tool` in the component's folder, into its bin folder."""
    go = go or shutil.which("go")
    if go is None:
        raise BuildFailed("expected the `go` command (Go 1.26+) on PATH to build the real components, found "
                          f"none; install Go (https://go.dev/doc/install) and run `{command()} cluster build` again")
    with cache_lock("build"):
        return _build(component, go, progress, build_ui)


def _build(component: Component, go: str, progress: Progress, build_ui: bool) -> BuildResult:
    target = bin_dir(component.name)
    target.mkdir(parents=True, exist_ok=True)
    before = _digests(component)
    started = time.monotonic()
    env = {**os.environ, "GOBIN": str(target), "GOFLAGS": "-mod=readonly"}
    if component.name in STATIC:
        env["CGO_ENABLED"] = "0"
    done = subprocess.run([go, "install", *_modfile(component, go, progress, build_ui), "-trimpath",
                           f"-ldflags={ldflags(component)}", *component.tools],
                          cwd=component.gomod_dir, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-20:])
        raise BuildFailed(f"expected `go install {' '.join(component.tools)}` in stack/{component.name} to succeed, it exited with "
                          f"{done.returncode}:\n{tail}\ncheck the Go module proxy (go env GOPROXY) and disk space")
    after = _digests(component)
    for (comp, built), name in RENAMED.items():
        if comp == component.name and (target / built).exists():
            link = target / name
            link.unlink(missing_ok=True)
            os.link(target / built, link)  # a hard link: go install keeps finding `built` up to date
    return BuildResult(component.name, seconds, component.programs, cached=before == after)


def build_all(selected: list[str] | None = None, progress: Progress = lambda line: None,
              build_ui: bool = False) -> list[BuildResult]:
    """Build every component (or the `selected` ones), reporting progress before and after each."""
    chosen = [c for c in components() if not selected or c.name in selected]
    unknown = set(selected or ()) - {c.name for c in components()}
    if unknown:
        raise BuildFailed(f"expected components among {[c.name for c in components()]}, found "
                          f"{sorted(unknown)}; pick names of folders under stack/ that have tool lines")
    results = []
    for index, component in enumerate(chosen, 1):
        progress(f"[{index}/{len(chosen)}] {component.name}: go install {', '.join(component.programs)} ...")
        result = build(component, progress=progress, build_ui=build_ui)
        results.append(result)
        progress(f"[{index}/{len(chosen)}] {component.name}: {'up to date' if result.cached else 'built'} "
                 f"in {result.seconds:.1f}s")
    return results


def program(component: str, name: str) -> Path:
    """The path of one built program, or an error that says how to build it."""
    path = bin_dir(component) / name
    if not path.is_file():
        raise BuildFailed(f"expected {name} (stack/{component}) at {path}, found no such file; run "
                          f"`{command()} cluster build` (or `make cluster-build`), or set {CACHE_ENV} to a cache "
                          "that has it")
    return path
