"""Names made safe for files on the volume: :func:`sanitize`, and the holder name of an in-use lease.

A leaf module (``re`` and ``os`` only): the repeat hit (:mod:`trtwarm.init.fasthit`) names its lease with it without
importing the key or the volume's modules.
"""

from __future__ import annotations

import os
import re
import zlib

_UNSAFE = re.compile(r"[^a-z0-9._-]+")
NAME_PART_MAX = 48
#: the longest file name (in bytes) Linux filesystems take
NAME_MAX = 255


def sanitize(text: str, limit: int = NAME_PART_MAX) -> str:
    """Reduce *text* to ``[a-z0-9._-]``, without leading dots, at most *limit* characters (never empty)."""
    clean = _UNSAFE.sub("-", text.lower()).strip("-.")[:limit].strip("-.")
    return clean or "x"


def holder(pod: str | None, namespace: str | None, hostname: str) -> str:
    """A lease file's stem: ``<namespace>.<pod>`` in a Pod (init and sidecar share it), else ``<host>.<pid>``."""
    if pod:
        return sanitize(f"{namespace or 'default'}.{pod}", 120)
    return sanitize(f"{hostname}.{os.getpid()}", 120)


def bounded(name: str, suffix: str) -> str:
    """``name + suffix`` within :data:`NAME_MAX` bytes whatever *name* is (an entry's name is whatever a writer of
    the volume made it): a *name* too long is cut at a character boundary and marked with ``~`` and the CRC-32 of
    the whole (two long names that share a beginning stay apart)."""
    whole = os.fsencode(name)
    if len(whole) + len(os.fsencode(suffix)) <= NAME_MAX:
        return name + suffix
    budget = NAME_MAX - len(os.fsencode(suffix)) - 9
    cut = whole[:max(budget, 0)].decode("utf-8", "ignore") if budget > 0 else ""
    while len(os.fsencode(cut)) > max(budget, 0):  # a surrogate-escaped byte counts once it is re-encoded
        cut = cut[:-1]
    return f"{cut}~{zlib.crc32(whole):08x}{suffix}"


__all__ = ["NAME_MAX", "NAME_PART_MAX", "bounded", "holder", "sanitize"]
