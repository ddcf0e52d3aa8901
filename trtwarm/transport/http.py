"""Every HTTP request trtwarm makes (a registry, its token service, and, through :mod:`.gate`, every request
obstore makes to an S3 store), under the contract: ``http.client`` over :mod:`.wire`'s watched sockets, one small
keep-alive pool per origin, retries by :mod:`.retry`, redirects and credentials by origin.

* **Credentials per origin.** An :class:`Auth` is bound to one origin: its ``Authorization`` goes only to requests
  on that origin and only it answers that origin's 401 challenges. A redirect, a ``Location`` or a ``Link`` to
  another origin gets no credentials, and any ``Authorization`` or ``Cookie`` header the caller set is dropped when
  a redirect leaves the origin it was set for.
* **Redirects** (GET and HEAD only): at most :data:`~trtwarm.transport.limits.MAX_REDIRECTS`, a URL seen twice is a
  loop; both refused (exit 10).
* **No answer** after the retries (:class:`~trtwarm.transport.wire.Stalled`, a refused or reset connection) is
  :class:`~trtwarm.errors.RemoteUnreachable` (exit 13), and the origin is skipped for the rest of the process
  (:mod:`.breaker`). Any answer is returned to the caller, whose status it judges (after the retries for 429/5xx).
"""

from __future__ import annotations

import http.client
import logging
import ssl
import threading
from typing import BinaryIO, Protocol

from trtwarm.errors import RemoteError, RemoteUnreachable
from trtwarm.transport import breaker, stop, waits
from trtwarm.transport.answer import Answer, Refused
from trtwarm.transport.limits import MAX_REDIRECTS, Limits
from trtwarm.transport.origin import Origin, origin_of, resolve, target_of
from trtwarm.transport.retry import Budget, may_retry, retry_after
from trtwarm.transport.wire import Clock, Stalled, WatchedSocket, connect

log = logging.getLogger("trtwarm.remote")
REDIRECTS = frozenset({301, 302, 303, 307, 308})
_PRIVATE = ("authorization", "cookie", "proxy-authorization")


class Auth(Protocol):
    """Credentials for one origin."""

    origin: Origin

    def header(self) -> str | None:
        """The ``Authorization`` value to send now, or None."""

    def challenge(self, answer: Answer) -> bool:
        """Answer a 401 of :attr:`origin` (fetch a token...): True to try the request again with :meth:`header`."""


class _Connection(http.client.HTTPConnection):
    """One keep-alive connection to one origin, over a watched socket."""

    def __init__(self, origin: Origin, tls: ssl.SSLContext | None) -> None:
        super().__init__(origin.host, origin.port, blocksize=1 << 20)
        self.origin, self.tls = origin, tls
        self.clock: Clock | None = None

    def connect(self) -> None:
        assert self.clock is not None
        self.sock = connect(self.origin.host, self.origin.port, self.clock, self.tls)
        self.sock.clock, self.clock.connected = self.clock, True  # from here on, bytes may reach the server


