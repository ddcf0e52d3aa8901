"""When a request is tried again, and how long it waits first: one :class:`Budget` per request.

* Idempotent methods (GET, HEAD, PUT, DELETE) are retried after no answer (a refused or stalled connection, a
  stalled answer) and after 429, 500, 502, 503 and 504. POST and PATCH are not idempotent: they are retried only when
  the connection failed before a byte of the request left, or on 429 (the server says it did not process it).
* No retry starts after ``retry_timeout`` from the first attempt, nor after ``retries`` retries, nor past the
  request's ``ceiling``. The pause is exponential from 200 ms up to :data:`~trtwarm.transport.limits.MAX_BACKOFF`,
  or the answer's ``Retry-After`` when it fits in what is left of the window; a ``Retry-After`` that does not fit ends
  the request at once (``Retry-After: 3600`` never puts the process to sleep for an hour). Pauses end on a stop.
"""

from __future__ import annotations

import email.utils
import math
import re
import time

from trtwarm.transport.limits import MAX_BACKOFF, Limits

IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


class Budget:
    """The clock of one request, its retries included."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.started = time.monotonic()
        self.window = self.started + limits.retry_timeout
        self.deadline = self.started + limits.ceiling if math.isfinite(limits.ceiling) else math.inf
        self.retried = 0

    def pause(self, asked: float | None = None) -> float | None:
        """How long to wait before the next attempt (*asked*: the answer's ``Retry-After``), or None: no retry."""
        if self.retried >= self.limits.retries:
            return None
        delay = asked if asked is not None else min(MAX_BACKOFF, 0.2 * 2 ** self.retried)
        if time.monotonic() + delay > min(self.window, self.deadline):
            return None
        self.retried += 1
        return delay

    def left(self) -> float:
        """Seconds left of the retry window (never past the ceiling)."""
        return max(0.0, min(self.window, self.deadline) - time.monotonic())


def may_retry(method: str, *, status: int | None, sent: bool) -> bool:
    """Whether a request may be tried again: *status* of its answer (None: no answer), *sent*: a byte of it may
    have reached the server."""
    if method.upper() in IDEMPOTENT:
        return status is None or status in RETRY_STATUSES
    return (status is None and not sent) or status == 429


def retry_after(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` value asks for (seconds or an HTTP date), or None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if re.fullmatch(r"[0-9]{1,12}", value):
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError, OSError):
        return None


__all__ = ["IDEMPOTENT", "RETRY_STATUSES", "Budget", "may_retry", "retry_after"]
