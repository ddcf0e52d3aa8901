"""The shared TensorRT timing cache: ``timing-caches/<id>.cache``, one per (TensorRT version, GPU class, flags).

A build loads it before it starts (strictly: a cache from another device or version is refused by TensorRT and
ignored here with a warning), and afterwards merges its own cache into the file under the file's own lock and
replaces it atomically, so concurrent builders of different keys on the same GPU class never lose each other's
tactics and a reader never sees half a file. The bytes are opaque here; :mod:`~trtwarm.builders.tensorrt.builder`
does the TensorRT side (``create_timing_cache``, ``combine``, ``serialize``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from trtwarm.config import Identity
from trtwarm.errors import EntryInvalid, UnsafeVolume
from trtwarm.fs import safe
from trtwarm.fs.ops import TooLarge
from trtwarm.volume.layout import Layout
from trtwarm.volume.verified import Dir

log = logging.getLogger("trtwarm.timing_cache")
#: timing caches are "usually very small (only a few MB)"; anything this large is not one
LIMIT = 512 << 20


class TimingCacheFile:
    """One shared timing cache on the volume."""

    def __init__(self, layout: Layout, cache_id: str) -> None:
        self.layout, self.id = layout, cache_id
        self.path = layout.timing_caches / f"{cache_id}.cache"

    def read(self) -> bytes | None:
        """The cache's bytes; None when there is none yet or it cannot be read (a build then starts empty). Read
        through ``timing-caches``' descriptor, reached from the volume's root without following a link."""
        try:
            with Dir.own(self.layout.root, self.layout.timing_caches) as caches:
                data = caches.read(self.path.name, LIMIT)
        except FileNotFoundError:
            return None
        except (OSError, TooLarge, EntryInvalid, UnsafeVolume) as exc:
            log.warning("ignoring timing cache %s: %s", self.path.name, getattr(exc, "message", exc))
            return None
        return data or None

    def publish(self, merge: Callable[[bytes | None], bytes | None], identity: Identity, mode: str = "auto") -> bool:
        """Under the cache's own lock: ``merge(current bytes)`` and replace the file with the result.

        :return: whether a new cache was written (False: *merge* returned nothing, or the lock was busy too long)
        :raises UnsafeVolume: ``timing-caches`` is (or became) a link or a file: nothing written through it
        """
        from trtwarm.errors import LockTimeoutError
        from trtwarm.volume.lock import BuildLock

        safe.makedirs(self.layout.root, self.layout.timing_caches, self.layout.dir_mode())
        try:
            with BuildLock(self.layout, f"timing-{self.id}", identity, mode=mode, timeout=120.0):
                data = merge(self.read())
                if not data:
                    return False
                # through the directory's descriptor: a link swapped in for timing-caches is refused, never followed
                safe.write(self.layout.root, self.path, data, self.layout.file_mode())
        except LockTimeoutError:
            log.warning("timing cache %s is locked by another build for over 2 minutes; not updating it", self.id)
            return False
        return True


__all__ = ["LIMIT", "TimingCacheFile"]
