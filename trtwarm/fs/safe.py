"""Writes and deletes below the cache root that never follow a symlink: every path is reached from the root one
directory at a time, each opened with ``O_NOFOLLOW | O_DIRECTORY``, and the last step is done relative to its parent's
descriptor (``mkdirat``, ``unlinkat``, ``renameat``, :func:`rmtree_at`, which never follows a link inside the tree and
takes a tree of any depth).

Whoever can write the volume can put a symlink (or a plain file) where trtwarm's own directory belongs:
``.staging`` → ``/etc``, ``.leases/<key>`` → a victim's home. Such a path is refused with
:class:`~trtwarm.errors.UnsafeVolume` (exit 9), naming it: nothing is followed, written or deleted there. The cache
root itself may be a link (the operator chose ``--cache-dir``); everything below it is the volume's.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from trtwarm.errors import UnsafeVolume
from trtwarm.fs.atomic import write_at

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def what_is(st: os.stat_result) -> str:
    """A file type in words, for the refusal."""
    if stat.S_ISLNK(st.st_mode):
        return "a symlink"
    if stat.S_ISREG(st.st_mode):
        return "a regular file"
    return "not a directory" if not stat.S_ISDIR(st.st_mode) else "a directory"


def refusal(path: Path | str, st: os.stat_result | None = None, what: str = "directory") -> UnsafeVolume:
    """The error for *path*, which is not the *what* trtwarm expects (*st*: its ``lstat``, when known)."""
    if st is None:
        try:
            st = os.lstat(path)
        except OSError:
            st = None
    kind = what_is(st) if st is not None else "not a directory"
    target = ""
    if st is not None and stat.S_ISLNK(st.st_mode):
        with contextlib.suppress(OSError):
            target = f" (to {os.readlink(path)})"
    return UnsafeVolume(f"{path} is {kind}{target} where trtwarm's own {what} belongs: refused, nothing "
                        "followed or deleted")


@contextlib.contextmanager
def _named(path: Path, other: Path | None = None) -> Iterator[None]:
    """Give an :class:`OSError` of a call relative to a descriptor the full path (its message names the file)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None or os.path.isabs(str(exc.filename)):
            raise
        raise type(exc)(exc.errno, exc.strerror, str(path), None, str(other) if other else None) from None


def _parts(root: Path, path: Path) -> tuple[str, ...]:
    """*path*'s components below *root* (lexically); :raises ValueError: *path* is not below *root*."""
    parts = Path(os.path.normpath(path)).relative_to(os.path.normpath(root)).parts
    if not parts or any(p in ("..", ".") for p in parts):
        raise ValueError(f"{path} is not below {root}")
    return parts


def _open_below(fd: int, name: str, where: Path) -> int:
    """``openat(fd, name)`` as a directory, not following a link. :raises UnsafeVolume: a link or a file there"""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise refusal(where) from None
        raise type(exc)(exc.errno, exc.strerror, str(where)) from None


