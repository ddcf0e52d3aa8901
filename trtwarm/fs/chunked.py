"""Hashing, checking and copying a file through a descriptor, chunk by chunk, on as many cores as the process may use.

Every function here reads with ``preadv`` from offset 0 of a descriptor the caller opened once (never a path) and
never moves its offset, so what is hashed is what the caller's descriptor holds. A file is checked against its
manifest row's digests: the chunk digests (one SHA-256 per consecutive ``chunk_bytes``, see
:mod:`trtwarm.volume.chunks`) where the row has them, else the whole-file SHA-256.

How the work is spread (this module is the one place that decides it, and what buffers it reads into):

* a check or copy with chunk digests hashes the chunks on a pool of threads (:func:`trtwarm.fs.cpus.usable_cpus`
  of them), each reading its chunk into its own reused buffer and stopping as soon as any chunk differs;
* one whole-file SHA-256 cannot be split: a check or copy without chunk digests, and :func:`hash_fd` /
  :func:`copy_hash_fd` (which must also give the whole-file digest), make one ordered pass (:mod:`trtwarm.fs.stream`)
  in which reading ahead, the chunk's hash and the write run in threads beside the whole-file hash, on the same
  bytes: what is written is what was hashed, and the source is read once.

``hashlib`` and ``os.preadv``/``os.pwrite`` release the interpreter's lock, so the threads run on separate cores.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from typing import TYPE_CHECKING

from trtwarm.fs.cpus import usable_cpus
from trtwarm.fs.stream import BUFFER, read_into, stream, write_all

#: the copy's threads write one at a time: writers of one file serialise on its inode lock in the kernel anyway (ext4,
#: XFS: buffered writes take it exclusively), and waiting there spins on a CPU the hashing could use (see
#: docs/benchmarks.md, "Big engines")
ONE_WRITER = True

if TYPE_CHECKING:  # threading is imported only where a pool is started
    import threading


def hash_fd(fd: int, chunk_bytes: int) -> tuple[str, int, list[str]]:
    """``(whole-file SHA-256, size, [SHA-256 of each chunk])`` of the file behind *fd*, read to its end."""
    return stream(fd, None, chunk_bytes, None)


def copy_hash_fd(sfd: int, dfd: int, chunk_bytes: int) -> tuple[str, int, list[str]]:
    """Copy the whole file behind *sfd* into *dfd* (from offset 0); the digests of the bytes copied, as
    :func:`hash_fd` gives them. Writes into *dfd* what was hashed, never a second read of *sfd*."""
    return stream(sfd, dfd, chunk_bytes, None)


def check_fd(fd: int, size: int, sha256: str, chunk_bytes: int | None = None,
             chunk_sha256: Sequence[str] | None = None) -> bool:
    """Whether the file behind *fd* holds exactly *size* bytes with these digests (the chunk digests when given,
    else the whole-file *sha256*)."""
    return _verified(fd, None, size, sha256, chunk_bytes, chunk_sha256)


def copy_fd(sfd: int, dfd: int, size: int, sha256: str, chunk_bytes: int | None = None,
            chunk_sha256: Sequence[str] | None = None) -> bool:
    """Copy the file behind *sfd* into *dfd*, checking the bytes copied as :func:`check_fd` does: whether they
    matched (else *dfd* holds something else, and the caller removes it). With chunk digests the copy stops at the
    first chunk that differs."""
    return _verified(sfd, dfd, size, sha256, chunk_bytes, chunk_sha256)


def _verified(sfd: int, dfd: int | None, size: int, sha256: str, chunk_bytes: int | None,
              chunks: Sequence[str] | None) -> bool:
    """Check (and with *dfd* copy) the file behind *sfd* against *size* and its digests."""
    st = os.fstat(sfd)
    if stat.S_ISREG(st.st_mode) and st.st_size != size:  # no read needed to refuse it
        return False
    if not chunks:
        whole, got, _ = stream(sfd, dfd, None, size + 1)
        return got == size and whole == sha256
    chunk_bytes = chunk_bytes or max(size, 1)
    if len(chunks) != -(-size // chunk_bytes):
        return False
    return _chunks_match(sfd, dfd, size, chunk_bytes, list(chunks)) and not os.pread(sfd, 1, size)


def _chunks_match(sfd: int, dfd: int | None, size: int, chunk_bytes: int, expected: list[str]) -> bool:
    """Whether every chunk of ``[0, size)`` hashes to its digest, the chunks shared out over a pool of threads that
    stop at the first one that differs (or is short); with *dfd* each chunk is written there as it is read."""
    workers = min(usable_cpus(), len(expected))
    if workers <= 1:
        buffer = _buffer(chunk_bytes)
        return all(_chunk_ok(sfd, dfd, i, size, chunk_bytes, expected[i], buffer, None)
                   for i in range(len(expected)))
    import itertools
    import threading

    indices, failed, errors = itertools.count(), threading.Event(), []
    lock = threading.Lock() if dfd is not None and ONE_WRITER else None

    def work() -> None:
        buffer = _buffer(chunk_bytes)
        try:
            while not failed.is_set() and (i := next(indices)) < len(expected):
                if not _chunk_ok(sfd, dfd, i, size, chunk_bytes, expected[i], buffer, failed, lock):
                    failed.set()
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)
            failed.set()

    threads = [threading.Thread(target=work, name="trtwarm-check", daemon=True) for _ in range(workers - 1)]
    for thread in threads:
        thread.start()
    work()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return not failed.is_set()


def _buffer(chunk_bytes: int) -> memoryview:
    return memoryview(bytearray(min(BUFFER, chunk_bytes)))


def _chunk_ok(sfd: int, dfd: int | None, index: int, size: int, chunk_bytes: int, expected: str, buffer: memoryview,
              failed: threading.Event | None, lock: threading.Lock | None = None) -> bool:
    """Whether chunk *index* reads whole and hashes to *expected*; written to *dfd* (one writer at a time: parallel
    writers of one file only spin on its inode lock) as it is read. Gives up when *failed* (an Event) is set."""
    import hashlib

    digest, offset, end = hashlib.sha256(), index * chunk_bytes, min(size, (index + 1) * chunk_bytes)
    while offset < end:
        if failed is not None and failed.is_set():
            return True  # another chunk failed: the caller's answer is already False
        want = buffer[:min(len(buffer), end - offset)]
        got = read_into(sfd, want, offset)
        if got < len(want):
            return False  # shorter than its row says
        digest.update(want)
        if dfd is not None:
            if lock is None:
                write_all(dfd, want, offset)
            else:
                with lock:
                    write_all(dfd, want, offset)
        offset += got
    return digest.hexdigest() == expected


__all__ = ["check_fd", "copy_fd", "copy_hash_fd", "hash_fd"]
