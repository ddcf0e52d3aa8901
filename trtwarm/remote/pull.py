"""Pull an entry's files from the repository into a staging directory: parallel ranged GETs, streamed in order to
the file and through SHA-256 as they arrive, with bounded memory whatever the engine's size.

Each blob is cut into ``chunk``-sized ranges; at most ``window`` ranges are in flight. A worker streams its range
to the file at its offset in ``PIECE``-sized writes as the bytes arrive; the caller's thread hashes the finished
ranges in order, read back from the page cache the writes just filled through one 1 MiB buffer, so memory stays at
a few MiB whatever the engine's size and the fetches never wait for the hash. A blob whose size or SHA-256
differs from the manifest raises :class:`BlobCorrupt` before anything is published; the caller's staging
directory is then discarded. Transient failures are retried by the client (see :mod:`trtwarm.remote.client`); a
range that fails after that fails the pull.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtwarm.errors import RemoteError
from trtwarm.remote.repo import Repository, blob_path, manifest_files

log = logging.getLogger("trtwarm.remote")
CHUNK = 16 << 20
WINDOW = 4
PIECE = 1 << 20  # one write: obstore joins the HTTP frames up to this, a buffer that stays in the CPU's cache


class BlobCorrupt(RemoteError):
    """A blob's bytes do not match the manifest (truncated, corrupt, replaced): never published."""

    kind = "integrity"

    def __init__(self, message: str, sha256: str, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint or "the blob in the bucket is damaged; the engine is rebuilt (and the "
                         "push repairs the blob), or run `trtwarm remote rm KEY` and prebuild it again")
        self.sha256 = sha256


@dataclass
class PullStats:
    """What one pull moved."""

    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    hash_seconds: float = 0.0
    #: hashing after the last byte landed: what verification adds to a pull where a core is free to hash meanwhile
    tail_seconds: float = 0.0


def _check_present(repo: Repository, row: dict[str, Any]) -> str:
    """HEAD the blob of *row*: it must exist with the manifest's size. :return: its path :raises BlobCorrupt:"""
    sha, path = row["sha256"], blob_path(row["sha256"])
    meta = repo.client.head(path)
    if meta is None:
        raise BlobCorrupt(f"blob {sha[:16]} ({row['path']}) is missing from {repo.url}", sha)
    if meta.get("size") != row["bytes"]:
        raise BlobCorrupt(f"blob {sha[:16]} ({row['path']}) is {meta.get('size')} bytes in {repo.url}, the manifest "
                          f"says {row['bytes']} (truncated or replaced)", sha)
    return path


def _hash_range(fd: int, digest: Any, buffer: bytearray, start: int, length: int) -> None:
    """Feed bytes ``[start, start+length)`` of the file *fd* to *digest*, read back from the page cache the writes
    just filled through *buffer* (one cache-sized buffer, reused: measured cheaper than mapping the range, whose
    page faults cost more than the copy). :raises BlobCorrupt: the file is shorter than the range (never expected)"""
    view, pos, end = memoryview(buffer), start, start + length
    while pos < end:
        got = os.preadv(fd, [view[:min(len(buffer), end - pos)]], pos)
        if got <= 0:
            raise BlobCorrupt(f"the file being pulled ended at {pos}, before {end}", "")
        digest.update(view[:got])  # hashlib releases the GIL for large buffers
        pos += got


def fetch_blob(repo: Repository, row: dict[str, Any], dest: Path, pool: ThreadPoolExecutor, stats: PullStats,
               chunk: int = CHUNK, window: int = WINDOW, *, verify: bool = True) -> None:
    """Download the blob of *row* (``sha256``, ``bytes``) into *dest*, verifying it. :raises BlobCorrupt, RemoteError:

    Every range is queued on *pool* at once (its *window* workers bound what is in flight); a worker streams its
    range to the file in ``PIECE``-sized writes as the bytes arrive, and keeps nothing. The caller's thread hashes
    the finished ranges in order from the file: fetching never waits for hashing (measured: hashing the ranges from
    the buffers they arrived in stalled the fetches behind it and took a 16 MiB buffer per range, each a fresh
    allocation the kernel had to fault in; README "Benchmarks").

    :param verify: False only for the benchmark that measures what verification costs (bench/bench_remote.py)
    """
    sha, size = row["sha256"], row["bytes"]
    path = _check_present(repo, row)
    digest, buffer = hashlib.sha256(), bytearray(PIECE)
    fd = os.open(dest, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    # One writer at a time: the filesystem serialises writes to one file anyway (ext4 and XFS take the inode's
    # lock for a buffered write), and waiting on it spins in the kernel; measured (perf) at 13-16 % of the pull's
    # CPU with 4 workers, taken from the hash and the store. Waiting here sleeps instead.
    writing = threading.Lock()

    def fetch(start: int) -> int:  # in a worker: the range lands on disk piece by piece (pwrite releases the GIL)
        length, pos = min(chunk, size - start), start
        for data in repo.client.stream_range(path, start, length, PIECE):
            if pos + len(data) > start + length:
                break
            with writing:
                while data:
                    written = os.pwrite(fd, data, pos)
                    data, pos = data[written:], pos + written
        if pos != start + length:
            raise BlobCorrupt(f"blob {sha[:16]} ({row['path']}) in {repo.url}: the range at {start} came back "
                              f"{pos - start} bytes long, not {length} (truncated or replaced)", sha)
        landed[0] = max(landed[0], time.monotonic())
        return length

    landed = [0.0]  # when the last range finished landing
    futures = [pool.submit(fetch, start) for start in range(0, size, chunk)]
    try:
        for future, start in zip(futures, range(0, size, chunk)):  # in order: the hash needs the bytes in sequence
            length = future.result()
            started = time.monotonic()
            if verify:
                _hash_range(fd, digest, buffer, start, length)
            stats.hash_seconds += time.monotonic() - started
            stats.bytes += length
        stats.tail_seconds += max(0.0, time.monotonic() - landed[0])
    except FileNotFoundError:
        raise BlobCorrupt(f"blob {sha[:16]} vanished from {repo.url} during the pull", sha) from None
    finally:
        for future in futures:
            future.cancel()
        for future in futures:  # a running fetch still writes to fd: let it finish before fd is closed
            with contextlib.suppress(Exception):
                future.result()
        os.close(fd)
    if verify and digest.hexdigest() != sha:
        raise BlobCorrupt(f"blob {sha[:16]} ({row['path']}) in {repo.url} does not match its SHA-256 "
                          f"(got {digest.hexdigest()[:16]}): refused", sha)


def pull_into(repo: Repository, manifest: dict[str, Any], staging: Path, *, chunk: int = CHUNK,
              window: int = WINDOW, verify: bool = True) -> PullStats:
    """Fetch and verify every file of *manifest* into *staging* (files only: the caller writes the manifest).

    :raises BlobCorrupt: a blob differs from the manifest; :raises RemoteError: the store failed after retries
    """
    start = time.monotonic()
    stats = PullStats()
    try:
        rows = manifest_files(manifest)
    except ValueError as exc:
        raise RemoteError(f"the ref's manifest is unusable: {exc}") from None
    with ThreadPoolExecutor(max_workers=window, thread_name_prefix="trtwarm-pull") as pool:
        for row in rows:
            dest = staging / row["path"]
            dest.parent.mkdir(parents=True, exist_ok=True)
            fetch_blob(repo, row, dest, pool, stats, chunk, window, verify=verify)
            stats.files += 1
    stats.seconds = time.monotonic() - start
    return stats


__all__ = ["CHUNK", "WINDOW", "BlobCorrupt", "PullStats", "fetch_blob", "pull_into"]
