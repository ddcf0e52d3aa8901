"""An object's body passed from the store to obstore by the :mod:`.gate` without copying it through Python: the
kernel moves it (``os.splice``, socket → pipe → socket) from a plain TCP connection, under the attempt's clock
(idle, rate floor, deadlines, stop), checked at least every tick. A TLS connection's bytes must be decrypted here,
so they go through :meth:`~trtwarm.transport.answer.Answer.stream` instead."""

from __future__ import annotations

import fcntl
import os
import select
import socket
import ssl
import time

from trtwarm.errors import RemoteUnreachable
from trtwarm.transport.answer import Answer
from trtwarm.transport.limits import TICK
from trtwarm.transport.wire import Stalled, WatchedSocket

_PIPE = 1 << 20
_SETPIPE = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def can_splice(answer: Answer) -> bool:
    """Whether *answer*'s body can be spliced: a plain TCP connection on a system with ``os.splice``."""
    sock = answer.sock
    return hasattr(os, "splice") and isinstance(sock, WatchedSocket) and not isinstance(sock.sock, ssl.SSLSocket)


def splice_body(answer: Answer, client: socket.socket, what: str) -> None:
    """Send the rest of *answer*'s body (its Content-Length) to *client*. The connection is not reused after.
    :raises RemoteUnreachable: the store stalled or the body broke off; :raises OSError: *client* went away"""
    assert answer.sock is not None and answer.response.length is not None
    left = answer.response.length
    fp = answer.response.fp
    try:
        early = fp.peek(1)[:left] if left else b""  # what the read of the headers took in already
    except Stalled as exc:
        raise RemoteUnreachable(f"{what}: {answer.origin} did not answer ({exc})") from None
    if early:
        client.sendall(fp.read(len(early)))
        left -= len(early)
    if left:
        _splice(answer.sock, client, left, what, answer)


def _splice(src: WatchedSocket, client: socket.socket, left: int, what: str, answer: Answer) -> None:
    clock = src.clock
    assert clock is not None
    read, write = os.pipe()
    try:
        try:
            fcntl.fcntl(write, _SETPIPE, _PIPE)
        except OSError:
            pass  # the default pipe size: more calls, same result
        poller = select.poll()
        poller.register(src.fileno(), select.POLLIN)
        while left:
            started = time.monotonic()
            try:
                got = os.splice(src.fileno(), write, min(left, _PIPE), flags=os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK)
            except BlockingIOError:
                poller.poll(TICK * 1000)
                _moved(clock, 0, started, what, answer)
                continue
            if got == 0:
                raise RemoteUnreachable(f"{what}: the answer broke off {left} bytes before its end")
            _moved(clock, got, started, what, answer)
            left -= got
            while got:
                got -= os.splice(read, client.fileno(), got, flags=os.SPLICE_F_MOVE)
    finally:
        os.close(read)
        os.close(write)


def _moved(clock: object, count: int, started: float, what: str, answer: Answer) -> None:
    try:
        clock.moved(count, time.monotonic() - started)  # type: ignore[attr-defined]
    except Stalled as exc:
        raise RemoteUnreachable(f"{what}: {answer.origin} did not answer ({exc})") from None


__all__ = ["can_splice", "splice_body"]