class HttpClient:
    """Requests under one :class:`~trtwarm.transport.limits.Limits`; thread-safe (one pool per origin)."""

    def __init__(self, limits: Limits, *, tls: ssl.SSLContext | None = None, progress: float = 10.0,
                 pool: int = 8) -> None:
        self.limits, self.progress, self.pool_size = limits, progress, pool
        self._tls = tls
        self._idle: dict[Origin, list[_Connection]] = {}
        self._live: set[_Connection] = set()
        self._lock = threading.Lock()
        stop.on_stop(self.abort)

    # --- one attempt ------------------------------------------------------------------------------------------------
    def exchange(self, method: str, url: str, headers: dict[str, str], body: bytes | BinaryIO | None = None,
                 size: int | None = None, clock: Clock | None = None) -> Answer:
        """One attempt, no retry, no redirect, no credentials but the *headers* given (the ``Host`` header is the
        URL's unless given). :raises Stalled, OSError, http.client.HTTPException:"""
        origin = origin_of(url)
        clock = clock or Clock(self.limits, float("inf"))
        conn = self._take(origin)
        conn.clock = clock
        if isinstance(conn.sock, WatchedSocket):
            conn.sock.clock, clock.connected = clock, True
        try:
            conn.putrequest(method, target_of(url), skip_host=True, skip_accept_encoding=True)
            sent = {k.lower() for k in headers}
            if "host" not in sent:
                conn.putheader("Host", origin.netloc)
            for name, value in headers.items():
                conn.putheader(name, value)
            if body is not None and "content-length" not in sent and "transfer-encoding" not in sent:
                conn.putheader("Content-Length", str(len(body) if isinstance(body, bytes) else size))
            conn.endheaders(body if isinstance(body, bytes) else None)
            if body is not None and not isinstance(body, bytes):
                conn.send(_Exactly(body, int(size or 0)))
            clock.answering()
            response = conn.getresponse()
            clock.reading()
        except BaseException:
            self._release(conn, False)
            raise
        return Answer(response, lambda reusable: self._release(conn, reusable), url)

    def _take(self, origin: Origin) -> _Connection:
        with self._lock:
            idle = self._idle.get(origin, [])
            while idle:
                conn = idle.pop()
                if isinstance(conn.sock, WatchedSocket) and not conn.sock.dropped():
                    self._live.add(conn)
                    return conn
                conn.close()
            conn = _Connection(origin, self._context(origin))
            self._live.add(conn)
            return conn

    def _context(self, origin: Origin) -> ssl.SSLContext | None:
        if origin.scheme != "https":
            return None
        if self._tls is None:
            self._tls = ssl.create_default_context()  # the system's CAs; SSL_CERT_FILE / SSL_CERT_DIR are honoured
        return self._tls

    def _release(self, conn: _Connection, reusable: bool) -> None:
        with self._lock:
            self._live.discard(conn)
            idle = self._idle.setdefault(conn.origin, [])
            if reusable and not stop.requested() and len(idle) < self.pool_size:
                conn.clock = None
                idle.append(conn)
                return
        conn.close()

    def abort(self) -> None:
        """Shut every connection in use down (a stop: the threads blocked on them return at once)."""
        with self._lock:
            live = list(self._live)
        for conn in live:
            if isinstance(conn.sock, WatchedSocket):
                conn.sock.abort()

    # --- one request --------------------------------------------------------------------------------------------------
    def request(self, method: str, url: str, *, headers: dict[str, str] | None = None,
                body: bytes | BinaryIO | None = None, size: int | None = None, auth: Auth | None = None,
                what: str = "", name: str = "", peer: str = "", redirects: bool = True) -> Answer:
        """*method* on *url* with retries, redirects (GET, HEAD) and *auth* on its own origin only.

        :param what: the request in the log (``GET manifests/<key>``); *name*: the peer in the log (its origin);
            *peer*: the key the process remembers it by when it is dead (its origin; an S3 store's description, so
            its requests through obstore and these share one memory); *redirects*: False to return a redirect as
            the answer it is (an S3 store never redirects a presigned GET elsewhere)
        :raises RemoteUnreachable: no answer after the retries (the origin is then skipped for the rest of the
            process); :raises Refused: a redirect loop or too many; :raises RemoteError: a ``Retry-After`` beyond
            the budget
        """
        req = _Request(method, url, dict(headers or {}), body, size, auth, peer)
        req.redirects = redirects
        with waits.waiting(name or str(req.origin), what or f"{method} {shown(url)[:80]}", self.limits.budget,
                           self.progress):
            return self._run(req, Budget(self.limits))

    def _run(self, req: _Request, budget: Budget) -> Answer:
        while True:
            stop.check()
            breaker.check(req.peer or str(req.origin))
            answer = self._try(req, budget)
            if answer is None:
                continue
            if answer.status == 401 and req.may_challenge(answer):
                continue
            if answer.status in REDIRECTS and req.redirects and req.method in ("GET", "HEAD") and \
                    answer.header("Location"):
                req.follow(answer)
                continue
            if may_retry(req.method, status=answer.status, sent=True):
                if self._pause(req, budget, answer):
                    continue
            answer.trips, answer.peer = True, req.peer or str(req.origin)
            return answer

    def _try(self, req: _Request, budget: Budget) -> Answer | None:
        """One attempt; None when it failed and may be tried again. :raises RemoteUnreachable:"""
        clock = Clock(self.limits, budget.deadline)
        req.rewind()
        try:
            return self.exchange(req.method, req.url, req.headers_now(), req.body, req.size, clock)
        except http.client.InvalidURL as exc:  # a Location or Link with characters a request line cannot carry
            raise Refused(f"{req.method} {shown(req.url)!r}: {exc}: refused") from None
        except (Stalled, OSError, http.client.HTTPException) as exc:
            why = _why(exc)
            if may_retry(req.method, status=None, sent=clock.connected):
                delay = budget.pause()
                if delay is not None:
                    stop.sleep(delay)
                    return None
            breaker.trip(req.peer or str(req.origin), why)
            raise RemoteUnreachable(f"{req.method} {shown(req.url)}: {req.origin} did not answer ({why}; "
                                    f"{budget.retried} retries in {budget.limits.retry_timeout:g} s)") from None

    def _pause(self, req: _Request, budget: Budget, answer: Answer) -> bool:
        """Wait before retrying *answer* (429/5xx); False: no retry left (the caller judges the answer).
        :raises RemoteError: the answer asks for a pause beyond the budget"""
        asked = retry_after(answer.header("Retry-After"))
        left = budget.left()
        if asked is not None and asked > left:
            answer.close()
            raise RemoteError(f"{req.method} {shown(req.url)}: {req.origin} answered {answer.status} and asks to retry "
                              f"after {asked:.0f} s, more than the {left:.0f} s left of the request's retry window")
        delay = budget.pause(asked)
        if delay is None:
            return False
        answer.close()
        stop.sleep(delay)
        return True


