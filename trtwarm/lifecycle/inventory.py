"""One read-only pass over a cache volume: entries, quarantine, staging, build owners, leases, last uses.

``ls``, ``stats``, ``gc``, ``verify`` and the sidecar's volume metrics all start from :func:`scan`, which never
writes and never re-hashes an engine (``verify`` does that itself). Work is one ``scandir`` per directory plus one
bounded manifest read and one ``lstat`` per file of each entry; ``ls`` reads manifests through the manifest index
(:mod:`trtwarm.lifecycle.manifest_index`), so an unchanged entry costs a ``stat`` of its directory and an ``lstat``
of each of its files, and no manifest read.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import stat
import time
from calendar import timegm
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtwarm.errors import EntryInvalid
from trtwarm.fs import safe
from trtwarm.fs.ops import read_json_object
from trtwarm.lifecycle.entryinfo import FULL_KEY, EntryInfo, OwnerInfo
from trtwarm.lifecycle.manifest_index import ManifestIndex
from trtwarm.volume import leases as leaselib
from trtwarm.volume.files import check_stats, scan_files
from trtwarm.volume.layout import OWN_DIRS, Layout
from trtwarm.volume.schema import salvage
from trtwarm.volume.store import STALE_STAGING_SECONDS, staging_stale
from trtwarm.volume.entry import MANIFEST_LIMIT, Entry, read_manifest

#: the quarantine time in a quarantined entry's name (``<name>.<YYYYmmddTHHMMSSZ>.<reason>.<rand>``)
_STAMP = re.compile(r"\.([0-9]{8}T[0-9]{6}Z)\.")


@dataclass
class Inventory:
    """Everything :func:`scan` found, at time :attr:`now`."""

    layout: Layout
    now: float
    entries: list[EntryInfo]
    quarantined: list[EntryInfo]
    staging: list[tuple[Path, bool]]  # (path, stale)
    owners: list[OwnerInfo]
    leases: dict[str, list[leaselib.Lease]]
    index: ManifestIndex | None = None  # the manifest index the scan read through (and added rows to)

    @property
    def building(self) -> list[OwnerInfo]:
        """Builds in progress: per-key owner records with a live heartbeat."""
        return [o for o in self.owners if o.is_key and not o.stale]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """CPython's cyclic garbage collector paused for a bulk read: a scan makes several objects per entry, none of
    them cyclic garbage, and the collector would walk all of them again each time enough new ones accumulated (about
    a tenth of ``ls`` at 10,000 entries)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _files(path: str) -> dict[str, os.stat_result]:
    """``lstat`` of each item in the directory *path*, by name (one ``scandir``); missing is empty.

    :raises OSError: unreadable (never counted as empty: gc must not take unreadable ``.uses/`` for "never used")
    """
    try:
        with os.scandir(path) as it:
            return {e.name: e.stat(follow_symlinks=False) for e in it}
    except (FileNotFoundError, NotADirectoryError):
        return {}


def dir_bytes(path: str, files: dict[str, os.stat_result] | None = None) -> int:
    """Total size of the regular files under *path*: its own (from *files*, else a listing) and, where it has
    subdirectories (entries are flat; a writer of the volume can nest directories thousands deep, deeper than a path
    can name), theirs through descriptors (:func:`~trtwarm.volume.files.scan_files`). What cannot be read counts 0."""
    files = _files(path) if files is None else files
    total = sum(st.st_size for st in files.values() if stat.S_ISREG(st.st_mode))
    if any(stat.S_ISDIR(st.st_mode) for st in files.values()):
        try:
            total = sum(st.st_size for st in scan_files(Path(path)).values() if stat.S_ISREG(st.st_mode))
        except (OSError, EntryInvalid):
            pass
    return total


def _mtimes(path: Path) -> dict[str, float]:
    try:
        with os.scandir(path) as it:
            return {e.name: e.stat(follow_symlinks=False).st_mtime for e in it}
    except (FileNotFoundError, NotADirectoryError):
        return {}


def _subdirs(path: Path, only_dirs: bool = True) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return sorted((e for e in it if not only_dirs or e.is_dir(follow_symlinks=False)), key=lambda e: e.name)
    except FileNotFoundError:
        return []


