"""Chunk digests of an entry's large files: one SHA-256 per consecutive ``chunk_bytes`` of a file, so a reader can
verify a file in parallel pieces (the remote pull hashes each range in the worker that writes it) instead of in one
sequential stream, which one core cannot keep up with on a fast link.

A manifest ``files`` row of a file larger than one chunk carries, next to its whole-file ``sha256`` (which stays:
blobs are addressed by it, and readers without chunk support check it)::

    "chunk_bytes": 16777216, "chunk_sha256": ["<hex of bytes [0, 16 MiB)>", "<hex of [16 MiB, 32 MiB)>", ...]

the last chunk being shorter. Both fields or neither; ``chunk_bytes`` a power of two from 1 MiB to 1 GiB;
``len(chunk_sha256) == ceil(bytes / chunk_bytes)``, at least one (an empty file has none: its whole digest is
checked); every digest 64 lower-case hex digits; a single chunk's digest is the file's. The publish writes them for
files larger than :data:`CHUNK_BYTES` only; a reader accepts any row that obeys these rules.
"""

from __future__ import annotations

import re
from typing import Any

#: the chunk size the publish writes (the remote pull's default range size: one range, one chunk)
CHUNK_BYTES = 16 << 20
MIN_CHUNK_BYTES = 1 << 20
MAX_CHUNK_BYTES = 1 << 30
_HEX64 = re.compile(r"[0-9a-f]{64}")


def chunk_problem(row: dict[str, Any]) -> str | None:
    """What is wrong with the chunk fields of the manifest row *row* (one with an int ``bytes`` and a str ``sha256``),
    or None: absent, or well formed."""
    has_size, has_list = "chunk_bytes" in row, "chunk_sha256" in row
    if not has_size and not has_list:
        return None
    if has_size != has_list:
        return "has chunk_bytes without chunk_sha256 or the reverse"
    size, digests = row["chunk_bytes"], row["chunk_sha256"]
    if not (isinstance(size, int) and not isinstance(size, bool) and MIN_CHUNK_BYTES <= size <= MAX_CHUNK_BYTES
            and size & (size - 1) == 0):
        return f"has chunk_bytes {size!r}, not a power of two from 1 MiB to 1 GiB"
    count = -(-row["bytes"] // size)
    if count == 0:
        return "has chunk digests for an empty file"
    if not isinstance(digests, list) or len(digests) != count:
        got = len(digests) if isinstance(digests, list) else type(digests).__name__
        return f"has {got} chunk digests, not {count} ({row['bytes']} bytes in chunks of {size})"
    if not all(isinstance(d, str) and _HEX64.fullmatch(d) for d in digests):
        return "has a chunk digest that is not 64 lower-case hex digits"
    if count == 1 and digests[0] != row["sha256"]:
        return "has one chunk whose digest differs from the file's"
    return None


def chunk_count(size: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """How many chunks a file of *size* bytes has."""
    return -(-size // chunk_bytes)


def chunk_fields(size: int, digests: list[str], chunk_bytes: int = CHUNK_BYTES) -> dict[str, Any]:
    """The row fields of a file of *size* bytes with chunk digests *digests*: none for a file of one chunk."""
    if size <= chunk_bytes:
        return {}
    return {"chunk_bytes": chunk_bytes, "chunk_sha256": digests}


__all__ = ["CHUNK_BYTES", "MAX_CHUNK_BYTES", "MIN_CHUNK_BYTES", "chunk_count", "chunk_fields", "chunk_problem"]
