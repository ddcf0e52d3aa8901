"""The stat cache: model facts and digests memoised by ``(device, inode, size, mtime_ns, ctime_ns)``.

A repeat key resolution stats the ONNX file and each external-data file and reads one small JSON file, so it is
O(1) in model size. A changed file changes at least one of those fields (a rewrite changes ctime_ns), so it is
never served from here. Like git's "racily clean" rule, a file modified within :data:`RACY_SECONDS` of being
hashed is not memoised: a second write in the same timestamp tick could otherwise go unseen.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path

from trtwarm.fsutil import FULL_ERRNOS, READ_ONLY_ERRNOS, TooLarge, atomic_write_json, read_bounded, sha256_file
from trtwarm.fileinfo import identity
from trtwarm.model import ModelFacts, check_model_path, inspect_uncached

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


def _load(record: Path, model: Path) -> ModelFacts | None:
    try:
        doc = json.loads(read_bounded(record, _LIMIT))
        facts = ModelFacts.from_json(doc["facts"])
    except FileNotFoundError:
        return None
    except (OSError, TooLarge, ValueError, KeyError, TypeError) as exc:
        log.debug("ignoring unreadable stat-cache record %s: %s", record, exc)
        return None
    return facts if _stamps(model, facts) == doc.get("stamps") else None


def _store(record: Path, model: Path, facts: ModelFacts, stamps: dict[str, list[int]]) -> None:
    newest = max(max(s[3], s[4]) for s in stamps.values()) / 1e9
    if time.time() - newest < RACY_SECONDS:
        log.debug("not memoising %s: modified %.1f s ago", model, time.time() - newest)
        return
    try:
        record.parent.mkdir(exist_ok=True)
        atomic_write_json(record, {"model": str(model), "stamps": stamps, "facts": facts.to_json()})
    except OSError as exc:
        if exc.errno not in READ_ONLY_ERRNOS | FULL_ERRNOS:
            raise
        log.debug("stat cache not written (%s): %s", record, exc.strerror)  # a read-only volume still works


def _digests_hold(model: Path, facts: ModelFacts) -> bool:
    """Whether the model's files still hash to the digests *facts* names (an untrusted record's check)."""
    files = [(model, facts.onnx.sha256), *((model.parent / f.location, f.sha256) for f in facts.external)]
    try:
        return all(sha256_file(path)[0] == digest for path, digest in files)
    except OSError:
        return False


def inspect_model(model: Path, cache_dir: Path | None, *, rehash: bool = False,
                  fallback: Path | None = None) -> tuple[ModelFacts, bool]:
    """Return the model's facts and whether they came from a stat cache.

    :param cache_dir: the stat cache directory, or None to always hash
    :param rehash: the stat cache may have been written by someone this start does not trust (the volume's, under a
        trust policy): a record is used only when the model's files hash to its digests, which saves parsing the
        model (importing onnx), not hashing it
    :param fallback: such an untrusted stat cache, consulted (as with *rehash*) when *cache_dir* has no record; a
        record whose digests hold is then memoised in *cache_dir*
    :raises ModelError: see :func:`trtwarm.model.inspect_uncached`
    """
    check_model_path(model)
    record = record_path(cache_dir, model) if cache_dir is not None else None
    if record is not None and (facts := _load(record, model)) is not None:
        if not rehash or _digests_hold(model, facts):
            return facts, True
        _ignored(model)
    if fallback is not None and (facts := _load(record_path(fallback, model), model)) is not None:
        if _digests_hold(model, facts):
            if record is not None and (stamps := _stamps(model, facts)) is not None:
                _store(record, model, facts, stamps)
            return facts, True
        _ignored(model)
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
