"""A ``CONNECT`` tunnel through the :mod:`.gate` (a credential service obstore reaches in TLS itself): the connect is
bounded like any other, the bytes that flow are TLS the gate cannot read, and a stop request closes it."""

from __future__ import annotations

import select
import socket
from collections.abc import Callable

from trtwarm.transport import stop
from trtwarm.transport.limits import TICK, Limits
from trtwarm.transport.wire import Clock, connect


def tunnel(client: socket.socket, target: str, limits: Limits, record: Callable[[str, str], None]) -> None:
    """Relay bytes both ways between *client* and *target* (``host:port``) until either side closes or a stop;
    a failed connect is *record*-ed and ends the client's connection."""
    host, _, port = target.rpartition(":")
    try:
        upstream = connect(host.strip("[]"), int(port), Clock(limits, float("inf")))
    except (OSError, ValueError) as exc:
        record("stalled", f"CONNECT {target[:80]}: {exc}")
        return
    client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
    raw = upstream.sock
    try:
        _pump(client, raw)
    finally:
        raw.close()


def _pump(a: socket.socket, b: socket.socket) -> None:
    pairs = {a.fileno(): (a, b), b.fileno(): (b, a)}
    while not stop.requested():
        ready, _, _ = select.select(list(pairs), [], [], TICK)
        for fd in ready:
            src, dst = pairs[fd]
            try:
                data = src.recv(1 << 16)
            except TimeoutError:
                continue
            if not data:
                return
            dst.sendall(data)


__all__ = ["tunnel"]
