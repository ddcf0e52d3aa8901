"""Verified lookup and atomic publication of cache entries.

Publish protocol (the guarantee; the lock only avoids duplicate work): stage the files in a new directory under
``.staging/`` on the same filesystem (each created, written, ``fchmod``-ed and fsynced through its own descriptor,
relative to the staging directory's, which is held from its creation: :class:`~trtwarm.volume.verified.Dir`), write
``manifest.json`` last, fsync the directory, rename it into ``entries/`` once, fsync ``entries/``. A reader sees a
complete entry or none. If the rename finds the target taken, another builder won the race: our copy is discarded
and theirs is used. Nothing here changes a mode or removes a directory through a path a writer of the volume could
swap.

Lookup verifies before it hands anything over: manifest readable, bounded and for this key; every file it lists
(see :mod:`trtwarm.volume.files`) a regular file (not a symlink) of the recorded size and SHA-256, and no file it
does not list; through descriptors, which the returned entry keeps (:mod:`trtwarm.volume.verified`). A failing
entry is renamed into ``.quarantine/`` (a name that fits whatever the entry is called) and reported as a miss, so
the caller rebuilds.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from trtwarm.fs import safe
from trtwarm.fs.atomic import touch_below
from trtwarm.errors import EntryInvalid
from trtwarm.fs.ops import READ_ONLY_ERRNOS, fsync_dir, pid_alive, pid_field
from trtwarm.key import sanitize
from trtwarm.names import bounded
from trtwarm.volume.files import MANIFEST, SIGNATURE
from trtwarm.volume.entry import Entry, check_entry
from trtwarm.volume.layout import Layout
from trtwarm.volume.verified import Checker, Dir

log = logging.getLogger("trtwarm.store")
STALE_STAGING_SECONDS = 24 * 3600.0
_LOST_RACE = frozenset({errno.ENOTEMPTY, errno.EEXIST})


class EngineStore:
    """Lookup, quarantine and publish on one cache volume."""

    def __init__(self, layout: Layout, on_quarantine: Callable[[str, str], None] | None = None) -> None:
        """:param on_quarantine: called with ``(entry name, reason)`` after an entry was quarantined"""
        self.layout = layout
        self.on_quarantine = on_quarantine
        #: ``(entry directory, reason)`` of the last entry that failed verification and could not be quarantined
        #: (a read-only mount): it is still there, and re-verifying it before it changes is wasted work
        self.stuck: tuple[Path, str] | None = None

    def find(self, key: str, name: str | None = None) -> Path | None:
        """Return the directory holding *key* (tried by *name* first, then by the ``--<key16>`` suffix)."""
        if name is not None and os.path.lexists(self.layout.entry_dir(name)):  # a link there is checked, then moved
            return self.layout.entry_dir(name)
        suffix = "--" + key[:16]
        try:
            with os.scandir(self.layout.entries) as it:
                return next((Path(e.path) for e in it if e.name.endswith(suffix)), None)
        except FileNotFoundError:
            return None

    def lookup(self, key: str, name: str | None = None, check: Callable[[Entry], None] | None = None,
               checker: Checker | None = None, trust: Callable[[Entry], None] | None = None) -> Entry | None:
        """Return the verified entry for *key*, holding its verified bytes (:attr:`Entry.opened`: close it when
        done), or None; a bad entry is quarantined and reported as None.

        :param check: an extra check (e.g. a real load) on the verified entry; it raises :class:`EntryInvalid` to
            reject it
        :param checker: see :func:`check_entry`
        :param trust: the trust policy, on the manifest and envelope as read, before any file is opened (see
            :func:`check_entry`)
        """
        path = self.find(key, name)
        if path is None:
            return None
        entry = None
        try:
            entry = check_entry(path, key, checker=checker, keep=True, trust=trust)
            if check is not None:
                check(entry)
        except EntryInvalid as exc:
            if entry is not None:
                entry.close()
            if not os.path.lexists(path):  # removed by gc while we read it: a plain miss
                return None
            log.warning("entry %s failed verification: %s; quarantining it", path.name, exc.reason)
            if self.quarantine(path, exc.reason) is None and os.path.lexists(path):
                self.stuck = (path, exc.reason)
            return None
        return entry

    def quarantine(self, path: Path, reason: str, *, strict: bool = False) -> Path | None:
        """Move the entry at *path* into ``.quarantine/`` (kept for inspection); None if it could not be moved.

        :param strict: raise the :class:`OSError` of a read-only or unwritable volume (``verify --fix``, which was
            asked to repair) instead of warning and going on (a hit, which can still hand over another entry)
        """
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = self.layout.quarantine / bounded(path.name, f".{stamp}.{sanitize(reason, 40)}.{os.urandom(2).hex()}")
        try:
            safe.makedirs(self.layout.root, self.layout.quarantine, self.layout.dir_mode())
            safe.rename(self.layout.root, path, target)  # a link in entries/ is moved as a link
        except FileNotFoundError:
            return None  # another reader quarantined it first
        except OSError as exc:
            if exc.errno not in READ_ONLY_ERRNOS or strict:
                raise
            log.warning("cannot quarantine %s (%s); ignoring it", path.name, exc.strerror)
            return None
        if self.on_quarantine is not None:
            self.on_quarantine(path.name, reason)
        return target

    @contextlib.contextmanager
    def staging(self, key: str, what: str = "build") -> Iterator[Dir]:
        """Create a private staging directory for a build (or *what*: a pull) of *key*, held open (everything in it
        is written relative to its descriptor); remove it afterwards unless published."""
        name = f"{key[:16]}.{_host()}.{os.getpid()}.{os.urandom(4).hex()}"
        path = self.layout.staging / name
        safe.makedirs(self.layout.root, path, self.layout.dir_mode())
        try:
            with Dir.open(self.layout.root, path) as staged:
                yield staged
        except BaseException as exc:
            log.info("removing the staging directory %s: the %s did not finish", path.name, what)
            log.debug("the %s ended with %s", what, type(exc).__name__)
            raise
        finally:
            safe.rmtree(self.layout.root, path, ignore_errors=True)

    def publish(self, staging: Dir, name: str, manifest: dict[str, Any],
                signature: dict[str, Any] | None = None) -> bool:
        """Seal *staging* (its files written, ``fchmod``-ed and fsynced through their descriptors already) with
        *signature* (a DSSE envelope, as ``manifest.sig.json``) and *manifest*, each a new file written through the
        staging directory's descriptor, and rename it to ``entries/<name>``.

        :return: True if ours is now the entry, False if another builder published first (ours is discarded)
        """
        mode = self.layout.file_mode()
        if signature is not None:
            staging.write_new(SIGNATURE, _json(signature), mode)
        staging.write_new(MANIFEST, _json(manifest), mode)
        staging.fsync(self.layout.dir_mode())
        try:
            safe.rename(self.layout.root, staging.path, self.layout.entry_dir(name))
        except OSError as exc:
            if exc.errno not in _LOST_RACE:
                raise
            log.info("another builder published %s first; discarding this build", name)
            return False
        fsync_dir(self.layout.entries)
        return True

    def clean_staging(self, key: str | None = None, max_age: float = STALE_STAGING_SECONDS) -> list[Path]:
        """Remove staging directories of dead builders: same host and pid gone, or older than *max_age*.

        Call it with the key's build lock held, so no live builder of that key is working there.
        """
        removed = []
        safe.check_dir(self.layout.root, self.layout.staging)  # never list (and then delete) through a link
        for path in _listdir(self.layout.staging):
            if key is not None and path.name.split(".")[0] != key[:16]:
                continue
            if staging_stale(path, time.time(), max_age):
                safe.rmtree(self.layout.root, path, ignore_errors=True)
                removed.append(path)
        return removed

    def touch_use(self, key: str) -> None:
        """Record that *key* was used now (for LRU garbage collection); ignored on a read-only volume."""
        try:  # .uses reached without following a link: the mark is never made in another directory
            touch_below(self.layout.root, self.layout.use_path(key), self.layout.file_mode)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            raise safe.refusal(self.layout.uses) from None

    def entries(self) -> Iterator[Path]:
        """Yield the entry directories (unverified), in directory order."""
        yield from _listdir(self.layout.entries)


def staging_stale(path: Path, now: float, max_age: float = STALE_STAGING_SECONDS) -> bool:
    """Whether the staging directory *path* belongs to a dead builder (this host, pid gone) or is older than *max_age*.

    Its name is ``<key16>.<host>.<pid>.<rand>`` (see :meth:`EngineStore.staging`); a vanished one is not stale.
    """
    parts = path.name.split(".")
    try:
        age = now - path.stat().st_mtime
    except FileNotFoundError:
        return False
    pid = pid_field(parts[-2]) if len(parts) >= 4 and parts[-3] == _host() else None
    dead = pid is not None and not pid_alive(pid)
    return dead or age > max_age


def _json(doc: dict[str, Any]) -> bytes:
    """A seal's bytes, as :func:`trtwarm.fs.ops.atomic_write_json` writes them."""
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def host_tag() -> str:
    """This host's name as a field of a directory name (no ``.``): who made a staging or private build directory."""
    return _host()


def _host() -> str:
    return sanitize(os.uname().nodename, 32).replace(".", "-")  # '.' separates the staging name's fields


def _listdir(path: Path) -> list[Path]:
    try:
        with os.scandir(path) as it:
            return [Path(e.path) for e in it if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []


__all__ = ["MANIFEST", "SIGNATURE", "STALE_STAGING_SECONDS", "EngineStore", "host_tag", "staging_stale"]
