"""Pull an entry's files from the repository into a staging directory: parallel ranged GETs, streamed to the file
and through SHA-256 as they arrive, with bounded memory whatever the engine's size.

Each blob is cut into ``chunk``-sized ranges; at most ``window`` ranges are in flight. A worker streams its range
to the file at its offset in ``PIECE``-sized writes as the bytes arrive. A file whose manifest row has chunk
digests is verified by chunk, in parallel: its ranges are whole chunks and each worker hashes the pieces it writes,
comparing every chunk as it completes. A file without them is hashed whole by the caller's thread, the finished
ranges in order, read back from the page cache the writes just filled through one 1 MiB buffer. Either way memory
stays at a few MiB whatever the engine's size. A blob whose size, SHA-256 or chunk digest differs from the manifest
raises :class:`BlobCorrupt` before anything is published; the caller's staging directory is then discarded.
Transient failures are retried by the client (see :mod:`trtwarm.remote.client`); a range that fails after that
fails the pull at once: no queued range starts after one failed (a hung store costs one request budget, not one
per window of ranges), and the pull stops waiting for ranges in order as soon as any of them failed.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtwarm.errors import RemoteError
from trtwarm.fs.stream import read_into, write_all
from trtwarm.remote.repo import Repository, blob_path, manifest_files
from trtwarm.transport.waits import Transfer
from trtwarm.volume.verified import Bytes, Dir

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
    #: time spent hashing, summed over the threads that hash (by chunk: the workers, in parallel; so it can exceed
    #: the pull's wall time)
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
        want = view[:min(len(buffer), end - pos)]
        got = read_into(fd, want, pos)
        if got < len(want):
            raise BlobCorrupt(f"the file being pulled ended at {pos + got}, before {end}", "")
        digest.update(want)  # hashlib releases the GIL for large buffers
        pos += got


class _Chunks:
    """The chunk digests of one range of a row with ``chunk_sha256`` (the range starts on a chunk boundary): fed the
    range's pieces in order by the worker that writes them, it compares each chunk as it completes."""

    def __init__(self, repo: Repository, row: dict[str, Any], start: int) -> None:
        self.repo, self.row, self.size = repo, row, row["chunk_bytes"]
        self.index, self.filled, self.digest, self.seconds = start // self.size, 0, hashlib.sha256(), 0.0

    def feed(self, data: memoryview) -> None:
        """Hash *data*, the next bytes of the range. :raises BlobCorrupt: a chunk it completes does not match"""
        started, view = time.monotonic(), memoryview(data)
        while view:
            take = min(len(view), self.size - self.filled)
            self.digest.update(view[:take])  # hashlib releases the GIL for large buffers: the workers hash in parallel
            self.filled, view = self.filled + take, view[take:]
            if self.filled == self.size:
                self._close()
        self.seconds += time.monotonic() - started

    def finish(self) -> None:
        """The range ended (at the blob's end, or on a chunk boundary). :raises BlobCorrupt:"""
        if self.filled:
            self._close()

    def _close(self) -> None:
        got, sha, count = self.digest.hexdigest(), self.row["sha256"], len(self.row["chunk_sha256"])
        if got != self.row["chunk_sha256"][self.index]:
            start = self.index * self.size
            raise BlobCorrupt(f"blob {sha[:16]} ({self.row['path']}) in {self.repo.url}: chunk {self.index + 1} of "
                              f"{count} (bytes {start}-{start + self.filled - 1}) does not match its SHA-256 "
                              f"(got {got[:16]}): refused", sha)
        self.index, self.filled, self.digest = self.index + 1, 0, hashlib.sha256()


