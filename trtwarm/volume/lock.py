"""Single flight: one builder per key across Pods and nodes, everyone else waits and reuses its result.

Two mechanisms, one interface (:class:`BuildLock`):

* ``flock`` (default where it works): ``filelock.UnixFileLock`` on ``.locks/<key>.lock``. The kernel (or the
  NFS/CephFS lock manager) drops the lock when the holder dies, SIGKILL and OOM included, so the next waiter
  takes over at once. The lock file is never deleted: unlinking it would split waiters across inodes.
* ``lease`` (filesystems without working locks: FUSE object-store mounts, NFS mounted ``nolock``):
  ``filelock.SoftFileLease`` on ``.locks/<key>.lease``, an exclusive-create file that the holder refreshes; a
  claim unchanged for :data:`LEASE_SECONDS` is taken over.

``auto`` picks ``lease`` for FUSE and ``nolock``/``local_lock`` NFS mounts (read from ``/proc/self/mountinfo``)
and falls back to it when flock fails with ENOLCK/EOPNOTSUPP/ENOSYS. Either way the holder keeps an owner
record (``.locks/<key>.owner.json``) with a heartbeat, which waiters quote in their progress lines. The atomic
rename in :mod:`trtwarm.volume.store` stays the guarantee: a lock that fails to exclude costs a duplicate build only.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trtwarm.config import Identity
from trtwarm.errors import LockTimeoutError
from trtwarm.fs import safe
from trtwarm.fs.ops import mount_of, read_json_object
from trtwarm.fs.ops import mountinfo as read_mountinfo
from trtwarm.volume import lockwait
from trtwarm.volume.layout import Layout

log = logging.getLogger("trtwarm.lock")
LEASE_SECONDS = 30.0
HEARTBEAT_SECONDS = 5.0
PROGRESS_SECONDS = 10.0
POLL_SECONDS = 0.02
#: the longest a waiter sleeps between looks for the entry, even while its shared flock has not been granted: an NFS
#: client without lock callbacks retries a blocked lock on its own schedule (up to 30 s), a look costs one stat
LOOK_SECONDS = 0.5
LEASE_POLL_SECONDS = lockwait.PAUSE_SECONDS
_NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS})


def detect_mode(path: Path, mountinfo: str | None = None) -> tuple[str, str]:
    """Return ``(lock mode, filesystem type)`` suited to the volume at *path*."""
    mountinfo = mountinfo if mountinfo is not None else read_mountinfo()
    if mountinfo is None:
        return "flock", "unknown"
    mount = mount_of(os.path.realpath(path), mountinfo)
    fstype, options = mount.fstype, mount.options
    opts = set(options.split(","))
    if fstype.startswith("fuse"):
        return "lease", fstype
    if fstype.startswith("nfs") and (opts & {"nolock", "local_lock=all", "local_lock=flock"}):
        return "lease", fstype
    return "flock", fstype


def read_owner(path: Path) -> dict[str, Any] | None:
    """Read an owner record; None when absent or unreadable (it is advisory)."""
    return read_json_object(path, 64 * 1024)


def describe_owner(owner: dict[str, Any] | None) -> str:
    """``pod X on node Y for N s`` from an owner record."""
    if not owner:
        return "an unknown holder"
    who = (f"pod {owner['pod']} on node {owner.get('node') or '?'}" if owner.get("pod")
           else f"pid {owner.get('pid')} on host {owner.get('hostname')}")
    started = owner.get("started")
    return f"{who} for {time.time() - started:.0f} s" if isinstance(started, (int, float)) else who


def file_lock(layout: Layout, lock_id: str, mode: str) -> Any:
    """The ``filelock`` object for *lock_id* in *mode* (``flock`` or ``lease``), not yet acquired.

    flock never falls back to a soft lock: one left by a crashed holder would block every later one; a volume
    without working flock gets ``lease`` mode from :func:`detect_mode` instead.
    """
    import filelock  # ~0.1 s to import: only a miss pays it

    safe.makedirs(layout.root, layout.locks, layout.dir_mode())  # never a link elsewhere (exit 9)
    if mode == "lease":
        return filelock.SoftFileLease(layout.lease_path(lock_id), lease_duration=LEASE_SECONDS,
                                      heartbeat_interval=HEARTBEAT_SECONDS, mode=0o664)
    return filelock.UnixFileLock(layout.lock_path(lock_id), mode=0o664, fallback_to_soft=False,
                                 preserve_lock_file=True)


class BuildLock:
    """The build lock of one key (or of one GPU); a context manager.

    :param on_wait: called every :data:`PROGRESS_SECONDS` while blocked, with ``(elapsed seconds, owner record)``
    """

    def __init__(self, layout: Layout, lock_id: str, identity: Identity, *, mode: str = "auto",
                 timeout: float = 3600.0, on_wait: Callable[[float, dict[str, Any] | None], None] | None = None,
                 progress: float = PROGRESS_SECONDS, label: str | None = None) -> None:
        self.layout, self.lock_id, self.identity, self.label = layout, lock_id, identity, label
        self.requested_mode, self.timeout, self.progress = mode, timeout, progress
        self.on_wait = on_wait
        self.mode = mode if mode != "auto" else detect_mode(layout.root)[0]
        self.waited = 0.0
        self.contended = False
        self._lock: Any = None
        self._released: threading.Event | None = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._started = 0.0
        self._doing: str | None = None

    def acquire(self) -> BuildLock:
        """Block until the lock is ours. :raises LockTimeoutError: after ``timeout`` seconds, naming the holder."""
        import filelock

        start = time.monotonic()
        while True:
            remaining = self.timeout - (time.monotonic() - start)
            if remaining <= 0:
                raise self.timeout_error()
            try:
                self._file_lock().acquire(timeout=min(remaining, self.progress), poll_interval=POLL_SECONDS)
                break
            except filelock.Timeout:
                self.contended = True
                if self.on_wait is not None:
                    self.on_wait(time.monotonic() - start, self.owner())
            except OSError as exc:
                self._fall_back(exc)
        self.waited = time.monotonic() - start
        return self._acquired()

    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it; never waits. :return: whether it is ours now"""
        import filelock

        while True:
            try:
                self._file_lock().acquire(timeout=0, poll_interval=POLL_SECONDS)
            except filelock.Timeout:
                self.contended = True
                return False
            except OSError as exc:
                self._fall_back(exc)
                continue
            self._acquired()
            return True

    def take_or_wait(self, appeared: Callable[[], bool]) -> bool:
        """Take the lock (True) or see *appeared* become true (False), whichever comes first; ``on_wait`` reports.

        Nobody queues: a waiter sleeps until the holder lets go (every waiter wakes at once, see
        :meth:`wait_released`), then checks *appeared* (e.g. the entry was published) before it tries the lock, so
        after a publish no waiter takes the lock; after a holder died, one waiter takes it and the others sleep again.
        :raises LockTimeoutError: after ``timeout`` seconds, naming the holder
        """
        start = time.monotonic()
        next_report = start + self.progress
        while True:
            self.waited = time.monotonic() - start
            if appeared():
                return False
            if self.try_acquire():
                return True
            now = time.monotonic()
            if now - start >= self.timeout:
                raise self.timeout_error()
            self.wait_released(max(0.0, min(next_report, start + self.timeout, now + LOOK_SECONDS) - now))
            if time.monotonic() >= next_report:
                if self.on_wait is not None:
                    self.on_wait(time.monotonic() - start, self.owner())
                next_report += self.progress

    def wait_released(self, seconds: float) -> bool:
        """Wait up to *seconds* for the current holder to let go (publish, fail or die); never takes the lock.

        In ``flock`` mode a shared lock is requested: the kernel grants it to every waiter at once when the holder's
        exclusive lock goes, so a storm of waiters wakes together instead of queueing for the lock one after another.
        The main thread requests it itself, an interval timer ending the wait
        (:func:`~trtwarm.volume.lockwait.wait_here`: woken by the kernel, it is scheduled once after the publish);
        any other thread, or a program that uses ``SIGALRM``, requests it in a helper thread that then wakes the
        caller. The shared lock is dropped at once. ``lease``
        mode sleeps :data:`LEASE_POLL_SECONDS`.
        :return: True when the holder let go (or may have), False when *seconds* passed first
        """
        if self.mode == "lease":
            time.sleep(min(seconds, LEASE_POLL_SECONDS))
            return True
        if self._released is None and lockwait.may_wait_here():
            return lockwait.wait_here(self.layout.lock_path(self.lock_id), seconds)
        if self._released is None:
            self._released = threading.Event()
            threading.Thread(target=lockwait.wait_shared, args=(self.layout.lock_path(self.lock_id), self._released),
                             name="trtwarm-lock-wait", daemon=True).start()
        if not self._released.wait(seconds):
            return False
        self._released = None
        return True

    def owner(self) -> dict[str, Any] | None:
        """The holder's owner record (advisory)."""
        return read_owner(self.layout.owner_path(self.lock_id))

    def timeout_error(self) -> LockTimeoutError:
        """The error for a wait longer than ``timeout``, naming the holder."""
        return LockTimeoutError(f"gave up after {self.timeout:.0f} s waiting for the build lock of "
                                f"{self.lock_id[:16]}, held by {describe_owner(self.owner())}")

    def _file_lock(self) -> Any:
        if self._lock is None:
            self._lock = file_lock(self.layout, self.lock_id, self.mode)
        return self._lock

    def _fall_back(self, exc: OSError) -> None:
        if exc.errno not in _NO_LOCKS or self.mode == "lease" or self.requested_mode == "flock":
            raise exc
        log.warning("flock is not supported on %s (%s); falling back to lease locks", self.layout.root, exc.strerror)
        self.mode, self._lock = "lease", None

    def _acquired(self) -> BuildLock:
        self._started = time.time()
        self._write_owner()
        self._beat = threading.Thread(target=self._heartbeat, name="trtwarm-lock-heartbeat", daemon=True)
        self._beat.start()
        return self

    def _write_owner(self) -> None:
        ident = self.identity
        safe.write_json(self.layout.root, self.layout.owner_path(self.lock_id), {
            "pod": ident.pod, "namespace": ident.namespace, "node": ident.node, "hostname": ident.hostname,
            "pid": os.getpid(), "started": self._started, "heartbeat": time.time(), "mode": self.mode,
            "label": self.label, "doing": self._doing,
        }, 0o664)

    def doing(self, what: str | None) -> None:
        """Say in the owner record what the holder does now (e.g. ``pulling from s3://...``; None: building), so
        waiters report it; advisory, like the record itself."""
        self._doing = what
        try:
            self._write_owner()
        except OSError as exc:
            log.debug("owner record not updated: %s", exc)

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                self._write_owner()
            except OSError as exc:  # advisory only; the lock itself is what excludes
                log.debug("owner heartbeat failed: %s", exc)

    def release(self) -> None:
        """Release the lock and remove our owner record; the lock file itself stays."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=2)
        owner = read_owner(self.layout.owner_path(self.lock_id))
        if owner and owner.get("pid") == os.getpid() and owner.get("hostname") == self.identity.hostname:
            safe.unlink(self.layout.root, self.layout.owner_path(self.lock_id))
        if self._lock is not None:
            self._lock.release()

    def __enter__(self) -> BuildLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


__all__ = ["HEARTBEAT_SECONDS", "LEASE_SECONDS", "PROGRESS_SECONDS", "BuildLock", "describe_owner", "detect_mode",
           "file_lock", "read_owner"]
