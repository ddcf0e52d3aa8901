"""The repository format on any S3-compatible store: immutable content-addressed blobs and one ref per key.

::

    <prefix>/blobs/sha256/<hex>     every file of an entry, by its SHA-256; its bytes never change (HEAD before upload)
    <prefix>/refs/<key>.json        {"schema": "trtwarm.ref/v1", "manifest": <manifest v2>, "signature": <DSSE|null>}

A ref is written **last**, after every blob it names, with ``If-None-Match: *``: the first writer wins, a loser
reads and adopts the winner's ref, and a reader that sees a ref can always fetch every blob. The key document is in
the manifest, so listing and coverage read refs only.

Stores without conditional writes (some gateways; see :meth:`Repository.conditional_writes`, probed once per
process) get the documented fallback: HEAD the ref, PUT it when absent, read it back, and adopt whatever is there.
Two pushers racing inside that window can both write; the later ref wins, both point to complete blobs (a reader
never sees a torn entry, and gc's grace period keeps the loser's blobs while anyone may still read them), and the
replaced writer logs a warning and counts a ``conflict``: never a silent last-writer-wins.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trtwarm.errors import ManifestInvalid, RemoteError
from trtwarm.remote.client import Client
from trtwarm.strictjson import JSONRefused, loads
from trtwarm.volume.chunks import chunk_problem
from trtwarm.volume.schema import check_manifest

log = logging.getLogger("trtwarm.remote")
REF_SCHEMA = "trtwarm.ref/v1"
REF_LIMIT = 4 << 20
_HEX64 = re.compile(r"[0-9a-f]{64}")
_probe_cache: dict[str, bool] = {}


def blob_path(sha256: str) -> str:
    """``blobs/sha256/<hex>``."""
    return f"blobs/sha256/{sha256}"


def ref_path(key: str) -> str:
    """``refs/<key>.json``."""
    return f"refs/{key}.json"


def manifest_files(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The manifest's ``files`` (schema 2), or the one engine file of a schema 1 manifest, as ``files`` rows.

    :raises ValueError: a row that is not a safe relative path with a 64-hex SHA-256 and a size, or whose chunk
        digests are malformed (:func:`trtwarm.volume.chunks.chunk_problem`)
    """
    files = manifest.get("files")
    if files is None:
        files = [{"path": manifest.get("engine_file"), "role": "engine", "bytes": manifest.get("engine_bytes"),
                  "sha256": manifest.get("engine_sha256")}]
    if not isinstance(files, list) or not files:
        raise ValueError("the manifest lists no files")
    for row in files:
        path = row.get("path") if isinstance(row, dict) else None
        if not (isinstance(path, str) and path and not path.startswith("/") and "\\" not in path
                and all(part not in ("", ".", "..") for part in path.split("/"))):
            raise ValueError(f"unsafe file path in the manifest: {path!r}")
        if not (isinstance(row.get("sha256"), str) and _HEX64.fullmatch(row["sha256"])
                and isinstance(row.get("bytes"), int) and row["bytes"] >= 0):
            raise ValueError(f"the manifest's row for {path} lacks a SHA-256 or a size")
        problem = chunk_problem(row)
        if problem:
            raise ValueError(f"the manifest's row for {path} {problem}")
    return files


def epoch(value: Any) -> float:
    """An object's ``last_modified`` (a datetime from obstore, or seconds) in epoch seconds (0 when unknown)."""
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    return float(value or 0.0)


def make_ref(manifest: dict[str, Any], signature: dict[str, Any] | None) -> dict[str, Any]:
    """The ref document of an entry."""
    return {"schema": REF_SCHEMA, "manifest": manifest, "signature": signature}


def check_ref(doc: Any, key: str | None) -> dict[str, Any]:
    """Shape-check a ref (for *key*, when given). :raises RemoteError: not a trtwarm ref, or for another key."""
    if not isinstance(doc, dict) or doc.get("schema") != REF_SCHEMA or not isinstance(doc.get("manifest"), dict):
        raise RemoteError(f"ref for {str(key)[:16]} is not a {REF_SCHEMA} document")
    manifest = doc["manifest"]
    if key is not None and manifest.get("key") != key:
        raise RemoteError(f"ref refs/{key}.json holds a manifest for another key ({str(manifest.get('key'))[:16]})")
    try:
        manifest_files(manifest)
        check_manifest(manifest, keyed=False)  # the shape every reader of a manifest relies on (volume.schema)
    except ValueError as exc:
        raise RemoteError(f"ref for {str(key)[:16]}: {exc}") from None
    except ManifestInvalid as exc:
        raise RemoteError(f"ref for {str(key)[:16]}: {exc.reason}") from None
    if doc.get("signature") is not None and not isinstance(doc["signature"], dict):
        raise RemoteError(f"ref for {str(key)[:16]}: the signature is not a JSON object")
    return doc


