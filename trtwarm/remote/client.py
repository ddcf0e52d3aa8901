"""The object-store client of the S3 layout: the path interface the repository, the shared pull and push use, on
:class:`trtwarm.transport.s3.ObjectStore` (obstore under the transport contract: bounds, caps, retries, the
process's memory of a dead store, stopping), and the metric labels of its failures.

Every failure is one of :class:`RemoteAuthError`, :class:`RemoteBucketError`, :class:`RemoteUnreachable` or
:class:`RemoteError` with a one-line message (the server's status and S3 error code, never a credential) and a
``kind`` for metrics.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trtwarm.errors import RemoteAuthError, RemoteBucketError, RemoteError, RemoteUnreachable
from trtwarm.remote.url import RemoteURL, redact
from trtwarm.transport.s3 import ObjectStore

#: error kinds, the label values of ``trtwarm_remote_errors_total{kind}``
KINDS = ("auth", "bucket", "unreachable", "server", "integrity", "trust", "conflict")


def kind_of(error: RemoteError) -> str:
    """The metric label of *error*."""
    return getattr(error, "kind", None) or {RemoteAuthError: "auth", RemoteBucketError: "bucket",
                                            RemoteUnreachable: "unreachable"}.get(type(error), "server")


class Client:
    """One bucket and prefix; paths given to its methods are relative to the prefix.

    Every request is bounded, watched (named in the log after a few seconds) and refused at once when the store
    failed earlier in this process: a store that hangs costs one request budget, whatever follows
    (:mod:`trtwarm.transport`).
    """

    def __init__(self, remote: RemoteURL) -> None:
        self.remote = remote
        self.name = remote.describe()
        self.objects = ObjectStore(remote, lambda text: redact(text, remote))
        self._bucket_checked = False

    def check_bucket(self) -> None:
        """A missing object and a missing bucket both answer 404 to GET/HEAD: tell them apart once, with a LIST."""
        if self._bucket_checked:
            return
        next(iter(self.objects.list("refs/", chunk=1)), None)
        self._bucket_checked = True

    def head(self, path: str) -> dict[str, Any] | None:
        """The object's metadata (``size``, ``e_tag``, ``last_modified``), or None if absent."""
        try:
            return self.objects.head(path)
        except FileNotFoundError:
            self.check_bucket()
            return None

    def get(self, path: str, limit: int) -> bytes | None:
        """A small object's bytes (at most *limit*), or None if absent. :raises RemoteError: larger than *limit*."""
        try:
            return self.objects.get(path, limit)
        except FileNotFoundError:
            self.check_bucket()
            return None

    def stream_range(self, path: str, start: int, length: int, piece: int) -> Iterator[memoryview]:
        """Bytes ``[start, start+length)`` of *path* as they arrive, in pieces of about *piece* bytes (a cache-sized
        buffer, reused, instead of one buffer of *length*).

        :raises FileNotFoundError: the object vanished; :raises RemoteError: the request or the body failed
        """
        return self.objects.stream_range(path, start, length, piece)

    def put_create(self, path: str, data: bytes) -> bool:
        """Create *path* only if absent (``If-None-Match: *``, one buffered PUT: small objects only).

        :return: True if this call created it, False if it already existed
        """
        return self.objects.put_create(path, data)

    def put_bytes(self, path: str, data: bytes) -> None:
        """Write *path* unconditionally (small objects)."""
        self.objects.put(path, data)

    def put_file(self, path: str, file: Path, part_size: int, concurrency: int) -> None:
        """Upload *file* with parallel multipart (bounded memory: about *concurrency* × *part_size*)."""
        self.objects.put_file(path, file, part_size, concurrency)

    def list(self, prefix: str) -> Iterator[dict[str, Any]]:
        """Every object under *prefix* (relative paths), page by page, each key once and in order."""
        return self.objects.list(prefix)

    def delete(self, path: str) -> None:
        """Delete *path* (absent is fine)."""
        try:
            self.objects.delete(path)
        except FileNotFoundError:
            return


__all__ = ["KINDS", "Client", "kind_of"]
