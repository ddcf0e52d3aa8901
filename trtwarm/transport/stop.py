"""The process's stop request: SIGTERM or SIGINT ends every wait of the transport, in any thread, within a tick.

The signal handler (:mod:`trtwarm.init.stopping`) calls :func:`request` before it raises in the main thread; every
blocked connect, read, write and retry pause of the transport looks at :func:`requested` at least every
:data:`trtwarm.transport.limits.TICK` seconds and raises :func:`error` (``Terminated``, exit 143; ``Interrupted``,
130), so a transfer in a worker thread ends too, and the callbacks registered with :func:`on_stop` (the gate that
obstore talks through closes its connections) run at once.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable

from trtwarm.errors import Interrupted, Terminated

log = logging.getLogger("trtwarm.transport")
_event = threading.Event()
_lock = threading.Lock()
_signals: list[int] = []
_callbacks: list[Callable[[], None]] = []


def request(signum: int = signal.SIGTERM) -> None:
    """Stop every transfer of this process (called by the signal handler; safe from any thread)."""
    with _lock:
        if _event.is_set():
            return
        _signals.append(signum)
        _event.set()
        callbacks = list(_callbacks)
    for callback in callbacks:
        try:
            callback()
        except Exception:  # noqa: BLE001 (a failing callback must not stop the others, nor the handler)
            log.debug("a stop callback failed", exc_info=True)


def requested() -> bool:
    """Whether a stop was requested."""
    return _event.is_set()


def error() -> Interrupted:
    """The error a stopped wait raises: ``Terminated`` for SIGTERM, ``Interrupted`` for SIGINT."""
    name = signal.Signals(_signals[0]).name if _signals else "SIGTERM"
    return (Interrupted if _signals and _signals[0] == signal.SIGINT else Terminated)(f"stopped by {name}")


def check() -> None:
    """:raises Interrupted: a stop was requested"""
    if _event.is_set():
        raise error()


def sleep(seconds: float) -> None:
    """Pause *seconds*, or less when a stop is requested meanwhile. :raises Interrupted: a stop was requested"""
    if _event.wait(max(0.0, seconds)):
        raise error()


def on_stop(callback: Callable[[], None]) -> None:
    """Run *callback* when a stop is requested (at once if one was)."""
    with _lock:
        if not _event.is_set():
            _callbacks.append(callback)
            return
    callback()


def reset() -> None:
    """Forget a stop request (tests only)."""
    with _lock:
        _event.clear()
        _signals.clear()


__all__ = ["check", "error", "on_stop", "request", "requested", "reset", "sleep"]
