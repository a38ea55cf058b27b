"""OCI image archives (gpuaas.cluster.oci): what `ctr images import` and the kubelet rely on."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from pathlib import Path

from gpuaas.cluster.oci import ImageConfig, write_image_archive, write_layer


def _tree(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "tool").write_text("#!/bin/sh\necho hi\n")
    (root / "bin" / "tool").chmod(0o755)
    os.link(root / "bin" / "tool", root / "bin" / "tool-link")
    (root / "bin" / "alias").symlink_to("tool")
    (root / "proc" / "self").mkdir(parents=True)
    (root / "proc" / "self" / "status").write_text("excluded")
    return root


def test_layer_is_reproducible_and_keeps_links_and_modes(tmp_path: Path) -> None:
    root = _tree(tmp_path / "root")
    first = write_layer(root, tmp_path / "a.tar", excluded=["proc"])
    os.utime(root / "bin" / "tool", (2_000_000_000, 2_000_000_000))  # a later mtime is clamped
    second = write_layer(root, tmp_path / "b.tar", excluded=["proc"])

    assert first.digest == second.digest
    assert first.digest == "sha256:" + hashlib.sha256((tmp_path / "a.tar").read_bytes()).hexdigest()
    with tarfile.open(tmp_path / "a.tar") as layer:
        members = {m.name: m for m in layer.getmembers()}
    assert members["bin/tool"].mode == 0o755 and members["bin/tool"].isreg()
    assert members["bin/tool-link"].islnk() and members["bin/tool-link"].linkname == "bin/tool"
    assert members["bin/alias"].issym() and members["bin/alias"].linkname == "tool"
    assert members["proc"].isdir() and "proc/self" not in members  # kept, empty


def test_extra_files_are_added_without_touching_the_tree(tmp_path: Path) -> None:
    root = _tree(tmp_path / "root")
    blob = write_layer(root, tmp_path / "l.tar", extra_files={"etc/passwd": (b"root:x:0:0::/:/bin/sh\n", 0o644)})

    with tarfile.open(blob.path) as layer:
        assert layer.extractfile("etc/passwd").read() == b"root:x:0:0::/:/bin/sh\n"
    assert not (root / "etc").exists()


def test_archive_is_an_oci_layout_naming_the_image_for_containerd(tmp_path: Path) -> None:
    root = _tree(tmp_path / "root")
    layer = write_layer(root, tmp_path / "l.tar")
    config = ImageConfig(entrypoint=["/bin/tool"], cmd=["--x"], env={"A": "1"}, working_dir="/w", user="1001",
                         labels={"name": "t"})
    digest = write_image_archive(tmp_path / "image.tar", "gpuaas.local/t:dev", [layer], config)

    with tarfile.open(tmp_path / "image.tar") as archive:
        read = {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}
    for name, content in read.items():  # every blob is named by its digest
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(content).hexdigest() == name.rsplit("/", 1)[1]
    assert json.loads(read["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(read["index.json"])
    assert index["manifests"][0]["digest"] == digest
    assert index["manifests"][0]["annotations"] == {"io.containerd.image.name": "gpuaas.local/t:dev",
                                                    "org.opencontainers.image.ref.name": "dev"}
    manifest = json.loads(read[f"blobs/sha256/{digest.split(':')[1]}"])
    image = json.loads(read[f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}"])
    assert image["rootfs"]["diff_ids"] == [layer.digest] == [m["digest"] for m in manifest["layers"]]
    assert image["config"] == {"Entrypoint": ["/bin/tool"], "Cmd": ["--x"], "Env": ["A=1"], "WorkingDir": "/w",
                               "User": "1001", "Labels": {"name": "t"}}


def test_overlay_whiteouts_become_oci_whiteouts(tmp_path: Path) -> None:
    upper = tmp_path / "upper"
    (upper / "etc" / "gone-dir").mkdir(parents=True)
    os.mknod(upper / "etc" / "removed", 0o600 | 0o020000, os.makedev(0, 0))  # overlayfs: char device 0:0
    os.setxattr(upper / "etc" / "gone-dir", "trusted.overlay.opaque", b"y")

    with tarfile.open(write_layer(upper, tmp_path / "l.tar").path) as layer:
        names = set(layer.getnames())
    assert "etc/.wh.removed" in names and "etc/removed" not in names
    assert "etc/gone-dir/.wh..wh..opq" in names
