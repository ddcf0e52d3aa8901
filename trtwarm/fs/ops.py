"""Small filesystem primitives: hashing, fsync, atomic writes and bounded reads.

Everything that must never be seen half-written goes through :func:`atomic_write` (:func:`trtwarm.fs.atomic.write`):
write a unique temporary file in the same directory, fsync it, rename it over the target once, fsync the directory.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from trtwarm import strictjson
from trtwarm.fs.atomic import fsync_dir
from trtwarm.fs.atomic import symlink as atomic_symlink
from trtwarm.fs.atomic import write as atomic_write
from trtwarm.fs.info import FULL_ERRNOS, READ_ONLY_ERRNOS

#: sha256_file's reads: large, so a thread beside the hashing (the verifier's import, trtwarm.trust.keys.preload)
#: seldom holds the GIL when the hashing needs it between two reads (measured: 4 MiB cost that thread's overlap)
_CHUNK = 16 << 20


class Mount(NamedTuple):
    """One line of ``/proc/self/mountinfo``: where a filesystem is mounted, and which part of it."""

    point: str  # the mount point
    root: str  # the directory of the filesystem mounted there (a bind mount's source, within that filesystem)
    device: str  # ``major:minor``
    fstype: str
    options: str  # super options, then mount options, comma-joined
    super_options: str = ""  # the filesystem's own options (the superblock's: "ro" there binds every mount of it)


def _mounts(mountinfo: str) -> Iterator[tuple[str, Mount]]:
    """``(mount id, Mount)`` of each well-formed line of *mountinfo*."""
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 6 or len(tail) < 3:
            continue
        yield fields[0], Mount(fields[4].replace("\\040", " "), fields[3].replace("\\040", " "), fields[2], tail[0],
                               tail[2] + "," + fields[5], tail[2])


def mount_of(path: Path | str, mountinfo: str) -> Mount:
    """The mount holding *path* in *mountinfo* (the text of ``/proc/self/mountinfo``): the longest mount point above
    it, the later line on a tie (a mount stacked over another). Unknown: ``Mount("/", "/", "", "", "")``."""
    path, best = str(path), Mount("/", "/", "", "", "")
    for _id, mount in _mounts(mountinfo):
        point = mount.point
        if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best.point):
            best = mount
    return best


def mount_of_fd(fd: int, mountinfo: str) -> Mount | None:
    """The mount the open file *fd* was reached through (``mnt_id`` of ``/proc/self/fdinfo/<fd>``, found in
    *mountinfo*): the file's, whatever path leads to it now. None when unknown."""
    try:
        with open(f"/proc/self/fdinfo/{fd}", encoding="ascii", errors="replace") as handle:
            mnt_id = next((line.split()[1] for line in handle if line.startswith("mnt_id:")), None)
    except (OSError, IndexError):
        return None
    return next((mount for found, mount in _mounts(mountinfo) if found == mnt_id), None) if mnt_id else None


def mountinfo() -> str | None:
    """The text of ``/proc/self/mountinfo`` (what this process sees mounted where), or None when unreadable."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def sha256_file(path: Path) -> tuple[str, int]:
    """Return ``(hex digest, bytes read)`` of the file at *path*, read in chunks of up to 16 MiB."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb", buffering=0) as handle:
        # one buffer, no larger than the file: a new bytes object per read() faults its pages in every time
        buffer = bytearray(min(_CHUNK, max(os.fstat(handle.fileno()).st_size, 1 << 16)))
        view = memoryview(buffer)
        while got := handle.readinto(buffer):
            digest.update(view[:got])
            size += got
    return digest.hexdigest(), size


def fsync_file(path: Path) -> None:
    """Flush a file's data to stable storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_json(target: Path, doc: Any, mode: int = 0o644, *, durable: bool = True) -> None:
    """Write *doc* as indented JSON through :func:`atomic_write`."""
    atomic_write(target, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode(), mode, durable=durable)


class TooLarge(ValueError):
    """A file that should be small is larger than the caller's bound."""


