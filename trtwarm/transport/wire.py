"""Sockets under the contract: the connect (DNS included), the TLS handshake and every read and write of one
attempt are checked against that attempt's :class:`Clock` at least every :data:`~trtwarm.transport.limits.TICK`
seconds, so no peer can hold a thread longer than the contract says, and a stop request ends the wait in any thread.

A :class:`Clock` fails the attempt with :class:`Stalled` (retryable; a peer that does this "did not answer") when:
the connection is not made within ``connect_timeout``; the answer's headers are not complete ``read_timeout`` after
the request's last byte (a server that sends them at 1 byte/s); a body, the request's or the answer's, pauses longer
than ``read_timeout`` or moves under ``min_rate`` over :data:`~trtwarm.transport.limits.RATE_WINDOW` seconds of
waiting (time this process spends elsewhere does not count against the peer); the attempt outlives ``timeout``;
or the request outlives its own deadline (the retry budget's hard end, a pull-only init's ``--lock-timeout``).
"""

from __future__ import annotations

import errno
import io
import ipaddress
import os
import select
import socket
import ssl
import threading
import time
from typing import Any

from trtwarm.transport import stop
from trtwarm.transport.limits import RATE_WINDOW, TICK, Limits

#: the most bytes one write hands the kernel (a tick's worth on any link this cares about)
_WRITE = 1 << 20


class Stalled(TimeoutError):
    """The peer did not answer within the contract (the message says how): retryable; after the retries, the peer
    is unreachable (exit 13) and skipped for the rest of the process."""


class Clock:
    """The bounds of one attempt: where it stands (sending, awaiting the answer's head, reading its body) and what
    the peer has done so far."""

    def __init__(self, limits: Limits, deadline: float) -> None:
        now = time.monotonic()
        self.limits = limits
        self.ends = min(deadline, now + limits.timeout)
        self.why_end = "its whole-request deadline" if deadline <= now + limits.timeout else \
            f"the {limits.timeout:.0f} s an attempt may take"
        self.phase = "send"
        self.connected = False  # a connection is made: a byte of the request may have reached the server
        self.head_due = float("inf")
        self.last = now  # the peer's last progress (a byte read or written)
        self._wait = self._moved = 0.0

    def answering(self) -> None:
        """The request is sent: the answer's status line and headers are due within the read timeout."""
        self.phase, self.head_due = "head", time.monotonic() + self.limits.read_timeout

    def reading(self) -> None:
        """The headers are in: the body follows, under the idle timeout and the rate floor."""
        self.phase, self.last, self._wait, self._moved = "body", time.monotonic(), 0.0, 0.0

    def moved(self, count: int, waited: float) -> None:
        """*count* bytes moved (0 for a wait that timed out) after waiting *waited* seconds. :raises Stalled:"""
        now = time.monotonic()
        if count:
            self.last = now
        self._wait += waited
        self._moved += count
        self.check(now)
        if self.phase != "head" and self._wait >= RATE_WINDOW:
            if self._moved < self.limits.min_rate * self._wait:
                raise Stalled(f"{'sent' if self.phase == 'send' else 'answered'} {self._moved:.0f} bytes in "
                              f"{self._wait:.1f} s, slower than the {_rate(self.limits.min_rate)} minimum")
            self._wait = self._moved = 0.0

    def check(self, now: float | None = None) -> None:
        """:raises Stalled: a bound is passed; :raises Interrupted: a stop was requested"""
        stop.check()
        now = time.monotonic() if now is None else now
        if now > self.ends:
            raise Stalled(f"the request ran into {self.why_end}")
        if self.phase == "head" and now > self.head_due:
            raise Stalled(f"no complete answer within {self.limits.read_timeout:g} s of the request")
        if now - self.last > self.limits.read_timeout:
            what = "took no byte of the request" if self.phase == "send" else "sent no byte"
            raise Stalled(f"{what} for {self.limits.read_timeout:g} s")


def _rate(rate: float) -> str:
    return f"{rate / 1024:g} KiB/s" if rate >= 1024 else f"{rate:g} bytes/s"