def _entry(item: os.DirEntry[str], ctx: _Context) -> EntryInfo:
    if not item.is_dir(follow_symlinks=False):
        return _broken(item, ctx, "a symbolic link, not a directory" if item.is_symlink() else "not a directory")
    hit = ctx.index.lookup(item.name, item.path) if ctx.index is not None else None
    try:  # the directory's stat before its listing: a file added in between changes it (see manifest_index)
        before = os.lstat(item.path) if ctx.index is not None and hit is None else None
        files = hit[1] if hit is not None else _files(item.path)
        info = EntryInfo(item.name, item.path, "ok", dir_bytes(item.path, files))
    except OSError as exc:  # one unreadable entry is that entry's problem; the scan goes on with the rest
        return _broken(item, ctx, f"its directory is unreadable ({exc.strerror})")
    if hit is not None:  # the manifest did not change since it was read: only the files' checks run
        info.manifest = hit[0]
        schema = hit[0].get("schema", 1)  # as Entry.schema reads it
        _check(info, hit[0]["files"], schema if isinstance(schema, int) else 1, files)
    elif ctx.manifests:
        listed = _read(info, files)
        if listed is not None and before is not None and ctx.index is not None:
            ctx.index.add(item.name, before, files, info.manifest, listed)
    elif "manifest.json" not in files:
        info.status, info.problem = "damaged", "manifest.json is missing"
    key = info.manifest.get("key") if info.manifest else ctx.full_keys.get(item.name.rpartition("--")[2])
    info.key = key if isinstance(key, str) else None
    created = info.manifest.get("created")
    sealed = files.get("manifest.json")  # written last, just before the publishing rename
    info.created = created if isinstance(created, (int, float)) else (sealed.st_mtime if sealed else None)
    _use(info, ctx, lambda: item.stat(follow_symlinks=False).st_mtime)
    return info


def _broken(item: os.DirEntry[str], ctx: _Context, why: str) -> EntryInfo:
    """An item under ``entries/`` that cannot be an entry (a file, a symlink, an unreadable directory)."""
    st = item.stat(follow_symlinks=False)
    info = EntryInfo(item.name, item.path, "damaged", st.st_size if stat.S_ISREG(st.st_mode) else 0,
                     problem=why, broken=True)
    info.key = ctx.full_keys.get(item.name.rpartition("--")[2])
    _use(info, ctx, lambda: st.st_mtime)
    return info


def _use(info: EntryInfo, ctx: _Context, fallback: Callable[[], float]) -> None:
    """Last use (marker, leases), leases and build state of *info*, from the volume-wide directories."""
    key = info.key or ""
    marker = ctx.uses.get(key) or info.created
    info.leases = ctx.fresh.get(key, [])
    used = [t for t in (marker, *(lease.heartbeat for lease in info.leases)) if t] if info.leases else \
        [marker] if marker else []
    info.last_used = max(used) if used else fallback()  # the directory's mtime, only when nothing else says
    info.building = key in ctx.building


def _read(info: EntryInfo, files: dict[str, os.stat_result]) -> list[dict[str, Any]] | None:
    """Read the manifest and run the cheap checks (no hashing); return its listed files (None: it is invalid)."""
    try:
        entry = Entry(info.path, read_manifest(info.path))
    except EntryInvalid as exc:
        info.status, info.problem = "damaged", exc.reason
        # keep what the manifest says of the right type, when it can be read, for the listing
        info.manifest = salvage(read_json_object(info.path / "manifest.json", MANIFEST_LIMIT))
        return None
    info.manifest, listed = entry.manifest, entry.files
    flat = not any(stat.S_ISDIR(st.st_mode) for st in files.values())
    try:
        _check(info, listed, entry.schema, files if flat else scan_files(info.path))
    except EntryInvalid as exc:  # a subdirectory that cannot be read
        info.status, info.problem = "damaged", exc.reason
    return listed


def _check(info: EntryInfo, listed: list[dict[str, Any]], schema: int, found: dict[str, os.stat_result]) -> None:
    """The size checks of :func:`~trtwarm.volume.files.check_stats`; a failure marks *info* damaged."""
    try:
        check_stats(listed, found, schema)
    except EntryInvalid as exc:
        info.status, info.problem = "damaged", exc.reason


