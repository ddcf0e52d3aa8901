"""Blob uploads to a registry: monolithic (POST, then one streamed PUT with ``?digest=``: the fastest, memory-free),
or chunked (PATCHes of ``TRTWARM_REMOTE_CHUNK``, one part in memory at a time) when asked or when the registry or a
proxy before it answers 413 to the whole blob. Either way the registry checks the digest on the closing PUT.

``client`` is the :class:`trtwarm.remote.oci.client.OciClient` that calls in here (its ``request``, ``fail`` and
``remote``), not imported: the client imports this module."""

from __future__ import annotations

import io
from typing import Any, BinaryIO
from urllib.parse import urlencode, urljoin

from trtwarm.errors import RemoteError


def _start(client: Any) -> str:
    """Open an upload session: its location."""
    response = client.request("POST", f"{client.remote.base}/blobs/uploads/", push=True)
    if response.status != 202 or not response.headers.get("Location"):
        raise client.fail(response, "POST", "blobs/uploads/")
    return _location(client, response)


def _location(client: Any, response: Any) -> str:
    """The (absolute) upload location an answer names."""
    return urljoin(f"{client.remote.scheme}://{client.remote.registry}/", response.headers["Location"])


def upload(client: Any, digest: str, body: bytes | BinaryIO, size: int, *, chunked: bool = False) -> None:
    """Upload a blob: monolithically (POST, then one streamed PUT with ``?digest=``), or in PATCHes of
    ``TRTWARM_REMOTE_CHUNK`` when *chunked* or when the registry (or a proxy before it) answers 413 to the whole
    blob; either way the registry checks the digest. :raises RemoteError:"""
    location = _start(client)
    if not chunked:
        url = location + ("&" if "?" in location else "?") + urlencode({"digest": digest})
        response = client.request("PUT", url, push=True, body=body, read_timeout=client.remote.timeout,
                                  headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)})
        if response.status == 201:
            return
        if response.status != 413 or isinstance(body, bytes):
            raise client.fail(response, "PUT", f"blob {digest[:23]}")
        body.seek(0)  # too large for one request: start again in parts
        location = _start(client)
    _patches(client, location, digest, body, size)


def _patches(client: Any, location: str, digest: str, body: bytes | BinaryIO, size: int) -> None:
    """The chunked upload: PATCHes of at most one part each (bounded memory), then the closing PUT."""
    stream = io.BytesIO(body) if isinstance(body, bytes) else body
    sent = 0
    while sent < size:
        part = stream.read(min(client.remote.chunk, size - sent))
        if not part:
            raise RemoteError(f"the file for blob {digest[:23]} ended at {sent} bytes, before {size}")
        response = client.request("PATCH", location, push=True, body=part, read_timeout=client.remote.timeout,
                                  headers={"Content-Type": "application/octet-stream",
                                           "Content-Range": f"{sent}-{sent + len(part) - 1}",
                                           "Content-Length": str(len(part))})
        if response.status != 202 or not response.headers.get("Location"):
            raise client.fail(response, "PATCH", f"blob {digest[:23]}")
        location, sent = _location(client, response), sent + len(part)
    url = location + ("&" if "?" in location else "?") + urlencode({"digest": digest})
    response = client.request("PUT", url, push=True, headers={"Content-Length": "0"})
    if response.status != 201:
        raise client.fail(response, "PUT", f"blob {digest[:23]}")


__all__ = ["upload"]