def _why(exc: BaseException) -> str:
    if isinstance(exc, Stalled):
        return str(exc)
    if isinstance(exc, ssl.SSLCertVerificationError):  # CERTIFICATE_VERIFY_FAILED: the hint names SSL_CERT_FILE
        return f"its TLS certificate is not trusted here: {str(exc)[:160]}"
    if isinstance(exc, ssl.SSLError):  # e.g. WRONG_VERSION_NUMBER: a plain-HTTP peer spoken to in TLS
        return f"it did not answer in TLS: {str(exc)[:160]}"
    if isinstance(exc, http.client.HTTPException):
        return f"a malformed or cut answer: {type(exc).__name__} {str(exc)[:80]}".rstrip()
    return (getattr(exc, "strerror", None) or str(exc) or type(exc).__name__)[:160]


class _Request:
    """What one request is, and what following its redirects and challenges has changed."""

    def __init__(self, method: str, url: str, headers: dict[str, str], body: bytes | BinaryIO | None,
                 size: int | None, auth: Auth | None, peer: str = "") -> None:
        self.method, self.url, self.body, self.size, self.auth = method.upper(), url, body, size, auth
        self.peer, self.redirects = peer, True
        self.headers = headers
        self.first = origin_of(url)  # the origin the caller's own headers were set for
        self.origin = self.first
        self.seen = [url]
        self.challenged = False
        self.position = body.tell() if body is not None and hasattr(body, "tell") else None

    def headers_now(self) -> dict[str, str]:
        """The headers for the current URL: the caller's private ones only on their own origin, the credentials
        only on theirs."""
        out = {k: v for k, v in self.headers.items() if self.origin == self.first or k.lower() not in _PRIVATE}
        if self.auth is not None and self.auth.origin == self.origin:
            value = self.auth.header()
            if value:
                out["Authorization"] = value
        return out

    def rewind(self) -> None:
        if self.position is not None:
            self.body.seek(self.position)  # type: ignore[union-attr]

    def may_challenge(self, answer: Answer) -> bool:
        """Answer a 401 once, and only on the auth's own origin. :raises RemoteAuthError: from the auth"""
        if self.challenged or self.auth is None or self.auth.origin != answer.origin:
            return False
        self.challenged = True
        answer.excerpt()
        return self.auth.challenge(answer)

    def follow(self, answer: Answer) -> None:
        """Go where a redirect points. :raises Refused: a loop, too many, or not http(s)"""
        try:
            url = resolve(self.url, str(answer.header("Location")))
        except ValueError as exc:
            answer.close()
            raise Refused(f"{self.method} {shown(self.url)}: a redirect to {exc}") from None
        answer.excerpt()
        if url in self.seen:
            raise Refused(f"{self.method} {shown(self.seen[0])}: the redirects loop back to {shown(url)}: refused")
        if len(self.seen) > MAX_REDIRECTS:
            raise Refused(f"{self.method} {shown(self.seen[0])}: more than {MAX_REDIRECTS} redirects: refused")
        self.seen.append(url)
        self.url, self.origin = url, origin_of(url)
        if self.origin != self.first:
            log.debug("following a redirect to %s without the credentials of %s", self.origin, self.first)


def shown(url: str) -> str:
    """*url* as a message shows it: without its query (a presigned URL's signature, an upload's state)."""
    return url.split("?", 1)[0][:160]


class _Exactly:
    """The first *size* bytes of a file body, read in blocks (``http.client`` sends what ``read`` gives)."""

    def __init__(self, file: BinaryIO, size: int) -> None:
        self.file, self.left = file, size

    def read(self, count: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        data = self.file.read(self.left if count < 0 else min(count, self.left))
        if not data:
            raise RemoteError(f"the file being uploaded ended {self.left} bytes early")
        self.left -= len(data)
        return data


__all__ = ["REDIRECTS", "Auth", "HttpClient", "shown"]
