"""Pull an entry's files from the repository into a staging directory: parallel ranged GETs, streamed in order to
the file and through SHA-256 as they arrive, with bounded memory whatever the engine's size.

Each blob is cut into ``chunk``-sized ranges; at most ``window`` ranges are in flight. A worker writes its range
to the file at its offset as soon as it arrives; the caller's thread hashes the ranges in order and frees each one,
so memory stays at about ``window × chunk`` (64 MiB by default) and hashing costs no second pass over the file. A blob whose size or SHA-256 differs from the manifest raises :class:`BlobCorrupt`
before anything is published; the caller's staging directory is then discarded. Transient failures are retried
by the client (see :mod:`trtwarm.remote.client`); a range that fails after that fails the pull.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtwarm.errors import RemoteError
from trtwarm.remote.repo import Repository, blob_path, manifest_files

log = logging.getLogger("trtwarm.remote")
CHUNK = 16 << 20
WINDOW = 4


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


def fetch_blob(repo: Repository, row: dict[str, Any], dest: Path, pool: ThreadPoolExecutor, stats: PullStats,
               chunk: int = CHUNK, window: int = WINDOW, *, verify: bool = True) -> None:
    """Download the blob of *row* (``sha256``, ``bytes``) into *dest*, verifying it. :raises BlobCorrupt, RemoteError:

    :param verify: False only for the benchmark that measures what verification costs (bench/remote.py)
    """
    sha, size = row["sha256"], row["bytes"]
    path = _check_present(repo, row)
    digest = hashlib.sha256()
    offsets = iter(range(0, size, chunk))
    inflight: deque[Future[memoryview]] = deque()
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def fetch(start: int) -> memoryview:  # in a worker: the range lands on disk at once (pwrite releases the GIL)
        data = repo.client.get_range(path, start, min(chunk, size - start))
        os.pwrite(fd, data, start)
        return data

    def submit() -> None:
        start = next(offsets, None)
        if start is not None:
            inflight.append(pool.submit(fetch, start))

    try:
        for _ in range(window):
            submit()
        while inflight:  # in order: the hash needs the bytes in sequence; a range is freed once hashed
            data = inflight.popleft().result()
            submit()
            started = time.monotonic()
            if verify:
                digest.update(data)
            stats.hash_seconds += time.monotonic() - started
            stats.bytes += len(data)
    except FileNotFoundError:
        raise BlobCorrupt(f"blob {sha[:16]} vanished from {repo.url} during the pull", sha) from None
    finally:
        for future in inflight:
            future.cancel()
        for future in inflight:  # a running fetch still writes to fd: let it finish before fd is closed
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
