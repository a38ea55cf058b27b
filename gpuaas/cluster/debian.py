"""Programs the real node takes from Debian packages: containerd, runc, the CNI plugins, socat, ...

Why a lookup and not a build: these are the distribution's own builds (`make node-packages`, which
`make setup` runs, installs them); the Go programs come from `gpuaas.cluster.binaries`. When one is
missing, the error names its package and the make target.
"""

from __future__ import annotations

import shutil
from pathlib import Path

PACKAGES = {
    "containerd": "containerd", "ctr": "containerd", "runc": "runc", "debootstrap": "debootstrap",
    "socat": "socat", "ip": "iproute2", "openssl": "openssl", "mount": "mount", "unshare": "util-linux",
    "nsenter": "util-linux",
}
"""Program -> the Debian package that installs it."""
CNI_DIR = Path("/usr/lib/cni")
"""Debian's containernetworking-plugins install the bridge, host-local and loopback plugins here."""


class ToolMissing(RuntimeError):
    """A program the node needs is absent; the message says which package and target install it."""


def debian_tool(name: str) -> str:
    """The path of a Debian-packaged tool, or an error naming the package and `make node-packages`."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin:/bin")
    if found is None:
        raise ToolMissing(f"`{name}` not found on PATH: it comes from the Debian package "
                          f"`{PACKAGES.get(name, name)}`; run `make node-packages`")
    return found


def cni_plugin_dir() -> Path:
    """Debian's CNI plugin folder, checked to hold the three plugins the node network uses."""
    missing = [plugin for plugin in ("bridge", "host-local", "loopback") if not (CNI_DIR / plugin).exists()]
    if missing:
        raise ToolMissing(f"CNI plugins {', '.join(missing)} not found in {CNI_DIR}: they come from the "
                          "Debian package `containernetworking-plugins`; run `make node-packages`")
    return CNI_DIR
