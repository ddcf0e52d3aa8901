"""A directory opened once (:class:`Dir`): every name below it is reached relative to its descriptor, never by path
again; files are opened ``O_RDONLY | O_NOFOLLOW | O_NONBLOCK`` and ``fstat``-ed (a link, a FIFO, a device or a
directory where a file belongs is :class:`~trtwarm.errors.EntryInvalid`, never followed, read or waited on), new files
``O_CREAT | O_EXCL | O_NOFOLLOW`` with their mode set on the descriptor. The building block of
:mod:`trtwarm.volume.verified`, whose rule it serves (read there what it guarantees and what it does not).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trtwarm.errors import EntryInvalid, UnsafeVolume
from trtwarm.fs import chunked, safe
from trtwarm.fs.copy import clone
from trtwarm.fs.ops import TooLarge, read_fd

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
NEW_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def kind(st: os.stat_result) -> str:
    """What stands there, in words, for a refusal."""
    return "a symlink" if stat.S_ISLNK(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode) else \
        "not a regular file"


class Dir:
    """A directory opened once: names below it are reached relative to its descriptor, never by path again."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, Path(path)

    @classmethod
    def open(cls, root: Path, path: Path) -> Dir:
        """Open the directory *path* below *root*: the directories on the way without following a link (a link
        there is the volume's problem: :class:`~trtwarm.errors.UnsafeVolume`, exit 9), *path* itself likewise (a
        link or a file there is this directory's problem: :class:`~trtwarm.errors.EntryInvalid`)."""
        path = Path(path)
        try:
            with safe.dir_fd(Path(root), path.parent) as parent:
                return cls(os.open(path.name, DIR_FLAGS, dir_fd=parent), path)
        except FileNotFoundError:
            raise EntryInvalid("the entry directory is missing") from None
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
        try:
            with safe.dir_fd(Path(root), path.parent) as parent:
                what = kind(os.lstat(path.name, dir_fd=parent))
        except OSError:
            what = "not a directory"
        raise EntryInvalid(f"the entry is {what}, not a directory (not followed)")

    @classmethod
    def own(cls, root: Path, path: Path) -> Dir:
        """Open one of trtwarm's own directories below *root* (``.staging``...): a link or a file anywhere on the
        way is the volume's problem (:class:`~trtwarm.errors.UnsafeVolume`, exit 9), never followed."""
        with safe.dir_fd(Path(root), Path(path)) as fd:
            return cls(os.dup(fd), Path(path))

    @classmethod
    @contextlib.contextmanager
    def private(cls, parent: Path | None, prefix: str) -> Iterator[Dir]:
        """A new directory only this process's uid can enter (``mkdtemp``, mode 0700) under *parent* (None: the
        process's temporary directory), emptied through its descriptor and removed afterwards. Use it through
        :attr:`proc`, never its path: a writer of a shared *parent* can rename it away and put its own under the name.
        Descriptors opened below it stay readable after that (the space returns when they are closed).

        :raises OSError: it cannot be made, or what was opened under its name is not the directory made (``EPERM``)
        """
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        made = cls(os.open(path, DIR_FLAGS), path)  # O_NOFOLLOW: a link swapped in for it is refused
        st = os.fstat(made.fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:  # another's, swapped in at once: left as it is
            made.close()
            raise OSError(errno.EPERM, "a directory of another owner stands where the private one was made",
                          str(path))
        try:
            yield made
        finally:
            with contextlib.suppress(OSError):
                safe.clear_at(made.fd, ignore_errors=True)
            made.close()
            with contextlib.suppress(OSError):  # the name, only while it is still the directory made
                parent_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    found = os.lstat(path.name, dir_fd=parent_fd)
                    if (found.st_dev, found.st_ino) == (st.st_dev, st.st_ino):
                        os.rmdir(path.name, dir_fd=parent_fd)
                finally:
                    os.close(parent_fd)

    @property
    def proc(self) -> Path:
        """``/proc/<pid>/fd/<n>``: the directory opened, whatever its name is now (and whatever stands under that
        name); a path for a build tool or a runtime, this process's children included, while it is open."""
        return Path(f"/proc/{os.getpid()}/fd/{self.fd}")

    def close(self) -> None:
        """Close the descriptor (idempotent)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Dir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _parent_of(self, rel: str, create: int | None = None) -> Iterator[tuple[int, str]]:
        """``(descriptor of rel's directory, rel's last name)``, walking rel's directories without following links
        (*create*: make the missing ones with this mode). :raises EntryInvalid: a link or a file on the way"""
        *dirs, name = rel.split("/")
        fd, opened = self.fd, []
        try:
            for part in dirs:
                if create is not None:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, create, dir_fd=fd)
                try:
                    fd = os.open(part, DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise EntryInvalid(f"{rel} is not below a directory ({part} is a symlink or a file)") from None
                    raise
                opened.append(fd)
                if create is not None:
                    os.fchmod(fd, create)
            yield fd, name
        finally:
            for each in opened:
                os.close(each)

    def open_file(self, rel: str, what: str | None = None) -> tuple[int, os.stat_result]:
        """Open the regular file *rel* once (:data:`FILE_FLAGS`): ``(descriptor, its fstat)``.

        :raises EntryInvalid: missing, a symlink, a FIFO, a device, a directory (never followed, read or waited on)
        """
        what = what or rel
        with self._parent_of(rel) as (parent, name):
            try:
                fd = os.open(name, FILE_FLAGS, dir_fd=parent)
            except FileNotFoundError:
                raise EntryInvalid(f"{what} is missing") from None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise EntryInvalid(f"{what} is a symlink") from None
                if exc.errno in (errno.ENXIO, errno.EISDIR, errno.ENOTDIR):  # a socket; a directory
                    raise EntryInvalid(f"{what} is not a regular file") from None
                raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise EntryInvalid(f"{what} is not a regular file")
        return fd, st

    def read(self, name: str, limit: int) -> bytes:
        """The bytes of the small regular file *name* (at most *limit*), through one descriptor.

        :raises FileNotFoundError: missing; :raises TooLarge: larger; :raises EntryInvalid: not a regular file
        """
        try:
            fd, st = self.open_file(name)
        except EntryInvalid as exc:
            if exc.reason.endswith("is missing"):
                raise FileNotFoundError(errno.ENOENT, "missing", name) from None
            raise
        try:
            data = read_fd(fd, limit, st.st_size)
        finally:
            os.close(fd)
        if len(data) > limit:
            raise TooLarge(f"{name} is larger than {limit} bytes")
        return data

    def scan(self) -> dict[str, os.stat_result]:
        """``lstat`` of every non-directory below, and of every empty subdirectory, by relative POSIX path (each
        subdirectory opened ``O_NOFOLLOW`` relative to its parent; links are listed, never followed).

        :raises EntryInvalid: the directory or a subdirectory cannot be read
        """
        found: dict[str, os.stat_result] = {}
        pending = [("", os.dup(self.fd))]
        while pending:
            prefix, fd = pending.pop()
            try:
                with os.scandir(fd) as it:
                    items = [(e.name, e.stat(follow_symlinks=False)) for e in it]
                if not items and prefix:
                    found[prefix.rstrip("/")] = os.fstat(fd)
                for name, st in items:
                    if stat.S_ISDIR(st.st_mode):
                        pending.append((f"{prefix}{name}/", os.open(name, DIR_FLAGS, dir_fd=fd)))
                    else:
                        found[f"{prefix}{name}"] = st
            except OSError as exc:
                raise EntryInvalid(f"entry directory {prefix or '.'} is unreadable ({exc.strerror})") from None
            finally:
                os.close(fd)
        for _prefix, fd in pending:  # left open by a failure above
            os.close(fd)
        return found

    def create(self, rel: str, mode: int, dir_mode: int = 0o755) -> int:
        """A new file *rel* (never an existing one, never through a link), its directories made with *dir_mode*;
        its mode set on the descriptor (``fchmod``: the umask cannot narrow it). :return: its descriptor

        :raises UnsafeVolume: something trtwarm did not make stands at *rel* or on its way (this directory is
            trtwarm's own: staging, the hand-off's copies): refused, nothing followed, truncated or deleted
        """
        try:
            with self._parent_of(rel, create=dir_mode) as (parent, name):
                fd = os.open(name, NEW_FLAGS, mode, dir_fd=parent)
        except (FileExistsError, EntryInvalid):
            raise UnsafeVolume(f"{self.path / rel} was made by someone else in trtwarm's own directory {self.path} "
                               "before trtwarm wrote it: refused, nothing followed, truncated or deleted") from None
        os.fchmod(fd, mode)
        return fd

    def clone_in(self, src: int, rel: str, row: dict[str, Any], mode: int = 0o644) -> int | None:
        """A new file *rel* made a copy of the file behind *src* and checked against *row* as it is made
        (:func:`trtwarm.fs.copy.clone`): its descriptor (the caller's to close), or None when the bytes did not
        match (the copy is removed)."""
        dst = self.create(rel, mode)
        try:
            if clone(src, dst, row):
                return dst
        except BaseException:
            os.close(dst)
            self._unlink(rel)
            raise
        os.close(dst)
        self._unlink(rel)
        return None

    def _unlink(self, rel: str) -> None:
        with contextlib.suppress(OSError), self._parent_of(rel) as (parent, name):
            os.unlink(name, dir_fd=parent)

    def write_new(self, name: str, data: bytes, mode: int) -> None:
        """Write the new file *name* (:meth:`create`), fsynced: the seals of a staging directory."""
        fd = self.create(name, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)

    def copy_in(self, src: int, rel: str, chunk_bytes: int, mode: int, dir_mode: int) -> tuple[str, int, list[str],
                                                                                               os.stat_result]:
        """Copy the file behind *src* into the new file *rel*, hashing the bytes read from *src* as they are copied
        (:func:`trtwarm.fs.chunked.copy_hash_fd`), fsynced: ``(SHA-256, size, chunk digests, the copy's fstat)``."""
        dst = self.create(rel, mode, dir_mode)
        try:
            digest, size, chunks = chunked.copy_hash_fd(src, dst, chunk_bytes)
            os.fsync(dst)
            return digest, size, chunks, os.fstat(dst)
        finally:
            os.close(dst)

    def fsync(self, mode: int | None = None) -> None:
        """Flush the directory's names (and, with *mode*, set its mode through the descriptor)."""
        if mode is not None:
            os.fchmod(self.fd, mode)
        os.fsync(self.fd)


__all__ = ["DIR_FLAGS", "FILE_FLAGS", "NEW_FLAGS", "Dir", "kind"]
