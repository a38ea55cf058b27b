"""The pod runtime's programs: Go binaries built from the modules pinned under `stack/`, Debian tools.

Why build on demand: a user's clone has no binaries (the project never commits them), and the
versions that run must be the ones `stack/*/go.mod` pins. `go install` from that module folder builds
exactly the pinned version (verified against the committed go.sum) into `.stack-cache/bin/`, where
the real-stack tier finds it; a second call costs a file check. The Debian tools (containerd, runc,
the CNI plugins, debootstrap, socat) are installed by `make node-packages`; when one is missing the
error names that target.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gpuaas.upstream import STACK_DIR, module_dir

CACHE_DIR = Path(os.environ.get("GPUAAS_STACK_CACHE", STACK_DIR.parent / ".stack-cache"))
"""Built binaries and images: `.stack-cache/` beside `stack/` (gitignored), or $GPUAAS_STACK_CACHE."""
BIN_DIR = CACHE_DIR / "bin"


class ToolMissing(RuntimeError):
    """A program the pod runtime needs is absent; the message says how to get it."""


@dataclass(frozen=True)
class GoProgram:
    """A program built from one pinned module: its `stack/` folder, package path and binary path."""

    stack_module: str
    package: str
    binary: str
    ldflags: str | None = None
    """None: the flags `gpuaas cluster build` uses for the module (gpuaas.cluster.binaries.ldflags), with the
    version stamps of upstream's release builds; without them a Kubernetes binary reports
    `v0.0.0-master+$Format:%H$` (the node's kubeletVersion)."""
    static: bool = False
    """Built with CGO_ENABLED=0: for programs that run in an image with no C library (argoexec)."""
    module: str = ""
    symlinks: tuple[tuple[str, str], ...] = ()
    """Files of `module` that are symbolic links upstream: (path, target beside it). Module zips drop
    symlinks, so such a program is built from a copy of the pinned module with the links put back
    (`_restored_module`), through a `replace` in a copy of its stack/ go.mod (see ARGOEXEC)."""

    @property
    def path(self) -> Path:
        """Where the build puts it (the Kubernetes binaries sit directly in bin/, the others per module)."""
        if self.stack_module == "kubernetes":
            return BIN_DIR / self.binary
        return BIN_DIR / self.stack_module / self.binary


KUBELET = GoProgram("kubernetes", "k8s.io/kubernetes/cmd/kubelet", "kubelet")
KUBE_APISERVER = GoProgram("kubernetes", "k8s.io/kubernetes/cmd/kube-apiserver", "kube-apiserver")
KUBE_CONTROLLER_MANAGER = GoProgram("kubernetes", "k8s.io/kubernetes/cmd/kube-controller-manager",
                                    "kube-controller-manager")
KUBE_SCHEDULER = GoProgram("kubernetes", "k8s.io/kubernetes/cmd/kube-scheduler", "kube-scheduler")
ETCD = GoProgram("etcd", "go.etcd.io/etcd/server/v3", "server")
"""etcd's module builds its server as `server` (the module's last path element), as the stack build names it."""
ARGOEXEC = GoProgram("argo-workflows", "github.com/argoproj/argo-workflows/v4/cmd/argoexec", "argoexec",
                     "-s -w -X github.com/argoproj/argo-workflows/v4.version=v4.0.5", static=True,
                     module="github.com/argoproj/argo-workflows/v4",
                     symlinks=(("workflow/executor/osspecific/signal_linux.go", "signal_darwin.go"),))
"""The version stamp matches `stack/argo-workflows/go.mod`; `argoexec version` prints it.

Upstream's `workflow/executor/osspecific/signal_linux.go` is a symlink to `signal_darwin.go` (in
every v4 release). The module zip the proxy serves omits symlinks, so a plain `go install` of
argoexec fails on Linux with `undefined: Setpgid`; the overlay maps the link to its target, as a
git checkout would."""

DEBIAN_TOOLS = {
    "containerd": "containerd", "ctr": "containerd", "runc": "runc", "debootstrap": "debootstrap",
    "socat": "socat", "ip": "iproute2", "openssl": "openssl", "mount": "mount",
}
CNI_DIR = Path("/usr/lib/cni")
"""Debian's containernetworking-plugins install the bridge, host-local and loopback plugins here."""


def program_ldflags(program: GoProgram) -> str:
    """The program's own flags, else the stack build's for its module (one place knows the version stamps)."""
    if program.ldflags is not None:
        return program.ldflags
    from gpuaas.cluster.binaries import Component, ldflags

    return ldflags(Component(program.stack_module, STACK_DIR / program.stack_module, ()))


def go_binary(program: GoProgram, *, build: bool = True) -> Path:
    """The built program, building it from its pinned module first if absent (minutes, once)."""
    if program.path.exists():
        return program.path
    if not build:
        raise ToolMissing(f"{program.binary} is not built: expected {program.path}; "
                          f"run `make stack-node` (go install from stack/{program.stack_module})")
    if shutil.which("go") is None:
        raise ToolMissing(f"building {program.binary} needs the Go toolchain (1.26+); found no `go` on PATH: "
                          "install Go, then run `make stack-node`")
    program.path.parent.mkdir(parents=True, exist_ok=True)
    print(f"building {program.binary} from stack/{program.stack_module} (once; a few minutes)...",
          file=sys.stderr, flush=True)
    env = dict(os.environ, GOBIN=str(program.path.parent))
    if program.static:
        env["CGO_ENABLED"] = "0"
    command = ["go", "install", "-trimpath", f"-ldflags={program_ldflags(program)}", program.package]
    workdir = STACK_DIR / program.stack_module
    if program.symlinks:
        workdir = _restored_module(program)
    done = subprocess.run(command, check=False, cwd=workdir, env=env, capture_output=True, text=True)
    if done.returncode != 0 or not program.path.exists():
        raise ToolMissing(f"building {program.binary} from stack/{program.stack_module} failed "
                          f"(exit {done.returncode}): {done.stderr.strip()[-800:]}")
    return program.path


def _restored_module(program: GoProgram) -> Path:
    """A build folder whose go.mod is stack/<module>'s plus `replace MODULE => copy with symlinks restored`.

    The copy lives in `.stack-cache/src/` (never in the repository); the go.mod and go.sum are
    the committed ones, so every other dependency is the pinned, checksummed version.
    """
    source = module_dir(program.module)
    copy = CACHE_DIR / "src" / source.name.replace("@", "-")
    if not (copy / ".restored").exists():
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(source, copy, copy_function=shutil.copy)
        for directory, _, _ in os.walk(copy):  # the module cache is read-only
            os.chmod(directory, 0o755)
        for path, target in program.symlinks:
            (copy / path).unlink(missing_ok=True)
            (copy / path).symlink_to(target)
        (copy / ".restored").write_text(json.dumps(program.symlinks))
    build = CACHE_DIR / "src" / f"build-{program.stack_module}"
    build.mkdir(parents=True, exist_ok=True)
    gomod = (STACK_DIR / program.stack_module / "go.mod").read_text()
    (build / "go.mod").write_text(gomod + f"\nreplace {program.module} => {copy}\n")
    shutil.copy(STACK_DIR / program.stack_module / "go.sum", build / "go.sum")
    return build


def debian_tool(name: str) -> str:
    """The path of a Debian-packaged tool, or an error naming the package and `make node-packages`."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin:/bin")
    if found is None:
        raise ToolMissing(f"`{name}` not found on PATH: it comes from the Debian package "
                          f"`{DEBIAN_TOOLS.get(name, name)}`; run `make node-packages`")
    return found


def cni_plugin_dir() -> Path:
    """Debian's CNI plugin folder, checked to hold the three plugins the node network uses."""
    missing = [plugin for plugin in ("bridge", "host-local", "loopback") if not (CNI_DIR / plugin).exists()]
    if missing:
        raise ToolMissing(f"CNI plugins {', '.join(missing)} not found in {CNI_DIR}: they come from the "
                          "Debian package `containernetworking-plugins`; run `make node-packages`")
    return CNI_DIR
