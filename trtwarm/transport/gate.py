"""The gate: an HTTP/1.1 forward proxy on 127.0.0.1, in this process, that obstore (the S3 client, whose Rust HTTP
stack reads bodies itself) sends every request through, so the transport contract holds for S3 as for a registry.

obstore is given ``proxy_url`` (the gate) and an ``http://`` endpoint; the gate forwards each signed request
untouched (SigV4 signs the host, path, query and headers, not the scheme) over :mod:`.wire`'s watched sockets, in
TLS when the real endpoint is ``https`` (:class:`Upgrade`; certificates checked against the system's CAs,
``SSL_CERT_FILE`` honoured). On the way back it applies the contract:

* the answer's headers within the read timeout, no body pause longer, no body under the rate floor, each attempt
  within its deadline: else the connection to obstore is cut (obstore retries within its retry window, then fails:
  unreachable, exit 13);
* an error answer's body (4xx/5xx, a redirect) at most :data:`~trtwarm.transport.limits.ERROR_LIMIT` (the 3 GB an
  endless 503 body reached is refused at 64 KiB); a listing page at most
  :data:`~trtwarm.transport.limits.PAGE_LIMIT` and :data:`~trtwarm.transport.limits.MAX_PAGE_KEYS` keys, and never
  naming its own continuation token as the next one; an object's body only with a ``Content-Length``; any other
  answer at most :data:`~trtwarm.transport.limits.SMALL_LIMIT`; a redirect only to the same origin;
* a stop request (SIGTERM) cuts every connection and answers every new request at once.

A refused answer reaches obstore as a ``400`` (which obstore does not retry) whose body says why, and is recorded as
a :class:`Verdict` the S3 client reads to type its error (:mod:`.s3`). ``CONNECT`` (a credential service obstore
reaches in TLS itself) is a bounded tunnel (:mod:`.tunnel`).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import http.client
import logging
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from trtwarm.errors import RemoteUnreachable
from trtwarm.transport import stop
from trtwarm.transport.answer import Answer, Refused
from trtwarm.transport.http import HttpClient
from trtwarm.transport.limits import ERROR_LIMIT, PAGE_LIMIT, SMALL_LIMIT, Limits
from trtwarm.transport.listing import TokenChains, check_page, is_listing
from trtwarm.transport.origin import Origin, origin_of, resolve, target_of
from trtwarm.transport.tunnel import tunnel
from trtwarm.transport.wire import Clock, Stalled

log = logging.getLogger("trtwarm.remote")
#: headers that belong to one hop, never forwarded
_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate", "te",
                  "trailer", "transfer-encoding", "upgrade"})
REFUSED = "trtwarm refused the store's answer"


@dataclass(frozen=True)
class Upgrade:
    """Requests obstore sends to ``http://HOST[:SEEN]`` (or a bucket's ``http://BUCKET.HOST``) go to the store in
    TLS on *port*."""

    host: str
    seen: int
    port: int

    def target(self, origin: Origin) -> Origin | None:
        """The TLS origin a request to *origin* goes to, or None (plain HTTP as asked)."""
        if origin.scheme == "http" and origin.port == self.seen and \
                (origin.host == self.host or origin.host.endswith("." + self.host)):
            return Origin("https", origin.host, self.port)
        return None


@dataclass(frozen=True)
class Verdict:
    """Why the gate failed or refused an answer: *kind* ``refused`` (exit 10), ``stalled``, ``tls`` (13)."""

    when: float
    kind: str
    reason: str


class Gate:
    """One listener, for the obstore client of one store (its limits, its TLS upgrade)."""

    def __init__(self, limits: Limits, upgrade: Upgrade | None = None) -> None:
        self.limits, self.upgrade = limits, upgrade
        self.http = HttpClient(limits, pool=16)
        self.verdicts: collections.deque[Verdict] = collections.deque(maxlen=64)
        self.tokens = TokenChains()
        self.expired = ""
        self._clients: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, name="trtwarm-gate", daemon=True).start()
        stop.on_stop(self._stop)

    def expire(self, reason: str) -> None:
        """Give the store up: cut every connection, refuse every request from now on (*reason*: a pull-only init's
        ``--lock-timeout`` passed while obstore still retried)."""
        self.expired = reason
        self._record("expired", reason)
        self._stop()

    def verdict_since(self, started: float) -> Verdict | None:
        """The latest verdict recorded at or after *started* (monotonic), if any."""
        found = [v for v in list(self.verdicts) if v.when >= started]
        return found[-1] if found else None

    def _record(self, kind: str, reason: str) -> None:
        self.verdicts.append(Verdict(time.monotonic(), kind, reason))

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                self._clients.add(client)
            threading.Thread(target=self._serve, args=(client,), name="trtwarm-gate-conn", daemon=True).start()

    def _stop(self) -> None:
        with self._lock:
            clients = list(self._clients)
        for client in clients:
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)

    # --- one connection from obstore ---------------------------------------------------------------------------------
    def _serve(self, client: socket.socket) -> None:
        reader = client.makefile("rb")
        try:
            while self._one(client, reader):
                pass
        except (OSError, http.client.HTTPException, ValueError):
            pass  # obstore went away, or sent what the gate cannot read: the connection ends
        finally:
            with self._lock:
                self._clients.discard(client)
            with contextlib.suppress(OSError):
                reader.close()
                client.close()

    def _one(self, client: socket.socket, reader: Any) -> bool:
        """Serve one request of obstore's. :return: whether the connection may carry another"""
        line = reader.readline(65537)
        if not line:
            return False
        method, target, _version = line.decode("latin-1").split()
        headers = http.client.parse_headers(reader)
        if method == "CONNECT":
            tunnel(client, target, self.limits, self._record)
            return False
        body, size = _body(headers, reader)
        if stop.requested():
            return self._refuse(client, "stopping", "this process is stopping (SIGTERM or SIGINT)")
        if self.expired:
            return self._refuse(client, "expired", self.expired)
        url = self._upstream(target)
        sent = {k: v for k, v in headers.items() if k.lower() not in _HOP}
        try:
            answer = self.http.exchange(method, url, sent, body, size, Clock(self._limits_for(method, url),
                                                                             float("inf")))
        except Stalled as exc:
            self._record("stalled", str(exc))
            return False
        except (OSError, http.client.HTTPException) as exc:
            kind = "tls" if isinstance(exc, ssl.SSLError) else "stalled"
            self._record(kind, f"{type(exc).__name__}: {str(exc)[:160]}")
            if kind == "tls":
                return self._refuse(client, "tls", f"{origin_of(url)} did not answer in TLS ({str(exc)[:120]})")
            return False
        try:
            return self._relay(client, method, url, answer)
        except Refused as exc:
            return self._refuse(client, "refused", exc.message)
        except RemoteUnreachable as exc:
            self._record("stalled", exc.message)
            return False
        finally:
            answer.close()

    def _limits_for(self, method: str, url: str) -> Limits:
        """The limits of one request: a multipart completion's answer may trickle whitespace while the store joins
        the parts (AWS does, for minutes), so it is held to the idle timeout only, not to the rate floor."""
        if method == "POST" and "uploadId=" in (urlsplit(url).query or ""):
            return dataclasses.replace(self.limits, min_rate=1)
        return self.limits

    def _upstream(self, target: str) -> str:
        """The URL a proxied request goes to (its scheme upgraded to TLS where the store speaks it)."""
        origin = origin_of(target)
        real = self.upgrade.target(origin) if self.upgrade is not None else None
        if real is None:
            return target
        return f"https://{real.netloc}{target_of(target)}"

    def _relay(self, client: socket.socket, method: str, url: str, answer: Answer) -> bool:
        """Pass *answer* to obstore under the contract. :raises Refused, RemoteUnreachable:"""
        status, what = answer.status, f"{method} {target_of(url)[:120]}"
        if method == "HEAD" or status in (204, 304) or status < 200:
            client.sendall(_head(answer, None))
            return not answer.response.will_close
        if 300 <= status < 400:
            location = answer.header("Location")
            if location and origin_of(resolve(url, location)) != origin_of(url):
                raise Refused(f"{what}: a redirect to another origin ({origin_of(resolve(url, location))}): refused")
        if status >= 300:
            data = answer.read(ERROR_LIMIT, f"{what}: the {status} answer")
        elif method == "GET" and is_listing(url):
            data = answer.read(PAGE_LIMIT, f"{what}: a listing page")
            check_page(url, data, what)
            self.tokens.see(url, data, what)
        elif method == "GET":
            return self._stream(client, answer, what)
        else:
            data = answer.read(SMALL_LIMIT, f"{what}: the {status} answer")
        client.sendall(_head(answer, len(data)) + data)
        return True

    def _stream(self, client: socket.socket, answer: Answer, what: str) -> bool:
        """An object's body, passed on as it arrives (its length known in advance, or refused)."""
        length = answer.response.length
        if length is None:
            raise Refused(f"{what}: an object's answer without a Content-Length: refused")
        client.sendall(_head(answer, length))
        for piece in answer.stream(1 << 20, what):
            client.sendall(piece)
        return True

    def _refuse(self, client: socket.socket, kind: str, reason: str) -> bool:
        """Answer obstore with a 400 that says why (obstore does not retry it); record the verdict."""
        self._record(kind, reason)
        body = f"{REFUSED}: {reason}".encode()
        with contextlib.suppress(OSError):
            client.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                           b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        return False


def _body(headers: Any, reader: Any) -> tuple[bytes | Any, int | None]:
    """The request body obstore sends: ``(file-like, size)`` for a Content-Length, bytes for a chunked one."""
    if "chunked" in (headers.get("Transfer-Encoding") or "").lower():
        data = bytearray()
        while True:
            size = int(reader.readline(1024).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while reader.readline(65537) not in (b"\r\n", b"\n", b""):
                    pass
                return bytes(data), None
            data += reader.read(size)
            reader.readline(3)
    length = headers.get("Content-Length")
    if length is None or not length.strip().isdigit() or int(length) == 0:
        return None, None
    return reader, int(length)


def _head(answer: Answer, length: int | None) -> bytes:
    """The status line and headers passed to obstore: the end-to-end headers, and *length* as Content-Length
    (a HEAD keeps the store's own)."""
    lines = [f"HTTP/1.1 {answer.status} {answer.reason}"]
    for name, value in answer.headers.items():
        low = name.lower()
        if low in _HOP or (low == "content-length" and length is not None):
            continue
        lines.append(f"{name}: {' '.join(str(value).split())}")  # a folded value, unfolded
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


__all__ = ["REFUSED", "Gate", "Upgrade", "Verdict"]
