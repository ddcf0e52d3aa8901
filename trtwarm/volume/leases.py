"""In-use leases: which live Pods depend on which entry, so cleanup never removes an engine a Pod runs.

A lease is a small JSON file ``.leases/<key>/<holder>.json`` whose mtime is its heartbeat. ``trtwarm init`` takes
one for its key *before* it looks the entry up (so a concurrent GC either sees it or its removal is undone, see
:mod:`trtwarm.lifecycle.gc`); the sidecar refreshes it every :data:`REFRESH_SECONDS` while the Pod lives and removes
it on SIGTERM. A Pod that dies without cleaning up leaves a lease that simply goes stale after :data:`LEASE_TTL`.

The holder name is ``<namespace>.<pod>`` inside Kubernetes (init and sidecar share one file), else
``<host>.<pid>``.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path

from trtwarm.config import Identity
from trtwarm.fs import safe
from trtwarm.fs.ops import FULL_ERRNOS, READ_ONLY_ERRNOS
from trtwarm.names import holder
from trtwarm.volume.layout import Layout

REFRESH_SECONDS = 60.0
#: a lease not refreshed for this long belongs to a Pod that is gone
LEASE_TTL = 5 * REFRESH_SECONDS
_IGNORED = READ_ONLY_ERRNOS | {errno.ENOENT}


@dataclass(frozen=True)
class Lease:
    """One lease file as found on the volume."""

    key: str
    holder: str
    path: Path
    heartbeat: float

    def fresh(self, now: float, ttl: float = LEASE_TTL) -> bool:
        """Whether the holder refreshed it within *ttl* seconds of *now*."""
        return now - self.heartbeat < ttl

    @property
    def expires(self) -> float:
        """When it goes stale unless its holder refreshes it (epoch seconds)."""
        return self.heartbeat + LEASE_TTL


def holder_name(identity: Identity) -> str:
    """The lease file's stem for *identity*: ``<namespace>.<pod>`` in a Pod, else ``<host>.<pid>``."""
    return holder(identity.pod, identity.namespace, identity.hostname)


def lease_path(layout: Layout, key: str, identity: Identity) -> Path:
    """Where *identity*'s lease on *key* lives."""
    return layout.leases / key / f"{holder_name(identity)}.json"


def take(layout: Layout, key: str, name: str, identity: Identity) -> Path | str:
    """Write (or refresh) *identity*'s lease on *key*: its path, or why it could not be written where that must
    not stop a Pod whose engine is there (``"read-only"``, ``"full"``); the caller says so, once.

    :raises OSError: any other failure of the volume
    :raises UnsafeVolume: ``.leases`` or ``.leases/<key>`` is a symlink or a file (exit 9: nothing written there)
    """
    path = lease_path(layout, key, identity)
    doc = {"key": key, "name": name, "pod": identity.pod, "namespace": identity.namespace, "node": identity.node,
           "hostname": identity.hostname, "pid": os.getpid(), "refreshed": time.time()}
    try:
        safe.makedirs(layout.root, path.parent, layout.dir_mode())
        safe.write_json(layout.root, path, doc, layout.file_mode(), durable=False)  # advisory: its mtime counts
    except OSError as exc:
        if exc.errno in FULL_ERRNOS:
            return "full"
        if exc.errno not in _IGNORED:
            raise
        return "read-only"
    return path


def not_taken(why: str, name: str) -> str:
    """The warning for a lease :func:`take` could not write: a gc on a writable mount cannot see the use."""
    where = "the volume is full" if why == "full" else "the cache volume is read-only here"
    return (f"no in-use lease on {name}: {where}, so a gc (on a writable mount of this volume) cannot see that this "
            "Pod uses it; it sees only its last use")


def release(path: Path | None, layout: Layout) -> None:
    """Remove a lease (the Pod is going away) through :mod:`trtwarm.fs.safe`; missing is fine."""
    if path is None:
        return
    try:
        safe.unlink(layout.root, path)
    except OSError as exc:
        if exc.errno not in _IGNORED:
            raise


def scan(layout: Layout) -> dict[str, list[Lease]]:
    """All leases on the volume, by key (one ``scandir`` per key directory).

    :raises UnsafeVolume: ``.leases`` or a key's directory in it is a symlink or a file (a lease that cannot be
        read must not read as "no Pod uses this entry")
    """
    found: dict[str, list[Lease]] = {}
    if not safe.check_dir(layout.root, layout.leases):
        return found
    with os.scandir(layout.leases) as it:
        keys = list(it)
    for key_dir in keys:
        if (items := scan_key(layout, key_dir.name)):
            found[key_dir.name] = items
    return found


def scan_key(layout: Layout, key: str) -> list[Lease]:
    """The leases on one key. :raises UnsafeVolume: its directory is a symlink or a file"""
    try:
        if not safe.check_dir(layout.root, layout.leases / key):
            return []
        with os.scandir(layout.leases / key) as it:
            return [Lease(key, e.name.removesuffix(".json"), Path(e.path), e.stat(follow_symlinks=False).st_mtime)
                    for e in it if e.name.endswith(".json")]
    except FileNotFoundError:
        return []


__all__ = ["LEASE_TTL", "REFRESH_SECONDS", "Lease", "holder_name", "lease_path", "release", "scan",
           "scan_key", "take"]