def read_bounded(path: Path, limit: int, *, follow: bool = False) -> bytes:
    """Read at most *limit* bytes of a regular file, refusing symlinks and larger files.

    :param follow: a file the operator names (a trust policy, a key, a calibration cache), whose links are followed:
        a Kubernetes ConfigMap or Secret volume's files are links into its ``..data`` directory. Never for a file of
        the volume. A FIFO is still never waited on.
    :raises TooLarge: the file holds more than *limit* bytes
    :raises OSError: the file is missing, a symlink (``ELOOP``), not a regular file (a FIFO or a device that a
        writer of the volume put there: ``EINVAL``, never a read that blocks) or unreadable
    """
    return read_bounded_stat(path, limit, follow=follow)[0]


def read_bounded_stat(path: Path, limit: int, dir_fd: int | None = None, *,
                      follow: bool = False) -> tuple[bytes, os.stat_result]:
    """:func:`read_bounded`, and the ``fstat`` of the very file read (one open: who owns what was read, e.g. a
    stamp, is judged on the same file). *dir_fd*: *path* is relative to this directory's descriptor."""
    # O_NONBLOCK: opening a FIFO never waits
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        data = read_fd(fd, limit, st.st_size)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise TooLarge(f"{path} is larger than {limit} bytes")
    return data, st


def read_fd(fd: int, limit: int, expect: int | None = None) -> bytes:
    """Up to *limit* + 1 bytes of the regular file behind *fd*, from its start (``pread``: its offset is kept), so
    the caller sees whether it holds more than *limit*. *expect*: its size as the caller's ``fstat`` saw it, which
    sizes the first read (else a buffer of *limit* + 1 bytes is allocated for a file of a few hundred); a file that
    has grown since is read on to *limit* + 1 all the same."""
    chunks, size = [], 0
    want = limit + 1 if expect is None else min(limit, max(expect, 0)) + 1
    while size <= limit and (chunk := os.pread(fd, want, size)):
        chunks.append(chunk)
        size += len(chunk)
        want = limit + 1 - size
    return b"".join(chunks)


def read_json_object(path: Path, limit: int) -> dict[str, Any] | None:
    """A small JSON object file (owner records, leases, the hand-off); None when missing, huge, garbage or not an
    object: these files are advisory, and a reader treats a bad one as absent."""
    try:
        return strictjson.loads_object(read_bounded(path, limit), limit=limit)
    except (OSError, TooLarge, strictjson.JSONRefused):
        return None


def volume_full(path: Path, margin: int = 1 << 20) -> bool:
    """Whether the filesystem holding *path* has less than *margin* bytes left for this user (``statvfs``)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < margin


#: the largest process id Linux gives (``PID_MAX_LIMIT`` on 64-bit; ``/proc/sys/kernel/pid_max`` is at most this)
PID_MAX = 1 << 22


def pid_field(text: str) -> int | None:
    """The process id in *text*, a field of a name trtwarm made (``<key16>.<host>.<pid>.<rand>``): up to 18 ASCII
    digits, else None (a name a writer of the volume made up, e.g. ``²³``, which ``int`` reads as nothing). A number
    no process can have (0, 30 digits) is still a number: :func:`pid_alive` says no process has it."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None


def pid_alive(pid: int) -> bool:
    """Return whether a process with *pid* runs on this host (a zombie, killed but not yet reaped, does not; nor
    does a pid no process can have)."""
    if not 0 < pid <= PID_MAX:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by someone else
        pass
    try:  # the kernel drops a dead holder's flock at once, possibly before its parent reaps it
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in (b"Z", b"X")


__all__ = [
    "Mount",
    "mount_of",
    "mount_of_fd",
    "mountinfo",
    "FULL_ERRNOS",
    "READ_ONLY_ERRNOS",
    "TooLarge",
    "atomic_symlink",
    "atomic_write",
    "atomic_write_json",
    "fsync_dir",
    "fsync_file",
    "PID_MAX",
    "pid_alive",
    "pid_field",
    "read_bounded",
    "read_bounded_stat",
    "read_fd",
    "read_json_object",
    "sha256_file",
    "volume_full",
]