class WatchedSocket:
    """A connected socket (plain or TLS) whose every read and write follows :attr:`clock` (set per attempt); what
    ``http.client`` needs of a socket (``sendall``, ``makefile``, ``close``)."""

    def __init__(self, sock: socket.socket) -> None:
        sock.settimeout(TICK)
        self.sock = sock
        self.clock: Clock | None = None
        self._refs, self._closed = 0, False
        self._lock = threading.Lock()

    def fileno(self) -> int:
        return self.sock.fileno()

    def settimeout(self, value: float | None) -> None:
        """Ignored: the clock decides how long a wait may last."""

    def sendall(self, data: Any) -> None:
        """Send all of *data*, under the clock. :raises Stalled, Interrupted:"""
        view = memoryview(data).cast("B")
        while view:
            started = time.monotonic()
            try:
                sent = self.sock.send(view[:_WRITE])
            except TimeoutError:
                sent = 0
            self._clock().moved(sent, time.monotonic() - started)
            view = view[sent:]

    def recv_into(self, buffer: Any) -> int:
        """Read into *buffer*, under the clock (0: the peer closed). :raises Stalled, Interrupted:"""
        while True:
            started = time.monotonic()
            try:
                got: int | None = self.sock.recv_into(buffer)
            except TimeoutError:
                got = None
            self._clock().moved(got or 0, time.monotonic() - started)
            if got is not None:
                return got

    def _clock(self) -> Clock:
        if self.clock is None:  # never expected: every attempt sets one
            raise Stalled("a connection was used outside a request")
        return self.clock

    def makefile(self, mode: str = "rb", buffering: int | None = None, **_: Any) -> io.BufferedReader:
        """A buffered reader over the watched reads (``http.client`` reads an answer through it)."""
        with self._lock:
            self._refs += 1
        return io.BufferedReader(_Reader(self), buffering or io.DEFAULT_BUFFER_SIZE)

    def _unref(self) -> None:
        with self._lock:
            self._refs -= 1
            last = self._closed and self._refs <= 0
        if last:
            self.sock.close()

    def close(self) -> None:
        """Close once no reader still uses the socket (as :class:`socket.socket` does with its files)."""
        with self._lock:
            self._closed = True
            last = self._refs <= 0
        if last:
            self.sock.close()

    def abort(self) -> None:
        """Shut the connection down at once (a blocked read in another thread returns): on a stop."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def dropped(self) -> bool:
        """Whether an idle connection was closed by the peer (or holds bytes nobody asked for): not reusable."""
        try:
            poller = select.poll()
            poller.register(self.sock.fileno(), select.POLLIN)
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return True


class _Reader(io.RawIOBase):
    def __init__(self, owner: WatchedSocket) -> None:
        self.owner = owner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self.owner.recv_into(buffer)

    def close(self) -> None:
        if not self.closed:
            super().close()
            self.owner._unref()


def connect(host: str, port: int, clock: Clock, tls: ssl.SSLContext | None = None) -> WatchedSocket:
    """A connection to *host*:*port* (TLS with *tls*) within the connect timeout. :raises Stalled: no connection
    in time; :raises OSError: refused, unreachable, a TLS failure; :raises Interrupted:"""
    due = min(clock.ends, time.monotonic() + clock.limits.connect_timeout)
    last: OSError = Stalled(f"no connection within {clock.limits.connect_timeout:g} s")
    for family, kind, proto, _name, address in _resolve(host, port, due):
        sock = socket.socket(family, kind, proto)
        try:
            _connect(sock, address, due, clock.limits.connect_timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(TICK)
            if tls is not None:
                sock = _handshake(tls.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False), due,
                                  clock.limits.connect_timeout)
            clock.last = time.monotonic()  # the idle bound runs from the connection on
            return WatchedSocket(sock)
        except OSError as exc:
            sock.close()
            last = exc
    raise last


def _resolve(host: str, port: int, due: float) -> list[Any]:
    """``getaddrinfo`` of *host*, within *due* (a resolver that never answers is waited for in a daemon thread)."""
    try:
        ipaddress.ip_address(host)
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except ValueError:
        pass
    found: list[Any] = []
    done = threading.Event()

    def look() -> None:
        try:
            found.extend(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as exc:
            found.append(exc)
        done.set()

    threading.Thread(target=look, name="trtwarm-resolve", daemon=True).start()
    while not done.wait(TICK):
        stop.check()
        if time.monotonic() > due:
            raise Stalled(f"the name {host} did not resolve in time")
    if found and isinstance(found[0], OSError):
        raise found[0]
    return found


def _connect(sock: socket.socket, address: Any, due: float, limit: float) -> None:
    sock.setblocking(False)
    err = sock.connect_ex(address)
    if err in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLOUT)
        while not poller.poll(TICK * 1000):
            stop.check()
            if time.monotonic() > due:
                raise Stalled(f"no connection within {limit:g} s")
        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        raise OSError(err, os.strerror(err))


def _handshake(sock: ssl.SSLSocket, due: float, limit: float) -> ssl.SSLSocket:
    while True:
        try:
            sock.do_handshake()
            return sock
        except TimeoutError:
            stop.check()
            if time.monotonic() > due:
                raise Stalled(f"no TLS handshake within {limit:g} s") from None


__all__ = ["Clock", "Stalled", "WatchedSocket", "connect"]
