"""A copy checked as it is made, between two descriptors: the Pod-private hand-off (``--handoff copy``).

The bytes the server will load are the bytes checked: either each piece read from the source is hashed and written
(one read of the source), or, where the filesystem offers it, the copy is a reflink (``FICLONE``: the copy shares
the source's blocks, copy-on-write) and the copy itself is read back and checked. Nobody else can write the copy
(it is this Pod's, under a new name in its hand-off directory), so a write to the source after the check, even in
place and of the same size, never reaches the server. Who opens the source, and how, is
:mod:`trtwarm.volume.verified`'s; this module is handed descriptors only.

Imports ``os``, ``fcntl`` and :mod:`trtwarm.fs.chunked` (``hashlib``) only: the repeat hit uses it too.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat

from trtwarm.fs.chunked import check_fd, copy_fd

TYPE_CHECKING = False
if TYPE_CHECKING:  # not imported at run time: the repeat hit pays for every module it loads
    from typing import Any

#: ``_IOW(0x94, 9, int)``: clone a whole file's extents (Btrfs, XFS with reflink, bcachefs, overlayfs over them)
FICLONE = 0x40049409


def clone(sfd: int, dfd: int, row: dict[str, Any]) -> bool:
    """Make the new, empty file behind *dfd* a copy of the file behind *sfd* and check it against the manifest row
    *row* (``bytes``, ``sha256``, and ``chunk_bytes``/``chunk_sha256`` when it has them): whether the copy holds
    exactly those bytes. A reflink where the filesystem offers it, then the copy itself is checked (nobody else can
    write it); otherwise one read of *sfd* that is checked and written (:func:`trtwarm.fs.chunked.copy_fd`)."""
    if _clone(sfd, dfd):
        return check_fd(dfd, row["bytes"], row["sha256"], row.get("chunk_bytes"), row.get("chunk_sha256"))
    return copy_fd(sfd, dfd, row["bytes"], row["sha256"], row.get("chunk_bytes"), row.get("chunk_sha256"))


def own_dir(directory: str) -> str:
    """*directory* (``<handoff-dir>/copies``), made if missing, and a real directory, never a link: a writer of the
    hand-off directory (the server's container shares it) must not point the copies, or their removal, elsewhere.

    :raises OSError: ``ENOTDIR`` when a link or a file stands there
    """
    try:
        os.mkdir(directory, 0o755)
    except FileExistsError:
        pass
    if not stat.S_ISDIR(os.lstat(directory).st_mode):
        raise OSError(errno.ENOTDIR, "not a directory (a symlink or a file): refused, nothing followed", directory)
    return directory


def prune(directory: str, keep: str | None, *, only: str | None = None) -> None:
    """Remove every entry of *directory* but *keep* (earlier copies; best effort), or just the entry named *only*.
    Never through a link: a *directory* that is a link is left alone, and each entry is removed relative to its
    descriptor (a link inside is unlinked, never followed)."""
    from trtwarm.fs.safe import rmtree_at  # off the repeat hit's path until it prunes

    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        for name in os.listdir(fd) if only is None else [only]:
            if keep is not None and os.path.join(directory, name) == keep:
                continue
            try:
                if stat.S_ISDIR(os.lstat(name, dir_fd=fd).st_mode):
                    rmtree_at(fd, name, ignore_errors=True)
                else:
                    os.unlink(name, dir_fd=fd)
            except OSError:
                continue
    finally:
        os.close(fd)


def _clone(sfd: int, dfd: int) -> bool:
    """Whether ``FICLONE`` made *dfd* a reflink of *sfd* (False where the filesystem cannot: ext4, tmpfs, NFS...)."""
    try:
        fcntl.ioctl(dfd, FICLONE, sfd)
    except OSError:  # EOPNOTSUPP, EXDEV (another filesystem), EINVAL, ENOTTY: copy instead
        return False
    return True


__all__ = ["FICLONE", "clone", "own_dir", "prune"]
