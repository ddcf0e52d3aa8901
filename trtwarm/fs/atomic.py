"""Replacing a file or a link so that readers see the old or the new one, never a mix: write a unique temporary
name in the same directory, (fsync it,) rename it over the target once, (fsync the directory). The rename is the
guarantee.

A leaf (``os`` and :mod:`trtwarm.fs.info` only), so the repeat hit (:mod:`trtwarm.init.fasthit`) writes with the same
code as the full init; :mod:`trtwarm.fs.ops` re-exports these under its ``atomic_*`` names. Paths may be ``str`` or
:class:`os.PathLike`.
"""

from __future__ import annotations

import errno
import os

from trtwarm.fs.info import FULL_ERRNOS, READ_ONLY_ERRNOS

TYPE_CHECKING = False
if TYPE_CHECKING:  # not imported at run time: the repeat hit pays for every module it loads
    from collections.abc import Callable
    from typing import Union

    PathLike = Union[str, "os.PathLike[str]"]


def _tmp_name(target: PathLike) -> str:
    head, tail = os.path.split(os.fspath(target))
    return os.path.join(head, f".{tail}.{os.getpid()}.{os.urandom(4).hex()}.tmp")


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def fsync_dir(path: PathLike) -> None:
    """Flush a directory's entries (new names, renames) to stable storage."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(target: PathLike, data: bytes, mode: int = 0o644, *, durable: bool = True) -> None:
    """Replace *target* with *data* so that readers see the old or the new content, never a mix
    (:func:`write_at` in *target*'s directory).

    :param durable: fsync the file and its directory (off for advisory files rewritten every minute, and for the
        Pod-local hand-off of a repeat hit)
    """
    head, tail = os.path.split(os.fspath(target))
    fd = os.open(head or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        write_at(fd, tail, data, mode, durable=durable)
    finally:
        os.close(fd)


def write_at(dir_fd: int, name: str, data: bytes, mode: int = 0o644, *, durable: bool = True) -> None:
    """:func:`write`, relative to the directory *dir_fd* (the temporary file made ``O_EXCL | O_NOFOLLOW`` there,
    renamed over *name* there): nothing is written through a link swapped in for the directory."""
    tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
            os.fchmod(fd, mode)  # the umask must not make a shared volume unreadable to other Pods' UIDs
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        raise
    if durable:
        os.fsync(dir_fd)


def below(root: PathLike, path: PathLike) -> tuple[int, str]:
    """``(descriptor of path's directory, path's name)``, every directory from *root* (opened as given: the
    operator's) down to it opened ``O_NOFOLLOW | O_DIRECTORY`` relative to its parent; the caller closes it.

    :raises OSError: ``ELOOP``/``ENOTDIR`` where a link or a file stands on the way, ``ENOENT``...
    """
    *dirs, name = os.path.relpath(os.fspath(path), os.fspath(root)).split(os.sep)
    if name in ("", ".", "..") or ".." in dirs:
        raise OSError(errno.EINVAL, "not below the root", os.fspath(path))
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in dirs:
            below_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = below_fd
    except BaseException:
        os.close(fd)
        raise
    return fd, name


def touch_below(root: PathLike, path: PathLike, mode: Callable[[], int]) -> None:
    """:func:`touch` of *path* reached from *root* through :func:`below`: a link swapped in for a directory on the
    way is never followed (the file would be made in another directory). Nothing where the volume cannot be written
    or the directory is gone."""
    try:
        fd, name = below(root, path)
    except OSError as exc:
        if exc.errno not in READ_ONLY_ERRNOS | FULL_ERRNOS | {errno.ENOENT}:
            raise
        return
    try:
        try:
            os.utime(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode(), dir_fd=fd))
    except OSError as exc:
        if exc.errno not in READ_ONLY_ERRNOS | FULL_ERRNOS | {errno.ENOENT}:
            raise
    finally:
        os.close(fd)


def symlink(target: PathLike, link: PathLike) -> None:
    """Point *link* at *target*, replacing any previous link atomically."""
    tmp = _tmp_name(link)
    try:  # the symlink inside the try: an init's SIGTERM (raised between any two statements) leaves no link behind
        os.symlink(target, tmp)
        os.replace(tmp, link)
    except BaseException:
        _unlink_quietly(tmp)
        raise


def touch(path: PathLike, mode: Callable[[], int]) -> None:
    """Set *path*'s modification time to now, creating it empty (with the mode ``mode()``, asked only then) if
    missing; nothing where the volume cannot be written (read-only, full) or the directory is gone."""
    try:
        try:
            os.utime(path, follow_symlinks=False)  # one syscall on every hit but an entry's first; a link put there
        except FileNotFoundError:                  # is touched itself, never the file it points at
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, mode()))
    except OSError as exc:
        if exc.errno not in READ_ONLY_ERRNOS | FULL_ERRNOS | {errno.ENOENT}:
            raise


__all__ = ["below", "fsync_dir", "symlink", "touch", "touch_below", "write", "write_at"]
