"""Names made safe for files on the volume: :func:`sanitize`, and the holder name of an in-use lease.

A leaf module (``re`` and ``os`` only): the repeat hit (:mod:`trtwarm.init.fasthit`) names its lease with it without
importing the key or the volume's modules.
"""

from __future__ import annotations

import os
import re

_UNSAFE = re.compile(r"[^a-z0-9._-]+")
NAME_PART_MAX = 48


def sanitize(text: str, limit: int = NAME_PART_MAX) -> str:
    """Reduce *text* to ``[a-z0-9._-]``, without leading dots, at most *limit* characters (never empty)."""
    clean = _UNSAFE.sub("-", text.lower()).strip("-.")[:limit].strip("-.")
    return clean or "x"


def holder(pod: str | None, namespace: str | None, hostname: str) -> str:
    """A lease file's stem: ``<namespace>.<pod>`` in a Pod (init and sidecar share it), else ``<host>.<pid>``."""
    if pod:
        return sanitize(f"{namespace or 'default'}.{pod}", 120)
    return sanitize(f"{hostname}.{os.getpid()}", 120)


__all__ = ["NAME_PART_MAX", "holder", "sanitize"]
