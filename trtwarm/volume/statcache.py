"""The stat cache: model facts and digests memoised by ``(device, inode, size, mtime_ns, ctime_ns)``.

A repeat key resolution stats the ONNX file and each external-data file and reads one small JSON file, so it is
O(1) in model size. A changed file changes at least one of those fields (a rewrite changes ctime_ns), so it is
never served from here. Like git's "racily clean" rule, a file modified within :data:`RACY_SECONDS` of being
hashed is not memoised: a second write in the same timestamp tick could otherwise go unseen.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from pathlib import Path

from trtwarm import strictjson
from trtwarm.errors import ModelError
from trtwarm.fs.info import identity
from trtwarm.fs import safe
from trtwarm.fs.ops import FULL_ERRNOS, READ_ONLY_ERRNOS, TooLarge, read_bounded
from trtwarm.model import ModelFacts, check_model_path, digests_hold, external_path, inspect_uncached

log = logging.getLogger("trtwarm.statcache")
#: a file changed less than this before it was read is not memoised (here, in stamps or in ls's manifest index)
RACY_SECONDS = 2.0
_LIMIT = 1 << 20


def record_path(cache_dir: Path, model: Path) -> Path:
    """The record memoising *model* in the stat cache *cache_dir* (by its real path)."""
    ident = hashlib.sha256(os.fsencode(os.path.realpath(model))).hexdigest()[:32]
    return cache_dir / f"{ident}.json"


def _stamps(model: Path, facts: ModelFacts) -> dict[str, list[int]] | None:
    """Current stamps of the model's files, or None if one is gone."""
    try:
        stamps = {"": identity(model.stat())}
        for f in facts.external:
            stamps[f.location] = identity((model.parent / f.location).stat())
    except OSError:
        return None
    return stamps


def _load(record: Path, model: Path) -> tuple[ModelFacts, str] | None:
    """The facts a record memoises and where they came from (``parse``, or ``volume``: copied from the volume's
    stat cache, see :func:`inspect_model`), if the model's files still have the record's stamps."""
    try:
        doc = strictjson.loads_object(read_bounded(record, _LIMIT), limit=_LIMIT)
        facts = ModelFacts.from_json(doc["facts"])
        for f in facts.external:
            external_path(model, f.location)  # a record cannot make init stat or hash files elsewhere
    except FileNotFoundError:
        return None
    except ModelError:
        log.warning("the stat cache's record of %s names files outside the model's directory (altered on the "
                    "volume?); ignoring it", model)
        return None
    except (OSError, TooLarge, ValueError, KeyError, TypeError) as exc:
        log.debug("ignoring unreadable stat-cache record %s: %s", record, exc)
        return None
    return (facts, doc.get("source", "parse")) if _stamps(model, facts) == doc.get("stamps") else None


def _store(record: Path, model: Path, facts: ModelFacts, stamps: dict[str, list[int]], source: str = "parse") -> None:
    newest = max(max(s[3], s[4]) for s in stamps.values()) / 1e9
    if time.time() - newest < RACY_SECONDS:
        log.debug("not memoising %s: modified %.1f s ago", model, time.time() - newest)
        return
    try:
        record.parent.mkdir(exist_ok=True)
        safe.write_json(record.parent.parent, record,  # never through a link at .statcache (the volume's)
                        {"model": str(model), "stamps": stamps, "facts": facts.to_json(), "source": source}, 0o644)
    except OSError as exc:
        if exc.errno not in READ_ONLY_ERRNOS | FULL_ERRNOS:
            raise
        log.debug("stat cache not written (%s): %s", record, exc.strerror)  # a read-only volume still works


def _from_volume(volume: Path, model: Path, cache_dir: Path | None) -> ModelFacts | None:
    """The untrusted *volume* stat cache's facts of *model*, if its files hash to their digests; memoised in
    *cache_dir* as ``source: volume`` (a node's record that holds only while the volume's says the same)."""
    found = _load(record_path(volume, model), model)
    if found is None:
        return None
    facts = found[0]
    before = _stamps(model, facts)
    if not digests_hold(model, facts):
        _ignored(model)
        return None
    if cache_dir is not None and before is not None and _stamps(model, facts) == before:  # unchanged while hashed
        _store(record_path(cache_dir, model), model, facts, before, source="volume")
    return facts


def inspect_model(model: Path, cache_dir: Path | None, *, rehash: bool = False,
                  fallback: Path | None = None) -> tuple[ModelFacts, bool]:
    """Return the model's facts and whether they came from a stat cache.

    :param cache_dir: the stat cache directory, or None to always hash
    :param rehash: the stat cache may have been written by someone this start does not trust (the volume's, under a
        trust policy): a record is used only when the model's files hash to its digests, which saves parsing the
        model (importing onnx), not hashing it
    :param fallback: such an untrusted stat cache, consulted (as with *rehash*) when *cache_dir* has no record; a
        record whose digests hold is then memoised in *cache_dir*, and believed there only while the fallback's record
        still holds the same facts: the digests are what this node hashed, the rest (inputs, external files) is the
        volume's word, as without a record of the node's own, and a record put right on the volume is seen
    :raises ModelError: see :func:`trtwarm.model.inspect_uncached`
    """
    check_model_path(model)
    record = record_path(cache_dir, model) if cache_dir is not None else None
    found = _load(record, model) if record is not None else None
    if found is not None:
        facts, source = found
        if source == "volume":  # the digests this node hashed; the other facts only while the volume still says so
            again = _load(record_path(fallback, model), model) if fallback is not None else None
            if again is not None and again[0] == facts:
                return facts, True
        elif not rehash or digests_hold(model, facts):
            return facts, True
        else:
            _ignored(model)
    if fallback is not None and (facts := _from_volume(fallback, model, cache_dir)) is not None:
        return facts, True
    before: dict[str, os.stat_result] = {}
    facts = inspect_uncached(model, before)
    stamps = _stamps(model, facts)
    # a file rewritten while it was being hashed must not be memoised under its new stamp
    if record is not None and stamps == {k: identity(v) for k, v in before.items()}:
        _store(record, model, facts, stamps)
    return facts, False


def _ignored(model: Path) -> None:
    log.warning("the stat cache's record of %s names digests its files do not have (altered on the volume?); "
                "ignoring it", model)


__all__ = ["RACY_SECONDS", "identity", "inspect_model", "record_path"]
