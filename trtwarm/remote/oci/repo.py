"""The repository contract (:class:`trtwarm.remote.repo.Repository`) on an OCI registry: one tagged manifest per key.

A ref is the manifest tagged ``<key>`` (:mod:`trtwarm.remote.oci.layout`): its config blob is the ref document the
S3 layout stores as ``refs/<key>.json``, its layers are the entry's files (the blobs the shared pull fetches by
digest). Reading a ref resolves the tag to a manifest digest once, checks the manifest's bytes against that digest
and the config blob's bytes against its descriptor, and requires the layers to list exactly the ref's files.

First-writer-wins: the distribution spec has no create-only tag PUT (Distribution 2.8 answers 201 to
``If-None-Match: *`` on an existing tag and moves it), so refs use the read-back protocol the S3 path keeps for stores
without conditional writes: look for the tag, PUT the manifest when absent, read the tag back and adopt what is
there, after a short settle (:data:`SETTLE`) that lets every racer's PUT land. A registry with tag immutability
(ECR, Harbor, ACR, GitLab) refuses the second PUT: that refusal is the first-writer-wins it promises, and the pusher
adopts the winner. Without it, two pushers inside the window can both
write; both manifests name complete blobs, and the replaced pusher logs a warning (and counts a ``conflict`` when
the engines differ). ``remote gc`` deletes manifests only: blobs are the registry's own garbage collection's.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterator
from typing import Any

from trtwarm.errors import RemoteError
from trtwarm.remote.oci.client import OciClient
from trtwarm.remote.oci.layout import MANIFEST, REF_TYPE, canonical, check_entry_manifest, entry_manifest
from trtwarm.remote.repo import REF_LIMIT, Repository, check_ref, manifest_files
from trtwarm.strictjson import JSONRefused, loads

log = logging.getLogger("trtwarm.remote")
#: how long a pusher waits before reading the tag back: every racer that looked for the tag before this one's PUT
#: landed has PUT its own by then (a look, a small config upload and a PUT: milliseconds), so the read-back sees the
#: last writer and every racer adopts the same manifest (measured: without it, eight racers on loopback adopted
#: manifests that a later PUT replaced)
SETTLE = 2.0
_IMMUTABLE = ("immutab", "already exists", "cannot be overwritten", "ImageTagAlreadyExists")


class OciRepository(Repository):
    """Refs as manifests tagged by key in ``oci://registry/repository``."""

    #: blobs cannot be listed through the distribution API: ``remote gc`` removes manifests only
    lists_blobs = False

    def __init__(self, client: OciClient) -> None:  # noqa: D107
        super().__init__(client)  # type: ignore[arg-type]
        self.client: OciClient = client
        self._digests: dict[str, str] = {}

    def _manifest(self, key: str) -> tuple[bytes, str] | None:
        """The manifest tagged *key* and its digest (checked against the bytes), or None."""
        found = self.client.get_manifest(key, MANIFEST)
        if found is None:
            return None
        data, header = found
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if header and header != digest:
            raise RemoteError(f"{self.url}:{key[:16]}: the manifest's bytes hash to {digest[:23]}, the registry says "
                              f"{header[:23]}: refused")
        return data, digest

    def get_ref(self, key: str) -> dict[str, Any] | None:
        """The checked ref document of *key*, or None. :raises RemoteError: malformed, or its bytes do not match"""
        found = self._manifest(key)
        if found is None:
            return None
        data, digest = found
        where = f"{self.url}:{key[:16]}"
        try:
            config, layers = check_entry_manifest(data)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise RemoteError(f"{where} is not a trtwarm entry manifest: {exc}") from None
        if config["size"] > REF_LIMIT:
            raise RemoteError(f"{where}: the ref document is {config['size']} bytes, more than {REF_LIMIT}")
        blob = self.client.get_blob(config["digest"], REF_LIMIT)
        if blob is None:
            raise RemoteError(f"{where}: the ref document {config['digest'][:23]} is missing from the registry")
        if len(blob) != config["size"] or "sha256:" + hashlib.sha256(blob).hexdigest() != config["digest"]:
            raise RemoteError(f"{where}: the ref document does not match its digest (corrupt in the registry): "
                              "refused")
        try:
            doc = loads(blob, limit=REF_LIMIT)
        except JSONRefused as exc:
            raise RemoteError(f"{where}: the ref document is refused: {exc}") from None
        ref = check_ref(doc, key)
        files = [(row["sha256"], row["bytes"]) for row in manifest_files(ref["manifest"])]
        if files != layers:
            raise RemoteError(f"{where}: the manifest's layers do not list the ref's files (altered?): refused")
        self._digests[key] = digest
        return ref

    def pinned(self, key: str) -> str | None:
        """``registry/repository@sha256:<digest>`` of the manifest *key*'s ref was last read from (checked against its
        bytes), or None when it was not read here. No ``oci://``: the reference other registry tools take."""
        digest = self._digests.get(key)
        return None if digest is None else f"{self.client.remote.registry}/{self.client.remote.repository}@{digest}"

    def stat_blob(self, sha256: str) -> tuple[int, float | None] | None:
        """``(size, None)`` of the blob in this repository, or None: the distribution API gives no age, so a push
        never refreshes a blob here (a registry's garbage collection is its own, offline job)."""
        size = self.client.blob_size(f"sha256:{sha256}")
        return None if size is None else (size, None)

    def keys(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(key, {})`` of every tag that is a key (other tags, e.g. engine images', are not refs)."""
        for tag in self.client.tags():
            if len(tag) == 64 and all(c in "0123456789abcdef" for c in tag):
                yield tag, {}

    def blobs(self) -> Iterator[dict[str, Any]]:
        """None: the distribution API cannot list blobs (the registry's garbage collection removes unreferenced
        ones)."""
        return iter(())

    def conditional_writes(self) -> bool:
        """Never: no registry offers a create-only tag PUT (tag immutability is detected on the PUT itself)."""
        return False

    def create_ref(self, key: str, ref: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        """Tag our manifest *key* unless a manifest holds the tag: ``(True, ours)``, else ``(False, the winner's)``.

        The entry's blobs must be uploaded already (the registry checks that a manifest's blobs exist)."""
        config = canonical(ref)
        body = entry_manifest(ref, config, manifest_files(ref["manifest"]))
        ours = "sha256:" + hashlib.sha256(body).hexdigest()
        before, answered = self.get_ref(key), None
        if before is None:
            config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
            if self.client.blob_size(config_digest) != len(config):
                self.client.upload(config_digest, config, len(config))
            response = self.client.put_manifest(key, body, MANIFEST)
            answered = response.status
            if response.status not in (200, 201):
                if not _immutable(response):
                    raise self.client.fail(response, "PUT", f"manifest {key[:16]}")
                log.info("%s refused to move the tag %s (tag immutability): another pusher was first", self.url,
                         key[:16])
        time.sleep(SETTLE)
        winner = self.get_ref(key)
        if winner is None:
            raise self._vanished(key, answered)
        if self._digests[key] == ours:
            return True, winner
        if before is None and winner["manifest"] != ref["manifest"]:
            log.warning("another pusher's manifest for %s replaced or preceded ours in %s (a registry has no "
                        "create-only tags); adopting it", key[:16], self.url)
        return False, winner

    def _vanished(self, key: str, answered: int | None) -> RemoteError:
        """The error of a tag absent on its read-back: one this push PUT (the registry *answered* its status) was
        most likely never stored; one that was there before this push's look was removed since."""
        if answered is not None:
            return RemoteError(f"{self.url}:{key[:16]}: the registry answered the manifest PUT with {answered} but "
                               "does not have it when read back", hint="the registry, or a proxy before it, "
                               "accepts pushes without keeping them: most likely a pull-through cache or a "
                               "read-only mirror. Push to the primary registry: check the host in --remote and any "
                               "mirror or proxy in between")
        return RemoteError(f"{self.url}:{key[:16]} was there when this push looked and is gone now",
                           hint="a `trtwarm remote rm`/gc (or the registry's retention) removed it meanwhile; push "
                           "again")

    def delete_ref(self, key: str) -> None:
        """Delete the manifest tagged *key* (by digest; its blobs go with the registry's garbage collection)."""
        digest = self._digests.get(key)
        if digest is None:
            found = self._manifest(key)
            if found is None:
                return
            digest = found[1]
        self.client.delete_manifest(digest)


def _immutable(response: Any) -> bool:
    """Whether a refused manifest PUT says the tag exists and may not move (ECR, Harbor, ACR, GitLab)."""
    text = response.excerpt().decode("utf-8", "replace")
    return response.status in (400, 403, 409, 412) and any(word.lower() in text.lower() for word in _IMMUTABLE)


__all__ = ["REF_TYPE", "OciRepository"]