@contextlib.contextmanager
def dir_fd(root: Path, path: Path, *, create: int | None = None) -> Iterator[int]:
    """A descriptor of the directory *path* below *root*, reached without following any link below *root*.

    :param create: make missing directories on the way with this mode (then ``chmod``, defeating the umask)
    :raises UnsafeVolume: a component is a symlink or not a directory
    :raises FileNotFoundError: a component is missing (and *create* is None)
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        where = Path(root)
        for name in (_parts(root, path) if os.path.normpath(path) != os.path.normpath(root) else ()):
            where = where / name
            if create is not None:
                try:
                    with _named(where):
                        os.mkdir(name, create, dir_fd=fd)
                except FileExistsError:
                    pass
                else:
                    made = _open_below(fd, name, where)
                    os.close(fd)
                    fd = made
                    os.fchmod(fd, create)
                    continue
            child = _open_below(fd, name, where)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def makedirs(root: Path, path: Path, mode: int) -> None:
    """Make *path* and its missing parents below *root* (mode *mode*); an existing directory is fine.

    :raises UnsafeVolume: a component is a symlink or a file
    """
    with dir_fd(root, path, create=mode):
        pass


def check_dir(root: Path, path: Path) -> bool:
    """Whether the directory *path* exists below *root*; False when missing.

    :raises UnsafeVolume: it, or a directory on the way to it, is a symlink or not a directory
    """
    try:
        with dir_fd(root, path):
            return True
    except FileNotFoundError:
        return False


def rmtree(root: Path, path: Path, *, ignore_errors: bool = False) -> None:
    """Remove the directory tree *path* below *root*; links inside it are removed, never followed. Missing is fine.

    :param ignore_errors: ignore failures inside the tree (a file another process holds); never a refusal
    :raises UnsafeVolume: *path* or a directory on the way is a symlink or not a directory
    """
    try:
        with dir_fd(root, path.parent) as fd:
            st = os.lstat(path.name, dir_fd=fd)
            if not stat.S_ISDIR(st.st_mode):
                raise refusal(path, st)
            with _named(path):
                rmtree_at(fd, path.name, ignore_errors=ignore_errors)
    except FileNotFoundError:
        return


def rmtree_at(parent: int, name: str, *, ignore_errors: bool = False) -> None:
    """Remove the directory *name* of the directory *parent* (a descriptor) and everything in it, whatever its depth,
    with two descriptors at a time: each directory is opened ``O_NOFOLLOW`` relative to *name*'s own descriptor, its
    files and links are unlinked (a link is removed, never followed) and its subdirectories renamed up into *name*
    under fresh names, then it is removed. (:func:`shutil.rmtree` recurses once per level: a tree a few thousand
    levels deep, which a writer of the volume makes in a second, is a ``RecursionError`` there.)

    :param ignore_errors: ignore failures inside the tree (what cannot be removed stays); *name* itself must open
    :raises OSError: *name* is missing, a link (``ELOOP``) or not a directory; a failure inside, unless ignored
    """
    top = os.open(name, _DIR_FLAGS, dir_fd=parent)
    try:
        clear_at(top, ignore_errors=ignore_errors)
    finally:
        os.close(top)
    try:
        os.rmdir(name, dir_fd=parent)
    except OSError:
        if not ignore_errors:
            raise


def clear_at(top: int, *, ignore_errors: bool = False) -> None:
    """Remove everything in the directory *top* (a descriptor), as :func:`rmtree_at` does, and leave it empty."""
    tag = f".trtwarm-rm.{os.getpid()}.{os.urandom(4).hex()}"
    left, drained = _drain(top, top, tag, ignore_errors), 0
    while left:
        sub = left.pop()
        drained += 1
        try:
            fd = os.open(sub, _DIR_FLAGS, dir_fd=top)
            try:
                left += _drain(fd, top, f"{tag}.{drained}", ignore_errors)
            finally:
                os.close(fd)
            os.rmdir(sub, dir_fd=top)
        except OSError:
            if not ignore_errors:
                raise


def _drain(fd: int, top: int, tag: str, ignore_errors: bool) -> list[str]:
    """Unlink everything in the directory *fd* but its subdirectories, which are renamed into *top* (as ``<tag>.N``;
    *top*'s own stay where they are). :return: the names, in *top*, of the subdirectories left to remove"""
    left: list[str] = []
    try:
        with os.scandir(fd) as it:
            found = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
    except OSError:
        if not ignore_errors:
            raise
        return left
    for index, (name, is_dir) in enumerate(found):
        try:
            if not is_dir:
                os.unlink(name, dir_fd=fd)
            elif fd == top:
                left.append(name)
            else:
                os.rename(name, f"{tag}.{index}", src_dir_fd=fd, dst_dir_fd=top)
                left.append(f"{tag}.{index}")
        except OSError:
            if not ignore_errors:
                raise
    return left


def unlink(root: Path, path: Path, *, missing_ok: bool = True) -> None:
    """Remove the file (or link) *path* below *root*: the link itself, never its target.

    :raises UnsafeVolume: a directory on the way is a symlink or not a directory
    """
    try:
        with dir_fd(root, path.parent) as fd, _named(path):
            os.unlink(path.name, dir_fd=fd)
    except FileNotFoundError:
        if not missing_ok:
            raise


def rmdir(root: Path, path: Path) -> None:
    """Remove the empty directory *path* below *root*. :raises OSError: not empty, missing; :raises UnsafeVolume:"""
    with dir_fd(root, path.parent) as fd:
        st = os.lstat(path.name, dir_fd=fd)
        if not stat.S_ISDIR(st.st_mode):
            raise refusal(path, st)
        with _named(path):
            os.rmdir(path.name, dir_fd=fd)


def rename(root: Path, src: Path, dst: Path) -> None:
    """Rename *src* to *dst*, both below *root*, through their parents' descriptors (a link at *src* is moved as a
    link). :raises UnsafeVolume: a directory on the way is a symlink or not a directory"""
    with dir_fd(root, src.parent) as sfd, dir_fd(root, dst.parent) as dfd:
        with _named(src, dst):
            os.rename(src.name, dst.name, src_dir_fd=sfd, dst_dir_fd=dfd)


def write(root: Path, path: Path, data: bytes, mode: int, *, durable: bool = True) -> None:
    """Replace the file *path* below *root* atomically (:func:`trtwarm.fs.atomic.write_at`) through its directory's
    descriptor: nothing is written through a link. :raises UnsafeVolume: a directory on the way is a link or a file"""
    with dir_fd(root, path.parent) as fd, _named(path):
        write_at(fd, path.name, data, mode, durable=durable)


def symlink(root: Path, target: Path | str, link: Path) -> None:
    """Point the link *link* below *root* at *target*, replacing any previous one atomically, through its
    directory's descriptor. :raises UnsafeVolume: a directory on the way is a link or a file"""
    with dir_fd(root, link.parent) as fd, _named(link):
        tmp = f".{link.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        os.symlink(target, tmp, dir_fd=fd)
        try:
            os.replace(tmp, link.name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=fd)
            raise


def write_json(root: Path, path: Path, doc: object, mode: int, *, durable: bool = True) -> None:
    """:func:`write` of *doc* as indented JSON (as :func:`trtwarm.fs.ops.atomic_write_json` writes it)."""
    write(root, path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode(), mode, durable=durable)


def check_tree(root: Path, names: tuple[str, ...]) -> None:
    """Refuse a volume where one of trtwarm's directories *names* (directly below *root*) exists as a symlink or a
    file: checked once by every command before it reads or writes the volume. :raises UnsafeVolume:"""
    for name in names:
        try:
            st = os.lstat(Path(root) / name)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise refusal(Path(root) / name, st)


__all__ = ["check_dir", "check_tree", "clear_at", "dir_fd", "makedirs", "refusal", "rename", "rmdir", "rmtree", "rmtree_at",
           "unlink", "symlink", "what_is", "write", "write_json"]
