"""The one reader of JSON that trtwarm did not write itself in this process.

Everything read from a volume, a store, a registry, a peer or a file a user hands over (policies, manifests,
envelopes, refs, hit records, stat-cache records, indexes, registry answers) is parsed by :func:`loads`, which
refuses, with :class:`JSONRefused`:

* more than *limit* bytes (the caller's cap; nothing is parsed past it),
* bytes that are not UTF-8,
* a key given twice in one object (``{"mode": "enforce", "mode": "off"}`` is not read last-wins),
* ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON; Python's parser accepts them by default),
* nesting deeper than :data:`MAX_DEPTH` (a nested document never becomes a ``RecursionError``),
* anything else that is not JSON.

Each caller maps the one error type to its documented exit code, or, for an advisory record (a stat cache, a hit
record), treats the record as absent. ``tests/test_ownership.py`` fails when a module calls ``json.load``/``loads``
itself. Imports ``json`` only (``typing`` for type checkers only): the repeat hit uses it.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False
if TYPE_CHECKING:  # not imported at run time: the repeat hit (trtwarm.init.fasthit) pays for every module it loads
    from typing import Any

#: deeper than any document trtwarm writes (a manifest is 4 levels deep, a DSSE statement 6)
MAX_DEPTH = 64


class JSONRefused(ValueError):
    """The data is not a JSON document trtwarm accepts; the message says why (no traceback is ever shown for it).
    :attr:`syntax`: it is not JSON at all (a caller may say just that), rather than JSON trtwarm refuses."""

    def __init__(self, message: str, *, syntax: bool = False) -> None:
        super().__init__(message)
        self.syntax = syntax


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc = dict(pairs)
    if len(doc) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise JSONRefused(f"the key {twice[:80]!r} is given twice in one object")
    return doc


def _constant(name: str) -> Any:
    raise JSONRefused(f"{name} is not a JSON number")


def _depth(doc: Any) -> int:
    """The nesting depth of *doc* (a scalar is 0), without recursion."""
    deepest, pending = 0, [(doc, 1)]
    while pending:
        node, level = pending.pop()
        if isinstance(node, dict):
            node = node.values()
        elif not isinstance(node, list):
            continue
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            break
        pending.extend((child, level + 1) for child in node if isinstance(child, (dict, list)))
    return deepest


def loads(data: bytes | bytearray | memoryview | str, *, limit: int) -> Any:
    """Parse *data* (at most *limit* bytes of UTF-8 JSON) strictly. :raises JSONRefused: with the reason"""
    if len(data) > limit:
        raise JSONRefused(f"it is larger than {limit} bytes")
    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
        doc = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant)
    except JSONRefused:
        raise
    except UnicodeDecodeError:
        raise JSONRefused("it is not UTF-8 text") from None
    except RecursionError:
        raise JSONRefused(f"it is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # json.JSONDecodeError, and an integer of more than 4300 digits
        raise JSONRefused(f"it is not valid JSON ({str(exc)[:120]})", syntax=True) from None
    if _depth(doc) > MAX_DEPTH:
        raise JSONRefused(f"it is nested deeper than {MAX_DEPTH} levels")
    return doc


def loads_object(data: bytes | str, *, limit: int) -> dict[str, Any]:
    """:func:`loads`, and the document must be an object. :raises JSONRefused:"""
    doc = loads(data, limit=limit)
    if not isinstance(doc, dict):
        raise JSONRefused(f"it is a JSON {type(doc).__name__}, not an object")
    return doc


__all__ = ["MAX_DEPTH", "JSONRefused", "loads", "loads_object"]