class Repository:
    """Blobs and refs under one ``s3://bucket/prefix``."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @property
    def url(self) -> str:
        """``s3://bucket/prefix``."""
        return self.client.remote.url

    def get_ref(self, key: str) -> dict[str, Any] | None:
        """The checked ref of *key*, or None when the repository has none. :raises RemoteError:"""
        data = self.client.get(ref_path(key), REF_LIMIT)
        if data is None:
            return None
        try:
            doc = loads(data, limit=REF_LIMIT)
        except JSONRefused as exc:
            raise RemoteError(f"{self.url}/{ref_path(key)} is refused: {exc}") from None
        return check_ref(doc, key)

    def pinned(self, key: str) -> str | None:
        """Where *key*'s ref, as last read or written here, can be fetched by content: an OCI registry's
        ``registry/repository@sha256:<manifest digest>``; None for a bucket (a ref object has no digest name)."""
        return None

    def has_blob(self, sha256: str, size: int) -> bool:
        """Whether the blob exists with *size* bytes (a different size is a damaged blob: upload again)."""
        found = self.stat_blob(sha256)
        return found is not None and found[0] == size

    def stat_blob(self, sha256: str) -> tuple[int, float | None] | None:
        """``(size, last upload in epoch seconds)`` of the blob, or None when absent. The age is what ``remote gc``
        judges a blob by and what a push refreshes (:data:`trtwarm.remote.push.REFRESH_AGE`)."""
        meta = self.client.head(blob_path(sha256))
        if meta is None:
            return None
        return int(meta.get("size") or 0), epoch(meta.get("last_modified")) if meta.get("last_modified") else None

    def keys(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(key, object metadata)`` of every ref."""
        for meta in self.client.list("refs/"):
            name = str(meta["path"]).rsplit("/", 1)[-1]
            if name.endswith(".json") and _HEX64.fullmatch(name[:-5]):
                yield name[:-5], meta

    def read_refs(self, threads: int = 16) -> list[tuple[str, dict[str, Any] | None, str]]:
        """``(key, ref or None, problem)`` for every ref, fetched in parallel; a broken ref is reported, not raised."""
        keys = [key for key, _meta in self.keys()]

        def one(key: str) -> tuple[str, dict[str, Any] | None, str]:
            try:
                return key, self.get_ref(key), ""
            except RemoteError as exc:
                if type(exc) is not RemoteError:
                    raise
                return key, None, exc.message

        with ThreadPoolExecutor(max_workers=threads) as pool:
            return list(pool.map(one, keys))

    def blobs(self) -> Iterator[dict[str, Any]]:
        """Metadata of every blob (``path``, ``size``, ``last_modified``)."""
        for meta in self.client.list("blobs/sha256/"):
            if _HEX64.fullmatch(str(meta["path"]).rsplit("/", 1)[-1]):
                yield meta

    def conditional_writes(self) -> bool:
        """Whether the store honours ``If-None-Match: *`` on PUT: create a probe object twice (once per process)."""
        cached = _probe_cache.get(self.client.remote.describe())
        if cached is not None:
            return cached
        probe = f"probes/{secrets.token_hex(8)}"
        first = self.client.put_create(probe, b"1")
        second = self.client.put_create(probe, b"2")
        self.client.delete(probe)
        ok = first and not second
        if not ok:
            log.warning("%s ignores If-None-Match on PUT; refs use the read-back fallback (see docs/remote.md)",
                        self.url)
        _probe_cache[self.client.remote.describe()] = ok
        return ok

    def create_ref(self, key: str, ref: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        """Write *key*'s ref unless one exists. :return: (True, ours) if ours is the ref, else (False, the winner's)"""
        body = json.dumps(ref, sort_keys=True, separators=(",", ":")).encode()
        created = False
        if self.conditional_writes():
            created = self.client.put_create(ref_path(key), body)
        elif self.get_ref(key) is None:
            self.client.put_bytes(ref_path(key), body)
        winner = self.get_ref(key)  # read back, also after a create: a store may answer 200 and keep nothing
        if winner is None:
            raise RemoteError(f"{self.url}/{ref_path(key)} is missing right after the store accepted it",
                              hint="the store (or a proxy before it) acknowledged the write without keeping it, or "
                              "a concurrent `trtwarm remote rm`/gc removed it; check the store, then push again")
        ours = winner["manifest"] == ref["manifest"]
        if ours and (created or not self.conditional_writes()):
            return True, winner
        if not ours and not self.conditional_writes():
            log.warning("the store lacks conditional writes and another pusher's ref for %s replaced or preceded "
                        "ours; adopting it", key[:16])
        return False, winner

    def delete_ref(self, key: str) -> None:
        """Remove *key*'s ref (its blobs go with the next gc after the grace period)."""
        self.client.delete(ref_path(key))


__all__ = ["REF_SCHEMA", "Repository", "blob_path", "check_ref", "epoch", "make_ref", "manifest_files", "ref_path"]
