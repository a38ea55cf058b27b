"""The images a real node runs for gpuaas, built on this machine: the step image, argoexec and pause.

Why built here: there is no registry and no container engine, yet the kubelet must run the very
code the WorkflowTemplates name. Each image is an OCI archive (`gpuaas.cluster.oci`) that the node's
containerd imports (`gpuaas.cluster.node.Containerd.import_image`):

| image | from | layers |
|---|---|---|
| `gpuaas.local/gpuaas-step:dev` | the project's `Containerfile`, its instructions run in order (COPY, ENV, RUN in a chroot...) | a Debian bookworm base (debootstrap), the Containerfile's changes |
| `gpuaas.local/argoexec:v4.0.5` | `argoexec` built from `stack/argo-workflows` (CGO off, static) | one: /bin/argoexec plus the files upstream's distroless base gives it |
| `gpuaas.local/pause:3.10.2` | `build/pause/linux/pause.c` of the pinned `k8s.io/kubernetes`, gcc -static | one: /pause |

**The step image's base is a stand-in for UBI 9 python-311.** The Containerfile's `FROM` names Red
Hat's image, which needs a registry. The base built here is Debian bookworm (debootstrap from the
mirror apt uses) with Python 3.11 arranged as that image arranges it: a virtualenv at
`/opt/app-root` first on PATH, HOME and WORKDIR `/opt/app-root/src`, user 1001 in group 0, and a
`fix-permissions` command. The Containerfile's own instructions then run unchanged, so what they
install, compile and check is what the cluster's image gets.

Builds are cached under `.stack-cache/images/` by the hash of their inputs: the base once per
suite/mirror/package set, the step layer whenever the Containerfile or the copied sources change.
Building needs root (debootstrap, overlay mounts, chroot) and network access to the Debian mirror
and PyPI.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from gpuaas.cluster.binaries import cache_dir, cache_lock, program
from gpuaas.cluster.debian import debian_tool
from gpuaas.cluster.oci import Blob, ImageConfig, write_image_archive, write_layer
from gpuaas.upstream import STACK_DIR, upstream_file

REPOSITORY = STACK_DIR.parent
IMAGES_DIR = cache_dir() / "images"
STEP_IMAGE = "gpuaas.local/gpuaas-step:dev"
ARGOEXEC_IMAGE = "gpuaas.local/argoexec:v4.0.5"
ARGO_EVENTS_IMAGE = "gpuaas.local/argo-events:v1.9.11"
"""What the Argo Events controller runs EventSources and Sensors with (its ARGO_EVENTS_IMAGE)."""
PAUSE_IMAGE = "gpuaas.local/pause:3.10.2"
"""The sandbox image the node's containerd is configured with (`sandbox_image`)."""

DEBIAN_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
"""Debian bookworm's python3 is 3.11, the version of the UBI python-311 image the Containerfile names."""
APP_ROOT = "/opt/app-root"
BASE_ENV = {
    "PATH": f"{APP_ROOT}/src/.local/bin:{APP_ROOT}/src/bin:{APP_ROOT}/bin:"
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": f"{APP_ROOT}/src", "APP_ROOT": APP_ROOT, "PYTHON_VERSION": "3.11", "VIRTUAL_ENV": APP_ROOT,
    "LANG": "C.UTF-8",
}
"""The environment of the UBI python-311 image that the Containerfile relies on (pip and python on PATH)."""
FIX_PERMISSIONS = """#!/bin/sh
# gpuaas base image (stand-in for UBI's command of the same name): make a tree usable by any UID in
# group 0, as OpenShift's restricted SCC runs containers. -P: do not follow symbolic links.
# Usage (as UBI's): fix-permissions DIR [-P]; the -P flag may come before or after the folders.
set -e
targets=""
for argument in "$@"; do [ "$argument" = "-P" ] || targets="$targets $argument"; done
[ -n "$targets" ] || { echo "fix-permissions: expected a folder, found none" >&2; exit 2; }
for target in $targets; do
  find -P "$target" ! -gid 0 -exec chgrp -h 0 {} +
  find -P "$target" ! -type l ! -perm -g+rw -exec chmod g+rw {} +
  find -P "$target" -type d ! -perm -g+x -exec chmod g+x {} +
done
"""
BUILD_EXCLUDED = ("proc", "sys", "dev", "run", "tmp", "var/cache/apt/archives", "var/lib/apt/lists")
"""Trees a layer never carries: the runtime provides /proc, /sys, /dev and /run; caches are dropped."""


