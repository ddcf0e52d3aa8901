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
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from trtwarm.errors import EntryInvalid
from trtwarm.fs.ops import sha256_file
from trtwarm.volume.chunks import chunk_fields, chunk_problem, hash_file

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
    """``lstat`` of every non-directory under *root*, and of every empty directory (a listed file replaced by a
    directory is "not a regular file"), by relative POSIX path (subdirectories followed, links not).

    :raises EntryInvalid: *root* or a subdirectory cannot be read
    """
    found: dict[str, os.stat_result] = {}
    pending = [("", str(root))]
    while pending:
        prefix, path = pending.pop()
        try:
            with os.scandir(path) as it:
                items = [(e.name, e.path, e.stat(follow_symlinks=False)) for e in it]
        except OSError as exc:
            raise EntryInvalid(f"entry directory {prefix or '.'} is unreadable ({exc.strerror})") from None
        if not items and prefix:
            found[prefix.rstrip("/")] = os.lstat(path)
        for name, full, st in items:
            rel = f"{prefix}{name}"
            if stat.S_ISDIR(st.st_mode):
                pending.append((rel + "/", full))
            else:
                found[rel] = st
    return found


def list_built(staging: Path, engine_file: str) -> list[dict[str, Any]]:
    """Hash every file a build left in *staging*: the manifest's ``files``, sorted by path, with chunk digests for a
    file larger than one chunk (see :mod:`trtwarm.volume.chunks`). Empty directories (a build tool's scratch space)
    are removed, since an entry holds only listed files.

    :raises EntryInvalid: the build left a symlink or something that is not a regular file
    """
    files = []
    for rel, st in sorted(scan_files(staging).items()):
        if rel in SEALS:
            continue
        if stat.S_ISDIR(st.st_mode):
            _remove_empty(staging, rel)
            continue
        if not stat.S_ISREG(st.st_mode):
            kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file"
            raise EntryInvalid(f"the build left {rel}, which is {kind}")
        digest, size, chunks = hash_file(staging / rel)
        files.append({"path": rel, "role": role_of(rel, engine_file), "bytes": size, "sha256": digest,
                      **chunk_fields(size, chunks)})
    return files


def _remove_empty(staging: Path, rel: str) -> None:
    """Remove the empty directory *rel* and its parents that become empty, up to (not including) *staging*."""
    path = staging / rel
    while path != staging:
        try:
            path.rmdir()
        except OSError:  # not empty: it holds other files
            return
        path = path.parent


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


#: a per-file digest hook: ``(path, the manifest's digest) -> the file's digest`` (see :mod:`trtwarm.volume.stamps`)
FileDigest = Callable[[Path, str], str]


def _sha256(path: Path, _expected: str) -> str:
    return sha256_file(path)[0]


def check_digests(root: Path, files: list[dict[str, Any]], file_digest: FileDigest | None = None) -> None:
    """Hash every listed file (through *file_digest*, when given). :raises EntryInvalid: a SHA-256 differs from the
    manifest (corrupt)."""
    digest_of = file_digest or _sha256
    for item in files:
        if digest_of(root / item["path"], item["sha256"]) != item["sha256"]:
            what = "engine" if item["role"] == "engine" else item["path"]
            raise EntryInvalid(f"{what} SHA-256 does not match the manifest (corrupt)")


__all__ = ["MANIFEST", "ROLES", "SCHEMA", "SEALS", "SIGNATURE", "FileDigest", "check_digests", "check_stats",
           "list_built", "listed_files", "role_of", "scan_files"]
