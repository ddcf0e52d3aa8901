"""Verified bytes: the one way trtwarm reads what it hashes, signs, uploads, loads or hands over.

**The rule.** A file of an entry (on the volume, in a seed tier, in staging, in the private build directory) is opened
once, ``O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC``, relative to its directory's descriptor, every directory on
the way opened ``O_NOFOLLOW | O_DIRECTORY`` relative to its parent's (:class:`Dir`); ``fstat`` of that descriptor must
say a regular file of the size its manifest row names, else the entry is damaged
(:class:`~trtwarm.errors.EntryInvalid`: a link, a FIFO, a device, a directory is never followed, read or waited on).
Then it is hashed through that descriptor (:mod:`trtwarm.fs.chunked`). What is used afterwards is that descriptor, or
a private copy made from it (:class:`Bytes`): the hand-off copy, the load check (:meth:`Bytes.view`: a private
directory of ``/proc/<pid>/fd/<n>`` links), the push (:meth:`Bytes.proc`), never the path opened again. A manifest
and its envelope are read once through the entry's directory descriptor and kept in memory; the trust check judges
those bytes.

**What a descriptor does not stop**: a writer of the volume writing the *same inode* in place after the hash; a read
through the descriptor then sees the new bytes. Only a private copy stops that, which is why the hand-off under
``enforce`` is a copy made while hashing, and why a build is made, loaded and hashed in a Pod-private directory and
copied into ``.staging`` from there (:meth:`Dir.copy_in`): the signature covers the private bytes, and a later change
in staging breaks it.

Nothing else in the volume, init, lifecycle, trust and sidecar layers opens, hashes, chmods, renames or removes a
file of the volume by path (``tests/test_ownership.py`` reads the source and fails on a bypass).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from trtwarm.errors import EntryInvalid
from trtwarm.fs import chunked
from trtwarm.volume.opened import DIR_FLAGS, FILE_FLAGS, NEW_FLAGS, Dir, kind
#: how a listed file's bytes are checked: its descriptor and manifest row in, the descriptor of the verified bytes
#: out (the same one, or a private copy made from it), or None when they do not match the row
Checker = Callable[[int, dict[str, Any]], "int | None"]


def check_bytes(fd: int, row: dict[str, Any]) -> int | None:
    """The default :data:`Checker`: *fd* when its bytes match *row* (by chunk digest where the row has them)."""
    ok = chunked.check_fd(fd, row["bytes"], row["sha256"], row.get("chunk_bytes"), row.get("chunk_sha256"))
    return fd if ok else None


class Bytes:
    """The verified bytes of an entry's listed files: for each path, the descriptor whose bytes were checked (or
    written from checked bytes), and the identity (device, inode, size, mtime_ns, ctime_ns) of the file on the volume
    that was checked or written, for the readiness of a linked hand-off. Closed by :meth:`close` (or when collected).
    """

    def __init__(self, envelope: Any = None, envelope_problem: str | None = None) -> None:
        self.fds: dict[str, int] = {}
        self.volume_ids: dict[str, list[int]] = {}
        self.envelope, self.envelope_problem = envelope, envelope_problem  # the signature as read, or why not

    def add(self, rel: str, fd: int, volume: os.stat_result) -> None:
        """Keep *fd* (now owned here) as the verified bytes of *rel*; *volume*: the volume file's fstat."""
        self.fds[rel] = fd
        self.volume_ids[rel] = [volume.st_dev, volume.st_ino, volume.st_size, volume.st_mtime_ns,
                                volume.st_ctime_ns]

    def proc(self, rel: str) -> Path:
        """A path to the verified bytes of *rel*: ``/proc/<pid>/fd/<n>`` (opening it opens the very file checked,
        whatever its name is now; from a child process too, while this one lives)."""
        return Path(f"/proc/{os.getpid()}/fd/{self.fds[rel]}")

    @contextlib.contextmanager
    def view(self, manifest: bytes | None = None, parent: Path | None = None) -> Iterator[Path]:
        """A private directory (0700) where each listed path is a link to :meth:`proc` (and ``manifest.json``,
        when given, a private file): what a runtime loads instead of the entry's directory, so it reads the bytes
        that were checked, with the side files beside the engine where it expects them. Removed afterwards."""
        with Dir.private(parent, "trtwarm-view-") as view:
            for rel in self.fds:
                with view._parent_of(rel, create=0o700) as (fd, name):
                    os.symlink(self.proc(rel), name, dir_fd=fd)
            if manifest is not None:
                view.write_new("manifest.json", manifest, 0o600)
            yield view.proc  # the directory made, whatever a writer of its parent puts under its name

    def copy_into(self, target: Dir, rows: list[dict[str, Any]], mode: int = 0o644) -> str | None:
        """Copy each row's verified bytes into the new file ``target/<path>``, checking them against the row as
        they are copied (a reflink where the filesystem offers one, then the copy is checked): None, or the path
        whose bytes did not match (changed in place since the check; the caller removes *target*). The copies'
        descriptors replace the originals here: from now on the copies are the verified bytes."""
        return self.recheck(rows, lambda fd, row: target.clone_in(fd, row["path"], row, mode))

    def recheck(self, rows: list[dict[str, Any]], checker: Checker) -> str | None:
        """Pass each row's verified descriptor through *checker* again (e.g. the hand-off's copier: a private copy,
        checked as it is made), whose descriptor replaces it here: None, or the path whose bytes no longer match."""
        for row in rows:
            rel = row["path"]
            got = checker(self.fds[rel], row)
            if got is None:
                return rel
            if got != self.fds[rel]:
                os.close(self.fds[rel])
                self.fds[rel] = got
        return None

    def close(self) -> None:
        """Close every descriptor (idempotent)."""
        for fd in self.fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = {}

    def __del__(self) -> None:
        self.close()


