"""A published entry and the checks every reader of one makes: :class:`Entry`, :func:`read_manifest` (the shape,
once, for every reader) and :func:`check_entry` (sizes, digests, no unlisted file), with the cheap parts apart for
listings that must not hash.

Every read goes through the entry's directory opened once (:class:`~trtwarm.volume.verified.Dir`): the manifest and
the envelope are read through its descriptor and kept in memory, each listed file is opened once and checked through
its descriptor, and a checked entry carries those descriptors (:attr:`Entry.opened`) so that what is used afterwards
(the trust check, the load check, the hand-off, the push) is what was checked.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtwarm import strictjson
from trtwarm.errors import EntryInvalid
from trtwarm.fs.ops import TooLarge
from trtwarm.volume.files import MANIFEST, SIGNATURE, check_stats, listed_files
from trtwarm.volume.schema import check_manifest
from trtwarm.volume.verified import Bytes, Checker, Dir, check_files

MANIFEST_LIMIT = 1 << 20
SIGNATURE_LIMIT = 1 << 20


@dataclass(frozen=True)
class Entry:
    """A published, verified entry; :attr:`opened`: the verified bytes of its files and its envelope as read (None
    for an entry only described, e.g. a remote ref's manifest)."""

    path: Path
    manifest: dict[str, Any]
    opened: Bytes | None = field(default=None, compare=False, repr=False)

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

    def close(self) -> None:
        """Let go of the verified bytes' descriptors (nothing to do for an entry that holds none)."""
        if self.opened is not None:
            self.opened.close()


def _parse_manifest(data: bytes, path: Path) -> dict[str, Any]:
    try:
        doc = strictjson.loads(data, limit=MANIFEST_LIMIT)
    except strictjson.JSONRefused as exc:
        raise EntryInvalid("manifest.json is not valid JSON" if exc.syntax else f"manifest.json is refused: {exc}") \
            from None
    check_manifest(doc)  # the one shape check (trtwarm.volume.schema): every reader of a manifest comes here
    listed_files(doc)
    name, parent = path.name, path.parent.name
    named = name.rpartition("--")[2] if "--" in name and parent == "entries" else None  # <name>--<key16>
    if named is not None and named != doc["key"][:16]:  # init finds it by that name: every reader judges it alike
        raise EntryInvalid(f"manifest.json is for another key ({doc['key'][:16]}) than the directory's name says "
                           f"({named[:16]})")
    return doc


def manifest_in(directory: Dir) -> dict[str, Any]:
    """Read and shape-check ``manifest.json`` through the entry directory's descriptor.

    :raises EntryInvalid: missing, huge, garbage, incomplete, a field of the wrong type, a key document that does
        not hash to the key (:class:`~trtwarm.errors.ManifestInvalid` for the shape)
    """
    try:
        data = directory.read(MANIFEST, MANIFEST_LIMIT)
    except FileNotFoundError:
        raise EntryInvalid("manifest.json is missing") from None
    except TooLarge:
        raise EntryInvalid(f"manifest.json is larger than {MANIFEST_LIMIT} bytes") from None
    except OSError as exc:
        raise EntryInvalid(f"manifest.json is unreadable ({exc.strerror})") from None
    return _parse_manifest(data, directory.path)


#: the envelope problem of an entry without ``manifest.sig.json``
UNSIGNED = "unsigned (no manifest.sig.json)"


def envelope_in(directory: Dir) -> tuple[Any, str | None]:
    """``(the parsed envelope, whatever JSON it is, None)`` of ``manifest.sig.json`` read through the entry
    directory's descriptor, or ``(None, why not)``: :data:`UNSIGNED`, or unreadable, huge, not JSON. Never an
    exception: the trust check judges it."""
    try:
        return strictjson.loads(directory.read(SIGNATURE, SIGNATURE_LIMIT), limit=SIGNATURE_LIMIT), None
    except FileNotFoundError:
        return None, UNSIGNED
    except (OSError, TooLarge, EntryInvalid, strictjson.JSONRefused):
        return None, "manifest.sig.json is unreadable, huge or not JSON"


def read_manifest(path: Path) -> dict[str, Any]:
    """:func:`manifest_in` of the entry directory at *path* (never followed if it is a link). :raises EntryInvalid:"""
    with Dir.open(path.parent, path) as directory:
        return manifest_in(directory)


def check_entry(path: Path, key: str | None, *, digest: bool = True, checker: Checker | None = None,
                keep: bool = False, trust: Callable[[Entry], None] | None = None) -> Entry:
    """Verify the entry at *path* (for *key*, when given): its manifest, every listed file a regular file of its
    size (and, with *digest*, bytes: *checker*, default its digests), and no unlisted file; all through descriptors.

    :param keep: return the entry with its verified bytes open (:attr:`Entry.opened`; close it with
        :meth:`Entry.close`), for a caller that uses them (loads, hands over, pushes); else they are closed
    :param checker: how each file's bytes are checked (:data:`~trtwarm.volume.verified.Checker`), e.g. the node's
        stamps, or the hand-off copy made while hashing
    :param trust: a check of the manifest and envelope as read (the trust policy), run before any listed file is
        opened: an entry no trusted key signed is refused before its bytes are read, however many it claims
    :raises EntryInvalid: with the reason
    """
    with Dir.open(path.parent.parent, path) as directory:  # its parent (entries/) reached without a link too
        manifest = manifest_in(directory)
        if key is not None and manifest["key"] != key:
            raise EntryInvalid(f"manifest.json is for another key ({str(manifest['key'])[:16]})")
        entry = Entry(path, manifest, Bytes(*envelope_in(directory)))
        if trust is not None:
            trust(entry)
        check_stats(entry.files, directory.scan(), entry.schema)
        if digest:
            check_files(directory, entry.files, checker, into=entry.opened)
    if not keep:
        entry.close()  # the envelope as read stays with it
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


__all__ = ["MANIFEST_LIMIT", "SIGNATURE_LIMIT", "UNSIGNED", "Entry", "check_engine_stat", "check_entry",
           "check_entry_stats", "envelope_in", "manifest_in", "read_manifest"]
