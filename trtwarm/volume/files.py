"""The files of an entry (manifest schema 2): what is listed, how it is found on disk, and how it is checked.

An entry directory holds exactly the files its manifest lists, plus ``manifest.json`` and optionally
``manifest.sig.json``. Paths are relative POSIX paths (subdirectories allowed), never absolute, never ``..``, never
symlinks. A file on disk that the manifest does not list is a problem, like a listed file that is missing, of
another size or of another SHA-256.

Schema 1 manifests (before trtwarm listed every file) are read as one ``engine`` file; such an entry is valid only
if its directory holds nothing else (an ONNX Runtime model with external data built by an old trtwarm is damaged:
its ``model.ort.data`` was never hashed, so it is quarantined and rebuilt).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath
from typing import Any

from trtwarm.errors import EntryInvalid
from trtwarm.volume.chunks import CHUNK_BYTES, chunk_fields, chunk_problem
from trtwarm.volume.verified import Bytes, Dir

MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig.json"
SCHEMA = 2
ROLES = ("engine", "data", "runtime-cache", "timing-cache", "context-model", "other")
#: files of an entry that are not listed in its own manifest
SEALS = frozenset({MANIFEST, SIGNATURE})


def role_of(path: str, engine_file: str) -> str:
    """The role of a built file: the builder's returned file is the ``engine``; the rest by name."""
    if path == engine_file:
        return "engine"
    name = PurePosixPath(path).name
    if name.endswith((".data", ".onnx_data", ".bin", ".weights")):
        return "data"  # e.g. ONNX Runtime's model.ort.data: the external initializers of model.ort.onnx
    if name.endswith(".timing.cache") or name == "timing.cache":
        return "timing-cache"
    if name.endswith((".runtime.cache", ".rtcache")):
        return "runtime-cache"
    if name.endswith(("_ctx.onnx", ".ctx.onnx")):
        return "context-model"
    return "other"


def scan_files(root: Path) -> dict[str, os.stat_result]:
    """``lstat`` of every non-directory under the directory *root*, and of every empty directory (a listed file
    replaced by a directory is "not a regular file"), by relative POSIX path: through descriptors, subdirectories
    opened without following a link (:meth:`trtwarm.volume.verified.Dir.scan`).

    :raises EntryInvalid: *root* is a link or not a directory, or it or a subdirectory cannot be read
    """
    with Dir.open(root.parent.parent, root) as directory:
        return directory.scan()


def stage_built(private: Dir, staging: Dir, engine_file: str, mode: int, dir_mode: int) -> tuple[list[dict[str, Any]],
                                                                                               Bytes]:
    """Copy every file a build left in its *private* directory into *staging*, hashing the bytes read from the
    private file as they are copied (so what is signed is what was built, whatever happens in staging later):
    ``(the manifest's files, sorted by path, with chunk digests for a file larger than one chunk; the private files'
    descriptors)``, the latter the verified bytes handed over, loaded and pushed. Empty directories (a build tool's
    scratch space) are not copied: an entry holds only listed files.

    :raises EntryInvalid: the build left a symlink or something that is not a regular file
    """
    rows, found = [], Bytes()
    try:
        for rel, st in sorted(private.scan().items()):
            if rel in SEALS or stat.S_ISDIR(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode):
                kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file"
                raise EntryInvalid(f"the build left {rel}, which is {kind}")
            fd, _st = private.open_file(rel)
            try:
                digest, size, chunks, written = staging.copy_in(fd, rel, CHUNK_BYTES, mode, dir_mode)
            except BaseException:
                os.close(fd)
                raise
            found.add(rel, fd, written)
            rows.append({"path": rel, "role": role_of(rel, engine_file), "bytes": size, "sha256": digest,
                         **chunk_fields(size, chunks)})
    except BaseException:
        found.close()
        raise
    return rows, found


def _safe_path(path: object) -> bool:
    """A relative POSIX path of plain components: not absolute, no empty, ``.`` or ``..`` component, no backslash or
    NUL, not a seal (string operations only: ``ls`` checks every file of every entry)."""
    if not isinstance(path, str) or not path or "\\" in path or "\0" in path or path in SEALS:
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))  # a leading "/" makes an empty part


def listed_files(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``files`` of a manifest (schema 1: its engine alone). :raises EntryInvalid: malformed or unsafe."""
    if doc.get("schema", 1) == 1 or "files" not in doc:
        return [{"path": doc["engine_file"], "role": "engine", "bytes": doc["engine_bytes"],
                 "sha256": doc["engine_sha256"]}]
    files = doc["files"]
    if not isinstance(files, list) or not files:
        raise EntryInvalid("manifest.json has no files list")
    for item in files:
        if not (isinstance(item, dict) and isinstance(item.get("bytes"), int) and isinstance(item.get("sha256"), str)
                and item.get("role") in ROLES):
            raise EntryInvalid("manifest.json has a malformed files item")
        problem = chunk_problem(item)
        if problem:
            raise EntryInvalid(f"manifest.json's row for {item.get('path')!r} {problem}")
        if not _safe_path(item.get("path")):
            raise EntryInvalid(f"manifest.json lists an unsafe path {item.get('path')!r}")
    paths = [item["path"] for item in files]
    if len(set(paths)) != len(paths):
        raise EntryInvalid("manifest.json lists a file twice")
    engines = [item for item in files if item["role"] == "engine"]
    if len(engines) != 1 or engines[0]["path"] != doc["engine_file"] or engines[0]["sha256"] != doc["engine_sha256"] \
            or engines[0]["bytes"] != doc["engine_bytes"]:
        raise EntryInvalid("manifest.json's engine fields disagree with its files list")
    return files


def check_stats(files: list[dict[str, Any]], found: dict[str, os.stat_result], schema: int) -> None:
    """The cheap checks (no hashing): every listed file a regular file of its size; nothing unlisted.

    :raises EntryInvalid: with the first problem found
    """
    for item in files:
        what = "engine file" if item["role"] == "engine" else item["path"]
        st = found.get(item["path"])
        if st is None:
            raise EntryInvalid(f"{what} is missing")
        if stat.S_ISLNK(st.st_mode):
            raise EntryInvalid(f"{what} is a symlink")
        if not stat.S_ISREG(st.st_mode):
            raise EntryInvalid(f"{what} is not a regular file")
        if st.st_size != item["bytes"]:
            raise EntryInvalid(f"{what} is {st.st_size} bytes, manifest says {item['bytes']} (truncated)")
    extra = sorted(set(found) - {item["path"] for item in files} - SEALS)
    if extra:
        if schema == 1:
            raise EntryInvalid(f"schema-1 manifest does not cover {extra[0]} (built by an older trtwarm; rebuild)")
        raise EntryInvalid(f"unlisted file {extra[0]} (not in manifest.json)")


__all__ = ["MANIFEST", "ROLES", "SCHEMA", "SEALS", "SIGNATURE", "check_stats", "listed_files", "role_of",
           "scan_files", "stage_built"]
