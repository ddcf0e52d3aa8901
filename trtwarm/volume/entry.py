"""A published entry and the checks every reader of one makes: :class:`Entry`, :func:`read_manifest` (the shape,
once, for every reader) and :func:`check_entry` (sizes, digests, no unlisted file), with the cheap parts apart for
listings that must not hash."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtwarm import strictjson
from trtwarm.errors import EntryInvalid
from trtwarm.fs import safe
from trtwarm.fs.ops import TooLarge, read_bounded
from trtwarm.volume.files import MANIFEST, FileDigest, check_digests, check_stats, listed_files, scan_files
from trtwarm.volume.schema import check_manifest

MANIFEST_LIMIT = 1 << 20


@dataclass(frozen=True)
class Entry:
    """A published, verified entry."""

    path: Path
    manifest: dict[str, Any]

    @property
    def name(self) -> str:
        """The entry's directory name."""
        return self.path.name

    @property
    def key(self) -> str:
        """The full key."""
        return str(self.manifest["key"])

    @property
    def engine(self) -> Path:
        """The engine file."""
        return self.path / str(self.manifest["engine_file"])

    @property
    def files(self) -> list[dict[str, Any]]:
        """The listed files (``path``, ``role``, ``bytes``, ``sha256``); a schema-1 entry's engine alone."""
        return listed_files(self.manifest)

    @property
    def schema(self) -> int:
        """The manifest's schema (1: engine only; 2: every file)."""
        schema = self.manifest.get("schema", 1)
        return schema if isinstance(schema, int) else 1


def read_manifest(path: Path) -> dict[str, Any]:
    """Read and shape-check ``<entry>/manifest.json`` (:func:`trtwarm.volume.schema.check_manifest`, then its files).

    :raises EntryInvalid: missing, huge, garbage, incomplete, a field of the wrong type, a key document that does
        not hash to the key (:class:`~trtwarm.errors.ManifestInvalid` for the shape)
    """
    try:
        doc = strictjson.loads(read_bounded(os.path.join(path, MANIFEST), MANIFEST_LIMIT), limit=MANIFEST_LIMIT)
    except FileNotFoundError:
        raise EntryInvalid("manifest.json is missing") from None
    except TooLarge:
        raise EntryInvalid(f"manifest.json is larger than {MANIFEST_LIMIT} bytes") from None
    except strictjson.JSONRefused as exc:
        raise EntryInvalid(f"manifest.json is not valid JSON ({exc})") from None
    except OSError as exc:
        raise EntryInvalid(f"manifest.json is unreadable ({exc.strerror})") from None
    check_manifest(doc)  # the one shape check (trtwarm.volume.schema): every reader of a manifest comes here
    listed_files(doc)
    name, parent = os.path.basename(path), os.path.basename(os.path.dirname(path))
    named = name.rpartition("--")[2] if "--" in name and parent == "entries" else None  # <name>--<key16>
    if named is not None and named != doc["key"][:16]:  # init finds it by that name: every reader judges it alike
        raise EntryInvalid(f"manifest.json is for another key ({doc['key'][:16]}) than the directory's name says "
                           f"({named[:16]})")
    return doc


def check_entry(path: Path, key: str | None, *, digest: bool = True, file_digest: FileDigest | None = None) -> Entry:
    """Verify the entry at *path* (for *key*, when given): every listed file's size (and, with *digest*, SHA-256),
    and no unlisted file. :raises EntryInvalid: with the reason.

    :param file_digest: how each listed file's digest is obtained (default: hash it); e.g.
        :meth:`trtwarm.volume.stamps.StampBook.digest`, which skips the hash of a file a trusted stamp vouches for
    """
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):  # a link to a directory elsewhere is never followed
            raise EntryInvalid(f"the entry is {safe.what_is(os.lstat(path))}, not a directory (not followed)")
    except FileNotFoundError:
        raise EntryInvalid("the entry directory is missing") from None
    entry = Entry(path, read_manifest(path))
    if key is not None and entry.key != key:
        raise EntryInvalid(f"manifest.json is for another key ({entry.key[:16]})")
    check_entry_stats(entry, scan_files(path))
    if digest:
        check_digests(path, entry.files, file_digest)
    return entry


def check_entry_stats(entry: Entry, found: dict[str, os.stat_result]) -> None:
    """The cheap checks of :func:`check_entry` on the entry's files as :func:`~trtwarm.volume.files.scan_files`
    found them (no hashing). :raises EntryInvalid:"""
    check_stats(entry.files, found, entry.schema)


def check_engine_stat(entry: Entry, st: os.stat_result | None) -> None:
    """The cheap checks of :func:`check_entry` on the engine's ``lstat`` (None: missing). :raises EntryInvalid:"""
    if st is None:
        raise EntryInvalid("engine file is missing")
    if stat.S_ISLNK(st.st_mode):
        raise EntryInvalid("engine file is a symlink")
    if not stat.S_ISREG(st.st_mode):
        raise EntryInvalid("engine file is not a regular file")
    if st.st_size != entry.manifest["engine_bytes"]:
        raise EntryInvalid(f"engine is {st.st_size} bytes, manifest says {entry.manifest['engine_bytes']} (truncated)")


__all__ = ["MANIFEST_LIMIT", "Entry", "check_engine_stat", "check_entry", "check_entry_stats", "read_manifest"]
