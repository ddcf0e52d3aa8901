"""Engine *images* for Kubernetes image volumes (``trtwarm prebuild --oci-image REGISTRY/REPOSITORY:TAG``).

containerd mounts images, not empty-config artifacts, so this is a real image: an image config with ``os``,
``architecture`` and ``rootfs.diff_ids``, and one **uncompressed** tar layer (engines do not compress) that unpacks
to the volume layout::

    cache/VERSION, cache/CACHEDIR.TAG
    cache/entries/<entry>/manifest.json, manifest.sig.json (when signed), and every file the manifest lists

and nothing else (no ``.locks``, ``.staging``, ``.uses`` or other working directories). Every file is mode 0644,
every directory 0755 (image volumes ignore ``fsGroup``), owner 0:0, mtime 0: the same entries give the same layer,
the same digest. A Pod mounts it read-only at ``/models`` and ``trtwarm init --seed-cache /models/cache`` serves it.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import platform
import tarfile
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

from trtwarm.errors import VolumeError
from trtwarm.remote.oci.client import OciClient
from trtwarm.remote.oci.layout import MANIFEST, canonical, descriptor
from trtwarm.remote.repo import manifest_files
from trtwarm.volume.entry import Entry
from trtwarm.volume.files import MANIFEST as ENTRY_MANIFEST
from trtwarm.volume.files import SIGNATURE
from trtwarm.volume.layout import CACHEDIR_TAG, LAYOUT_VERSION

log = logging.getLogger("trtwarm.remote")
IMAGE_TYPE = "application/vnd.trtwarm.engines.v1"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64le"}


class _Hashing(io.RawIOBase):
    """A write-only file that hashes and counts what passes through to *out*."""

    def __init__(self, out: BinaryIO) -> None:
        self.out, self.digest, self.size = out, hashlib.sha256(), 0

    def writable(self) -> bool:  # noqa: D102
        return True

    def write(self, data: Any) -> int:  # noqa: D102
        self.digest.update(data)
        self.size += len(data)
        return self.out.write(data)


def _info(name: str, size: int = 0, directory: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    info.mode, info.size = (0o755, 0) if directory else (0o644, size)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


def entry_files(entry: Entry) -> dict[str, bytes | None]:
    """What of the verified *entry* goes into the image, by name: its manifest and its signature (when signed) as
    read when it was checked (bytes), and each listed file (None: read from its verified descriptor)."""
    seals = {ENTRY_MANIFEST: _json(entry.manifest)}
    if entry.opened is not None and isinstance(entry.opened.envelope, dict):
        seals[SIGNATURE] = _json(entry.opened.envelope)
    return {**seals, **{row["path"]: None for row in manifest_files(entry.manifest)}}


def _json(doc: dict[str, Any]) -> bytes:
    """A seal's bytes, as the volume's publish writes them (the same document, the same bytes: the same layer)."""
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def write_layer(entries: list[Entry], out: BinaryIO) -> tuple[str, int]:
    """Write the uncompressed layer of the verified *entries* to *out*: each file from the descriptor that was checked
    (:attr:`Entry.opened`, through ``/proc/<pid>/fd/<n>``), never the entry's path opened again (a link swapped in
    there since is never followed), the manifest and signature as read, ``VERSION`` and ``CACHEDIR.TAG`` as the
    layout writes them.

    :return: ``(sha256 hex, size)``: the layer's digest, which is also its diff_id
    """
    sink = _Hashing(out)
    with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        for name in ("cache", "cache/entries"):
            tar.addfile(_info(name, directory=True))
        for name, text in (("VERSION", f"{LAYOUT_VERSION}\n"), ("CACHEDIR.TAG", CACHEDIR_TAG)):
            tar.addfile(_info(f"cache/{name}", len(text.encode())), io.BytesIO(text.encode()))
        for entry in sorted(entries, key=lambda e: e.name):
            assert entry.opened is not None, "only a verified entry is packed"
            base, dirs = f"cache/entries/{entry.name}", set()
            tar.addfile(_info(base, directory=True))
            for rel, data in sorted(entry_files(entry).items()):
                parts = rel.split("/")
                for depth in range(1, len(parts)):
                    sub = "/".join(parts[:depth])
                    if sub not in dirs:
                        dirs.add(sub)
                        tar.addfile(_info(f"{base}/{sub}", directory=True))
                if data is not None:
                    tar.addfile(_info(f"{base}/{rel}", len(data)), io.BytesIO(data))
                    continue
                with open(entry.opened.proc(rel), "rb") as handle:  # the file checked, whatever its name leads to
                    tar.addfile(_info(f"{base}/{rel}", os.fstat(handle.fileno()).st_size), handle)
    return sink.digest.hexdigest(), sink.size


def image_config(diff_id: str, keys: list[str]) -> bytes:
    """The image config: a real one (containerd mounts images), deterministic."""
    return canonical({"architecture": _ARCH.get(platform.machine(), platform.machine()), "os": "linux",
                      "config": {"Labels": {"dev.trtwarm.entries": str(len(keys))}},
                      "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
                      "history": [{"created_by": "trtwarm prebuild --oci-image"}]})


def push_image(client: OciClient, tag: str, cache: Path, entries: list[Entry]) -> str:
    """Build the engine image of the verified *entries* (of the cache at *cache*) and push it as *tag*.
    :return: its digest

    :raises RemoteError: the registry refused it; :raises VolumeError: an entry's file cannot be read
    """
    with tempfile.TemporaryFile(dir=cache / ".staging" if (cache / ".staging").is_dir() else None) as layer:
        try:
            sha, size = write_layer(entries, layer)  # type: ignore[arg-type]
        except OSError as exc:
            raise VolumeError(f"cannot read an entry for the engine image: {exc}") from None
        keys = sorted(entry.key for entry in entries)
        if client.blob_size(f"sha256:{sha}") != size:
            layer.seek(0)
            client.upload(f"sha256:{sha}", layer, size)  # type: ignore[arg-type]
    config = image_config(sha, keys)
    config_desc = descriptor(CONFIG_TYPE, config)
    if client.blob_size(config_desc["digest"]) != len(config):
        client.upload(config_desc["digest"], config, len(config))
    manifest = canonical({"schemaVersion": 2, "mediaType": MANIFEST, "artifactType": IMAGE_TYPE,
                          "config": config_desc,
                          "layers": [{"mediaType": LAYER_TYPE, "digest": f"sha256:{sha}", "size": size}],
                          "annotations": {"dev.trtwarm.keys": ",".join(keys)}})
    response = client.put_manifest(tag, manifest, MANIFEST)
    if response.status not in (200, 201):
        raise client.fail(response, "PUT", f"image {tag}")
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    log.info("pushed the engine image %s:%s@%s: %d entries, layer %.1f MiB", client.remote.url.removeprefix("oci://"),
             tag, digest, len(entries), size / 2**20)
    return digest


__all__ = ["CONFIG_TYPE", "IMAGE_TYPE", "LAYER_TYPE", "entry_files", "image_config", "push_image", "write_layer"]