@dataclass(frozen=True)
class _Context:
    """What every entry's row needs from the volume-wide directories."""

    manifests: bool
    index: ManifestIndex | None
    uses: dict[str, float]
    fresh: dict[str, list[leaselib.Lease]]
    building: set[str]
    full_keys: dict[str, str]  # key16 -> key, from the names under .uses/ and .leases/ (no manifest read)


def _quarantined(item: os.DirEntry[str], manifests: bool) -> EntryInfo:
    stamp, when = _STAMP.search(item.name), None
    if stamp:
        with contextlib.suppress(ValueError):  # a name a writer of the volume made up: 20261399T999999Z
            when = timegm(time.strptime(stamp[1], "%Y%m%dT%H%M%SZ"))
    when = when if when is not None else item.stat(follow_symlinks=False).st_mtime
    reason = item.name[stamp.end():].rsplit(".", 1)[0] if stamp else None
    info = EntryInfo(item.name, item.path, "quarantined", dir_bytes(item.path), problem=reason, last_used=float(when))
    if manifests:  # its labels as its manifest gives them (like the other rows), when that can still be read
        info.manifest = salvage(read_json_object(Path(item.path) / "manifest.json", MANIFEST_LIMIT))
    return info


def _owners(layout: Layout, now: float) -> list[OwnerInfo]:
    from trtwarm.volume.lock import read_owner

    found = []
    for name, mtime in _mtimes(layout.locks).items():
        if not name.endswith(".owner.json"):
            continue
        record = read_owner(layout.locks / name) or {}
        beat = record.get("heartbeat")
        age = now - (beat if isinstance(beat, (int, float)) else mtime)
        found.append(OwnerInfo(name.removesuffix(".owner.json"), layout.locks / name, record, age))
    return found


def scan(layout: Layout, now: float | None = None, *, manifests: bool = True,
         index: ManifestIndex | None = None) -> Inventory:
    """Read the volume once. Never writes, never hashes; a missing volume is an empty inventory.

    :param manifests: read each entry's manifest (key document, cheap size check). Without it an entry's key
        comes from its ``.uses/`` marker's name and its labels from its name, which is several times faster
        on a large volume (``gc``, ``stats`` and the sidecar's metrics need nothing more).
    :param index: read manifests through this :class:`~trtwarm.lifecycle.manifest_index.ManifestIndex` (``ls``):
        an entry that did not change since its row was written is not read; rows for entries read in full are
        added to it (the caller saves it; the scan never writes)
    """
    now = time.time() if now is None else now
    if layout.root.is_dir():  # trtwarm's own directories are never listed (then deleted) through a link: exit 9
        safe.check_tree(layout.root, OWN_DIRS)
    owners = _owners(layout, now)
    building = {o.lock_id for o in owners if o.is_key and not o.stale}
    all_leases = leaselib.scan(layout)
    fresh = {k: kept for k, found in all_leases.items() if (kept := [x for x in found if x.fresh(now)])}
    uses = _mtimes(layout.uses)
    full = {k[:16]: k for k in (*uses, *all_leases, *building) if FULL_KEY.fullmatch(k)}
    ctx = _Context(manifests or index is not None, index, uses, fresh, building, full)
    with collector_paused():
        entries = [_entry(item, ctx) for item in _subdirs(layout.entries, only_dirs=False)]
    quarantined = [_quarantined(item, ctx.manifests) for item in _subdirs(layout.quarantine)]
    # a key whose build lock has a live owner (heartbeat) is being built: its staging directory is not a dead
    # builder's, even where the pid in its name cannot be seen (Pods sharing a hostname, other PID namespaces)
    live = {lock_id[:16] for lock_id in building}
    staging = [(Path(item.path), item.name.split(".")[0] not in live
                and staging_stale(Path(item.path), now, STALE_STAGING_SECONDS)) for item in _subdirs(layout.staging)]
    return Inventory(layout, now, entries, quarantined, staging, owners, all_leases, index)


__all__ = ["Inventory", "collector_paused", "dir_bytes", "scan"]