def check_as_served(path: Path, row: dict[str, Any]) -> str | None:
    """Whether the file a server reaches at *path* holds exactly *row*'s bytes: opened once as the server opens it
    (links on the way followed, as the server follows them, but never waiting on a FIFO), ``fstat`` a regular file
    of the row's size, checked through that descriptor. :return: None, or what is wrong"""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return f"{path} cannot be opened ({exc.strerror})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != row["bytes"]:
            return f"{path} is {kind(st) if not stat.S_ISREG(st.st_mode) else f'{st.st_size} bytes'}, not the " \
                   f"{row['bytes']} bytes that were verified"
        return None if check_bytes(fd, row) == fd else f"{path} does not hold its signed digests (rewritten)"
    finally:
        os.close(fd)


def check_files(directory: Dir, rows: list[dict[str, Any]], checker: Checker | None = None,
                into: Bytes | None = None) -> Bytes:
    """Open each row's file once below *directory*, check its size (``fstat``) and its bytes (*checker*, default
    :func:`check_bytes`): the verified bytes. :raises EntryInvalid: with the first problem (all closed then)"""
    found = into if into is not None else Bytes()
    try:
        for row in rows:
            what = "engine file" if row["role"] == "engine" else row["path"]
            fd, st = directory.open_file(row["path"], what)
            try:
                if st.st_size != row["bytes"]:
                    raise EntryInvalid(f"{what} is {st.st_size} bytes, manifest says {row['bytes']} (truncated)")
                verified = (checker or check_bytes)(fd, row)
            except BaseException:
                os.close(fd)
                raise
            if verified is None:
                os.close(fd)
                what = "engine" if row["role"] == "engine" else row["path"]
                raise EntryInvalid(f"{what} SHA-256 does not match the manifest (corrupt)")
            if verified != fd:
                os.close(fd)
            found.add(row["path"], verified, st)
    except BaseException:
        found.close()
        raise
    return found


__all__ = ["DIR_FLAGS", "FILE_FLAGS", "NEW_FLAGS", "Bytes", "Checker", "Dir", "check_as_served", "check_bytes",
           "check_files"]