def range_size(chunk: int, row: dict[str, Any]) -> int:
    """The size of the ranges *row*'s blob is fetched in: *chunk* (``TRTWARM_REMOTE_CHUNK``), or for a row with chunk
    digests *chunk* rounded down to a multiple of its ``chunk_bytes`` (at least one), so every range is whole chunks
    and its worker can verify them alone."""
    if "chunk_sha256" not in row:
        return chunk
    return max(1, chunk // row["chunk_bytes"]) * row["chunk_bytes"]


def fetch_blob(repo: Repository, row: dict[str, Any], fd: int, pool: ThreadPoolExecutor, stats: PullStats,
               chunk: int = CHUNK, window: int = WINDOW, *, verify: bool = True,
               progress: Transfer | None = None) -> None:
    """Download the blob of *row* (``sha256``, ``bytes``) into the new, empty file behind *fd* (the caller's: opened
    once, never a path opened again), verifying it. :raises BlobCorrupt, RemoteError:

    Every range is queued on *pool* at once (its *window* workers bound what is in flight); a worker streams its
    range to the file in ``PIECE``-sized writes as the bytes arrive, and keeps nothing. A row with chunk digests
    (:mod:`trtwarm.volume.chunks`) is verified by chunk: each worker hashes the pieces it writes, so *window* cores
    hash at once and nothing is left to hash after the last byte. A row without them is hashed whole, in order, by
    the caller's thread from the file: fetching never waits for hashing (measured: hashing the ranges from the
    buffers they arrived in, in the caller's thread, stalled the fetches behind it and took a 16 MiB buffer per
    range, each a fresh allocation the kernel had to fault in; docs/benchmarks.md).

    :param verify: False only for the benchmark that measures what verification costs (bench/bench_remote.py)
    :param progress: fed the bytes as they land (progress lines while a long pull runs)
    """
    sha = row["sha256"]
    by_chunk = verify and "chunk_sha256" in row
    span = range_size(chunk, row) if by_chunk else chunk
    fetch = _RangeWriter(repo, row, _check_present(repo, row), fd, span, by_chunk, progress)
    starts = range(0, row["bytes"], span)
    futures = [pool.submit(fetch, start) for start in starts]
    try:
        got = _collect(futures, starts, fd, stats, whole=verify and not by_chunk)
        if got is not None and got != sha:
            raise BlobCorrupt(f"blob {sha[:16]} ({row['path']}) in {repo.url} does not match its SHA-256 "
                              f"(got {got[:16]}): refused", sha)
        stats.tail_seconds += max(0.0, time.monotonic() - fetch.landed)
    except FileNotFoundError:
        raise BlobCorrupt(f"blob {sha[:16]} vanished from {repo.url} during the pull", sha) from None
    finally:
        fetch.failed.set()  # a queued range that starts now returns at once (cancel() misses one starting now)
        for future in futures:
            future.cancel()
        for future in futures:  # a running fetch still writes to fd: let it finish before the caller closes fd
            with contextlib.suppress(Exception):
                future.result()


class _RangeWriter:
    """A worker's job: fetch one range of a blob and land it in the file piece by piece (and, by chunk, hash it)."""

    def __init__(self, repo: Repository, row: dict[str, Any], path: str, fd: int, span: int, by_chunk: bool,
                 progress: Transfer | None = None) -> None:
        self.repo, self.row, self.path, self.fd, self.span, self.by_chunk = repo, row, path, fd, span, by_chunk
        self.progress = progress
        self.failed = threading.Event()  # set when a range failed, or the blob is given up: no range starts then
        # One writer at a time: the filesystem serialises writes to one file anyway (ext4 and XFS take the inode's
        # lock for a buffered write), and waiting on it spins in the kernel; measured (perf) at 13-16 % of the
        # pull's CPU with 4 workers, taken from the hash and the store. Waiting here sleeps instead.
        self.writing = threading.Lock()
        self.landed = 0.0  # when the last piece landed

    def __call__(self, start: int) -> tuple[int, float]:
        """Fetch the range at *start*: ``(its length, seconds spent hashing it)``; a range starts only while no
        other has failed. :raises BlobCorrupt, RemoteError:"""
        if self.failed.is_set():
            raise _NotStarted("not started: another range of this blob failed")
        try:
            return self._fetch(start)
        except BaseException:
            self.failed.set()
            raise

    def _fetch(self, start: int) -> tuple[int, float]:
        row, size = self.row, self.row["bytes"]
        length, pos = min(self.span, size - start), start
        chunks = _Chunks(self.repo, row, start) if self.by_chunk else None
        for data in self.repo.client.stream_range(self.path, start, length, PIECE):
            if pos + len(data) > start + length:
                break
            with self.writing:
                pos = _write(self.fd, data, pos)  # pwrite releases the GIL
            self.landed = max(self.landed, time.monotonic())
            if self.progress is not None:
                self.progress.add(len(data))
            if chunks is not None:
                chunks.feed(data)
        if pos != start + length:
            raise BlobCorrupt(f"blob {row['sha256'][:16]} ({row['path']}) in {self.repo.url}: the range at {start} "
                              f"came back {pos - start} bytes long, not {length} (truncated or replaced)",
                              row["sha256"])
        if chunks is None:
            return length, 0.0
        chunks.finish()
        return length, chunks.seconds


def _write(fd: int, data: memoryview, pos: int) -> int:
    """Write all of *data* at *pos* of *fd* (:func:`trtwarm.fs.stream.write_all`). :return: the position after it"""
    view = memoryview(data)
    write_all(fd, view, pos)
    return pos + len(view)


def _collect(futures: list[Any], starts: range, fd: int, stats: PullStats, *, whole: bool) -> str | None:
    """Wait for the ranges in order (the first failure raises), adding to *stats*; with *whole* (a row without chunk
    digests), hash the file in order as the ranges land. :return: the file's SHA-256 with *whole*, else None"""
    digest, buffer = hashlib.sha256(), bytearray(PIECE if whole else 0)
    pending: set[Future[Any]] = set(futures)
    for future, start in zip(futures, starts):
        while not future.done():  # any range's failure ends the pull now, not when its turn in order comes
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            if any(f.exception() is not None for f in done):
                _raise_first_failure(futures)
        if future.exception() is not None:
            _raise_first_failure(futures)
        length, seconds = future.result()
        stats.hash_seconds += seconds
        if whole:
            started = time.monotonic()
            _hash_range(fd, digest, buffer, start, length)
            stats.hash_seconds += time.monotonic() - started
        stats.bytes += length
    return digest.hexdigest() if whole else None


class _NotStarted(RemoteError):
    """A range that did not start because another range of its blob had failed: never the failure reported."""


def _raise_first_failure(futures: list[Any]) -> None:
    """Cancel the queued ranges at once, let the running ones end (each is bounded by the request budget, and they
    write to the file), then raise the first real failure in range order (a corrupt chunk stays a BlobCorrupt)."""
    for future in futures:
        future.cancel()
    wait(futures)
    errors = [f.exception() for f in futures if not f.cancelled() and f.exception() is not None]
    real = [e for e in errors if not isinstance(e, _NotStarted)]
    raise (real or errors)[0]


def pull_into(repo: Repository, manifest: dict[str, Any], staging: Dir | Path, *, chunk: int = CHUNK,
              window: int = WINDOW, verify: bool = True, into: Bytes | None = None, mode: int = 0o644,
              dir_mode: int = 0o755) -> PullStats:
    """Fetch and verify every file of *manifest* into *staging* (files only: the caller writes the manifest), each a
    new file created through the staging directory's descriptor (never through a link, never an existing file),
    written, checked and fsynced through its own descriptor. *into*: keeps those descriptors (the verified bytes the
    caller loads, hands over and pushes; else they are closed).

    :raises BlobCorrupt: a blob differs from the manifest; :raises RemoteError: the store failed after retries
    """
    if not isinstance(staging, Dir):
        with Dir.open(Path(staging).parent, Path(staging)) as opened:
            return pull_into(repo, manifest, opened, chunk=chunk, window=window, verify=verify, into=into,
                             mode=mode, dir_mode=dir_mode)
    start = time.monotonic()
    stats = PullStats()
    kept = into if into is not None else Bytes()
    try:
        rows = manifest_files(manifest)
    except ValueError as exc:
        raise RemoteError(f"the ref's manifest is unusable: {exc}") from None
    client, total = repo.client, sum(row["bytes"] for row in rows)
    with ThreadPoolExecutor(max_workers=window, thread_name_prefix="trtwarm-pull") as pool, \
            Transfer(getattr(client, "name", repo.url), f"pulling {manifest.get('name', 'the entry')} from", total,
                     getattr(client.remote, "progress", 10.0)) as progress:
        for row in rows:
            fd = staging.create(row["path"], mode, dir_mode)
            kept.add(row["path"], fd, os.fstat(fd))
            fetch_blob(repo, row, fd, pool, stats, chunk, window, verify=verify, progress=progress)
            os.fsync(fd)
            kept.add(row["path"], fd, os.fstat(fd))  # its identity as written, for a linked hand-off
            stats.files += 1
    if into is None:
        kept.close()
    stats.seconds = time.monotonic() - start
    return stats


__all__ = ["CHUNK", "WINDOW", "BlobCorrupt", "PullStats", "fetch_blob", "pull_into", "range_size"]
