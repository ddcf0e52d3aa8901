"""The transport contract's numbers: one frozen :class:`Limits`, read once from the ``TRTWARM_REMOTE_*`` variables
(or the flags written over them), the same for every peer (an ``s3://`` store, an ``oci://`` registry, its token
service), and the fixed caps every answer is read under.

What each bounds (docs/remote.md, "The transport contract", states it for users):

* ``connect_timeout``: one TCP (and TLS) connect, DNS included.
* ``read_timeout``: the answer's status line and headers must be complete this long after the request's last byte
  left (a server that sends its headers at 1 byte/s fails here), and no body may pause longer.
* ``min_rate``: a body (an answer's, or a request's upload) slower than this over any :data:`RATE_WINDOW` seconds of
  waiting fails the attempt: a read timeout alone never fails a server that sends one byte a second.
* ``timeout``: one attempt, whole, at most this long.
* ``retry_timeout``, ``retries``: no retry starts later than this after the request's first attempt, nor after
  this many; each pause is capped by :data:`MAX_BACKOFF`, a ``Retry-After`` by what is left of the window.
* ``ceiling``: no request, its retries included, lasts longer (a pull-only init's ``--lock-timeout``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from trtwarm.config import parse_duration, parse_size
from trtwarm.errors import ConfigError

#: the longest pause between two attempts of one request (backoff grows from 200 ms)
MAX_BACKOFF = 2.0
#: the rate floor is judged over this many seconds of waiting for bytes
RATE_WINDOW = 5.0
#: how often a blocked read, write or connect looks at the clock and at a stop request
TICK = 0.2
#: the body of an error answer (4xx/5xx, a redirect) is read up to this, for its message; the rest is dropped
ERROR_LIMIT = 64 << 10
#: one page of a listing (an S3 ListObjectsV2 answer, a registry's tags/list): larger is refused
PAGE_LIMIT = 8 << 20
#: the most pages one listing may take (a loop that escapes the repeat check still ends)
MAX_PAGES = 10_000
#: S3's own maximum keys per ListObjectsV2 page; a page with more is refused
MAX_PAGE_KEYS = 1000
#: redirects followed for one request (GET and HEAD only)
MAX_REDIRECTS = 5
#: a token service's answer, a small control answer (an upload session, a multipart completion)
SMALL_LIMIT = 1 << 20

#: (flag, variable, default, what it bounds): the waits of ``init``, ``remote *``, ``prebuild``, ``prewarm``
SETTINGS = (
    ("--remote-connect-timeout", "TRTWARM_REMOTE_CONNECT_TIMEOUT", "5s", "longest TCP/TLS connect (DNS included)"),
    ("--remote-read-timeout", "TRTWARM_REMOTE_READ_TIMEOUT", "5s", "an answer's headers must be complete this long "
     "after the request was sent, and no body may pause longer"),
    ("--remote-min-rate", "TRTWARM_REMOTE_MIN_RATE", "32K", "slowest body accepted (bytes/s, judged over 5 s of "
     "waiting): a server that trickles fails instead of running on"),
    ("--remote-retry-timeout", "TRTWARM_REMOTE_RETRY_TIMEOUT", "15s", "no retry of a request starts later than this "
     "after its first attempt: a store that never answers costs about this + the read timeout + 2 s, once per "
     "process (then it is skipped)"),
    ("--remote-timeout", "TRTWARM_REMOTE_TIMEOUT", "300s", "longest single attempt of one request, whole (a large "
     "part)"),
)


@dataclass(frozen=True)
class Limits:
    """The bounds of every request to one peer (seconds, bytes per second)."""

    connect_timeout: float = 5.0
    read_timeout: float = 5.0
    retry_timeout: float = 15.0
    timeout: float = 300.0
    min_rate: int = 32 << 10
    retries: int = 4
    ceiling: float = math.inf

    @property
    def budget(self) -> float:
        """About the longest one request to a peer that never answers takes: the retry window, one more attempt
        and its backoff, never past :attr:`ceiling` (what a dead peer costs this process, once: :mod:`.breaker`)."""
        return min(self.ceiling, self.retry_timeout + self.read_timeout + MAX_BACKOFF)

    def capped(self, seconds: float) -> Limits:
        """These limits with every request ended within *seconds* (a pull-only init's ``--lock-timeout``)."""
        return dataclasses.replace(self, ceiling=min(self.ceiling, seconds),
                                   retry_timeout=min(self.retry_timeout, seconds),
                                   read_timeout=min(self.read_timeout, seconds),
                                   connect_timeout=min(self.connect_timeout, seconds))


def parse_limits(environ: Mapping[str, str]) -> Limits:
    """The limits the ``TRTWARM_REMOTE_*`` variables in *environ* set. :raises ConfigError: a value that is not a
    duration (or size), or zero"""
    waits = {name: _positive(environ, name, flag, default) for flag, name, default, _text in SETTINGS
             if name != "TRTWARM_REMOTE_MIN_RATE"}
    rate_text = environ.get("TRTWARM_REMOTE_MIN_RATE") or "32K"
    try:
        rate = parse_size(rate_text)
    except ConfigError as exc:
        raise ConfigError(f"--remote-min-rate / TRTWARM_REMOTE_MIN_RATE: {exc.message}", hint=exc.hint) from None
    if rate < 1:
        raise ConfigError(f"--remote-min-rate / TRTWARM_REMOTE_MIN_RATE {rate_text!r} must be at least 1 byte/s",
                          hint="e.g. --remote-min-rate 32K: a body slower than this fails")
    return Limits(connect_timeout=waits["TRTWARM_REMOTE_CONNECT_TIMEOUT"],
                  read_timeout=waits["TRTWARM_REMOTE_READ_TIMEOUT"],
                  retry_timeout=waits["TRTWARM_REMOTE_RETRY_TIMEOUT"], timeout=waits["TRTWARM_REMOTE_TIMEOUT"],
                  min_rate=rate, retries=whole_number(environ.get("TRTWARM_REMOTE_RETRIES", "4"),
                                                      "TRTWARM_REMOTE_RETRIES"))


def _positive(environ: Mapping[str, str], name: str, flag: str, default: str) -> float:
    """A duration setting that must be above zero (a zero timeout would fail every request, or wait forever)."""
    value = parse_duration(environ.get(name) or default, f"{flag} / {name}")
    if value <= 0:
        raise ConfigError(f"{flag} / {name} {environ.get(name)!r} must be above zero",
                          hint=f"e.g. {flag} {default}: zero would fail every request")
    return value


def whole_number(text: str, name: str) -> int:
    """A count setting. :raises ConfigError: not a whole number"""
    if not text.strip().isdigit():
        raise ConfigError(f"{name}={text!r} is not a whole number")
    return int(text)


__all__ = ["ERROR_LIMIT", "MAX_BACKOFF", "MAX_PAGES", "MAX_PAGE_KEYS", "MAX_REDIRECTS", "PAGE_LIMIT", "RATE_WINDOW",
           "SETTINGS", "SMALL_LIMIT", "TICK", "Limits", "parse_limits", "whole_number"]
