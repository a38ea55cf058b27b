"""Files of the pinned upstream Go modules: CRDs and JSON Schemas, read where upstream publishes them.

Why not a copy in this repository: the real-stack tier runs binaries built from the Go modules pinned
under `stack/` (one `go.mod` per program, plus `stack/crds/go.mod` for modules whose files alone are
read). Taking each CRD and schema from the very module version that is built and run means the
validator and the cluster can never disagree about a field, and a version bump is one line in a
`go.mod`. The Go toolchain fetches them from the module proxy into its module cache (verified
against the committed `go.sum`); a second call costs a `go mod download` of a cached module.

    from gpuaas.upstream import upstream_file
    upstream_file("sigs.k8s.io/kueue", "config/components/crd/bases/kueue.x-k8s.io_workloads.yaml")
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

STACK_DIR = Path(__file__).resolve().parents[1] / "stack"
"""The project's folder of pinned Go modules (beside `gpuaas/` in a checkout)."""

_REQUIREMENT = re.compile(r"^(?:require\s+)?([\w.\-/]+)\s+(v[\w.\-+]+)(?:\s*//.*)?$")
_TOOL = re.compile(r"^(?:tool\s+)?([\w.\-/]+)$")


class UpstreamUnavailable(RuntimeError):
    """A pinned upstream module or file could not be had; the message says what to do."""


@dataclass(frozen=True)
class Pin:
    """Where one upstream module is pinned: the `go.mod` folder that requires it, and the version."""

    module: str
    version: str
    gomod_dir: Path


def _directives(gomod: Path, verb: str) -> list[str]:
    """The operands of one go.mod directive (`require`, `tool`), single-line and block forms."""
    lines: list[str] = []
    in_block = False
    for line in gomod.read_text().splitlines():
        stripped = line.split("//", 1)[0].strip() if verb == "tool" else line.strip()
        if stripped == f"{verb} (":
            in_block = True
        elif in_block and stripped == ")":
            in_block = False
        elif in_block and stripped:
            lines.append(stripped)
        elif stripped.startswith(f"{verb} "):
            lines.append(stripped[len(verb) + 1:].strip())
    return lines


def _owned(gomod: Path) -> dict[str, str]:
    """Modules this go.mod pins on purpose: those its tools come from, or all it requires if no tools.

    After `go mod tidy` every requirement of a tool-only module is marked `// indirect`, so the
    tool lines, not the comments, say which modules a go.mod exists to pin.
    """
    required: dict[str, str] = {}
    for operand in _directives(gomod, "require"):
        match = _REQUIREMENT.match(operand)
        if match:
            required[match.group(1)] = match.group(2)
    tools = [m.group(1) for t in _directives(gomod, "tool") if (m := _TOOL.match(t))]
    if not tools:
        return required
    return {module: version for module, version in required.items()
            if any(tool == module or tool.startswith(module + "/") for tool in tools)}


@functools.cache
def pins() -> dict[str, Pin]:
    """Every module a `stack/*/go.mod` pins on purpose; the first folder (by name) wins on a tie."""
    if not STACK_DIR.is_dir():
        raise UpstreamUnavailable(f"expected the pinned Go modules in {STACK_DIR}, found no such folder; "
                                  "run gpuaas from a checkout of the project (pip install -e .)")
    found: dict[str, Pin] = {}
    for gomod in sorted(STACK_DIR.glob("*/go.mod")):
        for module, version in _owned(gomod).items():
            found.setdefault(module, Pin(module, version, gomod.parent))
    return found


def pin(module: str) -> Pin:
    try:
        return pins()[module]
    except KeyError:
        raise UpstreamUnavailable(f"expected {module} among the modules pinned in {STACK_DIR}/*/go.mod, found "
                                  f"none; add it to stack/crds/go.mod with a version") from None


DOWNLOAD_TIMEOUT = 600.0
"""Seconds one `go mod download` may take (Kubernetes' module is the largest, tens of MB)."""
PROGRESS_EVERY = 15.0
"""Seconds between the "still downloading" lines of a slow first download."""


