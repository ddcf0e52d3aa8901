"""Listings under the contract: a page is small and finite, and a listing never goes back.

* A ListObjectsV2 page (checked by the :mod:`.gate` as it passes) holds at most
  :data:`~trtwarm.transport.limits.MAX_PAGE_KEYS` keys (S3's own maximum) and never names its own continuation token
  as the next one (its size is capped by the gate: :data:`~trtwarm.transport.limits.PAGE_LIMIT`).
* Continuation tokens never lead back to one already asked for, nor run longer than
  :data:`~trtwarm.transport.limits.MAX_PAGES` pages (:class:`TokenChains`: a store that sends empty pages under
  tokens ``a, b, a, ...`` is caught although no key repeats). Each token leads to one next token, so a cycle in
  that map is a loop whoever asked (concurrent listings of one prefix ask the same tokens, never in a cycle).
* The keys of a listing come in strictly increasing order (S3 lists in UTF-8 binary order), so a page the store sends
  again, under a token it repeats, is caught by the first key that does not move forward (:class:`KeyOrder`).
"""

from __future__ import annotations

import re
import threading
from urllib.parse import parse_qs, urlsplit

from trtwarm.transport.answer import Refused
from trtwarm.transport.limits import MAX_PAGE_KEYS, MAX_PAGES


def is_listing(url: str) -> bool:
    """Whether *url* asks for a ListObjectsV2 page."""
    return "list-type=2" in (urlsplit(url).query or "")


_KEY = re.compile(rb"<Key>")
_NEXT = re.compile(rb"<NextContinuationToken>([^<]*)</NextContinuationToken>")


def check_page(url: str, data: bytes, what: str) -> None:
    """A listing page must hold at most :data:`MAX_PAGE_KEYS` keys and not name its own token as the next one.
    :raises Refused:"""
    keys = len(_KEY.findall(data))
    if keys > MAX_PAGE_KEYS:
        raise Refused(f"{what}: a listing page of {keys} keys (S3 pages hold at most {MAX_PAGE_KEYS}): refused")
    asked = parse_qs(urlsplit(url).query).get("continuation-token", [None])[0]
    found = _NEXT.search(data)
    if asked is not None and found is not None and _unescape(found[1]) == asked.encode():
        raise Refused(f"{what}: the listing names the page it answers as the next one (a loop): refused")


def _unescape(value: bytes) -> bytes:
    return value.replace(b"&lt;", b"<").replace(b"&gt;", b">").replace(b"&quot;", b'"').replace(b"&apos;", b"'") \
        .replace(b"&amp;", b"&")


class TokenChains:
    """The continuation tokens a store's answers chain, per bucket path and prefix."""

    def __init__(self) -> None:
        self._next: dict[tuple[str, str], dict[str, str]] = {}
        self._depth: dict[tuple[str, str], dict[str, int]] = {}
        self._lock = threading.Lock()

    def see(self, url: str, data: bytes, what: str) -> None:
        """Record the token a page answering *url* names next. :raises Refused: a cycle, or too long a chain"""
        query = parse_qs(urlsplit(url).query)
        scope = (urlsplit(url).path, query.get("prefix", [""])[0])
        asked = query.get("continuation-token", [""])[0]
        found = _NEXT.search(data)
        if found is None:
            return
        nxt = _unescape(found[1]).decode("utf-8", "replace")
        with self._lock:
            chain, depth = self._next.setdefault(scope, {}), self._depth.setdefault(scope, {})
            if len(chain) > 4 * MAX_PAGES:
                chain.clear()
                depth.clear()
            chain[asked] = nxt
            depth[nxt] = depth.get(asked, 0) + 1
            token, steps = nxt, 0
            while token in chain and steps <= len(chain):
                if token == asked:
                    raise Refused(f"{what}: the listing's continuation tokens lead back to one it asked for "
                                  "(a loop): refused")
                token, steps = chain[token], steps + 1
            if depth[nxt] > MAX_PAGES:
                raise Refused(f"{what}: the listing runs past {MAX_PAGES} pages: refused")


class KeyOrder:
    """The keys of one listing, checked as they come: each after the last, and not too many."""

    def __init__(self, what: str) -> None:
        self.what, self.last, self.count = what, b"", 0

    def see(self, key: str) -> None:
        """:raises Refused: *key* does not come after the last one, or the listing is past any sane length"""
        raw = key.encode()
        if self.count and raw <= self.last:
            last = self.last[:120].decode(errors="replace")
            raise Refused(f"{self.what}: the store listed {key[:120]!r} after {last!r} "
                          "(a page sent again: a repeating continuation token?): refused")
        self.last, self.count = raw, self.count + 1
        if self.count > MAX_PAGES * MAX_PAGE_KEYS:
            raise Refused(f"{self.what}: more than {MAX_PAGES * MAX_PAGE_KEYS} keys: refused")


__all__ = ["KeyOrder", "TokenChains", "check_page", "is_listing"]
