"""Retention for the remote repository: which refs go (by age, keep-per-model) and which blobs are unreferenced.

Refs are removed by their manifest's ``created`` age and by ``keep_per_model`` (the newest N refs of each model and
configuration, :func:`trtwarm.key.configuration`, as the local ``gc`` does). Blobs go only when **no** ref names
them and their own upload is older than the grace period: a push uploads its blobs before it writes its ref, so a
younger unreferenced blob may belong to a push in flight. Blobs of refs removed in this pass stay until a later
pass (a reader may have read the ref just now), and when any ref cannot be read, no blob is removed at all (its
blobs are unknown).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from trtwarm.key import configuration
from trtwarm.remote.repo import manifest_files

DEFAULT_BLOB_GRACE = 24 * 3600.0


@dataclass
class RemotePlan:
    """What a remote gc would do, and why."""

    refs: list[tuple[str, str, str]] = field(default_factory=list)  # (key, name, reason)
    blobs: list[tuple[str, int]] = field(default_factory=list)  # (sha256, bytes)
    kept_refs: int = 0
    referenced: int = 0
    young: int = 0
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        """The plan for ``--json``."""
        return {"refs": [{"key": k, "name": n, "reason": r} for k, n, r in self.refs],
                "blobs": [{"sha256": s, "bytes": b} for s, b in self.blobs], "kept_refs": self.kept_refs,
                "referenced_blobs": self.referenced, "young_unreferenced_blobs": self.young, "note": self.note}


def _configuration(manifest: dict[str, Any]) -> str:
    return configuration(str(manifest.get("name", "?")), manifest.get("key_document"))


def plan(refs: list[tuple[str, dict[str, Any] | None, str]], blobs: list[dict[str, Any]], now: float, *,
         max_age: float | None = None, keep_per_model: int | None = None,
         blob_grace: float = DEFAULT_BLOB_GRACE) -> RemotePlan:
    """Decide; changes nothing. *refs* from :meth:`Repository.read_refs`, *blobs* from :meth:`Repository.blobs`."""
    result = RemotePlan()
    readable = sorted(((k, r) for k, r, _ in refs if r is not None),
                      key=lambda kr: -float(kr[1]["manifest"].get("created") or 0.0))
    seen: dict[str, int] = {}
    referenced: set[str] = set()
    for key, ref in readable:
        manifest = ref["manifest"]
        group = _configuration(manifest)
        seen[group] = seen.get(group, 0) + 1
        reason = ""
        if max_age is not None and now - float(manifest.get("created") or 0.0) > max_age:
            reason = "age"
        elif keep_per_model is not None and seen[group] > keep_per_model:
            reason = "count"
        referenced.update(row["sha256"] for row in manifest_files(manifest))  # kept this pass either way
        if reason:
            result.refs.append((key, str(manifest.get("name", "?")), reason))
        else:
            result.kept_refs += 1
    result.referenced = len(referenced)
    if len(readable) < len(refs):
        result.note = f"{len(refs) - len(readable)} refs are unreadable: no blob is removed until they are fixed"
        return result
    for meta in blobs:
        sha = str(meta["path"]).rsplit("/", 1)[-1]
        if sha in referenced:
            continue
        if now - _epoch(meta.get("last_modified")) < blob_grace:
            result.young += 1
            continue
        result.blobs.append((sha, int(meta.get("size") or 0)))
    return result


def _epoch(value: Any) -> float:
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    return float(value or 0.0)


__all__ = ["DEFAULT_BLOB_GRACE", "RemotePlan", "plan"]
