"""The manifest index ``<cache>/.manifest-index.json``: what ``ls`` needs of each entry's manifest, so that listing
10,000 entries does not read and parse 10,000 manifests.

A **row** per entry holds its directory's identity ``(inode, mtime_ns, ctime_ns)``, its ``manifest.json``'s identity
``(inode, size, mtime_ns, ctime_ns)``, the names the directory held, and a summary of the manifest (the fields
``ls`` shows: key, engine file and size, creation time, each listed file's path, role and size, and the key
document without its model part). A row is used only while the entry still matches it, checked by stat alone:

* the directory's identity is unchanged, so it holds the same names (adding, removing or renaming a file changes
  the directory's mtime and ctime; ``touch -d`` cannot restore a ctime), and
* ``manifest.json`` (``lstat``) has the recorded identity: any rewrite changes its ctime, a replacement its inode.

The files' own ``lstat`` results (every recorded name, as the directory listing would give them) then go through
the very checks a full read runs (:func:`trtwarm.volume.files.check_stats`: missing, symlink, not a regular file,
wrong size, unlisted): damage is computed on every ``ls`` from the files as they are now; the index only saves the
reading and parsing of manifests that did not change. Anything else (no row, a changed identity, a vanished name, a
subdirectory) is a full read of that entry, exactly as without an index.

Like git's "racily clean" rule (and :mod:`trtwarm.volume.statcache`), an entry whose directory or manifest changed
less than :data:`RACY_SECONDS` before the scan began gets no row: a second change in the same timestamp tick could
otherwise go unseen. This assumes node clocks within that of the volume's (as lease heartbeats already do).

The index is never required and never trusted beyond that: a missing, unreadable, corrupt (its SHA-256 header does
not match), foreign (another schema) or oversized index is an empty one. ``ls`` rewrites it (stage, fsync, rename;
:func:`trtwarm.fs.ops.atomic_write`) after printing, when it found rows missing or gone and can write the volume's
root; a read-only volume is listed the same way, just without it. ``init`` and ``verify`` never read it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import time
from typing import Any

from trtwarm import strictjson
from trtwarm.fs.ops import TooLarge, atomic_write, read_bounded
from trtwarm.volume.files import MANIFEST
from trtwarm.volume.layout import Layout
from trtwarm.volume.statcache import RACY_SECONDS

log = logging.getLogger("trtwarm.index")
INDEX = ".manifest-index.json"
SCHEMA = "trtwarm.manifest-index/v2"  # v2: rows only of manifests trtwarm.volume.schema accepts
_LIMIT = 1 << 28
#: the manifest fields a row keeps besides ``files`` and ``key_document`` (see :class:`trtwarm.lifecycle.inventory.
#: EntryInfo`, ``as_json`` and ``describe``, the only readers of an ``ls`` entry's manifest)
_FIELDS = ("key", "schema", "engine_file", "engine_bytes", "created", "created_utc")

#: ``[dir identity, manifest identity, names, summary, key document]``; on the volume the key document is its
#: number in ``shared`` (entries of one builder and device share one)
Row = list[Any]
Found = dict[str, os.stat_result]


def _dir_id(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_mtime_ns, st.st_ctime_ns]


def _file_id(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def summary(manifest: dict[str, Any], files: list[dict[str, Any]]) -> dict[str, Any]:
    """What a row keeps of a valid *manifest* whose listed *files* are given (``key_document`` apart)."""
    out = {k: manifest[k] for k in _FIELDS if k in manifest}
    out["files"] = [{"path": f["path"], "role": f["role"], "bytes": f["bytes"]} for f in files]
    extra = manifest.get("extra")
    info = extra.get("engine_info") if isinstance(extra, dict) else None
    if isinstance(info, dict):  # without the per-layer list, which ls never shows
        out["extra"] = {"engine_info": {k: v for k, v in info.items() if k != "layer_precisions"}}
    return out


def _key_document(manifest: dict[str, Any]) -> Any:
    doc = manifest.get("key_document")
    return {k: v for k, v in doc.items() if k != "model"} if isinstance(doc, dict) else doc


class ManifestIndex:
    """The rows read from the volume, and the rows of this scan (what :meth:`save` writes)."""

    def __init__(self, rows: dict[str, Row] | None = None, shared: list[Any] | None = None) -> None:
        self._old = rows or {}
        self._shared = shared or []
        self._new: dict[str, Row] = {}
        self._added = False
        self._since = time.time()  # the scan begins: a change after this is in no row (racily clean)

    @classmethod
    def load(cls, layout: Layout) -> ManifestIndex:
        """The volume's index; an empty one when missing, unreadable, corrupt, foreign or oversized."""
        path = layout.root / INDEX
        try:
            header, _, body = read_bounded(path, _LIMIT).partition(b"\n")
            head = strictjson.loads(header, limit=_LIMIT)
            sealed = isinstance(head, dict) and head.get("schema") == SCHEMA \
                and head.get("sha256") == hashlib.sha256(body).hexdigest()
            doc = strictjson.loads(body, limit=_LIMIT) if sealed else None
        except FileNotFoundError:
            return cls()
        except (OSError, TooLarge, ValueError) as exc:
            log.debug("ignoring the manifest index %s: %s", path, exc)
            return cls()
        rows, shared = (doc.get("rows"), doc.get("shared")) if isinstance(doc, dict) else (None, None)
        if not (isinstance(rows, dict) and isinstance(shared, list) and all(map(_key_document_ok, shared))):
            log.debug("ignoring the manifest index %s: foreign, corrupt or malformed", path)
            return cls()
        return cls(rows, shared)

    def lookup(self, name: str, path: str) -> tuple[dict[str, Any], Found] | None:
        """The summary of entry *name* at *path* and its files' ``lstat`` by name, if its row still matches it (see
        the module docstring); None: read it in full."""
        row = self._old.get(name)
        if row is None:
            return None
        try:
            dir_id, file_id, names, summ, ref = row
            kd = self._shared[ref]
            if _dir_id(os.lstat(path)) != dir_id or not _listed(summ.get("files")):
                return None
            found = {}
            for n in names:
                if "/" in n:  # not a name in the entry directory: a corrupt row must not make ls stat elsewhere
                    return None
                st = found[n] = os.lstat(f"{path}/{n}")
                if stat.S_ISDIR(st.st_mode):  # a subdirectory (or "", ".", ".."): read it in full
                    return None
        except OSError:  # a name vanished since the directory's stat: it changed; read it in full
            return None
        except (ValueError, TypeError, IndexError, AttributeError):  # a row of another shape: no row
            return None
        sealed = found.get(MANIFEST)
        if sealed is None or _file_id(sealed) != file_id or len(found) != len(names):
            return None
        summ["key_document"] = kd
        self._new[name] = [dir_id, file_id, names, summ, kd]  # as this scan keeps it (see save)
        return summ, found

    def add(self, name: str, before: os.stat_result, found: Found, manifest: dict[str, Any],
            files: list[dict[str, Any]]) -> None:
        """Record entry *name*, read in full: *before* is its directory's ``lstat`` taken before it was listed,
        *found* the listing, *manifest* its valid manifest listing *files*. Nothing is recorded for an entry changed
        within :data:`RACY_SECONDS` of the scan, one without a manifest or one with a subdirectory."""
        sealed = found.get(MANIFEST)
        if sealed is None or any(stat.S_ISDIR(st.st_mode) for st in found.values()):
            return
        newest = max(before.st_mtime_ns, before.st_ctime_ns, sealed.st_mtime_ns, sealed.st_ctime_ns) / 1e9
        if self._since - newest < RACY_SECONDS:
            return
        self._new[name] = [_dir_id(before), _file_id(sealed), sorted(found), summary(manifest, files),
                           _key_document(manifest)]
        self._added = True

    @property
    def stale(self) -> bool:
        """Whether this scan recorded a row the volume's index lacks, or did not use one it has."""
        return self._added or len(self._new) != len(self._old)

    def save(self, layout: Layout) -> bool:
        """Write this scan's rows atomically (stage, fsync, rename); False when the volume cannot take it."""
        shared: dict[str, int] = {}
        by_id: dict[int, int] = {}  # rows kept from the volume's index share their key documents' objects
        docs: list[Any] = []
        rows = {}
        for name, (dir_id, file_id, names, summ, kd) in sorted(self._new.items()):
            ref = by_id.get(id(kd))
            if ref is None:
                ref = by_id[id(kd)] = shared.setdefault(json.dumps(kd, sort_keys=True), len(shared))
                if ref == len(docs):
                    docs.append(kd)
            rows[name] = [dir_id, file_id, names, {k: v for k, v in summ.items() if k != "key_document"}, ref]
        body = json.dumps({"rows": rows, "shared": docs}, separators=(",", ":")).encode()
        head = json.dumps({"schema": SCHEMA, "sha256": hashlib.sha256(body).hexdigest(), "entries": len(rows),
                           "written": time.time()}).encode()
        try:
            atomic_write(layout.root / INDEX, head + b"\n" + body, layout.file_mode())
        except OSError as exc:  # advisory: read-only, full or foreign-owned volumes list without it
            log.debug("not writing the manifest index: %s", exc.strerror)
            return False
        return True


def _listed(files: object) -> bool:
    """A row's files have the shape the size checks read (the index is sealed, but never trusted with a crash)."""
    return isinstance(files, list) and all(
        isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("bytes"), int)
        and isinstance(f.get("role"), str) for f in files)


def _key_document_ok(doc: object) -> bool:
    """A shared key document has the shape ``ls`` reads (dicts where it looks inside)."""
    if not isinstance(doc, dict):
        return False
    build = doc.get("build") or {}
    return all(isinstance(doc.get(k) or {}, dict) for k in ("builder", "build", "device")) and \
        isinstance(build.get("shapes") or {}, dict) and \
        all(isinstance(s, dict) for s in (build.get("shapes") or {}).values())


__all__ = ["INDEX", "RACY_SECONDS", "SCHEMA", "ManifestIndex", "summary"]