class ImageBuildError(RuntimeError):
    """An image could not be built; the message says which step failed and what it printed."""


@dataclass(frozen=True)
class BuiltImage:
    """An image archive ready for `ctr images import`."""

    reference: str
    archive: Path
    digest: str
    seconds: float
    """Time this call took (a cache hit is a few milliseconds)."""


def _run(command: list[str], what: str, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, check=False, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()[-1500:]
        raise ImageBuildError(f"{what} failed (exit {done.returncode}): {' '.join(command[:6])}...\n{output}")
    return done


def _require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise ImageBuildError(f"building {what} needs root (debootstrap, overlay mounts, chroot); "
                              f"found uid {os.geteuid()}: run as root")


def _one_builder(build: Callable[..., BuiltImage]) -> Callable[..., BuiltImage]:
    """Run an image build under the images lock: concurrent builds of one image would share its folders."""
    @functools.wraps(build)
    def locked(*args: object, **kwargs: object) -> BuiltImage:
        with cache_lock("images"):
            return build(*args, **kwargs)
    return locked


def _digest_of(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()[:16]


def _cached(archive: Path, reference: str, started: float) -> BuiltImage | None:
    meta = archive.with_suffix(".json")
    if archive.exists() and meta.exists():
        recorded = json.loads(meta.read_text())
        if recorded.get("reference") == reference:
            return BuiltImage(reference, archive, recorded["digest"], time.monotonic() - started)
    return None


KEEP_BUILDS = 2
"""Archives kept per image (the newest): a rebuild after every source change must not fill the disk."""


def _prune(kind: str, keep: Path) -> None:
    archives = sorted(IMAGES_DIR.glob(f"{kind}-*.oci.tar"), key=lambda path: path.stat().st_mtime, reverse=True)
    for stale in [a for a in archives if a != keep][KEEP_BUILDS - 1:]:
        stem = stale.name.removesuffix(".oci.tar")
        for leftover in (stale, stale.with_suffix(".json"), IMAGES_DIR / f"{stem}.layer.tar"):
            leftover.unlink(missing_ok=True)


def _finish(archive: Path, reference: str, layers: list[Blob], config: ImageConfig, started: float) -> BuiltImage:
    partial = archive.with_name(archive.name + ".partial")
    digest = write_image_archive(partial, reference, layers, config)
    partial.replace(archive)
    archive.with_suffix(".json").write_text(json.dumps({"reference": reference, "digest": digest}))
    _prune(archive.name.removesuffix(".oci.tar").rsplit("-", 1)[0], archive)
    return BuiltImage(reference, archive, digest, time.monotonic() - started)


# --- pause -------------------------------------------------------------------------------------------


@_one_builder
def build_pause_image(*, reference: str = PAUSE_IMAGE) -> BuiltImage:
    """The pod sandbox image: Kubernetes' pause.c from the pinned module, compiled static with gcc."""
    started = time.monotonic()
    source = upstream_file("k8s.io/kubernetes", "build/pause/linux/pause.c")
    tag = reference.rsplit(":", 1)[-1]
    key = _digest_of(source.read_bytes(), reference.encode())
    archive = IMAGES_DIR / f"pause-{key}.oci.tar"
    if cached := _cached(archive, reference, started):
        return cached
    with tempfile.TemporaryDirectory(prefix="gpuaas-pause-") as scratch:
        root = Path(scratch) / "root"
        root.mkdir()
        gcc = shutil.which("gcc")
        if gcc is None:
            raise ImageBuildError("building the pause image needs gcc (Debian package `gcc`); found none on PATH")
        # The flags of upstream's build/pause/Makefile (CFLAGS), with this build's version string.
        _run([gcc, "-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v{tag}-gpuaas", "-o", str(root / "pause"),
              str(source)], "compiling pause.c")
        layer = write_layer(root, IMAGES_DIR / f"pause-{key}.layer.tar")
    return _finish(archive, reference, [layer], ImageConfig(entrypoint=["/pause"], user="65535:65535"), started)


# --- argoexec ----------------------------------------------------------------------------------------

_PASSWD = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n" \
          "argo:x:8737:8737:argo:/home/argo:/sbin/nologin\n"
_GROUP = "root:x:0:\nnonroot:x:65532:\nargo:x:8737:\n"


@_one_builder
def build_argoexec_image(*, reference: str = ARGOEXEC_IMAGE) -> BuiltImage:
    """Argo's executor image: the argoexec built from stack/argo-workflows, as upstream's Dockerfile lays it out.

    Upstream (`Dockerfile`, target `argoexec`) copies dist/argoexec to /bin/ on distroless static
    with hack/nsswitch.conf and hack/ssh_known_hosts; those two files are read from the pinned
    module. Distroless's own passwd/group (root, nonroot) are written here; it runs as root, like
    upstream's default `argoexec` target.
    """
    started = time.monotonic()
    binary = program("argo-workflows", "argoexec")
    module = "github.com/argoproj/argo-workflows/v4"
    nsswitch = upstream_file(module, "hack/nsswitch.conf").read_bytes()
    known_hosts = upstream_file(module, "hack/ssh_known_hosts").read_bytes()
    stat = binary.stat()
    key = _digest_of(f"{binary}:{stat.st_size}:{stat.st_mtime_ns}".encode(), nsswitch, known_hosts, reference.encode())
    archive = IMAGES_DIR / f"argoexec-{key}.oci.tar"
    if cached := _cached(archive, reference, started):
        return cached
    with tempfile.TemporaryDirectory(prefix="gpuaas-argoexec-") as scratch:
        root = Path(scratch) / "root"
        (root / "bin").mkdir(parents=True)
        (root / "tmp").mkdir(mode=0o1777)
        os.chmod(root / "tmp", 0o1777)
        shutil.copy2(binary, root / "bin" / "argoexec")
        files = {"etc/nsswitch.conf": (nsswitch, 0o644), "etc/ssh/ssh_known_hosts": (known_hosts, 0o644),
                 "etc/passwd": (_PASSWD.encode(), 0o644), "etc/group": (_GROUP.encode(), 0o644)}
        if Path("/etc/mime.types").exists():  # upstream copies the builder's mime.types (Go's mime package reads it)
            files["etc/mime.types"] = (Path("/etc/mime.types").read_bytes(), 0o644)
        layer = write_layer(root, IMAGES_DIR / f"argoexec-{key}.layer.tar", extra_files=files)
    config = ImageConfig(entrypoint=["argoexec"], env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})
    return _finish(archive, reference, [layer], config, started)


# --- argo-events ---------------------------------------------------------------------------------------


@_one_builder
def build_argo_events_image(*, reference: str = ARGO_EVENTS_IMAGE) -> BuiltImage:
    """Argo Events' image: /bin/argo-events and the `argo` CLI its Sensors exec, as upstream's Dockerfile.

    Upstream (`Dockerfile`, target `argo-events`) is `FROM scratch` with /bin/argo-events, the argo CLI
    at /usr/local/bin/argo (v3.7.9 downloaded from GitHub in v1.9.11), the CA bundle and zoneinfo.
    Here both programs are the static builds from stack/ (argo-events v1.9.11 and the argo CLI of
    the pinned Argo Workflows v4.0.5, the version that runs the workflows); the CA bundle and
    zoneinfo are this machine's Debian ones.
    """
    started = time.monotonic()
    events, argo = program("argo-events", "argo-events"), program("argo-workflows", "argo")
    ca_bundle, zoneinfo = Path("/etc/ssl/certs/ca-certificates.crt"), Path("/usr/share/zoneinfo")
    parts = [f"{path}:{path.stat().st_size}:{path.stat().st_mtime_ns}".encode() for path in (events, argo)]
    key = _digest_of(*parts, ca_bundle.read_bytes() if ca_bundle.exists() else b"", reference.encode())
    archive = IMAGES_DIR / f"argo-events-{key}.oci.tar"
    if cached := _cached(archive, reference, started):
        return cached
    with tempfile.TemporaryDirectory(prefix="gpuaas-argo-events-") as scratch:
        root = Path(scratch) / "root"
        (root / "bin").mkdir(parents=True)
        (root / "usr/local/bin").mkdir(parents=True)
        (root / "tmp").mkdir(mode=0o1777)
        os.chmod(root / "tmp", 0o1777)
        shutil.copy2(events, root / "bin" / "argo-events")
        shutil.copy2(argo, root / "usr/local/bin" / "argo")
        if zoneinfo.is_dir():
            shutil.copytree(zoneinfo, root / "usr/share/zoneinfo", symlinks=True)
        files = {"etc/passwd": (_PASSWD.encode(), 0o644), "etc/group": (_GROUP.encode(), 0o644)}
        if ca_bundle.exists():
            files["etc/ssl/certs/ca-certificates.crt"] = (ca_bundle.read_bytes(), 0o644)
        layer = write_layer(root, IMAGES_DIR / f"argo-events-{key}.layer.tar", extra_files=files)
    config = ImageConfig(entrypoint=["/bin/argo-events"],
                         env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})
    return _finish(archive, reference, [layer], config, started)