def _escaped(module: str) -> str:
    """The module path as the Go module cache spells it: an upper-case letter becomes `!` + lower case."""
    return re.sub(r"[A-Z]", lambda m: "!" + m.group(0).lower(), module)


def _cached(go: str, module: str, version: str, env: dict[str, str]) -> bool:
    done = subprocess.run([go, "env", "GOMODCACHE"], check=False, env=env, capture_output=True, text=True, timeout=60)
    cache = done.stdout.strip()
    return bool(cache) and (Path(cache) / f"{_escaped(module)}@{version}").is_dir()


def _download(go: str, wanted: Pin, env: dict[str, str]) -> tuple[int, str, str]:
    """`go mod download -json MODULE`, saying on stderr what it fetches when the module is not cached yet."""
    where = wanted.gomod_dir.relative_to(STACK_DIR.parent)
    cached = _cached(go, wanted.module, wanted.version, env)
    if not cached:
        print(f"downloading {wanted.module} {wanted.version} (pinned in {where}/go.mod) into the Go module cache, "
              "once...", file=sys.stderr, flush=True)
    started = time.monotonic()
    process = subprocess.Popen([go, "mod", "download", "-json", wanted.module], cwd=wanted.gomod_dir, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while True:
        try:
            out, err = process.communicate(timeout=PROGRESS_EVERY)
            break
        except subprocess.TimeoutExpired:
            elapsed = time.monotonic() - started
            if elapsed >= DOWNLOAD_TIMEOUT:
                process.kill()
                process.communicate()
                raise UpstreamUnavailable(f"expected `go mod download {wanted.module}` to finish within "
                                          f"{DOWNLOAD_TIMEOUT:.0f} s, it did not; check that the Go module proxy "
                                          "is reachable (go env GOPROXY)") from None
            print(f"  still downloading {wanted.module} ({elapsed:.0f} s)", file=sys.stderr, flush=True)
    if not cached and process.returncode == 0:
        print(f"  downloaded {wanted.module} in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return process.returncode, out, err


@functools.cache
def module_dir(module: str) -> Path:
    """The pinned module's files in the Go module cache, downloading them once if needed (saying so)."""
    wanted = pin(module)
    go = shutil.which("go")
    if go is None:
        raise UpstreamUnavailable(f"{module} {wanted.version} is read from the Go module cache, and no `go` "
                                  "command is on PATH; install Go 1.26+ (the real-stack tier needs it too)")
    env = dict(os.environ, GOFLAGS=os.environ.get("GOFLAGS", "") + " -mod=readonly")
    returncode, stdout, stderr = _download(go, wanted, env)
    try:
        info = json.loads(stdout or "{}")
    except json.JSONDecodeError:
        info = {}
    if returncode != 0 or info.get("Error") or not info.get("Dir"):
        problem = info.get("Error") or stderr.strip() or f"exit code {returncode}"
        raise UpstreamUnavailable(f"could not download {module} {wanted.version} (pinned in "
                                  f"{wanted.gomod_dir.relative_to(STACK_DIR.parent)}/go.mod): {problem}; "
                                  "check that the Go module proxy is reachable (go env GOPROXY)")
    if info.get("Version") != wanted.version:
        raise UpstreamUnavailable(f"expected {module} {wanted.version}, the Go command gave "
                                  f"{info.get('Version')}; the go.mod in {wanted.gomod_dir} is inconsistent")
    return Path(info["Dir"])


def upstream_file(module: str, path: str) -> Path:
    """One file of a pinned module (a CRD, a schema), or a clear error naming module, version and path."""
    found = module_dir(module) / path
    if not found.is_file():
        raise UpstreamUnavailable(f"expected {path} in {module} {pin(module).version}, found no such file; "
                                  "the file may have moved in this release: update the path in gpuaas")
    return found


def main() -> int:
    """`python -m gpuaas.upstream` (`make setup`): fetch every pinned module once, up front, so the first
    `gpuaas render` or test run does not; a line for each module it actually downloads, none when cached."""
    try:
        for module in sorted(pins()):
            module_dir(module)
    except UpstreamUnavailable as problem:
        print(f"gpuaas.upstream: {problem}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
