"""Blob uploads to a registry: monolithic (POST, then one streamed PUT with ``?digest=``: the fastest, memory-free),
or chunked (PATCHes of ``TRTWARM_REMOTE_CHUNK``, one part in memory at a time) when asked or when the registry or a
proxy before it answers 413 to the whole blob. Either way the registry checks the digest on the closing PUT.

The POST and the PATCHes are not idempotent: the transport never repeats them blindly. A ``Location`` is resolved
against the answer that named it; on another origin it gets no credentials (:mod:`trtwarm.transport.http`).

``client`` is the :class:`trtwarm.remote.oci.client.OciClient` that calls in here (its ``request``, ``fail`` and
``remote``), not imported: the client imports this module."""

from __future__ import annotations

import io
from typing import Any, BinaryIO
from urllib.parse import urlencode

from trtwarm.errors import RemoteError
from trtwarm.transport.answer import Refused
from trtwarm.transport.origin import resolve


def _start(client: Any) -> str:
    """Open an upload session: its location."""
    with client.request("POST", f"{client.remote.base}/blobs/uploads/", push=True,
                        what="POST blobs/uploads/") as answer:
        if answer.status != 202 or not answer.header("Location"):
            raise client.fail(answer, "POST", "blobs/uploads/")
        answer.excerpt()
        return _location(answer)


def _location(answer: Any) -> str:
    """The (absolute) upload location an answer names. :raises Refused: not an http(s) URL"""
    try:
        return resolve(answer.url, str(answer.header("Location")))
    except ValueError as exc:
        raise Refused(f"the registry named an upload location that is {exc}") from None


def _with_digest(location: str, digest: str) -> str:
    return location + ("&" if "?" in location else "?") + urlencode({"digest": digest})


def upload(client: Any, digest: str, body: bytes | BinaryIO, size: int, *, chunked: bool = False) -> None:
    """Upload a blob: monolithically (POST, then one streamed PUT with ``?digest=``), or in PATCHes of
    ``TRTWARM_REMOTE_CHUNK`` when *chunked* or when the registry (or a proxy before it) answers 413 to the whole
    blob; either way the registry checks the digest. :raises RemoteError:"""
    location = _start(client)
    if not chunked:
        with client.request("PUT", _with_digest(location, digest), push=True, body=body, size=size,
                            headers={"Content-Type": "application/octet-stream"},
                            what=f"PUT blob {digest[:23]}") as answer:
            if answer.status == 201:
                return
            if answer.status != 413 or isinstance(body, bytes):
                raise client.fail(answer, "PUT", f"blob {digest[:23]}")
        body.seek(0)  # type: ignore[union-attr]  # too large for one request: start again in parts
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
        with client.request("PATCH", location, push=True, body=part, what=f"PATCH blob {digest[:23]} at {sent}",
                            headers={"Content-Type": "application/octet-stream",
                                     "Content-Range": f"{sent}-{sent + len(part) - 1}"}) as answer:
            if answer.status != 202 or not answer.header("Location"):
                raise client.fail(answer, "PATCH", f"blob {digest[:23]}")
            answer.excerpt()
            location, sent = _location(answer), sent + len(part)
    with client.request("PUT", _with_digest(location, digest), push=True, headers={"Content-Length": "0"},
                        what=f"PUT blob {digest[:23]}") as answer:
        if answer.status != 201:
            raise client.fail(answer, "PUT", f"blob {digest[:23]}")


__all__ = ["upload"]