# --- the step image: Debian base (stand-in for UBI python-311) -----------------------------------------


def apt_mirror() -> str:
    """The Debian mirror this machine's apt uses (deb822 `URIs:` or a `deb` line), for debootstrap."""
    sources = sorted(Path("/etc/apt/sources.list.d").glob("*.sources")) + [Path("/etc/apt/sources.list")]
    for source in sources:
        if not source.exists():
            continue
        text = source.read_text()
        for stanza in re.split(r"\n\s*\n", text):
            uri = re.search(r"^URIs:\s*(\S+)", stanza, re.MULTILINE)
            suites = re.search(rf"^Suites:.*\b{DEBIAN_SUITE}\b", stanza, re.MULTILINE)
            if uri and suites and "security" not in uri.group(1):
                return uri.group(1)
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and parts[2] == DEBIAN_SUITE:
                return parts[1]
    return "http://deb.debian.org/debian"


def _unmount_under(root: Path) -> None:
    """Unmount whatever is mounted at or below `root`, deepest first (a failed build may leave mounts)."""
    prefix = str(root.resolve())
    mounted = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for point in sorted((m for m in mounted if m == prefix or m.startswith(prefix + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def build_base_rootfs(*, mirror: str | None = None) -> Path:
    """Debian bookworm with Python 3.11 laid out as UBI python-311 (see the module docstring); cached."""
    _require_root("the step image's base")
    mirror = mirror or apt_mirror()
    key = _digest_of(DEBIAN_SUITE.encode(), mirror.encode(), " ".join(BASE_PACKAGES).encode(), FIX_PERMISSIONS.encode(),
                     json.dumps(BASE_ENV, sort_keys=True).encode())
    base = IMAGES_DIR / f"base-{key}"
    rootfs = base / "rootfs"
    if (base / "complete").exists():
        return rootfs
    if base.exists():
        _unmount_under(base)
        shutil.rmtree(base)
    base.mkdir(parents=True)
    print(f"building the step image's base: debootstrap {DEBIAN_SUITE} from {mirror} (once; about 2 minutes)...",
          file=sys.stderr, flush=True)
    try:
        _run([debian_tool("debootstrap"), "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
              DEBIAN_SUITE, str(rootfs), mirror], "debootstrap")
    finally:
        _unmount_under(rootfs)
    _run(["chroot", str(rootfs), "/usr/bin/python3", "-m", "venv", APP_ROOT], "creating the /opt/app-root virtualenv")
    (rootfs / "usr/bin/fix-permissions").write_text(FIX_PERMISSIONS)
    os.chmod(rootfs / "usr/bin/fix-permissions", 0o755)
    with (rootfs / "etc/passwd").open("a") as passwd:
        passwd.write(f"default:x:1001:0:Default Application User:{APP_ROOT}/src:/sbin/nologin\n")
    (rootfs / APP_ROOT.lstrip("/") / "src").mkdir(exist_ok=True)
    _run(["chroot", str(rootfs), "/bin/sh", "-c", f"chown -R 1001:0 {APP_ROOT} && fix-permissions -P {APP_ROOT}"],
         "arranging /opt/app-root")
    for cruft in ("usr/share/man", "usr/share/info", "var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (rootfs / cruft).glob("*"):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            elif entry.name != "lock":
                entry.unlink()
    (rootfs / "etc/resolv.conf").write_text("")  # the runtime mounts the pod's; the build mounts the host's
    (rootfs / "etc/hostname").write_text("localhost\n")
    (base / "complete").write_text(mirror + "\n")
    for stale in IMAGES_DIR.glob("base-*"):  # an older base (other packages or mirror) is not used again
        if stale != base:
            _unmount_under(stale)
            shutil.rmtree(stale, ignore_errors=True)
    return rootfs


def _base_layer(rootfs: Path) -> Blob:
    layer = rootfs.parent / "layer.tar"
    meta = rootfs.parent / "layer.json"
    if layer.exists() and meta.exists():
        recorded = json.loads(meta.read_text())
        return Blob(recorded["digest"], recorded["size"], layer)
    blob = write_layer(rootfs, layer, excluded=BUILD_EXCLUDED)
    meta.write_text(json.dumps({"digest": blob.digest, "size": blob.size}))
    return blob


# --- the step image: the Containerfile's instructions ---------------------------------------------------


@dataclass
class Instruction:
    """One Containerfile instruction (continuation lines joined)."""

    keyword: str
    argument: str
    line: int


def parse_containerfile(text: str) -> list[Instruction]:
    """Instructions in order: comments dropped, backslash continuations joined, keywords upper-cased."""
    instructions: list[Instruction] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        keyword, _, argument = full.partition(" ")
        instructions.append(Instruction(keyword.upper(), argument.strip(), start))
    return instructions


def _substitute(text: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), text)


def _pairs(argument: str) -> dict[str, str]:
    """`KEY=value KEY2="v 2"` (ENV, LABEL): shell-quoted pairs."""
    pairs: dict[str, str] = {}
    for word in shlex.split(argument):
        key, _, value = word.partition("=")
        pairs[key] = value
    return pairs


@dataclass
class _BuildState:
    env: dict[str, str] = field(default_factory=lambda: dict(BASE_ENV))
    labels: dict[str, str] = field(default_factory=dict)
    workdir: str = f"{APP_ROOT}/src"
    user: str = "1001"
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    args: dict[str, str] = field(default_factory=dict)


@contextmanager
def _overlay(lower: Path, upper: Path, scratch: Path) -> Iterator[Path]:
    """`lower` with writes going to `upper`, mounted for a chroot with /dev/shm and the host's DNS (read-only)."""
    work, merged = scratch / "work", scratch / "merged"
    for directory in (upper, work, merged):
        directory.mkdir(parents=True, exist_ok=True)
    _run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={lower},upperdir={upper},workdir={work}", str(merged)],
         "mounting the build overlay")
    try:
        _run(["mount", "-t", "tmpfs", "shm", str(merged / "dev/shm")], "mounting /dev/shm for the build")
        _run(["mount", "--bind", "/etc/resolv.conf", str(merged / "etc/resolv.conf")], "binding resolv.conf")
        _run(["mount", "-o", "remount,bind,ro", str(merged / "etc/resolv.conf")], "making resolv.conf read-only")
        yield merged
    finally:
        _unmount_under(merged)


def _build_env(state: _BuildState, ca_bundle: str | None) -> dict[str, str]:
    env = dict(state.env)
    if ca_bundle:  # PyPI through this machine's TLS setup: the host's CA bundle, for the build only
        env.update(PIP_CERT=ca_bundle, SSL_CERT_FILE=ca_bundle, REQUESTS_CA_BUNDLE=ca_bundle)
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
                 "http_proxy", "https_proxy", "no_proxy"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def _host_ca_bundle() -> Path | None:
    for candidate in (os.environ.get("PIP_CERT"), os.environ.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def _execute(instruction: Instruction, state: _BuildState, merged: Path, context: Path, ca_bundle: str | None) -> None:
    """Apply one instruction to the build state or to the mounted tree."""
    keyword, argument = instruction.keyword, _substitute(instruction.argument, {**state.args, **state.env})
    if keyword == "ARG":
        name, _, default = argument.partition("=")
        state.args[name] = default
    elif keyword == "FROM":
        pass  # the base is the Debian stand-in for UBI python-311 (module docstring)
    elif keyword == "LABEL":
        state.labels.update(_pairs(argument))
    elif keyword == "ENV":
        state.env.update(_pairs(argument))
    elif keyword == "USER":
        state.user = argument
    elif keyword == "WORKDIR":
        state.workdir = argument if argument.startswith("/") else f"{state.workdir}/{argument}"
        (merged / state.workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
    elif keyword == "COPY":
        *sources, destination = shlex.split(argument)
        if any(source.startswith("--") for source in sources):
            raise ImageBuildError(f"Containerfile line {instruction.line}: COPY options are not supported "
                                  f"by this builder ({argument!r}); use plain `COPY SRC... DEST`")
        target = destination if destination.startswith("/") else f"{state.workdir}/{destination}"
        for source in sources:
            path = context / source
            into = merged / target.lstrip("/")
            if path.is_dir():
                shutil.copytree(path, into if not destination.endswith("/") or len(sources) == 1 else into / path.name,
                                dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                into.mkdir(parents=True, exist_ok=True) if destination.endswith("/") else into.parent.mkdir(
                    parents=True, exist_ok=True)
                shutil.copy2(path, into / path.name if destination.endswith("/") else into)
    elif keyword == "RUN":
        if state.user not in ("0", "root"):
            raise ImageBuildError(f"Containerfile line {instruction.line}: RUN as user {state.user} is not "
                                  "supported by this builder; RUN as USER 0")
        script = f"cd {shlex.quote(state.workdir)} && {argument}"
        # A PID namespace with its own /proc: the build sees only its own processes, never the host's.
        command = ["unshare", "--pid", "--fork", f"--mount-proc={merged / 'proc'}",
                   "chroot", str(merged), "/bin/sh", "-c", script]
        done = subprocess.run(command, check=False, env=_build_env(state, ca_bundle),
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise ImageBuildError(f"Containerfile line {instruction.line}: RUN failed (exit {done.returncode}):\n"
                                  f"{(done.stdout + done.stderr).strip()[-2000:]}")
    elif keyword in ("ENTRYPOINT", "CMD"):
        value = json.loads(argument) if argument.startswith("[") else ["/bin/sh", "-c", argument]
        if keyword == "ENTRYPOINT":
            state.entrypoint = value
        else:
            state.cmd = value
    else:
        raise ImageBuildError(f"Containerfile line {instruction.line}: {keyword} is not supported by this builder "
                              "(ARG FROM LABEL ENV USER WORKDIR COPY RUN ENTRYPOINT CMD are)")


def _context_digest(containerfile: Path, instructions: list[Instruction], context: Path) -> bytes:
    """A digest of every file the Containerfile copies, so the step layer is rebuilt when one changes."""
    digest = hashlib.sha256(containerfile.read_bytes())
    for instruction in instructions:
        if instruction.keyword != "COPY":
            continue
        for source in shlex.split(instruction.argument)[:-1]:
            path = context / source
            files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()
                                                          and "__pycache__" not in p.parts and p.suffix != ".pyc")
            for file in files:
                digest.update(str(file.relative_to(context)).encode())
                digest.update(file.read_bytes())
    return digest.digest()


@_one_builder
def build_step_image(*, reference: str = STEP_IMAGE, context: Path = REPOSITORY,
                     containerfile: Path | None = None) -> BuiltImage:
    """The step image from the project's Containerfile, on the Debian stand-in base; cached by input hash."""
    started = time.monotonic()
    containerfile = containerfile or context / "Containerfile"
    instructions = parse_containerfile(containerfile.read_text())
    rootfs = build_base_rootfs()
    base = _base_layer(rootfs)
    key = _digest_of(base.digest.encode(), _context_digest(containerfile, instructions, context), reference.encode())
    archive = IMAGES_DIR / f"step-{key}.oci.tar"
    if cached := _cached(archive, reference, started):
        return cached
    _require_root("the step image")
    print("building the step image from the Containerfile (pip install from PyPI)...", file=sys.stderr, flush=True)
    state = _BuildState()
    with tempfile.TemporaryDirectory(prefix="gpuaas-step-", dir=IMAGES_DIR) as scratch_name:
        scratch = Path(scratch_name)
        upper = scratch / "upper"
        host_ca = _host_ca_bundle()
        with _overlay(rootfs, upper, scratch) as merged:
            ca_in_build = None
            if host_ca is not None:
                ca_path = merged / "tmp/.gpuaas-build-ca.pem"
                shutil.copy(host_ca, ca_path)
                ca_in_build = "/tmp/.gpuaas-build-ca.pem"
            try:
                for instruction in instructions:
                    _execute(instruction, state, merged, context, ca_in_build)
            finally:
                if ca_in_build:
                    (merged / ca_in_build.lstrip("/")).unlink(missing_ok=True)
        layer = write_layer(upper, scratch / "layer.tar", excluded=("proc", "sys", "dev", "run"))
        final_layer = IMAGES_DIR / f"step-{key}.layer.tar"
        shutil.move(layer.path, final_layer)
        layer = Blob(layer.digest, layer.size, final_layer)
    config = ImageConfig(entrypoint=state.entrypoint, cmd=state.cmd, env=state.env, working_dir=state.workdir,
                         user=state.user, labels=state.labels)
    return _finish(archive, reference, [base, layer], config, started)


def build_all() -> list[BuiltImage]:
    """Every image a gpuaas node needs: pause, argoexec, Argo Events (with the argo CLI), the step image."""
    return [build_pause_image(), build_argoexec_image(), build_argo_events_image(), build_step_image()]


def main(argv: list[str] | None = None) -> int:
    """`python -m gpuaas.cluster.images [--output json]`: build (or find cached) every node image."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m gpuaas.cluster.images", description=build_all.__doc__)
    parser.add_argument("--output", choices=["table", "json"], default="table")
    args = parser.parse_args(argv)
    try:
        built = build_all()
    except (ImageBuildError, OSError) as error:
        print(f"gpuaas images: {error}", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps([{"reference": image.reference, "archive": str(image.archive), "digest": image.digest,
                           "seconds": round(image.seconds, 2)} for image in built]))
        return 0
    print(f"{'image':32s} {'seconds':>8s} {'MB':>7s}  archive")
    for image in built:
        print(f"{image.reference:32s} {image.seconds:8.2f} {image.archive.stat().st_size / 1e6:7.1f}  {image.archive}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
