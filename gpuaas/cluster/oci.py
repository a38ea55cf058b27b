"""OCI image archives written from directory trees: how images reach containerd without a registry.

Why our own writer: this machine has no container engine and no registry, and an OCI image is only
a few JSON documents naming tar layers by their sha256. `ctr -n k8s.io images import ARCHIVE` reads
exactly that (the image layout of the OCI image spec, in one tar), so a layer per directory tree and
one manifest are all the kubelet's runtime needs. Layers are uncompressed tars: they never leave this
machine, and gzip would cost most of the build time for nothing.

Layers are reproducible: entries sorted, owners kept, times clamped to a fixed epoch, so the same
tree gives the same digest and containerd shares the layer between images and rebuilds.

Overlay upper directories (how `gpuaas.cluster.images` builds a layer on top of another) carry
deletions as overlayfs whiteouts (character device 0:0, opaque-directory xattr); they become OCI
whiteouts (`.wh.NAME`, `.wh..wh..opq`) here.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
CONTAINERD_NAME_ANNOTATION = "io.containerd.image.name"
REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"
LAYER_EPOCH = 1_700_000_000
"""Modification time every layer entry is clamped to (2023-11-14), so digests do not depend on when."""


@dataclass(frozen=True)
class Blob:
    """One content-addressed blob of an image: a layer tar, a config or a manifest."""

    digest: str
    size: int
    path: Path

    def descriptor(self, media_type: str, annotations: dict[str, str] | None = None) -> dict:
        """The OCI descriptor that points at this blob."""
        described: dict = {"mediaType": media_type, "digest": self.digest, "size": self.size}
        if annotations:
            described["annotations"] = annotations
        return described


@dataclass(frozen=True)
class ImageConfig:
    """What a container runtime needs from an image besides its files (the OCI config's `config`)."""

    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    working_dir: str = "/"
    user: str = ""
    labels: dict[str, str] = field(default_factory=dict)

    def as_oci(self) -> dict:
        """The `config` object of an OCI image configuration."""
        config: dict = {"Env": [f"{key}={value}" for key, value in self.env.items()],
                        "WorkingDir": self.working_dir}
        if self.entrypoint:
            config["Entrypoint"] = list(self.entrypoint)
        if self.cmd:
            config["Cmd"] = list(self.cmd)
        if self.user:
            config["User"] = self.user
        if self.labels:
            config["Labels"] = dict(self.labels)
        return config


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def _walk(root: Path, excluded: frozenset[str]) -> Iterator[Path]:
    """Every path under `root` (directories before their contents, sorted), minus excluded subtrees."""
    for directory, subdirectories, files in os.walk(root):
        here = Path(directory)
        entries = sorted(subdirectories + files)
        subdirectories[:] = sorted(name for name in subdirectories
                                   if (here / name).relative_to(root).as_posix() not in excluded)
        yield from (here / name for name in entries)
        # Excluded directories are listed (kept, empty) but not descended into; os.walk does not
        # descend into symlinked directories either: they are entries like files.


def _is_whiteout(path: Path, info: os.stat_result) -> bool:
    return stat.S_ISCHR(info.st_mode) and os.major(info.st_rdev) == 0 and os.minor(info.st_rdev) == 0


def _is_opaque(path: Path) -> bool:
    for attribute in ("trusted.overlay.opaque", "user.overlay.opaque"):
        try:
            if os.getxattr(path, attribute, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return False


def _entry(archive: tarfile.TarFile, name: str, kind: bytes, mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = LAYER_EPOCH
    return info


def write_layer(root: Path, destination: Path, *, excluded: Iterable[str] = (),
                extra_files: dict[str, tuple[bytes, int]] | None = None) -> Blob:
    """Tar the tree under `root` as one OCI layer at `destination`; return it as a blob.

    `excluded` are paths relative to `root` left out with everything under them (their directory
    itself is kept empty: `/proc` must exist for a container). `extra_files` adds files that are not
    on disk, `{"etc/passwd": (bytes, mode)}`. Hard links stay hard links; overlay whiteouts become
    OCI whiteouts.
    """
    excluded_set = frozenset(excluded)
    destination.parent.mkdir(parents=True, exist_ok=True)
    seen_inodes: dict[tuple[int, int], str] = {}
    with tarfile.open(destination, "w", format=tarfile.PAX_FORMAT) as archive:
        for path in _walk(root, excluded_set):
            relative = path.relative_to(root).as_posix()
            info = path.lstat()
            if _is_whiteout(path, info):
                parent, _, name = relative.rpartition("/")
                whiteout = f"{parent}/.wh.{name}" if parent else f".wh.{name}"
                archive.addfile(_entry(archive, whiteout, tarfile.REGTYPE))
                continue
            entry = archive.gettarinfo(str(path), arcname=relative)
            entry.mtime = min(int(entry.mtime), LAYER_EPOCH)
            entry.uname = entry.gname = ""
            if entry.isreg() and info.st_nlink > 1:
                key = (info.st_dev, info.st_ino)
                if key in seen_inodes:
                    entry.type = tarfile.LNKTYPE
                    entry.linkname = seen_inodes[key]
                    entry.size = 0
                    archive.addfile(entry)
                    continue
                seen_inodes[key] = relative
            if entry.isreg():
                with path.open("rb") as handle:
                    archive.addfile(entry, handle)
            else:
                archive.addfile(entry)
            if entry.isdir() and _is_opaque(path):
                archive.addfile(_entry(archive, f"{relative}/.wh..wh..opq", tarfile.REGTYPE))
        for name, (content, mode) in sorted((extra_files or {}).items()):
            entry = _entry(archive, name, tarfile.REGTYPE, mode)
            entry.size = len(content)
            archive.addfile(entry, io.BytesIO(content))
    return Blob(_sha256_file(destination), destination.stat().st_size, destination)


def _json_bytes(document: dict) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def write_image_archive(destination: Path, reference: str, layers: list[Blob], config: ImageConfig,
                        *, created: str = "2023-11-14T22:13:20Z") -> str:
    """Write an OCI image layout tar holding one linux/amd64 image named `reference`.

    Returns the manifest digest (what containerd reports as the image's digest). The archive names
    the image with containerd's own annotation, so `ctr images import` registers it under
    `reference` exactly, and with the OCI ref-name annotation (the tag) for other readers.
    """
    image_config = {
        "architecture": "amd64", "os": "linux", "created": created,
        "config": config.as_oci(),
        "rootfs": {"type": "layers", "diff_ids": [layer.digest for layer in layers]},
        "history": [{"created": created, "created_by": f"gpuaas.cluster.oci layer {index}"}
                    for index, _ in enumerate(layers)],
    }
    config_bytes = _json_bytes(image_config)
    config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    manifest = {
        "schemaVersion": 2, "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": config_digest, "size": len(config_bytes)},
        "layers": [layer.descriptor(LAYER_MEDIA_TYPE) for layer in layers],
    }
    manifest_bytes = _json_bytes(manifest)
    manifest_digest = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
    tag = reference.rsplit(":", 1)[1] if ":" in reference.rsplit("/", 1)[-1] else "latest"
    index = {
        "schemaVersion": 2, "mediaType": INDEX_MEDIA_TYPE,
        "manifests": [{
            "mediaType": MANIFEST_MEDIA_TYPE, "digest": manifest_digest, "size": len(manifest_bytes),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {CONTAINERD_NAME_ANNOTATION: reference, REF_NAME_ANNOTATION: tag},
        }],
    }
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(destination, "w", format=tarfile.PAX_FORMAT) as archive:
        def add_bytes(name: str, content: bytes) -> None:
            entry = _entry(archive, name, tarfile.REGTYPE)
            entry.size = len(content)
            archive.addfile(entry, io.BytesIO(content))

        add_bytes("oci-layout", _json_bytes({"imageLayoutVersion": "1.0.0"}))
        add_bytes("index.json", _json_bytes(index))
        add_bytes(f"blobs/sha256/{config_digest.split(':')[1]}", config_bytes)
        add_bytes(f"blobs/sha256/{manifest_digest.split(':')[1]}", manifest_bytes)
        written = set()
        for layer in layers:
            if layer.digest in written:
                continue
            written.add(layer.digest)
            archive.add(str(layer.path), arcname=f"blobs/sha256/{layer.digest.split(':')[1]}")
    return manifest_digest
