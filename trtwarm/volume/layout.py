"""Where things live on the cache volume. This tree is a public contract; docs/volume-layout.md documents it too.

::

    <cache-dir>/                         default /models/cache
    ├─ CACHEDIR.TAG                      backup tools skip the cache
    ├─ VERSION                           layout version (1); another version is refused, never rewritten
    ├─ entries/<name>--<key16>/          published entries; a directory appears here only by one rename
    │  ├─ engine.plan | model.ort        the engine (file name chosen by the builder)
    │  └─ manifest.json                  key document, key, engine_sha256, engine_bytes, who built it, when
    ├─ .staging/<key16>.<host>.<pid>.<rand>/   builds in progress, same filesystem as entries/
    ├─ .locks/<key>.lock                 flock targets, 0664, never deleted
    ├─ .locks/<key>.lease                lease-mode lock (filesystems without working flock)
    ├─ .locks/<key>.owner.json           who holds the build lock, refreshed by a heartbeat
    ├─ .quarantine/<name>.<utc>.<reason>/  entries that failed verification, kept for inspection
    ├─ .uses/<key>                       mtime = last time trtwarm used the entry (hit or build)
    ├─ .leases/<key>/<holder>.json       in-use leases (init, then the sidecar); mtime = heartbeat
    ├─ .trash/                           entries being removed by gc: renamed here first, then deleted
    ├─ .statcache/<id>.json              model digests keyed by (dev, inode, size, mtime, ctime)
    ├─ .last-verify.json                 problems the last `trtwarm verify` left (shown by `ls`)
    ├─ .manifest-index.json              `ls`'s row per entry, validated by stat (trtwarm.lifecycle.manifest_index)
    └─ timing-caches/<id>.cache          TensorRT timing caches, shared per TensorRT version and GPU class

Paths are pure functions of the root and the key; only :meth:`Layout.ensure` and :meth:`Layout.check` touch disk.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path

from trtwarm import errors
from trtwarm.errors import VolumeError
from trtwarm.fs import safe
from trtwarm.fs.ops import READ_ONLY_ERRNOS, TooLarge, atomic_write, read_bounded

log = logging.getLogger("trtwarm.volume")
LAYOUT_VERSION = 1
CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by trtwarm.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)
ENGINES = "entries"
SUBDIRS = (ENGINES, ".staging", ".locks", ".quarantine", ".uses", ".leases", ".statcache", "timing-caches")
#: every directory of trtwarm's directly below the root: never followed through a symlink (:mod:`trtwarm.fs.safe`)
OWN_DIRS = (*SUBDIRS, ".trash")


class Layout:
    """Paths of one cache volume."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.entries = self.root / ENGINES
        self.staging = self.root / ".staging"
        self.locks = self.root / ".locks"
        self.quarantine = self.root / ".quarantine"
        self.uses = self.root / ".uses"
        self.leases = self.root / ".leases"
        self.statcache = self.root / ".statcache"
        self.timing_caches = self.root / "timing-caches"

    def entry_dir(self, name: str) -> Path:
        """Return the directory of the entry called *name*."""
        return self.entries / name

    def lock_path(self, key: str) -> Path:
        """Return the flock file of *key*."""
        return self.locks / f"{key}.lock"

    def lease_path(self, key: str) -> Path:
        """Return the lease-mode lock file of *key*."""
        return self.locks / f"{key}.lease"

    def owner_path(self, key: str) -> Path:
        """Return the owner record of *key*'s build lock."""
        return self.locks / f"{key}.owner.json"

    def use_path(self, key: str) -> Path:
        """Return the last-use marker of *key*."""
        return self.uses / key

    def group_shared(self) -> bool:
        """Whether the volume root is group-writable (``fsGroup``), so new files should be too."""
        try:
            return bool(self.root.stat().st_mode & stat.S_IWGRP)
        except OSError:
            return False

    def dir_mode(self) -> int:
        """Mode for new directories: 0775 on a group-shared volume, else 0755; plus the root's setgid bit, so the
        volume's group (``fsGroup``'s) is inherited all the way down. Without it, the explicit chmod that defeats the
        umask would clear the bit on the first level, and entries would get the builder's primary group instead:
        another uid of the volume's group could then not move them (gc)."""
        try:
            root = self.root.stat().st_mode
        except OSError:
            return 0o755
        return (0o775 | (root & stat.S_ISGID)) if root & stat.S_IWGRP else 0o755

    def file_mode(self) -> int:
        """Mode for new files: 0664 on a group-shared volume, else 0644."""
        return 0o664 if self.group_shared() else 0o644

    def check(self) -> None:
        """Refuse a root that is not a directory or carries another layout version, or whose own directories
        (:data:`OWN_DIRS`) are symlinks or files; never writes.

        :raises VolumeError: the root exists but is not a usable trtwarm cache
        :raises UnsafeVolume: one of its own directories is a symlink or not a directory (exit 9)
        """
        if self.root.exists() and not self.root.is_dir():
            raise VolumeError(f"cache dir {self.root} exists and is not a directory",
                              hint="point --cache-dir at a directory on the shared volume")
        if self.root.is_dir():
            safe.check_tree(self.root, OWN_DIRS)
        version_file = self.root / "VERSION"
        try:
            found = read_bounded(version_file, 64).decode(errors="replace").strip()  # a FIFO there never blocks
        except FileNotFoundError:
            return
        except TooLarge:
            found = "(not a version: too large)"
        except OSError as exc:
            raise errors.volume_error(exc, "read", version_file) from exc
        if found != str(LAYOUT_VERSION):
            raise VolumeError(f"cache dir {self.root} has layout version {found!r}; this trtwarm uses "
                              f"{LAYOUT_VERSION}", hint="use another --cache-dir, or the trtwarm version that "
                              "wrote this cache")

    def require(self) -> None:
        """For commands that only inspect a volume (``ls``, ``verify``, ``gc``...): refuse a missing cache dir, or one
        that is not a trtwarm cache (no ``VERSION``), instead of answering "0 entries" for an unmounted volume.

        :raises VolumeError: naming the path
        """
        self.check()
        try:
            is_dir, tagged = self.root.is_dir(), (self.root / "VERSION").is_file()
            empty = is_dir and not tagged and not any(self.root.iterdir())
        except OSError as exc:
            raise errors.volume_error(exc, "read", self.root) from exc
        if not is_dir:
            raise VolumeError(f"cache dir {self.root} does not exist", hint="check --cache-dir and that the volume "
                              "is mounted here; `trtwarm init` creates a cache on its first build")
        if not tagged:
            what = "is empty" if empty else "holds no VERSION file"
            raise VolumeError(f"cache dir {self.root} {what}: not a trtwarm cache", hint="check --cache-dir and that "
                              "the volume is mounted here; `trtwarm init` creates a cache on its first build")

    def _others(self) -> list[str]:
        """What a directory about to become a new cache already holds besides a fresh filesystem's or a half-made
        cache's items (a wrong --cache-dir, or the wrong volume mounted)."""
        try:
            ours = ("lost+found", "CACHEDIR.TAG", *SUBDIRS)
            return sorted(p.name for p in self.root.iterdir() if p.name not in ours)
        except OSError:  # missing (made next), or unreadable (the mkdir below reports it)
            return []

    def _say_new(self, others: list[str]) -> None:
        """Log that a new cache was made here (after it was: a read-only mount where nothing could be made says
        nothing of the kind); a warning when the directory already held someone else's files."""
        if others:
            log.warning("created a new trtwarm cache in %s, which already holds other files (%s%s): check that "
                        "--cache-dir names the cache volume", self.root, ", ".join(others[:3]),
                        ", ..." if len(others) > 3 else "")
        else:
            log.info("created a new trtwarm cache in %s (layout version %d)", self.root, LAYOUT_VERSION)

    def ensure(self) -> None:
        """Create the root, its subdirectories, ``VERSION`` and ``CACHEDIR.TAG`` where missing (logging when this
        made a new cache, so a wrong or unmounted ``--cache-dir`` shows in the log).

        :raises VolumeError: the volume cannot be created or written
        """
        self.check()
        new = not (self.root / "VERSION").exists()
        others = self._others() if new else []
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            mode = self.dir_mode()
            for sub in SUBDIRS:  # never through a link another writer put there (checked above, and again here)
                safe.makedirs(self.root, self.root / sub, mode)
            for name, text in (("VERSION", f"{LAYOUT_VERSION}\n"), ("CACHEDIR.TAG", CACHEDIR_TAG)):
                if not (self.root / name).exists():
                    atomic_write(self.root / name, text.encode(), self.file_mode())
        except OSError as exc:
            raise volume_error(exc, self.root, "prepare") from exc
        if new:
            self._say_new(others)
        self.check()


def volume_error(exc: OSError, path: Path, doing: str) -> VolumeError:
    """Translate an OSError on the volume into a VolumeError that says what to do (the one table:
    :data:`trtwarm.errors.VOLUME_ERRNOS`); a volume a build cannot write also suggests ``--read-only``."""
    if exc.errno == errno.EEXIST:  # ensure(): a file stands where a subdirectory should be
        exc = OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), exc.filename)
    hint = ("a build needs a writable cache: mount it read-write, set the Pod's fsGroup, or pass --read-only to "
            "only use engines built elsewhere") if exc.errno in READ_ONLY_ERRNOS else None
    return errors.volume_error(exc, doing, path, hint=hint)


__all__ = ["CACHEDIR_TAG", "LAYOUT_VERSION", "OWN_DIRS", "SUBDIRS", "Layout", "volume_error"]
