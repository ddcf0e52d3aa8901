"""One answer of a peer, read under the contract: every body is read up to a cap the caller names (success and
error answers alike), JSON through :mod:`trtwarm.strictjson`, a stream in fixed pieces; the connection goes back to
the pool only when the body was read to its end, else it is closed (bytes left in it would reach the next request).
"""

from __future__ import annotations

import contextlib
import http.client
from collections.abc import Iterator
from typing import Any

from trtwarm.errors import RemoteError, RemoteUnreachable
from trtwarm.strictjson import JSONRefused, loads
from trtwarm.transport import breaker
from trtwarm.transport.limits import ERROR_LIMIT
from trtwarm.transport.origin import Origin, origin_of
from trtwarm.transport.wire import Stalled


class Refused(RemoteError):
    """A peer's answer that breaks the contract (a body over its cap, JSON that is not strict JSON, a listing that
    loops, a redirect elsewhere): refused, never parsed on (exit 10)."""


class Answer:
    """The status, headers and body of one answer (its connection held until :meth:`close`)."""

    def __init__(self, response: http.client.HTTPResponse, release: Any, url: str) -> None:
        self.response, self._release, self.url = response, release, url
        self.status: int = response.status
        self.reason: str = response.reason
        self.headers = response.headers
        self.origin: Origin = origin_of(url)
        self._excerpt: bytes | None = None
        self._done = False
        #: a stall while reading the body marks the origin down for the process (a request's answer; not one the
        #: gate relays: obstore retries it, and the S3 client judges the store)
        self.trips = False
        self.peer = str(self.origin)  # the key the breaker remembers the peer by

    def header(self, name: str) -> str | None:
        """The value of header *name*, or None."""
        value = self.headers.get(name)
        return None if value is None else str(value)

    @contextlib.contextmanager
    def _body(self, what: str) -> Iterator[None]:
        """Reading the body: a peer that stalls is unreachable (and skipped for the rest of the process), a body
        that breaks off too (exit 13); the connection is closed either way."""
        try:
            yield
        except Stalled as exc:
            self.close()
            if self.trips:
                breaker.trip(self.peer, str(exc))
            raise RemoteUnreachable(f"{what}: {self.origin} did not answer ({exc})") from None
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise RemoteUnreachable(f"{what}: the answer broke off ({type(exc).__name__}: {str(exc)[:120]})") \
                from None

    def read(self, limit: int, what: str) -> bytes:
        """The whole body, at most *limit* bytes. :raises Refused: larger; :raises RemoteUnreachable:"""
        data = bytearray()
        with self._body(what):
            while len(data) <= limit:
                piece = self.response.read(min(1 << 20, limit + 1 - len(data)))
                if not piece:
                    self._ended()
                    self.close(finished=True)
                    return bytes(data)
                data += piece
        self.close()
        raise Refused(f"{what}: the answer's body is larger than {limit} bytes: refused")

    def json(self, limit: int, what: str) -> Any:
        """The body parsed as strict JSON (:func:`trtwarm.strictjson.loads`). :raises Refused:"""
        data = self.read(limit, what)
        try:
            return loads(data, limit=limit)
        except JSONRefused as exc:
            raise Refused(f"{what}: the answer is not acceptable JSON: {exc}") from None

    def _ended(self) -> None:
        """The body reached its end: :raises IncompleteRead: before its Content-Length (``http.client`` only
        returns nothing there)"""
        left = self.response.length
        if left:
            raise http.client.IncompleteRead(b"", left)

    def excerpt(self) -> bytes:
        """The first :data:`~trtwarm.transport.limits.ERROR_LIMIT` bytes of the body (for an error's message; the
        rest is dropped with the connection). A body that breaks off gives what arrived."""
        if self._excerpt is None:
            data = bytearray()
            try:
                while len(data) < ERROR_LIMIT:
                    piece = self.response.read(ERROR_LIMIT - len(data))
                    if not piece:
                        break
                    data += piece
            except (OSError, http.client.HTTPException):
                pass
            self._excerpt = bytes(data)
            self.close(finished=not self._excerpt or self.response.isclosed())
        return self._excerpt

    def stream(self, piece: int, what: str) -> Iterator[memoryview]:
        """The body in pieces of at most *piece* bytes as they arrive (each valid until the next is asked for).
        :raises RemoteUnreachable:"""
        view = memoryview(bytearray(piece))
        while True:
            with self._body(what):
                got = self.response.readinto(view)
                if not got:
                    self._ended()
            if not got:
                self.close(finished=True)
                return
            yield view[:got]

    def close(self, finished: bool = False) -> None:
        """Release the connection: back to the pool when the body was read to its end, else closed."""
        if self._done:
            return
        self._done = True
        if not finished and self.response.length == 0 and not self.response.isclosed():
            self.response.read()  # an empty body (a 201, a HEAD): the connection can be reused
            finished = True
        self._release(finished and self.response.isclosed() and not self.response.will_close)

    def __enter__(self) -> Answer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Answer", "Refused"]
