"""Retention for the remote repository: which refs go (by age, keep-per-model) and which blobs are unreferenced.

Refs are removed by their manifest's ``created`` age and by ``keep_per_model`` (the newest N refs of each model and
configuration, :func:`trtwarm.key.configuration`, as the local ``gc`` does). Blobs go only when **no** ref names
them and their own upload is older than the grace period: a push uploads its blobs before it writes its ref, so a
younger unreferenced blob may belong to a push in flight. Blobs of refs removed in this pass stay until a later
pass (a reader may have read the ref just now), and when any ref cannot be read, no blob is removed at all (its
blobs are unknown).

:func:`execute` re-checks each planned blob just before deleting it: S3 has no conditional delete, and a push may
have reused the blob since the plan (it skips a blob it finds). It re-lists the refs (again every
:data:`RELIST` seconds while it deletes) and reads those written since the plan, keeping the blobs they name; and
it HEADs each blob, keeping one that is younger than the grace now (a push uploaded it again:
:data:`trtwarm.remote.push.REFRESH_AGE`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from trtwarm.errors import RemoteError
from trtwarm.key import configuration
from trtwarm.remote.repo import Repository, blob_path, epoch, manifest_files

log = logging.getLogger("trtwarm.remote")
DEFAULT_BLOB_GRACE = 24 * 3600.0
#: while deleting blobs, the refs are listed again when the last listing is older than this (seconds)
RELIST = 10.0


@dataclass
class RemotePlan:
    """What a remote gc would do, and why."""

    refs: list[tuple[str, str, str]] = field(default_factory=list)  # (key, name, reason)
    blobs: list[tuple[str, int]] = field(default_factory=list)  # (sha256, bytes)
    kept_refs: int = 0
    referenced: int = 0
    young: int = 0
    note: str = ""
    spared: list[tuple[str, int, str]] = field(default_factory=list)  # (sha256, bytes, why): kept by execute
    #: (sha256, keys of the refs naming it): removed, yet named by a ref written meanwhile
    raced: list[tuple[str, list[str]]] = field(default_factory=list)
    refs_done: int = 0  # refs execute removed so far

    def as_json(self) -> dict[str, Any]:
        """The plan for ``--json``."""
        return {"refs": [{"key": k, "name": n, "reason": r} for k, n, r in self.refs],
                "blobs": [{"sha256": s, "bytes": b} for s, b in self.blobs], "kept_refs": self.kept_refs,
                "referenced_blobs": self.referenced, "young_unreferenced_blobs": self.young, "note": self.note,
                "spared_blobs": [{"sha256": s, "bytes": b, "reason": r} for s, b, r in self.spared],
                "raced_blobs": [{"sha256": s, "refs": keys} for s, keys in self.raced]}


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
        if now - epoch(meta.get("last_modified")) < blob_grace:
            result.young += 1
            continue
        result.blobs.append((sha, int(meta.get("size") or 0)))
    return result


def ref_versions(repo: Repository) -> dict[str, tuple[str, str]]:
    """``{key: (ETag, last modified)}`` of every ref now: what :func:`execute` compares its re-listing with (take it
    before :meth:`Repository.read_refs` feeds the plan, so a ref written in between is read again, not missed)."""
    return {key: (str(meta.get("e_tag")), str(meta.get("last_modified"))) for key, meta in repo.keys()}


def execute(repo: Repository, todo: RemotePlan, versions: dict[str, tuple[str, str]], blob_grace: float) -> None:
    """Delete the refs and blobs *todo* plans; *versions*: :func:`ref_versions` taken before the plan's refs were
    read. A blob named by a ref written since (or changed, or re-created after this pass removed it) is spared; so
    is one younger than *blob_grace* now, or gone already. ``todo.blobs`` ends as the blobs removed, ``todo.spared``
    says which were kept and why. :raises RemoteError:"""
    removed: list[tuple[str, int]] = []
    try:
        _delete(repo, todo, versions, blob_grace, removed)
    except RemoteError:  # what is gone already is said before the failure is (a rerun plans the rest again)
        log.warning("remote gc stopped after removing %d of %d refs and %d blobs (%.1f MiB) of this pass",
                    todo.refs_done, len(todo.refs), len(removed),
                    sum(size for _sha, size in removed) / 2**20)
        raise


def _delete(repo: Repository, todo: RemotePlan, versions: dict[str, tuple[str, str]], blob_grace: float,
            removed: list[tuple[str, int]]) -> None:
    """:func:`execute`'s deletes, each appended to *removed* (blobs) or counted in ``todo.refs_done`` (refs)."""
    for key, _name, _reason in todo.refs:
        repo.delete_ref(key)
        todo.refs_done += 1
    versions = {k: v for k, v in versions.items() if k not in {key for key, _n, _r in todo.refs}}
    named: dict[str, list[str]] | None = {}
    listed = float("-inf")
    for sha, size in todo.blobs:
        if time.monotonic() - listed > RELIST:
            named, listed = _named_since(repo, versions), time.monotonic()
        why = _spare(repo, sha, named, blob_grace)
        if why:
            todo.spared.append((sha, size, why))
            continue
        repo.client.delete(blob_path(sha))
        removed.append((sha, size))
    todo.blobs = removed
    if removed:
        _check_after(repo, todo, versions)


def _check_after(repo: Repository, todo: RemotePlan, versions: dict[str, tuple[str, str]]) -> None:
    """List the refs once more: a blob removed here that a ref written meanwhile names is the window no check
    closes (S3 has no conditional delete). Say it: the push that wrote the ref uploads the blob again if its own
    check comes later, else the next builder's push does (a pull refuses the ref until then)."""
    named = _named_since(repo, versions)
    todo.raced = [(sha, [] if named is None else named[sha]) for sha, _size in todo.blobs
                  if named is None or sha in named]
    for sha, keys in todo.raced:
        log.warning("blob %s was removed as a push wrote a ref that names it (%s): that push uploads it again if "
                    "it checks after this; otherwise a pull of that ref is refused as incomplete, and only a build "
                    "with the same bytes refills it: remove the ref (`trtwarm remote rm KEY`) so that the next "
                    "push publishes a whole one", sha[:16], ", ".join(keys) or "a new ref is unreadable")


def _spare(repo: Repository, sha: str, named: dict[str, list[str]] | None, blob_grace: float) -> str:
    """Why the planned blob *sha* must stay (HEADed just before its delete), or "" when it may go."""
    if named is None:
        return "a ref written since the plan is unreadable: its blobs are unknown"
    if sha in named:
        return "a ref written since the plan names it"
    found = repo.stat_blob(sha)
    if found is None:
        return "gone already"
    if found[1] is not None and time.time() - found[1] < blob_grace:
        return "uploaded again since the plan (a push reuses it)"
    return ""


def _named_since(repo: Repository, versions: dict[str, tuple[str, str]]) -> dict[str, list[str]] | None:
    """The blobs named by every ref that *versions* does not list as it is now (new, re-created or rewritten
    since), each with the keys of those refs; None when one of them cannot be read."""
    named: dict[str, list[str]] = {}
    for key, version in ref_versions(repo).items():
        if versions.get(key) == version:
            continue
        try:
            ref = repo.get_ref(key)
        except RemoteError as exc:
            if type(exc) is not RemoteError:  # credentials, an unreachable store: the pass fails
                raise
            return None
        if ref is not None:  # None: removed again since the listing
            for row in manifest_files(ref["manifest"]):
                named.setdefault(row["sha256"], []).append(key)
    return named


__all__ = ["DEFAULT_BLOB_GRACE", "RELIST", "RemotePlan", "execute", "plan", "ref_versions"]
