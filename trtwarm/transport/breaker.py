"""The process-wide memory of a dead peer (a circuit breaker), for every backend and every origin.

After a peer failed to answer (no connection, no complete answer in time, a body slower than the rate floor, after
the retries), the rest of this process skips it: every later request to it fails at once with the first failure's
reason, said once in the log. A hung store or registry thus costs one request budget, not one per request (a pull's
ranges, the push after a failed pull, the next row of ``prebuild``). Keyed by the peer's name (an S3 store's
description, an HTTP origin). A peer that answers, even with errors, is alive and never tripped; the breaker never
resets within a process (an init is short: a peer that hung once is likely to hang again before it ends).
"""

from __future__ import annotations

import logging
import threading
import time

from trtwarm.errors import RemoteUnreachable

log = logging.getLogger("trtwarm.remote")
_lock = threading.Lock()
_tripped: dict[str, tuple[float, str]] = {}  # peer -> (when, why)


def check(peer: str) -> None:
    """Fail at once when *peer* failed earlier in this process. :raises RemoteUnreachable:"""
    with _lock:
        down = _tripped.get(peer)
    if down is not None:
        raise RemoteUnreachable(f"{peer} is skipped for the rest of this process: it failed "
                                f"{time.monotonic() - down[0]:.0f} s ago ({down[1]})")


def trip(peer: str, why: str) -> None:
    """Mark *peer* down for the rest of this process; logged once."""
    with _lock:
        if peer in _tripped:
            return
        _tripped[peer] = (time.monotonic(), why)
    log.warning("%s did not answer (%s): skipping it for the rest of this process", peer, why)


def is_down(peer: str) -> bool:
    """Whether *peer* was marked down in this process."""
    with _lock:
        return peer in _tripped


def reset() -> None:
    """Forget every failure (tests, and long-lived processes that start a new run)."""
    with _lock:
        _tripped.clear()


__all__ = ["check", "is_down", "reset", "trip"]
