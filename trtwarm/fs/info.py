"""What a ``stat`` or an ``errno`` says, with nothing imported but ``os`` and ``errno``: a leaf, so the repeat hit
(:mod:`trtwarm.init.fasthit`) shares these rules with the rest instead of restating them.
"""

from __future__ import annotations

import errno
import os

#: errno values that mean "this volume cannot be written", as opposed to a bug.
READ_ONLY_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
#: errno values that mean "the volume is full".
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def identity(st: os.stat_result) -> list[int]:
    """A file's identity for memoising what its bytes gave: any write changes at least ``ctime_ns``."""
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def safely_owned(st: os.stat_result) -> bool:
    """This uid's or root's, and not writable by group or others: who may vouch for a file on this node (stamps,
    signature and hit records, like ssh's ``StrictModes``)."""
    return st.st_uid in (os.geteuid(), 0) and not st.st_mode & 0o022


def read_only_mount(path: os.PathLike[str] | str) -> bool:
    """Whether *path* is on a filesystem mounted read-only (``statvfs``'s ``ST_RDONLY``; unknown: False)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


__all__ = ["FULL_ERRNOS", "READ_ONLY_ERRNOS", "identity", "read_only_mount", "safely_owned"]
