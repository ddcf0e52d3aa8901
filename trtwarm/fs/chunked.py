"""Hashing, checking and copying a file through a descriptor, chunk by chunk.

Every function here reads with ``pread`` from offset 0 of a descriptor the caller opened once (never a path) and
never moves its offset, so what is hashed is what the caller's descriptor holds. A file is checked against its
manifest row's digests: the chunk digests (one SHA-256 per consecutive ``chunk_bytes``, see
:mod:`trtwarm.volume.chunks`) where the row has them, else the whole-file SHA-256.

This module is the one place that decides how that work is spread over threads and what buffers it reads into;
callers pass descriptors and digests only.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence

_BUFFER = 1 << 20


def _read_into(fd: int, view: memoryview, offset: int) -> int:
    """Fill *view* from *fd* at *offset*; fewer bytes only at the end of the file."""
    got = 0
    while got < len(view):
        n = os.preadv(fd, [view[got:]], offset + got)
        if n == 0:
            break
        got += n
    return got


def _write_all(fd: int, view: memoryview, offset: int) -> None:
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)


def hash_fd(fd: int, chunk_bytes: int) -> tuple[str, int, list[str]]:
    """``(whole-file SHA-256, size, [SHA-256 of each chunk])`` of the file behind *fd*, read to its end."""
    return _pass(fd, None, chunk_bytes)


def copy_hash_fd(sfd: int, dfd: int, chunk_bytes: int) -> tuple[str, int, list[str]]:
    """Copy the whole file behind *sfd* into *dfd* (from offset 0); the digests of the bytes copied, as
    :func:`hash_fd` gives them. Writes into *dfd* what was hashed, never a second read of *sfd*."""
    return _pass(sfd, dfd, chunk_bytes)


def check_fd(fd: int, size: int, sha256: str, chunk_bytes: int | None = None,
             chunk_sha256: Sequence[str] | None = None) -> bool:
    """Whether the file behind *fd* holds exactly *size* bytes with these digests (the chunk digests when given,
    else the whole-file *sha256*)."""
    return _matches(_pass(fd, None, chunk_bytes or max(size, 1), stop=size + 1), size, sha256, chunk_sha256)


def copy_fd(sfd: int, dfd: int, size: int, sha256: str, chunk_bytes: int | None = None,
            chunk_sha256: Sequence[str] | None = None) -> bool:
    """Copy the file behind *sfd* into *dfd*, checking the bytes copied as :func:`check_fd` does: whether they
    matched (else *dfd* holds something else, and the caller removes it)."""
    return _matches(_pass(sfd, dfd, chunk_bytes or max(size, 1), stop=size + 1), size, sha256, chunk_sha256)


def _matches(got: tuple[str, int, list[str]], size: int, sha256: str, chunks: Sequence[str] | None) -> bool:
    whole, n, digests = got
    if n != size:
        return False
    return list(digests) == list(chunks) if chunks else whole == sha256


def _pass(sfd: int, dfd: int | None, chunk_bytes: int, stop: int | None = None) -> tuple[str, int, list[str]]:
    """One sequential pass over *sfd* (to its end, or to *stop* bytes): the digests, the size; a copy into *dfd*."""
    whole, chunk, digests, size, filled = hashlib.sha256(), hashlib.sha256(), [], 0, 0
    buffer = memoryview(bytearray(_BUFFER))
    while stop is None or size < stop:
        want = min(_BUFFER, chunk_bytes - filled, (stop - size) if stop is not None else _BUFFER)
        got = _read_into(sfd, buffer[:want], size)
        if got == 0:
            break
        data = buffer[:got]
        whole.update(data)
        chunk.update(data)
        if dfd is not None:
            _write_all(dfd, data, size)
        size, filled = size + got, filled + got
        if filled == chunk_bytes:
            digests.append(chunk.hexdigest())
            chunk, filled = hashlib.sha256(), 0
    if filled:
        digests.append(chunk.hexdigest())
    return whole.hexdigest(), size, digests


__all__ = ["check_fd", "copy_fd", "copy_hash_fd", "hash_fd"]
