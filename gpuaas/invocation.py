"""How the user's shell runs this `gpuaas`, for every command a message tells them to type.

Why: `make demo` installs the CLI into `.venv/bin/`, which is not on PATH until the venv is
activated; a hint printed as `gpuaas audit ...` was answered `gpuaas: command not found`. A hint
names `gpuaas` when PATH finds this very installation, else the path that runs it
(`.venv/bin/gpuaas` from the checkout, an absolute path elsewhere).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def command() -> str:
    """`gpuaas`, `.venv/bin/gpuaas` or `/abs/path/.venv/bin/gpuaas`: what runs this installation's CLI from here."""
    script = Path(sys.prefix) / "bin" / "gpuaas"  # the entry point pip wrote beside this interpreter
    found = shutil.which("gpuaas")
    if not script.is_file():
        return "gpuaas" if found else f"{sys.executable} -m gpuaas.cli"
    try:
        if found and os.path.samefile(found, script):
            return "gpuaas"
    except OSError:
        pass
    relative = os.path.relpath(script)
    return relative if not relative.startswith("..") else str(script)
