"""Plain-text tables and human units for the lifecycle commands (``ls``, ``stats``, ``verify``, ``gc``, ``rm``)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(n: int | float | None) -> str:
    """``1536`` → ``1.5 KiB``."""
    if n is None:
        return "-"
    value, unit = float(n), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{int(value)} B" if unit == 0 else f"{value:.1f} {_UNITS[unit]}"


def human_age(seconds: float | None) -> str:
    """``90`` → ``1m``, ``200000`` → ``2d``; ``-`` for unknown."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    for limit, div, unit in ((60, 1, "s"), (3600, 60, "m"), (86400, 3600, "h")):
        if seconds < limit:
            return f"{seconds / div:.0f}{unit}"
    return f"{seconds / 86400:.0f}d"


def utc(ts: float | None) -> str:
    """An epoch timestamp as ``2026-12-02 14:52Z``."""
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%MZ", time.gmtime(ts))


def render(headers: Sequence[str], rows: Sequence[Sequence[object]], right: Sequence[str] = ()) -> str:
    """Columns padded to their widest cell; columns named in *right* are right-aligned."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [c.rjust(w) if h in right else c.ljust(w) for c, w, h in zip(row, widths, headers)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def fit(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int,
        shrink: Mapping[str, int]) -> list[list[str]]:
    """Truncate cells (ending them with ``…``) until :func:`render` of the result is at most *width* characters
    wide. The columns named in *shrink* give way, the one furthest above the width *shrink* gives it first; when
    that is not enough, they go down to their header's width (or 6)."""
    cells = [list(map(str, row)) for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    for floor in ({i: max(len(h), shrink[h]) for i, h in enumerate(headers) if h in shrink},
                  {i: max(len(h), 6) for i, h in enumerate(headers) if h in shrink}):
        while sum(widths) + 2 * (len(widths) - 1) > width:
            candidates = [i for i in floor if widths[i] > floor[i]]
            if not candidates:
                break
            widths[max(candidates, key=lambda i: widths[i] - floor[i])] -= 1
    for row in cells:
        for i, h in enumerate(headers):
            if h in shrink and len(row[i]) > widths[i]:
                row[i] = row[i][: widths[i] - 1] + "…"
    return cells


__all__ = ["fit", "human_age", "human_bytes", "render", "utc"]
