"""A copy that hashes what it wrote, in one read: the Pod-private hand-off (``--handoff copy``).

The bytes the server will load are the bytes hashed: either each chunk read from the source is hashed and written
(one read of the source), or, where the filesystem offers it, the copy is a reflink (``FICLONE``: the copy shares
the source's blocks, copy-on-write) and the copy itself is read back and hashed. Nobody else can write the copy (it
is this Pod's, under a new name in its hand-off directory), so a write to the source after the check, even in
place and of the same size, never reaches the server: its digest is compared with the manifest's by the caller.

Imports ``hashlib``, ``os`` and ``fcntl`` only: the repeat hit (:mod:`trtwarm.init.fasthit`) uses it too.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import stat

#: ``_IOW(0x94, 9, int)``: clone a whole file's extents (Btrfs, XFS with reflink, bcachefs, overlayfs over them)
FICLONE = 0x40049409
_CHUNK = 16 << 20


def copy_hashed(src: str, dst: str, mode: int = 0o644, *, reflink: bool = True) -> tuple[str, int, bool]:
    """Copy the regular file *src* to the new file *dst* (never a link followed at *src*, never an existing *dst*):
    ``(SHA-256 of what *dst* holds, its size, whether it is a reflink)``.

    :raises OSError: *src* is missing, a link, unreadable; *dst* exists or cannot be written (it is removed)
    """
    sfd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        dfd = os.open(dst, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        try:
            if reflink and _clone(sfd, dfd):
                digest, size = _hash_fd(dfd)
                return digest, size, True
            digest, size = _copy_fd(sfd, dfd)
            return digest, size, False
        except BaseException:
            os.unlink(dst)
            raise
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)


def copy_files(source: str, files: list[list[str]], target: str) -> dict[str, int] | None:
    """Copy each ``[relative path, sha256]`` of the directory *source* into the new directory *target* with
    :func:`copy_hashed`: ``{copy: size}``, or None when one copy does not hash to its digest (*target* removed).

    :raises OSError: a file cannot be read or written (*target* is left for :func:`prune`), or *target*'s parent is
        not a real directory (:func:`own_dir`)
    """
    own_dir(os.path.dirname(target))
    os.mkdir(target)
    made = {}
    for rel, digest in files:
        dst = os.path.join(target, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        got, size, _reflink = copy_hashed(os.path.join(source, rel), dst)
        if got != digest:
            prune(os.path.dirname(target), None, only=os.path.basename(target))
            return None
        made[dst] = size
    return made


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
    import shutil

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
                    shutil.rmtree(name, ignore_errors=True, dir_fd=fd)
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


def _hash_fd(fd: int) -> tuple[str, int]:
    """SHA-256 and size of the whole file behind *fd*, read from its start."""
    digest, size = hashlib.sha256(), 0
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    while got := os.preadv(fd, [buffer], size):
        digest.update(view[:got])
        size += got
    return digest.hexdigest(), size


def _copy_fd(sfd: int, dfd: int) -> tuple[str, int]:
    """Read *sfd* once: each chunk is hashed, then written to *dfd*. ``(SHA-256, size)``"""
    digest, size = hashlib.sha256(), 0
    buffer = bytearray(min(_CHUNK, max(os.fstat(sfd).st_size, 1 << 16)))
    view = memoryview(buffer)
    while got := os.readv(sfd, [buffer]):
        chunk = view[:got]
        digest.update(chunk)
        done = 0
        while done < got:
            done += os.write(dfd, chunk[done:])
        size += got
    return digest.hexdigest(), size


__all__ = ["FICLONE", "copy_files", "copy_hashed", "prune"]
